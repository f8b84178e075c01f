"""Mutation suite for the checkers of chapter 17 (from a language model to an assistant): classic mistakes are named,
other valid routes pass."""

from __future__ import annotations

import math
import statistics
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from _mutation import raising, rejected_as

import transformer_lib as tl
from transformer_lib.exercises import CORRECT
from transformer_lib.exercises import ch17_assistant as ex17

chat, alignment = tl.chat, tl.alignment


# Straightforward solutions, as the notebook's would be (notebooks/17_assistant.ipynb).
def my_answer_mask(tok, prompt, answer):
    ids = [tok.user_id, *tok.encode(prompt), tok.assistant_id]  # the prompt, as the model will be given it
    reply = [*tok.encode(answer), tok.end_id]  # what the model learns to write
    return ids + reply, [0] * len(ids) + [1] * len(reply)


def my_dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta):
    chosen = policy_chosen - reference_chosen  # (B,): how much more the policy likes the chosen answer
    rejected = policy_rejected - reference_rejected  # (B,)
    return -F.logsigmoid(beta * (chosen - rejected)).mean()


def my_group_advantages(rewards):
    mean = rewards.mean(dim=1, keepdim=True)  # (P, 1): each prompt's group
    std = rewards.std(dim=1, keepdim=True)  # (P, 1), unbiased
    return (rewards - mean) / (std + 1e-4)


def kl_drift(policy, reference, tok, prompts, seed):
    generator = torch.Generator().manual_seed(seed)
    written = chat.sample_answers(policy, tok, prompts, temperature=1.0, rng=generator)  # the policy's own answers
    encoded = [tok.encode_chat(p)[0] for p in prompts]
    ids = tl.tasks.pad_sequences([e + a for e, a in zip(encoded, written)], tok.base.pad_id)  # (N, T)
    mask = tl.tasks.pad_sequences([[0] * len(e) + [1] * len(a) for e, a in zip(encoded, written)], 0)  # (N, T)
    with torch.no_grad():
        policy_logp = alignment.sequence_logprobs(policy, ids, mask)  # (N, T - 1), zero outside the answers
        reference_logp = alignment.sequence_logprobs(reference, ids, mask)
    return (policy_logp - reference_logp).sum(dim=1).mean().item()


SOLUTIONS = [
    (my_answer_mask, ex17.check_answer_mask),
    (my_dpo_loss, ex17.check_dpo_loss),
    (my_group_advantages, ex17.check_group_advantages),
    (kl_drift, ex17.check_kl_drift),
]
CHECKS = [check for _, check in SOLUTIONS]
# check_kl_drift samples and scores answers of five model pairs (about 2 s): make test runs it, make check does not
SLOW = [pytest.param(*pair, marks=pytest.mark.slow) if pair[1] is ex17.check_kl_drift else pair for pair in SOLUTIONS]


@pytest.mark.parametrize(("solution", "check"), SLOW, ids=lambda x: getattr(x, "__name__", ""))
def test_a_straightforward_solution_passes(solution, check):
    assert check(solution) == CORRECT


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_a_stub_is_not_answered_and_a_raising_answer_is_named(check):
    rejected_as(check(lambda *args: None), "todo")
    verdict = check(raising(IndexError("index 7 is out of bounds")))
    rejected_as(verdict, "raised")
    assert "index 7" in verdict


@pytest.mark.parametrize(
    ("check", "wrong", "named"),
    [
        (ex17.check_answer_mask, lambda tok, p, a: [tok.encode(p)[20]], "prompt 'reverse night', answer 'thgin'"),
        (ex17.check_dpo_loss, lambda pc, pr, rc, rr, beta: pc[7] / 0 if beta > 1 else pc[11], "8 pairs with beta=0.1"),
        (
            ex17.check_group_advantages,
            lambda r: my_group_advantages(r) if len(r) == 4 else r[9],  # right on the first input
            "rewards of shape (3, 5)",
        ),
        (ex17.check_kl_drift, lambda p, r, tok, prompts, seed: prompts[20], "the SFT model against a copy of itself"),
    ],
)
def test_a_failing_input_is_named(check, wrong, named):
    verdict = check(wrong)
    rejected_as(verdict, "raised")
    assert named in verdict


