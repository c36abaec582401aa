import logging

logger = logging.getLogger(__name__)


def sync_all(accounts):
    for account in accounts:
        account.sync()
