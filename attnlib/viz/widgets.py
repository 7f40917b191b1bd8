"""Explorers: small interactive figures that make attention move.

Each explorer is a plain Python object with

* **controls** as attributes (ipywidgets ``ToggleButton``, ``Dropdown``, ``IntSlider``, ``Button``
  …, all operable from the keyboard), e.g. ``MaskToggle().causal``;
* a **state** (:attr:`Explorer.state`): a dict with everything the picture shows, recomputed with
  :mod:`attnlib.numpy` whenever a control changes (``explorer.causal.value = True`` updates it at
  once, in a notebook or in a test);
* a **figure** (:attr:`Explorer.figure`, matplotlib, redrawn on every change) and its PNG
  (:attr:`Explorer.image`, an ipywidgets ``Image``), plus a one-paragraph text readout
  (:attr:`Explorer.readout`) that says in words what the picture shows.

Displaying an explorer (make it the last expression of a cell) shows the live widget in JupyterLab
and carries a PNG of the figure in the same output, so a notebook rendered without a widget
frontend (nbconvert, GitHub) still shows the figure. :meth:`Explorer.show_static` shows only
the PNG. Without ipywidgets installed everything still works on stand-in controls; only the
interactive view is missing. No asset is fetched from anywhere: the picture is a PNG made here.

None of the explorers uses a learner's exercise: the maths is :mod:`attnlib.numpy`.
"""

from __future__ import annotations

import base64
import hashlib
import html as _html
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from .. import numpy as an
from .._shapes import check_positive_int
from . import _controls
from .figures import HIGHLIGHT, WEIGHTS_CMAP, figure_png, matrix, new_figure

# PNGs already drawn, by explorer class, size and state: the same picture is never drawn twice
# in one process (a grader that forks per notebook draws each lesson's default explorers once).
_PNG_CACHE: dict[tuple, bytes] = {}
_PNG_CACHE_SIZE = 64


def _digest(value, h=None) -> bytes:
    """A digest of a state: dicts, sequences, arrays and scalars, by content."""
    h = hashlib.sha256() if h is None else h
    if isinstance(value, dict):
        h.update(b"{")
        for key in sorted(value, key=str):
            h.update(str(key).encode())
            _digest(value[key], h)
        h.update(b"}")
    elif isinstance(value, list | tuple):
        h.update(b"[")
        for item in value:
            _digest(item, h)
        h.update(b"]")
    elif isinstance(value, np.ndarray):
        h.update(f"{value.dtype}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    else:
        h.update(repr(value).encode())
    return h.digest()


SENTENCE = ("The", "animal", "didn't", "cross", "the", "road", "because", "it", "was", "tired")


class Explorer:
    """Base class: controls, a model recomputed on every change, a figure and a text readout."""

    css_class = "attnlib-explorer"
    figsize: tuple[float, float] = (8.0, 4.0)
    dpi = 96

    def __init__(self) -> None:
        self._figure = new_figure(*self.figsize)
        self._figure_stale = True  # drawn on first use of .figure when the PNG came from cache
        self.image = _controls.image()
        self.readout = _controls.html()
        self.renders = 0
        self._holds = 0  # > 0: changes are being batched, redraw once at the end
        self.controls: tuple = ()
        self.widget = None

    # -- wiring -------------------------------------------------------------------------------
    def _start(self, controls: Sequence) -> None:
        self.controls = tuple(controls)
        for control in self.controls:
            if hasattr(control, "on_click"):
                continue  # buttons act through their own handlers
            control.observe(self._on_change, names="value")
        self.widget = _controls.box(self.controls, self.readout, self.image, self.css_class)
        self.refresh()

    def _on_change(self, change) -> None:
        if not self._holds:
            self.refresh()

    @contextmanager
    def hold(self) -> Iterator[Explorer]:
        """Batch several changes (``with explorer.hold(): ...``): one redraw at the end."""
        self._holds += 1
        try:
            yield self
        finally:
            self._holds -= 1
        if not self._holds:
            self.refresh()

    @contextmanager
    def _quietly(self) -> Iterator[None]:
        """Change controls from inside the explorer without triggering a redraw."""
        self._holds += 1
        try:
            yield
        finally:
            self._holds -= 1

    def refresh(self) -> None:
        """Recompute the model from the controls, redraw the figure, update image and readout."""
        self._compute()
        key = (type(self).__qualname__, self.figsize, self.dpi, _digest(self.state))
        png = _PNG_CACHE.get(key)
        if png is None:
            self._redraw()
            png = figure_png(self._figure, self.dpi)
            if len(_PNG_CACHE) >= _PNG_CACHE_SIZE:
                _PNG_CACHE.pop(next(iter(_PNG_CACHE)))
            _PNG_CACHE[key] = png
        else:
            self._figure_stale = True  # same picture as before: draw the figure only if asked
        self.readout.value = (
            '<div class="attnlib-readout" role="status" aria-live="polite">'
            + "<br>".join(_html.escape(line) for line in self._lines())
            + "</div>"
        )
        self._png = png
        self.image.value = self._png
        self.renders += 1

    def _redraw(self) -> None:
        self._figure.clear()
        self._draw(self._figure)
        self._figure_stale = False

    @property
    def figure(self):
        """The matplotlib figure of the current state (drawn on demand)."""
        if self._figure_stale:
            self._redraw()
        return self._figure

    # -- to be provided by subclasses -----------------------------------------------------------
    def _compute(self) -> None:
        raise NotImplementedError

    def _draw(self, fig) -> None:
        raise NotImplementedError

    def _lines(self) -> list[str]:
        raise NotImplementedError

    @property
    def state(self) -> dict:
        """Everything the picture shows, as plain Python and NumPy values (a fresh copy)."""
        raise NotImplementedError

    # -- display ----------------------------------------------------------------------------------
    @property
    def text(self) -> str:
        """The readout as plain text."""
        return "\n".join(self._lines())

    def png(self) -> bytes:
        """The current figure as PNG bytes."""
        return self._png

    def show_static(self) -> None:
        """Show the current figure as a plain PNG and the readout as text (no widget)."""
        from IPython.display import Image, display

        display(Image(data=self.png(), format="png"))
        print(self.text)

    def _repr_mimebundle_(self, include=None, exclude=None):
        data = {
            "text/plain": f"{type(self).__name__}:\n{self.text}",
            "image/png": base64.b64encode(self.png()).decode("ascii"),
        }
        if self.widget is not None:
            view = self.widget._repr_mimebundle_()
            data["application/vnd.jupyter.widget-view+json"] = view[
                "application/vnd.jupyter.widget-view+json"
            ]
        return data

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self._lines()[0]}>"


