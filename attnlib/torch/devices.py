"""Picking the fastest available device, so lesson code never hardcodes one."""

from __future__ import annotations

import torch


def device() -> torch.device:
    """The best available device: ``cuda`` if present, else Apple's ``mps``, else ``cpu``.

    Returns:
      a ``torch.device``; move tensors there with ``x.to(device())``.
    """
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
