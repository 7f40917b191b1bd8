"""Lesson 06: a tiny decoder-only Transformer (GPT) built from :class:`CausalSelfAttention`.

The model is a stack of pre-norm blocks, ``x + attn(ln1(x))`` then ``x + mlp(ln2(x))``, over
token plus learned position embeddings, with a linear read-out to next-token logits. Everything
it does the lessons have built: scaled dot-product scores, a causal mask, a softmax over the
keys, heads split and merged, and one decoding step with a key/value cache.

The ablations of the lesson are explicit switches of :class:`GPTConfig` (never monkeypatching),
so a broken model is built the same way as a working one and can be compared with it:

* ``causal=False``: no causal mask; every position sees the future (a leak);
* ``positions=False``: no position embedding; the model only has the causal mask to tell where
  a token stands;
* ``scaled=False``: scores ``Q Kᵀ`` without the ``1/sqrt(d_head)``;
* ``softmax_axis=-2``: the softmax normalises over the queries instead of the keys.

:data:`ABLATIONS` names them. ``model(idx, need_weights=True)`` also returns every layer's
attention weights ``(B, h, T, T)``; :meth:`GPT.generate` decodes with or without a key/value
cache and, under greedy decoding, both give the same tokens; :meth:`GPT.prefix_loss` measures the
loss as generation sees it (each position from its prefix alone), which exposes a leak; and
:meth:`GPT.silence` switches heads off, to test what a head does rather than read it off a map.
:func:`previous_token_score`, :func:`sink_weight` and :func:`head_scores` (with
:func:`attnlib.torch.induction_score`) measure what each head does.

Initialisation: embeddings start with entries of variance one and every linear map ``(out, in)``
with standard deviation ``1/sqrt(in)``, so every vector the model makes starts with entries of
variance about one. Queries and keys included: that is the assumption behind dividing the scores
by ``sqrt(d_head)``, and what the no-scaling ablation breaks. (GPT-2's smaller ``0.02`` suits
wide models; a model this small learns much more slowly from it.)

Construction never touches the caller's random state: parameters come from a private generator
seeded with ``seed``, on the CPU, and are then moved to ``device``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attnlib._shapes import (
    check_heads,
    check_nonneg_int,
    check_positive_int,
    fmt,
    require_exact_ndim,
)

from .causal import CausalSelfAttention
from .decoding import cached_attention
from .devices import device as best_device
from .heads import _merge

KeyValue = tuple[torch.Tensor, torch.Tensor]

ABLATIONS: dict[str, dict[str, object]] = {
    "no causal mask": {"causal": False},
    "no positions": {"positions": False},
    "no 1/sqrt(d) scaling": {"scaled": False},
    "softmax over queries": {"softmax_axis": -2},
}
"""The lesson's ablations: a name and the :class:`GPTConfig` fields it changes."""


