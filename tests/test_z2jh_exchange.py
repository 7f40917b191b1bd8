"""The Kubernetes deployment's exchange: every student in folders of their own.

On Kubernetes every user's server runs as ``jovyan`` on one shared exchange volume, so file
permissions keep no student out of another's submissions: only what is mounted into which pod
does (deploy/z2jh/values.yaml, autograder/student_folders.py). Here KubeSpawner itself builds the
pods' specs from values.yaml, as Zero to JupyterHub's hub configuration feeds it (offline: it
never reaches a cluster), and each pod is then played by bubblewrap on this machine: one account
for every pod, the exchange volume a folder, each of the spec's mounts of it a bind mount
(read-only where the spec says so), the spec's init container run before the server. Students
run the real ``nbgrader fetch_assignment``/``submit``/``fetch_feedback`` inside their pods; a
student tries what a shared volume would allow; the instructor collects, grades with
``attn-grade batch`` and releases feedback on the whole volume with the course's configuration.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from unittest.mock import patch

import pytest
import yaml
from course import BIN, REPO, make_course
from nbgrader.api import Gradebook

from autograder import view

LESSON = "01-scoring"
COURSE = "attention"
EXCHANGE = "/srv/nbgrader/exchange"  # where values.yaml mounts the exchange volume
FUTURE = "2099-01-01 00:00:00.000000 UTC"
VALUES = REPO / "deploy" / "z2jh" / "values.yaml"
JOVYAN = (1000, 100)  # the account every server runs as, and its group

pytestmark = [pytest.mark.lesson01]
sandboxed = pytest.mark.skipif(view.probe() is not None, reason=f"no sandbox: {view.probe()}")

KUBECONFIG = """apiVersion: v1
kind: Config
current-context: offline
clusters: [{name: offline, cluster: {server: "https://127.0.0.1:9"}}]
contexts: [{name: offline, context: {cluster: offline, user: offline}}]
users: [{name: offline, user: {token: offline}}]
"""


def _values() -> dict:
    return yaml.safe_load(VALUES.read_text(encoding="utf-8"))


def pod_spec(name: str, groups: list[str], tmp_path: Path, profile: dict | None = None) -> dict:
    """The pod KubeSpawner makes for hub user ``name`` from values.yaml (and ``profile``, a
    ``profileList`` entry the user chose, if given): its server's mounts and environment, its
    init containers."""
    from jupyterhub.utils import maybe_future
    from kubespawner import KubeSpawner
    from traitlets.config import Config

    values = _values()
    single = values["singleuser"]
    config = Config()
    exec(values["hub"]["extraConfig"]["attention-course"], {"c": config})
    # what Zero to JupyterHub's hub config sets from the values
    config.KubeSpawner.volume_mounts = [
        {"mountPath": single["storage"]["homeMountPath"], "name": "volume-{user_server}"},
        *single["storage"]["extraVolumeMounts"],
    ]
    config.KubeSpawner.volumes = [
        {
            "name": "volume-{user_server}",
            "persistentVolumeClaim": {"claimName": "claim-{user_server}"},
        },
        *single["storage"]["extraVolumes"],
    ]
    config.KubeSpawner.init_containers = single["initContainers"]
    config.KubeSpawner.environment = single["extraEnv"]
    if profile is not None:
        config.KubeSpawner.profile_list = [{"slug": "chosen", **profile}]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG, encoding="utf-8")
    user = SimpleNamespace(
        name=name, id=1, url=f"/user/{name}/", groups=[SimpleNamespace(name=g) for g in groups]
    )
    from kubernetes_asyncio.client import ApiClient
    from kubernetes_asyncio.config import kube_config

    async def manifest():
        spawner = KubeSpawner(config=config, user=user, _mock=True)
        spawner.api_token = "offline"
        if profile is not None:
            spawner.user_options = {"profile": "chosen"}
        # as JupyterHub and KubeSpawner's start call them
        await maybe_future(spawner.run_pre_spawn_hook())
        await spawner.load_user_options()
        pod = await spawner.get_pod_manifest()
        pod = await maybe_future(spawner.modify_pod_hook(spawner, pod))
        async with ApiClient() as api:  # the pod as it would be sent to Kubernetes
            return api.sanitize_for_serialization(pod)

    # KubeSpawner loads a cluster's address and never connects to it here
    with patch.object(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig)):
        pod = asyncio.run(manifest())
    server = pod["spec"]["containers"][0]
    return {
        "mounts": [m for m in server["volumeMounts"] if m["name"] == "nbgrader-exchange"],
        "env": {e["name"]: e["value"] for e in server["env"] if "value" in e},
        "init": pod["spec"]["initContainers"],
    }


def _exchange_mounts(spec: dict) -> list[tuple[str, str, bool]]:
    return [
        (m["mountPath"], m.get("subPath", ""), m.get("readOnly", False)) for m in spec["mounts"]
    ]


STUDENT, INSTRUCTOR = ["nbgrader-attention"], ["formgrade-attention"]


def test_a_students_pod_mounts_only_its_own_folders_of_the_exchange(tmp_path):
    alice = pod_spec("alice", STUDENT, tmp_path)
    assert _exchange_mounts(alice) == [
        (f"{EXCHANGE}/{COURSE}/outbound", f"{COURSE}/outbound", True),
        (f"{EXCHANGE}/{COURSE}/inbound", f"{COURSE}/students/alice/inbound", False),
        (f"{EXCHANGE}/{COURSE}/feedback", f"{COURSE}/students/alice/feedback", True),
    ], "a student sees what was released, and only their own submissions and feedback"
    (init,) = alice["init"]
    assert {"name": "ATTN_STUDENT", "value": "alice"} in init["env"]
    carol = pod_spec("carol", INSTRUCTOR, tmp_path)
    assert _exchange_mounts(carol) == [(EXCHANGE, "", False)], "an instructor sees it all"
    assert carol["env"]["ATTN_ROLE"] == "instructor" and alice["env"]["ATTN_ROLE"] == "student"
    assert carol["env"]["ATTN_STUDENT_FOLDERS"] == "1"


@pytest.mark.parametrize("name", ["../alice", "a+b", "{username}", "x/y", "-rf", "é"])
def test_a_hub_name_that_cannot_name_a_folder_gets_no_server(name, tmp_path):
    with pytest.raises(ValueError, match="cannot give .* a folder in nbgrader's exchange"):
        pod_spec(name, STUDENT, tmp_path)


WHOLE = {"name": "nbgrader-exchange", "mountPath": EXCHANGE}
SAME_CLAIM = {"name": "more", "persistentVolumeClaim": {"claimName": "nbgrader-exchange"}}


@pytest.mark.parametrize(
    "override",
    [
        {"volume_mounts": [WHOLE]},  # the volume mounted whole
        {"volumes": [SAME_CLAIM], "volume_mounts": [{"name": "more", "mountPath": "/data"}]},
        {"volume_mounts": [{**WHOLE, "subPath": "attention/students/bob/inbound"}]},
    ],
)
def test_a_profile_that_mounts_more_of_the_exchange_gets_a_student_no_server(override, tmp_path):
    """A profile (``kubespawner_override``) is applied after the pre-spawn hook: the pod hook,
    the last word, refuses a student's pod that mounts more of the exchange than their own."""
    profile = {"display_name": "more", "kubespawner_override": override}
    with pytest.raises(ValueError, match="may mount only their own folders"):
        pod_spec("alice", STUDENT, tmp_path, profile)
    carol = pod_spec("carol", INSTRUCTOR, tmp_path, profile)  # an instructor's server may
    assert carol["env"]["ATTN_ROLE"] == "instructor"