@pytest.mark.parametrize(("solution", "check"), SLOW, ids=lambda x: getattr(x, "__name__", ""))
def test_a_check_leaves_torchs_random_state_and_threads_as_they_were(solution, check):
    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    assert check(solution) == CORRECT
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.get_num_threads() == threads


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_the_checks_take_a_few_seconds():
    ex17.check_kl_drift(kl_drift)  # the cached models, tokenizer and words are built once
    for solution, check in SOLUTIONS:
        start = time.perf_counter()
        check(solution)
        assert time.perf_counter() - start < 15  # a generous net against hangs; under 2 s on one laptop core


# ---- the chat template and its answer mask -------------------------------------------------------


def _tensors(tok, prompt, answer):
    """1-D tensors, the mask as bools."""
    ids, mask = my_answer_mask(tok, prompt, answer)
    return torch.tensor(ids), torch.tensor(mask, dtype=torch.bool)


def _by_characters(tok, prompt, answer):
    """The base vocabulary's table read character by character; the mask from the lengths, as floats."""
    prompt_ids = [tok.base.stoi[c] for c in prompt]
    answer_ids = [tok.base.stoi[c] for c in answer]
    ids = [tok.user_id] + prompt_ids + [tok.assistant_id] + answer_ids + [tok.end_id]
    start = len(prompt_ids) + 2  # the first answer position
    return tuple(ids), torch.tensor([float(i >= start) for i in range(len(ids))])


def _numpy(tok, prompt, answer):
    ids, mask = my_answer_mask(tok, prompt, answer)
    return np.array(ids), np.array(mask, dtype=bool).tolist()


def _from_positions(tok, prompt, answer):
    """ids first; the mask from the position of <|assistant|>."""
    ids = [tok.user_id] + tok.base.encode(prompt) + [tok.assistant_id] + tok.base.encode(answer) + [tok.end_id]
    after = ids.index(tok.assistant_id)
    return ids, [int(i > after) for i in range(len(ids))]


@pytest.mark.parametrize("right", [_tensors, _by_characters, _numpy, _from_positions])
def test_answer_mask_other_routes_pass(right):
    assert ex17.check_answer_mask(right) == CORRECT


def _masked(make):
    """The right ids, and the mask make(right mask, number of prompt ids)."""

    def fn(tok, prompt, answer):
        ids, mask = my_answer_mask(tok, prompt, answer)
        return ids, make(mask, len(tok.encode(prompt)))

    return fn


def _no_end(tok, prompt, answer):
    ids = [tok.user_id, *tok.encode(prompt), tok.assistant_id]
    reply = tok.encode(answer)
    return ids + reply, [0] * len(ids) + [1] * len(reply)


def _empty_is_none(tok, prompt, answer):
    """An empty answer taken for no answer: the ids stop at <|assistant|>."""
    if not answer:
        ids = [tok.user_id, *tok.encode(prompt), tok.assistant_id]
        return ids, [0] * len(ids)
    return my_answer_mask(tok, prompt, answer)


def _with_ids(user, assistant, end):
    def fn(tok, prompt, answer):
        specials = {
            tok.user_id: user(tok),
            tok.assistant_id: assistant(tok),
            tok.end_id: end(tok),
        }
        ids, mask = my_answer_mask(tok, prompt, answer)
        return [specials.get(i, i) for i in ids], mask

    return fn


def _as_text(tok, prompt, answer):
    ids = tok.encode("<|user|>" + prompt + "<|assistant|>")
    reply = tok.encode(answer + "<|end|>")
    return ids + reply, [0] * len(ids) + [1] * len(reply)


def _no_user(tok, prompt, answer):
    ids, mask = my_answer_mask(tok, prompt, answer)
    return ids[1:], mask[1:]


def _rewrites_the_tokenizer(tok, prompt, answer):
    tok.user_id, tok.assistant_id, tok.end_id = 84, 85, 86  # the chapter's ids, forced on the caller's tokenizer
    return my_answer_mask(tok, prompt, answer)


