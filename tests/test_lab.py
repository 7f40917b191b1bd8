"""The newcomer path: `make lab` really serves the lessons, behind a token, with nbgrader loaded."""

import json
import re
import secrets
import shutil
from pathlib import Path

import nbgrader
import pytest
from servers import free_port, http_get, make_env, make_lab

REPO = Path(__file__).resolve().parents[1]
STARTUP_SECONDS = 90

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(STARTUP_SECONDS + 60),
    pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed"),
]


@pytest.fixture
def lab(tmp_path):
    """Run `make lab` as a newcomer would; yield (base_url, token, log_path)."""
    port, token = free_port(), secrets.token_hex(16)
    env = make_env(
        PORT=str(port), JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime")
    )
    log_path = tmp_path / "make-lab.log"
    with make_lab(["lab"], env, port, token, log_path, STARTUP_SECONDS) as (base, proc):
        yield base, token, log_path
    assert proc.poll() is not None, "`make lab` survived SIGKILL"


def test_make_lab_serves_lessons_with_token_and_nbgrader(lab):
    base, token, log_path = lab

    status, _, body = http_get(f"{base}/api/contents/lessons?token={token}")
    assert status == 200, body
    listed = {item["name"] for item in json.loads(body)["content"]}
    assert "01-scoring" in listed, listed

    status, _, body = http_get(f"{base}/lab?token={token}")
    assert status == 200 and "JupyterLab" in body

    # The landing page is the lessons folder.
    status, headers, _ = http_get(f"{base}/?token={token}")
    assert status == 302 and "/lab/tree/lessons" in headers["Location"]

    # Without the token: the API refuses, pages send you to the login form.
    assert http_get(f"{base}/api/contents/lessons")[0] == 403
    status, headers, _ = http_get(f"{base}/lab")
    assert status == 302 and "/login" in headers["Location"]

    # nbgrader's server extensions are loaded, and their version matches the lab extension's.
    status, _, body = http_get(
        f"{base}/nbgrader_version?version={nbgrader.__version__}&token={token}"
    )
    assert status == 200 and json.loads(body) == {"success": True}, body

    # The formgrader found nbgrader_config.py: `make lab` runs from the course root.
    status, _, body = http_get(f"{base}/formgrader/manage_assignments?token={token}")
    assert status == 200, body
    assert re.search(r"""["']course_id["']: ["']attention["']""", body), (
        "the formgrader did not load nbgrader_config.py from the repository root"
    )
    assert re.search(r'url_prefix = "\."', body), "course root is not the server root"
