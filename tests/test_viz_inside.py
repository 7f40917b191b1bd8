"""attnlib.viz.inside: the layer × head explorer of lesson 06 and the live loss plot.

Driven as a learner's clicks drive them (``control.value = ...``); the numbers the readout
states are checked against the weights they come from.
"""

import base64
import hashlib

import ipywidgets
import matplotlib
import nbformat
import numpy as np
import pytest
import torch
from nbclient import NotebookClient

import attnlib.numpy as an
from attnlib import viz
from attnlib.torch.train import History

matplotlib.use("Agg")

pytestmark = pytest.mark.lesson06

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
L, B, H, T, PERIOD = 2, 3, 4, 12, 4


def causal_rows(rng, shape):
    """Random causal attention weights: rows over keys 0..i sum to one."""
    scores = rng.normal(size=shape)
    mask = np.tril(np.ones((shape[-1], shape[-1]), dtype=bool))
    return an.masked_softmax(scores, mask)


def planted_maps():
    """(L, B, h, T, T): layer 1 head 2 looks one token back, layer 2 head 1 does induction."""
    rng = np.random.default_rng(0)
    maps = causal_rows(rng, (L, B, H, T, T))
    prev = np.zeros((T, T))
    prev[0, 0] = 1
    prev[np.arange(1, T), np.arange(T - 1)] = 1
    induction = np.zeros((T, T))
    induction[np.arange(T), np.clip(np.arange(T) - PERIOD + 1, 0, None)] = 1
    maps[0, :, 2] = prev
    maps[1, :, 1] = induction
    return maps


def test_the_explorer_moves_through_layers_heads_and_examples():
    maps = planted_maps()
    tokens = [[f"t{b}{i}" for i in range(T)] for b in range(B)]
    ex = viz.InsideExplorer(maps, tokens, period=PERIOD)
    assert ex.state["layer"] == 0 and ex.state["head"] == 0
    np.testing.assert_allclose(ex.state["weights"], maps[0, 0, 0])
    renders = ex.renders
    ex.layer.value, ex.head.value = 1, 1
    assert ex.renders > renders
    np.testing.assert_allclose(ex.state["weights"], maps[1, 0, 1])
    assert ex.state["scores"]["induction"] == pytest.approx(1.0)
    assert "Layer 2, head 1" in ex.text and "earlier occurrence (key i-3) 1.00" in ex.text
    ex.example.value = 2
    np.testing.assert_allclose(ex.state["weights"], maps[1, 2, 1])
    ex.layer.value, ex.head.value = 0, 2
    assert ex.state["scores"]["previous"] == pytest.approx(1.0)
    assert "previous: layer 1 head 2 (1.00)" in ex.text
    assert "induction: layer 2 head 1 (1.00)" in ex.text
    grid = ex.state["grid"]
    assert grid["induction"].shape == (L, H) and grid["previous"][0, 2] == pytest.approx(1.0)


def test_the_readout_numbers_are_those_of_the_weights():
    maps = planted_maps()
    ex = viz.InsideExplorer(maps, period=PERIOD, layer=1, head=3)
    w = maps[1, :, 3]  # (B, T, T)
    rows = np.arange(1, T)
    assert ex.state["scores"]["previous"] == pytest.approx(w[:, rows, rows - 1].mean())
    assert ex.state["scores"]["sink"] == pytest.approx(w[:, 1:, 0].mean())
    assert ex.state["scores"]["induction"] == pytest.approx(an.induction_score(w, PERIOD).mean())
    profile = viz.head_profile(maps, PERIOD)
    assert set(profile) == {"previous", "sink", "entropy", "induction"}
    assert profile["entropy"].shape == (L, B, H)
    assert "induction" not in viz.head_profile(maps)


def test_it_takes_tensors_lists_of_layers_and_one_example():
    maps = planted_maps()
    from_tensor = viz.InsideExplorer(torch.from_numpy(maps))
    from_list = viz.InsideExplorer([torch.from_numpy(m) for m in maps])
    one = viz.InsideExplorer(maps[:, 0])  # (L, h, T, T)
    np.testing.assert_allclose(from_tensor.state["weights"], from_list.state["weights"])
    assert one.maps.shape == (L, 1, H, T, T) and one.example not in one.controls
    with pytest.raises(ValueError, match=r"maps must be \(n_layers, B, h, T, T\)"):
        viz.InsideExplorer(np.zeros((3, T, T)))
    with pytest.raises(ValueError, match="period must be an int"):
        viz.InsideExplorer(maps, period=T)
    with pytest.raises(ValueError, match="5 token labels for T = 12"):
        viz.InsideExplorer(maps, ["a"] * 5)


