from vendor.dateparse.core import parse


def parse_date(text):
    return parse(text)
