from calc.ops import add, mean

__all__ = ["add", "mean"]
