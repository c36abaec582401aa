MAX_ATTEMPTS = 1


def should_retry(attempt):
    return attempt < MAX_ATTEMPTS
