from calc import mean, total


def test_total():
    assert total(3) == 6


def test_mean():
    assert mean([1, 2]) == 1.5