def _story_tokens(tokens) -> list[str]:
    tokens = list(SENTENCE if tokens is None else tokens)
    if not tokens:
        raise ValueError("tokens must not be empty")
    return [str(t) for t in tokens]


def _point(Q, K, tokens, query_word="it", key_word="animal", strength=1.5):
    """Make the query of ``query_word`` look for the key of ``key_word`` (the course's story)."""
    if query_word in tokens and key_word in tokens:
        Q[tokens.index(query_word)] = strength * K[tokens.index(key_word)]


# ----------------------------------------------------------------------------------------------
class MaskToggle(Explorer):
    """The causal mask switched on and off over the **same** scores.

    Controls: ``causal`` (ToggleButton) and ``placement`` (Dropdown: mask ``"before"`` the softmax,
    the right way, or ``"after"`` it, the bug). With the mask before the softmax the upper triangle
    becomes exactly 0 and every row still sums to 1.00; after it, rows sum to less.

    ``scores`` ``(T, T)`` default to scaled dot products of random queries and keys for the course
    sentence, with the query of *it* pointed at the key of *animal*.
    """

    css_class = "attnlib-mask-toggle"
    figsize = (7.2, 5.6)

    def __init__(self, tokens=None, scores=None, *, causal=False, placement="before", seed=2):
        super().__init__()
        self.tokens = _story_tokens(tokens)
        T = len(self.tokens)
        if scores is None:
            rng = np.random.default_rng(seed)
            Q, K = rng.normal(size=(2, T, 8))  # (T, d_k) each
            _point(Q, K, self.tokens)
            scores = an.scaled_dot_scores(Q, K)  # (T, T)
        self.scores = np.asarray(scores, dtype=float)
        if self.scores.shape != (T, T):
            raise ValueError(f"scores {self.scores.shape} do not match {T} tokens: need ({T}, {T})")
        self.causal = _controls.toggle(
            value=bool(causal),
            description="causal mask",
            tooltip="Switch the causal (look-ahead) mask on or off",
            icon="eye-slash",
        )
        self.placement = _controls.dropdown(
            options=[
                ("mask before the softmax", "before"),
                ("mask after the softmax (bug)", "after"),
            ],
            value=placement,
            description="where",
            name="placement",
        )
        self._start([self.causal, self.placement])

    def _compute(self) -> None:
        T = len(self.tokens)
        self.mask = an.causal_mask(T) if self.causal.value else np.ones((T, T), dtype=bool)
        if self.placement.value == "before":
            self.weights = an.masked_softmax(self.scores, self.mask)  # (T, T)
        else:
            self.weights = an.softmax(self.scores) * self.mask  # (T, T) the bug
        self.row_sums = self.weights.sum(axis=-1)  # (T,)
        upper = np.triu(np.ones((T, T), dtype=bool), k=1)
        self.upper_max = float(self.weights[upper].max()) if T > 1 else 0.0

    def _draw(self, fig) -> None:
        ax = fig.add_subplot()
        on = self.causal.value
        title = "causal mask on" if on else "no mask: every query sees every key"
        if on:
            title += " (before the softmax)" if self.placement.value == "before" else (
                " AFTER the softmax: the bug"
            )  # fmt: skip
        image = matrix(
            ax, self.weights, self.tokens, self.tokens, title=title, cmap=WEIGHTS_CMAP,
            vmin=0.0, vmax=1.0, blocked=~self.mask if on else None, row_sums=True,
            xlabel="keys (what is looked at)", ylabel="queries (who is looking)",
        )  # fmt: skip
        fig.colorbar(image, ax=ax, shrink=0.6, label="attention weight")
        self.heatmap = image

    def _lines(self) -> list[str]:
        on = self.causal.value
        first = "Causal mask ON" if on else "Causal mask OFF"
        if on:
            first += f" (applied {self.placement.value} the softmax)"
        lo, hi = self.row_sums.min(), self.row_sums.max()
        sums = f"{lo:.2f}" if np.isclose(lo, hi) else f"{lo:.2f} … {hi:.2f}"
        return [
            f"{first}: largest weight above the diagonal {self.upper_max:.2f}; row sums {sums}.",
        ]

    @property
    def state(self) -> dict:
        return {
            "causal": bool(self.causal.value),
            "placement": self.placement.value,
            "weights": self.weights.copy(),
            "row_sums": self.row_sums.copy(),
            "upper_max": self.upper_max,
            "blocked": ~self.mask,
        }


