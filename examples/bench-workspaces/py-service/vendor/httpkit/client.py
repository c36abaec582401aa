def get(url, timeout=None):
    return _request("GET", url, timeout)