def _chat_batch(tok, prompt, answer):
    ids, mask = chat.chat_batch(tok, [prompt], [answer])
    return ids[0].tolist(), mask[0].tolist()


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (_masked(lambda m, n: [1] * len(m)), "prompt-included"),
        (_masked(lambda m, n: [0] + [1] * n + m[n + 1 :]), "prompt-included"),  # the prompt but not the specials
        (_masked(lambda m, n: [1 - x for x in m]), "inverted"),
        (_masked(lambda m, n: m[:-1] + [0]), "end-left-out"),
        (_masked(lambda m, n: m[: n + 1] + [1] + m[n + 2 :]), "assistant-included"),
        (_masked(lambda m, n: m[1:] + [0]), "shifted"),  # lined up with the targets
        (_masked(lambda m, n: [0] + m[:-1]), "shifted"),
        (_masked(lambda m, n: m[:-1]), "lengths"),
        (_masked(lambda m, n: [2 * x for x in m]), "not-binary"),
        (_masked(lambda m, n: [0] * len(m)), "other"),
        (_no_end, "no-end"),
        (_empty_is_none, "empty-answer"),
        (_with_ids(lambda t: 84, lambda t: 85, lambda t: 86), "hard-coded-ids"),  # the chapter's, typed in
        (_with_ids(lambda t: t.user_id, lambda t: t.assistant_id, lambda t: 86), "hard-coded-ids"),
        (_with_ids(lambda t: t.vocab_size, lambda t: t.vocab_size + 1, lambda t: t.vocab_size + 2), "special-ids"),
        (_as_text, "specials-as-text"),
        (_no_user, "template"),
        (lambda tok, p, a: my_answer_mask(tok, a, p), "swapped"),  # prompt and answer swapped
        (lambda tok, p, a: my_answer_mask(tok, p, a[::-1]), "ids"),  # the answer written backwards
        (lambda tok, p, a: my_answer_mask(tok, p, a)[0], "not-a-pair"),
        (lambda tok, p, a: (torch.tensor([my_answer_mask(tok, p, a)[0]]), my_answer_mask(tok, p, a)[1]), "shape"),
        (lambda tok, p, a: ([float(i) for i in my_answer_mask(tok, p, a)[0]], my_answer_mask(tok, p, a)[1]), "dtype"),
        (lambda tok, p, a: my_answer_mask(chat.chat_tokenizer(), "reverse night", "thgin"), "constant"),
        (lambda tok, p, a: tok.encode_chat(p, a), "by-hand"),
        (lambda tok, p, a: chat.ChatTokenizer.encode_chat(tok, p, a), "by-hand"),
        (_chat_batch, "by-hand"),
        (_rewrites_the_tokenizer, "in-place"),
    ],
)
def test_answer_mask_mistakes_are_named(wrong, mistake):
    rejected_as(ex17.check_answer_mask(wrong), mistake)


def test_the_answer_mask_cases_differ_in_their_special_ids_and_one_has_an_empty_answer():
    toks = ex17._tokenizers()
    assert len({(t.user_id, t.assistant_id, t.end_id) for t in toks}) == len(toks)
    assert (toks[-1].user_id, toks[-1].assistant_id, toks[-1].end_id) == ex17._CHAPTER_IDS
    assert any(answer == "" for _, _, answer in ex17._MASK_CASES)
    for which, prompt, answer in ex17._MASK_CASES:  # every character known: no <unk> to get wrong
        assert toks[which].base.unk_id not in toks[which].encode(prompt + answer)


# ---- DPO's loss -----------------------------------------------------------------------------------


def _dpo(argument, reduce=torch.mean):
    """The loss with log-sigmoid's argument argument(pc, pr, rc, rr, beta), reduced over the pairs by reduce."""

    def fn(pc, pr, rc, rr, beta):
        return reduce(-F.logsigmoid(argument(pc, pr, rc, rr, beta)))

    return fn


def _right_argument(pc, pr, rc, rr, beta):
    return beta * ((pc - rc) - (pr - rr))


def _softplus(pc, pr, rc, rr, beta):
    return F.softplus(-_right_argument(pc, pr, rc, rr, beta)).mean()  # -log sigmoid(x) = softplus(-x)


def _by_cases(pc, pr, rc, rr, beta):
    """A stable log-sigmoid written out: log sigmoid(x) = min(x, 0) - log(1 + exp(-|x|))."""
    x = _right_argument(pc, pr, rc, rr, beta)
    return -(torch.clamp(x, max=0) - torch.log1p(torch.exp(-x.abs()))).mean()


def _logaddexp(pc, pr, rc, rr, beta):
    x = _right_argument(pc, pr, rc, rr, beta)
    return torch.logaddexp(torch.zeros_like(x), -x).mean()


def _in_float64(pc, pr, rc, rr, beta):
    return my_dpo_loss(pc.double(), pr.double(), rc.double(), rr.double(), beta).float()


