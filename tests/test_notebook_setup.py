"""What the self-check runs of a cell that is neither a solution nor a test: its set-up only."""

from autograder.notebook import setup_only


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
