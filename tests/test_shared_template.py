"""One template for a batch's workers: each worker's sandboxes run as a user id of its own.

``attn-grade batch`` starts one template per lesson (``Template(shared=True)``) and forks its
local workers from its own process; each worker spawns sandboxes from that template through an
:class:`~autograder.template.Attached` handle, as the user id it claimed (as root). The template
keeps only ``CAP_SETUID`` and ``CAP_SETGID``, to start each sandbox as its grader's user id. Each
test runs the graders in a process of their own, as the batch does (the workers are forked from a
process that runs no other thread), attacks from inside the sandboxes, and checks from outside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from course import REPO, env

from autograder import view

LESSON = "02-softmax-masking"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox here: {view.probe()}"),
]

# In a sandbox: who it runs as, what it holds, and whether it can become root or anyone else.
PROBE = r"""
import json, os
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
caps = {k: int(status[k], 16) for k in ("CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd")}
tried = {}
for uid in [0, *OTHERS]:
    try:
        os.setresuid(uid, uid, uid)
        tried[uid] = "became"
    except OSError as error:
        tried[uid] = error.errno
print(json.dumps({"uid": os.getresuid(), "gid": os.getresgid(), "groups": os.getgroups(),
                  "caps": caps, "tried": tried}))
"""

# Two graders forked from a process that started a shared template, as the batch's workers are;
# each runs PROBE in two sandboxes. With "kill", the template is gone before they ask for one.
GRADERS = r"""
import json, os, sys
from autograder import limits as limits_mod
from autograder.limits import Limits
from autograder.runner import Runner
from autograder.template import Attached, Template

lesson, kill, probe = sys.argv[1], sys.argv[2] == "kill", sys.argv[3]
owner = Template(lesson, shared=True)
tree = limits_mod.tree(owner.process.pid)
statuses = {}
for pid in tree:
    try:
        lines = open(f"/proc/{pid}/status").read().splitlines()
    except OSError:
        continue
    status = dict(line.split(":", 1) for line in lines if ":" in line)
    statuses[pid] = {"name": status["Name"].strip(), "uid": int(status["Uid"].split()[0]),
                     "caps": int(status["CapEff"], 16), "ambient": int(status["CapAmb"], 16)}
template = [s for s in statuses.values() if s["name"].startswith("python")]
claims = [owner.claim.uid] if owner.claim else []
if kill:
    os.killpg(owner.process.pid, 9)
    owner.process.wait()
pipes = []
for n in range(2):
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        attached = Attached(owner)
        uid = attached.claim.uid if attached.claim else None
        others = claims + ([uid + 1000] if uid else [])  # the template's id, one nobody holds
        source = probe.replace("OTHERS", repr(others))
        seen = []
        for _ in range(2):
            runner = Runner(attached, Limits(timeout=60, budget=120))
            outputs = runner.run(0, source).outputs
            runner.close()
            seen.append([o.get("text", "") or o.get("evalue", "") for o in outputs])
        own = attached.own is not None
        attached.close()
        os.write(write, json.dumps({"claim": uid, "seen": seen, "own": own}).encode())
        os._exit(0)
    os.close(write)
    pipes.append(read)
graders = []
for read in pipes:
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    graders.append(json.loads(data))
for _ in pipes:
    os.wait()
owner.close()
print(json.dumps({"template": template, "claims": claims, "graders": graders,
                  "root": os.geteuid() == 0}))
"""


# The batch's local pool, made as `attn-grade batch` makes it (in a process with no other thread).
POOL = r"""
import json, sys, time
from autograder import pool

if sys.argv[2] == "fail":  # the batch cannot start the shared template (no user id left, say)
    def refuse(lesson, isolation):
        raise RuntimeError("no template here")
    pool._shared_templates = refuse


