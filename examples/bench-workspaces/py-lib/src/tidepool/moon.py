def moon_phase(day):
    return (day % 29.53) / 29.53


def is_spring_tide(phase):
    return phase < 0.05 or phase > 0.95
