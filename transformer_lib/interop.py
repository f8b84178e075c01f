"""Copy weights between this package and torch.nn's Transformer modules, both ways.

With the same weights and dropout off, ours and PyTorch's give the same outputs
(the tests check to 1e-5). Remember the masks differ: ours are True = may attend,
PyTorch's bool masks are True = blocked (see ``masks.to_torch_convention``).

==============================  ==================================
ours                            torch.nn
==============================  ==================================
MultiHeadAttention              MultiheadAttention (batch_first)
EncoderLayer / Encoder          TransformerEncoderLayer / TransformerEncoder
DecoderLayer / Decoder          TransformerDecoderLayer / TransformerDecoder
Transformer (its two stacks)    Transformer
==============================  ==================================
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention
from .decoder import Decoder, DecoderLayer
from .encoder import Encoder, EncoderLayer
from .layers import FeedForward
from .models import Transformer

__all__ = ["load_from_torch", "load_into_torch", "from_torch", "to_torch"]


def _copy(dst: torch.Tensor, src: torch.Tensor, what: str) -> None:
    if dst.shape != src.shape:
        raise ValueError(f"cannot copy {what}: expected shape {tuple(dst.shape)}, got {tuple(src.shape)}")
    dst.copy_(src)


# ---- attention --------------------------------------------------------------------------------


def _mha_from_torch(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    if theirs.in_proj_weight is None:
        raise ValueError("nn.MultiheadAttention with separate kdim/vdim is not supported")
    E = ours.d_model
    w_q, w_k, w_v = theirs.in_proj_weight.split(E, dim=0)  # each (E, E)
    for proj, w in zip((ours.q_proj, ours.k_proj, ours.v_proj), (w_q, w_k, w_v)):
        _copy(proj.weight, w, "an input projection")
    if theirs.in_proj_bias is not None:
        for proj, b in zip((ours.q_proj, ours.k_proj, ours.v_proj), theirs.in_proj_bias.split(E)):
            _copy(proj.bias, b, "an input projection bias")
    _copy(ours.out_proj.weight, theirs.out_proj.weight, "out_proj.weight")
    if theirs.out_proj.bias is not None:
        _copy(ours.out_proj.bias, theirs.out_proj.bias, "out_proj.bias")


def _mha_into_torch(theirs: nn.MultiheadAttention, ours: MultiHeadAttention) -> None:
    weight = torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])  # (3E, E)
    _copy(theirs.in_proj_weight, weight, "in_proj_weight")
    if theirs.in_proj_bias is not None:
        _copy(theirs.in_proj_bias, torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]), "in_proj_bias")
    _copy(theirs.out_proj.weight, ours.out_proj.weight, "out_proj.weight")
    if theirs.out_proj.bias is not None:
        _copy(theirs.out_proj.bias, ours.out_proj.bias, "out_proj.bias")


def _linear(dst: nn.Linear, src: nn.Linear) -> None:
    _copy(dst.weight, src.weight, "a linear weight")
    _copy(dst.bias, src.bias, "a linear bias")


def _norm(dst: nn.Module, src: nn.Module) -> None:
    _copy(dst.weight, src.weight, "a LayerNorm weight")
    _copy(dst.bias, src.bias, "a LayerNorm bias")


def _ff_from_torch(ours: FeedForward, theirs: nn.Module) -> None:
    _linear(ours.linear1, theirs.linear1)
    _linear(ours.linear2, theirs.linear2)


def _ff_into_torch(theirs: nn.Module, ours: FeedForward) -> None:
    _linear(theirs.linear1, ours.linear1)
    _linear(theirs.linear2, ours.linear2)


def _torch_activation(layer: nn.Module) -> str | None:
    """'relu' or 'gelu' for a torch.nn encoder or decoder layer, None for anything else."""
    act = layer.activation
    if act is F.relu or isinstance(act, nn.ReLU):
        return "relu"
    if act is F.gelu or isinstance(act, nn.GELU):
        return "gelu"
    return None


def _check_layer(ours: nn.Module, theirs: nn.Module) -> None:
    block = ours.attn_block if isinstance(ours, EncoderLayer) else ours.self_attn_block
    if block.norm_first != theirs.norm_first:
        raise ValueError(f"norm_first differs: ours is {block.norm_first}, torch's is {theirs.norm_first}")
    if _torch_activation(theirs) != ours.feed_forward.activation_name:
        raise ValueError(
            f"activation differs: ours is {ours.feed_forward.activation_name!r}, "
            f"torch's is {_torch_activation(theirs)!r}"
        )


# ---- layers -----------------------------------------------------------------------------------


def _encoder_layer_from_torch(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    _check_layer(ours, theirs)
    _mha_from_torch(ours.self_attn, theirs.self_attn)
    _ff_from_torch(ours.feed_forward, theirs)
    _norm(ours.attn_block.norm, theirs.norm1)
    _norm(ours.ff_block.norm, theirs.norm2)


def _encoder_layer_into_torch(theirs: nn.TransformerEncoderLayer, ours: EncoderLayer) -> None:
    _check_layer(ours, theirs)
    _mha_into_torch(theirs.self_attn, ours.self_attn)
    _ff_into_torch(theirs, ours.feed_forward)
    _norm(theirs.norm1, ours.attn_block.norm)
    _norm(theirs.norm2, ours.ff_block.norm)


def _decoder_layer_from_torch(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    if ours.cross_attn is None:
        raise ValueError("a decoder layer without cross-attention has no counterpart in torch.nn")
    _check_layer(ours, theirs)
    _mha_from_torch(ours.self_attn, theirs.self_attn)
    _mha_from_torch(ours.cross_attn, theirs.multihead_attn)
    _ff_from_torch(ours.feed_forward, theirs)
    _norm(ours.self_attn_block.norm, theirs.norm1)
    _norm(ours.cross_attn_block.norm, theirs.norm2)
    _norm(ours.ff_block.norm, theirs.norm3)


def _decoder_layer_into_torch(theirs: nn.TransformerDecoderLayer, ours: DecoderLayer) -> None:
    if ours.cross_attn is None:
        raise ValueError("a decoder layer without cross-attention has no counterpart in torch.nn")
    _check_layer(ours, theirs)
    _mha_into_torch(theirs.self_attn, ours.self_attn)
    _mha_into_torch(theirs.multihead_attn, ours.cross_attn)
    _ff_into_torch(theirs, ours.feed_forward)
    _norm(theirs.norm1, ours.self_attn_block.norm)
    _norm(theirs.norm2, ours.cross_attn_block.norm)
    _norm(theirs.norm3, ours.ff_block.norm)


def _stack(dst: nn.Module, src: nn.Module, copy_layer) -> None:
    if len(dst.layers) != len(src.layers):
        raise ValueError(f"layer counts differ: {len(dst.layers)} and {len(src.layers)}")
    for d, s in zip(dst.layers, src.layers):
        copy_layer(d, s)
    if (dst.norm is None) != (src.norm is None):
        raise ValueError(
            f"one stack ends with a LayerNorm and the other does not; build ours with final_norm={src.norm is not None}"
        )
    if dst.norm is not None:
        _norm(dst.norm, src.norm)


_FROM_TORCH = [
    (MultiHeadAttention, nn.MultiheadAttention, _mha_from_torch),
    (EncoderLayer, nn.TransformerEncoderLayer, _encoder_layer_from_torch),
    (DecoderLayer, nn.TransformerDecoderLayer, _decoder_layer_from_torch),
    (Encoder, nn.TransformerEncoder, lambda d, s: _stack(d, s, _encoder_layer_from_torch)),
    (Decoder, nn.TransformerDecoder, lambda d, s: _stack(d, s, _decoder_layer_from_torch)),
    (
        Transformer,
        nn.Transformer,
        lambda d, s: (load_from_torch(d.encoder, s.encoder), load_from_torch(d.decoder, s.decoder)),
    ),
]
_INTO_TORCH = [
    (nn.MultiheadAttention, MultiHeadAttention, _mha_into_torch),
    (nn.TransformerEncoderLayer, EncoderLayer, _encoder_layer_into_torch),
    (nn.TransformerDecoderLayer, DecoderLayer, _decoder_layer_into_torch),
    (nn.TransformerEncoder, Encoder, lambda d, s: _stack(d, s, _encoder_layer_into_torch)),
    (nn.TransformerDecoder, Decoder, lambda d, s: _stack(d, s, _decoder_layer_into_torch)),
    (
        nn.Transformer,
        Transformer,
        lambda d, s: (load_into_torch(d.encoder, s.encoder), load_into_torch(d.decoder, s.decoder)),
    ),
]


def _dispatch(table, dst: nn.Module, src: nn.Module, verb: str) -> None:
    for dst_type, src_type, copy in table:
        if type(dst) is dst_type and type(src) is src_type:
            with torch.no_grad():
                copy(dst, src)
            return
    pairs = ", ".join(f"{d.__name__} <- {s.__name__}" for d, s, _ in table)
    raise TypeError(f"cannot {verb} {type(dst).__name__} from {type(src).__name__}; supported: {pairs}")


def load_from_torch(ours: nn.Module, theirs: nn.Module) -> nn.Module:
    """Copy the weights of a torch.nn module into the matching module of ours; return ours."""
    _dispatch(_FROM_TORCH, ours, theirs, "load")
    return ours


def load_into_torch(theirs: nn.Module, ours: nn.Module) -> nn.Module:
    """Copy the weights of our module into the matching torch.nn module; return theirs."""
    _dispatch(_INTO_TORCH, theirs, ours, "load")
    return theirs


def _layer_kwargs(layer: nn.Module) -> dict:
    """Our layer's constructor arguments, read off a torch.nn encoder or decoder layer."""
    act = _torch_activation(layer)
    if act is None:
        raise ValueError("only ReLU and GELU activations can be converted")
    return dict(
        d_model=layer.self_attn.embed_dim,
        num_heads=layer.self_attn.num_heads,
        d_ff=layer.linear1.out_features,
        dropout=layer.dropout.p,
        norm_first=layer.norm_first,
        activation=act,
        eps=layer.norm1.eps,
    )