def _cross_entropy(pc, pr, rc, rr, beta):
    """A binary cross-entropy on logits, every pair labelled "the chosen one wins"."""
    x = _right_argument(pc, pr, rc, rr, beta)
    return F.binary_cross_entropy_with_logits(x, torch.ones_like(x))


@pytest.mark.parametrize("right", [_softplus, _by_cases, _logaddexp, _in_float64, _cross_entropy])
def test_dpo_loss_other_routes_pass(right):
    assert ex17.check_dpo_loss(right) == CORRECT


def _naive(pc, pr, rc, rr, beta):
    return -torch.log(torch.sigmoid(_right_argument(pc, pr, rc, rr, beta))).mean()


def _naive_exp(pc, pr, rc, rr, beta):
    return -torch.log(1 / (1 + torch.exp(-_right_argument(pc, pr, rc, rr, beta)))).mean()


def _naive_eps(pc, pr, rc, rr, beta):
    return -torch.log(torch.sigmoid(_right_argument(pc, pr, rc, rr, beta)) + 1e-10).mean()


def _negates_the_reference(pc, pr, rc, rr, beta):
    rr.neg_()  # the caller's reference log-probabilities flipped, then flipped back into the formula
    return my_dpo_loss(pc, pr, rc, -rr, beta)


def _scales_the_policy(pc, pr, rc, rr, beta):
    pc.mul_(beta)  # the caller's policy log-probabilities changed in place, the gradient kept
    return -F.logsigmoid(pc - beta * rc - beta * (pr - rr)).mean()


def _naive_in_float64(pc, pr, rc, rr, beta):
    """log(sigmoid(x)) in float64: right while sigmoid(x) stays above 0, up to x of about -745."""
    return -torch.log(torch.sigmoid(_right_argument(pc.double(), pr.double(), rc.double(), rr.double(), beta))).mean()


def _switched(pc, pr, rc, rr, beta):
    """-x where log(sigmoid(x)) would underflow: right numbers, but torch.where's other branch sends NaN back."""
    x = _right_argument(pc, pr, rc, rr, beta)
    return torch.where(x < -30, -x, -torch.log(torch.sigmoid(x))).mean()


def _straight_through(pc, pr, rc, rr, beta):
    """The right number, with a gradient that is not the loss's: 1 / B on every log-probability of the policy."""
    return my_dpo_loss(pc, pr, rc, rr, beta).detach() + (pc - pc.detach()).mean() + (pr - pr.detach()).mean()


