"""A small generic corpus shared by the store and CLI tests: 5 programs, 6 jobs."""

ADD = "def f(a, b):\n    c = a + b\n    return c\n"
SQUARE = "def f(x):\n    return x * x\n"
BOOM = "def f(x):\n    return 1 // x\n"
NEG = "def f(x):\n    y = -x\n    print(y)\n    return y\n"
LOOP = ("def g(n):\n    return n + 1\n\ndef f(xs):\n    out = []\n    for x in xs:\n"
        "        out.append(g(x))\n    return out\n")

RECORDS = [
    {"id": "add", "code": ADD, "input": "1, 2", "output": "3"},
    {"id": "sq", "code": SQUARE, "inputs": ["3", "4"], "outputs": ["9", None]},
    {"id": "boom", "code": BOOM, "input": "0", "output": "1"},
    {"id": "neg", "code": NEG, "input": "2", "output": "2"},
    {"id": "loop", "code": LOOP, "input": "[1, 2]", "output": "[2, 3]"},
]
