"""The position-wise feed-forward block (dense, or routed to experts), LayerNorm and RMSNorm from scratch.

The routed block (chapter 14) sits here, next to the dense one, because every layer chooses between them
(`feed_forward`); moe.py holds what the routing is studied with: the router's logits, the balancing loss.

The residual wiring around them ("add & norm", pre-LN or post-LN) is written out in each layer's
``forward`` (encoder.py, decoder.py), where a reader can follow it line by line.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import ACTIVATIONS, TransformerConfig

__all__ = ["FeedForward", "MoEFeedForward", "feed_forward", "LayerNorm", "RMSNorm", "make_norm", "residual"]

# the function of each name in config.ACTIVATIONS; "swiglu" gates with SiLU (Swish): act(W1 x) * (W3 x)
_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's approximation
    "swiglu": F.silu,
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),  # CLIP's: GELU approximated by a sigmoid
}
assert tuple(_FUNCTIONS) == ACTIVATIONS, "config.ACTIVATIONS and the functions here must name the same activations"


class FeedForward(nn.Module):
    """FFN(x) = W2 · dropout(act(W1 x + b1)) + b2, applied to every position alone: (B, S, d_model) -> same.

    With activation="swiglu" the hidden layer is gated (Shazeer, 2020; Llama): SiLU(W1 x) * (W3 x),
    then W2. That is three d_model x d_ff matrices instead of two, so a SwiGLU block with d_ff
    two thirds as wide has the parameters of a ReLU block (without biases, exactly).
    """

    def __init__(
        self, d_model: int, d_ff: int, dropout: float = 0.0, *, activation: str = "relu", bias: bool = True
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.activation_name = activation
        self.activation = _FUNCTIONS[activation]
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear3 = nn.Linear(d_model, d_ff, bias=bias) if activation == "swiglu" else None  # the gated branch
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)

    @classmethod
    def from_config(cls, config: TransformerConfig) -> FeedForward:
        """The feed-forward block a layer built from `config` uses."""
        return cls(config.d_model, config.d_ff, config.dropout, activation=config.activation, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model), through a hidden layer of width d_ff."""
        hidden = self.activation(self.linear1(x))  # (..., d_ff)
        if self.linear3 is not None:
            hidden = hidden * self.linear3(x)  # SwiGLU: the activated branch gates the linear one
        return self.linear2(self.dropout(hidden))


class MoEFeedForward(nn.Module):
    """x (..., d_model) -> (..., d_model): each token through its top_k of num_experts feed-forward blocks."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        num_experts: int,
        *,
        top_k: int = 2,
        dropout: float = 0.0,
        activation: str = "swiglu",
        bias: bool = False,
    ):
        super().__init__()
        if num_experts < 2 or not 1 <= top_k <= num_experts:
            raise ValueError(f"need num_experts >= 2 and 1 <= top_k <= num_experts, got {num_experts} and {top_k}")
        self.num_experts, self.top_k = num_experts, top_k
        self.router = nn.Linear(d_model, num_experts, bias=False)  # one score per expert
        self.experts = nn.ModuleList(
            FeedForward(d_model, d_ff, dropout, activation=activation, bias=bias) for _ in range(num_experts)
        )

    @classmethod
    def from_config(cls, config: TransformerConfig) -> MoEFeedForward:
        """The routed block of a layer built from `config` (num_experts experts of width d_ff)."""
        return cls(
            config.d_model,
            config.d_ff,
            config.num_experts,
            top_k=config.experts_per_token,
            dropout=config.dropout,
            activation=config.activation,
            bias=config.bias,
        )

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (N, d_model) -> (router logits (N, E), gates (N, k) summing to 1, chosen experts (N, k))."""
        logits = self.router(x)  # (N, E)
        probs = logits.float().softmax(dim=-1)  # (N, E)
        top, chosen = probs.topk(self.top_k, dim=-1)  # (N, k) each, likeliest first
        return logits, (top / top.sum(dim=-1, keepdim=True)).to(x.dtype), chosen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model): the gate-weighted sum of each token's chosen experts."""
        flat = x.reshape(-1, x.shape[-1])  # (N, d_model): every token of the batch
        _, gates, chosen = self.route(flat)
        out = torch.zeros_like(flat)  # (N, d_model)
        for e, expert in enumerate(self.experts):
            token, slot = (chosen == e).nonzero(as_tuple=True)  # (n_e,) each: the tokens sent to expert e
            if token.numel():
                out.index_add_(0, token, expert(flat[token]) * gates[token, slot, None])  # (n_e, d_model)
        return out.view(x.shape)


def feed_forward(config: TransformerConfig) -> nn.Module:
    """The feed-forward block of a layer built from `config`: routed when config.num_experts > 0, else dense."""
    return MoEFeedForward.from_config(config) if config.num_experts else FeedForward.from_config(config)


class LayerNorm(nn.Module):
    """Normalise each vector over its d_model features, then scale and shift per feature.

    y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance (divide by d_model),
    the same as ``nn.LayerNorm(d_model)``. Shape (..., d_model) -> (..., d_model).
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # one gain per feature
        self.bias = nn.Parameter(torch.zeros(d_model))  # one shift per feature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model).

        The formula above, written out in the feed-forward & norm chapter and checked there against this module, runs
        here as PyTorch's one fused kernel: the same numbers, a quarter fewer operations per step.
        """
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """Scale each vector by the inverse of its root mean square, then by a gain per feature (Zhang & Sennrich, 2019).

    y = x / sqrt(mean(x ** 2) + eps) * weight: no mean subtracted and no shift, so fewer operations
    than LayerNorm. The same as ``nn.RMSNorm(d_model, eps)``. Shape (..., d_model) -> (..., d_model).
    """

    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))  # one gain per feature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> (..., d_model)."""
        inverse_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return x * inverse_rms * self.weight


def make_norm(config: TransformerConfig) -> nn.Module:
    """The normalisation layer every layer and stack built from `config` uses: (..., d_model) -> same."""
    if config.norm == "rms":
        return RMSNorm(config.d_model, config.eps)
    return LayerNorm(config.d_model, config.eps)


Sublayer = tuple[nn.Module, Callable[[torch.Tensor], torch.Tensor]]  # (its norm, the sublayer itself)


def residual(x: torch.Tensor, sublayers: list[Sublayer], config: TransformerConfig, dropout: nn.Module) -> torch.Tensor:
    """The residual wiring of a layer, written once for the encoder's and the decoder's: x (B, T, d_model) -> same.

    `sublayers` are (norm, f) pairs in the order the layer runs them; f maps its input to the output
    it adds. `config` chooses the wiring:

    - post-LN (the 2017 paper): x <- norm(x + dropout(f(x))), one sublayer after the other;
    - pre-LN (GPT-2, norm_first): x <- x + dropout(f(norm(x))), one after the other;
    - parallel (GPT-J, GPT-NeoX, PaLM; parallel_block): x + the sum of dropout(f(norm(x))) over all
      sublayers, each reading the same x; sublayers that share one norm module use its output once.
    """
    if config.parallel_block:
        normed: dict[int, torch.Tensor] = {}  # by id of the norm module: GPT-J's one norm runs once
        out = x
        for norm, f in sublayers:
            if id(norm) not in normed:
                normed[id(norm)] = norm(x)
            out = out + dropout(f(normed[id(norm)]))
        return out
    for norm, f in sublayers:
        x = x + dropout(f(norm(x))) if config.norm_first else norm(x + dropout(f(x)))
    return x
