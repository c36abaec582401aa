def left_pad(s, n, c=" "):
    return c * (n - len(s)) + s
