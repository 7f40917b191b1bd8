"""Lesson 04: :class:`MultiHeadAttention`, an ``nn.Module`` around :func:`multi_head_attention`.

Its parameters are the right-multiplied projections of the lessons (``W_q (d_model, d_model)``
etc.), and :meth:`MultiHeadAttention.from_torch` copies an ``nn.MultiheadAttention`` so both give
the same outputs.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlib._shapes import check_heads, check_positive_int

from . import _validate
from .heads import multi_head_attention


class MultiHeadAttention(nn.Module):
    """Multi-head attention with batch-first inputs and boolean keep-masks.

    Args:
      d_model: model width (positive int); queries, keys, values and output all have it.
      num_heads: ``h``, dividing ``d_model``; each head has ``d_head = d_model // h``.
      bias: if True add learned biases after the four projections (as ``nn.MultiheadAttention``
        does by default).
      device, dtype: where and how to create the parameters.

    Parameters ``W_q``, ``W_k``, ``W_v``, ``W_o`` are ``(d_model, d_model)`` and multiply on the
    right; biases ``b_q``, ``b_k``, ``b_v``, ``b_o`` are ``(d_model,)`` or ``None``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        bias: bool = False,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.d_head = check_heads("d_model", self.d_model, num_heads)
        self.num_heads = num_heads
        factory = {"device": device, "dtype": dtype}
        for name in ("W_q", "W_k", "W_v", "W_o"):
            self.register_parameter(name, nn.Parameter(torch.empty(d_model, d_model, **factory)))
        for name in ("b_q", "b_k", "b_v", "b_o"):
            param = nn.Parameter(torch.empty(d_model, **factory)) if bias else None
            self.register_parameter(name, param)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections and zero biases, as ``nn.MultiheadAttention`` starts."""
        for w in (self.W_q, self.W_k, self.W_v, self.W_o):
            nn.init.xavier_uniform_(w)
        for b in (self.b_q, self.b_k, self.b_v, self.b_o):
            if b is not None:
                nn.init.zeros_(b)

    def forward(
        self,
        x_q: torch.Tensor,
        x_kv: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from ``x_q`` to ``x_kv`` (to ``x_q`` itself when ``x_kv`` is None).

        Args:
          x_q: ``(B, T_q, d_model)``.
          x_kv: ``(B, T_kv, d_model)`` or None for self-attention.
          mask: optional boolean keep-mask (True = may attend): ``(T_q, T_kv)``,
            ``(B, T_q or 1, T_kv)`` or ``(B, h, T_q, T_kv)``; from a PyTorch ``key_padding_mask``
            use ``from_key_padding_mask(kpm)``.
          need_weights: if False use the SDPA fast path and return ``None`` for the weights.

        Returns:
          ``(output (B, T_q, d_model), weights (B, h, T_q, T_kv) or None)``; the weights are per
          head (``nn.MultiheadAttention`` averages them: take ``weights.mean(1)``).
        """
        return multi_head_attention(
            x_q,
            x_q if x_kv is None else x_kv,
            self.W_q,
            self.W_k,
            self.W_v,
            self.W_o,
            self.num_heads,
            mask,
            need_weights=need_weights,
            b_q=self.b_q,
            b_k=self.b_k,
            b_v=self.b_v,
            b_o=self.b_o,
        )

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, bias={self.b_q is not None}"

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of an ``nn.MultiheadAttention`` into a new module.

        ``W_q = in_proj_weight[:d].T``, ``W_k = in_proj_weight[d:2d].T``,
        ``W_v = in_proj_weight[2d:].T``, ``W_o = out_proj.weight.T`` and the biases likewise.
        The copy is batch-first whatever ``mha.batch_first`` says, and it has no dropout, so it
        matches ``mha`` in eval mode (or with ``dropout=0``). ``kdim``/``vdim`` different from
        ``embed_dim``, ``add_bias_kv`` and ``add_zero_attn`` are not supported.

        Args:
          mha: the module to copy (any device and dtype; the copy has the same).

        Returns:
          a :class:`MultiHeadAttention` with copies (not views) of the parameters.
        """
        _validate.copyable_mha(mha, "MultiHeadAttention")
        d = mha.embed_dim
        w = mha.in_proj_weight  # (3d, d)
        bias = mha.in_proj_bias is not None
        new = cls(d, mha.num_heads, bias=bias, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            new.W_q.copy_(w[:d].T)  # (d, d)
            new.W_k.copy_(w[d : 2 * d].T)  # (d, d)
            new.W_v.copy_(w[2 * d :].T)  # (d, d)
            new.W_o.copy_(mha.out_proj.weight.T)  # (d, d)
            if bias:
                b = mha.in_proj_bias  # (3d,)
                new.b_q.copy_(b[:d])
                new.b_k.copy_(b[d : 2 * d])
                new.b_v.copy_(b[2 * d :])
                if mha.out_proj.bias is not None:
                    new.b_o.copy_(mha.out_proj.bias)
                else:
                    new.b_o.zero_()
        return new
