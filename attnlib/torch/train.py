"""Lesson 06: training a :class:`~attnlib.torch.gpt.GPT` on characters, on any device.

* :class:`CharVocab` turns text into token ids and back, one id per distinct character.
* :func:`split` keeps every tenth stretch of a text for validation (so both parts read alike);
  :func:`windows` cuts random training windows ``(B, T)`` out of one long id sequence, with the
  targets one position later.
* :func:`repeated_tokens` and :func:`repeating_batch` make random token sequences that repeat
  themselves: the task on which induction heads form.
* :func:`train` runs AdamW with a warm-up and a cosine decay, shows a tqdm progress bar, calls an
  optional ``callback(history)`` (a live loss plot, say) and returns a :class:`History`.

Everything random comes from generators seeded by the caller, so on the CPU a run repeats
exactly for a given seed (and number of threads); the caller's random state is left alone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from attnlib._shapes import check_positive_int, fmt, require_exact_ndim

from .gpt import GPT

Batch = tuple[torch.Tensor, torch.Tensor]


class CharVocab:
    """One token per distinct character of a text, ids in sorted order of the characters.

    Args:
      chars: the characters of the vocabulary (e.g. a whole text; duplicates are dropped).
    """

    def __init__(self, chars: str) -> None:
        if not isinstance(chars, str) or not chars:
            raise ValueError("CharVocab needs a non-empty string of characters")
        self.chars = "".join(sorted(set(chars)))
        self._ids = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def __repr__(self) -> str:
        return f"CharVocab({len(self)} characters)"

    def encode(self, text: str) -> torch.Tensor:
        """``text`` → token ids ``(len(text),)`` (``torch.long``)."""
        missing = sorted(set(text) - set(self._ids))
        if missing:
            raise ValueError(f"characters not in the vocabulary: {''.join(missing)!r}")
        return torch.tensor([self._ids[c] for c in text], dtype=torch.long)  # (len(text),)

    def decode(self, ids: torch.Tensor | Sequence[int]) -> str:
        """Token ids ``(T,)`` → text."""
        if isinstance(ids, torch.Tensor):
            require_exact_ndim("ids", tuple(ids.shape), 1, "(T,) token ids")
            ids = ids.tolist()
        return "".join(self.chars[i] for i in ids)


def windows(data: torch.Tensor, batch_size: int, T: int, generator: torch.Generator) -> Batch:
    """Random windows of a token sequence and their next tokens.

    Args:
      data: token ids ``(N,)`` with ``N > T``.
      batch_size: ``B``, the number of windows.
      T: the window length.
      generator: where the starting points come from.

    Returns:
      ``(x (B, T), y (B, T))`` where ``y[b, t]`` is the token that follows ``x[b, t]`` in
      ``data`` (so ``y[b, :-1] == x[b, 1:]``).
    """
    require_exact_ndim("data", tuple(data.shape), 1, "(N,) token ids")
    if data.shape[0] <= T:
        raise ValueError(f"data {fmt(data.shape)} is too short for windows of T = {T} (+1)")
    starts = torch.randint(0, data.shape[0] - T, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(T)  # (T,)
    x = data[starts[:, None] + offsets]  # (B, T)
    y = data[starts[:, None] + offsets + 1]  # (B, T), one position later
    return x, y


def split(
    ids: torch.Tensor, every: int = 10, chunk: int = 1000
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split token ids ``(N,)`` into training and validation ids.

    The ids are cut into stretches of ``chunk`` tokens and every ``every``-th stretch goes to
    validation, so both parts come from all over the text (the end of a text is rarely like its
    beginning).

    Returns:
      ``(train (N_train,), val (N_val,))``.
    """
    require_exact_ndim("ids", tuple(ids.shape), 1, "(N,) token ids")
    check_positive_int("chunk", chunk)
    if check_positive_int("every", every) < 2:
        raise ValueError(f"every = {every} would leave nothing to train on; use 2 or more")
    parts = ids.split(chunk)
    val = [p for i, p in enumerate(parts) if i % every == every - 1]
    if not val:
        raise ValueError(f"ids {fmt(ids.shape)} is shorter than {every} chunks of {chunk}")
    train = [p for i, p in enumerate(parts) if i % every != every - 1]
    return torch.cat(train), torch.cat(val)


