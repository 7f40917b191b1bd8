"""Turn measurements into a CSV, markdown tables, fitted exponents and a log-log plot."""

from __future__ import annotations

import csv
import json
import math
import shlex
import sys
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from attnlib.numpy import fit_exponent

MiB = 1 << 20


@dataclass
class Result:
    """One method at one size: what was measured, or why it was skipped."""

    method: str
    label: str
    n: int
    heads: int
    d: int
    causal: bool
    status: str = "ok"  # "ok" or "skipped"
    note: str = ""
    time_s: float = math.nan
    gflops: float = math.nan
    peak_bytes: float = math.nan  # tracemalloc (NumPy), fresh-process RSS (torch), allocator (CUDA)
    peak_source: str = ""
    rss_bytes: float = math.nan  # peak RSS growth in a fresh process (every CPU method)
    others_cpu: float = math.nan  # share of the CPUs other processes used while timing
    output_bytes: float = math.nan  # the result alone, (batch, heads, n, d) float32

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class HeadToHead:
    """Chunked NumPy against Torch SDPA at one size, causal or not."""

    n: int
    heads: int
    d: int
    causal: bool
    chunked_s: float
    sdpa_s: float
    chunked_peak_bytes: float  # tracemalloc
    chunked_rss_bytes: float  # fresh process
    sdpa_rss_bytes: float  # fresh process
    max_abs_diff: float
    load_before: str
    load_after: str
    others_cpu: float  # share of the CPUs other processes used while timing

    @property
    def ratio(self) -> float:
        return self.chunked_s / self.sdpa_s


def command_line(module: str, argv: Sequence[str] | None) -> str:
    """How the benchmark ``module`` was run: ``python -m MODULE`` and its arguments (``argv``, or
    the command line's when None)."""
    return f"python -m {module} {shlex.join(sys.argv[1:] if argv is None else argv)}".strip()


