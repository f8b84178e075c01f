"""Copy weights between this package and torch.nn's Transformer modules, both ways.

With the same weights and dropout off, ours and PyTorch's give the same outputs (the tests check
to 1e-5). Remember the masks differ: ours are True = may attend, PyTorch's bool masks are
True = blocked (see ``masks.to_torch_convention``).

==============================  ==================================
ours                            torch.nn
==============================  ==================================
MultiHeadAttention              MultiheadAttention (batch_first)
EncoderLayer / Encoder          TransformerEncoderLayer / TransformerEncoder
DecoderLayer / Decoder          TransformerDecoderLayer / TransformerDecoder
Transformer (its two stacks)    Transformer
==============================  ==================================

The conversion is one table of parameter names (``TORCH_NAMES``) applied to state dicts in
either direction; the packed query/key/value projection is its only special case.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention
from .config import TransformerConfig
from .decoder import Decoder, DecoderLayer
from .encoder import Encoder, EncoderLayer
from .models import Transformer

__all__ = ["TORCH_NAMES", "load_from_torch", "load_into_torch", "from_torch", "to_torch"]

# Where our parameter paths and torch.nn's differ, piece by piece. Everything else is spelt the
# same in both: self_attn., out_proj., norm1. to norm3., layers.<i>., encoder., decoder., norm.
#: Our parameter names and torch.nn's, one pair per parameter, for the layers, stacks and models.
TORCH_NAMES = (
    ("feed_forward.linear1.", "linear1."),
    ("feed_forward.linear2.", "linear2."),
    ("cross_attn.", "multihead_attn."),
)
_PACKED = ("q_proj", "k_proj", "v_proj")  # torch keeps these three as one in_proj_weight (3E, E) and in_proj_bias
_NO_COUNTERPART = ("src_embed.", "tgt_embed.", "src_pos.", "tgt_pos.", "head.")  # nn.Transformer has none of these
_PAIRS = (  # (ours, torch's), the types that convert into each other
    (MultiHeadAttention, nn.MultiheadAttention),
    (EncoderLayer, nn.TransformerEncoderLayer),
    (DecoderLayer, nn.TransformerDecoderLayer),
    (Encoder, nn.TransformerEncoder),
    (Decoder, nn.TransformerDecoder),
    (Transformer, nn.Transformer),
)


def _to_torch_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict -> torch.nn's: rename by TORCH_NAMES, pack q/k/v projections into in_proj."""
    out = {}
    for key, value in state.items():
        if key.startswith(_NO_COUNTERPART):
            continue
        for ours, theirs in TORCH_NAMES:
            key = key.replace(ours, theirs)
        out[key] = value
    for key in [k for k in out if k.rsplit(".", 2)[-2:-1] == ["q_proj"]]:
        prefix, kind = key.rsplit("q_proj.", 1)  # kind: "weight" or "bias"
        out[f"{prefix}in_proj_{kind}"] = torch.cat([out.pop(f"{prefix}{p}.{kind}") for p in _PACKED])  # (3E, ...)
    return out


def _from_torch_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """torch.nn's state dict -> ours: split in_proj into q/k/v projections, rename by TORCH_NAMES."""
    out = {}
    for key, value in state.items():
        for ours, theirs in TORCH_NAMES:
            key = key.replace(theirs, ours)
        if "in_proj_" in key:
            prefix, kind = key.rsplit("in_proj_", 1)
            out.update({f"{prefix}{p}.{kind}": part for p, part in zip(_PACKED, value.chunk(3))})  # each (E, ...)
        else:
            out[key] = value
    return out


def _settings(theirs: nn.Module) -> dict:
    """The config fields of a torch.nn module (or of the first layer of its stacks), in our names."""
    if isinstance(theirs, nn.MultiheadAttention):
        return dict(
            d_model=theirs.embed_dim, num_heads=theirs.num_heads, dropout=theirs.dropout, num_kv_heads=theirs.num_heads
        )
    if isinstance(theirs, nn.Transformer):
        return dict(
            _settings(theirs.encoder),
            num_layers=len(theirs.encoder.layers),
            num_decoder_layers=len(theirs.decoder.layers),
            final_norm=True,
        )
    if isinstance(theirs, (nn.TransformerEncoder, nn.TransformerDecoder)):
        return dict(_settings(theirs.layers[0]), num_layers=len(theirs.layers), final_norm=theirs.norm is not None)
    act = {F.relu: "relu", F.gelu: "gelu"}.get(theirs.activation) or type(theirs.activation).__name__.lower()
    if act not in ("relu", "gelu"):
        raise ValueError(f"only ReLU and GELU activations can be converted, got {theirs.activation!r}")
    return dict(
        d_model=theirs.self_attn.embed_dim,
        num_heads=theirs.self_attn.num_heads,
        d_ff=theirs.linear1.out_features,
        dropout=theirs.dropout.p,
        norm_first=theirs.norm_first,
        activation=act,
        eps=theirs.norm1.eps,
        norm="layer",
        bias=theirs.linear1.bias is not None,
        num_kv_heads=theirs.self_attn.num_heads,
    )


