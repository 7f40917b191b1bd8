"""attnlib.viz: changing a control updates the explorer's state and the data of its figure.

The explorers are driven here exactly as a learner's clicks drive them in JupyterLab: by setting
``control.value`` (or clicking a Button), which ipywidgets turns into the same observer calls.
tests/test_browser.py checks the same thing end to end in a real browser.
"""

import base64
import json
import re
import subprocess
import sys
import textwrap

import ipywidgets
import matplotlib
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib.numpy as an
from attnlib import viz
from attnlib.viz.figures import HIGHLIGHT

matplotlib.use("Agg")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def upper(a):
    """The entries strictly above the diagonal."""
    return a[np.triu_indices(a.shape[-1], k=1)]


def main_array(image):
    """The plain numbers an ``AxesImage`` drawn by attnlib.viz shows (masked cells included)."""
    return np.asarray(image.attnlib_values)


# -- static figures ---------------------------------------------------------------------------
def test_heatmap_shows_the_weights_labels_annotations_and_row_sums():
    import matplotlib.pyplot as plt

    w = an.softmax(np.random.default_rng(0).normal(size=(3, 4)))
    ax = viz.attention_heatmap(w, ["a", "b", "c"], ["w", "x", "y", "z"], title="t")
    try:
        image = ax.images[0]
        assert np.allclose(image.get_array(), w)
        assert image.get_cmap().name.startswith("viridis") and image.get_clim() == (0.0, 1.0)
        texts = [t.get_text() for t in ax.texts]
        assert f"{w[1, 2]:.2f}" in texts  # annotated weights
        assert texts.count("1.00") >= 3  # one row sum per row
        assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    finally:
        plt.close(ax.figure)
    with pytest.raises(ValueError, match=r"\(m, n\)"):
        viz.attention_heatmap(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"2 labels for the 3 rows of \(3, 4\)"):
        viz.attention_heatmap(w, ["a", "b"])
    with pytest.raises(ValueError, match=r"5 labels for the 4 columns of \(3, 4\)"):
        viz.attention_heatmap(w, None, list("vwxyz"))


BAD_ARGUMENTS = [  # an explorer, an argument a learner may pass it, the start of the error
    (viz.MaskToggle, {"placement": "middle"},
     "placement='middle' is not one of the choices: 'before', 'after'"),
    (viz.StepThrough, {"query": 99}, "query=99 is not one of the choices: 0, 1, 2"),
    (viz.StepThrough, {"d_k": 0}, "d_k must be a positive integer, got 0"),
    (viz.TemperatureExplorer, {"temperature": -1}, "temperature=-1 is outside [0.1, 31.6]"),
    (viz.TemperatureExplorer, {"d_k": 3}, "d_k=3 is not one of the choices: 2, 4, 8"),
    (viz.TemperatureExplorer, {"n_keys": 0}, "n_keys must be a positive integer, got 0"),
    (viz.ComplexityExplorer, {"dtype": "int8"}, "dtype='int8' is not one of the choices"),
    (viz.ComplexityExplorer, {"n": -5}, "n=-5 is not one of the choices: 64, 128"),
    (viz.ComplexityExplorer, {"d_head": 0}, "d_head must be a positive integer, got 0"),
    (lambda **kw: viz.HeadExplorer(np.full((1, 2, 3, 3), 1 / 3), **kw), {"head": 5},
     "head=5 is not one of the choices: 0, 1"),
    (lambda **kw: viz.InsideExplorer(np.full((2, 1, 2, 3, 3), 1 / 3), **kw), {"layer": 2},
     "layer=2 is not one of the choices: 0, 1"),
    (lambda **kw: viz.InsideExplorer(np.full((2, 3, 2, 3, 3), 1 / 3), **kw), {"example": 3},
     "example=3 is outside [0, 2]"),
]  # fmt: skip


@pytest.mark.parametrize("widgets", [True, False], ids=["ipywidgets", "stand-ins"])
@pytest.mark.parametrize(("explorer", "kwargs", "words"), BAD_ARGUMENTS)
def test_an_argument_an_explorer_cannot_show_is_named_with_what_it_can(
    explorer, kwargs, words, widgets, monkeypatch
):
    from attnlib.viz import _controls

    if not widgets:
        monkeypatch.setattr(_controls, "_ipw", None)
    with pytest.raises(ValueError, match=re.escape(words)):
        explorer(**kwargs)


def test_explorers_draw_outside_pyplot_so_nothing_is_shown_twice():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    viz.MaskToggle()
    viz.ComplexityExplorer()
    assert plt.get_fignums() == before


