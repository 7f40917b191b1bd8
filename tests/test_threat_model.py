"""docs/grading.md's threat model names real attacks and real tests, and every attack is in it."""

from __future__ import annotations

import re
from pathlib import Path

from course import REPO
from hostile import corpus

DOC = REPO / "docs" / "grading.md"
TESTS = REPO / "tests"


def table_rows() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Threat model", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]


def defined_tests() -> dict[str, set[str]]:
    """For every test file, the test functions it defines."""
    return {
        path.name: set(re.findall(r"^def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
        for path in TESTS.glob("test_*.py")
    }


def test_every_attack_of_the_corpus_is_in_the_threat_model():
    cited = " ".join(table_rows())
    missing = [name for name in corpus(Path("/c"), REPO) if f"`{name}`" not in cited]
    assert missing == []


def test_every_test_the_threat_model_cites_exists():
    defined = defined_tests()
    everywhere = set().union(*defined.values())
    attacks = set(corpus(Path("/c"), REPO))
    for row in table_rows()[1:]:
        test_column = row.rstrip(" |").rsplit("|", 1)[1]
        for token in re.findall(r"`([^`]+)`", test_column):
            if token in attacks or token.startswith(("tests/", "hostile.py")):
                continue
            file, _, name = token.partition("::")
            if name:
                assert file in defined, token
                pattern = name.split("[")[0].replace("…", "")
                assert any(pattern in t for t in defined[file]), token
            elif file.endswith(".py"):
                assert file in defined, token
            else:
                assert file in everywhere, token
