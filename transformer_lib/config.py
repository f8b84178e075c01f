"""Every hyperparameter of the book's models in one dataclass, read by every layer.

Layers, stacks and models are built from a `TransformerConfig` and keep it as ``self.config``.
Adding an option to the book's models means one field here, the code that reads it, and its
test: a stack hands its config to its layers untouched, so it never needs to know.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

__all__ = ["TransformerConfig", "ACTIVATIONS", "ROTARY_LAYOUTS", "ROPE_SCALINGS", "check_rope_scaling"]

_POSITIONAL = ("sinusoidal", "learned", "rope")
#: The feed-forward activations, by name: the one list (layers.py maps each name to its function).
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swiglu", "quick_gelu")
#: Where each rotary pair's two dimensions sit: (i, i + r/2) as Hugging Face's Llama ("half"), or
#: (2i, 2i + 1) as GPT-J and Meta's original Llama ("interleaved"). The one list (positional.py reads it).
ROTARY_LAYOUTS = ("half", "interleaved")
_NORMS = ("layer", "rms")
#: How RoPE is stretched to read past the length a model was trained on (positional.rope_frequencies says each).
ROPE_SCALINGS = ("none", "linear", "ntk", "yarn", "llama3")
# fields whose None means "follow another field"; each is resolved here, and only here
_FOLLOWS = {
    "tgt_vocab_size": "vocab_size",
    "num_decoder_layers": "num_layers",
    "final_norm": "norm_first",
    "num_kv_heads": "num_heads",
}


@dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of an encoder, a decoder or both, with the paper's names.

    ``tgt_vocab_size``, ``num_decoder_layers`` and ``final_norm`` may be left as None: they then
    follow ``vocab_size``, ``num_layers`` and ``norm_first``, and are resolved when the config is
    built, so a layer reads a plain value. ``config.replace(...)`` keeps a following field
    following: ``cfg.replace(norm_first=True)`` also turns the final norm on.
    """

    vocab_size: int = 32  # tokens the (source) embedding knows
    tgt_vocab_size: int | None = None  # decoder vocabulary; None = same as vocab_size
    d_model: int = 128  # width of every residual stream vector
    num_heads: int = 4  # attention heads; d_k = d_model // num_heads
    num_layers: int = 2  # encoder layers (and decoder layers unless num_decoder_layers says otherwise)
    num_decoder_layers: int | None = None  # None = num_layers
    d_ff: int = 512  # hidden width of the feed-forward block, often 4 * d_model
    dropout: float = 0.1  # on embeddings, attention weights and every sublayer output
    max_len: int = 256  # longest sequence the positional encoding covers
    pad_id: int | None = 0  # token id of padding, masked out of attention and the loss; None: no id is padding
    norm_first: bool = False  # False = post-LN as in the 2017 paper; True = pre-LN (GPT-2)
    scale_embedding: bool = True  # multiply embeddings by sqrt(d_model) as in the paper
    positional: str = "sinusoidal"  # "sinusoidal" (fixed, added), "learned" (added) or "rope" (rotary, in attention)
    activation: str = "relu"  # feed-forward: "relu", "gelu", "gelu_tanh" (GPT-2), "swiglu" (Llama), "quick_gelu" (CLIP)
    final_norm: bool | None = None  # a norm after the last layer of each stack; None = norm_first
    eps: float = 1e-5  # added to the variance (LayerNorm) or mean square (RMSNorm) inside every norm
    tie_embeddings: bool = False  # share the output head's weights with the (target) embedding
    norm: str = "layer"  # every normalisation layer: "layer" (LayerNorm, the paper) or "rms" (RMSNorm, Llama)
    bias: bool = True  # biases in the attention projections and the feed-forward linears (Llama has none)
    num_kv_heads: int | None = None  # key-value heads; None = num_heads; fewer = grouped-query, 1 = multi-query
    attention_only: bool = False  # layers without the feed-forward block (and its norm): the toy models of circuits
    rotary_layout: str = (
        "half"  # RoPE's pairs: "half" (i, i + r/2; HF Llama, GPT-NeoX) or "interleaved" (2i, 2i+1; GPT-J)
    )
    rotary_dim: int | None = None  # RoPE turns the first rotary_dim dimensions of each head; None = all (d_k)
    parallel_block: bool = False  # attention and feed-forward both read the layer's input and add to it (GPT-J, PaLM)
    shared_norm: bool = True  # parallel_block: one norm feeds both sublayers (GPT-J); False: one each (GPT-NeoX)
    rope_base: float = 10000.0  # RoPE's pair i turns by position * rope_base ** (-2i / rotary_dim) (Mixtral: 1e6)
    rope_scaling: str = "none"  # reading past the trained length: "linear", "ntk", "yarn" or "llama3" (positional.py)
    rope_factor: float = 1.0  # how many times the trained length the scaled RoPE is meant to read
    rope_original_len: int | None = None  # the length the model was trained on ("yarn" and "llama3" need it)
    qk_norm: bool = False  # an RMSNorm on each head's query and key before RoPE (Qwen3, Gemma 3)
    num_experts: int = 0  # > 0: each feed-forward block is a mixture of this many experts of width d_ff (Mixtral)
    experts_per_token: int = 2  # with experts: how many each token goes to (top-k routing)

    def __post_init__(self) -> None:
        for name, source in _FOLLOWS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(self, source))  # frozen: resolve once, here
        for name in (
            "vocab_size",
            "tgt_vocab_size",
            "d_model",
            "num_heads",
            "num_layers",
            "num_decoder_layers",
            "d_ff",
            "max_len",
            "num_kv_heads",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"d_model must be divisible by num_heads: got d_model={self.d_model}, "
                f"num_heads={self.num_heads} (d_model % num_heads = {self.d_model % self.num_heads})"
            )
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_heads must be divisible by num_kv_heads: got num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads} (num_heads % num_kv_heads = {self.num_heads % self.num_kv_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.positional not in _POSITIONAL:
            raise ValueError(f"positional must be one of {_POSITIONAL}, got {self.positional!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.norm not in _NORMS:
            raise ValueError(f"norm must be one of {_NORMS}, got {self.norm!r}")
        if not isinstance(self.bias, bool):
            raise ValueError(f"bias must be True or False, got {self.bias!r}")
        if not isinstance(self.attention_only, bool):
            raise ValueError(f"attention_only must be True or False, got {self.attention_only!r}")
        if self.rotary_layout not in ROTARY_LAYOUTS:
            raise ValueError(f"rotary_layout must be one of {ROTARY_LAYOUTS}, got {self.rotary_layout!r}")
        if self.rotary_dim is not None and (
            not isinstance(self.rotary_dim, int) or self.rotary_dim % 2 or not 0 < self.rotary_dim <= self.d_k
        ):
            raise ValueError(f"rotary_dim must be even and between 2 and d_k = {self.d_k}, got {self.rotary_dim!r}")
        if not (isinstance(self.rope_base, (int, float)) and self.rope_base > 1):
            raise ValueError(f"rope_base must be a number above 1, got {self.rope_base!r}")
        check_rope_scaling(self.rope_scaling, self.rope_factor, self.rope_original_len)
        if not isinstance(self.qk_norm, bool):
            raise ValueError(f"qk_norm must be True or False, got {self.qk_norm!r}")
        if (
            not isinstance(self.num_experts, int)
            or isinstance(self.num_experts, bool)
            or self.num_experts == 1
            or self.num_experts < 0
        ):
            raise ValueError(f"num_experts must be 0 (a dense block) or at least 2, got {self.num_experts!r}")
        if self.num_experts and not (
            isinstance(self.experts_per_token, int) and 1 <= self.experts_per_token <= self.num_experts
        ):
            raise ValueError(
                f"experts_per_token must be between 1 and num_experts = {self.num_experts}, "
                f"got {self.experts_per_token!r}"
            )
        if not isinstance(self.parallel_block, bool):
            raise ValueError(f"parallel_block must be True or False, got {self.parallel_block!r}")
        if self.parallel_block and (not self.norm_first or self.attention_only):
            raise ValueError(
                "parallel_block needs norm_first=True (both sublayers read normalised input) and a feed-forward block "
                f"(attention_only=False); got norm_first={self.norm_first}, attention_only={self.attention_only}"
            )
        if not isinstance(self.shared_norm, bool):
            raise ValueError(f"shared_norm must be True or False, got {self.shared_norm!r}")
        if not self.shared_norm and not self.parallel_block:
            raise ValueError(
                "shared_norm=False gives each sublayer of a parallel block its own norm; it needs parallel_block=True "
                "(every other block already has one norm per sublayer)"
            )
        if self.positional == "rope" and self.d_k % 2 != 0:
            raise ValueError(f"rotary positions need an even head width d_model // num_heads, got {self.d_k}")
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(f"sinusoidal positional encoding needs an even d_model, got {self.d_model}")
        if not self.eps > 0:
            raise ValueError(f"eps must be positive, got {self.eps!r}")

    @property
    def d_k(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.num_heads

    def replace(self, **changes) -> TransformerConfig:
        """A copy with `changes`; unknown names are refused, and a field that followed another keeps following.

        ``TransformerConfig(num_layers=2).replace(num_layers=4).num_decoder_layers == 4``, while a
        decoder depth set on its own stays as it was.
        """
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"unknown config field(s) {unknown}; known fields are {sorted(known)}")
        for name, source in _FOLLOWS.items():
            if source in changes and name not in changes and getattr(self, name) == getattr(self, source):
                changes[name] = None  # it followed its source before: let it follow the new value
        return replace(self, **changes)


def check_rope_scaling(scaling: str, factor: float, original_len: int | None) -> None:
    """Refuse a RoPE scaling that `positional.rope_frequencies` cannot compute, naming the field."""
    if scaling not in ROPE_SCALINGS:
        raise ValueError(f"rope_scaling must be one of {ROPE_SCALINGS}, got {scaling!r}")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 1:
        raise ValueError(f"rope_factor must be a number of at least 1 (times the trained length), got {factor!r}")
    if scaling == "none" and factor != 1:
        raise ValueError(
            f"rope_factor={factor} stretches nothing without a rope_scaling; name one of {ROPE_SCALINGS[1:]}"
        )
    if scaling in ("yarn", "llama3") and (isinstance(original_len, bool) or not isinstance(original_len, int)
                                          or original_len < 1):  # fmt: skip
        raise ValueError(f"rope_scaling={scaling!r} needs rope_original_len, the trained length, got {original_len!r}")


def resolve_config(config: TransformerConfig | None, overrides: dict) -> TransformerConfig:
    """`config` (or the defaults) with keyword overrides applied: how every layer and model reads its arguments."""
    if config is not None and not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    return (config or TransformerConfig()).replace(**overrides)