# -- mask toggle (lesson 02) ------------------------------------------------------------------
@pytest.mark.lesson02
def test_mask_toggle_zeroes_the_upper_triangle_and_keeps_rows_summing_to_one():
    w = viz.MaskToggle()
    off = w.state
    assert not off["causal"] and upper(off["weights"]).max() > 0.05
    assert np.allclose(off["row_sums"], 1)
    png_off, renders = w.png(), w.renders

    w.causal.value = True  # what clicking the button does
    on = w.state
    assert on["causal"] and w.renders == renders + 1
    shown = main_array(w.heatmap)
    assert np.array_equal(shown, on["weights"])  # the figure shows the new weights
    assert np.all(upper(shown) == 0.0)
    assert np.allclose(shown.sum(-1), 1.0) and np.allclose(on["row_sums"], 1.0)
    assert on["upper_max"] == 0.0
    assert np.array_equal(on["blocked"], ~an.causal_mask(len(w.tokens)))
    assert w.png() != png_off and w.png().startswith(PNG_SIGNATURE)
    assert "ON" in w.text and "row sums 1.00" in w.text
    # The same scores: masking before the softmax renormalises what the mask keeps.
    expected = an.masked_softmax(w.scores, an.causal_mask(len(w.tokens)))
    assert np.allclose(on["weights"], expected)

    w.placement.value = "after"  # the bug: rows lose the weight the future had
    bug = w.state
    assert np.all(upper(bug["weights"]) == 0.0)
    assert bug["row_sums"][0] < 0.5 and np.isclose(bug["row_sums"][-1], 1.0)
    assert "…" in w.text

    w.causal.value = False
    assert np.allclose(w.state["weights"], off["weights"])


@pytest.mark.lesson02
def test_mask_toggle_takes_its_own_tokens_and_scores():
    scores = np.arange(9.0).reshape(3, 3)
    w = viz.MaskToggle(["x", "y", "z"], scores, causal=True)
    assert np.allclose(w.state["weights"][0], [1, 0, 0])
    with pytest.raises(ValueError, match=r"\(3, 3\)"):
        viz.MaskToggle(["x", "y", "z"], np.zeros((3, 4)))


# -- mechanism step-through (lesson 02) ------------------------------------------------------
def highlighted_rows(fig):
    """Row indices outlined in the highlight colour on any axes of ``fig``."""
    rows = set()
    for ax in fig.axes:
        for patch in ax.patches:
            if matplotlib.colors.same_color(patch.get_edgecolor(), HIGHLIGHT):
                rows.add(round(patch.get_y() + 0.5))
    return rows


@pytest.mark.lesson02
def test_step_through_advances_one_step_at_a_time_and_highlights_the_query():
    w = viz.StepThrough()
    T = len(w.tokens)
    assert w.state["step_name"] == "tokens" and w.state["query"] == w.tokens.index("it")
    seen = [w.state["step_name"]]
    for _ in range(len(viz.STEPS) + 2):  # clicks past the end stay on the last step
        w.next_button.click()
        seen.append(w.state["step_name"])
    assert seen[: len(viz.STEPS)] == list(viz.STEPS) and seen[-1] == "output"

    Q, K, V = w.X @ w.W_q, w.X @ w.W_k, w.X @ w.W_v
    mask = an.causal_mask(T)
    out, weights = an.attention(Q, K, V, mask=mask)
    expected = {
        "tokens": w.X,
        "projections": Q,
        "scores": an.dot_scores(Q, K),
        "scale": an.scaled_dot_scores(Q, K),
        "softmax": weights,
        "output": out,
    }
    for k, name in enumerate(viz.STEPS, start=1):
        w.step.value = k
        s = w.state
        assert s["step"] == k and s["step_name"] == name and f"Step {k}/" in w.text
        assert highlighted_rows(w.figure) == {s["query"]}, name
        if name == "mask":
            assert np.all(np.isneginf(upper(s["matrix"])))
            assert np.allclose(np.tril(s["matrix"]), np.tril(an.scaled_dot_scores(Q, K)))
        else:
            assert np.allclose(s["matrix"], expected[name]), name
            assert np.allclose(main_array(w.main_image), expected[name]), name

    w.query.value = 3  # follow another query: its row is highlighted instead
    assert highlighted_rows(w.figure) == {3} and w.state["highlighted_row"] == 3
    assert np.allclose(w.state["row"], out[3])
    w.step.value = viz.STEPS.index("softmax") + 1
    assert np.allclose(w.state["row"].sum(), 1.0)
    w.causal.value = False  # no mask: the softmax step has weights above the diagonal
    assert upper(w.state["matrix"]).max() > 0
    for _ in range(10):
        w.back_button.click()
    assert w.state["step"] == 1 and w.state["step_name"] == "tokens"


