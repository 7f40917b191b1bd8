"""A learner's session in a real browser: `make lab`, every lesson, its explorers, nbgrader's UI.

Debian's Chromium (installed on demand by tests/browser.py) is driven by Playwright, against the
project's own `make lab` (free port, random token, own process group) serving a scratch copy of
the course: the browser saves notebooks (the tests save to read what ran; Validate saves before
it validates), and those saves must not land in the working tree. The copy is the released
lessons/ and nbgrader_config.py, plus an exchange directory into which lesson 02 is released, so
the Assignment List has something to list. Mastery records go to a scratch ATTN_COURSE_HOME.

One JupyterLab and one Chromium serve the whole module; every test gets a fresh page, a fresh
copy of its lesson and a fresh kernel (the kernels are shut down after each test).

1. **Run All reaches the end of every untouched lesson** (one test per released lesson). In a
   release every exercise is unwritten; its solution and test cells carry JupyterLab's
   `raises-exception` tag, so Run → Run All Cells goes on past them. The test waits until the
   run is over and the kernel idle, saves, and reads the notebook from disk: every code cell
   ran, the last one included, and the cells that failed are exactly the graded test cells and
   the solution cells that raise when run (nbgrader's metadata says which is which). On the
   page, every failed test cell shows one red line and no traceback: ``✗ <exercise>: not
   written yet…`` (for a mastery question, the quiz's ``✗ qN: not answered yet…``); every
   explorer (`attnlib.viz`) the lesson displays rendered its picture.
2. **A wrong softmax in lesson 02** (normalising over axis 0) turns its test cell red with one
   sentence naming the mistake and the section to reread, no traceback; a right one prints
   ``✓ softmax: correct.``. The mask toggle, operated from the keyboard (focus, Space),
   changes the rendered image and the text readout.
3. **Validate** with the wrong softmax in place names the failing cell and the mistake; with a
   dataset pasted into that cell, more than a cell may hold, it says grading would refuse the
   notebook; then Nbgrader → Assignment List shows the released lesson.

Every test fails on a JavaScript console error or an uncaught page error. Screenshots go to
test-artifacts/browser/ (gitignored). Every wait is bounded; Chromium and JupyterLab are stopped
in fixture teardown.
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
import urllib.request
from pathlib import Path

import pytest
from browser import INSTALL_SECONDS, launched
from servers import free_port, make_env, make_lab

from autograder.submission import MAX_CELL_SOURCE

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "browser"
# The released lessons this module runs; adding a lesson is adding its id here.
LESSONS = (
    "01-scoring",
    "02-softmax-masking",
    "03-self-cross",
    "04-multi-head",
    "05-complexity",
)
ASSIGNMENT = "02-softmax-masking"  # released to the exchange, for the Assignment List
STARTUP_SECONDS = 90  # `make lab` answering, Chromium started
RUN_ALL_SECONDS = 120  # one lesson's Run All, on 2 busy cores
TEST_SECONDS = 150  # one test, once the server and the browser are up
MS = 1000

pytestmark = [
    pytest.mark.slow,
    # The first test also waits for Chromium (maybe installed) and for `make lab`.
    pytest.mark.timeout(INSTALL_SECONDS + STARTUP_SECONDS + TEST_SECONDS + 60),
    pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed"),
]

# Console messages of type "error" that are not the course's fault. Each needs a reason.
BENIGN_CONSOLE_ERRORS: list[tuple[str, str]] = []

# What a Python traceback prints; none of it may show in a test cell.
TRACEBACK_MARKERS = ("Traceback", 'File "', "---->", "Cell In[")
ERROR_MIME = "application/vnd.jupyter.stderr"  # JupyterLab renders errors with this mime type
WRONG_SOFTMAX = '''def softmax(x, axis=-1):
    """Numerically stable softmax of x along axis; the result has x's shape."""
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)'''
RIGHT_SOFTMAX = '''def softmax(x, axis=-1):
    """Numerically stable softmax of x along axis; the result has x's shape."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)'''
WRONG_SOFTMAX_SAYS = "softmax normalises over the first axis"
PASTED = "\nDATA = [" + "0.5, " * (MAX_CELL_SOURCE // 5) + "]\n"  # one line, as pasted


def _lesson_param(lesson: str):
    return pytest.param(lesson, marks=getattr(pytest.mark, f"lesson{lesson[:2]}"), id=lesson)


# -- the notebook on disk --------------------------------------------------------------------------
def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(source)


def _nbgrader(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def _is_test(cell: dict) -> bool:
    return cell["cell_type"] == "code" and bool(_nbgrader(cell).get("grade"))


def _raises_when_run(cell: dict) -> bool:
    """A solution cell whose unwritten answer raises at top level (a mastery answer cell).

    A solution cell that only defines the exercise's function runs fine: its body raises only
    when the function is called, and that happens in the test cell.
    """
    nbg = _nbgrader(cell)
    unwritten = re.search(r"^raise NotImplementedError\(\)", _source(cell), re.MULTILINE)
    return cell["cell_type"] == "code" and bool(nbg.get("solution")) and unwritten is not None


def _checks(cell: dict) -> str:
    """What a test cell checks: the exercise of ``report("name", …)`` or the question ``qN``."""
    source = _source(cell)
    found = re.search(r'report\("(\w+)"', source) or re.search(r"\b(q\d+)\b", source)
    return found.group(1) if found else _nbgrader(cell).get("grade_id", "?")


def _first_line(cell: dict) -> str:
    lines = [line for line in _source(cell).splitlines() if line.strip()]
    return lines[0] if lines else "(empty)"


def _raised_at(error: dict) -> str:
    """The line of the cell that raised, from an error output's traceback (ANSI colours off)."""
    for entry in error.get("traceback", []):
        for line in re.sub(r"\x1b\[[0-9;]*m", "", entry).splitlines():
            if line.startswith("---->"):
                return re.sub(r"^---->\s*\d+\s*", "", line).strip()
    return "?"


