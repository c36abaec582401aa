import logging

logger = logging.getLogger(__name__)


def create_user(db, name):
    return db.insert("users", name=name)