@pytest.mark.lesson02
def test_step_slider_shows_the_number_the_readout_says():
    w = viz.StepThrough()
    total = len(viz.STEPS)
    assert (w.step.min, w.step.max) == (1, total)  # the slider counts 1 … 7, as the text does
    for _ in range(total + 1):
        shown = re.search(r"Step (\d+)/(\d+)", w.text)
        assert shown and int(shown.group(1)) == w.step.value and int(shown.group(2)) == total
        assert w.state["step_name"] == viz.STEPS[w.step.value - 1]
        w.next_button.click()
    assert w.step.value == total and f"Step {total}/{total}: output" in w.text


# -- permutation equivariance (lesson 03) -----------------------------------------------------
@pytest.mark.lesson03
def test_permutation_verdict_flips_with_positional_encoding():
    w = viz.PermutationExplorer()
    assert w.state["verdict"] == "identity"
    w.first.value, w.second.value = 1, 4
    w.swap_button.click()  # what the "swap" button does
    s = w.state
    assert s["tokens"] == ("the", "dog", "bites", "a", "man")
    assert s["verdict"] == "permutation" and s["equivariant"] and s["max_gap"] < 1e-12
    assert np.allclose(main_array(w.output_image), s["outputs"])
    # The dropdowns name the tokens now in each slot, and keep their positions.
    assert w.first.label == "1: dog" and (w.first.value, w.second.value) == (1, 4)
    png = w.png()

    w.positional.value = True  # positions belong to slots, not words: the verdict flips
    s = w.state
    assert s["verdict"] == "not a permutation" and not s["equivariant"] and s["max_gap"] > 1e-3
    assert w.png() != png and "NOT" in w.text
    # ...and the outputs shown are self-attention on the reordered input plus positions.
    X = w.embeddings[list(s["order"])] + an.sinusoidal_encoding(5, 8)
    assert np.allclose(s["outputs"], an.self_attention(X, w.W_q, w.W_k, w.W_v)[0])

    w.reset_button.click()
    assert w.state["order"] == (0, 1, 2, 3, 4) and w.state["verdict"] == "identity"


_SHARED = {}


@pytest.mark.lesson03
@settings(max_examples=10, deadline=None)
@given(swaps=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=1, max_size=4))
def test_without_positions_every_reordering_is_a_permutation_of_the_outputs(swaps):
    w = _SHARED.setdefault("explorer", viz.PermutationExplorer())
    renders = w.renders
    with w.hold():  # one redraw for all the swaps
        w.reset()
        for i, j in swaps:
            w.swap(i, j)
    assert w.renders == renders + 1 and w.state["equivariant"]


# -- temperature and sqrt(d_k) (lesson 01) ----------------------------------------------------
@pytest.mark.lesson01
def test_temperature_slider_shows_saturation_and_the_vanishing_gradient():
    w = viz.TemperatureExplorer(d_k=512, scaled=False, temperature=1.0)
    hot = w.state
    assert hot["max_weight"] > 0.95 and hot["jacobian_norm"] < 0.05  # saturated
    assert "saturated" in w.text
    bars = [b.get_height() for b in w.bars]
    assert np.allclose(bars, hot["weights"])  # the figure draws these weights

    w.scaled.value = True  # divide by sqrt(d_k): soft again, a real gradient
    soft = w.state
    assert soft["max_weight"] < hot["max_weight"] - 0.3
    assert soft["jacobian_norm"] > 10 * hot["jacobian_norm"]
    assert np.isclose(np.std(soft["scores"]), np.std(hot["scores"]) / np.sqrt(512))
    assert np.allclose([b.get_height() for b in w.bars], soft["weights"])

    maxima = []
    for tau in (0.1, 0.5, 2.0, 10.0):  # a higher temperature flattens the weights
        w.temperature.value = tau
        maxima.append(w.state["max_weight"])
        assert np.isclose(w.state["weights"].sum(), 1.0)
    assert maxima == sorted(maxima, reverse=True) and maxima[-1] < 0.2
    w.d_k.value = 4
    assert w.state["d_k"] == 4


