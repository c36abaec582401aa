from vendor.jwtmini.decode import claims


def user_claims(token):
    return claims(token)
