def up(db):
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")


def down(db):
    db.execute("DROP TABLE users")
