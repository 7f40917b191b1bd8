"""Controls: ipywidgets when it is installed, small stand-ins with the same Python API otherwise.

The explorers in :mod:`attnlib.viz.widgets` only use ``.value``, ``.observe(handler, "value")``,
``.options``, ``Button.on_click`` and ``Button.click()``, so without ipywidgets (a plain Python
session, a build that renders notebooks, a test) they run on the stand-ins below and still compute
every state and figure; only the interactive view is missing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

try:  # pragma: no cover - exercised by the presence or absence of the package
    import ipywidgets as _ipw
except ImportError:  # pragma: no cover
    _ipw = None

HAVE_WIDGETS = _ipw is not None


def _pairs(options) -> list[tuple[str, Any]]:
    """Options as (label, value) pairs, the way ipywidgets reads them."""
    out = []
    for option in options:
        if isinstance(option, tuple) and len(option) == 2:
            out.append((str(option[0]), option[1]))
        else:
            out.append((str(option), option))
    return out


class _Control:
    """A value with observers, shaped like an ipywidgets control (``value``, ``observe``)."""

    def __init__(self, value=None, description: str = "", **kwargs):
        self._value = value
        self.description = description
        self.disabled = kwargs.pop("disabled", False)
        self.tooltip = kwargs.pop("tooltip", None)
        self.layout = SimpleNamespace()
        self.style = SimpleNamespace()
        self._observers: list[Callable] = []

    @property
    def value(self):
        return self._value

    @value.setter
    def value(self, new):
        new = self._validate(new)
        old, self._value = self._value, new
        if old == new:
            return
        change = {"name": "value", "old": old, "new": new, "owner": self, "type": "change"}
        for handler in list(self._observers):
            handler(change)

    def _validate(self, new):
        return new

    def observe(self, handler: Callable, names="value") -> None:
        self._observers.append(handler)

    def add_class(self, name: str) -> None:  # ipywidgets API; nothing to style here
        pass


class _Choice(_Control):
    def __init__(self, options=(), value=None, **kwargs):
        self._options = _pairs(options)
        if value is None and self._options:
            value = self._options[0][1]
        super().__init__(value=value, **kwargs)

    @property
    def options(self):
        return tuple(self._options)

    @options.setter
    def options(self, options):
        self._options = _pairs(options)
        values = [v for _, v in self._options]
        if self._value not in values:
            self.value = values[0] if values else None

    @property
    def label(self) -> str:
        return next((label for label, v in self._options if v == self._value), "")

    def _validate(self, new):
        return _one_of(self.description, new, [v for _, v in self._options])


class _Range(_Control):
    def __init__(self, value=0, min=0, max=100, step=1, **kwargs):
        self.min, self.max, self.step = min, max, step
        kwargs.pop("base", None)
        kwargs.pop("readout_format", None)
        kwargs.pop("continuous_update", None)
        super().__init__(value=value, **kwargs)

    def _validate(self, new):
        return type(self._value)(min(max(new, self.min), self.max))


class _LogRange(_Range):
    def __init__(self, value=1.0, base=10.0, min=0.0, max=4.0, step=0.1, **kwargs):
        super().__init__(value=value, min=min, max=max, step=step, **kwargs)
        self.base = base

    def _validate(self, new):
        low, high = self.base**self.min, self.base**self.max
        return float(min(max(new, low), high))


class _Button(_Control):
    def __init__(self, description: str = "", **kwargs):
        kwargs.pop("icon", None)
        kwargs.pop("button_style", None)
        super().__init__(value=None, description=description, **kwargs)
        self._clicks: list[Callable] = []

    def on_click(self, handler: Callable) -> None:
        self._clicks.append(handler)

    def click(self) -> None:
        for handler in list(self._clicks):
            handler(self)


class _Output(_Control):
    """Stands in for Image and HTML: just holds a value."""


def _choice_checked(kwargs: dict) -> dict:
    """``kwargs`` without ``name`` (the explorer's parameter the control shows, for errors; its
    description by default), once ``value`` is one of ``options``."""
    name = kwargs.pop("name", None) or kwargs.get("description", "value")
    if kwargs.get("value") is not None:
        _one_of(name, kwargs["value"], [v for _, v in _pairs(kwargs.get("options", ()))])
    return kwargs


def _one_of(name: str, value, values: list):
    """``value`` if it is one of ``values``, else a ValueError naming them."""
    if value not in values:
        raise ValueError(
            f"{name}={value!r} is not one of the choices: {', '.join(map(repr, values))}"
        )
    return value


def _range_checked(kwargs: dict, low: float, high: float) -> dict:
    """``kwargs`` without ``name``, once ``value`` lies in ``[low, high]``."""
    name = kwargs.pop("name", None) or kwargs.get("description", "value")
    value = kwargs.get("value")
    if value is not None and not low <= value <= high:
        raise ValueError(f"{name}={value!r} is outside [{low:.3g}, {high:.3g}]")
    return kwargs


def _strip(kwargs: dict) -> dict:
    for key in ("icon", "button_style", "style_", "indent"):
        kwargs.pop(key, None)
    return kwargs


def toggle(**kwargs):
    """A two-state button (keyboard: Tab to it, Space or Enter toggles)."""
    if _ipw is not None:
        return _ipw.ToggleButton(**kwargs)
    return _Control(**_strip(kwargs))


def dropdown_width(description: str, options) -> str:
    """A CSS width that fits the description and the longest option label, in ``ch``.

    ipywidgets gives every Dropdown the same width (label 80 px, 300 px in all), which cuts long
    labels such as "mask after the softmax (bug)". The label and the choice are widened by a
    tenth (proportional fonts have characters wider than "0", the ``ch`` unit), plus room for the
    gap between them, the padding and the arrow.
    """
    widest = max((len(label) for label, _ in _pairs(options)), default=1)
    return f"{math.ceil(1.1 * (len(description) + widest)) + 8}ch"


def _fit_dropdown(control) -> None:
    control.layout.width = dropdown_width(control.description, control.options)


def dropdown(**kwargs):
    """A Dropdown as wide as its description and longest label (it never shrinks in a row)."""
    kwargs = _choice_checked(kwargs)
    if _ipw is not None:
        control = _ipw.Dropdown(
            style={"description_width": "initial"},  # the description takes its own width
            layout=_ipw.Layout(flex="0 0 auto"),
            **kwargs,
        )
        _fit_dropdown(control)
        control.observe(lambda _: _fit_dropdown(control), names="options")
        return control
    return _Choice(**kwargs)


def selection_slider(**kwargs):
    kwargs = _choice_checked(kwargs)
    if _ipw is not None:
        return _ipw.SelectionSlider(**kwargs)
    kwargs.pop("continuous_update", None)
    return _Choice(**kwargs)


def int_slider(**kwargs):
    kwargs = _range_checked(kwargs, kwargs.get("min", 0), kwargs.get("max", 100))
    if _ipw is not None:
        return _ipw.IntSlider(**kwargs)
    return _Range(**kwargs)


def log_slider(**kwargs):
    base = kwargs.get("base", 10.0)
    kwargs = _range_checked(kwargs, base ** kwargs.get("min", 0.0), base ** kwargs.get("max", 4.0))
    if _ipw is not None:
        return _ipw.FloatLogSlider(**kwargs)
    return _LogRange(**kwargs)


def button(**kwargs):
    if _ipw is not None:
        return _ipw.Button(**kwargs)
    return _Button(**kwargs)


def image(value: bytes = b""):
    if _ipw is not None:
        return _ipw.Image(value=value, format="png")
    return _Output(value=value)


def html(value: str = ""):
    if _ipw is not None:
        return _ipw.HTML(value=value)
    return _Output(value=value)


def box(controls, readout, picture, css_class: str):
    """Controls in a row (wrapping), the text readout, then the picture; None without ipywidgets."""
    if _ipw is None:
        return None
    row = _ipw.HBox(list(controls), layout=_ipw.Layout(flex_flow="row wrap", align_items="center"))
    outer = _ipw.VBox([row, readout, picture])
    outer.add_class("attnlib-viz")
    outer.add_class(css_class)
    return outer
