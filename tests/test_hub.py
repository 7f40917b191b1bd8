"""A real JupyterHub runs a class: release, fetch, fill in, submit, collect, grade, feedback.

The hub is started from deploy/jupyterhub_config.py (dummy logins, SimpleLocalProcessSpawner) with
configurable-http-proxy from npm (deploy/node/), on 127.0.0.1 free ports, with everything in a
temporary directory: database, cookie secret, exchange, the users' homes. The test talks to it as
an API service would: the hub's REST API starts the instructor's and a student's servers, and then
only the servers' own APIs are used — nbgrader's formgrader API in the instructor's server
(generate, release, collect, generate and release feedback), nbgrader's assignment-list API and
Jupyter's contents API in the student's server (fetch, fill in, submit, fetch feedback) — except
for the grading itself, which is `attn-grade batch` run on the instructor's course directory as
an instructor would in a terminal. Every process started is stopped and checked gone at the end.
"""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest
from servers import free_port, stop_group

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
BIN = Path(sys.executable).parent
CHP = DEPLOY / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
LESSON = "01-scoring"
COURSE = "attention"
INSTRUCTOR, STUDENT = "instructor", "alice"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]


# --- plumbing ------------------------------------------------------------------------------------


def _ensure_proxy():
    """configurable-http-proxy in deploy/node/, installed from package-lock.json when missing."""
    if CHP.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed (needed for configurable-http-proxy)")
    done = subprocess.run(
        [npm, "ci", "--prefix", str(DEPLOY / "node"), "--no-audit", "--no-fund"],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0 and CHP.exists(), f"npm ci failed:\n{done.stderr}"


class Api:
    """JSON over HTTP with a token, every call bounded in time."""

    def __init__(self, base, token):
        self.base, self.token = base.rstrip("/"), token

    def call(self, method, path, body=None, timeout=60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", f"token {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            status, text = err.code, err.read().decode("utf-8", "replace")
        try:
            return status, json.loads(text) if text else None
        except json.JSONDecodeError:
            return status, text

    def ok(self, method, path, body=None, timeout=60):
        status, reply = self.call(method, path, body, timeout)
        assert 200 <= status < 300, f"{method} {path}: HTTP {status}\n{str(reply)[:2000]}"
        return reply


def _wait(what, predicate, timeout, interval=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- the hub -------------------------------------------------------------------------------------


class Hub:
    def __init__(self, root):
        self.root = root
        self.port = free_port()
        self.token = secrets.token_hex(32)
        self.homes = root / "home"
        self.exchange = root / "exchange"
        self.log_path = root / "jupyterhub.log"
        self.env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "ATTN_HUB_AUTH": "dummy",
            "ATTN_HUB_SPAWNER": "simple",
            "ATTN_HUB_INSTRUCTORS": INSTRUCTOR,
            "ATTN_HUB_STUDENTS": f"{STUDENT},bob",
            "ATTN_HUB_STATE": str(root / "state"),
            "ATTN_HUB_HOMES": str(self.homes),
            "NBGRADER_EXCHANGE_ROOT": str(self.exchange),
            "ATTN_HUB_PORT": str(self.port),
            "ATTN_HUB_HUB_PORT": str(free_port()),
            "ATTN_HUB_PROXY_API_PORT": str(free_port()),
            "ATTN_HUB_SERVICE_TOKEN": self.token,
            "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
        }
        self.api = Api(f"http://127.0.0.1:{self.port}/hub/api", self.token)
        self.proc = None
        self.pids = set()

    def start(self):
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [str(BIN / "jupyterhub"), "-f", str(DEPLOY / "jupyterhub_config.py")],
                cwd=self.root,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pids.add(self.proc.pid)

        def up():
            assert self.proc.poll() is None, f"jupyterhub exited:\n{self.log()}"
            try:
                return self.api.call("GET", "/", timeout=5)[0] == 200
            except OSError:
                return False

        _wait("the hub's API", up, timeout=90)
        self.remember_children()

    def remember_children(self):
        """Record the hub's descendants (proxy, single-user servers) to check they are gone."""
        try:
            self.pids |= {p.pid for p in psutil.Process(self.proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass

    def log(self):
        return self.log_path.read_text(errors="replace")[-6000:]

    def start_server(self, name):
        status, reply = self.api.call("POST", f"/users/{name}/server", timeout=150)
        assert status in (201, 202), (
            f"starting {name}'s server: HTTP {status} {reply}\n{self.log()}"
        )

        def ready():
            server = self.api.ok("GET", f"/users/{name}").get("servers", {}).get("")
            return bool(server and server.get("ready"))

        _wait(f"{name}'s server", ready, timeout=150)
        self.remember_children()
        return Api(f"http://127.0.0.1:{self.port}/user/{name}", self.token)

    def stop(self):
        """Stop the users' servers through the API, then the hub's process group; all bounded."""
        if self.proc is None:
            return
        self.remember_children()
        if self.proc.poll() is None:
            for name in (INSTRUCTOR, STUDENT):
                try:
                    self.api.call("DELETE", f"/users/{name}/server", timeout=30)
                except OSError:
                    pass
            for name in (INSTRUCTOR, STUDENT):
                try:
                    _wait(
                        f"{name}'s server to stop",
                        lambda n=name: not self.api.ok("GET", f"/users/{n}").get("servers"),
                        timeout=30,
                    )
                except (AssertionError, OSError):
                    pass
        stop_group(self.proc, term_grace=30)
        # Anything left (a server in a session of its own) is ours to end, by pid.
        deadline = time.monotonic() + 15
        while (left := [p for p in self.pids if _alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.3)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def hub(tmp_path):
    _ensure_proxy()
    hub = Hub(tmp_path)
    try:
        hub.start()
        yield hub
    finally:
        hub.stop()
        still = [p for p in hub.pids if _alive(p)]
        assert not still, f"processes left running: {still}"
        assert len(hub.pids) >= 4, f"expected hub, proxy and two servers, saw {hub.pids}"


# --- the class -----------------------------------------------------------------------------------


def _solution_sources():
    """grade_id -> the solution cell's source from the course's solutions notebook."""
    nb = json.loads((REPO / "solutions" / LESSON / f"{LESSON}.ipynb").read_text())
    sources = {}
    for cell in nb["cells"]:
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("solution"):
            lines = "".join(cell["source"]).splitlines()
            keep = [
                ln for ln in lines if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
            ]
            sources[meta["grade_id"]] = "\n".join(keep)
    return sources


def _lab_disabled_extensions(server):
    """The JupyterLab extensions a user's /lab page is told to disable."""
    status, html = server.call("GET", "/lab")
    assert status == 200, f"/lab: HTTP {status}"
    start = html.index('<script id="jupyter-config-data" type="application/json">')
    data = html[html.index(">", start) + 1 : html.index("</script>", start)]
    return json.loads(data).get("disabledExtensions", [])


def _formgrader(instructor, action):
    reply = instructor.ok("POST", f"/formgrader/api/assignment/{LESSON}/{action}", timeout=180)
    assert reply.get("success"), f"formgrader {action}:\n{reply.get('error') or reply}"
    return reply


def _assignments(student, action):
    body = {"course_id": COURSE, "assignment_id": LESSON}
    reply = student.ok("POST", f"/assignments/{action}", body, timeout=120)
    assert reply.get("success"), f"assignments/{action}: {reply}"
    return reply["value"]


def test_a_class_on_a_real_hub(hub):
    assert hub.api.ok("GET", "/groups/formgrade-attention")["users"] == [INSTRUCTOR]
    instructor = hub.start_server(INSTRUCTOR)
    student = hub.start_server(STUDENT)
    course = hub.homes / INSTRUCTOR / COURSE
    assert (course / "nbgrader_config.py").is_file(), "the instructor's course was not set up"

    # Students have no formgrader; the instructor's is configured for the course.
    assert student.call("GET", "/formgrader/api/assignments")[0] == 404
    status = instructor.ok("GET", "/formgrader/api/status")
    assert status == {"status": True}, status
    assert "@jupyter/nbgrader:formgrader" in _lab_disabled_extensions(student)
    assert "@jupyter/nbgrader:formgrader" not in _lab_disabled_extensions(instructor)

    # The instructor generates and releases lesson 01 into the exchange.
    _formgrader(instructor, "assign")
    _formgrader(instructor, "release")
    assert (hub.exchange / COURSE / "outbound" / LESSON / f"{LESSON}.ipynb").is_file()

    # The student fetches it, fills in every answer (through the contents API) and submits.
    listed = _assignments(student, "fetch")
    assert any(a["assignment_id"] == LESSON and a["status"] == "fetched" for a in listed), listed
    path = f"/api/contents/{LESSON}/{LESSON}.ipynb"
    model = student.ok("GET", path)
    answers = _solution_sources()
    filled = 0
    for cell in model["content"]["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            assert "raise NotImplementedError()" in cell["source"]
            cell["source"] = answers[grade_id]
            filled += 1
    assert filled == len(answers) >= 4
    student.ok("PUT", path, {"type": "notebook", "format": "json", "content": model["content"]})
    submitted = _assignments(student, "submit")
    assert any(a["status"] == "submitted" for a in submitted), submitted
    inbound = list((hub.exchange / COURSE / "inbound").glob(f"{STUDENT}+{LESSON}+*"))
    assert len(inbound) == 1, inbound

    # Beside it, an entry made by hand in the same name at a later time, holding a named pipe
    # (the demo's servers share one account, so any student could put it there): the course's
    # collect sets it aside and takes the student's own submission; nbgrader's own stops there.
    when = "2099-01-01 00:00:00.000000 UTC"
    planted = hub.exchange / COURSE / "inbound" / f"{STUDENT}+{LESSON}+{when}+handmade"
    planted.mkdir()
    os.mkfifo(planted / "data.csv")

    # The instructor collects and grades with attn-grade, as in a terminal of their server.
    log = _formgrader(instructor, "collect")["log"]
    assert f"Not collected: {planted.name}: data.csv is a named pipe" in log, log
    assert (course / "submitted" / STUDENT / LESSON / f"{LESSON}.ipynb").is_file()
    graded = subprocess.run(
        [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--json"],
        cwd=course,
        env={**hub.env, "HOME": str(hub.homes / INSTRUCTOR)},
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert graded.returncode == 0, f"attn-grade batch:\n{graded.stdout}\n{graded.stderr}"

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", course_id=COURSE) as gb:
        max_score = gb.find_assignment(LESSON).max_score
        score = gb.find_submission(LESSON, STUDENT).score
    assert max_score > 0 and score == max_score, f"{STUDENT} got {score} of {max_score}"
    # The formgrader (in the instructor's server) reads the same gradebook.
    subs = instructor.ok("GET", f"/formgrader/api/submissions/{LESSON}")
    assert [(s["student"], s["score"]) for s in subs] == [(STUDENT, max_score)], subs

    # Feedback is generated and released; the student fetches it into their lesson folder.
    _formgrader(instructor, "generate_feedback")
    _formgrader(instructor, "release_feedback")
    _assignments(student, "fetch_feedback")
    feedback = list((hub.homes / STUDENT / LESSON / "feedback").glob(f"*/{LESSON}.html"))
    assert len(feedback) == 1, f"no feedback in {hub.homes / STUDENT / LESSON}"
    assert "Score" in feedback[0].read_text(errors="replace")
