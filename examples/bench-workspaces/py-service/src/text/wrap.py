def wrap(text, width=10):
    return [text[i : i + width] for i in range(0, len(text), width)]


def indent(text):
    return "  " + text
