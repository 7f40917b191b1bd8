"""Lesson 06's widgets in a real browser: the layer × head explorer and the live training plot.

Like tests/test_browser.py, this starts JupyterLab with the project's own `make lab` on a scratch
course and drives Debian's Chromium with Playwright. The notebook it opens is made here, from the
same calls lesson 06 makes (a GPT from ``attnlib.torch.gpt`` trained for a few steps with a tqdm
progress bar and a ``LossPlot`` callback, then ``InsideExplorer`` on its attention maps), so the
test does not wait for the lesson's minutes of training. It checks that

1. training shows a progress bar widget and a loss plot that is redrawn in place (one image);
2. the explorer renders with its controls, its readout and a PNG;
3. choosing another layer in the dropdown updates the readout and the picture, and the guides
   toggle answers the Space key;
4. the page logs no JavaScript errors.

Screenshots go to test-artifacts/browser/ (gitignored).
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from browser import INSTALL_SECONDS, launched
from servers import free_port, make_env, make_lab

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts" / "browser"
STARTUP_SECONDS = 60
BODY_SECONDS = 180
MS = 1000

pytestmark = [
    pytest.mark.slow,
    pytest.mark.lesson06,
    pytest.mark.timeout(INSTALL_SECONDS + BODY_SECONDS + 60),
    pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed"),
]

TRAIN_CELL = """
import torch
from attnlib.torch.gpt import GPT, GPTConfig
from attnlib.torch.train import repeated_tokens, repeating_batch, train
from attnlib.viz import InsideExplorer, LossPlot

torch.set_num_threads(1)
model = GPT(GPTConfig(32, block_size=32, d_model=32, n_heads=2, n_layers=2), seed=0, device="cpu")
plot = LossPlot("browser test")
history = train(model, lambda g: repeating_batch(g, 8, 32, 32, (3, 16)), steps=40, T=32,
                eval_every=10, callback=plot, label="tiny run")
print(f"trained: {len(history.loss)} steps, plot redrawn {plot.calls} times")
"""

EXPLORER_CELL = """
maps = model.attention_maps(repeated_tokens(4, 8, 4, 32, seed=1))  # (layers, B, h, T, T)
InsideExplorer(maps, period=8)
"""


@pytest.fixture
def course(tmp_path):
    """A scratch course holding one notebook with lesson 06's training and explorer cells."""
    root = tmp_path / "course"
    (root / "lessons").mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(TRAIN_CELL.strip()),
                nbformat.v4.new_code_cell(EXPLORER_CELL.strip())]  # fmt: skip
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}  # fmt: skip
    nbformat.write(nb, root / "lessons" / "inside.ipynb")
    (root / "nbgrader_config.py").write_text((REPO / "nbgrader_config.py").read_text())
    return root


@pytest.fixture
def lab(course, tmp_path):
    """`make lab` serving the scratch course; yields (base_url, token)."""
    port, token = free_port(), secrets.token_hex(16)
    settings = tmp_path / "lab-settings"
    notes = settings / "@jupyterlab" / "apputils-extension"
    notes.mkdir(parents=True)
    (notes / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    env = make_env(
        JUPYTER_TOKEN=token,
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        ATTN_COURSE_HOME=str(tmp_path / "course-home"),
    )
    args = ["-C", str(REPO), "lab", f"PORT={port}", f"ROOT={course}"]
    with make_lab(args, env, port, token, tmp_path / "make-lab.log", STARTUP_SECONDS) as (base, _):
        yield base, token


def _shot(target, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return target.screenshot(path=str(ARTIFACTS / f"lesson06-{name}.png"))


def _loaded(page, image):
    page.wait_for_function(
        "img => img.complete && img.naturalWidth > 0", arg=image.element_handle()
    )


def test_lesson06_training_plot_and_inside_explorer_in_chromium(chromium, lab):
    from playwright.sync_api import expect

    base, token = lab
    started = time.monotonic()
    with launched(chromium) as browser:
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(30 * MS)
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
            page.goto(f"{base}/lab/tree/lessons/inside.ipynb?token={token}",
                      wait_until="domcontentloaded", timeout=60 * MS)  # fmt: skip
            notebook = page.locator(".jp-NotebookPanel:visible")
            expect(notebook).to_have_count(1, timeout=60 * MS)
            kernel = page.get_by_role("button", name=re.compile(r"^Python 3 .*\| Idle$"))
            expect(kernel).to_have_count(1, timeout=60 * MS)

            page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
            page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()

            # 1. Training: a progress bar widget, one loss plot redrawn in place.
            training = notebook.locator(".jp-CodeCell").nth(0)
            expect(training).to_contain_text("trained: 40 steps, plot redrawn 4 times",
                                             timeout=90 * MS)  # fmt: skip
            bar = training.locator(".jupyter-widgets[class*='progress']")
            expect(bar).not_to_have_count(0)
            expect(training).to_contain_text("40/40")
            plots = training.locator(".jp-OutputArea-output img")
            expect(plots).to_have_count(1)
            _loaded(page, plots.first)
            _shot(training, "01-training")

            # 2. The explorer: controls, readout, picture.
            cell = notebook.locator(".jp-CodeCell").nth(1)
            widget = cell.locator(".attnlib-inside")
            readout = widget.locator(".attnlib-readout")
            image = widget.locator("img")
            expect(readout).to_contain_text("Layer 1, head 0", timeout=60 * MS)
            expect(readout).to_contain_text("earlier occurrence (key i-7)")
            _loaded(page, image)
            widget.scroll_into_view_if_needed()
            before_src, before_png = image.get_attribute("src"), _shot(widget, "02-layer-1")

            # 3. Choose layer 2 in the dropdown, then toggle the guides from the keyboard.
            widget.locator("select").first.select_option(label="layer 2")
            expect(readout).to_contain_text("Layer 2, head 0", timeout=30 * MS)
            expect(image).not_to_have_attribute("src", before_src, timeout=30 * MS)
            _loaded(page, image)
            assert _shot(widget, "03-layer-2") != before_png, "the picture did not change"
            guides = widget.get_by_role("button", name="diagonal guides")
            src = image.get_attribute("src")
            guides.focus()
            page.keyboard.press("Space")
            expect(image).not_to_have_attribute("src", src, timeout=30 * MS)
            _shot(page, "04-page")

            assert not errors, "JavaScript console errors:\n" + "\n".join(errors)
        except BaseException:
            if "page" in locals():
                _shot(page, "failure")
            raise
    assert time.monotonic() - started < BODY_SECONDS, "the browser session took too long"