def from_torch(theirs: nn.Module, **overrides) -> nn.Module:
    """Build our module with the same architecture and weights as a torch.nn module.

    For nn.Transformer, `overrides` go to our TransformerConfig (e.g. vocab_size); the embeddings
    and output layer, which nn.Transformer does not have, stay freshly initialised.
    """
    if isinstance(theirs, nn.MultiheadAttention):
        ours = MultiHeadAttention(theirs.embed_dim, theirs.num_heads, theirs.dropout, theirs.in_proj_bias is not None)
    elif isinstance(theirs, nn.TransformerEncoderLayer):
        ours = EncoderLayer(**_layer_kwargs(theirs))
    elif isinstance(theirs, nn.TransformerDecoderLayer):
        ours = DecoderLayer(**_layer_kwargs(theirs))
    elif isinstance(theirs, (nn.TransformerEncoder, nn.TransformerDecoder)):
        kind = Encoder if isinstance(theirs, nn.TransformerEncoder) else Decoder
        ours = kind(len(theirs.layers), final_norm=theirs.norm is not None, **_layer_kwargs(theirs.layers[0]))
    elif isinstance(theirs, nn.Transformer):
        kw = _layer_kwargs(theirs.encoder.layers[0])
        ours = Transformer(
            d_model=kw["d_model"],
            num_heads=kw["num_heads"],
            d_ff=kw["d_ff"],
            dropout=kw["dropout"],
            norm_first=kw["norm_first"],
            activation=kw["activation"],
            layer_norm_eps=kw["eps"],
            num_layers=len(theirs.encoder.layers),
            num_decoder_layers=len(theirs.decoder.layers),
            final_norm=True,
            **overrides,
        )
    else:
        raise TypeError(f"no counterpart for {type(theirs).__name__}")
    return load_from_torch(ours, theirs)


