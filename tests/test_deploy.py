"""deploy/: the single-machine hub config, the Kubernetes image and Helm values, and the guide.

The image installs this project (`pip install .`) and nothing else, so its dependencies are
pyproject.toml's by construction; the values file parses and sets what docs/instructors.md
promises; the hub config loads and does what the guide says. tests/test_hub.py runs a real hub.
"""

import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import tempfile
import tomllib
from pathlib import Path

import pytest
import yaml
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
Z2JH = DEPLOY / "z2jh"
DOCS = REPO / "docs" / "instructors.md"
EXCHANGE = "/srv/nbgrader/exchange"
COURSE_ID = "attention"


def _values():
    return yaml.safe_load((Z2JH / "values.yaml").read_text(encoding="utf-8"))


def _dig(tree, dotted):
    for key in dotted.split("."):
        assert isinstance(tree, dict) and key in tree, f"values.yaml has no {dotted}"
        tree = tree[key]
    return tree


# --- the image -----------------------------------------------------------------------------------


def _dockerfile():
    """(instruction, argument) pairs of deploy/z2jh/Dockerfile, continuation lines joined."""
    text = (Z2JH / "Dockerfile").read_text(encoding="utf-8")
    text = re.sub(r"\\\n", " ", text)
    steps = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, arg = line.partition(" ")
            steps.append((instruction.upper(), arg.strip()))
    return steps


def _pip_installs(steps):
    """Every `pip install` in a RUN step: (workdir, [arguments])."""
    found, workdir = [], "/"
    for instruction, arg in steps:
        if instruction == "WORKDIR":
            workdir = arg
        if instruction != "RUN":
            continue
        for command in re.split(r"&&|;", arg):
            words = shlex.split(command)
            for i in range(len(words) - 1):
                if words[i].endswith("pip") and words[i + 1] == "install":
                    found.append((workdir, words[i + 2 :]))
    return found


def test_image_is_based_on_the_jupyter_docker_stacks():
    steps = _dockerfile()
    args = dict(a.split("=", 1) for i, a in steps if i == "ARG" and "=" in a)
    froms = [a for i, a in steps if i == "FROM"]
    assert froms == ["${BASE_IMAGE}"]
    assert args["BASE_IMAGE"].startswith("quay.io/jupyter/scipy-notebook:")


