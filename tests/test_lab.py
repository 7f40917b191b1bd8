"""The newcomer path: `make lab` really serves the lessons, behind a token, in a learner's lab.

`make lab` is what learners run: nbgrader's student tools (Validate, the Assignment List) are on,
its instructor tools (Formgrader, Course List, Create Assignment) are off in the server and in the
page, and JupyterLab does not ask about news. `make lab-instructor` serves the same course with
the instructor tools on. Both are started for real.
"""

import contextlib
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

# nbgrader's JupyterLab plugins for instructors, and the server extensions behind them.
INSTRUCTOR_PLUGINS = (
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:create-assignment",
)
STUDENT_PLUGINS = ("@jupyter/nbgrader:assignment-list", "@jupyter/nbgrader:validate-assignment")
# The plugin whose toast asks "Would you like to get notified about official Jupyter news?".
NEWS_PLUGIN = "@jupyterlab/apputils-extension:announcements"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(STARTUP_SECONDS + 60),
    pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed"),
]


@pytest.fixture
def serve(tmp_path):
    """Start a `make` target that serves JupyterLab, as a newcomer would: ``serve("lab")`` returns
    (base_url, token); every server is stopped at the end of the test."""
    procs = []
    with contextlib.ExitStack() as servers:

        def start(target):
            port, token = free_port(), secrets.token_hex(16)
            env = make_env(
                PORT=str(port), JUPYTER_TOKEN=token, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime")
            )
            log_path = tmp_path / f"make-{target}.log"
            server = make_lab([target], env, port, token, log_path, STARTUP_SECONDS)
            base, proc = servers.enter_context(server)
            procs.append(proc)
            return base, token

        yield start
    for proc in procs:
        assert proc.poll() is not None, "the server survived SIGKILL"


def page_config(base, token):
    """The page config JupyterLab's /lab page hands the browser."""
    status, _, html = http_get(f"{base}/lab?token={token}")
    assert status == 200 and "JupyterLab" in html
    start = html.index('<script id="jupyter-config-data" type="application/json">')
    return json.loads(html[html.index(">", start) + 1 : html.index("</script>", start)])


def disabled_plugins(config):
    """Plugins the page will not load (a list, or a dict of flags, depending on the version)."""
    disabled = config.get("disabledExtensions", [])
    if isinstance(disabled, dict):
        return {name for name, off in disabled.items() if off}
    return set(disabled)


def test_make_lab_serves_lessons_with_token_in_a_learners_lab(serve):
    base, token = serve("lab")

    status, _, body = http_get(f"{base}/api/contents/lessons?token={token}")
    assert status == 200, body
    listed = {item["name"] for item in json.loads(body)["content"]}
    assert "01-scoring" in listed, listed

    # The landing page is the lessons folder.
    status, headers, _ = http_get(f"{base}/?token={token}")
    assert status == 302 and "/lab/tree/lessons" in headers["Location"]

    # Without the token: the API refuses, pages send you to the login form.
    assert http_get(f"{base}/api/contents/lessons")[0] == 403
    status, headers, _ = http_get(f"{base}/lab")
    assert status == 302 and "/login" in headers["Location"]

    # nbgrader's student server extensions are loaded, in step with its lab extension ...
    status, _, body = http_get(
        f"{base}/nbgrader_version?version={nbgrader.__version__}&token={token}"
    )
    assert status == 200 and json.loads(body) == {"success": True}, body
    # ... and its instructor ones are not: no formgrader, no course list.
    assert http_get(f"{base}/formgrader?token={token}")[0] == 404
    assert http_get(f"{base}/formgrader/api/status?token={token}")[0] == 404
    assert http_get(f"{base}/formgraders?token={token}")[0] == 404

    # The page loads none of the instructor panels and does not ask about Jupyter news.
    disabled = disabled_plugins(page_config(base, token))
    assert set(INSTRUCTOR_PLUGINS) <= disabled, disabled
    assert NEWS_PLUGIN in disabled, disabled
    assert not disabled & set(STUDENT_PLUGINS), disabled


def test_make_lab_instructor_has_nbgrader_instructor_tools(serve):
    base, token = serve("lab-instructor")

    # The formgrader found nbgrader_config.py: the lab runs from the course root.
    status, _, body = http_get(f"{base}/formgrader/manage_assignments?token={token}")
    assert status == 200, body
    assert re.search(r"""["']course_id["']: ["']attention["']""", body), (
        "the formgrader did not load nbgrader_config.py from the repository root"
    )
    assert re.search(r'url_prefix = "\."', body), "course root is not the server root"
    assert http_get(f"{base}/formgraders?token={token}")[0] == 200  # the course list

    # Every nbgrader panel is in the page; the news toast is still off.
    disabled = disabled_plugins(page_config(base, token))
    assert not disabled & set(INSTRUCTOR_PLUGINS + STUDENT_PLUGINS), disabled
    assert NEWS_PLUGIN in disabled, disabled

    status, headers, _ = http_get(f"{base}/?token={token}")
    assert status == 302 and "/lab/tree/solutions" in headers["Location"]
