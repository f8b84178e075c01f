"""Checkers for the chapters' exercises, one module per chapter: each runs the learner's answer on inputs of its own.

A checker returns "Correct!" or a hint that names what is wrong (a shape, the mask convention, a
forgotten scaling, a failing input). An answer that is still the stub (returns None) gets
"Not answered yet". In the student edition the stubs raise `NotYetDone` instead, and the checker
lets that friendly error through. Course material, not model code: no model or layer imports it.
"""

from ._common import CORRECT, NotYetDone
from .ch00_template import check_allowed_count, check_cached_rows, check_future_mask, check_mask_fraction
from .ch01_tokenization import check_compression, check_merge, check_pair_counts
from .ch02_token_embedding import check_embed, check_embedding_parameters, check_pad, check_scale_ratio
from .ch03_positional_encoding import check_encoding, check_permutation_gap, check_self_similarity, check_wavelength
from .ch04_attention import check_attention, check_scaling_gradient, check_score_std, check_split
from .ch05_masks import check_masks_needed, check_padding_ablation, check_padding_mask, check_target_mask
from .ch06_feed_forward_and_norm import check_batch_norm_mean, check_depth_growth, check_layer_norm, check_pre_ln
from .ch07_training import check_floor_experiment, check_noam, check_smoothing_floor
from .ch08_encoder import check_first_pool, check_head_ablation, check_mean_pool, check_pre_ln_layer
from .ch09_decoder import check_future_leak, check_kv_cache_bytes, check_sample, check_windows
from .ch10_language_model import check_bits_per_char, check_nucleus_set, check_temperature_loss
from .ch11_transformer import check_greedy, check_loss_positions, check_memory_ablation, check_shift
from .ch12_modern_blocks import check_position_accuracy, check_rms_norm, check_rotary
from .ch13_inside import (
    check_composition_score,
    check_find_induction_heads,
    check_head_contributions,
    check_induction_scores,
)
from .ch14_modern_blocks_two import check_expert_use, check_int8_rows, check_rotary_rows, check_top_k_gates

__all__ = [
    "CORRECT",
    "NotYetDone",
    "check_future_mask",
    "check_allowed_count",
    "check_cached_rows",
    "check_mask_fraction",
    "check_pair_counts",
    "check_merge",
    "check_compression",
    "check_embed",
    "check_embedding_parameters",
    "check_pad",
    "check_scale_ratio",
    "check_encoding",
    "check_self_similarity",
    "check_wavelength",
    "check_permutation_gap",
    "check_attention",
    "check_split",
    "check_score_std",
    "check_scaling_gradient",
    "check_padding_mask",
    "check_target_mask",
    "check_masks_needed",
    "check_padding_ablation",
    "check_layer_norm",
    "check_pre_ln",
    "check_batch_norm_mean",
    "check_depth_growth",
    "check_noam",
    "check_smoothing_floor",
    "check_floor_experiment",
    "check_mean_pool",
    "check_pre_ln_layer",
    "check_first_pool",
    "check_head_ablation",
    "check_sample",
    "check_windows",
    "check_kv_cache_bytes",
    "check_future_leak",
    "check_bits_per_char",
    "check_nucleus_set",
    "check_temperature_loss",
    "check_shift",
    "check_greedy",
    "check_loss_positions",
    "check_memory_ablation",
    "check_rms_norm",
    "check_rotary",
    "check_position_accuracy",
    "check_head_contributions",
    "check_induction_scores",
    "check_find_induction_heads",
    "check_composition_score",
    "check_rotary_rows",
    "check_top_k_gates",
    "check_int8_rows",
    "check_expert_use",
]