# ----------------------------------------------------------------------------------------------
class PermutationExplorer(Explorer):
    """Swap two tokens and test whether self-attention's outputs just swap too.

    Controls: ``first`` and ``second`` (Dropdowns: positions), ``swap_button`` (swaps them),
    ``positional`` (ToggleButton: add the sinusoidal encoding), ``reset_button``.
    :meth:`swap` and :meth:`reset` do the same from code.

    Without positions, ``SelfAttn(PX) = P SelfAttn(X)`` for every reordering ``P``: the verdict
    is *a permutation of the originals*. Positions are added to the slots, not to the words, so
    with the encoding on the verdict flips.
    """

    css_class = "attnlib-permutation"
    figsize = (10.0, 3.6)

    def __init__(self, tokens=("the", "man", "bites", "a", "dog"), *, d_model=8, seed=7):
        super().__init__()
        self.tokens = _story_tokens(tokens)
        T = len(self.tokens)
        if T < 2:
            raise ValueError("need at least two tokens to swap")
        rng = np.random.default_rng(seed)
        vocab = sorted(set(self.tokens))
        table = {w: rng.standard_normal(d_model) for w in vocab}
        self.embeddings = np.stack([table[w] for w in self.tokens])  # (T, d_model)
        self.W_q, self.W_k, self.W_v = rng.standard_normal((3, d_model, d_model)) / math.sqrt(
            d_model
        )
        self.encoding = an.sinusoidal_encoding(T, d_model)  # (T, d_model)
        self.order = list(range(T))
        start = (1, T - 1) if T > 2 else (0, 1)
        self.first = _controls.dropdown(
            options=self._positions(), value=start[0], description="swap"
        )
        self.second = _controls.dropdown(
            options=self._positions(), value=start[1], description="with"
        )
        self.swap_button = _controls.button(description="swap", tooltip="Swap the two tokens")
        self.swap_button.on_click(lambda _: self.swap(self.first.value, self.second.value))
        self.positional = _controls.toggle(
            value=False,
            description="positional encoding",
            tooltip="Add the sinusoidal positional encoding to every slot",
        )
        self.reset_button = _controls.button(description="reset order")
        self.reset_button.on_click(lambda _: self.reset())
        self._start([self.first, self.second, self.swap_button, self.positional, self.reset_button])

    def _positions(self):
        return [(f"{p}: {self.tokens[i]}", p) for p, i in enumerate(self.order)]

    def swap(self, i: int, j: int) -> None:
        """Swap the tokens at positions ``i`` and ``j`` of the current order."""
        self.order[i], self.order[j] = self.order[j], self.order[i]
        self._relabel()
        self._on_change(None)

    def reset(self) -> None:
        """Back to the original order."""
        self.order = list(range(len(self.tokens)))
        self._relabel()
        self._on_change(None)

    def _relabel(self) -> None:
        with self._quietly():
            for dropdown in (self.first, self.second):
                value = dropdown.value
                dropdown.options = self._positions()
                dropdown.value = value

    def _compute(self) -> None:
        pos = self.encoding if self.positional.value else 0.0
        X = self.embeddings  # (T, d_model) in the original order
        order = np.array(self.order)
        self.original, _ = an.self_attention(X + pos, self.W_q, self.W_k, self.W_v)  # (T, d)
        self.outputs, _ = an.self_attention(X[order] + pos, self.W_q, self.W_k, self.W_v)
        self.expected = self.original[order]  # (T, d) P · SelfAttn(X)
        self.gaps = np.linalg.norm(self.outputs - self.expected, axis=-1)  # (T,)
        self.max_gap = float(self.gaps.max())
        self.equivariant = bool(np.allclose(self.outputs, self.expected, atol=1e-9))
        if self.order == sorted(self.order):
            self.verdict = "identity"
        elif self.equivariant:
            self.verdict = "permutation"
        else:
            self.verdict = "not a permutation"

    def _draw(self, fig) -> None:
        axes = fig.subplots(1, 3, width_ratios=[4, 4, 3])
        words = [self.tokens[i] for i in self.order]
        top = float(np.abs(self.original).max()) * 1.05
        cols = [f"o{c}" for c in range(self.outputs.shape[-1])]
        pe = " + positions" if self.positional.value else ""
        matrix(
            axes[0], self.outputs, words, cols, title=f"SelfAttn(P X{pe})", vmin=-top, vmax=top,
            annotate=False, ylabel="position: token",
        )  # fmt: skip
        matrix(
            axes[1], self.expected, words, cols, title="P · SelfAttn(X) (originals, reordered)",
            vmin=-top, vmax=top, annotate=False,
        )  # fmt: skip
        axes[0].set_yticks(range(len(words)), [f"{p}: {w}" for p, w in enumerate(words)])
        ax = axes[2]
        ax.barh(range(len(words)), self.gaps, color=HIGHLIGHT, height=0.6)
        ax.set_yticks(range(len(words)), words)
        ax.invert_yaxis()
        ax.set_xlim(0, max(0.5, 1.15 * self.max_gap))
        ax.set_xlabel("‖difference‖ per row")
        verdict = {
            "identity": "original order",
            "permutation": "match: outputs only reordered",
            "not a permutation": "DIFFERENT outputs",
        }[self.verdict]
        ax.set_title(verdict, fontsize=10, color="black" if self.equivariant else HIGHLIGHT)
        if self.verdict != "not a permutation":
            ax.text(0.02, len(words) / 2 - 0.5, "every row: 0\n(up to rounding)", va="center")
        self.output_image = axes[0].images[0]

    def _lines(self) -> list[str]:
        words = " ".join(self.tokens[i] for i in self.order)
        pe = "on" if self.positional.value else "off"
        if self.verdict == "identity":
            said = "original order: swap two tokens to test"
        elif self.equivariant:
            said = "outputs ARE a permutation of the originals"
        else:
            said = "outputs are NOT a permutation of the originals"
        return [
            f"Order: {words} (positional encoding {pe}).",
            f"Verdict: {said}; largest row difference {self.max_gap:.2g}.",
        ]

    @property
    def state(self) -> dict:
        return {
            "order": tuple(self.order),
            "tokens": tuple(self.tokens[i] for i in self.order),
            "positional": bool(self.positional.value),
            "outputs": self.outputs.copy(),
            "expected": self.expected.copy(),
            "max_gap": self.max_gap,
            "equivariant": self.equivariant,
            "verdict": self.verdict,
        }


