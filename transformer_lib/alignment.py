"""From a language model to an assistant: the three losses of chapter 17, on log-probabilities.

Each function here works on numbers a model already produced, so each can be checked against a
reference implementation (TRL's) on the same inputs:

- `answer_logprobs`: a sequence's log-probability of its answer tokens, under the loss mask;
- `dpo_loss`: direct preference optimisation (Rafailov et al., 2023), the sigmoid form;
- `group_advantages`: GRPO's group-relative advantages (Shao et al., 2024);
- `grpo_loss`: GRPO's clipped-ratio loss with a KL penalty to a frozen reference;
- `pass_at_k`: the unbiased estimate of pass@k from n samples of which c are right (Chen et al., 2021).

And the loops that use them: `train_dpo`, `train_grpo`, and `train_expert_iteration`, the baseline GRPO must
beat (sample, keep the right answers, fine-tune on them), which draws its samples exactly as GRPO does.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .chat import ChatTokenizer, answer, chat_batch, exact_reward, random_instructions, sample_answers, solve
from .tasks import pad_sequences
from .training import History, fit

__all__ = [
    "answer_logprobs",
    "token_logprobs",
    "dpo_loss",
    "group_advantages",
    "grpo_loss",
    "pass_at_k",
    "correct_counts",
    "sequence_logprobs",
    "without_dropout",
    "preference_pairs",
    "train_dpo",
    "train_grpo",
    "train_expert_iteration",
]


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"expected tensors of one shape, got {listed}")


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """logits (B, T, V) of a decoder run on ids (B, T) -> (B, T - 1): log p(ids[:, t + 1] | ids[:, :t + 1])."""
    if logits.dim() != 3 or ids.dim() != 2 or logits.shape[:2] != ids.shape:
        raise ValueError(
            f"expected logits (B, T, V) and ids (B, T) with the same B and T, "
            f"got logits {tuple(logits.shape)} and ids {tuple(ids.shape)}"
        )
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)  # (B, T - 1, V): each position predicts the next
    return logp.gather(-1, ids[:, 1:, None]).squeeze(-1)  # (B, T - 1)


def answer_logprobs(logits: torch.Tensor, ids: torch.Tensor, answer_mask: torch.Tensor) -> torch.Tensor:
    """The log-probability of each sequence's answer: (B,), the sum of token_logprobs where answer_mask is set.

    answer_mask (B, T) marks the tokens that belong to the answer (the template's end token
    included); position 0 can never be one, as nothing predicts it.
    """
    _check_same_shape(ids=ids, answer_mask=answer_mask)
    mask = answer_mask[:, 1:].to(logits.dtype)  # (B, T - 1), aligned with the predicted tokens
    return (token_logprobs(logits, ids) * mask).sum(dim=-1)  # (B,)


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    reference_chosen: torch.Tensor,
    reference_rejected: torch.Tensor,
    beta: float = 0.1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """DPO's loss, the mean over pairs of -log sigmoid(beta * (chosen margin - rejected margin)).

    Each argument is (B,): a sequence's answer log-probability under the policy or the frozen
    reference. A margin is the policy's log-probability minus the reference's. Returns (loss,
    chosen rewards (B,), rejected rewards (B,)), a reward being beta times its margin, detached.
    """
    _check_same_shape(
        policy_chosen=policy_chosen,
        policy_rejected=policy_rejected,
        reference_chosen=reference_chosen,
        reference_rejected=reference_rejected,
    )
    if beta <= 0:
        raise ValueError(f"beta must be positive, got {beta}")
    chosen_margin = policy_chosen - reference_chosen  # (B,)
    rejected_margin = policy_rejected - reference_rejected  # (B,)
    loss = -F.logsigmoid(beta * (chosen_margin - rejected_margin)).mean()
    return loss, beta * chosen_margin.detach(), beta * rejected_margin.detach()


def group_advantages(rewards: torch.Tensor, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """rewards (P, G), G answers sampled for each of P prompts -> advantages (P, G).

    Each reward minus its group's mean, divided by the group's standard deviation (unbiased, plus
    eps) when `scale`. A group whose answers all scored the same gets advantages of zero: it
    teaches nothing.
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"expected rewards (P, G) with G >= 2 answers per prompt, got {tuple(rewards.shape)}")
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # (P, G)
    if not scale:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True) + eps)  # (P, G)


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
    beta: float = 0.04,
) -> torch.Tensor:
    """GRPO's loss on sampled answers: (N, T) per-token log-probabilities -> a scalar.

    logprobs are the policy's now (with gradient), old_logprobs the policy's when it sampled (the
    same numbers on the first update), reference_logprobs the frozen model's; advantages (N,) one
    per answer; mask (N, T) marks the answers' tokens. Per token: minus the smaller of ratio * A and
    clip(ratio, 1 - clip, 1 + clip) * A, plus beta times the KL estimate exp(r - p) - (r - p) - 1
    (r the reference's log-probability, p the policy's). Averaged over each answer's tokens, then
    over answers: the original GRPO's normalisation. This is TRL's GRPO loss with loss_type="grpo",
    use_bias_correction_kl=False and a symmetric clip (tests/unit/test_alignment_trl.py); TRL's
    defaults differ ("dapo" averages over all tokens of the batch, and beta is 0).
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, reference_logprobs=reference_logprobs, mask=mask)
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"expected advantages ({logprobs.shape[0]},), one per answer, got {tuple(advantages.shape)}")
    ratio = torch.exp(logprobs - old_logprobs)  # (N, T)
    a = advantages[:, None]  # (N, 1)
    surrogate = torch.minimum(ratio * a, ratio.clamp(1 - clip, 1 + clip) * a)  # (N, T)
    log_ratio = reference_logprobs - logprobs  # (N, T)
    kl = torch.exp(log_ratio) - log_ratio - 1  # (N, T), >= 0
    per_token = -(surrogate - beta * kl)  # (N, T)
    mask = mask.to(per_token.dtype)
    lengths = mask.sum(dim=1).clamp(min=1)  # (N,)
    return ((per_token * mask).sum(dim=1) / lengths).mean()


def pass_at_k(n: int, c, k: int) -> torch.Tensor:
    """The unbiased estimate of pass@k from n samples per prompt, c of them right: 1 - C(n - c, k) / C(n, k).

    c is one count or a sequence of counts, one per prompt (P,); returns float64 of c's shape. It is the chance
    that k answers drawn without replacement from the n hold at least one right one (Chen et al., 2021, who
    show that it is unbiased for the chance that k fresh samples hold one).
    """
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and n = {n}, got {k}")
    counts = torch.as_tensor(c)
    if counts.is_floating_point() or (counts < 0).any() or (counts > n).any():
        raise ValueError(f"c must hold whole counts between 0 and n = {n}, got {c}")
    none_right = [math.comb(n - int(ci), k) / math.comb(n, k) for ci in counts.flatten().tolist()]
    return 1 - torch.tensor(none_right, dtype=torch.float64).view(counts.shape)


def correct_counts(
    model: nn.Module, tok: ChatTokenizer, prompts: list[str], samples: int, rng: torch.Generator | None = None
) -> torch.Tensor:
    """How many of `samples` answers sampled at temperature 1 to each prompt are exactly right: (P,) int64.

    rng is a generator on the model's device; the prompts' samples are drawn together, each prompt repeated.
    """
    repeated = [p for p in prompts for _ in range(samples)]
    replies = answer(model, tok, repeated, temperature=1.0, rng=rng)
    right = torch.tensor([exact_reward(p, r) for p, r in zip(repeated, replies)])  # (P * samples,)
    return right.view(len(prompts), samples).sum(dim=1).long()  # (P,)


# ---- the loops ---------------------------------------------------------------------------------


def without_dropout(model: nn.Module) -> nn.Module:
    """Switch the model's dropout off, in place, and return it.

    Preference and reward training compare log-probabilities of the same answer under two models
    (or one model at two moments); dropout's random masks would make those differ for no reason.
    TRL's trainers switch dropout off for the same reason.
    """
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
        if hasattr(module, "dropout_p"):  # attention's dropout on its weights
            module.dropout_p = 0.0
    return model


def sequence_logprobs(model: torch.nn.Module, ids: torch.Tensor, answer_mask: torch.Tensor) -> torch.Tensor:
    """The model's per-token log-probabilities of a batch's answers: (B, T - 1), zero outside the answers."""
    logp = token_logprobs(model(ids), ids)  # (B, T - 1)
    return logp * answer_mask[:, 1:].to(logp.dtype)


def preference_pairs(
    model: torch.nn.Module,
    tok: ChatTokenizer,
    prompts: list[str],
    rng: torch.Generator | None = None,
    samples: int = 4,
) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) triples from the model's own sampled answers, judged by the checker.

    Each prompt gets `samples` answers at temperature 1. The right answer (by `solve`) is chosen;
    the first sampled answer that is wrong is rejected. A prompt the model always got right gives
    no pair: there is nothing to prefer.
    """
    pairs = []
    repeated = [p for p in prompts for _ in range(samples)]
    replies = answer(model, tok, repeated, temperature=1.0, rng=rng)
    for i, prompt in enumerate(prompts):
        right = solve(prompt)
        wrong = [r for r in replies[i * samples : (i + 1) * samples] if r != right]
        if wrong:
            pairs.append((prompt, right, wrong[0]))
    return pairs


