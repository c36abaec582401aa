from vendor.csvfast.reader import rows


def import_csv(text):
    return rows(text)
