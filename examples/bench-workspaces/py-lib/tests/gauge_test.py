from tidepool.gauge import mean_level


def test_mean_of_one(reading):
    assert mean_level([reading]) == reading.level