def _torch_layer_kwargs(layer: nn.Module) -> dict:
    first = layer.attn_block if isinstance(layer, EncoderLayer) else layer.self_attn_block
    return dict(
        d_model=layer.d_model,
        nhead=layer.self_attn.num_heads,
        dim_feedforward=layer.feed_forward.linear1.out_features,
        dropout=layer.self_attn.dropout,
        activation=layer.feed_forward.activation_name,
        layer_norm_eps=first.norm.eps,
        batch_first=True,
        norm_first=first.norm_first,
    )


def to_torch(ours: nn.Module) -> nn.Module:
    """Build the torch.nn module (batch_first=True) with the same architecture and weights as ours."""
    if isinstance(ours, MultiHeadAttention):
        theirs = nn.MultiheadAttention(
            ours.d_model, ours.num_heads, ours.dropout, bias=ours.q_proj.bias is not None, batch_first=True
        )
    elif isinstance(ours, EncoderLayer):
        theirs = nn.TransformerEncoderLayer(**_torch_layer_kwargs(ours))
    elif isinstance(ours, DecoderLayer):
        theirs = nn.TransformerDecoderLayer(**_torch_layer_kwargs(ours))
    elif isinstance(ours, Encoder):
        norm = None if ours.norm is None else nn.LayerNorm(ours.d_model, ours.norm.eps)
        theirs = nn.TransformerEncoder(to_torch(ours.layers[0]), len(ours.layers), norm, enable_nested_tensor=False)
    elif isinstance(ours, Decoder):
        norm = None if ours.norm is None else nn.LayerNorm(ours.d_model, ours.norm.eps)
        theirs = nn.TransformerDecoder(to_torch(ours.layers[0]), len(ours.layers), norm)
    elif isinstance(ours, Transformer):
        if ours.encoder.norm is None or ours.decoder.norm is None:
            raise ValueError("nn.Transformer always ends each stack with a LayerNorm; build ours with final_norm=True")
        kw = _torch_layer_kwargs(ours.encoder.layers[0])
        kw["layer_norm_eps"] = ours.encoder.norm.eps
        theirs = nn.Transformer(
            num_encoder_layers=len(ours.encoder.layers), num_decoder_layers=len(ours.decoder.layers), **kw
        )
    else:
        raise TypeError(f"no torch.nn counterpart for {type(ours).__name__}")
    return load_into_torch(theirs, ours)
