"""Every lesson follows the course's shape, so graders and the checks can rely on it.

For each lesson in solutions/: its first code cell begins the lesson (mastery so far); each
of its contract exercises has a solution cell defining the function and a graded test cell
whose hidden part calls the shared checks, under a heading "Exercise 2.3 · 4 points: `name(...)`"
whose points are the test cell's; every section the checks' feedback points to exists
as a heading; every mastery question has an answer cell and a hidden check; the lesson ends by
grading the mastery check.
"""

import re

import nbformat
import numpy as np
import pytest
from course import LESSON_IDS, REPO

from attnlib import checks, mastery, quiz


def cells(lesson):
    out = []
    for path in sorted((REPO / "solutions" / lesson).glob("*.ipynb")):
        out.extend(nbformat.read(path, as_version=4).cells)
    return out


def nbgrader(cell):
    return cell.metadata.get("nbgrader", {})


def lesson_param(lesson):
    number = lesson[:2]
    return pytest.param(lesson, marks=getattr(pytest.mark, f"lesson{number}"), id=lesson)


PARAMS = [lesson_param(lesson) for lesson in LESSON_IDS]


@pytest.mark.parametrize("lesson", PARAMS)
def test_lesson_has_checks(lesson):
    assert lesson in checks.LESSONS


def test_the_checks_and_the_mastery_records_know_the_lessons_in_course_order():
    """Three places name the lessons: the folders, the checks and the mastery records (which
    stay light enough for a lesson's first cell); a new lesson must be added to each."""
    assert list(checks.LESSONS) == LESSON_IDS == list(mastery.LESSONS)


@pytest.mark.parametrize("lesson", PARAMS)
def test_first_code_cell_begins_the_lesson(lesson):
    """It reports the previous lesson's mastery and lets the figures run before the exercises
    do (attnlib.lesson.begin)."""
    first = next(c for c in cells(lesson) if c.cell_type == "code")
    assert f'lesson.begin("{lesson}")' in first.source


@pytest.mark.parametrize("lesson", PARAMS)
def test_every_contract_exercise_has_a_solution_and_a_hidden_check(lesson):
    all_cells = cells(lesson)
    for exercise in checks.LESSONS[lesson]:
        name = exercise.name
        solution = [
            c
            for c in all_cells
            if nbgrader(c).get("solution") and re.search(rf"^(def|class) {name}\(", c.source, re.M)
        ]
        assert solution, f"{lesson}: no solution cell defines {name}"
        assert "### BEGIN SOLUTION" in solution[0].source
        graded = [
            c
            for c in all_cells
            if nbgrader(c).get("grade") and not nbgrader(c).get("solution")
            and re.search(rf"check\(\s*[\"']{name}[\"']\s*,\s*{name}\s*\)", c.source)
        ]  # fmt: skip
        assert graded, f"{lesson}: no graded cell calls check({name!r}, {name})"
        hidden = graded[0].source.split("### BEGIN HIDDEN TESTS", 1)
        assert len(hidden) == 2 and f'"{name}"' in hidden[1], f"{name}: check not hidden"
        assert nbgrader(graded[0]).get("locked") and nbgrader(graded[0]).get("points", 0) > 0


# "### Exercise 5.3 · 4 points: `chunked_attention(Q, K, V, block_size)`": lesson number, the
# exercise's number within the lesson, and the points of its graded test cell.
EXERCISE_HEADING = re.compile(
    r"Exercise (?P<lesson>\d+)\.(?P<number>\d+) · (?P<points>\d+) (?P<unit>points?): "
    r"`(?P<name>\w+)\(.*\)`"
)


def exercise_test_name(cell):
    """The exercise a graded test cell checks (its hidden ``check("name", ...)``), or None."""
    if not nbgrader(cell).get("grade") or nbgrader(cell).get("solution"):
        return None
    hidden = cell.source.split("### BEGIN HIDDEN TESTS", 1)[-1]
    found = re.search(r"check\(\s*[\"'](\w+)[\"']", hidden)
    return found.group(1) if found else None


