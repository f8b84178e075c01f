"""A lean AdamW for `fit`, kept out of the teaching modules: the chapters write torch.optim.AdamW.

torch.optim.Optimizer imports torch._dynamo on its first construction and step, to guard against
torch.compile. Every notebook trains in a fresh kernel, so each would pay that once;
`python benchmarks/optimizer.py` prints what it costs on your machine (docs/results.md has this
machine's figures). `fit` compiles nothing, so it keeps AdamW's state itself.
tests/unit/test_fit_optimizer.py holds it to torch.optim.AdamW's numbers, bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.optim.adamw import adamw  # the functional form of torch.optim.AdamW.step (public since torch 2.0)

__all__ = ["LeanAdamW"]


class LeanAdamW:
    """AdamW for `fit`: the numbers of torch.optim.AdamW, bit for bit, without torch.optim.Optimizer.

    It keeps AdamW's state itself (the step count and the two moving averages, made at a
    parameter's first gradient) and calls the same functional kernel, torch.optim.adamw.adamw,
    that AdamW.step calls. Why it exists: benchmarks/optimizer.py.
    """

    def __init__(
        self, params: Iterable[nn.Parameter], betas: tuple[float, float], weight_decay: float, fused: bool
    ) -> None:
        self.params = list(params)
        self.betas, self.weight_decay, self.eps, self.fused = betas, weight_decay, 1e-8, fused
        self.state: dict[nn.Parameter, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: float) -> None:
        """One AdamW step at learning rate `lr` for every parameter that has a gradient."""
        active = [p for p in self.params if p.grad is not None]
        for p in active:
            if p not in self.state:  # (step, exp_avg, exp_avg_sq), as AdamW's lazy state
                step = torch.zeros((), device=p.device) if self.fused else torch.tensor(0.0)
                self.state[p] = (step, torch.zeros_like(p), torch.zeros_like(p))
        steps, avgs, squares = (list(t) for t in zip(*(self.state[p] for p in active))) if active else ([], [], [])
        adamw(
            active,
            [p.grad for p in active],
            avgs,
            squares,
            [],
            steps,
            fused=self.fused,
            has_complex=any(torch.is_complex(p) for p in active),
            amsgrad=False,
            beta1=self.betas[0],
            beta2=self.betas[1],
            lr=lr,
            weight_decay=self.weight_decay,
            eps=self.eps,
            maximize=False,
        )