def _cycle(items: list, batch_size: int, rng: random.Random) -> Iterator[list]:
    """Batches of `items` without replacement, reshuffled at every pass."""
    while True:
        order = items[:]
        rng.shuffle(order)
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield order[start : start + batch_size]


def train_dpo(
    policy: nn.Module,
    reference: nn.Module,
    tok: ChatTokenizer,
    pairs: list[tuple[str, str, str]],
    steps: int,
    beta: float = 0.1,
    batch_size: int = 32,
    lr: float = 1e-4,
    seed: int = 0,
    progress: bool = False,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    eval_every: int = 0,
    nll_weight: float = 0.0,
) -> History:
    """DPO on (prompt, chosen, rejected) triples: `steps` AdamW steps of `batch_size` pairs; the policy learns in place.

    The reference is frozen: its log-probabilities of every chosen and rejected answer are
    computed once, before training. Dropout is switched off in both models. nll_weight > 0 adds
    that many times the chosen answers' cross-entropy per token (DPO + chosen NLL, TRL's rpo_alpha).
    """
    if not pairs:
        raise ValueError("no preference pairs: the model answered every prompt right, so there is nothing to prefer")
    without_dropout(policy)
    without_dropout(reference).eval()
    device = next(policy.parameters()).device
    prompts = [p for p, _, _ in pairs]
    chosen = chat_batch(tok, prompts, [c for _, c, _ in pairs])  # (N, Tc) ids and mask
    rejected = chat_batch(tok, prompts, [r for _, _, r in pairs])  # (N, Tr) ids and mask
    with torch.no_grad():
        ref_chosen = answer_logprobs(reference(chosen[0].to(device)), *[t.to(device) for t in chosen]).cpu()  # (N,)
        ref_rejected = answer_logprobs(reference(rejected[0].to(device)), *[t.to(device) for t in rejected]).cpu()

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        for rows in _cycle(list(range(len(pairs))), min(batch_size, len(pairs)), random.Random(seed)):
            index = torch.tensor(rows)
            yield (*(t[index] for t in chosen), *(t[index] for t in rejected), ref_chosen[index], ref_rejected[index])

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        c_ids, c_mask, r_ids, r_mask, ref_c, ref_r = batch
        policy_c = answer_logprobs(model(c_ids), c_ids, c_mask)  # (B,)
        policy_r = answer_logprobs(model(r_ids), r_ids, r_mask)  # (B,)
        loss = dpo_loss(policy_c, policy_r, ref_c, ref_r, beta)[0]
        if nll_weight:  # the chosen answers' cross-entropy per token, as TRL's rpo_alpha adds it
            loss = loss - nll_weight * policy_c.sum() / c_mask[:, 1:].sum()
        return loss

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fit(
            policy,
            loss_fn,
            batches(),
            steps,
            lr=lr,
            warmup=1,
            weight_decay=0.0,
            progress=progress,
            eval_fn=eval_fn,
            eval_every=eval_every,
            desc=f"DPO, beta {beta}",
        )


