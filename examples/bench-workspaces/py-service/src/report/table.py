def header_row(columns):
    return "|".join(columns)
