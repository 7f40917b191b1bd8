"""Reading a learner's answer: numbers, shapes, option letters, yes or no.

Mastery questions accept every reasonable way of writing a right answer — ``(5, 7)``,
``[5, 7]``, ``np.array([5, 7])``, ``torch.Size([5, 7])``, ``"5x7"`` or ``"5 by 7"`` for a shape;
``64`` or ``"64"`` for a number; ``[0, 1, 2]`` or ``"0, 1, 2"`` for a few numbers; ``"b"``,
``"B"`` or ``"(b)"`` for an option — and these functions turn each into one plain value, or
``None`` when the answer is not of that kind (so a checker never raises on a strange answer).
"""

from __future__ import annotations

import math
import numbers
import re

import numpy as np

NUMBER = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"


def as_int(value: object) -> int | None:
    """An integer from an int, a NumPy integer or an integral float; not from a bool."""
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if (
        isinstance(value, numbers.Real)
        and math.isfinite(float(value))
        and float(value).is_integer()
    ):
        return int(value)
    return None


def as_number(value: object) -> float | None:
    """A finite float from a real number, a NumPy scalar, a one-element array or tensor, or a
    string holding just a number (``"1,048,576"``, ``"0.5"``): a number typed as text counts."""
    if isinstance(value, str):
        cleaned = re.sub(r"[\s,_]", "", value)
        return float(cleaned) if re.fullmatch(NUMBER, cleaned) else None
    if value is None or isinstance(value, bool | np.bool_ | bytes):
        return None
    if isinstance(value, numbers.Real):
        number = float(value)
    elif hasattr(value, "shape") and hasattr(value, "dtype"):
        array = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value)
        if array.size != 1 or array.dtype.kind not in "iuf":
            return None
        number = float(array.reshape(()))
    else:
        return None
    return number if math.isfinite(number) else None


def items(value: object) -> list | None:
    """The elements of a list, tuple, set or 1-D array, or of numbers typed as text (``"0, 1,
    2"``, ``"[0 1 2]"`` as NumPy prints it: whole numbers as ints); None for anything else."""
    if isinstance(value, str):
        return _typed_numbers(value)
    if isinstance(value, np.ndarray):
        return value.tolist() if value.ndim == 1 else None
    if isinstance(value, list | tuple | set | frozenset):
        return list(value)
    return None


def _typed_numbers(text: str) -> list | None:
    """``"0, 1, 2"``, ``"0 1 2"``, ``"[0. 0.5]"`` or ``"{0, 1}"`` as its numbers; None unless it
    is only numbers between separators (``"0-2"`` is a range, not two numbers)."""
    inner = text.strip().removeprefix("[").removesuffix("]").strip()
    inner = inner.removeprefix("(").removesuffix(")").removeprefix("{").removesuffix("}").strip()
    parts = re.split(r"[\s,;]+", inner) if inner else []
    if not parts or not all(re.fullmatch(NUMBER, part) for part in parts):
        return None
    return [int(part) if re.fullmatch(r"[+-]?\d+", part) else float(part) for part in parts]


def as_shape(value: object) -> tuple[int, ...] | None:
    """A shape from a tuple, list, 1-D array or ``torch.Size`` of whole numbers, or ``"(5, 7)"``."""
    if isinstance(value, str):
        value = re.sub(r"(?<=\d)\s+by\s+(?=\d)", "x", value)  # "5 by 7"
        if not re.fullmatch(r"[\s\d,x×*()\[\]]+", value):
            return None
        return tuple(int(n) for n in re.findall(r"\d+", value))
    if isinstance(value, set | frozenset):
        return None  # a set has no order, so it cannot be a shape
    elements = items(value)
    if elements is None:
        return None
    dims = tuple(as_int(n) for n in elements)  # 5.0 reads as 5; True and 5.5 do not
    return None if any(d is None for d in dims) else dims


def as_letter(value: object, letters: str) -> str | None:
    """The option a string names (``"b"``, ``"B"``, ``" (b) "``, ``"b)"``, or ``["b"]``)."""
    if isinstance(value, list | tuple | set | frozenset) and len(value) == 1:
        (value,) = value
    if not isinstance(value, str):
        return None
    text = value.strip().lower().strip("().:] ").strip()
    return text if len(text) == 1 and text in letters else None


def as_bool(value: object) -> bool | None:
    """True or False from a bool or from "yes"/"no"/"true"/"false"; None otherwise."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().strip(".!").lower()
        if word in ("yes", "y", "true"):
            return True
        if word in ("no", "n", "false"):
            return False
    return None
