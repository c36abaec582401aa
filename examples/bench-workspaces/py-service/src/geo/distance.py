def miles_to_km(miles):
    return miles * 1.6