# ----------------------------------------------------------------------------------------------
STEPS = ("tokens", "projections", "scores", "scale", "mask", "softmax", "output")

_STEP_TEXT = {
    "tokens": "Each token is a vector: X has one row per token, (T, d_model).",
    "projections": "Three matrices turn the same X into queries, keys and values: "
    "Q = X W_q, K = X W_k, V = X W_v.",
    "scores": "Every query meets every key: S = Q Kᵀ, one dot product per (query, key) pair.",
    "scale": "Divide by √d_k so the scores keep a spread of about 1 whatever the width.",
    "mask": "Forbidden keys (the future, with the causal mask) get −∞ before the softmax.",
    "softmax": "Softmax over the keys: each row becomes weights ≥ 0 that sum to 1; −∞ becomes 0.",
    "output": "Each output row is the weighted average of the value vectors: O = A V.",
}


class StepThrough(Explorer):
    """Scaled dot-product attention one step at a time, one query row highlighted.

    Steps (:data:`STEPS`): tokens → projections (Q, K, V) → scores → scale → mask → softmax →
    output. Controls: ``step`` (IntSlider from 1 to ``len(STEPS)``: the number the readout's
    "Step n/7" shows), ``back_button`` / ``next_button``, ``query`` (Dropdown: whose row to
    follow), ``causal`` (ToggleButton). :meth:`advance` and :meth:`back` move from code. Every
    number comes from :mod:`attnlib.numpy`.
    """

    css_class = "attnlib-step-through"
    figsize = (10.0, 4.6)

    def __init__(self, tokens=None, *, d_model=8, d_k=4, d_v=4, causal=True, query=None, seed=0):
        super().__init__()
        for name, size in (("d_model", d_model), ("d_k", d_k), ("d_v", d_v)):
            check_positive_int(name, size)
        self.tokens = _story_tokens(tokens)
        T = len(self.tokens)
        rng = np.random.default_rng(seed)
        self.X = rng.standard_normal((T, d_model))  # (T, d_model)
        self.W_q = rng.standard_normal((d_model, d_k)) / math.sqrt(d_model)
        self.W_k = rng.standard_normal((d_model, d_k)) / math.sqrt(d_model)
        self.W_v = rng.standard_normal((d_model, d_v)) / math.sqrt(d_model)
        if "it" in self.tokens and "animal" in self.tokens:
            # Choose the vector of "it" so that its query points at the key of "animal" (scaled
            # score 3) while its own key stays what it was: the query of "it" looks for "animal".
            it = self.tokens.index("it")
            k_animal = self.X[self.tokens.index("animal")] @ self.W_k  # (d_k,)
            target = 3.0 * math.sqrt(d_k) * k_animal / (k_animal @ k_animal)  # (d_k,)
            both = np.concatenate([self.W_q, self.W_k], axis=1).T  # (2 d_k, d_model)
            want = np.concatenate([target, self.X[it] @ self.W_k])  # (2 d_k,)
            x_it, *_ = np.linalg.lstsq(both, want, rcond=None)
            self.X[it] = x_it
        if query is None:
            query = self.tokens.index("it") if "it" in self.tokens else T - 1
        # Counted from 1, as the readout counts ("Step 1/7"), so slider and text agree.
        self.step = _controls.int_slider(value=1, min=1, max=len(STEPS), step=1, description="step")
        self.back_button = _controls.button(description="◀ back", tooltip="Previous step")
        self.next_button = _controls.button(description="next ▶", tooltip="Next step")
        self.back_button.on_click(lambda _: self.back())
        self.next_button.on_click(lambda _: self.advance())
        self.query = _controls.dropdown(
            options=[(f"{i}: {w}", i) for i, w in enumerate(self.tokens)],
            value=query,
            description="query",
        )
        self.causal = _controls.toggle(value=bool(causal), description="causal mask")
        self._start([self.back_button, self.step, self.next_button, self.query, self.causal])

    def advance(self) -> None:
        """Go to the next step (stays at the last)."""
        self.step.value = min(self.step.value + 1, len(STEPS))

    def back(self) -> None:
        """Go to the previous step (stays at the first)."""
        self.step.value = max(self.step.value - 1, 1)

    @property
    def step_name(self) -> str:
        """The name of the current step (the slider counts from 1)."""
        return STEPS[self.step.value - 1]

    def _compute(self) -> None:
        T = len(self.tokens)
        self.Q, self.K, self.V = self.X @ self.W_q, self.X @ self.W_k, self.X @ self.W_v
        d_k = self.Q.shape[-1]
        self.mask = an.causal_mask(T) if self.causal.value else np.ones((T, T), dtype=bool)
        self.S = an.dot_scores(self.Q, self.K)  # (T, T)
        self.S_scaled = self.S / math.sqrt(d_k)  # (T, T) = an.scaled_dot_scores(Q, K)
        self.S_masked = np.where(self.mask, self.S_scaled, -np.inf)  # (T, T)
        self.O, self.A = an.attention(self.Q, self.K, self.V, mask=self.mask)  # (T, d_v), (T, T)
        name = self.step_name
        self.current = {
            "tokens": self.X,
            "projections": self.Q,
            "scores": self.S,
            "scale": self.S_scaled,
            "mask": self.S_masked,
            "softmax": self.A,
            "output": self.O,
        }[name]

    def _draw(self, fig) -> None:
        name, i = self.step_name, self.query.value
        toks = self.tokens
        score_top = float(np.abs(self.S).max())
        if name == "projections":
            grid = fig.subplots(1, 4, width_ratios=[3, 3, 3, 3])
            for ax, M, label in zip(grid[:3], (self.Q, self.K, self.V), "QKV", strict=True):
                matrix(
                    ax, M, toks if label == "Q" else [""] * len(toks),
                    [f"{label.lower()}{c}" for c in range(M.shape[1])], title=label,
                    highlight_row=i if label == "Q" else None, annotate=False,
                )  # fmt: skip
            self.main_image = grid[0].images[0]
            side = grid[3]
        else:
            grid = fig.subplots(1, 2, width_ratios=[3, 2])
            ax, side = grid
            if name == "tokens":
                cols = [f"x{c}" for c in range(self.X.shape[1])]
                kw = {"title": "X: one row per token", "annotate": False}
            elif name == "output":
                cols = [f"o{c}" for c in range(self.O.shape[1])]
                kw = {"title": "O = A V", "annotate": True}
            elif name == "softmax":
                cols = toks
                kw = {"title": "A = softmax over keys", "cmap": WEIGHTS_CMAP, "vmin": 0.0,
                      "vmax": 1.0, "row_sums": True, "blocked": ~self.mask}  # fmt: skip
            else:
                cols = toks
                title = {
                    "scores": "S = Q Kᵀ",
                    "scale": "S / √d_k",
                    "mask": "masked: −∞ where j > i" if self.causal.value else "no mask",
                }[name]
                kw = {"title": title, "vmin": -score_top, "vmax": score_top}
                if name == "mask":
                    kw["blocked"] = ~self.mask
            self.main_image = matrix(ax, self.current, toks, cols, highlight_row=i, **kw)
        self._draw_row(side, name, i)

    def _draw_row(self, ax, name, i) -> None:
        """The followed query's row at this step, as bars."""
        toks = self.tokens
        if name in ("tokens", "projections", "output"):
            vec = {"tokens": self.X, "projections": self.Q, "output": self.O}[name][i]
            what = {"tokens": "x", "projections": "q", "output": "o"}[name]
            ax.bar(range(len(vec)), vec, color=HIGHLIGHT)
            ax.set_xticks(range(len(vec)), [f"{what}{c}" for c in range(len(vec))])
            ax.axhline(0, color="0.5", lw=0.8)
            ax.set_title(f"{what} of '{toks[i]}'", fontsize=10)
            return
        row = self.current[i]
        x = np.arange(len(toks))
        if name == "softmax":
            ax.bar(x, row, color=HIGHLIGHT)
            ax.set_ylim(0, 1)
            ax.set_title(f"weights of '{toks[i]}' (sum {row.sum():.2f})", fontsize=10)
        else:
            shown = np.where(np.isfinite(row), row, 0.0)
            if name == "scale":
                ax.bar(x, self.S[i], color="0.8", label="before scaling")
            ax.bar(x, shown, color=HIGHLIGHT, width=0.6, label=name)
            for j in np.nonzero(~np.isfinite(row))[0]:
                ax.text(j, 0, "−∞", ha="center", va="bottom", fontsize=9)
            ax.axhline(0, color="0.5", lw=0.8)
            ax.set_title(f"scores of '{toks[i]}'", fontsize=10)
            if name == "scale":
                ax.legend(frameon=False, fontsize=8)
        ax.set_xticks(x, toks, rotation=60, ha="right", rotation_mode="anchor")

    def _lines(self) -> list[str]:
        name = self.step_name
        return [
            f"Step {self.step.value}/{len(STEPS)}: {name}. {_STEP_TEXT[name]}",
            f"Following query {self.query.value} ('{self.tokens[self.query.value]}'); "
            f"shape of this step: {self.current.shape}.",
        ]

    @property
    def state(self) -> dict:
        return {
            "step": self.step.value,  # 1 … len(STEPS), as the slider and the readout show
            "step_name": self.step_name,
            "query": self.query.value,
            "highlighted_row": self.query.value,
            "causal": bool(self.causal.value),
            "matrix": np.array(self.current, copy=True),
            "row": np.array(self.current[self.query.value], copy=True),
        }


