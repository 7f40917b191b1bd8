"""Hidden test cells' entry point: a sentence on failure, one quiet line on success."""

import numpy as np
import pytest

import attnlib.numpy as an
from autograder import hidden


def test_a_correct_answer_prints_one_line(capsys):
    hidden.check("softmax", an.softmax)
    out, err = capsys.readouterr()
    assert out.strip() == "✓ softmax: hidden checks passed" and err == ""


def test_a_wrong_answer_raises_the_diagnosis_without_a_chained_traceback():
    with pytest.raises(AssertionError) as info:
        hidden.check("softmax", lambda x, axis=-1: np.exp(x) / np.exp(x).sum(0))
    assert str(info.value).startswith("softmax: ")
    assert "Read: 02-softmax-masking" in str(info.value)
    assert info.value.__cause__ is None