def _without_grad(*args):
    with torch.no_grad():
        return my_dpo_loss(*args)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda pc, pr, rc, rr, beta: my_dpo_loss(pr, pc, rr, rc, beta), "swapped"),  # chosen and rejected swapped
        (_dpo(lambda pc, pr, rc, rr, beta: beta * ((rc - pc) - (rr - pr))), "swapped"),  # reference minus policy
        (lambda pc, pr, rc, rr, beta: F.softplus(_right_argument(pc, pr, rc, rr, beta)).mean(), "swapped"),
        (lambda pc, pr, rc, rr, beta: F.logsigmoid(_right_argument(pc, pr, rc, rr, beta)).mean(), "sign"),
        (_dpo(lambda pc, pr, rc, rr, beta: (pc - rc) - (pr - rr)), "no-beta"),
        (lambda pc, pr, rc, rr, beta: beta * my_dpo_loss(pc, pr, rc, rr, 1.0), "beta-outside"),
        (_dpo(lambda pc, pr, rc, rr, beta: ((pc - rc) - (pr - rr)) / beta), "beta-divides"),
        (_dpo(lambda pc, pr, rc, rr, beta: beta * (pc - pr)), "no-reference"),
        (_dpo(lambda pc, pr, rc, rr, beta: beta * ((rc - pc) - (pr - rr))), "margin-sign"),
        (_dpo(lambda pc, pr, rc, rr, beta: beta * ((pc - rc) - (rr - pr))), "margin-sign"),
        (_dpo(_right_argument, torch.sum), "sum"),
        (lambda pc, pr, rc, rr, beta: -torch.sigmoid(_right_argument(pc, pr, rc, rr, beta)).mean(), "no-log"),
        (
            lambda pc, pr, rc, rr, beta: -torch.sigmoid(_right_argument(pc, pr, rc, rr, beta)).mean().log(),
            "log-of-mean",
        ),
        (lambda pc, pr, rc, rr, beta: -F.logsigmoid(_right_argument(pc, pr, rc, rr, beta).mean()), "mean-inside"),
        (_naive, "unstable-log-sigmoid"),
        (_naive_exp, "unstable-log-sigmoid"),
        (_naive_eps, "unstable-log-sigmoid"),
        (_dpo(_right_argument, lambda x: x), "not-a-scalar"),  # one loss per pair
        (lambda *args: (my_dpo_loss(*args), 0.0), "not-a-scalar"),  # the loss and something else
        (lambda *args: my_dpo_loss(*args).item(), "detached"),
        (lambda pc, pr, rc, rr, beta: my_dpo_loss(pc.detach(), pr.detach(), rc, rr, beta), "detached"),
        (lambda pc, pr, rc, rr, beta: torch.tensor(0.6931), "constant"),  # log 2, every pair at its start
        (lambda pc, pr, rc, rr, beta: my_dpo_loss(pc[:1], pr[:1], rc[:1], rr[:1], beta), "other"),  # one pair
        (lambda *args: alignment.dpo_loss(*args)[0], "by-hand"),
        (lambda pc, pr, rc, rr, beta: tl.alignment.dpo_loss(pc, pr, rc, rr, beta=beta)[0], "by-hand"),
        (_negates_the_reference, "in-place"),
        (_scales_the_policy, "in-place"),
        (_naive_in_float64, "unstable-log-sigmoid"),  # sigmoid(-900) is 0 in float64 too
        (lambda *args: _naive_in_float64(*args).float(), "unstable-log-sigmoid"),
        (_switched, "unstable-log-sigmoid"),  # the right loss, a NaN gradient on the large margins
        (lambda *args: torch.tensor(my_dpo_loss(*args).item(), requires_grad=True), "no-gradient"),  # a new leaf
        (lambda *args: my_dpo_loss(*args).detach().requires_grad_(), "no-gradient"),
        (lambda *args: torch.tensor(my_dpo_loss(*args).item()), "detached"),  # a float wrapped in a tensor
        (_without_grad, "detached"),
        (lambda pc, pr, rc, rr, beta: my_dpo_loss(pc, pr.detach(), rc, rr, beta), "no-gradient"),  # only the chosen
        (_straight_through, "wrong-gradient"),
    ],
)
def test_dpo_loss_mistakes_are_named(wrong, mistake):
    rejected_as(ex17.check_dpo_loss(wrong), mistake)


def test_the_naive_log_sigmoid_is_right_on_every_case_but_the_large_margins():
    g = torch.Generator().manual_seed(17)
    for B, beta, spread, gap in ex17._DPO_CASES:
        args = ex17._dpo_case(g, B, spread, gap)
        assert math.isclose(_naive(*args, beta).item(), my_dpo_loss(*args, beta).item(), rel_tol=1e-5)
    args = ex17._dpo_extreme(g)
    assert math.isinf(_naive(*args, ex17._DPO_EXTREME[0]).item())
    assert math.isinf(_naive_in_float64(*args, ex17._DPO_EXTREME[0]).item())  # a margin past -745 nats
    assert math.isfinite(my_dpo_loss(*args, ex17._DPO_EXTREME[0]).item())
    assert all(t.max() < 0 for t in args)  # log-probabilities, every one of them


def test_dpo_loss_passes_when_checked_under_no_grad():
    with torch.no_grad():  # the checker turns gradients on for the answer's own run
        assert ex17.check_dpo_loss(my_dpo_loss) == CORRECT


# ---- GRPO's group-relative advantages -----------------------------------------------------------


def _std_mean(rewards):
    std, mean = torch.std_mean(rewards, dim=1, keepdim=True)
    return (rewards - mean) / (std + 1e-4)


def _written_out(rewards):
    G = rewards.shape[1]
    centred = rewards - rewards.sum(1, keepdim=True) / G
    std = (centred.pow(2).sum(1, keepdim=True) / (G - 1)).sqrt()
    return centred / (std + 1e-4)


def _row_by_row(rewards):
    """statistics' mean and stdev (unbiased), one group at a time, in float64."""
    rows = []
    for row in rewards.tolist():
        mean, std = statistics.fmean(row), statistics.stdev(row)
        rows.append([(r - mean) / (std + 1e-4) for r in row])
    return torch.tensor(rows, dtype=torch.float64)


