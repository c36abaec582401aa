import logging

logger = logging.getLogger(__name__)


def issue_invoice(ledger, amount):
    ledger.append(amount)