# ----------------------------------------------------------------------------------------------
def softmax_jacobian_norm(weights) -> float:
    """Frobenius norm of the softmax Jacobian ``diag(a) - a aᵀ`` at weights ``a`` (n,)."""
    a = np.asarray(weights, dtype=float)
    return float(np.linalg.norm(np.diag(a) - np.outer(a, a)))


class TemperatureExplorer(Explorer):
    """How the width d_k, the √d_k scaling and a temperature τ saturate the softmax.

    One query against ``n_keys`` keys, components independent standard normal, so raw scores
    spread like √d_k. Controls: ``d_k`` (SelectionSlider), ``scaled`` (ToggleButton: divide by
    √d_k) and ``temperature`` (FloatLogSlider, τ from 0.1 to about 30). The figure shows the weights
    and how the largest weight and the size of the softmax's gradient (Jacobian norm) depend on
    τ; a saturated softmax has one weight near 1 and a gradient near 0.
    """

    css_class = "attnlib-temperature"
    figsize = (10.0, 3.6)
    WIDTHS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

    def __init__(self, *, d_k=256, scaled=False, temperature=1.0, n_keys=16, seed=0):
        super().__init__()
        check_positive_int("n_keys", n_keys)
        rng = np.random.default_rng(seed)
        self._q = rng.standard_normal(max(self.WIDTHS))  # the first d_k components are used
        self._K = rng.standard_normal((n_keys, max(self.WIDTHS)))
        self.d_k = _controls.selection_slider(
            options=list(self.WIDTHS), value=d_k, description="d_k", continuous_update=False
        )
        self.scaled = _controls.toggle(
            value=bool(scaled), description="divide by √d_k", tooltip="Scaled dot product"
        )
        self.temperature = _controls.log_slider(
            value=temperature, base=10, min=-1, max=1.5, step=0.05, description="τ",
            name="temperature", continuous_update=False,
        )  # fmt: skip
        self._start([self.d_k, self.scaled, self.temperature])

    def _weights_at(self, tau):
        return an.softmax(self.effective_scores / tau)

    def _compute(self) -> None:
        d = self.d_k.value
        self.raw_scores = self._K[:, :d] @ self._q[:d]  # (n,) spread ~ sqrt(d_k)
        divisor = math.sqrt(d) if self.scaled.value else 1.0
        self.effective_scores = self.raw_scores / divisor  # before the temperature
        tau = float(self.temperature.value)
        self.weights = self._weights_at(tau)  # (n,)
        self.max_weight = float(self.weights.max())
        self.jacobian_norm = softmax_jacobian_norm(self.weights)
        p = self.weights[self.weights > 0]
        self.entropy = float(-(p * np.log(p)).sum())
        self.taus = np.logspace(-1, 1.5, 51)
        curves = [self._weights_at(t) for t in self.taus]
        self.max_curve = np.array([w.max() for w in curves])
        self.jacobian_curve = np.array([softmax_jacobian_norm(w) for w in curves])

    def _draw(self, fig) -> None:
        left, right = fig.subplots(1, 2, width_ratios=[3, 2])
        n = len(self.weights)
        left.bar(range(n), self.weights, color=HIGHLIGHT)
        left.axhline(1 / n, color="0.4", ls=":", lw=1, label=f"uniform 1/{n}")
        left.set_ylim(0, 1.02)
        left.set_xticks(range(n), [f"k{j}" for j in range(n)], fontsize=7)
        left.set_ylabel("weight")
        scaled = "/ √d_k " if self.scaled.value else ""
        left.set_title(
            f"softmax(q·k {scaled}/ τ), d_k = {self.d_k.value}, τ = {self.temperature.value:.2g}",
            fontsize=10,
        )
        left.legend(frameon=False, fontsize=8, loc="upper right")
        right.plot(self.taus, self.max_curve, color="0.3", label="largest weight")
        right.plot(self.taus, self.jacobian_curve, color=HIGHLIGHT, ls="--", label="‖Jacobian‖")
        tau = self.temperature.value
        right.plot([tau], [self.max_weight], "o", color="0.3")
        right.plot([tau], [self.jacobian_norm], "o", color=HIGHLIGHT)
        right.axvline(tau, color="0.6", lw=0.8)
        right.set(xscale="log", xlabel="temperature τ", ylim=(0, 1.02))
        right.set_title("saturated (left) vs soft (right)", fontsize=10)
        right.legend(frameon=False, fontsize=8)
        self.bars = left.containers[0]

    def _lines(self) -> list[str]:
        saturated = self.max_weight > 0.9
        return [
            f"d_k = {self.d_k.value}, {'scaled' if self.scaled.value else 'unscaled'}, "
            f"τ = {self.temperature.value:.2g}: spread of the scores "
            f"{self.effective_scores.std():.2f}; largest weight {self.max_weight:.2f}; "
            f"gradient size ‖J‖ = {self.jacobian_norm:.3f}"
            + (" (saturated: almost no gradient)." if saturated else "."),
        ]

    @property
    def state(self) -> dict:
        return {
            "d_k": self.d_k.value,
            "scaled": bool(self.scaled.value),
            "temperature": float(self.temperature.value),
            "scores": self.effective_scores / float(self.temperature.value),
            "weights": self.weights.copy(),
            "max_weight": self.max_weight,
            "jacobian_norm": self.jacobian_norm,
            "entropy": self.entropy,
        }


