"""`make hub`: the course on a local JupyterHub, to try it out (127.0.0.1 only, dummy logins).

    python deploy/demo.py [--port 8000] [--students student1,student2,student3]

One instructor and a few students log in with a shared password (random, kept in
deploy/.demo/demo-password, or ATTN_HUB_DUMMY_PASSWORD); every server runs as the
current OS user (SimpleLocalProcessSpawner) with its home under deploy/.demo/home/. The hub's
database, cookie secret and nbgrader exchange are in deploy/.demo/ too: delete that folder to
start afresh. Not for a class: see docs/instructors.md for a real deployment.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

DEPLOY = Path(__file__).resolve().parent
NODE = DEPLOY / "node"
CHP = NODE / "node_modules" / ".bin" / "configurable-http-proxy"
NPM_TIMEOUT = 300


def ensure_proxy() -> None:
    """Install configurable-http-proxy from deploy/node/package-lock.json when it is missing."""
    if CHP.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        sys.exit(
            "error: npm is not installed. JupyterHub's proxy, configurable-http-proxy, is a "
            "Node.js program: install Node.js 20 or newer (with npm) and run `make hub` again."
        )
    print("Installing configurable-http-proxy into deploy/node/ (npm ci) ...", flush=True)
    try:
        subprocess.run(
            [npm, "ci", "--prefix", str(NODE), "--no-audit", "--no-fund"],
            check=True,
            timeout=NPM_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        sys.exit(f"error: npm ci did not finish within {NPM_TIMEOUT} s")
    except subprocess.CalledProcessError as err:
        sys.exit(f"error: npm ci failed (exit status {err.returncode})")
    if not CHP.exists():
        sys.exit(f"error: npm ci did not install {CHP}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _demo_password(state: Path) -> str:
    """A random shared password, kept in the demo's state (any local user can reach 127.0.0.1)."""
    path = state / "demo-password"
    if not path.exists():
        state.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(9) + "\n")
    return path.read_text().strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000, help="the hub's port (8000)")
    parser.add_argument("--instructor", default="instructor", help="the instructor's user name")
    parser.add_argument(
        "--students", default="student1,student2,student3", help="comma-separated student names"
    )
    parser.add_argument("--state", type=Path, default=DEPLOY / ".demo", help="deploy/.demo")
    args = parser.parse_args(argv)

    ensure_proxy()
    state = args.state.resolve()
    password = os.environ.get("ATTN_HUB_DUMMY_PASSWORD") or _demo_password(state)
    bindir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "ATTN_HUB_AUTH": "dummy",
        "ATTN_HUB_DUMMY_PASSWORD": password,
        "ATTN_HUB_SPAWNER": "simple",
        "ATTN_HUB_INSTRUCTORS": args.instructor,
        "ATTN_HUB_STUDENTS": args.students,
        "ATTN_HUB_STATE": str(state),
        "ATTN_HUB_HOMES": str(state / "home"),
        "NBGRADER_EXCHANGE_ROOT": str(state / "exchange"),
        "ATTN_HUB_IP": "127.0.0.1",
        "ATTN_HUB_PORT": str(args.port),
        "ATTN_HUB_HUB_PORT": str(_free_port()),
        "ATTN_HUB_PROXY_API_PORT": str(_free_port()),
        "ATTN_HUB_FRAME_FORMGRADER": "1",
    }
    url = f"http://127.0.0.1:{args.port}/"
    students = ", ".join(s.strip() for s in args.students.split(",") if s.strip())
    print(
        f"""
The attention course on a local JupyterHub: {url}

  Instructor: log in as `{args.instructor}`, password `{password}`.
    Nbgrader > Formgrader (or {url}user/{args.instructor}/formgrader): Generate, then Release
    a lesson (e.g. 01-scoring). The course directory is ~/attention in the instructor's server
    (here {state / "home" / args.instructor / "attention"}).
  Students:   log in as {students}, same password.
    Nbgrader > Assignment List: Fetch 01-scoring, work on it, Submit.
  Then, as the instructor: Collect in the formgrader, and in a terminal
    cd ~/attention && attn-grade batch 01-scoring --course .
    then Generate Feedback and Release Feedback; students Fetch Feedback.

State (database, homes, exchange): {state} (delete it to start afresh).
Stop with Ctrl-C. docs/instructors.md explains a real deployment.
""",
        flush=True,
    )
    jupyterhub = str(bindir / "jupyterhub")
    state.mkdir(parents=True, exist_ok=True)
    os.chdir(state)
    os.execve(jupyterhub, [jupyterhub, "-f", str(DEPLOY / "jupyterhub_config.py")], env)


if __name__ == "__main__":
    main()