@pytest.mark.parametrize("right", [_std_mean, _written_out, _row_by_row, lambda r: my_group_advantages(r.double())])
def test_group_advantages_other_routes_pass(right):
    assert ex17.check_group_advantages(right) == CORRECT


def _centred_in_place(rewards):
    rewards -= rewards.mean(1, keepdim=True)
    return rewards / (rewards.std(1, keepdim=True) + 1e-4)


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda r: (r - r.mean()) / (r.std() + 1e-4), "whole-batch"),
        (lambda r: (r - r.mean(1, keepdim=True)) / (r.std() + 1e-4), "whole-batch"),
        (lambda r: (r - r.mean(0)) / (r.std(0) + 1e-4), "wrong-axis"),
        (lambda r: (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True, unbiased=False) + 1e-4), "biased-std"),
        (lambda r: (r - r.mean(1, keepdim=True)) / (r.std(1, correction=0, keepdim=True) + 1e-4), "biased-std"),
        (lambda r: r - r.mean(1, keepdim=True), "no-scale"),
        (lambda r: (r - r.mean(1, keepdim=True)) / r.std(1, keepdim=True), "no-eps"),
        (lambda r: (r - r.mean(1, keepdim=True)) / (r.var(1, keepdim=True) + 1e-4).sqrt(), "eps-inside"),
        (lambda r: r / (r.std(1, keepdim=True) + 1e-4), "no-centre"),
        (lambda r: (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-8), "eps-value"),
        (lambda r: my_group_advantages(r).T, "shape"),
        (lambda r: my_group_advantages(r).tolist(), "not-a-tensor"),
        (lambda r: my_group_advantages(r).round().long(), "dtype"),
        (lambda r: torch.zeros_like(r), "other"),
        (lambda r: my_group_advantages(r[:1]).expand_as(r), "other"),  # the first group's, for every group
        (alignment.group_advantages, "by-hand"),
        (lambda r: tl.alignment.group_advantages(r, scale=True), "by-hand"),
        (_centred_in_place, "in-place"),
    ],
)
def test_group_advantages_mistakes_are_named(wrong, mistake):
    rejected_as(ex17.check_group_advantages(wrong), mistake)


def test_a_group_that_all_scored_the_same_gets_zeros_in_every_case():
    g = torch.Generator().manual_seed(18)
    for P, G, kind in ex17._ADVANTAGE_CASES:
        rewards = ex17._rewards(g, P, G, kind)
        assert (rewards[1] == rewards[1, 0]).all() and rewards.std(1).gt(0).sum() >= P - 2
        assert torch.equal(my_group_advantages(rewards)[1], torch.zeros(G))


# ---- how far a policy drifted from its reference -------------------------------------------------


def _drift(*, sample_from="policy", temperature=1.0, seed_of=lambda seed: seed, per_token=None, keep=None, score=None):
    """The experiment with one knob turned per mistake. keep(ids, mask, lengths of the prompts) -> the positions
    (N, T - 1) that count; score(policy log-probs, reference log-probs, both (N, T - 1, V)) -> (N, T - 1)."""

    def fn(policy, reference, tok, prompts, seed):
        sampler = policy if sample_from == "policy" else reference
        s = seed_of(seed)
        generator = torch.Generator().manual_seed(s) if isinstance(s, int) else s
        written = chat.sample_answers(sampler, tok, prompts, temperature=temperature, rng=generator)
        encoded = [tok.encode_chat(p)[0] for p in prompts]
        ids = tl.tasks.pad_sequences([e + a for e, a in zip(encoded, written)], tok.base.pad_id)  # (N, T)
        mask = tl.tasks.pad_sequences([[0] * len(e) + [1] * len(a) for e, a in zip(encoded, written)], 0)
        with torch.no_grad():
            lp_all = F.log_softmax(policy(ids), -1)[:, :-1]  # (N, T - 1, V)
            lr_all = F.log_softmax(reference(ids), -1)[:, :-1]
        lp, lr = (x.gather(-1, ids[:, 1:, None])[..., 0] for x in (lp_all, lr_all))  # (N, T - 1)
        per_position = score(lp_all, lr_all, lp, lr) if score else lp - lr
        counted = (keep(ids, mask, [len(e) for e in encoded]) if keep else mask[:, 1:]).float()
        sums = (per_position * counted).sum(1)  # (N,)
        if per_token == "answer":
            return (sums / counted.sum(1)).mean().item()
        if per_token == "batch":
            return (sums.sum() / counted.sum()).item()
        return sums.mean().item()

    return fn


