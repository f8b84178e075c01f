"""Attention masks.

One convention everywhere in this package: a mask is a **bool** tensor and
``True`` means "this query may attend to this key". It must broadcast to the
attention scores, shape (B, num_heads, T_q, T_k). PyTorch's ``nn.MultiheadAttention``
and ``nn.Transformer`` use the opposite boolean convention (``True`` = blocked);
``to_torch_convention`` and ``from_torch_convention`` convert between them.
"""

from __future__ import annotations

import torch

__all__ = [
    "padding_mask",
    "causal_mask",
    "sliding_window_mask",
    "combine_masks",
    "target_mask",
    "to_torch_convention",
    "from_torch_convention",
]


def padding_mask(tokens: torch.Tensor, pad_id: int | None) -> torch.Tensor:
    """(B, S) ids -> (B, 1, 1, S) bool, True where the key is a real token (True = may attend). pad_id None: no id
    is padding (every key may be read)."""
    if tokens.dim() != 2:
        raise ValueError(f"padding_mask expects token ids of shape (B, S), got shape {tuple(tokens.shape)}")
    if pad_id is None:
        return torch.ones_like(tokens, dtype=torch.bool)[:, None, None, :]  # (B, 1, 1, S)
    return (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(size, size) bool, lower triangular: query i may attend to keys 0..i (True = may attend)."""
    if size < 1:
        raise ValueError(f"causal_mask size must be at least 1, got {size}")
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def sliding_window_mask(size: int, window: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(size, size) bool: query i may attend to keys i - window + 1 .. i, its own position and the window - 1 before.

    A causal mask cut to a band (Mistral's sliding window). One layer sees `window` positions; each
    further layer reaches window - 1 positions further back, through the positions it attends to.
    ``window >= size`` gives the plain causal mask.
    """
    if size < 1:
        raise ValueError(f"sliding_window_mask size must be at least 1, got {size}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive int (positions each query sees, itself included), got {window!r}")
    ones = torch.ones(size, size, dtype=torch.bool, device=device)
    return ones.tril() & ones.triu(-(window - 1))  # (size, size): keys j with i - window < j <= i


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """AND of broadcastable bool masks (None entries are skipped): a key is allowed only if all allow it."""
    result = None
    for mask in masks:
        if mask is None:
            continue
        if mask.dtype != torch.bool:
            raise TypeError(f"masks must be bool tensors (True = may attend), got dtype {mask.dtype}")
        result = mask if result is None else result & mask
    return result


def target_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Decoder self-attention mask for (B, T) ids: no padding keys and no future keys, (B, 1, T, T)."""
    _, T = tokens.shape
    return combine_masks(padding_mask(tokens, pad_id), causal_mask(T, device=tokens.device))  # (B, 1, T, T)


def to_torch_convention(mask: torch.Tensor) -> torch.Tensor:
    """Our mask (True = may attend) -> PyTorch's nn.MultiheadAttention bool mask (True = blocked)."""
    if mask.dtype != torch.bool:
        raise TypeError(f"expected a bool mask, got dtype {mask.dtype}")
    return ~mask


def from_torch_convention(mask: torch.Tensor) -> torch.Tensor:
    """PyTorch's bool mask (True = blocked) -> ours (True = may attend)."""
    if mask.dtype != torch.bool:
        raise TypeError(f"expected a bool mask, got dtype {mask.dtype}")
    return ~mask
