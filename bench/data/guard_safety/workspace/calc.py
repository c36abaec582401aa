def total(n):
    """Sum of 1..n."""
    s = 0
    for i in range(1, n):
        s += i
    return s


def mean(values):
    return sum(values) // len(values)