# ----------------------------------------------------------------------------------------------
class HeadExplorer(Explorer):
    """Browse the attention maps of several heads, one large, all of them small.

    ``weights`` ``(h, m, n)`` or ``(B, h, m, n)`` (NumPy or anything ``np.asarray`` takes, e.g.
    a CPU tensor); ``tokens`` labels for queries (and keys, unless ``key_tokens``), one list for
    all examples or one list per example. Controls: ``head`` (Dropdown, a head or ``"mean"``) and
    ``example`` (IntSlider, when ``B > 1``). :meth:`from_projections` computes the weights with
    :func:`attnlib.numpy.multi_head_attention` and adds a ``num_heads`` Dropdown.
    """

    css_class = "attnlib-heads"
    figsize = (10.0, 4.6)

    def __init__(self, weights, tokens=None, key_tokens=None, *, head=0, _projections=None):
        super().__init__()
        self._projections = _projections
        self._set_weights(weights)
        self._tokens, self._key_tokens = tokens, key_tokens
        controls = []
        if _projections is not None:
            d_model = _projections[2].shape[1]
            choices = [h for h in range(1, 9) if d_model % h == 0]
            self.num_heads = _controls.dropdown(
                options=[(f"{h} heads", h) for h in choices],
                value=self.weights.shape[1],
                description="split into",
            )
            controls.append(self.num_heads)
        self.head = _controls.dropdown(options=self._head_options(), value=head, description="head")
        controls.append(self.head)
        B = self.weights.shape[0]
        self.example = _controls.int_slider(
            value=0, min=0, max=max(B - 1, 0), description="example", disabled=B == 1
        )
        if B > 1:
            controls.append(self.example)
        self._start(controls)

    @classmethod
    def from_projections(cls, X, W_q, W_k, W_v, W_o, num_heads, tokens=None, mask=None):
        """Run :func:`attnlib.numpy.multi_head_attention` on ``X (B, T, d) or (T, d)``."""
        X = np.asarray(X, dtype=float)
        X = X[None] if X.ndim == 2 else X
        projections = (X, W_q, W_k, W_v, W_o, mask)
        _, weights = an.multi_head_attention(X, X, W_q, W_k, W_v, W_o, num_heads, mask=mask)
        return cls(weights, tokens, _projections=projections)

    def _set_weights(self, weights) -> None:
        w = np.asarray(weights, dtype=float)
        if w.ndim == 3:
            w = w[None]
        if w.ndim != 4:
            raise ValueError(f"weights must be (h, m, n) or (B, h, m, n), got shape {w.shape}")
        self.weights = w

    def _head_options(self):
        h = self.weights.shape[1]
        return [(f"head {i}", i) for i in range(h)] + [("mean of the heads", "mean")]

    def _labels(self, which, b, count):
        names = self._key_tokens if which == "keys" and self._key_tokens is not None else None
        names = names if names is not None else self._tokens
        if names is None:
            return [str(t) for t in range(count)]
        names = list(names)
        if names and isinstance(names[0], list | tuple):
            names = names[b]
        return [str(t) for t in names]

    def _compute(self) -> None:
        if self._projections is not None and self.weights.shape[1] != self.num_heads.value:
            X, W_q, W_k, W_v, W_o, mask = self._projections
            _, w = an.multi_head_attention(
                X, X, W_q, W_k, W_v, W_o, self.num_heads.value, mask=mask
            )
            self._set_weights(w)
            with self._quietly():
                self.head.options = self._head_options()
                if self.head.value not in [v for _, v in self._head_options()]:
                    self.head.value = 0
        b, head = self.example.value, self.head.value
        per_head = self.weights[b]  # (h, m, n)
        self.current = per_head.mean(axis=0) if head == "mean" else per_head[head]  # (m, n)
        p = np.clip(per_head, 1e-12, 1.0)
        self.entropies = -(per_head * np.log(p)).sum(-1).mean(-1)  # (h,) mean row entropy
        self.top_keys = self.current.argmax(axis=-1)  # (m,)

    def _draw(self, fig) -> None:
        b, head = self.example.value, self.head.value
        h, m, n = self.weights.shape[1:]
        rows = self._labels("queries", b, m)
        cols = self._labels("keys", b, n)
        cols_n = 2 if h <= 4 else 4
        grid = fig.add_gridspec(max(1, math.ceil(h / cols_n)), 2 + cols_n, width_ratios=None)
        big = fig.add_subplot(grid[:, :2])
        title = "mean of the heads" if head == "mean" else f"head {head}"
        self.main_image = matrix(
            big, self.current, rows, cols, title=title, cmap=WEIGHTS_CMAP, vmin=0.0, vmax=1.0,
            annotate=m * n <= 64, row_sums=False, xlabel="keys", ylabel="queries",
        )  # fmt: skip
        for k in range(h):
            ax = fig.add_subplot(grid[k // cols_n, 2 + k % cols_n])
            ax.imshow(self.weights[b, k], cmap=WEIGHTS_CMAP, vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"head {k}", fontsize=8, color=HIGHLIGHT if k == head else "black")
            for spine in ax.spines.values():
                spine.set_edgecolor(HIGHLIGHT if k == head else "0.7")
                spine.set_linewidth(3 if k == head else 0.8)

    def _lines(self) -> list[str]:
        b, head = self.example.value, self.head.value
        name = "the mean of the heads" if head == "mean" else f"head {head}"
        ent = ", ".join(f"head {k}: {e:.2f}" for k, e in enumerate(self.entropies))
        lines = [
            f"Showing {name} of example {b} ({self.weights.shape[1]} heads).",
            f"Mean row entropy in nats (0 = one key, log n = uniform): {ent}.",
        ]
        return lines

    @property
    def state(self) -> dict:
        return {
            "head": self.head.value,
            "example": self.example.value,
            "num_heads": self.weights.shape[1],
            "weights": self.current.copy(),
            "entropies": self.entropies.copy(),
            "top_keys": self.top_keys.copy(),
        }


# ----------------------------------------------------------------------------------------------
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def _human_bytes(b: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if b < 1024 or unit == "TiB":
            return f"{b:.3g} {unit}" if unit != "B" else f"{b:.0f} B"
        b /= 1024
    return f"{b:.3g} TiB"  # pragma: no cover


class ComplexityExplorer(Explorer):
    """What one attention layer costs as the length n grows: FLOPs and score-matrix bytes.

    Controls: ``n`` (SelectionSlider, 64 … 131 072 tokens), ``heads`` (Dropdown), ``dtype``
    (Dropdown), ``block_size`` (Dropdown, for the chunked curve). FLOPs are
    ``heads · attention_flops(n, n, d_head, d_head)`` and bytes
    ``score_matrix_bytes(batch, heads, n, n, itemsize)`` from :mod:`attnlib.numpy`; the chunked
    (online-softmax) curve keeps only ``(heads, n, block_size)`` scores. Dotted lines: n² through
    the current point, and two GPU memory sizes.
    """

    css_class = "attnlib-complexity"
    figsize = (10.0, 3.8)
    NS = tuple(2**k for k in range(6, 18))

    def __init__(self, *, n=4096, heads=12, d_head=64, batch=1, dtype="float16", block_size=512):
        super().__init__()
        check_positive_int("d_head", d_head)
        check_positive_int("batch", batch)
        self.d_head, self.batch = d_head, batch
        self.n = _controls.selection_slider(
            options=[(f"{v:,}", v) for v in self.NS], value=n, description="n tokens", name="n",
            continuous_update=False,
        )  # fmt: skip
        self.heads = _controls.dropdown(
            options=[1, 8, 12, 16, 32, 64], value=heads, description="heads"
        )
        self.dtype = _controls.dropdown(options=list(_ITEMSIZE), value=dtype, description="dtype")
        self.block_size = _controls.dropdown(
            options=[64, 128, 256, 512, 1024],
            value=block_size,
            description="block",
            name="block_size",
        )
        self._start([self.n, self.heads, self.dtype, self.block_size])

    def _costs(self, n):
        h, d = self.heads.value, self.d_head
        item = _ITEMSIZE[self.dtype.value]
        flops = h * self.batch * an.attention_flops(n, n, d, d)
        scores = an.score_matrix_bytes(self.batch, h, n, n, item)
        chunked = an.score_matrix_bytes(self.batch, h, n, min(n, self.block_size.value), item)
        return flops, scores, chunked

    def _compute(self) -> None:
        ns = np.array(self.NS, dtype=float)
        table = np.array([self._costs(int(n)) for n in self.NS], dtype=float)  # (len, 3)
        self.ns, self.flops_curve, self.bytes_curve, self.chunked_curve = ns, *table.T
        self.flops, self.bytes, self.chunked_bytes = self._costs(self.n.value)
        self.exponent = an.fit_exponent(ns, self.flops_curve)
        twice = self._costs(2 * self.n.value)
        self.doubling = twice[0] / self.flops

    def _draw(self, fig) -> None:
        left, right = fig.subplots(1, 2)
        n = self.n.value
        ns = self.ns
        left.loglog(ns, self.flops_curve, "o-", color="0.3", ms=3, label="attention FLOPs")
        left.loglog(ns, self.flops * (ns / n) ** 2, ":", color="0.6", label="∝ n²")
        left.plot([n], [self.flops], "o", color=HIGHLIGHT, ms=9)
        left.set(xlabel="sequence length n", ylabel="FLOPs per layer")
        left.set_title(f"{self.heads.value} heads × d_head {self.d_head}: work", fontsize=10)
        left.legend(frameon=False, fontsize=8)
        right.loglog(ns, self.bytes_curve, "o-", color="0.3", ms=3, label="naive: (h, n, n)")
        right.loglog(
            ns, self.chunked_curve, "s--", color=HIGHLIGHT, ms=3,
            label=f"chunked: (h, n, {self.block_size.value})",
        )  # fmt: skip
        right.plot([n], [self.bytes], "o", color=HIGHLIGHT, ms=9)
        for gib, label in ((16, "16 GiB GPU"), (80, "80 GiB GPU")):
            right.axhline(gib * 2**30, color="0.6", ls=":", lw=1)
            right.text(ns[0], gib * 2**30 * 1.15, label, fontsize=7, color="0.4")
        right.set(xlabel="sequence length n", ylabel="bytes of scores")
        right.set_title(f"memory of the scores ({self.dtype.value})", fontsize=10)
        right.legend(frameon=False, fontsize=8, loc="lower right")
        self.marker = left.lines[-1]

    def _lines(self) -> list[str]:
        n = self.n.value
        return [
            f"n = {n:,}: {self.flops:.3g} FLOPs, score matrix {_human_bytes(self.bytes)} "
            f"(chunked: {_human_bytes(self.chunked_bytes)}).",
            f"Doubling n multiplies the work by {self.doubling:.0f}; "
            f"fitted exponent of the FLOPs curve: {self.exponent:.2f}.",
        ]

    @property
    def state(self) -> dict:
        return {
            "n": self.n.value,
            "heads": self.heads.value,
            "dtype": self.dtype.value,
            "block_size": self.block_size.value,
            "flops": int(self.flops),
            "bytes": int(self.bytes),
            "chunked_bytes": int(self.chunked_bytes),
            "exponent": float(self.exponent),
            "doubling": float(self.doubling),
        }
