"""Holes that cut across chapters: answers that change their inputs in place, that ignore the generator they
are given, or that only work while ids are one digit long. Each gets a hint that names it."""

from __future__ import annotations

import torch
from _mutation import rejected

import transformer_lib as tl
from transformer_lib import exercises as ex


def test_a_norm_that_divides_its_input_in_place_is_named():
    def in_place(x, weight, eps):  # the right values, and the caller's x destroyed
        x /= x.pow(2).mean(-1, keepdim=True).add(eps).sqrt()
        return x * weight

    rejected(ex.check_rms_norm(in_place), "changed its input in place (argument 1, a tensor)")

    def out_of_place(x, weight, eps):
        return x / x.pow(2).mean(-1, keepdim=True).add(eps).sqrt() * weight

    assert ex.check_rms_norm(out_of_place) == ex.CORRECT


def test_a_merge_that_rewrites_the_callers_list_is_named():
    def in_place(ids, pair, new_id):
        out, i = [], 0
        while i < len(ids):
            if i + 1 < len(ids) and (ids[i], ids[i + 1]) == tuple(pair):
                out.append(new_id)
                i += 2
            else:
                out.append(ids[i])
                i += 1
        ids[:] = out  # the caller's list now holds the merged ids
        return ids

    rejected(ex.check_merge(in_place), "changed its input in place (argument 1, a list)")


def test_a_merge_by_string_replacement_fails_on_multi_digit_ids():
    def by_text(ids, pair, new_id):
        text = " ".join(map(str, ids)).replace(f"{pair[0]} {pair[1]}", str(new_id))
        return [int(t) for t in text.split()]

    rejected(ex.check_merge(by_text), "ids=[12, 1, 2, 12, 21, 2, 1, 2]")


def test_a_measurement_that_ignores_the_generator_is_named():
    def global_state(d_model, generator):  # torch's global random state: another number at every call
        tokens = torch.randn(500, d_model) * d_model**0.5
        return (tokens.norm(dim=-1).mean() / tl.sinusoidal_encoding(500, d_model).norm(dim=-1).mean()).item()

    rejected(ex.check_scale_ratio(global_state), "the same seed gave two different numbers")


def test_a_model_whose_weights_the_answer_changes_is_named():
    def zeroes_the_table(ids, table):
        out = torch.nn.functional.one_hot(ids, table.shape[0]).float() @ table
        table.data.mul_(0.5)  # after computing the right answer: the caller's weights halved
        return out

    feedback = ex.check_embed(zeroes_the_table)
    rejected(feedback, "changed its input in place")