def _explorers() -> dict[str, str]:
    """attnlib's explorer classes, by name, and the CSS class their widget carries."""
    from attnlib import viz  # noqa: F401  (imports every explorer module)
    from attnlib.viz.widgets import Explorer

    found, todo = {}, list(Explorer.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        found[cls.__name__] = cls.css_class
    return found


def _expected_explorers(cells: list[dict]) -> list[tuple[int, str, str]]:
    """(cell index, explorer name, CSS class) of every explorer a cell of the lesson makes."""
    explorers = _explorers()
    return [
        (i, name, css)
        for i, cell in enumerate(cells)
        if cell["cell_type"] == "code"
        for name, css in explorers.items()
        if re.search(rf"\b{name}\(", _source(cell))
    ]


# -- fixtures --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A scratch copy of the course with lesson 02 released to a private exchange."""
    tmp = tmp_path_factory.mktemp("browser")
    root = tmp / "course"
    root.mkdir()
    shutil.copytree(REPO / "lessons", root / "lessons")
    exchange = tmp / "exchange"
    exchange.mkdir()
    config = (REPO / "nbgrader_config.py").read_text()
    config += f"\n# browser test: a private exchange\nc.Exchange.root = {str(exchange)!r}\n"
    (root / "nbgrader_config.py").write_text(config)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [str(bin_dir / "nbgrader"), "release_assignment", ASSIGNMENT],
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


class Lab:
    """The running `make lab`: its URL, token and the scratch course it serves."""

    def __init__(self, base: str, token: str, root: Path, log_path: Path):
        self.base, self.token, self.root, self.log_path = base, token, root, log_path

    def api(self, method: str, path: str):
        """A call to Jupyter's REST API; returns the decoded JSON body (None when empty)."""
        request = urllib.request.Request(
            f"{self.base}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self) -> None:
        for session in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{session['id']}")


@pytest.fixture(scope="module")
def lab(course, tmp_path_factory):
    """`make lab` serving the scratch course, for the whole module."""
    tmp = tmp_path_factory.mktemp("lab")
    port, token = free_port(), secrets.token_hex(16)
    settings = tmp / "lab-settings"
    _lab_settings(settings)
    env = make_env(
        JUPYTER_TOKEN=token,
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
        ATTN_COURSE_HOME=str(tmp / "course-home"),  # mastery records of the last cells
    )
    log_path = tmp / "make-lab.log"
    # The repository's Makefile and venv; ROOT (a make variable) points at the scratch copy.
    args = ["-C", str(REPO), "lab", f"PORT={port}", f"ROOT={course}"]
    with make_lab(args, env, port, token, log_path, STARTUP_SECONDS) as (base, _):
        yield Lab(base, token, course, log_path)


@pytest.fixture(scope="module")
def browser(chromium, lab):
    """One headless Chromium for the module; stopped at its end."""
    with launched(chromium) as chrome:
        yield chrome


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

    def check(self) -> None:
        assert self.seen > 0, "no console message reached the listener"
        assert not self.errors, "JavaScript console errors:\n" + "\n".join(self.errors)


def _shot(target, name: str) -> bytes:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return target.screenshot(path=str(ARTIFACTS / f"{name}.png"))


# Every cell of the notebook on the page, in order (JupyterLab's default windowing keeps all of
# them in the DOM): is it code, its prompt ("[3]:", "[*]:", "[ ]:") and its outputs.
CELLS_JS = """panel => Array.from(panel.querySelectorAll('.jp-Notebook .jp-Cell')).map(cell => ({
    code: cell.classList.contains('jp-CodeCell'),
    prompt: (cell.querySelector('.jp-InputPrompt') || {textContent: ''}).textContent.trim(),
    outputs: Array.from(cell.querySelectorAll(
        '.jp-Cell-outputArea > .jp-OutputArea-child > .jp-OutputArea-output'
    )).map(out => ({
        mime: out.getAttribute('data-mime-type'),
        text: out.textContent,
        red: out.querySelector('.ansi-red-fg, .ansi-bright-red-fg') !== null,
        background: getComputedStyle(out).backgroundColor,
    })),
}))"""
PROMPT_RAN = re.compile(r"^\[(\d+)\]:?$")
IMAGE_LOADED = "img => img.complete && img.naturalWidth > 0"


class Notebook:
    """A released lesson opened in a fresh page, with its own copy on disk and its own kernel."""

    def __init__(self, browser, lab: Lab, lesson: str, name: str):
        from playwright.sync_api import expect

        self.lab, self.lesson, self.name = lab, lesson, name
        self.path = lab.root / "lessons" / lesson / f"{lesson}.ipynb"
        shutil.copyfile(REPO / "lessons" / lesson / f"{lesson}.ipynb", self.path)  # untouched
        self.cells = json.loads(self.path.read_text())["cells"]
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.set_default_timeout(30 * MS)
        self.console = Console(self.page)
        # A workspace of its own: nothing from an earlier page is restored next to the lesson.
        url = (
            f"{lab.base}/lab/workspaces/{name}/tree/lessons/{lesson}/{lesson}.ipynb"
            f"?token={lab.token}"
        )
        self.page.goto(url, wait_until="domcontentloaded", timeout=60 * MS)
        self.panel = self.page.locator(".jp-NotebookPanel:visible")
        expect(self.panel).to_have_count(1, timeout=60 * MS)
        # The kernel is connected and idle when the status bar says so.
        self.kernel = self.page.get_by_role("button", name=re.compile(r"^Python 3 .*\| Idle$"))
        expect(self.kernel).to_have_count(1, timeout=60 * MS)
        expect(self.cell_at(len(self.cells) - 1)).to_have_count(1)

    def close(self) -> None:
        self.page.close()

    # -- the page --------------------------------------------------------------------------------
    def cell_at(self, index: int):
        return self.panel.locator(".jp-Notebook .jp-Cell").nth(index)

    def index_of(self, predicate) -> int:
        found = [i for i, cell in enumerate(self.cells) if predicate(cell)]
        assert len(found) == 1, f"expected one such cell in {self.lesson}, found {found}"
        return found[0]

    def shown(self) -> list[dict]:
        cells = self.panel.element_handle(timeout=60 * MS).evaluate(CELLS_JS)  # as the waits above
        assert len(cells) == len(self.cells), "the page shows another number of cells"
        return cells

    def idle(self) -> bool:
        return self.kernel.count() == 1

    def menu(self, menu: str, item: str) -> None:
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(rf"^{menu}$")).click()
        self.page.locator(".lm-Menu-itemLabel", has_text=re.compile(rf"^{item}$")).click()

    def progress(self) -> tuple[str, float]:
        """The notebook's execution indicator: kernel status and % of the scheduled cells done."""
        indicator = self.panel.locator(".jp-Notebook-ExecutionIndicator").first
        status = indicator.get_attribute("data-status") or ""
        done = indicator.locator("[role=progressbar]").get_attribute("aria-valuenow")
        return status, float(done or 0)

    def wait_for_runs(self, cells: list[int], seconds: float) -> list[dict]:
        """Wait until a run that was just asked for is over; returns the cells as shown.

        Over means: the execution indicator has every scheduled cell done (100 %, also when the
        kernel aborted the rest of a Run All after an error in an untagged cell) and the kernel
        is idle, twice in a row. Queued cells' prompts are no sign: JupyterLab shows `[ ]` for
        cells still waiting, and the kernel is briefly idle between two cells.
        """
        deadline = time.monotonic() + seconds
        started, calm = False, 0
        while True:
            shown = self.shown()
            status, done = self.progress()
            ran = all(PROMPT_RAN.match(shown[i]["prompt"]) for i in cells)
            started = started or ran or status == "busy" or done < 100
            calm = calm + 1 if started and status == "idle" and done >= 100 and self.idle() else 0
            if calm >= 2:
                return shown
            if time.monotonic() > deadline:
                pending = [i for i in cells if not PROMPT_RAN.match(shown[i]["prompt"])]
                raise AssertionError(
                    f"{self.lesson}: the run did not end in {seconds} s (kernel {status}, "
                    f"{done:.0f} % of the scheduled cells done); not run yet: {pending}"
                )
            self.page.wait_for_timeout(500)

    def select(self, index: int) -> None:
        """Select a cell (command mode), as a click on its prompt does."""
        cell = self.cell_at(index)
        cell.scroll_into_view_if_needed()
        cell.locator(".jp-InputPrompt").click()

    def run_cell(self, index: int, seconds: float = 60) -> dict:
        """Run one cell (Ctrl+Enter) and wait for its new execution count; returns its view."""
        before = self.shown()[index]["prompt"]
        self.select(index)
        self.page.keyboard.press("Control+Enter")
        deadline = time.monotonic() + seconds
        while True:
            shown = self.shown()[index]
            if PROMPT_RAN.match(shown["prompt"]) and shown["prompt"] != before and self.idle():
                return shown
            assert time.monotonic() < deadline, f"cell {index} did not finish in {seconds} s"
            self.page.wait_for_timeout(250)

    def write(self, index: int, code: str) -> None:
        """Replace a cell's source as a learner would: click into it, select all, type."""
        cell = self.paste(index, code, leave=False)
        lines = [line.rstrip() for line in cell.locator(".cm-line").all_inner_texts()]
        assert "\n".join(lines).strip() == code.strip(), f"the editor holds:\n{lines}"
        self.page.keyboard.press("Escape")  # back to command mode

    def paste(self, index: int, code: str, leave: bool = True):
        """Replace a cell's source with ``code`` in one go, as pasting does (the editor draws only
        part of a very long line, so what it shows is not checked); returns the cell."""
        cell = self.cell_at(index)
        cell.scroll_into_view_if_needed()
        cell.locator(".cm-content").click()
        self.page.keyboard.press("Control+a")
        self.page.keyboard.insert_text(code)  # no auto-indent or bracket closing on the way
        if leave:
            self.page.keyboard.press("Escape")  # back to command mode
        return cell

    # -- the notebook on disk ------------------------------------------------------------------
    def save(self, seconds: float = 30) -> list[dict]:
        """Save (the toolbar's button) and return the cells as written to disk.

        Waits until the file was written again and holds what the page shows: the execution
        counts of every cell.
        """
        written = self.path.stat().st_mtime_ns
        shown = [c["prompt"] for c in self.shown()]
        counts = [int(m.group(1)) if (m := PROMPT_RAN.match(p)) else None for p in shown]
        self.panel.locator('[data-command="docmanager:save"]').first.click()
        deadline = time.monotonic() + seconds
        while True:
            try:
                cells = json.loads(self.path.read_text())["cells"]
            except (OSError, ValueError):  # being written
                cells = None
            if (
                cells is not None
                and self.path.stat().st_mtime_ns != written
                and len(cells) == len(counts)
            ):
                saved = [c.get("execution_count") if c["cell_type"] == "code" else None
                         for c in cells]  # fmt: skip
                if saved == counts:
                    return cells
            assert time.monotonic() < deadline, "the notebook was not saved"
            self.page.wait_for_timeout(250)


@pytest.fixture
def notebook(browser, lab, request):
    """Opens a released lesson in a fresh page: ``notebook(lesson)``.

    At the end of the test every page is photographed (``<test>-last.png``: what it showed
    when the test ended, passed or failed) and closed, and every kernel is shut down.
    """
    opened: list[Notebook] = []
    name = re.sub(r"[^A-Za-z0-9-]+", "-", request.node.name).strip("-")

    def open_lesson(lesson: str) -> Notebook:
        nb = Notebook(browser, lab, lesson, f"{name}-{len(opened)}")
        opened.append(nb)
        return nb

    try:
        yield open_lesson
    finally:
        for nb in opened:
            try:
                _shot(nb.page, f"{name}-last")
            finally:
                nb.close()
        lab.shut_down_kernels()


def _one_red_line(shown: dict) -> tuple[str, list[str]]:
    """The text of a cell's single error output, and what is wrong with how it shows."""
    wrong = []
    outputs = shown["outputs"]
    if len(outputs) != 1:
        texts = [o["text"][:200] for o in outputs]
        return "", [f"{len(outputs)} outputs instead of one: {texts}"]
    out = outputs[0]
    text = out["text"].strip()
    if out["mime"] != ERROR_MIME:
        wrong.append(f"shown as {out['mime']}, not as an error ({ERROR_MIME})")
    if not out["red"]:
        wrong.append("its text is not red (no .ansi-red-fg span)")
    if out["background"] in ("", "transparent", "rgba(0, 0, 0, 0)"):
        wrong.append("it has no error background")
    if len(text.splitlines()) != 1:
        wrong.append(f"{len(text.splitlines())} lines instead of one")
    marks = [mark for mark in TRACEBACK_MARKERS if mark in text]
    if marks:
        wrong.append(f"it shows a traceback ({', '.join(repr(m) for m in marks)})")
    return text, wrong


@pytest.mark.parametrize("lesson", [_lesson_param(lesson) for lesson in LESSONS])
def test_run_all_reaches_the_last_cell_of_an_untouched_lesson(notebook, lesson):
    started = time.monotonic()
    nb = notebook(lesson)
    cells = nb.cells
    code = [i for i, cell in enumerate(cells) if cell["cell_type"] == "code"]

    nb.menu("Run", "Run All Cells")
    nb.wait_for_runs(code, RUN_ALL_SECONDS)
    saved = nb.save()  # the execution counts and outputs, as the kernel reported them
    shown = nb.shown()
    _shot(nb.page, f"{lesson}-run-all")
    problems, bad_cells = [], []

    def where(i: int) -> str:
        tags = cells[i].get("metadata", {}).get("tags", [])
        return f"cell {i} `{_first_line(cells[i])}` (tags {tags})"

    ran = {i for i in code if saved[i].get("execution_count") is not None}
    if code[-1] not in ran or len(ran) < len(code):
        not_run = [i for i in code if i not in ran]
        last = max(ran, default=None)
        problems.append(
            f"Run All ran {len(ran)} of {len(code)} code cells and stopped after "
            f"{where(last) if last is not None else 'none'}; not run: {not_run}"
        )

    errors = {
        i: [o for o in saved[i].get("outputs", []) if o.get("output_type") == "error"] for i in code
    }
    failed = {i for i, errs in errors.items() if errs}
    # An untouched release: every test cell fails, and so does every solution cell whose
    # unwritten answer raises when run. Nothing else may fail: not the worked examples, the
    # figures, the explorers, nor the mastery line or the last cell.
    expected = {i for i in code if _is_test(cells[i]) or _raises_when_run(cells[i])}
    for i in sorted(failed - expected):
        error = errors[i][0]
        bad_cells.append(i)
        problems.append(
            f"{where(i)} is neither a solution nor a test cell, yet failed with "
            f"{error.get('ename')}{': ' if error.get('evalue') else ''}{error.get('evalue', '')} "
            f"at `{_raised_at(error)}`"
        )
    for i in sorted((expected & ran) - failed):
        problems.append(f"{where(i)} should fail in an untouched release, but did not")

    # Every failed test cell: one red line naming the exercise, "not written yet" (a mastery
    # question: "not answered yet"), no traceback.
    for i in sorted(failed & {i for i in code if _is_test(cells[i])}):
        name = _checks(cells[i])
        text, wrong = _one_red_line(shown[i])
        question = re.fullmatch(r"q\d+", name) is not None
        start = f"✗ {name}: " + ("not answered yet" if question else "not written yet")
        if not text.startswith(start):
            wrong.append(f"it does not start with {start!r}")
        if wrong:
            bad_cells.append(i)
            problems.append(f"test {where(i)} shows {text[:300]!r}: " + "; ".join(wrong))

    # Every explorer the lesson displays rendered its picture.
    explorers = _expected_explorers(cells)
    for i, name, css in explorers:
        widget = nb.cell_at(i).locator(f".attnlib-viz.{css}")
        if i not in ran:
            problems.append(f"{name} ({where(i)}) was never run")
            continue
        if widget.count() != 1:
            outputs = [o["text"][:200] for o in shown[i]["outputs"]]
            problems.append(f"{name} ({where(i)}): no .{css} widget; the cell shows {outputs}")
            continue
        widget.scroll_into_view_if_needed()
        image = widget.locator("img")
        try:
            assert image.count() >= 1, "no image"
            for k in range(image.count()):
                nb.page.wait_for_function(
                    IMAGE_LOADED, arg=image.nth(k).element_handle(), timeout=30 * MS
                )
        except Exception as error:  # noqa: BLE001 - reported with the rest
            problems.append(f"{name} ({where(i)}): its picture did not load ({error})")
            continue
        _shot(widget, f"{lesson}-{name}")
    # No other explorer anywhere on the page without its picture.
    all_widgets = nb.panel.locator(".attnlib-viz")
    for k in range(all_widgets.count()):
        images = all_widgets.nth(k).locator("img")
        loaded = [img.evaluate(IMAGE_LOADED) for img in images.element_handles()]
        if not loaded or not all(loaded):
            classes = all_widgets.nth(k).get_attribute("class")
            problems.append(f"an explorer ({classes}) shows no loaded picture")

    problems += [f"JavaScript console: {error}" for error in nb.console.errors]
    if bad_cells:  # the first cell that shows what is wrong, as the learner sees it
        first = nb.cell_at(min(bad_cells))
        first.scroll_into_view_if_needed()
        _shot(first, f"{lesson}-first-wrong-cell")
    assert not problems, f"{lesson}, Run → Run All Cells:\n- " + "\n- ".join(problems)
    nb.console.check()
    assert time.monotonic() - started < TEST_SECONDS, f"{lesson} took too long"


def _softmax_cells(nb: Notebook) -> tuple[int, int]:
    solution = nb.index_of(
        lambda c: bool(_nbgrader(c).get("solution")) and _source(c).startswith("def softmax(")
    )
    test = nb.index_of(lambda c: _is_test(c) and _checks(c) == "softmax")
    return solution, test


@pytest.mark.lesson02
def test_lesson02_wrong_softmax_is_one_red_sentence_and_a_right_one_passes(notebook):
    from playwright.sync_api import expect

    started = time.monotonic()
    nb = notebook("02-softmax-masking")
    solution, test = _softmax_cells(nb)

    # The learner runs what comes before the exercise (Run → Run All Above Selected Cell),
    # then writes a softmax that normalises over the first axis and runs it and its test.
    nb.select(solution)
    nb.menu("Run", "Run All Above Selected Cell")
    above = [i for i in range(solution) if nb.cells[i]["cell_type"] == "code"]
    shown = nb.wait_for_runs(above, 60)
    assert all(PROMPT_RAN.match(shown[i]["prompt"]) for i in above), "cells above did not run"

    nb.write(solution, WRONG_SOFTMAX)
    ran = nb.run_cell(solution)
    assert not ran["outputs"], f"defining softmax printed {ran['outputs']}"
    shown = nb.run_cell(test)
    nb.cell_at(test).scroll_into_view_if_needed()
    _shot(nb.cell_at(test), "lesson02-wrong-softmax")
    text, wrong = _one_red_line(shown)
    assert not wrong, f"the softmax test cell shows {text!r}: " + "; ".join(wrong)
    assert text.startswith("✗ softmax: "), text
    assert WRONG_SOFTMAX_SAYS in text, text
    assert "(Read: 02-softmax-masking, " in text, text
    # In the notebook the cell failed (nbgrader's zero), with the checks' own exception.
    outputs = nb.save()[test]["outputs"]
    assert [(o["output_type"], o.get("ename")) for o in outputs] == [("error", "CheckFailed")]

    # A right softmax: the same cell prints the tick.
    nb.write(solution, RIGHT_SOFTMAX)
    nb.run_cell(solution)
    shown = nb.run_cell(test)
    _shot(nb.cell_at(test), "lesson02-right-softmax")
    texts = [(o["mime"], o["text"].strip()) for o in shown["outputs"]]
    assert texts == [("application/vnd.jupyter.stdout", "✓ softmax: correct.")], texts

    # The mask toggle (its maths is attnlib's): toggled from the keyboard, it redraws.
    mask = nb.index_of(lambda c: c["cell_type"] == "code" and "MaskToggle(" in _source(c))
    nb.run_cell(mask)
    widget = nb.cell_at(mask).locator(".attnlib-mask-toggle")
    image = widget.locator("img")
    readout = widget.locator(".attnlib-readout")
    expect(readout).to_contain_text("Causal mask OFF", timeout=60 * MS)
    expect(image).to_have_attribute("src", re.compile(r"^(blob:|data:image/png)"))
    nb.page.wait_for_function(IMAGE_LOADED, arg=image.element_handle())
    widget.scroll_into_view_if_needed()
    before_src = image.get_attribute("src")
    before_png = _shot(widget, "lesson02-mask-widget-off")
    assert "row sums 1.00" in readout.inner_text()

    toggle = widget.get_by_role("button", name="causal mask")
    toggle.focus()
    nb.page.keyboard.press("Space")
    expect(readout).to_contain_text("Causal mask ON", timeout=30 * MS)
    expect(readout).to_contain_text("largest weight above the diagonal 0.00")
    expect(readout).to_contain_text("row sums 1.00")
    expect(image).not_to_have_attribute("src", before_src, timeout=30 * MS)
    nb.page.wait_for_function(IMAGE_LOADED, arg=image.element_handle())
    after_png = _shot(widget, "lesson02-mask-widget-on")
    assert after_png != before_png, "the rendered figure did not change"

    nb.console.check()
    assert time.monotonic() - started < TEST_SECONDS, "the test took too long"


@pytest.mark.lesson02
def test_lesson02_validate_names_the_cell_and_the_mistake(notebook):
    from playwright.sync_api import expect

    started = time.monotonic()
    nb = notebook(ASSIGNMENT)
    solution, _test = _softmax_cells(nb)
    nb.write(solution, WRONG_SOFTMAX)

    # nbgrader's Validate button (it saves the scratch copy, then validates it).
    nb.page.locator(".validate-button").first.click()
    dialog = nb.page.locator(".jp-Dialog")
    expect(dialog).to_be_visible(timeout=90 * MS)
    expect(dialog).to_contain_text("Validation Results", timeout=90 * MS)
    expect(dialog).to_contain_text("The following cell failed")
    expect(dialog).to_contain_text('with report("softmax", softmax)')
    expect(dialog).to_contain_text(WRONG_SOFTMAX_SAYS)
    dialog.get_by_text(WRONG_SOFTMAX_SAYS).first.scroll_into_view_if_needed()
    _shot(nb.page, "lesson02-validate-result")
    # The mistake is told under the softmax cell, not somewhere else in the dialog.
    sections = dialog.inner_text().split("The following cell failed")
    softmax = [s for s in sections if 'with report("softmax", softmax)' in s]
    assert softmax, dialog.inner_text()[:3000]
    assert WRONG_SOFTMAX_SAYS in softmax[0], softmax[0][:3000]
    dialog.locator(".jp-Dialog-button").last.click()
    expect(dialog).to_have_count(0)

    # A dataset pasted into the cell, more than a cell may hold: Validate says what grading
    # would, before a kernel runs anything.
    nb.paste(solution, WRONG_SOFTMAX + PASTED)
    nb.page.locator(".validate-button").first.click()
    expect(dialog).to_contain_text("There was an error running the validate command",
                                   timeout=90 * MS)  # fmt: skip
    said = " ".join(dialog.locator("pre").inner_text().split())  # the words are wrapped
    begins = "(it begins 'def softmax(x, axis=-1):') holds"
    assert (
        f"This notebook would not be graded: cell {solution + 1} of the notebook {begins}" in said
    )
    assert f"more than the {MAX_CELL_SOURCE:,} a cell may hold" in said, said
    dialog.get_by_text("would not be graded").first.scroll_into_view_if_needed()
    _shot(nb.page, "lesson02-validate-refused")
    dialog.locator(".jp-Dialog-button").last.click()
    expect(dialog).to_have_count(0)

    # Nbgrader → Assignment List shows the released lesson.
    nb.menu("Nbgrader", "Assignment List")
    listing = nb.page.locator("#nbgrader-assignment-list")
    expect(listing).to_be_visible(timeout=30 * MS)
    expect(listing.locator("#released_assignments_list")).to_contain_text(
        ASSIGNMENT, timeout=30 * MS
    )
    _shot(nb.page, "lesson02-assignment-list")

    nb.console.check()
    assert time.monotonic() - started < TEST_SECONDS, "the test took too long"