def _assistant_included(ids, mask, lengths):
    counted = mask[:, 1:].clone()
    for row, n in enumerate(lengths):
        counted[row, n - 2] = 1  # the position that predicts <|assistant|>
    return counted


def _re_encoded(policy, reference, tok, prompts, seed):
    texts = chat.answer(policy, tok, prompts, temperature=1.0, rng=torch.Generator().manual_seed(seed))
    ids, mask = chat.chat_batch(tok, prompts, texts)  # each answer's text encoded again, with an <|end|>
    with torch.no_grad():
        drift = alignment.answer_logprobs(policy(ids), ids, mask) - alignment.answer_logprobs(reference(ids), ids, mask)
    return drift.mean().item()


def _per_prompt(policy, reference, tok, prompts, seed):
    written = chat.sample_answers(policy, tok, prompts, temperature=1.0, rng=torch.Generator().manual_seed(seed))
    encoded = [tok.encode_chat(p)[0] for p in prompts]
    ids = tl.tasks.pad_sequences([e + a for e, a in zip(encoded, written)], tok.base.pad_id)
    mask = tl.tasks.pad_sequences([[0] * len(e) + [1] * len(a) for e, a in zip(encoded, written)], 0)
    with torch.no_grad():
        return (alignment.sequence_logprobs(policy, ids, mask) - alignment.sequence_logprobs(reference, ids, mask)).sum(
            1
        )


def _typed_unless_the_same_model(policy, reference, tok, prompts, seed):
    """0 for a model against a copy of itself, else a number typed from the chapter: constant where it counts."""
    same = all(torch.equal(p, r) for p, r in zip(policy.parameters(), reference.parameters()))
    return 0.0 if same else 0.7


def _typed_by_prompt_count(policy, reference, tok, prompts, seed):
    """A table of numbers typed in, one per number of prompts: two cases of 24 prompts get the same one."""
    return {16: 0.0, 24: 0.7, 20: 33.0, 12: 40.0}.get(len(prompts), 1.0)


def _changes_the_policy(policy, reference, tok, prompts, seed):
    drift = kl_drift(policy, reference, tok, prompts, seed)
    with torch.no_grad():
        policy.head.bias.zero_()  # after measuring: the caller's model changed
    return drift


@pytest.mark.parametrize(
    ("wrong", "mistake"),
    [
        (lambda policy, reference, *rest: kl_drift(reference, policy, *rest), "roles-swapped"),
        (_drift(score=lambda lp_all, lr_all, lp, lr: lr - lp), "sign"),
        (_drift(per_token="answer"), "per-token"),
        (_drift(per_token="batch"), "per-token"),
        (_drift(keep=lambda ids, mask, lengths: torch.ones_like(mask[:, 1:]) * (ids[:, 1:] != 0)), "prompt-included"),
        (_drift(keep=_assistant_included), "assistant-included"),
        (_drift(keep=lambda ids, mask, lengths: mask[:, :-1]), "mask-misaligned"),
        (_drift(sample_from="reference"), "sampled-from-reference"),
        (_drift(temperature=0.0), "greedy"),
        (_drift(score=lambda lp_all, lr_all, lp, lr: torch.exp(lr - lp) - (lr - lp) - 1), "k3"),
        (_drift(score=lambda lp_all, lr_all, lp, lr: (lp_all.exp() * (lp_all - lr_all)).sum(-1)), "vocabulary-kl"),
        (_drift(score=lambda lp_all, lr_all, lp, lr: lp.exp() - lr.exp()), "probabilities"),
        (lambda *args: len(args[3]) * kl_drift(*args), "sum"),
        (_re_encoded, "re-encoded"),
        (lambda *args: 0.0, "constant"),  # the SFT model against itself
        (lambda *args: 1.23, "constant"),  # a number typed from the chapter
        (_typed_unless_the_same_model, "constant"),
        (_typed_by_prompt_count, "constant"),
        (lambda *args: torch.tensor(0.7), "constant"),
        (_drift(seed_of=lambda seed: 0), "seed-ignored"),  # the notebook's seed, fixed
        (_drift(seed_of=lambda seed: torch.Generator()), "seed-ignored"),  # a generator never seeded
        (_drift(seed_of=lambda seed: None), "seed-ignored"),  # torch's global random state
        (_per_prompt, "not-averaged"),
        (lambda *args: str(kl_drift(*args)) + " nats", "not-a-number"),
        (_changes_the_policy, "in-place"),
    ],
)
@pytest.mark.slow
def test_kl_drift_mistakes_are_named(wrong, mistake):
    rejected_as(ex17.check_kl_drift(wrong), mistake)