def _check(ours: nn.Module, theirs: nn.Module) -> None:
    """Refuse a pair of modules whose types or architectures differ; what differs is named."""
    if (type(ours), type(theirs)) not in _PAIRS:
        pairs = ", ".join(f"{o.__name__} and {t.__name__}" for o, t in _PAIRS)
        raise TypeError(f"cannot load {type(ours).__name__} from {type(theirs).__name__}; supported: {pairs}")
    if getattr(ours, "rotary", False) or getattr(getattr(ours, "config", None), "positional", None) == "rope":
        raise ValueError("torch.nn's attention has no rotary positions; ours rotates queries and keys (RoPE)")
    if isinstance(ours, DecoderLayer | Decoder) and not _has_cross_attention(ours):
        raise ValueError("a decoder without cross-attention has no counterpart in torch.nn")
    mine = (
        vars(ours.config)
        if hasattr(ours, "config")
        else dict(d_model=ours.d_model, num_heads=ours.num_heads, num_kv_heads=ours.num_kv_heads)
    )
    for name, value in _settings(theirs).items():
        if name == "num_layers" and isinstance(ours, Decoder):
            name = "num_decoder_layers"
        if name != "dropout" and mine.get(name, value) != value:
            hint = f"; build ours with final_norm={value}" if name == "final_norm" else ""
            raise ValueError(f"{name} differs: ours is {mine[name]!r}, torch's is {value!r}{hint}")


def _has_cross_attention(ours: nn.Module) -> bool:
    return (ours.layers[0] if isinstance(ours, Decoder) else ours).cross_attn is not None


def load_from_torch(ours: nn.Module, theirs: nn.Module) -> nn.Module:
    """Copy the weights of a torch.nn module into the matching module of ours; return ours."""
    _check(ours, theirs)
    state = _from_torch_state(theirs.state_dict())
    missing, unexpected = ours.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith(_NO_COUNTERPART)]
    if missing or unexpected:
        raise ValueError(f"the two modules hold different parameters: ours lacks {unexpected}, torch's lacks {missing}")
    return ours


def _device(module: nn.Module) -> torch.device:
    """Where a module's parameters live: a converted module is built on the same device."""
    return next(module.parameters()).device


def load_into_torch(theirs: nn.Module, ours: nn.Module) -> nn.Module:
    """Copy the weights of our module into the matching torch.nn module; return theirs."""
    _check(ours, theirs)
    theirs.load_state_dict(_to_torch_state(ours.state_dict()))
    return theirs


def from_torch(theirs: nn.Module, **overrides) -> nn.Module:
    """Build our module with the same architecture and weights as a torch.nn module.

    For nn.Transformer, `overrides` go to our TransformerConfig (e.g. vocab_size); the embeddings
    and output head, which nn.Transformer does not have, stay freshly initialised.
    """
    kind = next((o for o, t in _PAIRS if type(theirs) is t), None)
    if kind is None:
        raise TypeError(f"no counterpart for {type(theirs).__name__}")
    if kind is MultiHeadAttention:
        ours = MultiHeadAttention(
            theirs.embed_dim, theirs.num_heads, theirs.dropout, bias=theirs.in_proj_bias is not None
        )
    else:
        ours = kind(TransformerConfig(**{**_settings(theirs), **overrides}))
    return load_from_torch(ours.to(_device(theirs)), theirs)  # built where theirs lives


def to_torch(ours: nn.Module) -> nn.Module:
    """Build the torch.nn module (batch_first=True) with the same architecture and weights as ours."""
    kind = next((t for o, t in _PAIRS if type(ours) is o), None)
    if kind is None:
        raise TypeError(f"no torch.nn counterpart for {type(ours).__name__}")
    if kind is nn.MultiheadAttention:
        if ours.rotary:
            raise ValueError("nn.MultiheadAttention has no rotary positions; ours rotates queries and keys")
        if ours.num_kv_heads != ours.num_heads:
            raise ValueError(
                f"nn.MultiheadAttention has one key-value head per head; ours has "
                f"num_kv_heads={ours.num_kv_heads} for num_heads={ours.num_heads}"
            )
        bias = ours.q_proj.bias is not None
        theirs = nn.MultiheadAttention(ours.d_model, ours.num_heads, ours.dropout_p, bias=bias, batch_first=True)
        return load_into_torch(theirs.to(_device(ours)), ours)  # built where ours lives
    cfg = ours.config
    if cfg.positional == "rope":
        raise ValueError("torch.nn's Transformer layers have no rotary positions; ours has positional='rope'")
    if cfg.norm != "layer" or cfg.activation not in ("relu", "gelu") or cfg.num_kv_heads != cfg.num_heads:
        raise ValueError(
            f"torch.nn's Transformer layers have LayerNorm, a ReLU or GELU feed-forward and one "
            f"key-value head per head; ours has norm={cfg.norm!r}, activation={cfg.activation!r}, "
            f"num_kv_heads={cfg.num_kv_heads} for num_heads={cfg.num_heads}"
        )
    layer = dict(
        d_model=cfg.d_model,
        nhead=cfg.num_heads,
        dim_feedforward=cfg.d_ff,
        dropout=cfg.dropout,
        activation=cfg.activation,
        layer_norm_eps=cfg.eps,
        batch_first=True,
        norm_first=cfg.norm_first,
        bias=cfg.bias,
    )
    norm = nn.LayerNorm(cfg.d_model, cfg.eps) if cfg.final_norm else None
    if kind is nn.Transformer and not cfg.final_norm:
        raise ValueError("nn.Transformer always ends each stack with a LayerNorm; build ours with final_norm=True")
    if kind is nn.TransformerEncoder:
        theirs = kind(nn.TransformerEncoderLayer(**layer), cfg.num_layers, norm, enable_nested_tensor=False)
    elif kind is nn.TransformerDecoder:
        theirs = kind(nn.TransformerDecoderLayer(**layer), cfg.num_decoder_layers, norm)
    elif kind is nn.Transformer:
        theirs = kind(num_encoder_layers=cfg.num_layers, num_decoder_layers=cfg.num_decoder_layers, **layer)
    else:
        theirs = kind(**layer)
    return load_into_torch(theirs.to(_device(ours)), ours)  # built where ours lives
