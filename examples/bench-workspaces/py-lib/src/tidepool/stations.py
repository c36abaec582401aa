def station_url(code):
    return f"https://tides.example.org/stations/{code}"


def is_coastal(station):
    return station.depth < 50
