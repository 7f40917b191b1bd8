"""What the instructor's formgrader and a student's feedback page show of a student's notes, in a
real Chromium.

A scratch course of lesson 02 with two students: an honest one, and `runs-its-markup` of the
hostile corpus (tests/hostile.py: Markdown and raw cells with `<script>`, `onerror`, `javascript:`
links under a forged `locked` tag, and a lesson cell edited to hold a link). `attn-grade batch`
grades them and `attn-grade feedback` writes their pages; then `make lab-instructor` serves the
course, with nbgrader's formgrader on, and Chromium opens formgrader's view of each submission
and each feedback page. On every page no script of the student's runs (`window.ATTN_PWNED` stays
unset, no dialog opens, no `javascript:` link is on the page), the student's notes are there as
text, and the lesson's own prose is rendered as the lesson wrote it (headings, code spans).
MathJax, loaded from a CDN, does not load here; tests/test_grade_hostile.py checks that the
student's MathJax is only ever inside `<pre>` or `<code>`, which MathJax skips.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
from browser import INSTALL_SECONDS, launched
from course import BIN, REPO, env, make_course
from hostile import LESSON, PWNED, corpus
from nbgrader.api import Gradebook
from servers import free_port, make_env, make_lab
from test_grade_students import student_notebook, submit

from autograder import prose, view

STARTUP_SECONDS = 90
MS = 1000
STUDENTS = ("honest", "runs-its-markup")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.lesson02,
    pytest.mark.timeout(INSTALL_SECONDS + STARTUP_SECONDS + 300),
    pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed"),
    pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}"),
]


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """The course, both students graded and their feedback pages written."""
    root = make_course(tmp_path_factory.mktemp("formgrader") / "course", [LESSON])
    submit(root, LESSON, "honest", student_notebook(LESSON, {}))
    hostile = student_notebook(LESSON, {})
    corpus(root, REPO)["runs-its-markup"].tamper(hostile)
    submit(root, LESSON, "runs-its-markup", hostile)
    for step in ("batch", "feedback"):
        done = subprocess.run(
            [str(BIN / "attn-grade"), step, LESSON, "--course", str(root)],
            cwd=root, env=env(), capture_output=True, text=True, stdin=subprocess.DEVNULL,
            timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, f"attn-grade {step}:\n{done.stdout}\n{done.stderr}"
    return root


@pytest.fixture(scope="module")
def formgrader(course, tmp_path_factory):
    """`make lab-instructor` serving the course; yields the URL of formgrader's view of each
    student's submission, the token in it."""
    tmp = tmp_path_factory.mktemp("instructor-lab")
    port, token = free_port(), secrets.token_hex(16)
    server_env = make_env(JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(tmp / "runtime"))
    args = ["-C", str(REPO), "lab-instructor", f"PORT={port}", f"ROOT={course}"]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        ids = {s: gradebook.find_submission_notebook(LESSON, LESSON, s).id for s in STUDENTS}
    log = tmp / "make-lab-instructor.log"
    with make_lab(args, server_env, port, token, log, STARTUP_SECONDS) as (base, _):
        yield {s: f"{base}/formgrader/submissions/{i}/?token={token}" for s, i in ids.items()}


@pytest.fixture(scope="module")
def browser(chromium):
    with launched(chromium) as chrome:
        yield chrome


def pages(course: Path, formgrader: dict[str, str], student: str) -> dict[str, str]:
    feedback = course / "feedback" / student / LESSON / f"{LESSON}.html"
    return {"formgrader": formgrader[student], "feedback": feedback.as_uri()}


def opened(browser, url: str) -> dict:
    """What the page at ``url`` did and holds, once loaded and given a moment to run."""
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    try:
        page.goto(url, wait_until="load", timeout=60 * MS)
        page.wait_for_timeout(500)  # an onerror or a timer of the student's would have run
        seen = page.evaluate(
            """marker => ({
                pwned: window[marker] === undefined ? null : String(window[marker]),
                script_links: Array.from(document.querySelectorAll('a[href]'))
                    .filter(a => a.protocol === 'javascript:').map(a => a.getAttribute('href')),
                text: document.body.innerText,
                headings: document.querySelectorAll('h1, h2, h3').length,
                codes: Array.from(document.querySelectorAll('code')).map(c => c.textContent),
            })""",
            PWNED,
        )
    finally:
        page.close()
    return {**seen, "dialogs": dialogs}


@pytest.mark.parametrize("where", ["formgrader", "feedback"])
def test_a_students_notes_are_shown_as_text_and_run_nothing(course, formgrader, browser, where):
    seen = opened(browser, pages(course, formgrader, "runs-its-markup")[where])
    assert seen["pwned"] is None and seen["dialogs"] == [], seen["pwned"]
    assert seen["script_links"] == []
    for shown in ("'script'", "'onerror'", "'link'", "'ref'", "'raw'", "'prose'"):
        assert f"window.{PWNED}" in seen["text"] and shown in seen["text"], shown
    # each of the student's four cells (one a lesson cell they edited) says it is shown as typed
    assert seen["text"].count(prose.CAPTION) == 4


@pytest.mark.parametrize("where", ["formgrader", "feedback"])
def test_the_lessons_prose_is_rendered_as_the_lesson_wrote_it(course, formgrader, browser, where):
    seen = opened(browser, pages(course, formgrader, "honest")[where])
    assert seen["pwned"] is None and seen["script_links"] == []
    assert seen["headings"] >= 5
    assert "j <= i" in seen["codes"], seen["codes"][:20]
    assert "&lt;" not in seen["text"] and "&gt;" not in seen["text"]
    assert prose.CAPTION not in seen["text"]