# --- the pods, played by bubblewrap ---------------------------------------------------------------


class Pods:
    """The class's pods on one exchange volume (a folder here), all as this test's account."""

    def __init__(self, root: Path):
        self.root = root  # hidden from the pods: they see only what is mounted into them
        self.volume = root / "volume"
        self.volume.mkdir()
        self.config = root / "jupyter"  # the config values.yaml injects (extraFiles)
        self.config.mkdir()
        files = _values()["singleuser"]["extraFiles"]["nbgrader-config"]
        (self.config / "nbgrader_config.py").write_text(files["stringData"], encoding="utf-8")
        # the image's account (Jupyter Docker Stacks): nbgrader takes a student's id from
        # JUPYTERHUB_USER only when the server runs as jovyan
        self.passwd = root / "passwd"
        self.passwd.write_text(f"jovyan:x:{JOVYAN[0]}:{JOVYAN[1]}::/srv/home:/bin/sh\n")
        self.group = root / "group"
        self.group.write_text(f"users:x:{JOVYAN[1]}:\n")

    def _bwrap(self, spec: dict, home: Path | None = None) -> list[str]:
        uid, gid = (str(n) for n in JOVYAN)
        args = ["bwrap", "--unshare-user", "--uid", uid, "--gid", gid, "--unshare-pid",
                "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", str(self.root), "--tmpfs", "/srv", "--ro-bind", str(self.passwd),
                "/etc/passwd", "--ro-bind", str(self.group), "/etc/group"]  # fmt: skip
        for mount in spec["mounts"]:
            source = self.volume / mount.get("subPath", "")
            bind = "--ro-bind" if mount.get("readOnly") else "--bind"
            args += [bind, str(source), mount["mountPath"]]
        if home is not None:
            args += ["--bind", str(home), "/srv/home"]
            args += ["--ro-bind", str(self.config), "/srv/jupyter"]
        return args

    def start(self, spec: dict) -> None:
        """Run the pod's init containers' commands as the spec says (as root there; here as this
        test's account, which owns the folders as jovyan does in the pods)."""
        for init in spec["init"]:
            env = {e["name"]: e["value"] for e in init.get("env", [])}
            env["ATTN_EXCHANGE_OWNER"] = f"{os.getuid()}:{os.getgid()}"
            args = ["bwrap", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/",
                    "--dev", "/dev", "--tmpfs", "/srv"]  # fmt: skip
            for mount in init["volumeMounts"]:
                args += ["--bind", str(self.volume), mount["mountPath"]]
            done = subprocess.run(
                [*args, *init["command"]], env={"PATH": "/usr/bin:/bin", **env},
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, f"init container {init['name']}: {done.stderr}"

    def run(self, spec: dict, home: Path, *argv: str, cwd: str = "/srv/home"):
        """``argv`` in the pod's server: its environment, its mounts, its home."""
        env = {**spec["env"], "HOME": "/srv/home", "JUPYTER_CONFIG_PATH": "/srv/jupyter",
               "PATH": f"{BIN}:/usr/bin:/bin", "LANG": "C.UTF-8"}  # fmt: skip
        return subprocess.run(
            [*self._bwrap(spec, home), "--chdir", cwd, *argv],
            env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        )  # fmt: skip


def _check(done: subprocess.CompletedProcess, what: str) -> str:
    assert done.returncode == 0, f"{what}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.mark.slow
@sandboxed
def test_the_class_submits_and_gets_feedback_through_folders_of_its_own(tmp_path):
    pods = Pods(tmp_path)
    specs = {n: pod_spec(n, STUDENT, tmp_path) for n in ("alice", "bob")}
    specs["carol"] = pod_spec("carol", INSTRUCTOR, tmp_path)
    for spec in specs.values():
        pods.start(spec)
    homes = {n: tmp_path / "homes" / n for n in specs}
    for home in homes.values():
        home.mkdir(parents=True)
    course = make_course(tmp_path / "course", [LESSON])
    instructor = {"ATTN_ROLE": "instructor", "ATTN_COURSE_DIR": str(course),
                  "ATTN_STUDENT_FOLDERS": specs["carol"]["env"]["ATTN_STUDENT_FOLDERS"],
                  "ATTN_CHECK_OWNER": "0", "NBGRADER_EXCHANGE_ROOT": str(pods.volume),
                  "JUPYTER_CONFIG_PATH": str(REPO / "deploy" / "jupyter" / "common")}  # fmt: skip

    def teach(*args: str) -> str:
        env = {**os.environ, **instructor, "PATH": f"{BIN}:{os.environ['PATH']}"}
        done = subprocess.run(args, cwd=course, env=env, capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL)  # fmt: skip
        return _check(done, " ".join(args))

    teach(str(BIN / "nbgrader"), "release_assignment", LESSON, "--force")

    # each student fetches the lesson and submits: alice the solutions, bob the release as it is
    for name in ("alice", "bob"):
        _check(pods.run(specs[name], homes[name], "nbgrader", "fetch_assignment", LESSON), name)
    solved = course / "solutions" / LESSON / f"{LESSON}.ipynb"
    shutil.copy(solved, homes["alice"] / LESSON / f"{LESSON}.ipynb")
    for name in ("alice", "bob"):
        _check(pods.run(specs[name], homes[name], "nbgrader", "submit", LESSON), f"{name} submits")

    # bob, by hand, in his pod: everything a shared exchange would have let him do
    exchange = f"{EXCHANGE}/{COURSE}"
    seen = _check(pods.run(specs["bob"], homes["bob"], "find", EXCHANGE), "find")
    assert "alice" not in seen, f"bob can find nothing of alice's to read or remove:\n{seen}"
    release = f"{exchange}/outbound/{LESSON}/{LESSON}.ipynb"
    replaced = pods.run(specs["bob"], homes["bob"], "sh", "-c", f"echo '{{}}' > '{release}'")
    assert replaced.returncode != 0 and "Read-only file system" in replaced.stderr
    (mine,) = [p for p in (pods.volume / COURSE / "students" / "bob" / "inbound").iterdir()]
    forged = f"alice+{LESSON}+{FUTURE}+forged"
    copied = pods.run(specs["bob"], homes["bob"], "cp", "-r", f"{exchange}/inbound/{mine.name}",
                      f"{exchange}/inbound/{forged}")  # fmt: skip
    _check(copied, "bob writes an entry in alice's name into his own folder")

    # the instructor collects from every student's folder, grades, releases the feedback
    log = teach(str(BIN / "nbgrader"), "collect", LESSON)
    assert f"Not collected: students/bob/inbound/{forged}: it is named for alice but is in the " \
           "folder of bob" in log, log  # fmt: skip
    submitted = course / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == ["alice", "bob"]
    (alices,) = (pods.volume / COURSE / "students" / "alice" / "inbound").iterdir()
    got = (submitted / "alice" / LESSON / f"{LESSON}.ipynb").read_bytes()
    assert got == (alices / f"{LESSON}.ipynb").read_bytes(), "alice is graded on what she sent"
    listed = teach(str(BIN / "nbgrader"), "list", "--inbound")
    assert listed.count(f"{COURSE} alice {LESSON} ") == listed.count(f"{COURSE} bob {LESSON} ") == 1
    assert listed.count("(no feedback available)") == 2, listed
    assert f"Not listed: students/bob/inbound/{forged}: it is named for alice but is in the " \
           "folder of bob" in listed  # the collect's words  # fmt: skip
    teach(str(BIN / "attn-grade"), "batch", LESSON, "--course", str(course), "--no-progress")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        found = gb.find_assignment(LESSON).submissions
        scores = {s.student.id: (s.score, s.max_score) for s in found}
    assert scores["alice"][0] == scores["alice"][1] > 0 and scores["bob"][0] < scores["bob"][1]
    teach(str(BIN / "nbgrader"), "generate_feedback", LESSON)
    teach(str(BIN / "nbgrader"), "release_feedback", LESSON)
    assert not (pods.volume / COURSE / "feedback").exists(), "no feedback where all could list it"

    # each student fetches their own feedback, and sees nobody else's
    pages = {}
    seen = _check(pods.run(specs["bob"], homes["bob"], "find", EXCHANGE), "find")
    alices = [line for line in seen.splitlines() if "alice" in line and forged not in line]
    assert alices == [], f"bob can find nothing of alice's (but his own forgery):\n{seen}"
    for name in ("alice", "bob"):
        listed = pods.run(specs[name], homes[name], "ls", f"{exchange}/feedback")
        assert len(_check(listed, "ls feedback").split()) == 1, f"{name} sees one page: theirs"
        _check(pods.run(specs[name], homes[name], "nbgrader", "fetch_feedback", LESSON), name)
        (page,) = (homes[name] / LESSON / "feedback").glob(f"*/{LESSON}.html")
        theirs = course / "feedback" / name / LESSON / f"{LESSON}.html"  # what the instructor made
        assert page.read_bytes() == theirs.read_bytes(), f"{name} fetched their own page"
        pages[name] = page.read_bytes()
    assert pages["alice"] != pages["bob"]

    # the instructor lists what is in every student's folder, whose feedback waits for them,
    # and is not led anywhere by the links bob leaves there for the listing
    bobs = f"{exchange}/inbound/bob+{LESSON}+{FUTURE}+links"
    links = (f"mkdir '{bobs}' && ln -s /dev/zero '{bobs}/{LESSON}.ipynb' && ln -s /dev/zero "
             f"'{bobs}/submission_secret.txt' && ln -s ../../alice/inbound "
             f"'{exchange}/inbound/bob+{LESSON}+{FUTURE}+alices'")  # fmt: skip
    _check(pods.run(specs["bob"], homes["bob"], "sh", "-c", links), "bob leaves links")
    listed = teach(str(BIN / "nbgrader"), "list", "--inbound")
    lines = [line.split("] ", 1)[-1] for line in listed.splitlines() if f" {LESSON} " in line]
    (sent,) = (pods.volume / COURSE / "students" / "alice" / "inbound").iterdir()
    assert sorted(lines) == sorted([
        f"{COURSE} alice {LESSON} {sent.name.split('+')[2]} (feedback ready to be fetched)",
        f"{COURSE} bob {LESSON} {mine.name.split('+')[2]} (feedback ready to be fetched)",
        f"{COURSE} bob {LESSON} {FUTURE} (no feedback available)",
    ]), listed  # fmt: skip
    assert f"Not listed: students/bob/inbound/bob+{LESSON}+{FUTURE}+alices: it is not a folder" \
        in listed  # fmt: skip