def repeated_tokens(
    batch: int, period: int, repeats: int, vocab_size: int, *, seed: int = 0
) -> torch.Tensor:
    """Random token sequences that repeat with a fixed period: ``(batch, period * repeats)``.

    The first ``period`` tokens of each sequence are drawn uniformly from ``[0, vocab_size)``;
    the rest repeat them, so token ``i`` equals token ``i - period`` from position ``period`` on
    (what :func:`attnlib.torch.induction_score` expects).
    """
    for name, value in (("batch", batch), ("period", period), ("repeats", repeats)):
        check_positive_int(name, value)
    check_positive_int("vocab_size", vocab_size)
    gen = torch.Generator().manual_seed(seed)
    first = torch.randint(0, vocab_size, (batch, period), generator=gen)  # (batch, period)
    return first.repeat(1, repeats)  # (batch, period * repeats)


def repeating_batch(
    generator: torch.Generator,
    batch_size: int,
    T: int,
    vocab_size: int,
    periods: tuple[int, int],
) -> Batch:
    """A batch of random sequences, each repeating with its own period, and their next tokens.

    Every sequence draws a period ``p`` in ``periods`` (inclusive) and ``p`` random tokens, then
    repeats them. Since ``p`` changes from sequence to sequence, no fixed offset predicts the
    next token: the model has to find the earlier occurrence of the current token and copy the
    token after it, which is what an induction head does.

    Returns:
      ``(x (batch_size, T), y (batch_size, T))``, ``y`` one position ahead of ``x``.
    """
    low, high = periods
    if not 1 <= low <= high <= T:
        raise ValueError(f"periods {periods} must satisfy 1 <= low <= high <= T = {T}")
    p = torch.randint(low, high + 1, (batch_size,), generator=generator)  # (B,)
    tokens = torch.randint(0, vocab_size, (batch_size, T + 1), generator=generator)  # (B, T+1)
    where = torch.arange(T + 1)[None] % p[:, None]  # (B, T+1): position modulo the period
    seq = torch.gather(tokens, 1, where)  # (B, T+1), repeating with period p
    return seq[:, :-1], seq[:, 1:]  # (B, T), (B, T)


@dataclass
class History:
    """What a training run measured.

    ``steps``/``loss``: the training loss (nats per token) of every step; ``val_steps``/
    ``val_loss``: the validation loss at the evaluation points; ``seconds``: wall time of the
    whole run; ``tokens``: tokens processed.
    """

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    val_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    tokens: int = 0
    label: str = ""

    def smoothed(self, window: int = 50) -> list[float]:
        """The training loss averaged over the last ``window`` steps, step by step."""
        out, total = [], 0.0
        for i, value in enumerate(self.loss):
            total += value
            if i >= window:
                total -= self.loss[i - window]
            out.append(total / min(i + 1, window))
        return out

    @property
    def final_loss(self) -> float:
        """The training loss averaged over the last 50 steps (or fewer)."""
        return self.smoothed()[-1] if self.loss else math.nan

    @property
    def final_val_loss(self) -> float:
        return self.val_loss[-1] if self.val_loss else math.nan


def learning_rate(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then a cosine decay to ``lr / 10`` at ``steps``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress))))


@torch.no_grad()
def evaluate(model: GPT, batches: Sequence[Batch]) -> float:
    """Mean loss of ``model`` over fixed batches, in eval mode (restored afterwards)."""
    was_training = model.training
    model.eval()
    try:
        losses = [model.loss(x, y).item() for x, y in batches]
    finally:
        model.train(was_training)
    return sum(losses) / len(losses)


