"""Mixture of experts: a feed-forward block that sends each token to a few of many experts.

A router (one linear layer, no bias) scores every expert for every token; the softmax of the
scores is a distribution over the experts; each token goes to its `top_k` likeliest experts, and
their outputs are added with those probabilities renormalised to sum to 1 (as Mixtral does).
Each expert is an ordinary `FeedForward` of width d_ff, so a token pays for top_k experts while
the layer holds num_experts of them.

Left alone, a router tends to send most tokens to a few experts. The load-balancing loss of the
Switch Transformer (Fedus et al., 2022) is num_experts times the sum over experts of (the routing slots
the expert got per token) times (the mean probability the router gave it). It is top_k when both are
uniform, and at most num_experts. Switch adds one such loss per layer; here, as in transformers' Mixtral,
the router outputs of all layers are pooled into one loss.
The routed block (`MoEFeedForward`) and the dense-or-routed choice (`feed_forward`) live in layers.py,
so that the 2017 encoder and decoder never import this chapter's module; they are re-exported here. In use::

    with router_logits(model) as logits:            # every MoE layer's router output, (N, E) each
        out = model(tokens)
    aux = load_balancing_loss(logits, top_k=2)      # add coefficient * aux to the loss
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from .layers import MoEFeedForward, feed_forward  # the block itself sits in layers, below the encoder and decoder

__all__ = [
    "MoEFeedForward",
    "feed_forward",
    "router_logits",
    "load_balancing_loss",
    "expert_shares",
    "expert_use",
    "moe_lm_loss",
]


@contextmanager
def router_logits(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """Within the block, collect every MoE layer's router logits (N, E) of each forward pass, in layer order.

    They keep their autograd graph, so that a load-balancing loss computed from them trains the routers.
    """
    collected: list[torch.Tensor] = []
    routers = [m.router for m in model.modules() if isinstance(m, MoEFeedForward)]
    if not routers:
        raise TypeError(f"{type(model).__name__} has no MoEFeedForward layer (config.num_experts is 0)")
    handles = [r.register_forward_hook(lambda m, args, out: collected.append(out)) for r in routers]
    try:
        yield collected
    finally:
        for handle in handles:
            handle.remove()


def load_balancing_loss(logits: list[torch.Tensor], top_k: int) -> torch.Tensor:
    """Switch-style balancing loss, pooled over all layers' router logits as Mixtral does: (N, E) each -> a scalar.

    E * sum_e f_e * P_e, where f_e is the number of routing slots given to expert e divided by the
    number of tokens (so the f_e sum to top_k) and P_e the mean router probability of expert e, both
    over every token of every layer together (as Mixtral in transformers computes it). Balanced
    routing gives top_k; a router that gives one expert all its probability (so that every token
    fills one of its slots there) gives E, the largest value, since no f_e exceeds 1.
    """
    if not logits:
        raise ValueError("no router logits: run the model inside router_logits(model) first")
    num_experts = logits[0].shape[-1]
    slots = torch.zeros(num_experts, device=logits[0].device)
    probs = torch.zeros(num_experts, device=logits[0].device)
    rows = 0
    for layer in logits:
        p = layer.float().softmax(dim=-1)  # (N, E)
        chosen = p.topk(top_k, dim=-1).indices  # (N, k)
        slots = slots + F.one_hot(chosen, num_experts).sum(dim=(0, 1))  # (E,): routing slots per expert
        probs = probs + p.sum(dim=0)  # (E,)
        rows += p.shape[0]
    return num_experts * torch.sum((slots / rows) * (probs / rows))


def expert_shares(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """One layer's router logits (N, E) -> the share of routing slots each expert got, (E,), summing to 1."""
    chosen = logits.topk(top_k, dim=-1).indices  # (N, k): the softmax keeps the order, so the logits do
    counts = torch.bincount(chosen.flatten(), minlength=logits.shape[-1]).float()  # (E,)
    return counts / counts.sum()


@torch.no_grad()
def expert_use(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Run `model` on ids (B, T) -> (MoE layers, E): each layer's share of routing slots per expert (rows sum to 1)."""
    top_k = next((m.top_k for m in model.modules() if isinstance(m, MoEFeedForward)), None)
    was_training = model.training
    model.eval()
    try:
        with router_logits(model) as logits:
            model(ids)
    finally:
        model.train(was_training)
    return torch.stack([expert_shares(layer, top_k) for layer in logits])  # (L, E)


def moe_lm_loss(coefficient: float):
    """A loss function for `fit`: next-token cross-entropy plus coefficient * load_balancing_loss.

    With coefficient 0 the routers learn from the language-model loss alone.
    """
    from .training import lm_loss

    def loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        with router_logits(model) as logits:
            lm = lm_loss(model, batch)
        top_k = next(m for m in model.modules() if isinstance(m, MoEFeedForward)).top_k
        return lm + coefficient * load_balancing_loss(logits, top_k) if coefficient else lm

    return loss
