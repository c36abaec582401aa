def claims(token):
    header, body, signature = token.split(".")
    return body
