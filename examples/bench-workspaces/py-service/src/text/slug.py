def slugify(title):
    return title.replace(" ", "-")


def is_slug(text):
    return " " not in text
