"""Model surgery: copies of a DecoderOnlyLM with their inside rearranged, computing the same function.

Four operations, each returning a new model on the device of the one it was given (the original
is never changed):

- `permute_heads` renumbers the attention heads of every layer;
- `with_rotary_layout` moves a rotary model between the interleaved and the rotate-half pairing;
- `prepend_layer` adds one layer in front that writes nothing, so every layer moves one down;
- `add_tokens` gives the vocabulary new ids at its end (chapter 17's chat tokens), the old ones unchanged.

Used by `hf` (checkpoints in the other rotary layout) and by the checkers of chapters 13 and 14,
which run a learner's measurement on such copies: an answer that measures the model passes, an
answer typed from the chapter's output does not.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .config import ROTARY_LAYOUTS
from .models import DecoderOnlyLM
from .positional import rotary_permutation

__all__ = ["permute_heads", "with_rotary_layout", "prepend_layer", "add_tokens"]


def _placed_like(twin: nn.Module, model: nn.Module) -> nn.Module:
    """`twin` moved to the device and floating dtype of `model`'s parameters."""
    first = next(model.parameters())
    return twin.to(device=first.device, dtype=first.dtype)


def _check_model(model: object, what: str) -> None:
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"{what} takes a DecoderOnlyLM, got {type(model).__name__}")


def _take_rows(proj: nn.Linear, rows: torch.Tensor) -> None:
    """Reorder the output rows of a linear layer in place: new row j is old row rows[j]."""
    rows = rows.to(proj.weight.device)
    proj.weight.copy_(proj.weight[rows])
    if proj.bias is not None:
        proj.bias.copy_(proj.bias[rows])


def _head_rows(order: torch.Tensor, d_k: int) -> torch.Tensor:
    """The rows of a projection that whole heads, or one head's rows repeated per head, occupy.

    `order` (n,) of head ids gives (n * d_k,) row ids: head order[j]'s d_k rows, in turn.
    """
    return (order[:, None] * d_k + torch.arange(d_k)).flatten()  # (n, d_k) -> (n * d_k,)


def permute_heads(model: DecoderOnlyLM, orders: list[list[int]]) -> DecoderOnlyLM:
    """A copy whose heads are renumbered in each layer: new head j of layer l is old head orders[l][j].

    The query, key and value rows of each head move together, and so do the columns of the output
    projection that read it, so the logits are unchanged; only the heads' numbers move.
    """
    _check_model(model, "permute_heads")
    layers = model.decoder.layers
    if len(orders) != len(layers):
        raise ValueError(f"one order per layer: the model has {len(layers)} layers, got {len(orders)} orders")
    twin = copy.deepcopy(model)
    for i, (layer, order) in enumerate(zip(twin.decoder.layers, orders)):
        attn = layer.self_attn
        if sorted(order) != list(range(attn.num_heads)):
            raise ValueError(f"layer {i}: an order of the {attn.num_heads} heads 0..{attn.num_heads - 1}, got {order}")
        if attn.num_kv_heads != attn.num_heads:
            raise ValueError(
                "permute_heads needs one key and value head per query head; with grouped-query attention "
                f"({attn.num_kv_heads} key/value heads for {attn.num_heads} queries) renumbering moves groups"
            )
        rows = _head_rows(torch.tensor(order), attn.d_k)  # (h * d_k,)
        with torch.no_grad():
            for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
                _take_rows(proj, rows)
            attn.out_proj.weight.copy_(attn.out_proj.weight[:, rows.to(attn.out_proj.weight.device)])
    return twin.eval()