def _one_prompt_at_a_time(policy, reference, tok, prompts, seed):
    """Each exchange through both models alone, its answer's log-probabilities read by hand."""
    written = chat.sample_answers(policy, tok, prompts, temperature=1.0, rng=torch.Generator().manual_seed(seed))
    total = 0.0
    for prompt, answer in zip(prompts, written):
        start = len(tok.encode_chat(prompt)[0])
        ids = torch.tensor([tok.encode_chat(prompt)[0] + answer])  # (1, T)
        with torch.no_grad():
            logp = F.log_softmax(policy(ids)[0, :-1], -1) - F.log_softmax(reference(ids)[0, :-1], -1)  # (T - 1, V)
        targets = ids[0, start:]  # the answer's ids, predicted at positions start - 1 onwards
        total += logp[start - 1 :].gather(-1, targets[:, None]).sum().item()
    return total / len(prompts)


def _answer_logprobs(policy, reference, tok, prompts, seed):
    """The library's answer_logprobs on a batch of the sampled ids and their answer mask."""
    written = chat.sample_answers(policy, tok, prompts, temperature=1.0, rng=torch.Generator().manual_seed(seed))
    encoded = [tok.encode_chat(p)[0] for p in prompts]
    ids = tl.tasks.pad_sequences([e + a for e, a in zip(encoded, written)], tok.base.pad_id)
    mask = tl.tasks.pad_sequences([[0] * len(e) + [1] * len(a) for e, a in zip(encoded, written)], 0)
    with torch.no_grad():
        drift = alignment.answer_logprobs(policy(ids), ids, mask) - alignment.answer_logprobs(reference(ids), ids, mask)
    return drift.mean()  # a one-element tensor


def _global_seed(policy, reference, tok, prompts, seed):
    """torch.manual_seed(seed) and sampling from torch's global generator: the same draws for one seed."""
    torch.manual_seed(seed)
    written = chat.sample_answers(policy, tok, prompts, temperature=1.0)
    encoded = [tok.encode_chat(p)[0] for p in prompts]
    ids = tl.tasks.pad_sequences([e + a for e, a in zip(encoded, written)], tok.base.pad_id)
    mask = tl.tasks.pad_sequences([[0] * len(e) + [1] * len(a) for e, a in zip(encoded, written)], 0)
    with torch.no_grad():
        drift = alignment.sequence_logprobs(policy, ids, mask) - alignment.sequence_logprobs(reference, ids, mask)
    return float(drift.sum() / len(prompts))


@pytest.mark.parametrize("right", [_one_prompt_at_a_time, _answer_logprobs, _global_seed])
@pytest.mark.slow
def test_kl_drift_other_routes_pass(right):
    assert ex17.check_kl_drift(right) == CORRECT


@pytest.mark.slow
def test_the_drift_cases_span_zero_small_and_large_and_the_base_models_answers_are_cut():
    with ex17.one_thread():  # as the checker runs: a few hundredths of a second, not a minute on a busy machine
        wants = [ex17._wanted(case) for case in ex17._DRIFT_CASES]
        assert wants[0] == 0.0  # a model against itself
        assert 0.2 < wants[1] < 5 and 0.2 < wants[3] < 5  # a jittered copy, both ways
        assert wants[2] > 10 and wants[4] > 10  # the SFT model and the base model it came from
        assert not math.isclose(ex17._wanted(ex17._DRIFT_CASES[1], ex17._OTHER_SEED), wants[1], rel_tol=0.01)
        _, _, base, tok, _ = ex17._assistants()
        written = chat.sample_answers(
            base, tok, ex17._prompts(12, 5), temperature=1.0, rng=torch.Generator().manual_seed(5)
        )
        assert all(len(a) == chat.MAX_ANSWER and tok.end_id not in a for a in written)  # never ends: cut
