"""Seeding, device choice and small helpers shared by the notebooks."""

from __future__ import annotations

import random

import torch

__all__ = ["set_seed", "get_device", "count_parameters"]


def set_seed(seed: int = 0) -> torch.Generator:
    """Seed Python's and torch's generators (CPU and CUDA); return a fresh seeded torch.Generator."""
    random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # numpy is optional
        pass
    return torch.Generator().manual_seed(seed)


def get_device(prefer: str | None = None) -> torch.device:
    """The device to run on: `prefer` if given, else CUDA when available, else CPU."""
    if prefer is not None:
        return torch.device(prefer)
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def count_parameters(module: torch.nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) scalar parameters in a module."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
