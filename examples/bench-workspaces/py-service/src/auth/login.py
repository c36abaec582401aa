import logging

logger = logging.getLogger(__name__)


def login(session, user):
    session["user"] = user.id
