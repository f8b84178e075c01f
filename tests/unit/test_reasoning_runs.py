"""Chapter 21's shipped models and runs (tools/reasoning_runs.py), measured again, and one real run of EleutherAI's
lm-evaluation-harness on an exported model, item by item against the book's own numbers."""

from __future__ import annotations

import random

import pytest
import torch

from transformer_lib import arithmetic as ar
from transformer_lib import reasoning as R
from transformer_lib import recipes
from transformer_lib.checkpoints import load_checkpoint


@pytest.fixture(scope="module")
def runs():
    return recipes.load_reasoning_runs()


def _same(a: str, b: str) -> float:
    """The share of positions where two strings of one length agree."""
    assert len(a) == len(b)
    return sum(x == y for x, y in zip(a, b)) / len(a)


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_the_shipped_models_score_what_their_training_recorded():
    for name, style in (
        ("addition_scratchpad", "scratchpad"),
        ("addition_direct", "direct"),
        ("addition_start", "scratchpad"),
    ):
        model, meta = load_checkpoint(name)
        for digits in (3, 4):  # recipes._addition's evaluation: 100 problems of seed 99 (one answer is 0.01)
            again = R.accuracy(model, style, digits, 100, seed=99).mean
            assert again == pytest.approx(meta["evals"][-1][f"{digits} digits"], abs=0.02), (name, digits)


def test_the_run_file_holds_every_run_and_seed(runs):
    settings = runs["settings"]
    assert set(runs["runs"]) == {"start", *recipes.REASONING_RUNS}
    for name, records in runs["runs"].items():
        assert [r["seed"] for r in records] == list(recipes.SEEDS), name
        for record in records:
            if "right" in record:
                assert set(record["right"]) == {f"{d} digits" for d in settings["digits"]}
                assert all(len(v) == settings["problems"] and set(v) <= {"0", "1"} for v in record["right"].values())
            else:
                for d in settings["samples"]["digits"]:
                    drawn = record["samples"][f"{d} digits"]
                    assert len(drawn["sums"]) == len(drawn["steps right"]) == settings["samples"]["problems"]
                    assert all(len(s) == settings["samples"]["samples"] for s in drawn["sums"])
            if name.startswith("grpo"):
                assert len(record["reward by step"]) == len(record["length by step"]) == settings["grpo"]["steps"]
    assert [r["seed"] for r in runs["verifier"]] == list(recipes.SEEDS)
    for record in runs["verifier"]:
        for d in settings["samples"]["digits"]:
            scores = torch.tensor(record["scores"][f"{d} digits"])
            assert scores.shape == (settings["samples"]["problems"], settings["samples"]["samples"])
    harness = runs["lm-eval"]
    assert len(harness["docs"]) == settings["lm-eval"]["problems"]
    assert (
        len(harness["loglikelihood"])
        == len(harness["is_greedy"])
        == len(harness["exact_match"])
        == len(harness["docs"])
    )


@pytest.mark.slow
def test_seed_0_of_the_supervised_runs_is_the_shipped_checkpoint(runs):
    """The runs' seed 0 is the shipped model's recipe: its greedy answers, measured again, are the record's (a
    different CPU's rounding may flip an answer or two)."""
    for name, checkpoint, style in (
        ("scratchpad", "addition_scratchpad", "scratchpad"),
        ("direct", "addition_direct", "direct"),
    ):
        model, _ = load_checkpoint(checkpoint)
        record = runs["runs"][name][0]
        for key, right in recipes.addition_scores(model, style, seed=0).items():
            assert _same(right, record["right"][key]) >= 0.98, (name, key)


@pytest.mark.slow
def test_the_start_models_samples_are_drawn_again(runs):
    model, _ = load_checkpoint("addition_start")
    record = runs["runs"]["start"][1]["samples"]["4 digits"]
    prompts, answers = R.sample_answers(model, "scratchpad", 4, 100, 16, seed=1)
    assert prompts == record["problems"]
    sums = [ar.final_answer(a) for group in answers for a in group]
    recorded = [s for group in record["sums"] for s in group]
    assert sum(a == b for a, b in zip(sums, recorded)) / len(sums) >= 0.97  # a sample near a boundary may flip


