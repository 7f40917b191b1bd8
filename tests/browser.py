"""Helpers for the real-browser test: Debian's Chromium, installed on demand.

Playwright cannot download its own browsers here, so the test drives the distribution's
``/usr/bin/chromium``. :func:`ensure_chromium` installs the ``chromium`` package with apt when it is
missing (CI runs the suite as root), bounded in time, and says why when it cannot.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
# The suite runs several test files at once (pytest-xdist): one installs, the others wait.
INSTALL_LOCK = Path("/tmp/attn-course-chromium-install.lock")
INSTALL_SECONDS = 600  # apt-get update + install chromium, once per machine
# Headless, no sandbox (root in a container), no GPU, and nothing that talks to the network.
LAUNCH_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--mute-audio",
]


@contextlib.contextmanager
def launched(chromium: Path):
    """Playwright's ``Browser`` for a headless ``chromium`` (:data:`LAUNCH_ARGS`), closed at the
    end with Playwright itself."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(chromium), args=LAUNCH_ARGS, headless=True, timeout=60_000
        )
        try:
            yield browser
        finally:
            browser.close()


def _run(cmd: list[str], deadline: float, env: dict[str, str]) -> subprocess.CompletedProcess:
    left = max(1.0, deadline - time.monotonic())
    return subprocess.run(
        cmd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=left,
        check=False,
    )


def _works(path: Path) -> bool:
    try:
        done = subprocess.run(
            [str(path), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and "Chromium" in done.stdout


def ensure_chromium(timeout: float = INSTALL_SECONDS) -> tuple[Path | None, str]:
    """Return ``(path, "")`` of a working Chromium, installing Debian's package if needed.

    Returns ``(None, reason)`` when it is missing and cannot be installed: not root, no apt-get,
    or apt failed or ran out of time (the reason quotes apt's last lines).
    """
    if CHROMIUM.exists() and _works(CHROMIUM):
        return CHROMIUM, ""
    if shutil.which("apt-get") is None:
        return None, f"{CHROMIUM} is missing and there is no apt-get to install it"
    if os.geteuid() != 0:
        return None, f"{CHROMIUM} is missing; installing Debian's chromium needs root"
    with _install_lock():
        if CHROMIUM.exists() and _works(CHROMIUM):  # another test process installed it
            return CHROMIUM, ""
        return _install(timeout)


@contextlib.contextmanager
def _install_lock():
    fd = os.open(INSTALL_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _install(timeout: float) -> tuple[Path | None, str]:
    """apt-get update and install Debian's chromium, within ``timeout`` seconds."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    deadline = time.monotonic() + timeout
    steps = (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"],
    )
    try:
        for cmd in steps:
            done = _run(cmd, deadline, env)
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
                return None, f"`{' '.join(cmd)}` failed ({done.returncode}):\n{tail}"
    except subprocess.TimeoutExpired:
        return None, f"installing Debian's chromium took longer than {timeout:.0f} s"
    if not _works(CHROMIUM):
        return None, f"apt installed chromium, but `{CHROMIUM} --version` does not run"
    return CHROMIUM, ""


if __name__ == "__main__":  # `python tests/browser.py` installs Chromium ahead of the tests
    path, why = ensure_chromium()
    print(path or f"no Chromium: {why}")
    raise SystemExit(0 if path else 1)
