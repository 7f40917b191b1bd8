"""Lesson 06: :class:`CausalSelfAttention`, the attention layer of a GPT-style decoder.

One fused projection makes queries, keys and values, the heads attend causally (position ``t``
sees positions ``<= t`` only), and a second projection mixes the heads. Without dropout on the
weights the work goes to ``F.scaled_dot_product_attention(..., is_causal=True)``, which may pick
a fused kernel and never materialise the ``(B, h, T, T)`` weights; with dropout in training mode
the weights are computed explicitly so that ``nn.Dropout`` can act on them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attnlib._shapes import check_heads, check_positive_int, fmt, require_exact_ndim

from . import _validate
from .heads import _merge, _split
from .normalization import _softmax
from .scoring import _scaled_scores


class CausalSelfAttention(nn.Module):
    """Causal multi-head self-attention with a fused ``qkv`` projection (nanoGPT's layout).

    Args:
      d_model: model width (positive int), of the inputs and the outputs.
      n_heads: ``h``, dividing ``d_model``; each head has ``d_head = d_model // h``.
      dropout: probability in ``[0, 1]`` of zeroing an attention weight, in training mode only.
      bias: whether both projections have biases (as ``nn.Linear`` does by default).
      device, dtype: where and how to create the parameters.

    Submodules:
      qkv: ``nn.Linear(d_model, 3*d_model)``. Its output features are the queries
        (``0:d_model``), then the keys (``d_model:2*d_model``), then the values
        (``2*d_model:3*d_model``); head ``i`` uses features ``i*d_head:(i+1)*d_head`` of each.
        ``nn.Linear`` stores its weight as ``(out, in)``, so ``qkv.weight`` is laid out exactly
        like ``nn.MultiheadAttention.in_proj_weight``, and the lessons' right-multiplied
        ``W_q (d_model, d_model)`` is ``qkv.weight[:d_model].T`` (``W_k``, ``W_v`` likewise).
      proj: ``nn.Linear(d_model, d_model)`` after the heads are concatenated (``W_o =
        proj.weight.T``).
      attn_dropout: ``nn.Dropout(dropout)``, applied to the attention weights.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        dropout: float = 0.0,
        *,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1:
            raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")
        self.d_head = check_heads("d_model", self.d_model, n_heads)
        self.n_heads = n_heads
        if (
            isinstance(dropout, bool)
            or not isinstance(dropout, int | float)
            or not 0 <= dropout <= 1
        ):
            raise ValueError(f"dropout must be a probability in [0, 1], got {dropout!r}")
        factory = {"device": device, "dtype": dtype}
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias, **factory)
        self.proj = nn.Linear(d_model, d_model, bias=bias, **factory)
        self.attn_dropout = nn.Dropout(float(dropout))

    @property
    def dropout(self) -> float:
        """The probability of dropping an attention weight in training mode."""
        return self.attn_dropout.p

    def _heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Validate ``x (B, T, d_model)``; return its queries, keys and values per head."""
        _validate.floating(("x", x))
        require_exact_ndim("x", tuple(x.shape), 3, "(B, T, d_model)")
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x {fmt(x.shape)} has {x.shape[-1]} features but the module has "
                f"d_model = {self.d_model}; expected (B, T, {self.d_model})"
            )
        weight = self.qkv.weight
        if x.dtype != weight.dtype:
            raise ValueError(
                f"x has dtype {x.dtype} but the module's parameters have dtype {weight.dtype}; "
                f"cast one of them (x.to({weight.dtype}) or module.to({x.dtype}))"
            )
        _validate.same_device(("the module's parameters", weight), ("x", x))
        q, k, v = self.qkv(x).split(self.d_model, dim=-1)  # each (B, T, d_model)
        return _split(q, self.n_heads), _split(k, self.n_heads), _split(v, self.n_heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend from every position of ``x`` to itself and the positions before it.

        Args:
          x: ``(B, T, d_model)`` in the dtype and on the device of the parameters.

        Returns:
          ``(B, T, d_model)``; position ``t`` of the output depends on ``x[:, :t+1]`` only.
        """
        q, k, v = self._heads(x)  # each (B, h, T, d_head)
        if self.training and self.dropout > 0:
            T = x.shape[1]
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T)
            weights = _softmax(_scaled_scores(q, k), mask=causal)  # (B, h, T, T)
            y = self.attn_dropout(weights) @ v  # (B, h, T, d_head)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, d_head)
        return self.proj(_merge(y))  # (B, T, d_model)

    def attention_weights(self, x: torch.Tensor) -> torch.Tensor:
        """The causal attention weights of every head, without dropout, for inspection.

        Args:
          x: ``(B, T, d_model)``.

        Returns:
          ``(B, h, T, T)``; row ``t`` of each head sums to one over keys ``0..t`` (e.g. to pass
          to :func:`induction_score`).
        """
        q, k, _ = self._heads(x)  # each (B, h, T, d_head)
        T = x.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T)
        return _softmax(_scaled_scores(q, k), mask=causal)  # (B, h, T, T)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}, "
            f"dropout={self.dropout}"
        )

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> CausalSelfAttention:
        """Copy an ``nn.MultiheadAttention`` into a new module.

        ``qkv.weight = in_proj_weight`` (both ``(3*d_model, d_model)``, queries then keys then
        values), ``qkv.bias = in_proj_bias``, ``proj = out_proj``, and the dropout probability
        is kept. The copy is batch-first whatever ``mha.batch_first`` says. In eval mode (or
        without dropout) it equals ``mha(x, x, x, attn_mask=mask)`` with the causal mask, either
        boolean (True = *blocked*, above the diagonal) or additive (``-inf`` above it).
        Differing ``kdim``/``vdim``, ``add_bias_kv`` and ``add_zero_attn`` are not supported.

        Args:
          mha: the module to copy (any device and dtype; the copy has the same).

        Returns:
          a :class:`CausalSelfAttention` with copies (not views) of the parameters.
        """
        _validate.copyable_mha(mha, "self-attention")
        weight = mha.in_proj_weight  # (3d, d)
        has_bias = mha.in_proj_bias is not None
        new = cls(
            mha.embed_dim,
            mha.num_heads,
            mha.dropout,
            bias=has_bias,
            device=weight.device,
            dtype=weight.dtype,
        )
        with torch.no_grad():
            new.qkv.weight.copy_(weight)  # (3d, d), (out, in) in both
            new.proj.weight.copy_(mha.out_proj.weight)  # (d, d)
            if has_bias:
                new.qkv.bias.copy_(mha.in_proj_bias)  # (3d,)
                if mha.out_proj.bias is not None:
                    new.proj.bias.copy_(mha.out_proj.bias)  # (d,)
                else:
                    new.proj.bias.zero_()
        return new
