from app.models import User
from app.service import find_user


def test_find_user():
    users = [User("ann", 30)]
    assert find_user(users, "ann") is users[0]
