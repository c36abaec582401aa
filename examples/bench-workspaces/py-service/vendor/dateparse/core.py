def parse(text):
    day, month, year = text.split("/")
    return int(year), int(month), int(day)
