"""JupyterHub for one class of the attention course on a single machine.

    jupyterhub -f deploy/jupyterhub_config.py          # production: PAM users, one process each
    make hub                                           # local demo: dummy logins, 127.0.0.1 only

Everything the hub needs comes from this repository and the Python environment the hub runs in:
the single-user servers are started from the same environment (`jupyterhub-singleuser` next to the
hub's Python), so attnlib, the autograder and nbgrader's extensions are installed for every user.
docs/instructors.md is the guide; the settings below are read from environment variables:

ATTN_HUB_AUTH         "pam" (default: the machine's accounts), "dummy" (the local demo only:
                      anyone in the user lists logs in with ATTN_HUB_DUMMY_PASSWORD), or "oauth"
                      (set ATTN_HUB_OAUTH_CLASS, e.g. oauthenticator.github.GitHubOAuthenticator,
                      and configure that class in a jupyterhub_config.d/ file or below)
ATTN_HUB_SPAWNER      "local" (default: LocalProcessSpawner, each user's server runs as that OS
                      user in their home) or "simple" (SimpleLocalProcessSpawner: every server runs
                      as the hub's OS user, homes under ATTN_HUB_HOMES; demo and tests only)
ATTN_HUB_INSTRUCTORS  comma-separated instructor user names (group formgrade-attention)
ATTN_HUB_STUDENTS     comma-separated student user names (group nbgrader-attention)
ATTN_HUB_ADMINS       comma-separated hub admins (none): they may add users on the admin page
                      and open anyone's server
ATTN_HUB_IP, ATTN_HUB_PORT   where the proxy listens (127.0.0.1:8000)
ATTN_HUB_HUB_PORT, ATTN_HUB_PROXY_API_PORT   the hub's and proxy's internal ports (8081, 8001)
ATTN_HUB_STATE        the hub's own files: sqlite database, cookie secret, pid file
                      (/srv/jupyterhub)
ATTN_HUB_HOMES        homes of the "simple" spawner's users (ATTN_HUB_STATE/home)
NBGRADER_EXCHANGE_ROOT   nbgrader's exchange directory, shared by every user
                      (/srv/nbgrader/exchange)
ATTN_HUB_PROXY        the configurable-http-proxy command (deploy/node/node_modules/.bin/… when
                      installed there by `make hub`, else the one on PATH)
ATTN_HUB_FRAME_FORMGRADER   "1": instructors' servers may be framed by the hub's own pages, so
                      the formgrader shows inside JupyterLab (trusted users only, see
                      deploy/jupyter/frame-formgrader/)
ATTN_HUB_EXTRA_CONFIG another config file, loaded last (site settings: OAuth secrets, TLS ...)
ATTN_HUB_SERVICE_TOKEN   when set, an API service "attn-course-admin" with this token may list
                      users and start, stop and use their servers (scripts and tests)
"""

import os
import pwd
import shutil
import sys
from pathlib import Path

c = get_config()  # noqa: F821 -- injected by traitlets when JupyterHub loads this file

DEPLOY = Path(__file__).resolve().parent
REPO = DEPLOY.parent
BIN = Path(sys.executable).parent
COURSE_ID = "attention"
INSTRUCTOR_GROUP = f"formgrade-{COURSE_ID}"  # nbgrader's names for JupyterHub groups
STUDENT_GROUP = f"nbgrader-{COURSE_ID}"
COURSE_FILES = ("nbgrader_config.py", "solutions", "lessons")


def _env(name, default=""):
    return os.environ.get(name, "").strip() or default


def _names(var):
    return [n.strip() for n in _env(var).split(",") if n.strip()]


AUTH = _env("ATTN_HUB_AUTH", "pam")
SPAWNER = _env("ATTN_HUB_SPAWNER", "local")
INSTRUCTORS = _names("ATTN_HUB_INSTRUCTORS")
STUDENTS = _names("ATTN_HUB_STUDENTS")
STATE = Path(_env("ATTN_HUB_STATE", "/srv/jupyterhub")).resolve()
HOMES = Path(_env("ATTN_HUB_HOMES", str(STATE / "home"))).resolve()
EXCHANGE = Path(_env("NBGRADER_EXCHANGE_ROOT", "/srv/nbgrader/exchange")).resolve()
IP = _env("ATTN_HUB_IP", "127.0.0.1")
PORT = int(_env("ATTN_HUB_PORT", "8000"))
HUB_PORT = int(_env("ATTN_HUB_HUB_PORT", "8081"))
PROXY_API_PORT = int(_env("ATTN_HUB_PROXY_API_PORT", "8001"))

