"""Small texts shipped with the course, for the character-level model of lesson 06.

:func:`load_text` reads one of :data:`TEXTS` from inside the package (no network, no download);
``README.md`` beside this file says where each text comes from and under which licence.
"""

from __future__ import annotations

from importlib import resources

TEXTS = {
    "course": "course.txt",
}
"""The texts there are: a name and the file inside :mod:`attnlib.data`."""


def load_text(name: str = "course") -> str:
    """The text ``name`` (default ``"course"``, the prose of lessons 01–05 and the course docs).

    Returns:
      the whole text as one ``str`` (UTF-8, ``\\n`` line ends).
    """
    if name not in TEXTS:
        raise ValueError(f"unknown text {name!r}; texts are {', '.join(TEXTS)}")
    return resources.files(__name__).joinpath(TEXTS[name]).read_text(encoding="utf-8")


__all__ = ["TEXTS", "load_text"]
