def next_high(times):
    return min(t for t in times if t.is_high)


def tidal_range(high, low):
    return high - low
