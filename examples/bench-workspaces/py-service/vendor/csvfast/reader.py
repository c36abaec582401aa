def rows(text):
    return [line.split(",") for line in text.splitlines()]
