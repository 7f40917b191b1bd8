"""What a cell's outputs may hold once they reach the trusted side, and what a graded cell shows.

:func:`clean` rebuilds every output from the sandbox from scratch: only the four nbformat output
types, only ``text/plain`` and PNG/JPEG images (no HTML, JavaScript, SVG or widget state, so no
learner markup reaches a feedback page unescaped), every string capped, the whole notebook within
one budget of characters that the sandbox cannot lift (counted as the notebook's file writes them:
a control character as a six-character escape). An error's name and the start of its value are
kept past the budget, once a cell, so that the learner still sees what failed. Consecutive pieces
of one stream are joined and shown as a terminal or JupyterLab shows them (:func:`as_shown`): a
progress bar that redraws itself with carriage returns keeps its last state, not every one on a
line of its own.

:func:`graded` writes a graded test cell's outputs *from the grader's verdicts*. nbgrader scores a
test cell from its outputs — no points for an ``error`` or a ``stderr`` stream, a partial score read
from the first ``execute_result`` — so here nothing from the sandbox can carry a score: every
``execute_result`` becomes a ``display_data``, and a failed verdict always ends in an error output.
The sandbox's own errors stay (learner code can only lower its own grade); when every verdict
passed, its ``stderr`` text is relabelled as ``stdout``, so a correct answer that warns keeps its
points.
"""

from __future__ import annotations

import re

MIME = ("text/plain", "image/png", "image/jpeg")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
MAX_OUTPUTS = 500  # per cell
MAX_LINES = 50  # of a traceback
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # written as \u00XX in the notebook


def error(ename: str, evalue: str, note: str = "") -> dict:
    tb = [f"{ename}: {evalue}"] + ([note] if note else [])
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": tb}


def stream(name: str, text: str) -> dict:
    return {"output_type": "stream", "name": name, "text": text}


def clean(raw: object, budget: int) -> tuple[list[dict], int]:
    """Outputs rebuilt from ``raw`` within ``budget`` characters; and the characters spent."""
    out: list[dict] = []
    pieces: dict[int, list[str]] = {}  # a stream output's position → its pieces, joined once below
    left = budget
    cut = spoke = False  # the budget ran out; an error was kept past it
    for item in raw[:MAX_OUTPUTS] if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("output_type")
        if kind == "stream":
            name = "stderr" if item.get("name") == "stderr" else "stdout"
            text, left, cut = _take(_text(item.get("text")), left, cut)
            if text and out and out[-1]["output_type"] == "stream" and out[-1]["name"] == name:
                pieces[len(out) - 1].append(text)
            elif text:
                pieces[len(out)] = [text]
                out.append(stream(name, text))
        elif kind in ("display_data", "execute_result"):
            data, left, cut = _data(item.get("data"), left, cut)
            if data:
                entry = {"output_type": kind, "data": data, "metadata": {}}
                if kind == "execute_result":
                    count = item.get("execution_count")
                    entry["execution_count"] = count if type(count) is int else None
                out.append(entry)
        elif kind == "error":
            if spoke:  # past the budget, one error a cell says what failed
                continue
            ename, left, cut = _take(_text(item.get("ename"))[:200], left, cut, force=200)
            evalue, left, cut = _take(_text(item.get("evalue"))[:2000], left, cut, force=200)
            ename = ename or "Error"
            lines = item.get("traceback")
            lines = [_text(x)[:2000] for x in lines[-MAX_LINES:]] if isinstance(lines, list) else []
            kept = []
            for line in lines:
                line, left, cut = _take(line, left, cut)
                if line:
                    kept.append(line)
            if not kept:
                kept, left = [f"{ename}: {evalue}"], max(left - _cost(f"{ename}: {evalue}"), 0)
            out.append({"output_type": "error", "ename": ename, "evalue": evalue,
                        "traceback": kept})  # fmt: skip
            spoke = cut
    for index, texts in pieces.items():
        out[index]["text"] = as_shown("".join(texts))
    if cut:
        out.append(
            stream("stdout", "\n[output truncated by the grader: the notebook showed too much]\n")
        )
    return out, budget - left


def as_shown(text: str) -> str:
    """``text`` as a terminal or JupyterLab shows it: a line's text before a carriage return that
    more text follows is overwritten (``"\\r 10%\\r 20%\\n"`` → ``" 20%\\n"``); a ``"\\r\\n"``
    stays. The rule of nbconvert's ``CoalesceStreamsPreprocessor``, in time linear in the text
    (its regular expression takes time quadratic in a long line that ends in ``"\\r"``)."""
    if "\r" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        last = line.rfind("\r", 0, len(line) - 1)  # a \r with more of the line after it
        if last >= 0:
            lines[i] = line[last + 1 :]
    return "\n".join(lines)


def _text(value: object) -> str:
    if isinstance(value, list):
        value = "".join(v for v in value if isinstance(v, str))
    return value if isinstance(value, str) else ""


def _cost(text: str) -> int:
    """What ``text`` takes of the budget: its characters as the notebook's JSON writes them."""
    return len(text) + 5 * len(_CONTROL.findall(text))


def _take(text: str, left: int, cut: bool, force: int = 0) -> tuple[str, int, bool]:
    """``text`` within ``left`` of the budget (up to ``force`` always kept, e.g. an error's
    name)."""
    cost = _cost(text)
    if cost <= left:
        return text, left - cost, cut
    room = max(left, force)
    lo, hi = 0, min(len(text), room)  # the longest start of ``text`` that ``room`` holds
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if _cost(text[:mid]) <= room else (lo, mid - 1)
    return text[:lo], max(left - _cost(text[:lo]), 0), True


def _data(data: object, left: int, cut: bool) -> tuple[dict, int, bool]:
    if not isinstance(data, dict):
        return {}, left, cut
    out = {}
    for mime in MIME:
        value = _text(data.get(mime))
        if not value:
            continue
        if mime != "text/plain":
            if len(value) > left or not _BASE64.fullmatch(value):
                cut = cut or len(value) > left
                continue
            out[mime], left = value, left - len(value)
        else:
            value, left, cut = _take(value, left, cut)
            out[mime] = value
    return out, left, cut


def graded(sandbox: list[dict], verdicts: list) -> list[dict]:
    """A graded test cell's outputs from the grader's verdicts (see the module doc)."""
    failed = [v for v in verdicts if not v.passed]
    out = []
    for o in sandbox:
        if o["output_type"] == "execute_result":
            o = {"output_type": "display_data", "data": o["data"], "metadata": {}}
        elif o["output_type"] == "stream" and o["name"] == "stderr" and verdicts and not failed:
            o = stream("stdout", "[stderr] " + o["text"])
        out.append(o)
    if not verdicts:
        out.append(error(
            "NotCheckable",
            "this test cell has no hidden check the grader can run outside the notebook; "
            "grade it by hand",
        ))  # fmt: skip
    elif failed:
        text = " ".join(v.feedback() for v in failed)
        out.append(error("AssertionError", text, "(the grader's checks, run outside the notebook)"))
    else:
        names = ", ".join(v.name for v in verdicts)
        out.append(stream("stdout", f"✓ {names}: checked by the grader\n"))
    return out