def with_rotary_layout(model: DecoderOnlyLM, layout: str) -> DecoderOnlyLM:
    """A copy of a rotary `model` in the other pairing of its rotary dimensions, computing the same function.

    Each head's query and key rows are reordered by `rotary_permutation`, so that the pair a row
    belonged to sits where `layout` expects it; values, outputs and everything else are unchanged.
    Loading interleaved weights (Meta's original Llama, GPT-J) into a rotate-half model without
    this reordering is the classic mistake: it runs, and gives other logits.
    """
    if not isinstance(model, DecoderOnlyLM) or model.config.positional != "rope":
        raise TypeError("with_rotary_layout takes a DecoderOnlyLM with rotary positions (positional='rope')")
    if layout not in ROTARY_LAYOUTS:
        raise ValueError(f"layout must be one of {ROTARY_LAYOUTS}, got {layout!r}")
    cfg = model.config
    twin = _placed_like(DecoderOnlyLM(cfg.replace(rotary_layout=layout)), model)  # the new layout's tables
    twin.load_state_dict(model.state_dict())  # copied in: the twin shares no tensor with the model
    if layout == cfg.rotary_layout:
        return twin.eval()
    order = rotary_permutation(cfg.d_k, cfg.rotary_dim, to=layout)  # (d_k,): new row j is old row order[j]
    with torch.no_grad():
        for layer in twin.decoder.layers:
            attn = layer.self_attn
            for proj, heads in ((attn.q_proj, attn.num_heads), (attn.k_proj, attn.num_kv_heads)):
                rows = (torch.arange(heads)[:, None] * cfg.d_k + order).flatten()  # (heads, d_k) -> (heads * d_k,)
                _take_rows(proj, rows)
    return twin.eval()


def _silence(layer: nn.Module) -> None:
    """Zero every projection through which a layer writes to the residual stream."""
    writers = [layer.self_attn.out_proj]
    ff = layer.feed_forward
    if ff is not None:
        writers += [e.linear2 for e in ff.experts] if hasattr(ff, "experts") else [ff.linear2]
    with torch.no_grad():
        for proj in writers:
            proj.weight.zero_()
            if proj.bias is not None:
                proj.bias.zero_()


def prepend_layer(model: DecoderOnlyLM, *, seed: int = 0) -> DecoderOnlyLM:
    """A copy with one more layer in front that writes nothing, so old layer i is new layer i + 1.

    The new layer's weights are drawn from `seed` (its heads still attend, and can be measured), but
    its output projections are zero, so it adds nothing to the residual stream and the logits are
    unchanged. Only a pre-LN or parallel block can be silent this way: a post-LN layer normalises
    the stream itself.
    """
    _check_model(model, "prepend_layer")
    cfg = model.config
    if not (cfg.norm_first or cfg.parallel_block):
        raise ValueError(
            "prepend_layer needs pre-LN or parallel blocks (norm_first=True or parallel_block=True): a post-LN "
            "layer normalises the residual stream, so it changes the function even when it writes nothing"
        )
    with torch.random.fork_rng(devices=[]):  # the new layer from the caller's seed, the caller's RNG untouched
        torch.manual_seed(seed)
        twin = _placed_like(DecoderOnlyLM(cfg.replace(num_layers=cfg.num_layers + 1)), model)
    prefix = "decoder.layers."
    state = {}
    for name, tensor in model.state_dict().items():
        if name.startswith(prefix):
            i, rest = name.removeprefix(prefix).split(".", 1)
            name = f"{prefix}{int(i) + 1}.{rest}"
        state[name] = tensor
    state |= {f"{prefix}0.{name}": t for name, t in twin.decoder.layers[0].state_dict().items()}
    twin.load_state_dict(state)  # copied in: the twin shares no tensor with the model
    _silence(twin.decoder.layers[0])
    return twin.eval()


def add_tokens(model: DecoderOnlyLM, n: int, *, seed: int = 0) -> DecoderOnlyLM:
    """A copy with n more token ids at the end of its vocabulary: old ids give the same logits as before.

    The new rows of the embedding table (and of the output layer, tied to it or not) are drawn as a
    fresh model's would be, from `seed`; a new output bias starts at zero. Until training, the old
    ids' logits are unchanged and the new ids get logits like any untrained row's.
    """
    _check_model(model, "add_tokens")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    cfg = model.config
    size = cfg.vocab_size + n
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        twin = _placed_like(DecoderOnlyLM(cfg.replace(vocab_size=size, tgt_vocab_size=size)), model)
    state = twin.state_dict()
    for name, tensor in model.state_dict().items():
        if tensor.shape == state[name].shape:
            state[name] = tensor
        else:  # a table with one row per id: the old rows copied, the new ones kept as drawn
            grown = state[name].clone()
            grown[: tensor.shape[0]] = tensor
            if name == "head.bias":
                grown[tensor.shape[0] :] = 0
            state[name] = grown
    twin.load_state_dict(state)
    return twin.eval()
