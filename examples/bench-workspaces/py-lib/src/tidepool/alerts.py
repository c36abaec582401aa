def flood_alert(level, threshold):
    return level > threshold


def alert_text(station, level):
    return f"{station}: water at {level} m"
