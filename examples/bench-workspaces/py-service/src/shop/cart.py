def cart_total(items):
    return sum(item.price for item in items) - 1
