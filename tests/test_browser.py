"""A learner's session in a real browser: `make lab`, lesson 02, the mask widget, nbgrader's UI.

Debian's Chromium (installed on demand by tests/browser.py) is driven by Playwright. The test

1. starts JupyterLab with the project's own `make lab` (free port, random token, own process
   group), serving a scratch copy of the course: the browser saves notebooks (Validate saves
   before it validates), and those saves must not land in the working tree. The copy is the
   released lessons/ and nbgrader_config.py, plus an exchange directory into which lesson 02 is
   released, so the Assignment List has something to list;
2. opens the *released* lesson 02, the notebook a learner gets, and runs Run → Run All Cells.
   In a release every exercise raises NotImplementedError, and JupyterLab stops a run at the
   first error: the test checks that it stopped there, as it does for every learner who has not
   started. Then, as the lesson tells them, the learner runs the widget cell, which depends on
   nothing they write (its maths is attnlib's); this proves that a learner sees a working widget
   in the very notebook they are given, before solving anything. (Opening solutions/ would run
   clean, but would show nothing about what learners get.);
3. waits for the mask toggle, takes a screenshot, toggles the mask *from the keyboard* (Tab focus,
   Space) and checks that the rendered image and the text readout changed;
4. presses nbgrader's Validate button on the notebook and opens Nbgrader → Assignment List;
5. fails on any JavaScript console error or uncaught page error.

Screenshots go to test-artifacts/browser/ (gitignored). Every wait is bounded; Chromium and
JupyterLab are stopped in `finally` blocks.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from browser import LAUNCH_ARGS, ensure_chromium
from servers import free_port, make_env, make_lab

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "browser"
LESSON = "02-softmax-masking"
INSTALL_SECONDS = 600  # apt-get update + install chromium, once per machine
STARTUP_SECONDS = 60
BODY_SECONDS = 150  # everything after Chromium is there: lab, page, kernel, validate
MS = 1000

pytestmark = [
    pytest.mark.slow,
    pytest.mark.lesson02,
    pytest.mark.timeout(INSTALL_SECONDS + BODY_SECONDS + 60),
    pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed"),
]

# Console messages of type "error" that are not the course's fault. Each needs a reason.
BENIGN_CONSOLE_ERRORS: list[tuple[str, str]] = []


@pytest.fixture(scope="session")
def chromium():
    path, why = ensure_chromium(timeout=INSTALL_SECONDS)
    if path is None:
        pytest.skip(f"no Chromium for the browser test: {why}")
    return path


@pytest.fixture
def course(tmp_path):
    """A scratch copy of the course with lesson 02 released to a private exchange."""
    root = tmp_path / "course"
    root.mkdir()
    shutil.copytree(REPO / "lessons", root / "lessons")
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    config = (REPO / "nbgrader_config.py").read_text()
    config += f"\n# browser test: a private exchange\nc.Exchange.root = {str(exchange)!r}\n"
    (root / "nbgrader_config.py").write_text(config)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [str(bin_dir / "nbgrader"), "release_assignment", LESSON],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return root


def _lab_settings(settings_dir: Path) -> None:
    """No news feed or update check (they would reach for the internet), defaults otherwise."""
    notes = settings_dir / "@jupyterlab" / "apputils-extension"
    notes.mkdir(parents=True)
    (notes / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )


@pytest.fixture
def lab(course, tmp_path):
    """`make lab` serving the scratch course; yields (base_url, token, log_path)."""
    port, token = free_port(), secrets.token_hex(16)
    settings = tmp_path / "lab-settings"
    _lab_settings(settings)
    env = make_env(
        JUPYTER_TOKEN=token,
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
    )
    log_path = tmp_path / "make-lab.log"
    # The repository's Makefile and venv; ROOT (a make variable) points at the scratch copy.
    args = ["-C", str(REPO), "lab", f"PORT={port}", f"ROOT={course}"]
    with make_lab(args, env, port, token, log_path, STARTUP_SECONDS) as (base, _):
        yield base, token, log_path


class Console:
    """Collects the page's console errors and uncaught exceptions."""

    def __init__(self, page):
        self.errors: list[str] = []
        self.seen = 0  # messages of any type: proves the listener is attached
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))

    def _console(self, msg):
        self.seen += 1
        if msg.type != "error":
            return
        text = f"{msg.text} @ {msg.location.get('url', '')}"
        if not any(re.search(pattern, text) for pattern, _why in BENIGN_CONSOLE_ERRORS):
            self.errors.append(text)


