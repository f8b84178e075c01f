"""Mutation suite for the token-embedding chapter's checkers: classic mistakes are named, other routes pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _mutation import raising, rejected_as

import transformer_lib as tl
from transformer_lib import exercises as ex

_raises = raising(TypeError("unsupported operand"))


# The notebook's solutions (notebooks/02_token_embedding.ipynb).
def solution_embed(ids, table):
    return F.one_hot(ids, table.shape[0]).to(table.dtype) @ table


def solution_embedding_parameters(vocab_size, d_model):
    return vocab_size * d_model


def solution_pad(seqs, pad_id):
    longest = max(len(s) for s in seqs)
    return torch.tensor([list(s) + [pad_id] * (longest - len(s)) for s in seqs], dtype=torch.long)


def solution_scale_ratio(d_model, generator):
    tokens = torch.randn(500, d_model, generator=generator) * d_model**0.5
    positions = tl.sinusoidal_encoding(500, d_model)
    return (tokens.norm(dim=-1).mean() / positions.norm(dim=-1).mean()).item()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda ids, t: t[ids], "by-hand"),
        (lambda ids, t: F.embedding(ids, t), "by-hand"),
        (lambda ids, t: t.index_select(0, ids.flatten()).view(*ids.shape, -1), "by-hand"),
        (lambda ids, t: F.one_hot(ids, t.shape[0]).to(t.dtype), "one-hot"),
        (lambda ids, t: F.one_hot(ids).to(t.dtype) @ t, "one-hot-size"),
        (lambda ids, t: F.one_hot(ids, t.shape[0]) @ t, "one-hot-dtype"),
        (lambda ids, t: F.one_hot((ids + 1) % t.shape[0], t.shape[0]).to(t.dtype) @ t, "off-by-one"),
        (lambda ids, t: F.one_hot(ids, t.shape[0]).to(t.dtype) @ t * 2, "other"),
        (lambda ids, t: t @ t.T, "shape"),
        (lambda ids, t: (F.one_hot(ids, t.shape[0]).to(t.dtype) @ t).tolist(), "not-a-tensor"),
        (_raises, "raised"),
    ],
)
def test_embed_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_embed(wrong), mistake)


def test_embed_accepts_other_routes():
    assert ex.check_embed(solution_embed) == ex.CORRECT
    einsum = lambda ids, t: torch.einsum("bsv,vd->bsd", F.one_hot(ids, t.shape[0]).to(t.dtype), t)
    assert ex.check_embed(einsum) == ex.CORRECT
    by_comparison = lambda ids, t: (ids[..., None] == torch.arange(t.shape[0])).to(t.dtype) @ t
    assert ex.check_embed(by_comparison) == ex.CORRECT


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda v, d: v * d + d, "bias"),
        (lambda v, d: v + d, "added"),
        (lambda v, d: 4 * v * d, "bytes"),
        (lambda v, d: 40, "other"),  # right only for (10, 4)
        (lambda v, d: "V x d", "not-a-number"),
        (_raises, "raised"),
    ],
)
def test_embedding_parameters_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_embedding_parameters(wrong), mistake)


def test_embedding_parameters_accepts_other_routes():
    assert ex.check_embedding_parameters(solution_embedding_parameters) == ex.CORRECT
    counted = lambda v, d: tl.count_parameters(torch.nn.Embedding(v, d, _weight=torch.empty(v, d)))
    assert ex.check_embedding_parameters(lambda v, d: float(v * d)) == ex.CORRECT
    assert counted(7, 3) == 21


def _pad(seqs, pad, left=False, extra=0, dtype=torch.long):
    n = max(len(s) for s in seqs) + extra
    rows = [([pad] * (n - len(s)) + list(s)) if left else (list(s) + [pad] * (n - len(s))) for s in seqs]
    return torch.tensor(rows, dtype=dtype)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda s, p: _pad(s, p, left=True), "left"),
        (lambda s, p: _pad(s, 0), "zero-pad"),
        (lambda s, p: _pad(s, p, dtype=torch.float32), "dtype"),
        (lambda s, p: _pad(s, p, extra=1), "too-long"),
        (lambda s, p: [list(x) + [p] * (3 - len(x)) for x in s], "not-a-tensor"),
        (lambda s, p: _pad(s, p)[:, :3], "shape"),  # right only while the longest has 3 ids
        (_raises, "raised"),
    ],
)
def test_pad_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_pad(wrong), mistake)


def test_pad_accepts_other_routes():
    assert ex.check_pad(solution_pad) == ex.CORRECT
    nn_route = lambda s, p: torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(x, dtype=torch.long) for x in s], batch_first=True, padding_value=p
    )
    assert ex.check_pad(nn_route) == ex.CORRECT


def _ratio(d, g, scale=True, inverse=False):
    tokens = torch.randn(500, d, generator=g) * (d**0.5 if scale else 1.0)
    r = (tokens.norm(dim=-1).mean() / tl.sinusoidal_encoding(500, d).norm(dim=-1).mean()).item()
    return 1 / r if inverse else r


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda d, g: (2 * d) ** 0.5, "not-measured"),  # the closed form
        (lambda d, g: 11.3, "other"),  # a constant
        (lambda d, g: _ratio(d, g, scale=False), "unscaled"),
        (lambda d, g: _ratio(d, g, inverse=True), "inverted"),
        (lambda d, g: _ratio(d, torch.Generator().manual_seed(0)), "not-measured"),
        (lambda d, g: _ratio(64, g), "other"),  # right only for d_model = 64
        (lambda d, g: _ratio(d, None), "seed-ignored"),  # torch's global random state
        (_raises, "raised"),
    ],
)
def test_scale_ratio_names_the_mistake(wrong, mistake):
    rejected_as(ex.check_scale_ratio(wrong), mistake)


def test_scale_ratio_accepts_other_routes():
    assert ex.check_scale_ratio(solution_scale_ratio) == ex.CORRECT
    embedding = lambda d, g: (
        (torch.nn.Embedding(500, d, _weight=torch.randn(500, d, generator=g, dtype=torch.float64)).weight * d**0.5)
        .norm(dim=-1)
        .mean()
        .item()
        / (d / 2) ** 0.5
    )  # float64, with the encoding's norm sqrt(d / 2) derived
    assert ex.check_scale_ratio(embedding) == ex.CORRECT