@pytest.mark.lesson01
def test_softmax_jacobian_norm_matches_the_formula():
    a = an.softmax(np.array([1.0, 2.0, 0.5]))
    J = np.diag(a) - np.outer(a, a)
    assert np.isclose(viz.softmax_jacobian_norm(a), np.linalg.norm(J))
    assert viz.softmax_jacobian_norm([1.0, 0.0, 0.0]) == 0.0


# -- head explorer (lesson 04) ----------------------------------------------------------------
@pytest.mark.lesson04
def test_head_explorer_switches_heads_examples_and_the_mean():
    rng = np.random.default_rng(0)
    weights = an.softmax(rng.normal(size=(3, 2, 4, 4)) * 3)  # (B, h, T, T)
    tokens = [list("abcd"), list("efgh"), list("ijkl")]
    w = viz.HeadExplorer(weights, tokens)
    assert np.allclose(main_array(w.main_image), weights[0, 0])
    w.head.value = 1
    assert np.allclose(w.state["weights"], weights[0, 1])
    assert np.allclose(main_array(w.main_image), weights[0, 1])
    w.example.value = 2
    assert np.allclose(w.state["weights"], weights[2, 1])
    assert [t.get_text() for t in w.figure.axes[0].get_yticklabels()] == list("ijkl")
    w.head.value = "mean"
    assert np.allclose(w.state["weights"], weights[2].mean(0))
    assert w.state["entropies"].shape == (2,)


@pytest.mark.lesson04
def test_head_explorer_from_projections_recomputes_when_the_heads_change():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(1, 5, 8))
    W_q, W_k, W_v, W_o = rng.normal(size=(4, 8, 8)) / 3
    w = viz.HeadExplorer.from_projections(X, W_q, W_k, W_v, W_o, 2, tokens=list("vwxyz"))
    _, ref = an.multi_head_attention(X, X, W_q, W_k, W_v, W_o, 2)
    assert np.allclose(w.state["weights"], ref[0, 0])
    w.num_heads.value = 4
    _, ref4 = an.multi_head_attention(X, X, W_q, W_k, W_v, W_o, 4)
    assert w.state["num_heads"] == 4 and len(w.head.options) == 5
    w.head.value = 3
    assert np.allclose(w.state["weights"], ref4[0, 3])
    w.num_heads.value = 2  # head 3 no longer exists: back to head 0
    assert w.state["head"] == 0 and np.allclose(w.state["weights"], ref[0, 0])


# -- complexity (lesson 05) -------------------------------------------------------------------
@pytest.mark.lesson05
def test_complexity_plot_grows_like_n_squared():
    w = viz.ComplexityExplorer(n=1024, heads=8, d_head=64, dtype="float16", block_size=256)
    s = w.state
    assert s["flops"] == 8 * an.attention_flops(1024, 1024, 64, 64)
    assert s["bytes"] == an.score_matrix_bytes(1, 8, 1024, 1024, 2)
    assert s["chunked_bytes"] == an.score_matrix_bytes(1, 8, 1024, 256, 2)
    assert np.isclose(s["exponent"], 2.0, atol=0.01) and s["doubling"] == 4.0
    x, y = w.marker.get_data()
    assert (x[0], y[0]) == (1024, s["flops"])  # the marker sits on the chosen n

    w.n.value = 2048
    t = w.state
    assert t["flops"] == 4 * s["flops"] and t["bytes"] == 4 * s["bytes"]
    assert t["chunked_bytes"] == 2 * s["chunked_bytes"]  # linear in n
    assert w.marker.get_data()[0][0] == 2048 and "2,048" in w.text
    w.dtype.value = "float32"
    assert w.state["bytes"] == 2 * t["bytes"] and w.state["flops"] == t["flops"]


# -- every explorer: controls, static fallback ------------------------------------------------
def all_explorers():
    rng = np.random.default_rng(0)
    return [
        viz.MaskToggle(),
        viz.PermutationExplorer(),
        viz.StepThrough(),
        viz.TemperatureExplorer(),
        viz.HeadExplorer(an.softmax(rng.normal(size=(2, 4, 4)))),
        viz.ComplexityExplorer(),
    ]


KEYBOARD_OPERABLE = (
    ipywidgets.ToggleButton,
    ipywidgets.Button,
    ipywidgets.Dropdown,
    ipywidgets.IntSlider,
    ipywidgets.SelectionSlider,
    ipywidgets.FloatLogSlider,
)


