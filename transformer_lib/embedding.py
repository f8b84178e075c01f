"""Token embedding: a lookup table from token ids to d_model-dimensional vectors."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["TokenEmbedding", "check_token_ids", "check_token_batch"]


def check_token_ids(tokens: torch.Tensor, vocab_size: int, name: str = "tokens") -> None:
    """Raise a clear error unless `tokens` is an integer tensor with ids in [0, vocab_size)."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(tokens).__name__}")
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(
            f"{name} must hold integer token ids (torch.long), got dtype {tokens.dtype}; "
            "did you pass embeddings or a float tensor? Use tokens.long() on ids."
        )
    if tokens.numel() == 0:
        return
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{name} must hold ids in [0, {vocab_size - 1}] for vocab_size={vocab_size}, got ids from {low} to {high}"
        )


def check_token_batch(tokens: torch.Tensor, name: str) -> None:
    """Raise a clear error unless `tokens` is a (B, S) tensor, the batch of ids a model takes."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"{name} must be a (B, S) tensor of token ids, got {shape}")


class TokenEmbedding(nn.Module):
    """Map ids (B, S) to vectors (B, S, d_model), optionally times sqrt(d_model) as in the paper."""

    def __init__(self, vocab_size: int, d_model: int, *, scale: bool = True, pad_id: int | None = None):
        super().__init__()
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.scale = scale
        self.table = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)

    @property
    def weight(self) -> torch.Tensor:
        """The (vocab_size, d_model) lookup table."""
        return self.table.weight

    def forward(self, tokens: torch.Tensor, *, checked: bool = False) -> torch.Tensor:
        """(B, S) integer ids -> (B, S, d_model) embeddings.

        The ids are checked first (reading their range waits for the device). `checked=True` skips
        that, for callers that checked them already: the decoding loops check the prompt once, and
        every later id is the model's own choice from its vocabulary.
        """
        if not checked:
            check_token_ids(tokens, self.vocab_size)
        x = self.table(tokens)  # (B, S, d_model)
        return x * math.sqrt(self.d_model) if self.scale else x
