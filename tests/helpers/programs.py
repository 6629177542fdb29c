"""Programs several test modules trace."""

LOOP = """\
def f(xs):
    total = 0
    for x in xs:
        if x % 2:
            total += x
        else:
            total -= 1
    return total
"""