@dataclass(frozen=True)
class GPTConfig:
    """The sizes of a :class:`GPT` and its ablation switches.

    Args:
      vocab_size: number of distinct tokens (characters for a character-level model).
      block_size: the longest context ``T`` the model reads (the number of learned positions).
      d_model: width of the residual stream.
      n_heads: heads per layer, dividing ``d_model`` (``d_head = d_model // n_heads``).
      n_layers: number of blocks.
      dropout: probability of dropping an attention weight, in training mode only.
      causal: mask the future (True) or let every position see every other (False, a leak).
      positions: add learned position embeddings (True) or not (False).
      scaled: divide the scores by ``sqrt(d_head)`` (True) or not (False).
      softmax_axis: ``-1`` normalises over the keys (right); ``-2`` over the queries (wrong).
    """

    vocab_size: int
    block_size: int = 128
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    dropout: float = 0.0
    causal: bool = True
    positions: bool = True
    scaled: bool = True
    softmax_axis: int = -1

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "d_model", "n_heads", "n_layers"):
            check_positive_int(name, getattr(self, name))
        check_heads("d_model", self.d_model, self.n_heads)
        if isinstance(self.dropout, bool) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be a probability in [0, 1), got {self.dropout!r}")
        for name in ("causal", "positions", "scaled"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.softmax_axis not in (-1, -2):
            raise ValueError(
                f"softmax_axis must be -1 (over the keys) or -2 (over the queries, the "
                f"ablation), got {self.softmax_axis!r}"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def standard(self) -> bool:
        """True when no ablation is switched on."""
        return self.causal and self.positions and self.scaled and self.softmax_axis == -1

    def replace(self, **changes) -> GPTConfig:
        """A copy with some fields changed, e.g. ``config.replace(causal=False)``."""
        return dataclasses.replace(self, **changes)

    def ablate(self, name: str) -> GPTConfig:
        """A copy with the ablation ``name`` of :data:`ABLATIONS` switched on."""
        if name not in ABLATIONS:
            raise ValueError(f"unknown ablation {name!r}; ablations are {', '.join(ABLATIONS)}")
        return self.replace(**ABLATIONS[name])


class GPTAttention(CausalSelfAttention):
    """:class:`CausalSelfAttention` with the ablation switches and access to its weights.

    The parameters (``qkv``, ``proj``) and their layout are those of
    :class:`CausalSelfAttention`, so a state dict moves between the two. With every switch at
    its default the forward pass is :class:`CausalSelfAttention`'s (PyTorch's fused kernel);
    otherwise, or when the weights are asked for, the weights are computed explicitly.

    Args:
      d_model, n_heads, dropout: as for :class:`CausalSelfAttention`.
      causal: mask the future (default True).
      scaled: divide the scores by ``sqrt(d_head)`` (default True).
      softmax_axis: ``-1`` over the keys (default) or ``-2`` over the queries (the ablation).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        *,
        causal: bool = True,
        scaled: bool = True,
        softmax_axis: int = -1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(d_model, n_heads, dropout, device=device, dtype=dtype)
        self.causal, self.scaled, self.softmax_axis = causal, scaled, softmax_axis
        self.silenced: tuple[int, ...] = ()  # heads whose output is zeroed (GPT.silence)

    @property
    def standard(self) -> bool:
        return self.causal and self.scaled and self.softmax_axis == -1

    def _weights(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Attention weights ``(B, h, T, T)`` of queries and keys ``(B, h, T, d_head)``."""
        scores = q @ k.transpose(-2, -1)  # (B, h, T, T)
        if self.scaled:
            scores = scores / math.sqrt(self.d_head)
        if self.causal:
            T = q.shape[-2]
            keep = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()  # (T, T)
            scores = scores.masked_fill(~keep, float("-inf"))
        # Over the keys every row keeps key 0; over the queries every column keeps query T-1,
        # so neither softmax ever sees a row of -inf only.
        return torch.softmax(scores, dim=self.softmax_axis)  # (B, h, T, T)

    def forward(
        self, x: torch.Tensor, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Attend over ``x (B, T, d_model)``.

        Returns:
          ``(B, T, d_model)``, or ``(output, weights (B, h, T, T))`` with ``need_weights``
          (the weights before dropout).
        """
        dropping = self.training and self.dropout > 0
        if self.standard and not need_weights and not dropping and not self.silenced:
            return super().forward(x)  # (B, T, d_model), fused kernel
        q, k, v = self._heads(x)  # each (B, h, T, d_head)
        weights = self._weights(q, k)  # (B, h, T, T)
        y = self._silence(self.attn_dropout(weights) @ v)  # (B, h, T, d_head)
        out = self.proj(_merge(y))  # (B, T, d_model)
        return (out, weights) if need_weights else out

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """The weights ``(B, h, T, T)`` this layer uses on ``x (B, T, d_model)``, no dropout."""
        q, k, _ = self._heads(x)  # each (B, h, T, d_head)
        return self._weights(q, k)  # (B, h, T, T)

    def step(self, x_t: torch.Tensor, cache: KeyValue | None) -> tuple[torch.Tensor, KeyValue]:
        """One decoding step with a key/value cache, through :func:`cached_attention`.

        Args:
          x_t: the newest position ``(B, 1, d_model)``.
          cache: ``None`` or ``(K (B, h, t, d_head), V (B, h, t, d_head))``.

        Returns:
          ``(out_t (B, 1, d_model), (K', V'))``, the cache one step longer.
        """
        if not self.causal or self.softmax_axis != -1:
            raise ValueError(
                "a key/value cache needs causal attention with the softmax over the keys: "
                f"this layer has causal={self.causal}, softmax_axis={self.softmax_axis}, so "
                "every step depends on positions after it; decode with use_cache=False"
            )
        q, k, v = self._heads(x_t)  # each (B, h, 1, d_head)
        if not self.scaled:
            q = q * math.sqrt(self.d_head)  # cancels the 1/sqrt(d_head) of cached_attention
        y, cache = cached_attention(q, k, v, cache)  # (B, h, 1, d_head), cache (B, h, t+1, .)
        return self.proj(_merge(self._silence(y))), cache  # (B, 1, d_model)

    def _silence(self, y: torch.Tensor) -> torch.Tensor:
        """Zero the outputs ``(B, h, T, d_head)`` of the silenced heads."""
        if not self.silenced:
            return y
        keep = torch.ones(self.n_heads, dtype=y.dtype, device=y.device)  # (h,)
        keep[list(self.silenced)] = 0
        return y * keep[:, None, None]  # (B, h, T, d_head)


class Block(nn.Module):
    """A pre-norm Transformer block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``.

    Args:
      d_model, n_heads, dropout: as for :class:`CausalSelfAttention`.
      **switches: ``causal``, ``scaled``, ``softmax_axis`` for :class:`GPTAttention`.

    Submodules (their names are the state-dict keys): ``ln1``, ``attn`` (``attn.qkv``,
    ``attn.proj``), ``ln2``, ``mlp`` (``mlp.0 = Linear(d, 4d)``, ``mlp.1 = GELU()``,
    ``mlp.2 = Linear(4d, d)``). ``n_heads``, ``d_head`` and :meth:`attention` give it the
    interface of lesson 06's debugging exercise (``BuggyBlock``/``RepairedBlock``), of which it
    is the reference.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, **switches) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = GPTAttention(d_model, n_heads, dropout, **switches)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    @property
    def n_heads(self) -> int:
        return self.attn.n_heads

    @property
    def d_head(self) -> int:
        return self.attn.d_head

    def attention(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The attention branch on ``z = ln1(x)`` ``(B, T, d_model)``.

        Returns:
          ``(output (B, T, d_model), weights (B, h, T, T))``, before the residual addition.
        """
        return self.attn(z, need_weights=True)

    def forward(
        self, x: torch.Tensor, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``x (B, T, d_model)`` → ``(B, T, d_model)`` (and the weights ``(B, h, T, T)``)."""
        a = self.attn(self.ln1(x), need_weights)
        a, weights = a if need_weights else (a, None)  # (B, T, d_model), (B, h, T, T)
        x = x + a  # (B, T, d_model)
        x = x + self.mlp(self.ln2(x))  # (B, T, d_model)
        return (x, weights) if need_weights else x

    def step(self, x_t: torch.Tensor, cache: KeyValue | None) -> tuple[torch.Tensor, KeyValue]:
        """One decoding step: ``x_t (B, 1, d_model)`` → ``((B, 1, d_model), cache)``."""
        a, cache = self.attn.step(self.ln1(x_t), cache)  # (B, 1, d_model)
        x_t = x_t + a
        return x_t + self.mlp(self.ln2(x_t)), cache  # (B, 1, d_model)


class GPT(nn.Module):
    """A decoder-only Transformer over a vocabulary of ``config.vocab_size`` tokens.

    Args:
      config: the sizes and switches (:class:`GPTConfig`).
      seed: seeds the private generator the parameters are drawn from (default 0).
      device: where to put the model (default: :func:`attnlib.torch.device`, i.e. cuda, then
        mps, then cpu).

    ``model(idx)`` maps token ids ``(B, T)`` to next-token logits ``(B, T, vocab_size)``.
    """

    def __init__(
        self, config: GPTConfig, *, seed: int = 0, device: torch.device | str | None = None
    ) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = c = config
        switches = {"causal": c.causal, "scaled": c.scaled, "softmax_axis": c.softmax_axis}
        with torch.random.fork_rng(devices=[]):  # nn's default init draws from the global RNG
            self.tok = nn.Embedding(c.vocab_size, c.d_model)
            self.pos = nn.Embedding(c.block_size, c.d_model) if c.positions else None
            self.blocks = nn.ModuleList(
                Block(c.d_model, c.n_heads, c.dropout, **switches) for _ in range(c.n_layers)
            )
            self.ln_f = nn.LayerNorm(c.d_model)
            self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.reset_parameters(seed)
        self.to(best_device() if device is None else device)

    @torch.no_grad()
    def reset_parameters(self, seed: int = 0) -> None:
        """Draw every parameter again from a generator seeded with ``seed`` (see the module)."""
        gen = torch.Generator().manual_seed(seed)
        for module in self.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
            elif isinstance(module, nn.Embedding):  # (count, d): rows of variance one
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen))
            elif isinstance(module, nn.Linear):  # (out, in): outputs of variance about one
                std = 1.0 / math.sqrt(module.in_features)
                module.weight.copy_(torch.randn(module.weight.shape, generator=gen) * std)
                if module.bias is not None:
                    module.bias.zero_()

    @property
    def device(self) -> torch.device:
        return self.tok.weight.device

    def num_parameters(self) -> int:
        """The number of trainable numbers in the model."""
        return sum(p.numel() for p in self.parameters())

    def _check_ids(self, idx: torch.Tensor, name: str = "idx") -> None:
        if not isinstance(idx, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor of token ids, got {type(idx)!r}")
        require_exact_ndim(name, tuple(idx.shape), 2, "(B, T) token ids")
        if idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise ValueError(f"{name} has dtype {idx.dtype}; token ids are integers (torch.long)")
        T = idx.shape[1]
        if not 1 <= T <= self.config.block_size:
            raise ValueError(
                f"{name} {fmt(idx.shape)} has T = {T} tokens; the model reads 1 to "
                f"block_size = {self.config.block_size}"
            )
        if idx.numel() and (idx.min() < 0 or idx.max() >= self.config.vocab_size):
            raise ValueError(
                f"{name} holds ids from {int(idx.min())} to {int(idx.max())}; the vocabulary "
                f"has ids 0 to {self.config.vocab_size - 1}"
            )

    def _embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        x = self.tok(idx)  # (B, T, d_model)
        if self.pos is not None:
            where = torch.arange(start, start + idx.shape[1], device=idx.device)  # (T,)
            x = x + self.pos(where)  # (B, T, d_model), positions broadcast over the batch
        return x

    def forward(
        self, idx: torch.Tensor, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Next-token logits for every position.

        Args:
          idx: token ids ``(B, T)``, ``1 <= T <= block_size``, on the model's device.
          need_weights: also return each layer's attention weights.

        Returns:
          logits ``(B, T, vocab_size)`` (row ``t`` predicts token ``t + 1``), or
          ``(logits, weights)`` where ``weights[l]`` is layer ``l``'s ``(B, h, T, T)``.
        """
        self._check_ids(idx)
        x = self._embed(idx.to(self.device).long())  # (B, T, d_model)
        maps = []
        for block in self.blocks:
            if need_weights:
                x, w = block(x, need_weights=True)  # (B, T, d_model), (B, h, T, T)
                maps.append(w)
            else:
                x = block(x)  # (B, T, d_model)
        logits = self.head(self.ln_f(x))  # (B, T, vocab_size)
        return (logits, tuple(maps)) if need_weights else logits

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy (nats per token) of predicting ``targets (B, T)`` from ``idx``."""
        if not isinstance(targets, torch.Tensor) or targets.shape != idx.shape:
            shape = fmt(targets.shape) if isinstance(targets, torch.Tensor) else type(targets)
            raise ValueError(f"targets {shape} must have the shape of idx {fmt(idx.shape)}")
        logits = self(idx)  # (B, T, vocab_size)
        flat = logits.reshape(-1, logits.shape[-1])  # (B*T, vocab_size)
        return F.cross_entropy(flat, targets.to(self.device).reshape(-1).long())

    @contextmanager
    def silence(self, heads: Iterable[tuple[int, int]]) -> Iterator[GPT]:
        """Zero the outputs of some heads inside a ``with`` block (an ablation of heads).

        Args:
          heads: ``(layer, head)`` pairs, counted from 0, e.g. ``[(1, 3)]``.

        The heads' attention weights are still computed (and returned by ``need_weights``);
        what they would add to the residual stream is not. Restored on leaving the block.
        """
        chosen: dict[int, set[int]] = {}
        for pair in heads:
            layer, head = pair
            if not (0 <= layer < len(self.blocks) and 0 <= head < self.config.n_heads):
                raise ValueError(
                    f"head {pair!r} does not exist: layers 0..{len(self.blocks) - 1}, heads "
                    f"0..{self.config.n_heads - 1}"
                )
            chosen.setdefault(layer, set()).add(head)
        before = [block.attn.silenced for block in self.blocks]
        try:
            for layer, found in chosen.items():
                attn = self.blocks[layer].attn
                attn.silenced = tuple(sorted(set(attn.silenced) | found))
            yield self
        finally:
            for block, was in zip(self.blocks, before, strict=True):
                block.attn.silenced = was

    @torch.no_grad()
    def prefix_loss(self, idx: torch.Tensor, targets: torch.Tensor) -> float:
        """The loss when every position sees only its own prefix, as it does in generation.

        Position ``t``'s logits come from running the model on ``idx[:, :t+1]`` alone (one
        forward pass per position, in eval mode). For a causal model this equals
        :meth:`loss`; a model that peeks at the future does much worse here than in
        :meth:`loss`, which is how a leak shows.

        Args:
          idx, targets: token ids ``(B, T)``.

        Returns:
          mean cross-entropy in nats per token (a float).
        """
        if not isinstance(targets, torch.Tensor) or targets.shape != idx.shape:
            shape = fmt(targets.shape) if isinstance(targets, torch.Tensor) else type(targets)
            raise ValueError(f"targets {shape} must have the shape of idx {fmt(idx.shape)}")
        self._check_ids(idx)
        was_training = self.training
        self.eval()
        try:
            idx = idx.to(self.device).long()
            last = [self(idx[:, : t + 1])[:, -1] for t in range(idx.shape[1])]  # T × (B, V)
            logits = torch.stack(last, dim=1)  # (B, T, vocab_size)
        finally:
            self.train(was_training)
        flat = logits.reshape(-1, logits.shape[-1])  # (B*T, vocab_size)
        return F.cross_entropy(flat, targets.to(self.device).reshape(-1).long()).item()

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """Every layer's attention weights, stacked: ``(n_layers, B, h, T, T)``, on the CPU."""
        was_training = self.training
        self.eval()
        try:
            _, maps = self(idx, need_weights=True)
        finally:
            self.train(was_training)
        return torch.stack(maps).cpu()  # (n_layers, B, h, T, T)

    def _next(self, logits: torch.Tensor, greedy, temperature, top_k, generator) -> torch.Tensor:
        """Choose the next ids ``(B, 1)`` from the last logits ``(B, vocab_size)``."""
        if greedy:
            return logits.argmax(dim=-1, keepdim=True)  # (B, 1)
        logits = logits.float() / temperature  # (B, vocab_size)
        if top_k is not None:
            kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1).cpu()  # (B, vocab_size), sampled on the CPU
        return torch.multinomial(probs, 1, generator=generator).to(self.device)  # (B, 1)

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        *,
        greedy: bool = False,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int | None = None,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """Continue ``idx (B, T0)`` by ``max_new_tokens`` tokens → ``(B, T0 + max_new_tokens)``.

        With ``use_cache`` every step runs one position through the model and keeps each
        layer's keys and values (:func:`cached_attention`); without it, every step runs the
        whole sequence again (cropped to the last ``block_size`` tokens) and keeps the last
        row. Both compute the same logits, so greedy decoding gives the same tokens. The cache
        needs ``T0 + max_new_tokens <= block_size`` and causal attention over the keys.

        Args:
          idx: the prompt, token ids ``(B, T0)``, ``T0 >= 1``.
          max_new_tokens: how many tokens to add.
          greedy: take the most likely token (True) or sample (False).
          temperature: divides the logits before sampling (> 0).
          top_k: sample among the ``top_k`` most likely tokens only.
          seed: seeds the sampling generator (default: a fixed 0), so runs repeat.
          use_cache: decode with a key/value cache (True) or by recomputation (False).
        """
        self._check_ids(idx)
        n = check_nonneg_int("max_new_tokens", max_new_tokens)
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature!r}")
        if top_k is not None:
            check_positive_int("top_k", top_k)
        generator = torch.Generator().manual_seed(0 if seed is None else seed)
        was_training = self.training
        self.eval()
        try:
            if use_cache:
                return self._generate_cached(idx, n, greedy, temperature, top_k, generator)
            out = idx.to(self.device).long()  # (B, T0)
            for _ in range(n):
                logits = self(out[:, -self.config.block_size :])[:, -1]  # (B, vocab_size)
                out = torch.cat([out, self._next(logits, greedy, temperature, top_k, generator)], 1)
            return out  # (B, T0 + n)
        finally:
            self.train(was_training)

    def _generate_cached(self, idx, n, greedy, temperature, top_k, generator) -> torch.Tensor:
        c = self.config
        if not c.causal or c.softmax_axis != -1:
            raise ValueError(
                f"a key/value cache needs causal attention over the keys; this model has "
                f"causal={c.causal}, softmax_axis={c.softmax_axis}: use use_cache=False"
            )
        if idx.shape[1] + n > c.block_size:
            raise ValueError(
                f"idx {fmt(idx.shape)} plus {n} new tokens is longer than block_size = "
                f"{c.block_size}; the cache keeps every position, so generate at most "
                f"{c.block_size - idx.shape[1]} tokens with use_cache=True"
            )
        out = idx.to(self.device).long()  # (B, T0)
        caches: list[KeyValue | None] = [None] * len(self.blocks)
        logits = None
        for t in range(out.shape[1] + n - 1):  # prompt first, then every new token
            x = self._embed(out[:, t : t + 1], start=t)  # (B, 1, d_model)
            for i, block in enumerate(self.blocks):
                x, caches[i] = block.step(x, caches[i])  # (B, 1, d_model)
            logits = self.head(self.ln_f(x))[:, 0]  # (B, vocab_size)
            if t + 1 >= out.shape[1]:  # past the prompt: choose the next token
                out = torch.cat([out, self._next(logits, greedy, temperature, top_k, generator)], 1)
        return out  # (B, T0 + n)


def entropy(weights: torch.Tensor) -> torch.Tensor:
    """Row entropies in nats of attention weights ``(..., T, T)`` → ``(..., T)`` (0 log 0 = 0)."""
    w = weights.double()
    return -(torch.where(w > 0, w * w.log(), torch.zeros_like(w))).sum(-1)  # (..., T)


def sink_weight(weights: torch.Tensor, start: int = 1) -> torch.Tensor:
    """Mean weight on key 0 per head: ``weights (..., h, T, T)`` → ``(..., h)``.

    Queries before ``start`` are left out (query 0 can only attend to key 0).
    """
    return weights[..., start:, 0].mean(dim=-1)  # (..., h)


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight from query ``i`` to key ``i - 1`` per head: ``(..., h, T, T)`` → ``(..., h)``."""
    T = weights.shape[-1]
    rows = torch.arange(1, T, device=weights.device)  # (T-1,)
    return weights[..., rows, rows - 1].mean(dim=-1)  # (..., h)


def head_scores(
    maps: torch.Tensor | Sequence[torch.Tensor], period: int
) -> dict[str, torch.Tensor]:
    """Previous-token, induction and sink scores of every head, averaged over the batch.

    Args:
      maps: attention weights ``(n_layers, B, h, T, T)`` (or a sequence of ``(B, h, T, T)``)
        of sequences that repeat with ``period``.
      period: the repetition period.

    Returns:
      ``{"previous": (n_layers, h), "induction": (n_layers, h), "sink": (n_layers, h)}``.
    """
    from .interpret import induction_score

    w = maps if isinstance(maps, torch.Tensor) else torch.stack(list(maps))
    require_exact_ndim("maps", tuple(w.shape), 5, "(n_layers, B, h, T, T)")
    return {
        "previous": previous_token_score(w).mean(1),  # (n_layers, h)
        "induction": induction_score(w, period).mean(1),  # (n_layers, h)
        "sink": sink_weight(w).mean(1),  # (n_layers, h)
    }