def test_image_installs_this_project_and_nothing_else():
    """The image's dependencies are pyproject.toml's: pip installs `.`, the copied project."""
    steps = _dockerfile()
    installs = _pip_installs(steps)
    assert len(installs) == 1, f"one pip install, of the project, expected: {installs}"
    workdir, words = installs[0]
    options_with_value = {"--extra-index-url", "--index-url"}
    targets, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in options_with_value:
            skip = True
        elif not word.startswith("-"):
            targets.append(word)
    assert targets == ["."], f"pip install should install only the project, not {targets}"
    assert "--no-cache-dir" in words

    # `.` is the project: pyproject.toml, its readme and every package it declares were copied
    # to the directory pip runs in.
    copied = {}
    for instruction, arg in steps:
        if instruction == "COPY" and not arg.startswith("--from"):
            *sources, dest = [w for w in shlex.split(arg) if not w.startswith("--")]
            for src in sources:
                assert (REPO / src).exists(), f"the Dockerfile copies {src}, which does not exist"
                copied[src.rstrip("/")] = dest
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    needed = ["pyproject.toml", project["project"]["readme"]]
    needed += [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    for name in dict.fromkeys(needed):
        assert name in copied, f"the image does not copy {name}"
        assert copied[name].rstrip("/") in (workdir, f"{workdir}/{name}"), (name, copied[name])


def test_image_removes_what_the_makefile_removes():
    """The packages the Makefile uninstalls after installing (slow to import, unused) leave the
    image too, in the step that installs the project."""
    from test_packaging import SLOW_IMPORTS

    (run,) = [a for i, a in _dockerfile() if i == "RUN" and "pip install" in a]
    commands = [shlex.split(c) for c in re.split(r"&&|;", run)]
    installs = [n for n, w in enumerate(commands) if w[:2] == ["pip", "install"]]
    removes = [w for w in commands[installs[0] + 1 :] if w[:2] == ["pip", "uninstall"]]
    removed = [word for r in removes for word in r[2:] if not word.startswith("-")]
    assert sorted(removed) == sorted(SLOW_IMPORTS), removes


def test_image_takes_torch_from_the_cpu_index():
    ((_, words),) = _pip_installs(_dockerfile())
    assert "--extra-index-url" in words
    index = words[words.index("--extra-index-url") + 1]
    args = dict(a.split("=", 1) for i, a in _dockerfile() if i == "ARG" and "=" in a)
    assert (
        index == "${TORCH_INDEX}" and args["TORCH_INDEX"] == "https://download.pytorch.org/whl/cpu"
    )


def test_image_holds_the_course_and_the_config_the_values_point_to():
    steps = _dockerfile()
    copies = " ".join(a for i, a in steps if i == "COPY")
    for part in ("nbgrader_config.py", "solutions/", "lessons/", "deploy/jupyter/"):
        assert part in copies, f"the image should contain {part}"
    assert "deploy/jupyter/common/nbgrader_config.py /etc/jupyter/nbgrader_config.py" in copies
    student_path = _dig(_values(), "hub.extraConfig")["attention-course"]
    assert "/opt/attention-course/deploy/jupyter/student" in student_path
    assert (DEPLOY / "jupyter" / "student" / "jupyter_server_config.json").is_file()


# --- the Helm values -----------------------------------------------------------------------------


def test_values_mount_the_exchange_on_a_shared_volume():
    values = _values()
    storage = _dig(values, "singleuser.storage")
    volumes = {v["name"]: v for v in storage["extraVolumes"]}
    mounts = {m["mountPath"]: m["name"] for m in storage["extraVolumeMounts"]}
    assert EXCHANGE in mounts, f"nothing is mounted at {EXCHANGE}: {mounts}"
    claim = volumes[mounts[EXCHANGE]]["persistentVolumeClaim"]["claimName"]

    pvc = yaml.safe_load((Z2JH / "exchange-pvc.yaml").read_text(encoding="utf-8"))
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["metadata"]["name"] == claim
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], "every pod mounts the exchange at once"

    assert _dig(values, "singleuser.extraEnv")["NBGRADER_EXCHANGE_ROOT"] == EXCHANGE
    init = {c["name"]: c for c in _dig(values, "singleuser.initContainers")}
    folders = init["nbgrader-exchange-folders"]  # what it makes: tests/test_z2jh_exchange.py
    assert "0777" not in " ".join(folders["command"]), "no folder of the exchange is everyone's"
    assert folders["volumeMounts"] == [{"name": mounts[EXCHANGE], "mountPath": EXCHANGE}]


def test_values_inject_the_course_config():
    files = _dig(_values(), "singleuser.extraFiles")
    config = files["nbgrader-config"]
    assert config["mountPath"] == "/etc/jupyter/nbgrader_config.py"
    common = (DEPLOY / "jupyter" / "common" / "nbgrader_config.py").read_text(encoding="utf-8")
    assert config["stringData"] == common, "values.yaml and deploy/jupyter/common disagree"
    assert f'c.CourseDirectory.course_id = "{COURSE_ID}"' in common
    assert f'"NBGRADER_EXCHANGE_ROOT", "{EXCHANGE}"' in common


def test_values_limit_each_student_and_cull_idle_servers():
    values = _values()
    single = values["singleuser"]
    assert 0 < single["cpu"]["guarantee"] <= single["cpu"]["limit"]
    units = {"M": 1, "G": 1024}
    mem = {k: float(v[:-1]) * units[v[-1]] for k, v in single["memory"].items()}
    assert 0 < mem["guarantee"] <= mem["limit"]
    assert values["cull"]["enabled"] is True
    assert 0 < values["cull"]["timeout"] <= 4 * 3600
    assert single["image"]["name"] and single["image"]["tag"]


def test_values_groups_and_spawn_hook():
    values = _values()
    groups = _dig(values, "hub.config.JupyterHub.load_groups")
    assert set(groups) == {f"formgrade-{COURSE_ID}", f"nbgrader-{COURSE_ID}"}
    hook = _dig(values, "hub.extraConfig")["attention-course"]
    compile(hook, "hub.extraConfig.attention-course", "exec")
    assert "c.KubeSpawner.pre_spawn_hook" in hook and f"formgrade-{COURSE_ID}" in hook
    post = " ".join(_dig(values, "singleuser.lifecycleHooks.postStart.exec.command"))
    for part in ("nbgrader_config.py", "solutions", "lessons", "$ATTN_COURSE_DIR"):
        assert part in post


