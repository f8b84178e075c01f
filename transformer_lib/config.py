"""Every hyperparameter of the book's models in one dataclass."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

__all__ = ["TransformerConfig", "resolve_config"]

_POSITIONAL = ("sinusoidal", "learned")
_ACTIVATIONS = ("relu", "gelu")


@dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of an encoder, a decoder or both, with the paper's names."""

    vocab_size: int = 32  # tokens the (source) embedding knows
    tgt_vocab_size: int | None = None  # decoder vocabulary; None = same as vocab_size
    d_model: int = 128  # width of every residual stream vector
    num_heads: int = 4  # attention heads; d_k = d_model // num_heads
    num_layers: int = 2  # encoder layers (and decoder layers unless overridden)
    num_decoder_layers: int | None = None  # None = num_layers
    d_ff: int = 512  # hidden width of the feed-forward block, often 4 * d_model
    dropout: float = 0.1  # on embeddings, attention weights and every sublayer output
    max_len: int = 256  # longest sequence the positional encoding covers
    pad_id: int = 0  # token id of padding; masked out of attention and the loss
    norm_first: bool = False  # False = post-LN as in the 2017 paper; True = pre-LN (GPT-2)
    scale_embedding: bool = True  # multiply embeddings by sqrt(d_model) as in the paper
    positional: str = "sinusoidal"  # "sinusoidal" (fixed) or "learned"
    activation: str = "relu"  # feed-forward non-linearity: "relu" or "gelu"
    final_norm: bool | None = None  # LayerNorm after the last layer; None = norm_first
    layer_norm_eps: float = 1e-5  # added to the variance inside LayerNorm
    tie_embeddings: bool = False  # share the output projection with the target embedding

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"d_model must be divisible by num_heads: got d_model={self.d_model}, "
                f"num_heads={self.num_heads} (d_model % num_heads = {self.d_model % self.num_heads})"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        if self.positional not in _POSITIONAL:
            raise ValueError(f"positional must be one of {_POSITIONAL}, got {self.positional!r}")
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {_ACTIVATIONS}, got {self.activation!r}")
        if self.positional == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(f"sinusoidal positional encoding needs an even d_model, got {self.d_model}")

    @property
    def d_k(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.num_heads

    @property
    def target_vocab_size(self) -> int:
        """The decoder's vocabulary size."""
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def decoder_layers(self) -> int:
        """How many decoder layers a model builds."""
        return self.num_layers if self.num_decoder_layers is None else self.num_decoder_layers

    @property
    def use_final_norm(self) -> bool:
        """Whether a stack ends with a LayerNorm."""
        return self.norm_first if self.final_norm is None else self.final_norm


def resolve_config(config: TransformerConfig | None, overrides: dict) -> TransformerConfig:
    """Return `config` (or the defaults) with keyword overrides applied, rejecting unknown names."""
    if config is not None and not isinstance(config, TransformerConfig):
        raise TypeError(f"config must be a TransformerConfig, got {type(config).__name__}")
    known = {f.name for f in fields(TransformerConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"unknown config field(s) {unknown}; known fields are {sorted(known)}")
    return replace(config or TransformerConfig(), **overrides)
