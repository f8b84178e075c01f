"""transformer_lib: the tested components of *Transformers, built and seen*."""

from .attention import KVCache, MultiHeadAttention, capture_attention, fused_attention, scaled_dot_product_attention
from .config import TransformerConfig
from .decoder import Decoder, DecoderLayer
from .embedding import TokenEmbedding, check_token_ids
from .encoder import Encoder, EncoderLayer
from .layers import AddNorm, FeedForward, LayerNorm, get_activation
from .masks import (
    causal_mask,
    combine_masks,
    from_torch_convention,
    padding_mask,
    target_mask,
    to_torch_convention,
)
from .models import DecoderOnlyLM, EncoderClassifier, EncoderOnlyModel, EncoderRegressor, Transformer
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding, sinusoidal_encoding
from .utils import count_parameters, get_device, set_seed

__version__ = "0.1.0"