@pytest.mark.slow
def test_lm_eval_reads_the_exported_model_as_the_book_does():
    pytest.importorskip("lm_eval")
    import transformer_lib as tl

    model, _ = load_checkpoint("addition_start")  # partly right: both verdicts occur
    model.eval()
    pairs = ar.random_problems(60, (3, 4), random.Random(21))
    out = tl.evaluation.run_lm_eval(
        tl.hf.to_hf(model), tl.hf.to_hf_tokenizer(R.arithmetic_tokenizer()), R.LM_EVAL_TASKS, R.lm_eval_docs(pairs)
    )
    likelihood, greedy = out["samples"]["addition_scratchpad_likelihood"], out["samples"]["addition_greedy_sum"]
    assert [s["doc"]["problem"] for s in likelihood] == [ar.problem(a, b) for a, b in pairs]
    # the book's numbers: each right scratchpad's log-probability, and what greedy decoding writes
    ids, mask = R.encode(R.arithmetic_tokenizer(), pairs, "scratchpad")
    with torch.no_grad():
        logp = model(ids[:, :-1]).log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]  # (N, T - 1)
    ours = (logp * mask[:, 1:]).sum(dim=1)  # (N,)
    theirs = torch.tensor([s["resps"][0][0][0] for s in likelihood], dtype=ours.dtype)
    assert torch.allclose(ours, theirs, atol=1e-3)
    prompts = [ar.problem(a, b) for a, b in pairs]
    written = R.write(model, R.arithmetic_tokenizer(), prompts, "scratchpad", budget=R.LM_EVAL_MAX_NEW)  # lm-eval's
    steps = [ar.steps_right(ar.problem(a, b), w) for (a, b), w in zip(pairs, written)]
    sums = [ar.is_right(ar.problem(a, b), w) for (a, b), w in zip(pairs, written)]
    assert 0 < sum(sums) < len(pairs)
    # lm-eval's is_greedy and exact match against ours: the same verdicts (a near-tie may flip one on another CPU)
    assert sum(bool(s["acc"]) != v for s, v in zip(likelihood, steps)) <= 1
    assert sum(bool(s["exact_match"]) != v for s, v in zip(greedy, sums)) <= 1


@pytest.mark.slow
def test_lm_eval_reads_bits_per_byte_as_the_books_harness_does():
    """lm-eval's rolling log-likelihood with its bits_per_byte metric, on a task of ours over three streams of worked
    additions, one shorter than the model's 128 positions and two longer (4 and 8 windows), against
    tl.evaluation.bits_per_byte with the same prefix token: the same bits per byte, document by document. Its total
    over the documents is lm-eval's summed log-likelihood over the summed bytes."""
    pytest.importorskip("lm_eval")
    import math

    import transformer_lib as tl

    model, _ = load_checkpoint("addition_start")
    model.eval()
    tok = R.arithmetic_tokenizer()
    rng = random.Random(3)
    texts = []
    for n in (3, 12, 25):
        pairs = ar.random_problems(n, (1, 4), rng)
        texts.append("".join(ar.problem(a, b) + ar.scratchpad(a, b) for a, b in pairs))
    assert len(texts[0]) < model.config.max_len < len(texts[1]) < len(texts[2])
    task = {"output_type": "loglikelihood_rolling", "doc_to_text": "", "doc_to_target": "{{text}}",
            "metric_list": [{"metric": "bits_per_byte"}]}  # fmt: skip
    hf_tok = tl.hf.to_hf_tokenizer(tok)
    out = tl.evaluation.run_lm_eval(
        tl.hf.to_hf(model), hf_tok, {"addition_stream": task}, [{"text": t} for t in texts], add_bos_token=False
    )
    records = out["samples"]["addition_stream"]
    for text, record in zip(texts, records):
        loglikelihood, size = record["bits_per_byte"]  # lm-eval's per-document pair: total log-likelihood, bytes
        assert size == len(text.encode("utf-8"))
        ours = tl.evaluation.bits_per_byte(model, tok.encode(text), text, prefix_id=hf_tok.bos_token_id, max_len=128)
        assert -loglikelihood / math.log(2) / size == pytest.approx(ours, rel=1e-5)
    total = sum(-r["bits_per_byte"][0] for r in records) / math.log(2) / sum(len(t) for t in texts)
    assert out["results"]["addition_stream"]["bits_per_byte,none"] == pytest.approx(total, rel=1e-9)
