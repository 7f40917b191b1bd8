"""Starting and stopping the servers tests run (`make lab`, JupyterHub), on 127.0.0.1 only."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def http_get(url: str) -> tuple[int, object, str]:
    """(status, headers, body) of a GET, without following redirects."""
    try:
        with _opener.open(url, timeout=10) as response:
            return response.status, response.headers, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:  # 3xx (not followed), 4xx, 5xx
        return err.code, err.headers, err.read().decode("utf-8", "replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen, term_grace: float = 20, kill_grace: float = 10) -> None:
    """Stop a process started with ``start_new_session=True`` and all it started."""
    for sig, grace in ((signal.SIGTERM, term_grace), (signal.SIGKILL, kill_grace)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def make_env(**extra: str) -> dict[str, str]:
    """The environment a newcomer's shell gives `make`, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", "MAKEFLAGS", "MAKELEVEL")}
    env.update(extra)
    return env


@contextlib.contextmanager
def make_lab(
    make_args: list[str], env: dict[str, str], port: int, token: str, log_path: Path,
    startup_seconds: float,
) -> Iterator[tuple[str, subprocess.Popen]]:  # fmt: skip
    """Run ``make ARGS`` (which serves JupyterLab on ``port``) until it answers; yield its URL.

    The process gets its own process group and is always stopped, with everything it started.
    """
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["make", *make_args],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so all of it can be stopped
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_seconds
        while True:
            if proc.poll() is not None:
                pytest.fail(f"`make lab` exited with {proc.returncode}:\n{log_path.read_text()}")
            with contextlib.suppress(OSError):  # not listening yet
                if http_get(f"{base}/api/status?token={token}")[0] == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"no answer in {startup_seconds} s:\n{log_path.read_text()}")
            time.sleep(0.5)
        yield base, proc
    finally:
        stop_group(proc)


@contextlib.contextmanager
def postgres(timeout: float = 60) -> Iterator[str]:
    """A throw-away PostgreSQL server on 127.0.0.1; yields the URL of an empty database.

    Its data lives in a fresh directory under /tmp, removed afterwards. PostgreSQL refuses to
    run as root, so as root the server runs as ``nobody``. Skips, saying why, when the server
    programs (Debian's postgresql) are not installed.
    """
    import shutil
    import tempfile

    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip("PostgreSQL's initdb and pg_ctl are not on PATH (Debian: postgresql)")
    as_user = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    prefix = as_user if os.geteuid() == 0 else []
    base = Path(tempfile.mkdtemp(prefix="attn-pg-", dir="/tmp"))
    data = base / "data"
    if prefix:
        import pwd

        nobody = pwd.getpwnam("nobody")
        os.chown(base, nobody.pw_uid, nobody.pw_gid)
    port = free_port()
    run = {"capture_output": True, "text": True, "timeout": timeout, "stdin": subprocess.DEVNULL}
    try:
        done = subprocess.run([*prefix, initdb, "-D", str(data), "-U", "postgres",
                               "--auth=trust", "-E", "UTF8", "--no-locale"], **run)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        options = f"-h 127.0.0.1 -p {port} -k {base}"
        done = subprocess.run([*prefix, pg_ctl, "-D", str(data), "-o", options,
                               "-l", str(base / "log"), "-w", "start"], **run)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:] + (base / "log").read_text()[-2000:]
        done = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                               "-c", "CREATE DATABASE gradebook"], **run)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        yield f"postgresql://postgres@127.0.0.1:{port}/gradebook"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=timeout)  # fmt: skip
        shutil.rmtree(base, ignore_errors=True)