def _promises():
    """Rows `| `dotted.key` | `value` |` of the table after "What `values.yaml` sets"."""
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("What `values.yaml` sets")
    section = text[start : text.find("\n## ", start)]
    rows = re.findall(r"^\|\s*`([a-zA-Z][\w.-]*)`\s*\|\s*`([^`]*)`\s*\|", section, re.M)
    return dict(rows)


def test_values_set_what_the_instructors_guide_promises():
    promises = _promises()
    for key in (
        "singleuser.image.name",
        "singleuser.cpu.guarantee",
        "singleuser.cpu.limit",
        "singleuser.memory.guarantee",
        "singleuser.memory.limit",
        "singleuser.storage.extraVolumeMounts.mountPath",
        "singleuser.extraEnv.NBGRADER_EXCHANGE_ROOT",
        "cull.enabled",
        "cull.timeout",
    ):
        assert key in promises, f"docs/instructors.md does not say what {key} is"
    values = _values()
    for key, promised in promises.items():
        parent, _, leaf = key.rpartition(".")
        items = _dig(values, parent) if parent else None
        if isinstance(items, list):  # e.g. extraVolumeMounts.mountPath: one of the list's items
            actual = [item.get(leaf) for item in items]
            assert promised in actual, f"{key}: the guide says {promised}, values have {actual}"
            continue
        actual = _dig(values, key)
        if isinstance(actual, bool):
            actual = str(actual).lower()
        assert str(actual) == promised, f"{key}: the guide says {promised}, values say {actual}"


# --- the single-machine hub config ---------------------------------------------------------------


@pytest.mark.parametrize("role", ["instructor", "student"])
def test_the_shared_config_gives_instructors_the_courses_collect(role, monkeypatch):
    """An instructor's course directory copied before the course had its own collect, feedback
    release and inbound list still uses them; students never collect, and list as nbgrader does."""
    from nbgrader.exchange import ExchangeFactory

    from autograder.collect import CheckedCollect
    from autograder.student_folders import FolderList, FolderReleaseFeedback

    monkeypatch.setenv("ATTN_ROLE", role)
    config = PyFileConfigLoader("nbgrader_config.py", path=str(DEPLOY / "jupyter" / "common"))
    factory = ExchangeFactory(config=config.load_config())
    ours = (factory.collect, factory.release_feedback, factory.list)
    theirs = (CheckedCollect, FolderReleaseFeedback, FolderList)
    assert [a is b for a, b in zip(ours, theirs, strict=True)] == [role == "instructor"] * 3, ours