# --- the hub's own files and network ------------------------------------------------------------

STATE.mkdir(parents=True, exist_ok=True, mode=0o700)
c.JupyterHub.db_url = f"sqlite:///{STATE / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(STATE / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(STATE / "jupyterhub.pid")
c.JupyterHub.bind_url = f"http://{IP}:{PORT}"
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{HUB_PORT}"
c.JupyterHub.cleanup_servers = True  # stopping the hub stops every user's server

_chp = DEPLOY / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
_proxy = _env("ATTN_HUB_PROXY", str(_chp) if _chp.exists() else "configurable-http-proxy")
c.ConfigurableHTTPProxy.command = [_proxy]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PROXY_API_PORT}"
c.ConfigurableHTTPProxy.pid_file = str(STATE / "jupyterhub-proxy.pid")

# --- who logs in ---------------------------------------------------------------------------------

if AUTH == "dummy":
    # Anyone may log in with the shared password: for a demo on 127.0.0.1, never for a class.
    c.JupyterHub.authenticator_class = "dummy"
    c.DummyAuthenticator.password = _env("ATTN_HUB_DUMMY_PASSWORD", "attention")
elif AUTH == "pam":
    c.JupyterHub.authenticator_class = "pam"  # the machine's accounts (the default)
elif AUTH == "oauth":
    # e.g. oauthenticator.github.GitHubOAuthenticator or
    # oauthenticator.generic.GenericOAuthenticator (pip install oauthenticator); configure its
    # client id, secret and callback URL in ATTN_HUB_EXTRA_CONFIG (docs/instructors.md).
    c.JupyterHub.authenticator_class = _env("ATTN_HUB_OAUTH_CLASS")
else:
    raise ValueError(f"ATTN_HUB_AUTH must be pam, dummy or oauth, not {AUTH!r}")

c.Authenticator.allowed_users = set(INSTRUCTORS) | set(STUDENTS)
c.Authenticator.admin_users = set(_names("ATTN_HUB_ADMINS"))
c.JupyterHub.load_groups = {
    INSTRUCTOR_GROUP: {"users": INSTRUCTORS},
    STUDENT_GROUP: {"users": STUDENTS},
}

_service_token = _env("ATTN_HUB_SERVICE_TOKEN")
if _service_token:
    c.JupyterHub.services = [{"name": "attn-course-admin", "api_token": _service_token}]
    c.JupyterHub.load_roles = [
        {
            "name": "attn-course-admin",
            "scopes": ["list:users", "read:users", "read:groups", "servers", "access:servers"],
            "services": ["attn-course-admin"],
        }
    ]

# --- each user's server --------------------------------------------------------------------------

if SPAWNER == "simple":
    # Every server runs as the hub's OS user, in HOMES/<name>: for the demo and the tests.
    c.JupyterHub.spawner_class = "simple"
    c.SimpleLocalProcessSpawner.home_dir_template = str(HOMES / "{username}")
elif SPAWNER == "local":
    c.JupyterHub.spawner_class = "localprocess"  # each user is an OS account (PAM)
else:
    raise ValueError(f"ATTN_HUB_SPAWNER must be local or simple, not {SPAWNER!r}")

c.Spawner.cmd = [str(BIN / "jupyterhub-singleuser")]
c.Spawner.ip = "127.0.0.1"
c.Spawner.notebook_dir = "~"
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 90
# Per-user resource limits are enforced by Kubernetes (deploy/z2jh); a local process is only
# told what it may use (shown in the UI), as LocalProcessSpawner does not enforce them.
c.Spawner.mem_limit = _env("ATTN_HUB_MEM_LIMIT", "2G")
c.Spawner.cpu_limit = float(_env("ATTN_HUB_CPU_LIMIT", "1"))
if SPAWNER == "simple" and os.geteuid() == 0:
    c.Spawner.args = ["--ServerApp.allow_root=True"]

# nbgrader's exchange: one directory every user can write to (nbgrader's own layout inside),
# sticky like /tmp, so that nobody can rename or remove what another user made there. Whoever owns
# the course's folder in it decides what students fetch and can read and remove what they submit,
# so the hub makes that folder for the instructor before any student could make it.
EXCHANGE.mkdir(parents=True, exist_ok=True)
os.chmod(EXCHANGE, 0o1777)


