"""Holes that cut across chapters: answers that change their inputs in place, that ignore the generator they
are given, or that only work while ids are one digit long. Each gets a hint that names it."""

from __future__ import annotations

import math

import pytest
import torch
from _mutation import rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex


def test_a_norm_that_divides_its_input_in_place_is_named():
    def in_place(x, weight, eps):  # the right values, and the caller's x destroyed
        x /= x.pow(2).mean(-1, keepdim=True).add(eps).sqrt()
        return x * weight

    rejected_as(ex.check_rms_norm(in_place), "in-place")
    assert "(argument 1, a tensor)" in ex.check_rms_norm(in_place)

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

    rejected_as(ex.check_merge(in_place), "in-place")
    assert "(argument 1, a list)" in ex.check_merge(in_place)


def test_a_merge_by_string_replacement_fails_on_multi_digit_ids():
    def by_text(ids, pair, new_id):
        text = " ".join(map(str, ids)).replace(f"{pair[0]} {pair[1]}", str(new_id))
        return [int(t) for t in text.split()]

    rejected_as(ex.check_merge(by_text), "digits")


def test_a_measurement_that_ignores_the_generator_is_named():
    def global_state(d_model, generator):  # torch's global random state: another number at every call
        tokens = torch.randn(500, d_model) * d_model**0.5
        return (tokens.norm(dim=-1).mean() / tl.sinusoidal_encoding(500, d_model).norm(dim=-1).mean()).item()

    rejected_as(ex.check_scale_ratio(global_state), "seed-ignored")


def test_a_model_whose_weights_the_answer_changes_is_named():
    def zeroes_the_table(ids, table):
        out = torch.nn.functional.one_hot(ids, table.shape[0]).float() @ table
        table.data.mul_(0.5)  # after computing the right answer: the caller's weights halved
        return out

    feedback = ex.check_embed(zeroes_the_table)
    rejected_as(feedback, "in-place")


def _rows(ids, table):
    return torch.nn.functional.one_hot(ids, table.shape[0]).to(table.dtype) @ table


@pytest.mark.parametrize(
    "lookup",
    [
        lambda ids, table: table.gather(0, ids.reshape(-1, 1).expand(-1, table.shape[1])).view(*ids.shape, -1),
        lambda ids, table: table.take(ids[..., None] * table.shape[1] + torch.arange(table.shape[1])),
        lambda ids, table: table.data[ids],
        lambda ids, table: table.detach()[ids],
        lambda ids, table: table.clone()[ids],
        lambda ids, table: table.T.T[ids],
        lambda ids, table: torch.stack([table[i] for i in ids.flatten().tolist()]).view(*ids.shape, -1),
        lambda ids, table: torch.stack([table.unbind(0)[i] for i in ids.flatten().tolist()]).view(*ids.shape, -1),
        lambda ids, table: torch.ops.aten.embedding(table, ids),
        lambda ids, table: torch.nn.functional.embedding(ids, table),
    ],
)
def test_every_spelling_of_a_table_lookup_is_refused(lookup):
    rejected_as(ex.check_embed(lookup), "by-hand")


def test_a_one_hot_built_by_indexing_another_tensor_is_allowed():
    assert ex.check_embed(lambda ids, table: torch.eye(table.shape[0], dtype=table.dtype)[ids] @ table) == ex.CORRECT
    assert ex.check_embed(_rows) == ex.CORRECT


@pytest.mark.parametrize(
    "library",
    [
        lambda x, w, b, eps: torch.ops.aten.native_layer_norm(x, [x.shape[-1]], w, b, eps)[0],
        lambda x, w, b, eps: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps),
        lambda x, w, b, eps: torch.nn.LayerNorm(x.shape[-1], eps=eps)(x) * w + b,
    ],
)
def test_every_spelling_of_the_library_layer_norm_is_refused(library):
    rejected_as(ex.check_layer_norm(library), "by-hand")


@pytest.mark.parametrize(
    "library",
    [
        lambda q, k, v: torch.ops.aten.scaled_dot_product_attention(q, k, v),
        lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v),
    ],
)
def test_every_spelling_of_the_fused_attention_is_refused(library):
    rejected_as(ex.check_attention(library), "by-hand")


@pytest.mark.parametrize(
    "built",
    [
        lambda n: int(tl.causal_mask(n).sum()),
        lambda n: int(torch.ones(n, n).tril().sum()),
        lambda n: int(torch.tril(torch.ones(n, n, dtype=torch.bool)).sum()),
        lambda n: torch.tril_indices(n, n).shape[1],
    ],
)
def test_counting_a_built_mask_is_refused_where_a_formula_is_asked(built):
    rejected_as(ex.check_allowed_count(built), "by-hand")
    assert ex.check_allowed_count(lambda n: n * (n + 1) // 2) == ex.CORRECT


def test_a_made_up_training_curve_is_named():
    def drawn(V, eps, steps):  # starts at log V, decays to the floor: the right shape, no optimisation
        floor = tl.smoothing_floor(V, eps)
        return [floor + (math.log(V) - floor) * math.exp(-t / 20) for t in range(steps)]

    rejected_as(ex.check_floor_experiment(drawn), "formula")


def test_hints_accuse_no_mistake_that_was_not_made():
    """A measurement that reads the entries is never told it used the formula; a near-zero gradient is zero."""

    def reads_entries_wrongly(mask):  # a measurement, off by one entry: not the formula
        return (mask.sum().item() + 1) / mask.numel()

    feedback = ex.check_mask_fraction(reads_entries_wrongly)
    rejected_as(feedback, "other")  # not "formula"

    def formula(mask):
        n = mask.shape[0]
        return (n + 1) / (2 * n)

    rejected_as(ex.check_mask_fraction(formula), "formula")

    def tiny_gradient(d_k, scale, generator):
        return 1e-9

    rejected_as(ex.check_scaling_gradient(tiny_gradient), "no-gradient")


def test_a_wrong_measurement_is_not_told_it_returned_a_number():
    """'must measure, not return a number' only for answers that give the same number on other inputs."""

    def measured_in_nats(logits, targets, temperature):  # a real measurement, in the wrong unit
        return torch.nn.functional.cross_entropy(logits / temperature, targets).item() * 1.01

    rejected_as(ex.check_temperature_loss(measured_in_nats), "other")  # not "not-measured"

    def leak_times_two(model, tokens, position, new_token, causal):
        changed = tokens.clone()
        changed[0, position] = new_token
        mask = tl.causal_mask(tokens.shape[1]) if causal else None
        with torch.no_grad():
            a, b = (model.head(model.decoder(model.pos(model.embed(t)), tgt_mask=mask)) for t in (tokens, changed))
        return 2 * (b[:, :position] - a[:, :position]).abs().max().item() + 1e-3

    rejected_as(ex.check_future_leak(leak_times_two), "moved-under-mask")  # not "not-measured"
