"""What the self-check runs of a cell that is neither a solution nor a test: its set-up only."""

from types import SimpleNamespace

from autograder.notebook import changed_names, setup_only


def test_set_up_keeps_imports_definitions_and_literal_names_only_and_forgets_the_rest():
    source = """%matplotlib inline
import numpy as np
from math import sqrt
words = ["it", "was", "tired"]
T, d = 4, 8
K_toy[words.index("it")] = [1.0, 0.0]
obj.size = 3
train_for_an_hour()
def helper(x):
    return x + 1
class Box:
    pass
"""
    kept = setup_only(source)
    assert kept.splitlines() == [
        "import numpy as np",
        "from math import sqrt",
        "words = ['it', 'was', 'tired']",
        "T, d = (4, 8)",
        "try:",  # K_toy[...] = ... left out: K_toy is forgotten (as is obj, below)
        "    if type(K_toy).__name__ != 'module':",
        "        del K_toy",
        "except NameError:",
        "    pass",
        "try:",
        "    if type(obj).__name__ != 'module':",
        "        del obj",
        "except NameError:",
        "    pass",
        "",
        "def helper(x):",
        "    return x + 1",
        "",
        "class Box:",
        "    pass",
    ]
    assert setup_only("this is not python (") == ""


def test_the_names_a_cell_changes_are_its_top_level_ones():
    source = """%matplotlib inline
import numpy as np, os.path
from math import sqrt as root
S = np.array([[1.0, 2.0]])
for i, row in enumerate(S):
    total = row.sum()
with open(os.devnull) as sink:
    pass
squares = [k * k for k in range(3)]
f = lambda y: y + 1
def helper(x):
    inner = x
    return inner
class Box:
    size = 3
K_toy[0] = 1.0
obj.size = 3
"""
    # not k, y, inner, size: local to a comprehension, a lambda, a function, a class
    assert changed_names(source) == {"np", "os", "root", "S", "i", "row", "total", "sink",
                                     "squares", "f", "helper", "Box", "K_toy", "obj"}  # fmt: skip


def test_what_a_statement_left_out_would_change_is_forgotten_not_left_stale():
    source = """import math
T = 4
T = len(words)
scores = {"unscaled": {}}
for d_k in (2, 4):
    scores["unscaled"][d_k] = d_k * d_k
history = [4.1]
history.append(loss)
K_toy = [[1.0, 0.0]]
math.tau = 6.0
config.size = 3
print(math.tau, K_toy)
size = 3
"""
    ns = {"T": 99, "d_k": 7, "size": 0, "config": SimpleNamespace(size=1)}  # earlier cells
    exec(setup_only(source), ns)  # the loop and the append do not run
    # grading would see T = 10, scores filled, a longer history: the check sees no stale value
    for name in ("T", "scores", "d_k", "history", "config"):
        assert name not in ns, name
    # what the left-out statements do not touch is kept; math's settings are not math's value
    assert ns["K_toy"] == [[1.0, 0.0]] and ns["size"] == 3 and ns["math"].tau != 6.0
    # a literal bound again after the change is kept
    ns = {}
    exec(setup_only("xs = [1]\nxs.sort()\nxs = [2, 3]"), ns)
    assert ns["xs"] == [2, 3]


def test_the_names_a_cell_changes_are_those_it_binds_and_those_it_changes_in_place():
    source = """scores = {}
for d_k in widths:
    scores[d_k] = score(d_k)
history.append(1.0)
model.head.weight[0] = 0.0
del cache[0]
plt.rcParams["figure.dpi"] = 80
plt.gca().set_title("t")
y = x.sum()
def f(buf):
    buf.append(1)
"""
    expected = {"scores", "d_k", "history", "model", "cache", "plt", "y", "f"}  # not x: read
    assert changed_names(source) == expected
    assert changed_names("this is not python (") == set()