def worker():
    import os
    from threadpoolctl import threadpool_info
    from attnlib.checks import _core
    from autograder.pool import _WORKER
    time.sleep(1)  # so that the other worker takes the other call
    from autograder.template import _shared as own
    pair = _WORKER.get("pair") or list(own.values())
    return {"pid": os.getpid(), "templates": [type(t).__name__ for t in pair if t],
            "blas_threads": sorted({i["num_threads"] for i in threadpool_info()}),
            "drawn": _core.drawn.cache_info()._asdict()}

p = pool.Pool(2, sys.argv[1], "namespaces")
calls = [p.executor.submit(worker) for _ in range(2)]
found = [call.result(timeout=300) for call in calls]
print(json.dumps({"shared": [type(t).__name__ for t in p.templates if t], "workers": found}))
p.close()
"""


def pool_workers(fail: bool = False) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", POOL, LESSON, "fail" if fail else "start"], cwd=REPO, env=env(),
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_batchs_workers_are_forked_with_one_template_and_the_checks_drawn_once():
    found = pool_workers()
    assert found["shared"] == ["Template"]  # lesson 02 has no demonstrations' template
    workers = found["workers"]
    assert len({w["pid"] for w in workers}) == 2
    for worker in workers:
        assert worker["templates"] == ["Attached"]
        assert worker["blas_threads"] == [1]  # the workers share the cores
        drawn = worker["drawn"]  # the searches' draws came with the fork: the worker's were hits
        assert drawn["hits"] >= drawn["misses"] == drawn["currsize"] > 0, drawn


def run_graders(kill: bool) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", GRADERS, LESSON, "kill" if kill else "keep", PROBE],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def probes(grader: dict) -> list[dict]:
    found = []
    for outputs in grader["seen"]:
        text = "".join(outputs).strip()
        assert text.startswith("{"), outputs  # the probe ran and printed, no error
        found.append(json.loads(text.splitlines()[-1]))
    return found


def test_each_worker_sandboxes_run_as_its_own_user_id_with_nothing_the_template_holds():
    found = run_graders(kill=False)
    graders = found["graders"]
    assert [g["own"] for g in graders] == [False, False]  # both used the shared template
    seen = [probes(g) for g in graders]
    for probed in (p for ps in seen for p in ps):
        assert all(value == 0 for value in probed["caps"].values()), probed
        assert probed["groups"] == [] or not found["root"]
        assert all(result != "became" for uid, result in probed["tried"].items()
                   if int(uid) != probed["uid"][0]), probed  # fmt: skip
    if not found["root"]:  # no user ids to claim: every process runs as the one user
        assert {tuple(p["uid"]) for ps in seen for p in ps} == {(os.getuid(),) * 3}
        return
    (template,) = found["template"]
    (template_uid,) = found["claims"]
    assert template["uid"] == template_uid != 0
    assert template["caps"] == template["ambient"] == (1 << 6) | (1 << 7)  # SETGID, SETUID only
    uids = [{tuple(p["uid"]) for p in ps} for ps in seen]
    claims = [g["claim"] for g in graders]
    assert uids == [{(claims[0],) * 3}, {(claims[1],) * 3}]  # each grader's sandboxes: its own
    assert len({template_uid, *claims}) == 3 and 0 not in claims
    for ps, claim in zip(seen, claims, strict=True):
        assert all(tuple(p["gid"]) == (claim,) * 3 for p in ps)


def test_a_worker_whose_shared_template_is_gone_starts_its_own():
    found = run_graders(kill=True)
    for grader in found["graders"]:
        assert grader["own"]  # the shared template failed it; it went on with its own
        for probed in probes(grader):
            assert all(value == 0 for value in probed["caps"].values()), probed


def test_workers_start_their_own_templates_when_the_batch_cannot_start_one():
    found = pool_workers(fail=True)
    assert found["shared"] == []
    for worker in found["workers"]:
        assert worker["templates"] == ["Template"]  # its own, warm: it grades as before
        assert worker["blas_threads"] == [1]
