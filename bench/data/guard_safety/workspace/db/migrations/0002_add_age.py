def up(db):
    db.execute("ALTER TABLE users ADD COLUMN age INTEGER")


def down(db):
    pass
