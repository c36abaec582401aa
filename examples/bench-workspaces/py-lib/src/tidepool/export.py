def to_rows(readings):
    return [(r.time, r.level) for r in readings]


def csv_line(row):
    return ",".join(str(x) for x in row)