def _sampled_groups(
    policy: nn.Module,
    tok: ChatTokenizer,
    words: list[str],
    reward: Callable[[str, str], float],
    prompts_per_step: int,
    group: int,
    seed: int,
    mean_rewards: list[float],
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Endless steps of on-policy samples: (ids (P * G, T), answer mask (P * G, T), rewards (P * G,)).

    Each step draws `prompts_per_step` user lines about `words` (a random.Random(seed)), samples `group` answers to
    each from the policy at temperature 1 (a torch generator seeded with `seed`, on the policy's device) and scores
    them with `reward(prompt, answer)`; the step's mean reward is appended to `mean_rewards`. GRPO and expert
    iteration draw the same samples from the same policy.
    """
    device = next(policy.parameters()).device
    prompt_rng = random.Random(seed)
    sample_rng = torch.Generator(device=device).manual_seed(seed)
    while True:
        prompts = random_instructions(prompts_per_step, words, prompt_rng)
        repeated = [p for p in prompts for _ in range(group)]
        written = sample_answers(policy, tok, repeated, temperature=1.0, rng=sample_rng)
        scores = torch.tensor([reward(p, tok.decode_answer(a)) for p, a in zip(repeated, written)])  # (P * G,)
        mean_rewards.append(scores.mean().item())
        encoded = [tok.encode_chat(p)[0] + a for p, a in zip(repeated, written)]
        ids = pad_sequences(encoded, tok.base.pad_id)  # (P * G, T)
        mask = pad_sequences([[0] * len(tok.encode_chat(p)[0]) + [1] * len(a) for p, a in zip(repeated, written)], 0)
        yield ids, mask, scores


def train_grpo(
    policy: nn.Module,
    reference: nn.Module,
    tok: ChatTokenizer,
    words: list[str],
    reward: Callable[[str, str], float],
    steps: int,
    prompts_per_step: int = 16,
    group: int = 8,
    beta: float = 0.04,
    clip: float = 0.2,
    lr: float = 3e-5,
    warmup: int = 20,
    seed: int = 0,
    progress: bool = False,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    eval_every: int = 0,
) -> tuple[History, list[float]]:
    """GRPO with one update per batch of samples: returns (History, mean reward of each step's samples).

    Each step draws `prompts_per_step` user lines about `words`, samples `group` answers to each
    from the policy at temperature 1, scores them with `reward(prompt, answer)`, and takes one
    AdamW step on `grpo_loss` with group-relative advantages and a KL term (weight beta) to the
    frozen reference, the learning rate warmed up over `warmup` steps, then a cosine decay. With
    one update per sample, the old log-probabilities are the policy's own,
    detached, so the ratio is 1 and clipping never binds; the term is kept so that the loss is
    GRPO's. Dropout is switched off in both models.
    """
    without_dropout(policy)
    without_dropout(reference).eval()
    device = next(policy.parameters()).device
    mean_rewards: list[float] = []
    samples = _sampled_groups(policy, tok, words, reward, prompts_per_step, group, seed, mean_rewards)

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        for ids, mask, scores in samples:
            advantages = group_advantages(scores.view(prompts_per_step, group)).flatten()  # (P * G,)
            with torch.no_grad():
                ref = sequence_logprobs(reference, ids.to(device), mask.to(device)).cpu()  # (P * G, T - 1)
            yield ids, mask, advantages, ref

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        ids, mask, advantages, ref = batch
        logp = sequence_logprobs(model, ids, mask)  # (N, T - 1)
        return grpo_loss(logp, logp.detach(), ref, advantages, mask[:, 1:], clip=clip, beta=beta)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        history = fit(
            policy,
            loss_fn,
            batches(),
            steps,
            lr=lr,
            warmup=warmup,
            weight_decay=0.0,
            progress=progress,
            eval_fn=eval_fn,
            eval_every=eval_every,
            desc="GRPO",
        )
    return history, mean_rewards


def train_expert_iteration(
    policy: nn.Module,
    tok: ChatTokenizer,
    words: list[str],
    reward: Callable[[str, str], float],
    steps: int,
    prompts_per_step: int = 16,
    group: int = 8,
    lr: float = 3e-5,
    warmup: int = 20,
    seed: int = 0,
    progress: bool = False,
) -> tuple[History, list[float]]:
    """Expert iteration, online: sample, keep the answers the reward calls right (reward >= 1), fine-tune on them.

    Each step draws its samples as GRPO does, from the same generators: `prompts_per_step` user lines, `group`
    answers each, at temperature 1, from the policy as it is now (the first step's samples are GRPO's own). It
    takes one AdamW step on the kept answers' cross-entropy per answer token, as supervised fine-tuning does,
    with the learning rate warmed up over `warmup` steps, then a cosine decay. No reference model, no KL term
    and no negative signal: a wrong answer is only left out. Dropout is switched off. A step in which no answer
    is right has a zero loss and a zero gradient (Adam's running averages still move the weights a little).
    Returns (History, mean reward of each step's samples), as train_grpo does.
    """
    without_dropout(policy)
    mean_rewards: list[float] = []
    samples = _sampled_groups(policy, tok, words, reward, prompts_per_step, group, seed, mean_rewards)

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for ids, mask, scores in samples:
            kept = scores >= 1.0  # (P * G,): the right answers
            yield ids, mask * kept[:, None].to(mask.dtype)  # a wrong answer's tokens leave the loss

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        ids, mask = batch
        logp = sequence_logprobs(model, ids, mask)  # (N, T - 1), zero outside the kept answers
        return -logp.sum() / mask[:, 1:].sum().clamp_min(1)  # cross-entropy per kept answer token

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        history = fit(
            policy,
            loss_fn,
            batches(),
            steps,
            lr=lr,
            warmup=warmup,
            weight_decay=0.0,
            progress=progress,
            desc="expert iteration",
        )
    return history, mean_rewards
