"""``attn-grade batch --dask``: grading on a Dask cluster, and what happens to clusters mid-batch.

A ``LocalCluster`` of two single-threaded worker processes (with nannies, as on a real cluster)
grades a class of lesson 02; as soon as the first student is recorded one worker is killed with
SIGKILL. Every student must still be graded exactly once, with the scores the local pool gives
the same class, and nothing of the killed worker's sandboxes may be left running. The batch's
connection to its scheduler cut for a moment, or a scheduler started again, costs nothing
either; a scheduler lost for good, or every worker lost with no other joining, stops the batch,
and a rerun grades the rest. Every worker warms its templates as the batch reaches it, or as it
joins during the batch.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from course import BIN, env, make_course
from nbgrader.api import Gradebook
from test_grade_students import STUDENTS, student_notebook, submit

from autograder import history, limits, view
from autograder.journal import journal_entries
from autograder.limits import Limits
from autograder.pool import QUIET_SCHEDULER, DaskPool

LESSON = "02-softmax-masking"
LESSON01 = "01-scoring"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.lesson02,
    pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}"),
]


def _class(course: Path) -> list[str]:
    names = []
    for n, (kind, edits) in enumerate(list(STUDENTS[LESSON].items()) * 2):
        name = f"s{n:02d}-{kind}"
        submit(course, LESSON, name, student_notebook(LESSON, edits))
        names.append(name)
    return names


def _class_course(tmp_path: Path) -> tuple[Path, list[str]]:
    """A course of lesson 02 with its class submitted, and their names."""
    course = make_course(tmp_path, [LESSON])
    return course, _class(course)


@pytest.fixture(scope="module")
def local_scores(tmp_path_factory) -> dict[str, float]:
    """The scores the local pool gives the class (every course of it alike): what grading it on
    a cluster must give, whatever happened to the cluster."""
    course, _ = _class_course(tmp_path_factory.mktemp("local"))
    out, err = (batch := _batch(course, "--workers", "2")).communicate(timeout=600)
    assert batch.returncode == 0, err[-3000:]
    return _scores(course)


def _scores(course: Path, lesson: str = LESSON) -> dict[str, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: s.score for s in gb.find_assignment(lesson).submissions}


def _every_student_graded_once(course: Path, names: list[str], out: str, scores: dict) -> None:
    """The batch's JSON ``out`` says every student ``names`` was graded, the course's history
    records each once, and the gradebook holds ``scores`` (the local pool's)."""
    results = {r["student"]: r for r in json.loads(out)}
    assert sorted(results) == names and {r["status"] for r in results.values()} == {"graded"}
    recorded = [e["student"] for e in history.entries(course, LESSON)]
    assert sorted(recorded) == names  # each student graded once: one line each
    assert _scores(course) == scores
    assert _scores(course)["s00-honest"] == 17.0


def _batch(course: Path, *extra: str, **environ: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--json",
         "--timeout", "20", *extra],
        cwd=course, env=env(**environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _sandboxes_of(pid: int) -> list[int]:
    """The bubblewrap processes (templates) started by worker ``pid``."""
    found = []
    for child in limits.tree(pid)[1:]:
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "bwrap":
                found.append(child)
        except OSError:
            pass
    return found


def test_a_class_graded_on_a_dask_cluster_survives_a_killed_worker(tmp_path, local_scores):
    from distributed import Client, LocalCluster

    course, names = _class_course(tmp_path)

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address=None,
                           scheduler_kwargs=QUIET_SCHEDULER)  # fmt: skip
    client = Client(cluster)
    try:
        batch = _batch(course, "--dask", cluster.scheduler_address)
        deadline = time.monotonic() + 300
        while not list(history.entries(course, LESSON)) and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = client.run(os.getpid)
        victim = sorted(pids.values())[0]
        templates = _sandboxes_of(victim)
        assert batch.poll() is None, "the batch ended before a worker could be killed"
        os.kill(victim, signal.SIGKILL)  # a worker dies mid-batch
        out, err = batch.communicate(timeout=600)
    finally:
        client.close()
        cluster.close()

    assert batch.returncode == 0, err[-3000:]
    _every_student_graded_once(course, names, out, local_scores)
    assert templates, "the killed worker had started no sandbox template"
    deadline = time.monotonic() + 20
    while any(map(limits.alive, templates)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(limits.alive, templates))  # they died with their worker


def test_a_cluster_out_of_reach_or_a_malformed_address_is_one_clear_error(tmp_path):
    """No traceback, nothing graded or written: the address, why, and status 2."""
    course = make_course(tmp_path, [LESSON])
    submit(course, LESSON, "early", student_notebook(LESSON, {}))
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cases = {
        f"tcp://127.0.0.1:{port}": "Timed out trying to connect",
        "http://127.0.0.1:8786": "unknown address scheme 'http'",
        "tcp://no-such-host.invalid:8786": "cannot reach the Dask scheduler",
    }
    for address, why in cases.items():
        done = subprocess.run(
            [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--json",
             "--dask", address],
            cwd=course, env=env(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s"),
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, (address, done.stderr[-2000:])
        assert json.loads(done.stdout) == []
        assert f"attn-grade batch: cannot reach the Dask scheduler at {address}: " in done.stderr
        assert why in done.stderr and "Traceback" not in done.stderr, (address, done.stderr)
    printed = "gateway://127.0.0.1:8000/0123abcd"  # a Gateway cluster's scheduler_address
    done = subprocess.run(
        [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--dask", printed],
        cwd=course, env=env(), capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "pass --dask gateway:0123abcd" in done.stderr, done.stderr
    done = subprocess.run(
        [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--dask", "local:1"],
        cwd=course, env=env(DASK_ATTN_GRADE__WORKER_WAIT="soon"), capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "attn-grade.worker-wait is 'soon', not a time (90s, 10 minutes)" in done.stderr
    for spec in ("local:0", "local:two"):
        done = subprocess.run(
            [str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--dask", spec],
            cwd=course, env=env(), capture_output=True, text=True, stdin=subprocess.DEVNULL,
            timeout=60,
        )  # fmt: skip
        assert done.returncode == 2 and "local:N needs a whole number of workers" in done.stderr
    assert not (course / "autograded").exists() and not (course / ".attn-grade").exists()


class _Cluster:
    """A Dask scheduler on 127.0.0.1:``port`` and ``workers`` one-thread workers, each a process
    of its own started by Dask's command line, as on a real cluster."""

    def __init__(self, port: int, workers: int):
        self.address, self.workers = f"tcp://127.0.0.1:{port}", workers
        self.started: list[subprocess.Popen] = []
        self.scheduler = self.start()

    def spawn(self, *args: str) -> subprocess.Popen:
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL,
                 "stderr": subprocess.DEVNULL}  # fmt: skip
        command = [str(BIN / "dask"), *args, "--no-dashboard"]
        self.started.append(subprocess.Popen(command, env=env(), start_new_session=True, **quiet))
        return self.started[-1]

    def start(self) -> subprocess.Popen:
        """Start the scheduler and its workers; return the scheduler's process once they are
        all connected."""
        from distributed import Client

        port = self.address.rsplit(":", 1)[1]
        scheduler = self.spawn("scheduler", "--host", "127.0.0.1", "--port", port)
        for _ in range(self.workers):
            self.spawn("worker", self.address, "--nthreads", "1")
        with Client(self.address, timeout="60s") as client:
            if self.workers:
                client.wait_for_workers(self.workers, timeout=120)
        return scheduler

    def kill(self) -> None:
        """Kill everything started, each with its own children."""
        for process in self.started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def _cluster(port: int, workers: int = 2):
    """A :class:`_Cluster`, killed at the end; yields its scheduler's process."""
    cluster = _Cluster(port, workers)
    try:
        yield cluster.scheduler
    finally:
        cluster.kill()


class _Relay:
    """A TCP relay from a free port of 127.0.0.1 to ``port``, as a network between the batch and
    its scheduler; :meth:`cut` closes every connection it relays (a moment's outage), and it goes
    on taking new ones."""

    def __init__(self, port: int):
        self.target = port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                near, _ = self.server.accept()
                try:
                    far = socket.create_connection(("127.0.0.1", self.target), timeout=5)
                except OSError:  # nothing there (a scheduler down): as a refused connection
                    near.close()
                    continue
                far.settimeout(None)
                self.open += [near, far]
                for one, other in ((near, far), (far, near)):
                    threading.Thread(target=self._pump, args=(one, other), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        for end in self.open:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()
        self.open = []

    def close(self) -> None:
        self.server.close()
        self.cut()


def test_a_scheduler_or_every_worker_lost_stops_the_batch_and_a_rerun_grades_the_rest(
    tmp_path, local_scores
):
    """The Dask scheduler killed mid-batch: the batch stops with one line that says so and how
    many students it graded, status 2, no traceback; no student is recorded with an error that
    is not theirs. So does a rerun on a cluster that loses every worker and keeps its scheduler,
    and one whose scheduler is started again with no worker, saying that no worker came. A last
    run on a new cluster grades the others, each student once in all, with the scores the local
    pool gives."""
    course, names = _class_course(tmp_path)
    port = _free_port()
    with _cluster(port) as scheduler:  # (its client waits 5 s, not 30, for it to come back)
        batch = _batch(course, "--dask", f"tcp://127.0.0.1:{port}",
                       DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="5s")  # fmt: skip
        deadline = time.monotonic() + 300
        while len(list(history.entries(course, LESSON))) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert batch.poll() is None, "the batch ended before its scheduler could be killed"
        scheduler.kill()
        out, err = batch.communicate(timeout=600)
    assert batch.returncode == 2, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    journal = journal_entries(course, LESSON)
    assert {e["status"] for e in journal.values()} == {"graded"}  # nobody blamed for the loss
    first = set(journal)
    assert 3 <= len(first) < len(names)
    said = (f"attn-grade batch: the Dask scheduler at tcp://127.0.0.1:{port} was lost: "
            f"{len(first)} student(s) graded, {len(names) - len(first)} not yet; run the batch "
            "again to grade them")  # fmt: skip
    assert said in err, err[-3000:]

    # Run again on a cluster whose every worker dies mid-batch, its scheduler left running; then
    # on one whose scheduler dies with them and is started again on its address with no worker
    # (a supervisor that restarts only the scheduler; the batch connects to it again). No worker
    # comes for attn-grade.worker-wait (4 s here, ten minutes unless configured), and the batch
    # stops as for a lost scheduler, in one line that says so.
    graded_before = first
    for scheduler_too in (False, True):
        cluster, rerun = _Cluster(_free_port(), workers=2), None
        try:
            rerun = _batch(course, "--dask", cluster.address, DASK_ATTN_GRADE__WORKER_WAIT="4s")
            _graded(course, len(graded_before) + 1, rerun)
            for process in cluster.started[0 if scheduler_too else 1 :]:  # (each with its nanny)
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            if scheduler_too:
                cluster.workers = 0
                cluster.scheduler = cluster.start()
            out, err = rerun.communicate(timeout=120)
        finally:
            if rerun is not None and rerun.poll() is None:  # still waiting: not left behind
                rerun.kill()
                rerun.wait()
            cluster.kill()
        assert rerun.returncode == 2, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        journal = journal_entries(course, LESSON)
        assert {e["status"] for e in journal.values()} == {"graded"}
        now = set(journal) - graded_before
        assert now and len(journal) < len(names)
        said = (f"attn-grade batch: the Dask scheduler at {cluster.address} had no worker for "
                f"4 s: {len(now)} student(s) graded, {len(names) - len(journal)} not yet; run "
                "the batch again to grade them")  # fmt: skip
        assert said in err, err[-3000:]
        graded_before = set(journal)

    port = _free_port()
    with _cluster(port):
        rerun = _batch(course, "--dask", f"tcp://127.0.0.1:{port}")
        out, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err[-3000:]
    results = {r["student"]: r["status"] for r in json.loads(out)}
    assert results == {name: "skipped" if name in graded_before else "graded" for name in names}
    recorded = [e["student"] for e in history.entries(course, LESSON)]
    assert sorted(recorded) == names  # each student graded once, across the three runs
    assert _scores(course) == local_scores


def _graded(course: Path, n: int, batch: subprocess.Popen) -> None:
    """Wait until ``n`` students of the batch are recorded; it must still be running."""
    deadline = time.monotonic() + 300
    while len(list(history.entries(course, LESSON))) < n and time.monotonic() < deadline:
        if batch.poll() is not None:
            break
        time.sleep(0.1)
    assert batch.poll() is None, (f"the batch ended before {n} students were graded",
                                  batch.communicate()[1][-3000:])  # fmt: skip


def test_a_scheduler_out_of_reach_for_a_moment_or_started_again_costs_nobody_anything(
    tmp_path, local_scores
):
    """Dask cancels every future of a client that loses its connection to the scheduler, even
    for a moment. The batch's connection is cut once (a network's outage: a relay in between
    drops it), then its scheduler is killed and started again on the same address, with new
    workers (as a cluster's supervisor does). Each time the batch connects again, sends again
    what was not graded and says so in one line; it exits 0, every student graded once, with
    the scores the local pool gives."""
    course, names = _class_course(tmp_path)
    cluster = _Cluster(_free_port(), workers=2)
    relay = _Relay(int(cluster.address.rsplit(":", 1)[1]))
    try:
        batch = _batch(course, "--dask", f"tcp://127.0.0.1:{relay.port}")
        _graded(course, 3, batch)
        relay.cut()
        _graded(course, 8, batch)
        for process in cluster.started:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        cluster.scheduler = cluster.start()
        out, err = batch.communicate(timeout=600)
    finally:
        relay.close()
        cluster.kill()
    assert batch.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    said = [line for line in err.splitlines() if "came back" in line]
    where = f"the Dask scheduler at tcp://127.0.0.1:{relay.port}"
    assert len(said) == 2, err[-3000:]
    for n, line in enumerate(said, 1):
        assert line.startswith(f"attn-grade batch: the connection to {where} was lost and came "
                               "back; the "), line  # fmt: skip
        assert line.endswith(f"were sent again (reconnection {n} of the 3 a batch gets)"), line
    _every_student_graded_once(course, names, out, local_scores)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def gateway(tmp_path):
    """A real dask-gateway-server on 127.0.0.1: password login, its clusters' schedulers and
    workers local processes of this venv (``UnsafeLocalBackend``), one thread per worker.
    Yields the Dask configuration (as environment variables) a grader needs to reach it."""
    api, proxy, password = _free_port(), _free_port(), "instructors-only"
    config = tmp_path / "gateway_config.py"
    config.write_text(
        f'c.DaskGateway.backend_class = "dask_gateway_server.backends.local.UnsafeLocalBackend"\n'
        f'c.DaskGateway.address = "127.0.0.1:{api}"\n'
        f'c.Proxy.address = "127.0.0.1:{proxy}"\n'
        f'c.DaskGateway.authenticator_class = "dask_gateway_server.auth.SimpleAuthenticator"\n'
        f'c.SimpleAuthenticator.password = "{password}"\n'
        f"c.ClusterConfig.worker_cores = 1\n"
        f"c.ClusterConfig.worker_threads = 1\n"
        f'c.ClusterConfig.scheduler_cmd = ["{BIN / "dask"}", "scheduler"]\n'
        f'c.ClusterConfig.worker_cmd = ["{BIN / "dask"}", "worker"]\n'
        f'c.LocalBackend.clusters_directory = "{tmp_path / "clusters"}"\n'
    )
    log = open(tmp_path / "gateway.log", "w")  # closed below, after the server
    server = subprocess.Popen(
        [str(BIN / "dask-gateway-server"), "-f", str(config)], cwd=tmp_path, env=env(),
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{proxy}/api/health", timeout=2):
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "gateway.log"
                ).read_text()[-3000:]
                time.sleep(0.3)
        yield {
            "DASK_GATEWAY__ADDRESS": f"http://127.0.0.1:{proxy}",
            "DASK_GATEWAY__AUTH__TYPE": "basic",
            "DASK_GATEWAY__AUTH__KWARGS": json.dumps({"username": "teacher", "password": password}),
        }
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()


# What an instructor does with dask-gateway's client, in a process of its own: start a cluster of
# two workers and print its name, list the clusters, or stop one.
INSTRUCTOR = """
import sys
from dask_gateway import Gateway

gateway = Gateway()
if sys.argv[1] == "start":
    cluster = gateway.new_cluster(shutdown_on_close=False)
    cluster.scale(2)
    with cluster.get_client(set_as_default=False) as client:
        client.wait_for_workers(2, timeout=180)
    print(cluster.name)
elif sys.argv[1] == "list":
    print(" ".join(cluster.name for cluster in gateway.list_clusters()))
else:
    gateway.stop_cluster(sys.argv[2])
"""


@pytest.mark.lesson01
def test_a_class_graded_on_a_dask_gateway_cluster_by_its_name(tmp_path, gateway):
    """``--dask gateway:NAME``: the instructor's cluster, reached through the gateway with the
    Dask configuration a hub gives its users; the scores the local pool gives; the cluster left
    running for the instructor; a name the gateway does not know is one clear error."""

    def instructor(*args: str) -> str:
        done = subprocess.run(
            [str(BIN / "python"), "-c", INSTRUCTOR, *args], env=env(**gateway),
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip()

    def batch(course: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(BIN / "attn-grade"), "batch", LESSON01, "--course", str(course), "--json",
             *extra],
            cwd=course, env=env(**gateway), capture_output=True, text=True,
            stdin=subprocess.DEVNULL, timeout=600,
        )  # fmt: skip

    (tmp_path / "gw").mkdir()
    (tmp_path / "local").mkdir()
    course = make_course(tmp_path / "gw", [LESSON01])  # lesson 01: templates without PyTorch
    students = list(STUDENTS[LESSON01])[:3]  # honest, blank and one classic mistake
    for kind in students:
        submit(course, LESSON01, kind, student_notebook(LESSON01, STUDENTS[LESSON01][kind]))
    shutil.copytree(course, tmp_path / "local", dirs_exist_ok=True)
    name = instructor("start")
    try:
        done = batch(course, "--dask", f"gateway:{name}")
        still_there = instructor("list").split()
        wrong = batch(course, "--force", "--dask", "gateway:no-such-cluster")
    finally:
        instructor("stop", name)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    results = {r["student"]: r for r in json.loads(done.stdout)}
    assert sorted(results) == sorted(students)
    assert {r["status"] for r in results.values()} == {"graded"}
    local = batch(tmp_path / "local", "--workers", "1")
    assert local.returncode == 0, local.stderr[-3000:]
    scores = _scores(course, LESSON01)
    assert scores == _scores(tmp_path / "local", LESSON01)
    assert scores["honest"] == results["honest"]["max_score"] > scores["blank"] == 0.0
    assert name in still_there  # the batch closed its client, not the instructor's cluster
    assert wrong.returncode == 2 and json.loads(wrong.stdout) == []
    assert "cannot reach the Dask Gateway cluster 'no-such-cluster'" in wrong.stderr
    assert "Traceback" not in wrong.stderr, wrong.stderr[-2000:]


def test_a_local_cluster_grades_and_leaves_the_dashboard_port_to_others(tmp_path):
    """``--dask local:N`` starts its own cluster; another one on the machine (port 8787 held)
    costs it nothing, not even a warning: its scheduler serves on a free port of 127.0.0.1."""
    course = make_course(tmp_path / "course", [LESSON])
    submit(course, LESSON, "honest", student_notebook(LESSON, {}))
    with socket.socket() as other:
        try:
            other.bind(("127.0.0.1", 8787))
            other.listen()
        except OSError:
            pass  # held by someone else already: the same for the batch
        done = _batch(course, "--dask", "local:1")
        out, err = done.communicate(timeout=300)
    assert done.returncode == 0, err
    assert json.loads(out)[0]["status"] == "graded", out
    assert _scores(course) == {"honest": 17}
    assert "already in use" not in err, err


def _templates_of(pid: int) -> set[int]:
    """The sandbox templates worker ``pid`` runs: its bubblewrap children."""
    found = set()
    for child in _sandboxes_of(pid):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{child}/status").read_text()
            if f"\nPPid:\t{pid}\n" in status:
                found.add(child)
    return found


def _until(condition, seconds: float = 60) -> bool:
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.1)
    return condition()


def test_workers_warm_a_template_per_thread_when_a_batch_starts_and_as_they_join(tmp_path):
    """A batch on a cluster has every worker start its templates at once, one per thread, before
    any submission arrives; a submission then finds one warm (no other is started); a worker that
    joins mid-batch warms its own as it joins (after a second batch of the lesson came and went);
    and when the batch ends the templates no thread took are closed, while the one a thread
    graded with stays warm for the next batch."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                           host="127.0.0.1", dashboard_address=None,
                           scheduler_kwargs=QUIET_SCHEDULER)  # fmt: skip
    client = Client(cluster)
    try:
        (first,) = client.run(os.getpid).values()
        assert not _templates_of(first)
        batch = DaskPool(cluster.scheduler_address, LESSON, "namespaces")
        try:
            assert _until(lambda: len(_templates_of(first)) == 2), _templates_of(first)
            warm = _templates_of(first)
            honest = json.dumps(student_notebook(LESSON, {}))
            graded = batch.outcome(batch.send(Limits(), honest, {}, "honest"))
            assert graded["verdicts"] and all(v["passed"] for v in graded["verdicts"]), graded
            assert _templates_of(first) == warm  # the grading took one of them
            # a second batch of the lesson on the cluster (another section), started and ended
            # while this one goes on, neither replaces its warm-up nor closes its spare
            DaskPool(cluster.scheduler_address, LESSON, "namespaces").close()
            assert _templates_of(first) == warm

            cluster.scale(2)
            client.wait_for_workers(2, timeout=120)
            (joined,) = set(client.run(os.getpid).values()) - {first}
            assert _until(lambda: len(_templates_of(joined)) == 2), _templates_of(joined)
        finally:
            batch.close()
        assert _until(lambda: not _templates_of(joined)), _templates_of(joined)
        assert _until(lambda: len(_templates_of(first)) == 1)
        assert _templates_of(first) < warm  # the thread's own, kept
    finally:
        client.close()
        cluster.close()


def test_a_killed_batch_leaves_no_worker_warming_for_it(tmp_path):
    """A batch killed before it closes (SIGKILL: no ``finally`` runs) still takes its warm-up
    off the cluster: the scheduler drops the batch's plugin as the batch's client leaves, so a
    worker that joins later starts no template for a batch that is gone, and the spares no
    thread took are closed."""
    from distributed import Client, LocalCluster

    course = make_course(tmp_path, [LESSON])
    _class(course)
    cluster = LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                           host="127.0.0.1", dashboard_address=None,
                           scheduler_kwargs=QUIET_SCHEDULER)  # fmt: skip
    client = Client(cluster)
    plugins = cluster.scheduler.worker_plugins
    try:
        (first,) = client.run(os.getpid).values()
        batch = _batch(course, "--dask", cluster.scheduler_address)
        try:
            assert _until(lambda: len(_templates_of(first)) == 2, 120), _templates_of(first)
            assert any(name.startswith("attn-grade-warm-") for name in plugins), list(plugins)
            assert batch.poll() is None, "the batch ended before it could be killed"
        finally:
            batch.kill()  # as an instructor's closed terminal or the OOM killer would
            batch.communicate(timeout=60)
        assert _until(lambda: not any(n.startswith("attn-grade-warm-") for n in plugins), 30), list(
            plugins
        )
        # the spares go; a template a thread was grading with, if any, stays for the next batch
        assert _until(lambda: len(_templates_of(first)) < 2, 60), _templates_of(first)

        cluster.scale(2)
        client.wait_for_workers(2, timeout=120)
        (joined,) = set(client.run(os.getpid).values()) - {first}
        time.sleep(10)  # a joining worker's warm-up shows within seconds (the test above)
        assert not _templates_of(joined)
    finally:
        client.close()
        cluster.close()