def write_down(out: Path, name: str, text: str, result: dict) -> None:
    """A benchmark's page ``text`` as ``OUT/NAME.md`` and its ``result`` as ``OUT/NAME.json``;
    the page is printed too."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text, encoding="utf-8")
    (out / f"{name}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(text)


def write_csv(rows: Sequence[object], path: Path) -> None:
    """Rows of one dataclass as CSV, one column per field (plus ``ratio`` for head-to-head)."""
    if not rows:
        return
    names = [f.name for f in fields(rows[0])]
    extra = ["ratio"] if isinstance(rows[0], HeadToHead) else []
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names + extra)
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row) | ({"ratio": row.ratio} if extra else {}))


def fit_window(ns: Sequence[int], min_n: int) -> list[int]:
    """The sizes an exponent is fitted on: those ``>= min_n``, or all if fewer than two."""
    big = [n for n in ns if n >= min_n]
    return big if len(big) >= 2 else list(ns)


def exponents(results: Iterable[Result], min_n: int) -> dict[str, dict[str, float | str]]:
    """Per method: fitted time and memory exponents and the sizes they were fitted on."""
    by_method: dict[str, list[Result]] = {}
    for r in results:
        if r.ok:
            by_method.setdefault(r.method, []).append(r)
    fits: dict[str, dict[str, float | str]] = {}
    for key, rows in by_method.items():
        rows.sort(key=lambda r: r.n)
        window = set(fit_window([r.n for r in rows], min_n))
        rows = [r for r in rows if r.n in window]
        fits[key] = {
            "label": rows[0].label,
            "time": _fit([r.n for r in rows], [r.time_s for r in rows]),
            "memory": _fit([r.n for r in rows], [r.peak_bytes for r in rows]),
            "working": _fit([r.n for r in rows], [r.peak_bytes - r.output_bytes for r in rows]),
            "rss": _fit([r.n for r in rows], [r.rss_bytes for r in rows]),
            "sizes": f"{min(window)}–{max(window)}",
        }
    return fits


def _fit(ns: list[int], values: list[float]) -> float:
    pairs = [(n, v) for n, v in zip(ns, values, strict=True) if v > 0 and math.isfinite(v)]
    if len({n for n, _ in pairs}) < 2:
        return math.nan
    return fit_exponent([n for n, _ in pairs], [v for _, v in pairs])


def _interference(results: Sequence[Result]) -> str:
    shares = [r.others_cpu for r in results if r.ok and math.isfinite(r.others_cpu)]
    if not shares:
        return ""
    return (
        f"Other processes used {_percent(float(np.median(shares)))} of the CPUs while a "
        f"typical size was timed (at most {_percent(max(shares))})."
    )


def _percent(x: float) -> str:
    return "—" if not math.isfinite(x) else f"{100 * x:.0f}%"


def _num(x: float, digits: int = 1) -> str:
    if not math.isfinite(x):
        return "—"
    return f"{x:,.{digits}f}" if abs(x) >= 1 or x == 0 else f"{x:.3g}"


def pivot(results: Sequence[Result], value, digits: int = 1) -> list[str]:
    """A markdown table: one row per ``n``, one column per method, ``value(result)`` in cells."""
    labels = list(dict.fromkeys(r.label for r in results))
    ns = sorted({r.n for r in results})
    cell = {(r.label, r.n): r for r in results}
    lines = ["| n | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
    for n in ns:
        cells = []
        for label in labels:
            r = cell.get((label, n))
            cells.append("—" if r is None else (_num(value(r), digits) if r.ok else "skipped"))
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def markdown(
    results: Sequence[Result],
    h2h: Sequence[HeadToHead],
    machine_lines: Sequence[str],
    command: str,
    repeats: int,
    fit_min_n: int,
) -> str:
    """The whole report as markdown."""
    first = results[0] if results else None
    shape = f"h={first.heads}, d={first.d}, float32, batch 1" if first else ""
    causal = " causal" if first and first.causal else ""
    out = [
        "# Attention benchmarks",
        "",
        f"Command: `{command}`",
        "",
        "Machine:",
        "",
        *[f"- {line}" for line in machine_lines],
        "",
    ]
    if results:
        sources = sorted({f"{r.label}: {r.peak_source}" for r in results if r.ok})
        out += [
            f"## Time ({shape}{causal}), milliseconds",
            "",
            f"Best of {repeats} runs after one warm-up run. {_interference(results)}",
            "",
            *pivot(results, lambda r: r.time_s * 1e3),
            "",
            "## Throughput, GFLOP/s (the two matrix products, `4·n²·d·h`)",
            "",
            *pivot(results, lambda r: r.gflops),
            "",
            "## Peak extra memory, MiB",
            "",
            "Inputs excluded, output included. Sources: " + "; ".join(sources) + ".",
            "",
            *pivot(results, lambda r: r.peak_bytes / MiB),
            "",
            "## Peak resident-memory growth in a fresh process, MiB",
            "",
            "The same measurement for every method (see `benchmarks/probe.py`).",
            "",
            *pivot(results, lambda r: r.rss_bytes / MiB),
            "",
            f"## Fitted exponents (`fit_exponent`, sizes n ≥ {fit_min_n})",
            "",
            "Peak memory is the output (`h·n·d·4` bytes, ∝ n) plus working memory; the last "
            "column fits the working memory alone (peak minus output). A chunked method's "
            "working memory is a fixed set of tile buffers, so its total approaches ∝ n only "
            "once the output outgrows them.",
            "",
            "| method | time ∝ nᵖ | peak memory ∝ nᵖ | RSS growth ∝ nᵖ "
            "| peak − output ∝ nᵖ | sizes |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for fit in exponents(results, fit_min_n).values():
            out.append(
                f"| {fit['label']} | {_num(fit['time'], 2)} | {_num(fit['memory'], 2)} "
                f"| {_num(fit['rss'], 2)} | {_num(fit['working'], 2)} | {fit['sizes']} |"
            )
        skipped = [r for r in results if not r.ok]
        if skipped:
            out += ["", "Skipped:", ""]
            out += [f"- {r.label} at n={r.n}: {r.note}" for r in skipped]
        out.append("")
    if h2h:
        out += head_to_head_markdown(h2h)
    return "\n".join(out)


def head_to_head_markdown(h2h: Sequence[HeadToHead]) -> list[str]:
    first = h2h[0]
    out = [
        f"## Head-to-head: chunked NumPy vs Torch SDPA, n={first.n}, h={first.heads}, "
        f"d={first.d}, float32",
        "",
        "| causal | chunked NumPy ms | SDPA ms | ratio | chunked peak MiB (tracemalloc) "
        "| chunked RSS MiB | SDPA RSS MiB | max abs diff | load before → after "
        "| others' CPU |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for h in h2h:
        out.append(
            f"| {h.causal} | {h.chunked_s * 1e3:.1f} | {h.sdpa_s * 1e3:.1f} | {h.ratio:.2f}× "
            f"| {_num(h.chunked_peak_bytes / MiB)} | {_num(h.chunked_rss_bytes / MiB)} "
            f"| {_num(h.sdpa_rss_bytes / MiB)} | {h.max_abs_diff:.2e} "
            f"| {h.load_before} → {h.load_after} | {_percent(h.others_cpu)} |"
        )
    out.append("")
    return out


def _guides(ax) -> None:
    """Grey dashed lines of slope 1 and 2 through the middle of the plotted data."""
    xs = [x for line in ax.get_lines() for x in line.get_xdata()]
    ys = [y for line in ax.get_lines() for y in line.get_ydata()]
    if not xs:
        return
    lo, hi = min(xs), max(xs)
    x0, y0 = math.sqrt(lo * hi), math.exp(np.mean(np.log(ys)))
    for p, style in ((1, ":"), (2, "--")):
        ax.plot(
            [lo, hi],
            [y0 * (lo / x0) ** p, y0 * (hi / x0) ** p],
            style,
            color="grey",
            lw=1,
            label=f"∝ n{'²' if p == 2 else ''}",
        )


def plot(results: Sequence[Result], path: Path, fit_min_n: int) -> None:
    """Log-log plot of time and peak memory against n, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fits = exponents(results, fit_min_n)
    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    for key, fit in fits.items():
        rows = sorted((r for r in results if r.method == key and r.ok), key=lambda r: r.n)
        ns = [r.n for r in rows]
        ax_time.plot(
            ns, [r.time_s for r in rows], "o-", label=f"{fit['label']} (p={fit['time']:.2f})"
        )
        mem = [(r.n, r.peak_bytes / MiB) for r in rows if r.peak_bytes > 0]
        if mem:
            ax_mem.plot(
                *zip(*mem, strict=True), "o-", label=f"{fit['label']} (p={fit['memory']:.2f})"
            )
    for ax, title, unit in (
        (ax_time, "time", "seconds"),
        (ax_mem, "peak extra memory", "MiB"),
    ):
        _guides(ax)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(unit)
        ax.set_title(f"{title} vs n")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    ranges = ", ".join(sorted({str(fit["sizes"]) for fit in fits.values()}))
    fig.suptitle(f"Attention, log-log; p = exponent fitted with fit_exponent over n = {ranges}")
    fig.savefig(path, dpi=120)
    plt.close(fig)
