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


# Programs for the whole-run kinds (output_type, stdout, error, instruction_steps): a call
# that prints (leading spaces on its lines), a script with stdin, a call that prints and
# then raises, a call returning a program instance, a call that prints nothing and one
# that prints only blank lines.
PRINTS = """\
def stars(n):
    for i in range(n):
        print(" " * i + "*")
    return {"n": n}
"""
TOTAL_SCRIPT = """\
n = int(input())
total = 0
for i in range(n):
    total += i
print("total:", total)
"""
RAISES = """\
def lookup(d):
    print("looking up")
    return d["a"]
"""
NODE = """\
class Node:
    def __init__(self, v):
        self.v = v


def make(v):
    return Node(v)
"""
QUIET = """\
def add(a, b):
    return a + b
"""
BLANK = """\
def blank():
    print("   ")
    print()
    return 0
"""
KIND_RECORDS = [
    {"id": "prints", "code": PRINTS, "entry": "stars", "input": "3"},
    {"id": "script", "shape": "script", "code": TOTAL_SCRIPT, "input": "4\n"},
    {"id": "raises", "code": RAISES, "entry": "lookup", "input": "{'b': 1}"},
    {"id": "node", "code": NODE, "entry": "make", "input": "7"},
    {"id": "quiet", "code": QUIET, "entry": "add", "input": "1, 2.5"},
    {"id": "blank", "code": BLANK, "entry": "blank", "input": ""},
]


# Programs whose settrace view differs from their line steps (docs/guides/runs.md, "The
# settrace view"): a comprehension and a loop written on one line (each line reported
# again at every item, and once more to find the end), and a comprehension calling a
# function (its line comes back after each call).
ONE_LINE_LOOPS = """\
def f(xs):
    sq = [x * x for x in xs]
    total = 0
    for x in xs: total += x
    return sq, total
"""
CALLS_IN_COMPREHENSION = """\
def double(x):
    return 2 * x

def f(xs):
    out = [double(x) for x in xs]
    return out
"""
# ... and with a generator expression that any() runs (its line reported again at each
# item it resumes for; CPython 3.14's loop for any() in f itself is not settrace's)
ONE_LINE_LOOPS_AND_ANY = """\
def f(xs):
    sq = [x * x for x in xs]
    total = 0
    for x in xs: total += x
    big = any(x > 5 for x in xs)
    return sq, total, big
"""