def train(
    model: GPT,
    data: torch.Tensor | Callable[[torch.Generator], Batch],
    *,
    steps: int,
    batch_size: int = 32,
    T: int | None = None,
    lr: float = 3e-3,
    weight_decay: float = 0.01,
    warmup: int | None = None,
    grad_clip: float = 1.0,
    seed: int = 0,
    val_data: torch.Tensor | None = None,
    eval_every: int = 100,
    eval_batches: int = 4,
    callback: Callable[[History], None] | None = None,
    progress: bool = True,
    label: str = "",
    until: int | None = None,
) -> History:
    """Train ``model`` for ``steps`` steps of AdamW and return what was measured.

    Args:
      model: the model, on any device; its batches are moved there.
      data: token ids ``(N,)`` to cut random windows from, or a function
        ``batch(generator) -> (x (B, T), y (B, T))`` that makes a batch (synthetic tasks).
      steps: optimiser steps.
      batch_size, T: windows per step and their length (``T`` defaults to ``block_size``).
      lr, weight_decay, warmup, grad_clip: AdamW's learning rate (peak), weight decay on the
        matrices, linear warm-up steps (default ``steps // 20``) and the gradient-norm clip.
      seed: seeds the batch generator (the model's own seed fixes its initialisation).
      val_data: token ids to measure a validation loss on every ``eval_every`` steps and at
        the end, over ``eval_batches`` fixed windows.
      callback: called as ``callback(history)`` every ``eval_every`` steps and at the end.
      progress: show a tqdm progress bar with the running loss.
      label: a name kept in the history (for plots of several runs).
      until: stop after this many steps (default: all ``steps``). The learning-rate schedule
        still spans ``steps``, so a run stopped early repeats exactly the first steps of a full
        run with the same seeds: an ablation can be compared with the start of a long run.
    """
    check_positive_int("steps", steps)
    check_positive_int("batch_size", batch_size)
    T = model.config.block_size if T is None else check_positive_int("T", T)
    if T > model.config.block_size:
        raise ValueError(f"T = {T} is longer than the model's block_size {model.config.block_size}")
    warmup = max(1, steps // 20) if warmup is None else check_positive_int("warmup", warmup)
    until = steps if until is None else check_positive_int("until", until)
    if until > steps:
        raise ValueError(f"until = {until} is beyond the {steps} steps of the schedule")
    gen = torch.Generator().manual_seed(seed)
    if callable(data):
        make_batch = data
    else:
        ids = data

        def make_batch(g: torch.Generator) -> Batch:
            return windows(ids, batch_size, T, g)

    val = []
    if val_data is not None:
        val_gen = torch.Generator().manual_seed(seed + 1)
        val = [windows(val_data, batch_size, T, val_gen) for _ in range(eval_batches)]

    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimiser = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0}],
        lr=lr,
        betas=(0.9, 0.95),
    )
    history = History(label=label)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=until, desc=label or "training", unit="step", leave=True)
    model.train()
    start = time.perf_counter()
    try:
        for step in range(until):
            for group in optimiser.param_groups:
                group["lr"] = learning_rate(step, steps, lr, warmup)
            x, y = make_batch(gen)  # (B, T) each
            loss = model.loss(x.to(model.device), y.to(model.device))
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimiser.step()
            history.steps.append(step + 1)
            history.loss.append(loss.item())
            history.tokens += x.numel()
            last = step + 1 == until
            if (step + 1) % eval_every == 0 or last:
                if val:
                    history.val_steps.append(step + 1)
                    history.val_loss.append(evaluate(model, val))
                history.seconds = time.perf_counter() - start
                if callback is not None:
                    callback(history)
            if bar is not None:
                bar.update(1)
                if (step + 1) % 25 == 0 or last:
                    recent = history.loss[-25:]
                    bar.set_postfix(loss=f"{sum(recent) / len(recent):.3f}", refresh=False)
    finally:
        if bar is not None:
            bar.close()
    history.seconds = time.perf_counter() - start
    model.eval()
    return history
