"""Reading past the trained length with a cache of bounded size: a sliding window, and attention sinks.

A model generating its 100,000th token with an ordinary KV cache holds the keys and values of all 100,000
before it, and a model with rotary positions meets positions it never trained on. Keeping only the last
`window` positions bounds the memory, but StreamingLLM (Xiao et al., 2024) found that trained models put
much of their attention on the first few tokens, whatever those are (an *attention sink*: the softmax must
put its weight somewhere), so dropping them hurts more than dropping anything else. Keeping the first
`sinks` positions beside the window mends that.

`SinkCache` keeps those positions' keys and values. With rotary positions it keeps the keys before their
rotation and the attention turns them by their places in the cache (0 to n - 1), the query by the last
place, so that no position past the cache's size ever appears, as StreamingLLM does. `token_losses`
feeds a text one token at a time through any cache and returns the loss at every position.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .attention import KVCache

__all__ = ["SinkCache", "token_losses"]


class SinkCache:
    """Keys and values of the first `sinks` positions and the last `window` ones, (B, h, n, d) with n at most
    sinks + window: a cache whose memory stops growing.

    `rotates_on_read` tells the attention that the keys are kept unturned (see the module's docstring);
    `seen` counts every position that went in, `length` those held.
    """

    rotates_on_read = True
    static = False  # as KVCache's: written by every step, not a cross-attention's memory

    def __init__(self, sinks: int, window: int) -> None:
        for name, value in (("sinks", sinks), ("window", window)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int of at least 0, got {value!r}")
        if window < 1:
            raise ValueError(f"window must keep at least the newest position, got {window}")
        self.sinks, self.window, self.seen = sinks, window, 0
        self.key: torch.Tensor | None = None
        self.value: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """The positions held now (at most sinks + window)."""
        return 0 if self.key is None else self.key.shape[-2]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.key, self.value) if t is not None)

    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append new (B, h, T, d) keys and values, drop what falls between the sinks and the window, and return
        what is kept, (B, h, n, d), the new positions last. A call of several positions is taken only while
        everything still fits in sinks + window (nothing dropped); once the cache would drop positions, one
        position per call: several at once would need, each, positions the others dropped."""
        if self.key is not None and key.shape[-2] > 1 and self.length + key.shape[-2] > self.sinks + self.window:
            raise ValueError("a full SinkCache takes one position at a time: feed the tokens one by one")
        if self.key is None and key.shape[-2] > self.sinks + self.window:
            raise ValueError(f"a prompt of {key.shape[-2]} positions does not fit in sinks + window = "
                             f"{self.sinks + self.window}; feed the rest one token at a time")  # fmt: skip
        self.seen += key.shape[-2]
        self.key = key if self.key is None else torch.cat([self.key, key], dim=-2)
        self.value = value if self.value is None else torch.cat([self.value, value], dim=-2)
        if self.length > self.sinks + self.window:  # one position too many: the oldest after the sinks goes
            keep = torch.cat([torch.arange(self.sinks), torch.arange(self.length - self.window, self.length)])
            self.key, self.value = self.key[..., keep, :], self.value[..., keep, :]  # (B, h, sinks + window, d)
        return self.key, self.value


def token_losses(model: nn.Module, ids: torch.Tensor, caches: list | Callable[[], list] | None = None) -> torch.Tensor:
    """ids (B, T) fed one token at a time through `caches` (one per layer; a callable makes them; None: ordinary
    KVCaches that keep everything) -> (B, T - 1): the next-token loss at positions 1 .. T - 1, in nats."""
    if ids.dim() != 2 or ids.shape[1] < 2:
        raise ValueError(f"ids must be (B, T) with T >= 2, got shape {tuple(ids.shape)}")
    if callable(caches):
        caches = caches()
    caches = [KVCache() for _ in model.decoder.layers] if caches is None else caches
    losses = []
    model.eval()
    with torch.inference_mode():
        for t in range(ids.shape[1] - 1):
            logits = model(ids[:, t : t + 1], caches)[:, -1]  # (B, V)
            losses.append(F.cross_entropy(logits, ids[:, t + 1], reduction="none"))  # (B,)
    return torch.stack(losses, dim=1)  # (B, T - 1)
