"""The newcomer path: `make lab` really serves the lessons, behind a token, with nbgrader loaded."""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbgrader
import pytest

REPO = Path(__file__).resolve().parents[1]
STARTUP_SECONDS = 90

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(STARTUP_SECONDS + 60),
    pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed"),
]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def _get(url):
    """(status, headers, body) of a GET, without following redirects."""
    try:
        with _opener.open(url, timeout=10) as response:
            return response.status, response.headers, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:  # 3xx (not followed), 4xx, 5xx
        return err.code, err.headers, err.read().decode("utf-8", "replace")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc):
    """Stop `make lab` and everything it started: SIGTERM to the group, then SIGKILL."""
    if proc.poll() is not None:
        return
    for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture
def lab(tmp_path):
    """Run `make lab` as a newcomer would; yield (base_url, token, log_path)."""
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", "MAKEFLAGS", "MAKELEVEL")}
    env.update(PORT=str(port), JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    log_path = tmp_path / "make-lab.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["make", "lab"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so all of it can be stopped
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if proc.poll() is not None:
                pytest.fail(f"`make lab` exited with {proc.returncode}:\n{log_path.read_text()}")
            try:
                if _get(f"{base}/api/status?token={token}")[0] == 200:
                    break
            except OSError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                pytest.fail(f"no answer in {STARTUP_SECONDS} s:\n{log_path.read_text()}")
            time.sleep(0.5)
        yield base, token, log_path
    finally:
        _stop(proc)
    assert proc.poll() is not None, "`make lab` survived SIGKILL"


def test_make_lab_serves_lessons_with_token_and_nbgrader(lab):
    base, token, log_path = lab

    status, _, body = _get(f"{base}/api/contents/lessons?token={token}")
    assert status == 200, body
    listed = {item["name"] for item in json.loads(body)["content"]}
    assert "01-scoring" in listed, listed

    status, _, body = _get(f"{base}/lab?token={token}")
    assert status == 200 and "JupyterLab" in body

    # The landing page is the lessons folder.
    status, headers, _ = _get(f"{base}/?token={token}")
    assert status == 302 and "/lab/tree/lessons" in headers["Location"]

    # Without the token: the API refuses, pages send you to the login form.
    assert _get(f"{base}/api/contents/lessons")[0] == 403
    status, headers, _ = _get(f"{base}/lab")
    assert status == 302 and "/login" in headers["Location"]

    # nbgrader's server extensions are loaded, and their version matches the lab extension's.
    status, _, body = _get(f"{base}/nbgrader_version?version={nbgrader.__version__}&token={token}")
    assert status == 200 and json.loads(body) == {"success": True}, body

    # The formgrader found nbgrader_config.py: `make lab` runs from the course root.
    status, _, body = _get(f"{base}/formgrader/manage_assignments?token={token}")
    assert status == 200, body
    assert re.search(r"""["']course_id["']: ["']attention["']""", body), (
        "the formgrader did not load nbgrader_config.py from the repository root"
    )
    assert re.search(r'url_prefix = "\."', body), "course root is not the server root"
