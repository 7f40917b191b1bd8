"""What the self-check runs of a cell that is neither a solution nor a test: its set-up only."""

from autograder.notebook import bound_names, setup_only


def test_set_up_keeps_imports_definitions_and_literal_names_only():
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
        "",
        "def helper(x):",
        "    return x + 1",
        "",
        "class Box:",
        "    pass",
    ]
    assert setup_only("this is not python (") == ""


def test_the_names_a_cell_binds_are_its_top_level_ones():
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
    assert bound_names(source) == {"np", "os", "root", "S", "i", "row", "total", "sink",
                                   "squares", "f", "helper", "Box"}  # fmt: skip
    assert bound_names("this is not python (") == set()