def test_the_guides_toggle_and_every_control_is_a_labelled_widget():
    ex = viz.InsideExplorer(planted_maps(), period=PERIOD)
    legend = ex.figure.axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["previous token", "induction"]
    ex.guides.value = False
    assert ex.figure.axes[0].get_legend() is None
    assert len(ex.figure.axes) == 1 + L * H + 1  # the large map, the grid and a colour bar
    for control in ex.controls:
        assert isinstance(control, ipywidgets.ValueWidget) and control.description
    assert isinstance(ex.widget, ipywidgets.VBox)
    bundle = ex._repr_mimebundle_()
    assert base64.b64decode(bundle["image/png"]).startswith(PNG_SIGNATURE)
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_loss_plot_keeps_the_picture_of_the_last_history_it_was_handed():
    history = History(label="run")
    plot = viz.LossPlot("char model", target=1.8, display=False)
    assert plot.png().startswith(PNG_SIGNATURE)  # drawn even before the first call
    for step in range(1, 41):
        history.steps.append(step)
        history.loss.append(3.0 - step / 20)
        if step % 20 == 0:
            history.val_steps.append(step)
            history.val_loss.append(3.1 - step / 20)
            plot(history)
    assert plot.calls == 2 and plot.draws == 2  # once before, once at the first call
    ax = plot.figure.axes[0]  # the second call's history, drawn as the figure is asked for
    assert plot.draws == 3
    assert "step 40" in ax.get_title() and "validation 1.100" in ax.get_title()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["training (mean of 50 steps)", "validation", "target 1.8"]
    other = History(steps=[1, 2], loss=[3.0, 2.9], label="baseline")
    plot.add(other)(history)
    assert "baseline" in [t.get_text() for t in plot.figure.axes[0].get_legend().get_texts()]
    assert base64.b64decode(plot._repr_mimebundle_()["image/png"]).startswith(PNG_SIGNATURE)


def test_plot_runs_draws_one_labelled_curve_per_run():
    from matplotlib.figure import Figure

    runs = [History(steps=[1, 2, 3], loss=[3, 2, 1], val_steps=[3], val_loss=[1.5], label=n)
            for n in ("a", "b")]  # fmt: skip
    ax = Figure().add_subplot()
    viz.plot_runs(ax, runs)
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    ax = Figure().add_subplot()
    viz.plot_runs(ax, runs, val=True)
    assert list(ax.get_lines()[0].get_ydata()) == [1.5]


def test_loss_plot_every_must_be_seconds():
    with pytest.raises(ValueError, match="every is the seconds between two drawings, not -1"):
        viz.LossPlot("x", every=-1)


TRAINING_CELL = """
import time
from attnlib.torch.train import History
from attnlib.viz import LossPlot

plot = LossPlot("run", every=2.0)
history = History()
for step in range(1, 9):
    history.steps.append(step)
    history.loss.append(3.0 - step / 10)
    plot(history)
    if step == 4:
        time.sleep(2.1)  # the next call may draw again, if anyone watches
print("calls", plot.calls, "draws", plot.draws)
"""
AFTER_CELL = """
import hashlib
print("draws", plot.draws, hashlib.sha256(plot.png()).hexdigest())
"""


def test_a_loss_plot_in_a_kernel_shows_the_last_history_once_its_cell_ends(monkeypatch):
    """Eight calls in a cell: four, then a pause longer than ``every``, then four. Live, the plot
    draws at the first call, again at the fifth (the pause let it) and the last history once the
    cell ends: three drawings, not eight. In a grader's run (``NBGRADER_EXECUTION`` set) it
    draws only once the cell ends. Either way the cell shows one picture, of the last history,
    before what the cell printed (in JupyterLab it is replaced in place)."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    graded = 'import os\nos.environ["NBGRADER_EXECUTION"] = "autograde"\n'
    nb = nbformat.v4.new_notebook()
    cells = [TRAINING_CELL, AFTER_CELL, graded + TRAINING_CELL, AFTER_CELL]
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    for trained, after, draws in ((0, 1, (2, 3)), (2, 3, (0, 1))):
        shown, printed = nb.cells[trained].outputs
        assert printed.text == f"calls 8 draws {draws[0]}\n"
        png = base64.b64decode(shown.data["image/png"])
        assert png.startswith(PNG_SIGNATURE)
        said = nb.cells[after].outputs[0].text.split()
        assert said == ["draws", str(draws[1]), hashlib.sha256(png).hexdigest()]
