"""transformer_lib: the tested components of *Transformers, built and seen*.

Every public name is importable from here, e.g. ``from transformer_lib import MultiHeadAttention``.
Masks everywhere are bool with True = may attend. Importing the package runs nothing and draws
nothing: the figures in `viz` (and matplotlib's pyplot) load the first time one is used.
"""

import importlib

from . import corpus, exercises, inside, lora, moe, quantization, recipes
from .attention import KVCache, MultiHeadAttention, capture_attention, fused_attention, scaled_dot_product_attention
from .checkpoints import load_checkpoint, save_checkpoint
from .config import TransformerConfig
from .decoder import Decoder, DecoderLayer
from .decoding import beam_search, generate, greedy_decode, nucleus
from .embedding import TokenEmbedding
from .encoder import Encoder, EncoderLayer
from .exercises import NotYetDone
from .interop import from_torch, load_from_torch, load_into_torch, to_torch
from .layers import FeedForward, LayerNorm, RMSNorm
from .masks import (
    causal_mask,
    combine_masks,
    from_torch_convention,
    padding_mask,
    sliding_window_mask,
    target_mask,
    to_torch_convention,
)
from .models import DecoderOnlyLM, EncoderClassifier, EncoderOnlyModel, EncoderRegressor, Transformer
from .positional import (
    LearnedPositionalEncoding,
    RotaryPositions,
    SinusoidalPositionalEncoding,
    apply_rotary,
    rotary_permutation,
    rotary_tables,
    sinusoidal_encoding,
)
from .training import (
    History,
    bigram_loss,
    classification_accuracy,
    classification_loss,
    exact_match,
    fit,
    label_smoothed_cross_entropy,
    lm_eval_loss,
    lm_loss,
    noam_rate,
    repeat_losses,
    seq2seq_loss,
    smoothed_targets,
    smoothing_floor,
    warmup_cosine,
)
from .profiling import median_seconds, saved_tensor_bytes
from .tasks import (
    brackets_task,
    char_corpus,
    copy_task,
    encode_labelled,
    encode_pairs,
    is_balanced,
    iterate_batches,
    lm_batches,
    number_to_words,
    numbers_to_words_task,
    pad_sequences,
    repeated_batches,
    repeated_tokens,
    reverse_task,
    split_data,
)
from .tokenization import BPETokenizer, CharTokenizer, WordTokenizer, load_bpe, pretokenize, train_bpe
from .utils import count_parameters, get_device, set_seed

__version__ = "0.1.0"

_VIZ = (
    "SliderFigure",
    "attention_explorer",
    "pe_explorer",
    "plot_architecture",
    "plot_attention",
    "plot_attention_heads",
    "plot_attention_layers",
    "plot_curves",
    "plot_grid",
    "plot_dataflow",
    "plot_distribution",
    "plot_head_split",
    "plot_tokens",
    "plot_mask",
    "plot_mask_broadcast",
    "plot_kv_cache",
    "plot_positional_encoding",
    "plot_residual_wiring",
    "plot_sinusoids",
    "plot_training_curves",
    "slider_figure",
)


def __getattr__(name: str):
    """Load `viz` (and with it matplotlib's pyplot) only when a figure is first asked for."""
    if name == "viz" or name in _VIZ:
        viz = importlib.import_module(f"{__name__}.viz")  # once imported, it is a plain attribute
        return viz if name == "viz" else getattr(viz, name)
    raise AttributeError(f"module 'transformer_lib' has no attribute {name!r}")


__all__ = [
    # configuration and components, in the book's order
    "TransformerConfig",
    "TokenEmbedding",
    "sinusoidal_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEncoding",
    "apply_rotary",
    "rotary_tables",
    "rotary_permutation",
    "RotaryPositions",
    "scaled_dot_product_attention",
    "fused_attention",
    "MultiHeadAttention",
    "KVCache",
    "capture_attention",
    "padding_mask",
    "causal_mask",
    "sliding_window_mask",
    "combine_masks",
    "target_mask",
    "to_torch_convention",
    "from_torch_convention",
    "FeedForward",
    "LayerNorm",
    "RMSNorm",
    "EncoderLayer",
    "Encoder",
    "DecoderLayer",
    "Decoder",
    # models
    "Transformer",
    "EncoderOnlyModel",
    "EncoderClassifier",
    "EncoderRegressor",
    "DecoderOnlyLM",
    # decoding
    "nucleus",
    "generate",
    "greedy_decode",
    "beam_search",
    # torch.nn interop
    "from_torch",
    "to_torch",
    "load_from_torch",
    "load_into_torch",
    # text, tokens, tasks and training
    "corpus",
    "CharTokenizer",
    "WordTokenizer",
    "pretokenize",
    "train_bpe",
    "BPETokenizer",
    "load_bpe",
    "pad_sequences",
    "copy_task",
    "reverse_task",
    "number_to_words",
    "numbers_to_words_task",
    "is_balanced",
    "brackets_task",
    "char_corpus",
    "split_data",
    "encode_pairs",
    "encode_labelled",
    "iterate_batches",
    "lm_batches",
    "repeated_tokens",
    "repeated_batches",
    "History",
    "fit",
    "warmup_cosine",
    "noam_rate",
    "label_smoothed_cross_entropy",
    "smoothed_targets",
    "smoothing_floor",
    "seq2seq_loss",
    "lm_loss",
    "classification_loss",
    "exact_match",
    "classification_accuracy",
    "lm_eval_loss",
    "bigram_loss",
    "repeat_losses",
    "load_checkpoint",
    "save_checkpoint",
    "recipes",
    # looking inside a model: capture and intervene with hooks
    "inside",
    # mixture of experts: the routed feed-forward block and its load-balancing loss
    "moe",
    # low-rank adapters on a frozen model
    "lora",
    # int8 weights, per channel
    "quantization",
    # utilities, figures and course material
    "set_seed",
    "get_device",
    "count_parameters",
    "median_seconds",
    "saved_tensor_bytes",
    *_VIZ,
    "exercises",
    "NotYetDone",
]
