"""Batches whose rows disagree: an answer that works on the first row of a batch only, and copies or reports it for
the whole batch, is rejected by every checker that takes a batch (the class "measure row 0 only")."""

from __future__ import annotations

import importlib

import pytest
import torch
from _mutation import notebook_solution

import transformer_lib as tl
from transformer_lib import exercises as ex


def first_row_only(fn, batch_args):
    """fn run on row 0 of each batched argument, its answer repeated for every row (a scalar answer kept as it is)."""

    def wrong(*args):
        rows = None
        sliced = []
        for i, arg in enumerate(args):
            if i in batch_args and isinstance(arg, torch.Tensor) and arg.dim() >= 1 and arg.shape[0] > 1:
                rows = rows or arg.shape[0]
                arg = arg[:1]
            sliced.append(arg)
        out = fn(*sliced)

        def grow(o):
            if rows and isinstance(o, torch.Tensor) and o.dim() and o.shape[0] == 1:
                return o.expand(rows, *o.shape[1:]).clone()
            return o

        return tuple(grow(o) for o in out) if isinstance(out, tuple) else grow(out)

    return wrong


# (checker, where its solution is: a test module or a notebook, the solution's name, which arguments are batches)
CASES = [
    ("check_embed", "test_ch02_token_embedding", "solution_embed", (0,)),
    ("check_split", "test_ch04_attention", "solution_split", (0,)),
    ("check_attention", "test_ch04_attention", "solution_attention", (0, 1, 2)),
    ("check_padding_mask", "test_ch05_masks", "solution_padding_mask", (0,)),
    ("check_target_mask", "test_ch05_masks", "solution_target_mask", (0,)),
    ("check_padding_ablation", "test_ch05_masks", "solution_padding_ablation", (1,)),
    ("check_permutation_gap", "test_ch03_positional_encoding", "solution_permutation_gap", (1,)),
    ("check_layer_norm", "test_ch06_feed_forward_and_norm", "solution_layer_norm", (0,)),
    ("check_batch_norm_mean", "test_ch06_feed_forward_and_norm", "solution_batch_norm_mean", (0,)),
]
CASES += [
    ("check_mask_tokens", "test_ch15_pretraining", "my_mask_tokens", (0,)),
    ("check_mlm_loss", "test_ch15_pretraining", "my_mlm_loss", (0, 1)),
    ("check_masked_word_accuracy", "test_ch15_pretraining", "masked_word_accuracy", (1,)),
    ("check_patchify", "test_ch16_images_and_sound", "my_patchify", (0,)),
    ("check_shuffled_accuracy", "test_ch16_images_and_sound", "shuffled_accuracy", (1, 2)),
    ("check_dpo_loss", "test_ch17_assistant", "my_dpo_loss", (0, 1, 2, 3)),
    ("check_group_advantages", "test_ch17_assistant", "my_group_advantages", (0,)),
]
NB = [
    ("check_mean_pool", "08_encoder", "solution_mean_pool", (0, 1)),
    ("check_first_pool", "08_encoder", "solution_first_pool", (0,)),
    ("check_sample", "09_decoder", "solution_sample", (0,)),
    ("check_windows", "09_decoder", "solution_windows", (1,)),
    ("check_temperature_loss", "10_language_model", "solution_temperature_loss", (0, 1)),
    ("check_shift", "11_transformer", "solution_shift", (0,)),
    ("check_loss_positions", "11_transformer", "solution_loss_positions", (0,)),
    ("check_rms_norm", "12_modern_blocks", "solution_rms_norm", (0,)),
    ("check_rotary", "12_modern_blocks", "solution_rotary", (0,)),
    ("check_position_accuracy", "12_modern_blocks", "solution_position_accuracy", (0, 1)),
    ("check_head_contributions", "13_inside", "solution_head_contributions", (0,)),
    ("check_induction_scores", "13_inside", "solution_induction_scores", (0, 1)),
    ("check_top_k_gates", "14_modern_blocks_two", "solution_top_k_gates", (0,)),
    ("check_int8_rows", "14_modern_blocks_two", "solution_int8_rows", (0,)),
    ("check_expert_use", "14_modern_blocks_two", "solution_expert_use", (1,)),
]


HEAVY = ("check_embed", "check_shuffled_accuracy")  # about 2 s each: make test runs them, make check does not


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=pytest.mark.slow) if c[0] in HEAVY else c for c in CASES + NB], ids=lambda c: c[0]
)
def test_an_answer_for_the_first_row_only_is_rejected(case):
    name, where, solution, batch_args = case
    if where.startswith("test_"):
        fn = getattr(importlib.import_module(where), solution)
    else:
        fn = notebook_solution(where, solution, inside=tl.inside, moe=tl.moe)
    check = getattr(ex, name)
    assert check(fn) == ex.CORRECT
    verdict = check(first_row_only(fn, batch_args))
    assert verdict != ex.CORRECT
    if name == "check_permutation_gap":
        assert verdict.mistake == "first-row", verdict