@pytest.mark.parametrize("lesson", PARAMS)
def test_exercise_headings_give_lesson_number_and_points(lesson):
    pending, seen = None, []
    for cell in cells(lesson):
        if cell.cell_type == "markdown":
            for heading in re.findall(r"^#+\s+(Exercise\b.*)$", cell.source, re.M):
                found = EXERCISE_HEADING.fullmatch(heading.strip())
                assert found, f"{lesson}: {heading!r} is not 'Exercise 2.3 · 4 points: `name(...)`'"
                assert pending is None, f"{lesson}: {pending['heading']!r} has no graded test cell"
                pending = {"heading": heading, **found.groupdict()}
            continue
        name = exercise_test_name(cell)
        if name is None:
            continue
        assert pending is not None, f"{lesson}: the test of {name} has no exercise heading"
        heading, points = pending["heading"], nbgrader(cell)["points"]
        assert int(pending["lesson"]) == int(lesson[:2]), f"{heading!r}: wrong lesson number"
        number = len(seen) + 1
        assert int(pending["number"]) == number, f"{heading!r}: should be exercise number {number}"
        assert pending["name"] == name, f"{heading!r} heads the test of {name}"
        assert int(pending["points"]) == points, f"{heading!r}: the test cell gives {points} points"
        assert pending["unit"] == ("point" if points == 1 else "points"), heading
        seen.append(name)
        pending = None
    assert pending is None, f"{lesson}: {pending['heading']!r} has no graded test cell"
    assert sorted(seen) == sorted(e.name for e in checks.LESSONS[lesson]), seen


def headings(lesson):
    found = set()
    for c in cells(lesson):
        if c.cell_type == "markdown":
            found.update(
                m.group(1).strip().strip("`").strip()
                for m in re.finditer(r"^#+\s+(.+)$", c.source, re.M)
            )
    return found


def reading_pointers(lesson):
    """Every place the checks' feedback sends a learner to, for exercises of ``lesson``."""
    for exercise in checks.LESSONS[lesson]:
        yield exercise.name, exercise.read
        for mistake in exercise.mistakes:
            if mistake.read:
                yield exercise.name, mistake.read


@pytest.mark.parametrize("lesson", PARAMS)
def test_feedback_points_to_sections_that_exist(lesson):
    for name, read in reading_pointers(lesson):
        target, section = re.fullmatch(r"(\S+), '(.+)'", read).groups()
        assert target in LESSON_IDS, f"{name}'s feedback points to a missing lesson: {read!r}"
        have = headings(target)
        assert any(section in h for h in have), (
            f"{name}'s feedback sends learners to {read!r}, but {target} has no such heading; "
            f"headings: {sorted(have)}"
        )


@pytest.mark.parametrize("lesson", PARAMS)
def test_mastery_check_is_graded_and_recorded(lesson):
    all_cells = cells(lesson)
    questions = quiz.questions(lesson)
    assert len(questions) >= 3, f"{lesson} needs a mastery check of at least three questions"
    for q in questions:
        answer = [c for c in all_cells if nbgrader(c).get("solution") and f"{q.key} =" in c.source]
        assert answer, f"{lesson}: no answer cell assigns {q.key}"
        test = [
            c
            for c in all_cells
            if nbgrader(c).get("grade")
            and re.search(rf"answer\(\s*[\"']{lesson}[\"']\s*,\s*[\"']{q.key}[\"']", c.source)
        ]
        assert test, f"{lesson}: no graded cell checks {q.key}"
        assert "### BEGIN HIDDEN TESTS" in test[0].source
    last_code = [c for c in all_cells if c.cell_type == "code"][-1]
    assert f'grade("{lesson}"' in last_code.source


# Answers no question accepts; a checker must say False to each, never raise. (True is a right
# answer to a yes/no question, so the lessons' own tests reject it where it is wrong.)
GARBAGE = [
    None, "", "banana", b"b", 3.5, float("nan"), float("inf"), object(), Ellipsis,
    "x", "GiB", {}, [], (), {"a": 1}, np.array([]), np.array(np.nan), np.array([1.0, 2.0]),
    lambda: 1,
]  # fmt: skip


@pytest.mark.parametrize("lesson", [lesson_param(lesson) for lesson in checks.LESSONS])
def test_quiz_questions_are_well_formed(lesson):
    questions = quiz.questions(lesson)
    assert 3 <= len(questions) <= 6, f"{lesson} needs three to six mastery questions"
    assert [q.key for q in questions] == [f"q{i}" for i in range(1, len(questions) + 1)]
    assert all(q.prompt and q.points > 0 for q in questions)


@pytest.mark.parametrize("lesson", PARAMS)
def test_quiz_topics_name_sections_of_their_lesson(lesson):
    have = headings(lesson)
    for q in quiz.questions(lesson):
        found = re.fullmatch(rf"{re.escape(lesson)}, '(.+)'", q.topic)
        assert found, f"{lesson} {q.key}: topic {q.topic!r} is not \"{lesson}, 'Section'\""
        assert any(found.group(1) in h for h in have), f"{lesson} {q.key}: no such heading"


@pytest.mark.parametrize("lesson", [lesson_param(lesson) for lesson in checks.LESSONS])
def test_quiz_checkers_reject_garbage_without_raising(lesson):
    for q in quiz.questions(lesson):
        for answer in GARBAGE:
            assert q.check(answer) is False, f"{lesson} {q.key} accepts {answer!r}"
