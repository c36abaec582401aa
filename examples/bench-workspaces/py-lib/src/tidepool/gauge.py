def latest_level(readings):
    return readings[-1].level


def mean_level(readings):
    return sum(r.level for r in readings) / len(readings)
