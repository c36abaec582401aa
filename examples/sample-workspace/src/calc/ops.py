def add(a, b):
    return a + b


def mean(values):
    # BUG: integer division truncates the mean
    return sum(values) // len(values)