def _load_hub_config(tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ATTN_HUB_", "NBGRADER_"))}
    base.update(ATTN_HUB_STATE=str(tmp_path / "state"))
    base.update({"NBGRADER_EXCHANGE_ROOT": str(tmp_path / "exchange"), **env})
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(base)
    try:
        loader = PyFileConfigLoader("jupyterhub_config.py", path=str(DEPLOY))
        return loader.load_config()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_hub_config_defaults_are_for_a_real_class(tmp_path):
    c = _load_hub_config(tmp_path, ATTN_HUB_INSTRUCTORS="ada", ATTN_HUB_STUDENTS="bo,cy")
    assert c.JupyterHub.authenticator_class == "pam"
    assert c.JupyterHub.spawner_class == "localprocess"
    assert c.JupyterHub.bind_url == "http://127.0.0.1:8000"
    assert c.JupyterHub.load_groups == {
        f"formgrade-{COURSE_ID}": {"users": ["ada"]},
        f"nbgrader-{COURSE_ID}": {"users": ["bo", "cy"]},
    }
    assert c.Authenticator.allowed_users == {"ada", "bo", "cy"}
    assert str(tmp_path / "state") in c.JupyterHub.db_url
    mode = (tmp_path / "exchange").stat().st_mode & 0o7777
    assert mode == 0o1777, f"the exchange is for everyone, sticky as /tmp: {mode:o}"
    assert callable(c.Spawner.pre_spawn_hook)
    assert "services" not in c.JupyterHub, "no API token unless asked for"


def _as_account(name: str, *command: str) -> subprocess.CompletedProcess:
    """``command`` run as the account ``name`` (root only)."""
    return subprocess.run(
        ["setpriv", f"--reuid={name}", f"--regid={name}", "--clear-groups", *command],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30,
    )  # fmt: skip


@pytest.fixture
def shared_dir():
    """A folder every account can reach (pytest's own temp folders are private to the user)."""
    path = Path(tempfile.mkdtemp(prefix="attn-exchange-test-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the accounts daemon and bin act")
def test_no_student_can_take_the_courses_folder_in_the_exchange(tmp_path, shared_dir):
    """The hub makes the course's folder in the exchange for the instructor (daemon here), in a
    sticky exchange: a student (bin) can neither move it aside to put one of their own in its
    place nor remove it; one a student made first stops the hub, naming its owner."""
    exchange = shared_dir / "exchange"
    hub = {"ATTN_HUB_INSTRUCTORS": "daemon", "ATTN_HUB_STUDENTS": "bin"}
    _load_hub_config(tmp_path, NBGRADER_EXCHANGE_ROOT=str(exchange), **hub)
    course = exchange / COURSE_ID
    assert course.stat().st_uid == pwd.getpwnam("daemon").pw_uid
    assert course.stat().st_mode & 0o7777 == 0o755
    made = _as_account("bin", "mkdir", str(exchange / "bins"))
    assert made.returncode == 0, f"a student cannot write into the exchange: {made.stderr}"
    taken = _as_account("bin", "mv", str(course), str(exchange / "taken"))
    assert taken.returncode != 0 and course.is_dir(), taken
    assert _as_account("bin", "rm", "-rf", str(course)).returncode != 0 and course.is_dir()
    # another hub, whose exchange a student reached first
    squat = shared_dir / "first" / COURSE_ID
    squat.mkdir(parents=True)
    bin_ = pwd.getpwnam("bin")
    os.chown(squat, bin_.pw_uid, bin_.pw_gid)
    with pytest.raises(RuntimeError, match="belongs to bin, not to an instructor"):
        _load_hub_config(tmp_path, NBGRADER_EXCHANGE_ROOT=str(squat.parent), **hub)


def test_the_demo_makes_the_courses_folder_for_the_hubs_own_account(tmp_path):
    _load_hub_config(tmp_path, ATTN_HUB_AUTH="dummy", ATTN_HUB_SPAWNER="simple")
    assert (tmp_path / "exchange" / COURSE_ID).stat().st_uid == os.geteuid()


def test_hub_config_demo_mode_and_bad_choices(tmp_path):
    c = _load_hub_config(
        tmp_path, ATTN_HUB_AUTH="dummy", ATTN_HUB_SPAWNER="simple", ATTN_HUB_PORT="8123"
    )
    assert c.JupyterHub.authenticator_class == "dummy"
    assert c.DummyAuthenticator.password
    assert c.JupyterHub.spawner_class == "simple"
    assert c.JupyterHub.bind_url == "http://127.0.0.1:8123"
    for bad in ({"ATTN_HUB_AUTH": "nobody"}, {"ATTN_HUB_SPAWNER": "docker"}):
        with pytest.raises(ValueError):
            _load_hub_config(tmp_path, **bad)
    assert isinstance(c, Config)


def test_student_servers_have_no_formgrader():
    student = DEPLOY / "jupyter" / "student"
    server = json.loads((student / "jupyter_server_config.json").read_text())
    assert (
        server["ServerApp"]["jpserver_extensions"]["nbgrader.server_extensions.formgrader"] is False
    )
    page = json.loads((student / "labconfig" / "page_config.json").read_text())
    assert page["disabledExtensions"]["@jupyter/nbgrader:formgrader"] is True


def test_the_proxy_comes_from_a_committed_lockfile():
    package = json.loads((DEPLOY / "node" / "package.json").read_text())
    assert package["dependencies"]["configurable-http-proxy"].lstrip("^~").startswith("5.")
    lock = json.loads((DEPLOY / "node" / "package-lock.json").read_text())
    assert "node_modules/configurable-http-proxy" in lock["packages"]
    assert "/node/node_modules/" in (DEPLOY / ".gitignore").read_text()


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_make_hub_runs_the_demo_on_localhost():
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "hub"],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "HUB_PORT")},
    )
    assert out.returncode == 0, out.stderr
    assert "deploy/demo.py" in out.stdout


def test_hub_config_loads_site_settings_last(tmp_path):
    site = tmp_path / "site_config.py"
    site.write_text("c = get_config()\nc.JupyterHub.authenticator_class = 'github'\n")
    c = _load_hub_config(tmp_path, ATTN_HUB_AUTH="pam", ATTN_HUB_EXTRA_CONFIG=str(site))
    assert c.JupyterHub.authenticator_class == "github"
