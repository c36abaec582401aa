from vendor.httpkit.client import get


def fetch(url):
    return get(url)