def _shot(target, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    data = target.screenshot(path=str(path))
    return data


def test_lesson02_mask_widget_and_nbgrader_ui_in_chromium(chromium, lab):
    from playwright.sync_api import expect, sync_playwright

    base, token, log_path = lab
    started = time.monotonic()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(chromium), args=LAUNCH_ARGS, headless=True, timeout=60 * MS
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(30 * MS)
            console = Console(page)
            url = f"{base}/lab/tree/lessons/{LESSON}/{LESSON}.ipynb?token={token}"
            page.goto(url, wait_until="domcontentloaded", timeout=60 * MS)
            notebook = page.locator(".jp-NotebookPanel:visible")
            expect(notebook).to_have_count(1, timeout=60 * MS)
            # The kernel is connected and idle when the status bar says so.
            kernel = page.get_by_role("button", name=re.compile(r"^Python 3 .*\| Idle$"))
            expect(kernel).to_have_count(1, timeout=60 * MS)

            # Run → Run All Cells. The released exercises are unsolved: the run stops at the
            # first check, with the exercise's NotImplementedError.
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
            page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
            error = notebook.locator(
                ".jp-OutputArea-output[data-mime-type$='stderr']", has_text="NotImplementedError"
            )  # the traceback; one, because the run stops at the first
            expect(error).to_have_count(1, timeout=60 * MS)
            expect(kernel).to_have_count(1, timeout=30 * MS)  # the run is over
            error.scroll_into_view_if_needed()
            _shot(page, "01-run-all-stops-at-the-first-exercise")

            # Run All stopped before the widget's cell; the learner runs it (its maths is
            # attnlib's, so it works before any exercise is solved).
            cell = notebook.locator(".jp-CodeCell", has_text="MaskToggle()")
            expect(cell).to_have_count(1)
            expect(cell.locator(".jp-OutputArea-output")).to_have_count(0)
            cell.locator(".cm-content").click()
            page.keyboard.press("Shift+Enter")
            widget = cell.locator(".attnlib-mask-toggle")
            image = widget.locator("img")
            readout = widget.locator(".attnlib-readout")
            expect(readout).to_contain_text("Causal mask OFF", timeout=60 * MS)
            expect(image).to_have_attribute("src", re.compile(r"^(blob:|data:image/png)"))
            page.wait_for_function(
                "img => img.complete && img.naturalWidth > 0", arg=image.element_handle()
            )
            widget.scroll_into_view_if_needed()
            before_src = image.get_attribute("src")
            before_png = _shot(widget, "02-mask-widget-off")
            assert "row sums 1.00" in readout.inner_text()

            # Toggle from the keyboard: focus the button, press Space.
            toggle = widget.get_by_role("button", name="causal mask")
            toggle.focus()
            page.keyboard.press("Space")
            expect(readout).to_contain_text("Causal mask ON", timeout=30 * MS)
            expect(readout).to_contain_text("largest weight above the diagonal 0.00")
            expect(readout).to_contain_text("row sums 1.00")
            expect(image).not_to_have_attribute("src", before_src, timeout=30 * MS)
            page.wait_for_function(
                "img => img.complete && img.naturalWidth > 0", arg=image.element_handle()
            )
            after_png = _shot(widget, "03-mask-widget-on")
            assert after_png != before_png, "the rendered figure did not change"
            _shot(page, "04-lesson02-with-widget")

            # nbgrader's Validate button (it saves the scratch copy, then validates it).
            page.locator(".validate-button").first.click()
            dialog = page.locator(".jp-Dialog")
            expect(dialog).to_be_visible(timeout=90 * MS)
            # An untouched release fails at its first exercise, and Validate says so.
            expect(dialog).to_contain_text("Validation Results")
            expect(dialog).to_contain_text("The following cell failed")
            expect(dialog).to_contain_text('report("softmax", softmax)')
            _shot(page, "05-validate-result")
            dialog.locator(".jp-Dialog-button").last.click()
            expect(dialog).to_have_count(0)

            # Nbgrader → Assignment List shows the released lesson.
            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Nbgrader$")).click()
            page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
            listing = page.locator("#nbgrader-assignment-list")
            expect(listing).to_be_visible(timeout=30 * MS)
            expect(listing.locator("#released_assignments_list")).to_contain_text(
                LESSON, timeout=30 * MS
            )
            _shot(page, "06-assignment-list")

            assert console.seen > 0, "no console message reached the listener"
            assert not console.errors, "JavaScript console errors:\n" + "\n".join(console.errors)
        except BaseException:
            if "page" in locals():
                _shot(page, "failure")  # what the page looked like when the test failed
            raise
        finally:
            browser.close()
    assert time.monotonic() - started < BODY_SECONDS, "the browser session took too long"
