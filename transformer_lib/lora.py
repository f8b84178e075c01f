"""LoRA: low-rank adapters on chosen linear layers of a frozen model (Hu et al., 2022).

A frozen weight W (out, in) is left as it is; next to it, two small matrices A (r, in) and
B (out, r) learn a change of rank r. The layer computes

    y = W x + b + (alpha / r) * B (A dropout(x))

B starts at zero, so an adapted model starts as the model itself. Only A and B train: for a
d x d layer that is 2 r d numbers instead of d^2. `merge` folds (alpha / r) B A into W, after which
the layer is an ordinary nn.Linear again and costs nothing extra. The names and initialisation
follow Hugging Face `peft` (lora_A, lora_B; A Kaiming-uniform, B zeros), so that a test can load
the same numbers into both and compare outputs and gradients.

    add_lora(model, targets=("q_proj", "v_proj"), r=8, alpha=16)   # in place; every other weight frozen
    merge_lora(model)                                              # back to plain nn.Linear layers
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["LoRALinear", "add_lora", "merge_lora", "trainable_parameters"]


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank change: x (..., in) -> (..., out)."""

    def __init__(self, base: nn.Linear, r: int = 8, alpha: float = 16.0, dropout: float = 0.0):
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"LoRALinear wraps an nn.Linear, got {type(base).__name__}")
        if not isinstance(r, int) or not 0 < r <= min(base.in_features, base.out_features):
            raise ValueError(
                f"the rank r must be a whole number from 1 to min(in, out) = "
                f"{min(base.in_features, base.out_features)}, got {r!r}"
            )
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)  # the pre-trained weight stays as it is
        self.r, self.alpha = r, alpha
        self.scaling = alpha / r
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, device=base.weight.device))  # (r, in)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, device=base.weight.device))  # (out, r): 0 at first
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as nn.Linear (and peft) initialise a weight
        self.dropout = nn.Dropout(dropout)

    def delta(self) -> torch.Tensor:
        """The change this adapter makes to the weight: (alpha / r) * B A, (out, in)."""
        return self.scaling * (self.lora_B @ self.lora_A)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in) -> (..., out): the frozen layer plus the scaled low-rank path."""
        low = self.dropout(x) @ self.lora_A.T  # (..., r)
        return self.base(x) + self.scaling * (low @ self.lora_B.T)  # (..., out)

    def merge(self) -> nn.Linear:
        """An nn.Linear whose weight is W + (alpha / r) B A: the same outputs (without dropout), no extra cost."""
        # skip_init draws no initial weights (they are overwritten), so merging leaves the caller's RNG alone
        merged = nn.utils.skip_init(
            nn.Linear,
            self.base.in_features,
            self.base.out_features,
            bias=self.base.bias is not None,
            device=self.base.weight.device,
            dtype=self.base.weight.dtype,
        )
        with torch.no_grad():
            merged.weight.copy_(self.base.weight + self.delta())
            if self.base.bias is not None:
                merged.bias.copy_(self.base.bias)
        return merged


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def add_lora(
    model: nn.Module,
    targets: Sequence[str] = ("q_proj", "v_proj"),
    r: int = 8,
    alpha: float = 16.0,
    dropout: float = 0.0,
) -> nn.Module:
    """Freeze every parameter of `model`, then wrap each nn.Linear whose name ends in one of `targets` in a
    LoRALinear (in place). Returns the model. Refuses targets that match no linear layer."""
    if isinstance(targets, str):
        targets = (targets,)
    for p in model.parameters():
        p.requires_grad_(False)
    chosen = [
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and any(name == t or name.endswith("." + t) for t in targets)
    ]
    if not chosen:
        linears = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)})
        raise ValueError(f"no linear layer is named {list(targets)}; this model's are {linears}")
    for name in chosen:
        _replace(model, name, LoRALinear(model.get_submodule(name), r, alpha, dropout))
    return model


def merge_lora(model: nn.Module) -> nn.Module:
    """Replace every LoRALinear of `model` by its merged nn.Linear (in place); returns the model."""
    names = [name for name, m in model.named_modules() if isinstance(m, LoRALinear)]
    for name in names:
        _replace(model, name, model.get_submodule(name).merge())
    return model


def trainable_parameters(model: nn.Module) -> tuple[int, int]:
    """(parameters that will train, all parameters) of `model`."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total