def test_every_control_is_a_standard_keyboard_operable_widget_with_a_label():
    assert viz.HAVE_WIDGETS
    for explorer in all_explorers():
        assert explorer.controls, type(explorer).__name__
        for control in explorer.controls:
            assert isinstance(control, KEYBOARD_OPERABLE), (type(explorer), type(control))
            assert control.description, (type(explorer), control)
        assert isinstance(explorer.widget, ipywidgets.VBox)
        assert isinstance(explorer.image, ipywidgets.Image) and explorer.image.format == "png"
        assert 'aria-live="polite"' in explorer.readout.value  # screen readers hear the readout


def test_dropdowns_are_wide_enough_for_their_labels():
    """ipywidgets' default Dropdown (80 px label, 300 px in all) cuts long option labels."""
    explorers = all_explorers()
    explorers.append(
        viz.HeadExplorer.from_projections(*np.random.default_rng(1).normal(size=(5, 4, 4)), 2)
    )
    dropdowns = [c for e in explorers for c in e.controls if isinstance(c, ipywidgets.Dropdown)]
    assert len(dropdowns) >= 8
    for control in dropdowns:
        assert control.style.description_width == "initial", control.description
        assert control.layout.flex == "0 0 auto", control.description  # never shrunk in a row
        width = re.fullmatch(r"(\d+)ch", control.layout.width or "")
        widest = max(len(label) for label, _ in _labelled(control.options))
        assert width and int(width.group(1)) >= len(control.description) + widest + 4, (
            control.description,
            control.layout.width,
            widest,
        )
    # Options that change keep the width in step (the head explorer's list of heads).
    heads = explorers[-1]
    heads.num_heads.value = 4
    assert heads.head.layout.width == viz._controls.dropdown_width("head", heads.head.options)


def _labelled(options):
    return [o if isinstance(o, tuple) else (str(o), o) for o in options]


def test_display_carries_the_widget_and_a_static_png_for_renderers_without_widgets():
    from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

    for explorer in all_explorers():
        bundle = explorer._repr_mimebundle_()
        assert base64.b64decode(bundle["image/png"]).startswith(PNG_SIGNATURE)
        view = bundle["application/vnd.jupyter.widget-view+json"]
        assert view["model_id"] == explorer.widget.model_id
        assert type(explorer).__name__ in bundle["text/plain"]
        # nbconvert (and so a rendered notebook) falls back to the PNG without widget state.
        pick = WidgetsDataTypeFilter(notebook_metadata={})
        assert pick(bundle)[0] == "image/png"
    json.dumps(bundle)  # the bundle is plain JSON


def test_show_static_displays_a_png(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shown = []
    shell = InteractiveShell.instance()
    shell.display_pub.publish = lambda data, **kw: shown.append(data)
    try:
        viz.MaskToggle().show_static()
    finally:
        InteractiveShell.clear_instance()
    assert shown and "image/png" in shown[0]
    assert "Causal mask OFF" in capsys.readouterr().out


def test_viz_works_without_ipywidgets():
    """Blocking the ipywidgets import: every explorer still computes, draws and degrades."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["ipywidgets"] = None  # `import ipywidgets` now raises ImportError
        import base64
        import numpy as np
        from attnlib import viz

        assert not viz.HAVE_WIDGETS
        w = viz.MaskToggle()
        w.causal.value = True
        assert np.all(np.triu(w.state["weights"], 1) == 0)
        b = w._repr_mimebundle_()
        assert set(b) == {"text/plain", "image/png"}, set(b)
        assert base64.b64decode(b["image/png"]).startswith(b"\\x89PNG")
        p = viz.PermutationExplorer()
        p.swap_button.click()
        p.positional.value = True
        assert p.state["verdict"] == "not a permutation"
        s = viz.StepThrough()
        s.next_button.click()
        assert s.state["step_name"] == "projections"
        t = viz.TemperatureExplorer()
        t.temperature.value = 1000.0  # clipped to the slider's range, like the widget
        assert t.state["temperature"] <= 10**1.5
        viz.HeadExplorer(np.full((2, 3, 3), 1 / 3)).head.value = "mean"
        c = viz.ComplexityExplorer()
        c.n.value = 8192
        assert c.state["n"] == 8192
        assert "ipywidgets" not in {m for m in sys.modules if sys.modules[m] is not None}
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_picture_already_drawn_is_reused_and_the_figure_drawn_on_demand():
    from attnlib.viz import MaskToggle

    first = MaskToggle(seed=11)
    second = MaskToggle(seed=11)  # same state: the PNG comes from the cache
    assert second.png() == first.png()
    assert second._figure_stale  # not drawn yet ...
    assert second.figure.axes  # ... until someone looks at it
    second.causal.value = True
    assert second.png() != first.png()  # a new state is a new picture
    assert not second._figure_stale
