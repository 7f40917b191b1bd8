"""A learner's Markdown and raw cells show as text in the HTML pages nbgrader makes of a graded
notebook; the lesson's own cells show as written (autograder/prose.py).

nbconvert is the oracle: formgrader and the feedback pages render through its ``HTMLExporter``
and its Markdown renderer, so that is what these tests render with. The hostile corpus
(``runs-its-markup`` in tests/hostile.py) grades such a notebook both ways into real feedback
pages; these check the pieces, and the fence on any text hypothesis writes.
"""

from __future__ import annotations

import copy
import html
import os
from html.parser import HTMLParser

import nbformat
import pytest
from course import LESSON_IDS, REPO
from hostile import PWNED, where_shown
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_raw_cell

from autograder import prose

HOSTILE = [
    f"<script>window.{PWNED}=1</script>",
    f'<img src=x onerror="window.{PWNED}=1">',
    f"[a link](javascript:window.{PWNED}=1)",
    f"[a reference][r]\n\n[r]: javascript:window.{PWNED}=1",
    f"$\\href{{javascript:window.{PWNED}=1}}{{x}}$",
    f"$$\n\\href{{javascript:window.{PWNED}=1}}{{x}}\n$$",
    f"```\n<script>window.{PWNED}=1</script>\n```\n<b onclick='window.{PWNED}=1'>x</b>",
    f"````\n```\n<script>window.{PWNED}=1</script>",
]


class _Shown(HTMLParser):
    """The elements of a rendered page, and the text inside ``<pre>`` and outside it."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list]] = []
        self.pre, self.inside, self.outside = 0, [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))
        self.pre += tag == "pre"

    def handle_endtag(self, tag):
        self.pre -= tag == "pre"

    def handle_data(self, data):
        (self.inside if self.pre else self.outside).append(data)


def shown(page: str) -> _Shown:
    parsed = _Shown()
    parsed.feed(page)
    parsed.close()
    return parsed


def _lines(text: str) -> str:
    """``text`` as a code block shows it: line ends as ``\\n``, no blank lines at either end."""
    return text.replace("\r\n", "\n").replace("\r", "\n").strip("\n")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
    st.lists(st.sampled_from(["`", "``", "```", "````", "~~~", "\n", " ", "<b>", "$", "\\href",
                              "[x](javascript:y)", "    ", "&lt;", ">"])).map("".join),
))  # fmt: skip
def test_a_learners_markdown_shows_verbatim_in_one_code_block(text):
    cell = new_markdown_cell(text)
    prose.as_text(cell)
    page = shown(markdown2html_mistune(cell.source))
    tags = [tag for tag, _ in page.tags]
    assert tags.count("pre") == 1 and set(tags) <= {"p", "em", "div", "pre", "span"}, page.tags
    assert all(name == "class" for _, attrs in page.tags for name, _ in attrs), page.tags
    assert "".join(page.outside).strip() == prose.CAPTION  # the caption, and nothing else
    assert _lines("".join(page.inside)) == _lines(text)


@pytest.mark.parametrize("text", HOSTILE)
def test_a_learners_cells_show_as_text_in_nbconverts_own_page(text):
    """The whole page, as formgrader and the feedback render it: each hostile text is text in
    a ``<pre>``, in a Markdown cell and in a raw cell, even when the cell claims nbgrader's lock
    and carries an attachment."""
    locked = {"nbgrader": {"grade_id": "mine", "locked": True, "solution": False, "grade": False}}
    attached = {"x.html": {"text/html": "PHNjcmlwdD4="}}
    nb = new_notebook(cells=[
        new_markdown_cell(text, metadata=locked, attachments=attached),
        new_raw_cell(text, metadata={**locked, "raw_mimetype": "text/html"}),
        new_raw_cell(text),
    ])  # fmt: skip
    prose.show_safely(nb, frozenset())
    assert all("attachments" not in cell for cell in nb.cells)
    page, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    where = where_shown(page, PWNED)  # as tests/test_grade_hostile.py reads a feedback page
    assert len(where) >= 3 and set(where) == {"text"}, where


@pytest.mark.parametrize("lesson", LESSON_IDS)
def test_the_lessons_own_cells_are_shown_as_written(lesson):
    source = REPO / "solutions" / lesson / f"{lesson}.ipynb"
    release = REPO / "lessons" / lesson / f"{lesson}.ipynb"
    course = prose.course_cells([source, release])
    for path in (source, release):
        nb = nbformat.read(path, as_version=4)
        before = copy.deepcopy(nb)
        prose.show_safely(nb, course)
        assert nb == before, path
        assert sum(cell.cell_type == "markdown" for cell in nb.cells) > 10


def test_only_the_courses_text_type_and_attachments_make_a_cell_the_courses(tmp_path):
    path = tmp_path / "lesson.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("> the lesson's *own* `a < b`")]), path)
    course = prose.course_cells([path, tmp_path / "missing.ipynb"])
    own = new_markdown_cell("> the lesson's *own* `a < b`")
    changed = new_markdown_cell("> the lesson's *own* `a < b` [x](javascript:y)")
    attached = new_markdown_cell(own.source, attachments={"a.png": {"image/png": "AAAA"}})
    as_raw = new_raw_cell(own.source)
    claimed = new_markdown_cell("<script>y</script>", metadata={"nbgrader": {"locked": True}})
    code = new_code_cell("<script>y</script>")
    nb = new_notebook(cells=[own, changed, attached, as_raw, claimed, code])
    prose.show_safely(nb, course)
    assert nb.cells[0].source == "> the lesson's *own* `a < b`"
    for cell in nb.cells[1:3] + nb.cells[4:5]:
        assert cell.source.startswith(f"*{prose.CAPTION}*\n\n```text\n"), cell.source
        assert cell.source.endswith("\n```") and "attachments" not in cell, cell.source
    assert nb.cells[3].source.endswith(f"<pre>{html.escape(own.source, quote=False)}</pre>")
    assert nb.cells[5].source == "<script>y</script>"  # code is shown highlighted, never as HTML
    (tmp_path / "broken.ipynb").write_text('{"cells": [ not a notebook')
    assert prose.course_cells([tmp_path / "missing.ipynb", tmp_path / "broken.ipynb"]) == set()


def test_a_lesson_file_changed_since_it_was_read_is_read_again(tmp_path):
    path = tmp_path / "lesson.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell("first")]), path)
    assert prose.key(new_markdown_cell("first")) in prose.course_cells([path])
    nbformat.write(new_notebook(cells=[new_markdown_cell("second, longer")]), path)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    found = prose.course_cells([path])
    assert prose.key(new_markdown_cell("second, longer")) in found
    assert prose.key(new_markdown_cell("first")) not in found


def test_the_fence_is_longer_than_any_run_of_backticks():
    assert prose.fenced("a ``` b") == "````text\na ``` b\n````"
    assert prose.fenced("plain") == "```text\nplain\n```"
