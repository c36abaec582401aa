import logging

from app.models import User

log = logging.getLogger(__name__)


def find_user(users, name):
    for user in users:
        if user.name == name:
            return user
    return None


def greet(user):
    log.info("greeting %s", user.name)
    return f"Hello, {user.name}"


def parse_age(text):
    return int(text)