def _instructor_accounts():
    """The accounts that may own the course's folder in the exchange: the instructors' (the
    hub's own, when every server runs as it)."""
    if SPAWNER == "simple":
        return [pwd.getpwuid(os.geteuid())]
    accounts = []
    for name in INSTRUCTORS:
        try:
            accounts.append(pwd.getpwnam(name))
        except KeyError:  # no account yet: nobody can log in as them either
            pass
    return accounts


def _claim_course_folder(folder, accounts):
    """Make ``folder`` for the first of ``accounts``; refuse to start if someone else has."""
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        if accounts:
            folder.mkdir(mode=0o755)
            os.chown(folder, accounts[0].pw_uid, accounts[0].pw_gid)
        return
    if os.path.isdir(folder) and not folder.is_symlink():
        if info.st_uid in {a.pw_uid for a in accounts}:
            return
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = f"uid {info.st_uid}"
    raise RuntimeError(
        f"{folder} belongs to {owner}, not to an instructor of the course. Whoever owns it can "
        "hand students notebooks of their own and read or remove what they submit. If it is a "
        f"former instructor's, give it to an instructor (sudo chown -R NAME '{folder}'); if "
        f"someone else made it, remove it (sudo rm -r '{folder}'). Then start the hub again."
    )


_claim_course_folder(EXCHANGE / COURSE_ID, _instructor_accounts())


def _home(spawner):
    if SPAWNER == "simple":
        return Path(spawner.home_dir)
    return Path(pwd.getpwnam(spawner.user.name).pw_dir)


def _give_course(dest, owner):
    """Copy the course (nbgrader config, solutions, lessons) to an instructor's home, once."""
    if (dest / "nbgrader_config.py").exists():
        return
    dest.mkdir(parents=True, exist_ok=True)
    for name in COURSE_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns(".ipynb_*"))
        else:
            shutil.copy(src, dest / name)
    if owner is not None:  # a real account (LocalProcessSpawner as root): the files are theirs
        for path in [dest, *dest.rglob("*")]:
            os.chown(path, owner.pw_uid, owner.pw_gid)


def pre_spawn_hook(spawner):
    """Tell each server whether its user is an instructor or a student, and configure nbgrader."""
    name = spawner.user.name
    groups = {g.name for g in spawner.user.groups}
    instructor = INSTRUCTOR_GROUP in groups or name in INSTRUCTORS
    home = _home(spawner)
    if SPAWNER == "simple":  # real accounts have their homes already (made by adduser)
        home.mkdir(parents=True, exist_ok=True)
    env = {
        "ATTN_ROLE": "instructor" if instructor else "student",
        "NBGRADER_EXCHANGE_ROOT": str(EXCHANGE),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', os.defpath)}",  # nbgrader runs alembic
        "ATTN_COURSE_HOME": str(home / ".attention-course"),  # mastery records
    }
    if instructor:
        course = home / COURSE_ID
        owner = pwd.getpwnam(name) if SPAWNER == "local" and os.geteuid() == 0 else None
        _give_course(course, owner)
        env["ATTN_COURSE_DIR"] = str(course)
        # The course's own nbgrader_config.py (source solutions/, release lessons/, course id)
        # is read by the formgrader and by nbgrader in any directory, as nbgrader's docs ask of
        # ~/.jupyter/nbgrader_config.py; then the settings shared by everyone.
        config_path = [course, DEPLOY / "jupyter" / "common"]
        if _env("ATTN_HUB_FRAME_FORMGRADER") == "1":  # the demo: formgrader inside JupyterLab
            config_path.insert(0, DEPLOY / "jupyter" / "frame-formgrader")
    else:
        # All "simple" servers run as one OS user, so nbgrader cannot tell students apart by
        # their account: the submission is labelled with the hub's user name instead.
        if SPAWNER == "simple":
            env["ATTN_STUDENT_ID"] = name
        config_path = [DEPLOY / "jupyter" / "student", DEPLOY / "jupyter" / "common"]
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(str(p) for p in config_path)
    if SPAWNER == "simple":
        env["ATTN_CHECK_OWNER"] = "0"
    spawner.environment.update(env)


c.Spawner.pre_spawn_hook = pre_spawn_hook

# Site settings kept out of this repository (OAuth client id and secret, TLS, more users, an idle
# culler service ...): a config file of your own, loaded last, so it overrides anything above.
_extra = _env("ATTN_HUB_EXTRA_CONFIG")
if _extra:
    load_subconfig(_extra)  # noqa: F821 -- injected by traitlets, like get_config
