"""From a language model to an assistant: the three losses of chapter 17, on log-probabilities.

Each function here works on numbers a model already produced, so each can be checked against a
reference implementation (TRL's) on the same inputs:

- `answer_logprobs`: a sequence's log-probability of its answer tokens, under the loss mask;
- `dpo_loss`: direct preference optimisation (Rafailov et al., 2023), the sigmoid form;
- `group_advantages`: GRPO's group-relative advantages (Shao et al., 2024);
- `grpo_loss`: GRPO's clipped-ratio loss with a KL penalty to a frozen reference;
- `pass_at_k`: the unbiased estimate of pass@k from n samples of which c are right (Chen et al., 2021);
- `bradley_terry_loss`: a reward model's loss on preference pairs (Bradley and Terry, 1952; Ouyang et al., 2022);
- `clipped_share`: the share of answer tokens whose ratio the clip holds back, as TRL logs it;
- `generalized_advantages` and `ppo_losses`: PPO's per-token advantages from a value model, and its clipped
  policy and value losses (Schulman et al., 2016 and 2017).

A learned reward: `RewardModel`, a language model's body with a scalar head, trained on preference pairs by
`train_reward_model` and scored by `preference_accuracy` (against `likelihood_accuracy`, the policy's own
judgement); `LearnedReward` hands its scores to the loops as a reward function.

And the loops that use them: `train_dpo`, `train_grpo`, `train_ppo` (a value model instead of GRPO's groups),
and `train_expert_iteration`, the baseline GRPO must beat (sample, keep the right answers, fine-tune on them);
the last two draw their samples exactly as GRPO does.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .chat import ChatTokenizer, answer, chat_batch, exact_reward, random_instructions, sample_answers, solve
from .masks import causal_mask
from .tasks import pad_sequences
from .training import History, fit

__all__ = [
    "answer_logprobs",
    "token_logprobs",
    "dpo_loss",
    "group_advantages",
    "grpo_loss",
    "pass_at_k",
    "bradley_terry_loss",
    "clipped_share",
    "generalized_advantages",
    "ppo_losses",
    "correct_counts",
    "sequence_logprobs",
    "without_dropout",
    "preference_pairs",
    "train_dpo",
    "train_grpo",
    "train_grpo_from_samples",
    "train_expert_iteration",
    "train_ppo",
    "RewardModel",
    "LearnedReward",
    "train_reward_model",
    "preference_accuracy",
    "likelihood_accuracy",
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


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """A reward model's loss on preference pairs: the mean of -log sigmoid(r_chosen - r_rejected).

    chosen and rejected are (B,) rewards of the preferred and the other answer of each pair. Under the
    Bradley-Terry model, sigmoid(r_chosen - r_rejected) is the chance that a judge prefers the first, so this is
    the pairs' negative log-likelihood. TRL's RewardTrainer computes the same loss (without its margin and
    centring options).
    """
    _check_same_shape(chosen=chosen, rejected=rejected)
    if chosen.dim() != 1:
        raise ValueError(f"expected one reward per pair, (B,), got {tuple(chosen.shape)}")
    return -F.logsigmoid(chosen - rejected).mean()


def clipped_share(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, clip: float = 0.2
) -> torch.Tensor:
    """The share of answer tokens where grpo_loss's clip binds: a scalar tensor, 0 to 1.

    The clip binds where the ratio exp(logprobs - old_logprobs) has left [1 - clip, 1 + clip] in the direction
    the advantage pushes it (above with A > 0, below with A < 0): there the clipped term is the smaller one and
    the token's gradient is zero. Shapes as grpo_loss's, or advantages (N, T) one per token, as PPO's are; TRL
    logs the same number as "clip_ratio/region_mean".
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, mask=mask)
    if advantages.shape not in (logprobs.shape[:1], logprobs.shape):
        raise ValueError(
            f"expected advantages ({logprobs.shape[0]},), one per answer, or {tuple(logprobs.shape)}, one per token; "
            f"got {tuple(advantages.shape)}"
        )
    ratio = torch.exp(logprobs.detach() - old_logprobs)  # (N, T)
    a = advantages[:, None] if advantages.dim() == 1 else advantages  # (N, 1) or (N, T)
    binds = ((ratio > 1 + clip) & (a > 0)) | ((ratio < 1 - clip) & (a < 0))  # (N, T)
    mask = mask.to(ratio.dtype)
    return (binds.to(ratio.dtype) * mask).sum() / mask.sum().clamp(min=1)


def generalized_advantages(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al., 2016) over answers: (advantages (N, T), returns (N, T)).

    rewards, values and mask are (N, T), one entry per answer token (mask 1), the state before the token is
    written. With delta_t = r_t + gamma V_{t+1} - V_t, the advantage is A_t = sum_l (gamma lam)^l delta_{t+l}, and
    the return A_t + V_t is what the value model learns. The answer ends at its last masked token: the value
    after it is 0. Both outputs are 0 outside the mask. lam = 1 gives the reward-to-go minus V_t; lam = 0 gives
    delta_t alone.
    """
    _check_same_shape(rewards=rewards, values=values, mask=mask)
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"gamma and lam must lie in [0, 1], got gamma {gamma} and lam {lam}")
    mask = mask.to(rewards.dtype)
    advantages = torch.zeros_like(rewards)  # (N, T)
    next_value = torch.zeros_like(rewards[:, 0])  # (N,): V after the last token is 0
    next_advantage = torch.zeros_like(rewards[:, 0])  # (N,)
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # (N,)
        advantages[:, t] = (delta + gamma * lam * next_advantage) * mask[:, t]
        next_value = values[:, t] * mask[:, t]  # outside the answer (padding after it) the value is 0
        next_advantage = advantages[:, t]
    return advantages, (advantages + values) * mask


def ppo_losses(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
    value_clip: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's two losses on answer tokens, each a mean over the mask's tokens: (policy loss, value loss).

    Every argument is (N, T): the policy's log-probabilities now (with gradient) and when it sampled, the
    per-token advantages (generalized_advantages, whitened), the value model's values now (with gradient) and
    when it sampled, the returns. The policy loss is minus the smaller of ratio * A and clip(ratio) * A (as
    grpo_loss's, without its KL term: PPO puts the KL in the reward). The value loss is half the larger of
    (V - R)^2 and (V_clipped - R)^2, V_clipped being V held within value_clip of the old value, as in
    OpenAI's and TRL's implementations for language models.
    """
    _check_same_shape(logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages, values=values,
                      old_values=old_values, returns=returns, mask=mask)  # fmt: skip
    mask = mask.to(logprobs.dtype)
    tokens = mask.sum().clamp(min=1)
    ratio = torch.exp(logprobs - old_logprobs)  # (N, T)
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)  # (N, T)
    clipped_values = old_values + (values - old_values).clamp(-value_clip, value_clip)  # (N, T)
    value_error = torch.maximum((values - returns) ** 2, (clipped_values - returns) ** 2)  # (N, T)
    return -(surrogate * mask).sum() / tokens, 0.5 * (value_error * mask).sum() / tokens


def _whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """x (N, T) shifted and scaled to mean 0 and standard deviation 1 over the masked entries; 0 elsewhere."""
    mask = mask.to(x.dtype)
    mean = (x * mask).sum() / mask.sum()
    var = (((x - mean) * mask) ** 2).sum() / mask.sum()
    return (x - mean) * torch.rsqrt(var + eps) * mask


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
        replies = [tok.decode_answer(a) for a in written]
        if isinstance(reward, LearnedReward):  # a model scores the whole batch at once
            scores = reward.score(repeated, replies)  # (P * G,)
        else:
            scores = torch.tensor([reward(p, r) for p, r in zip(repeated, replies)])  # (P * G,)
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
    updates: int = 1,
    trace: list[dict[str, float]] | None = None,
) -> tuple[History, list[float]]:
    """GRPO: returns (History, mean reward of each step's samples).

    Each step draws `prompts_per_step` user lines about `words`, samples `group` answers to each
    from the policy at temperature 1, scores them with `reward(prompt, answer)` (a LearnedReward scores
    them in one batch), and takes `updates` AdamW steps on `grpo_loss` with group-relative advantages and a
    KL term (weight beta) to the frozen reference, the learning rate warmed up over `warmup` sampling steps,
    then a cosine decay. The old log-probabilities are the policy's when it sampled. With one update per
    batch they are the policy's own, detached, so the ratio is 1 and the clip never binds; with more, the
    policy moves away from the one that sampled, and the clip holds the ratio in [1 - clip, 1 + clip].
    Dropout is switched off in both models.

    With a `trace` list, each sampling step appends {"kl": the mean over its answers of the summed
    log-ratio log pi - log pi_ref on the answer tokens (an unbiased estimate of KL(pi || pi_ref) per answer,
    as the samples come from pi), "clipped share": clipped_share averaged over the step's updates}.
    """
    mean_rewards: list[float] = []
    samples = _sampled_groups(policy, tok, words, reward, prompts_per_step, group, seed, mean_rewards)
    history = train_grpo_from_samples(
        policy, reference, samples, steps, prompts_per_step, group, beta=beta, clip=clip, lr=lr, warmup=warmup,
        seed=seed, progress=progress, eval_fn=eval_fn, eval_every=eval_every, updates=updates, trace=trace,
    )  # fmt: skip
    return history, mean_rewards


def train_grpo_from_samples(
    policy: nn.Module,
    reference: nn.Module,
    samples: Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    steps: int,
    prompts_per_step: int,
    group: int,
    beta: float = 0.04,
    clip: float = 0.2,
    lr: float = 3e-5,
    warmup: int = 20,
    seed: int = 0,
    progress: bool = False,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    eval_every: int = 0,
    updates: int = 1,
    trace: list[dict[str, float]] | None = None,
) -> History:
    """GRPO's updates on samples someone else draws: the loop of `train_grpo`, for any task with a reward.

    `samples` yields, once per sampling step, (ids (P * G, T), answer mask (P * G, T), rewards (P * G,)): `group`
    answers to each of `prompts_per_step` prompts, a prompt's answers next to each other, drawn from the policy as it
    is when the step begins (a generator, so that each step samples after the last update). `train_grpo` says the
    rest: the advantages, the clip, the KL term, `updates`, the learning rate and `trace`.
    """
    if updates < 1:
        raise ValueError(f"updates must be at least 1, got {updates}")
    without_dropout(policy)
    without_dropout(reference).eval()
    device = next(policy.parameters()).device

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        for ids, mask, scores in samples:
            advantages = group_advantages(scores.view(prompts_per_step, group)).flatten()  # (P * G,)
            with torch.no_grad():
                ref = sequence_logprobs(reference, ids.to(device), mask.to(device)).cpu()  # (P * G, T - 1)
                # (P * G, T - 1); with one update the policy's own log-probabilities serve (empty: not needed)
                old = torch.empty(0)
                if updates > 1:
                    old = sequence_logprobs(policy, ids.to(device), mask.to(device)).cpu()
            for update in range(updates):
                yield ids, mask, advantages, ref, old, torch.tensor(update)

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        ids, mask, advantages, ref, old, update = batch
        logp = sequence_logprobs(model, ids, mask)  # (N, T - 1)
        old = logp.detach() if old.numel() == 0 else old
        if trace is not None:
            if update.item() == 0:
                trace.append({"kl": (logp.detach() - ref).sum(dim=1).mean().item(), "clipped share": 0.0})
            share = clipped_share(logp, old, advantages, mask[:, 1:], clip).item()
            trace[-1]["clipped share"] += share / updates
        return grpo_loss(logp, old, ref, advantages, mask[:, 1:], clip=clip, beta=beta)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fit(
            policy,
            loss_fn,
            batches(),
            steps * updates,
            lr=lr,
            warmup=warmup * updates,
            weight_decay=0.0,
            progress=progress,
            eval_fn=eval_fn,
            eval_every=eval_every,
            desc="GRPO",
        )


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


def train_ppo(
    policy: nn.Module,
    critic: RewardModel,
    reference: nn.Module,
    tok: ChatTokenizer,
    words: list[str],
    reward: Callable[[str, str], float],
    steps: int,
    prompts_per_step: int = 16,
    group: int = 8,
    beta: float = 0.04,
    clip: float = 0.2,
    lr: float = 1e-4,
    warmup: int = 20,
    updates: int = 4,
    gamma: float = 1.0,
    lam: float = 0.95,
    value_weight: float = 0.1,
    seed: int = 0,
    progress: bool = False,
    trace: list[dict[str, float]] | None = None,
) -> tuple[History, list[float]]:
    """PPO as RLHF uses it (Ouyang et al., 2022): returns (History, mean reward of each step's samples).

    Each step draws its samples exactly as GRPO does (the same generators: the first step's samples are GRPO's
    own). Each answer token's reward is -beta times its log-ratio log pi_old - log pi_ref (the KL penalty, in
    the reward), plus the answer's score at its last token. A value model (`critic`, trained beside the policy)
    gives each token's value; generalized_advantages turns rewards and values into per-token advantages, whitened
    over the batch, and returns. Then `updates` AdamW steps on ppo_losses (policy loss + value_weight times value
    loss), one optimiser over both networks, the learning rate warmed up over `warmup` sampling steps. Unlike
    GRPO, a request need not be asked `group` times: the value model is the baseline; the groups are kept so
    that the two methods see the same samples. Dropout is switched off in all three models.

    With a `trace`, each sampling step appends {"kl": the summed log-ratio per answer, averaged (as train_grpo's),
    "clipped share": clipped_share averaged over the updates, "value loss": its mean over the updates}.
    """
    if updates < 1:
        raise ValueError(f"updates must be at least 1, got {updates}")
    for model in (policy, critic, reference):
        without_dropout(model)
    reference.eval()
    device = next(policy.parameters()).device
    mean_rewards: list[float] = []
    samples = _sampled_groups(policy, tok, words, reward, prompts_per_step, group, seed, mean_rewards)
    both = nn.ModuleDict({"policy": policy, "critic": critic})

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        for ids, mask, scores in samples:
            ids, answer = ids.to(device), mask[:, 1:].to(device)  # (N, T), (N, T - 1) aligned with the log-probs
            with torch.no_grad():
                ref = sequence_logprobs(reference, ids, mask.to(device))  # (N, T - 1)
                old = sequence_logprobs(policy, ids, mask.to(device))  # (N, T - 1)
                old_values = critic.values(ids)[:, :-1] * answer  # (N, T - 1): the state before each token
            last = (answer.bool() * torch.arange(answer.shape[1], device=device)).argmax(dim=1)  # (N,)
            rewards = -beta * (old - ref) * answer  # (N, T - 1): the KL penalty, token by token
            rewards[torch.arange(len(last)), last] += scores.to(device, rewards.dtype)  # the score at the end
            advantages, returns = generalized_advantages(rewards, old_values, answer, gamma, lam)  # (N, T - 1) each
            advantages = _whiten(advantages, answer)
            if trace is not None:
                trace.append({"kl": (old - ref).sum(dim=1).mean().item(), "clipped share": 0.0, "value loss": 0.0})
            for _ in range(updates):
                yield ids, mask, old, old_values, advantages, returns

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        ids, mask, old, old_values, advantages, returns = batch
        answer = mask[:, 1:]  # (N, T - 1)
        logp = sequence_logprobs(model["policy"], ids, mask)  # (N, T - 1)
        values = model["critic"].values(ids)[:, :-1] * answer  # (N, T - 1)
        policy_loss, value_loss = ppo_losses(logp, old, advantages, values, old_values, returns, answer, clip)
        if trace is not None:
            trace[-1]["clipped share"] += clipped_share(logp, old, advantages, answer, clip).item() / updates
            trace[-1]["value loss"] += value_loss.item() / updates
        return policy_loss + value_weight * value_loss

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        history = fit(
            both,
            loss_fn,
            batches(),
            steps * updates,
            lr=lr,
            warmup=warmup * updates,
            weight_decay=0.0,
            progress=progress,
            desc="PPO",
        )
    return history, mean_rewards


# ---- a learned reward ------------------------------------------------------------------------------


class RewardModel(nn.Module):
    """A reward model: a decoder-only language model's body with a scalar head, read at an answer's last token.

    forward(ids (B, T), answer_mask (B, T)) -> rewards (B,). The body is `lm` without its head (the language
    model's head stays, unused); the scalar head starts at zero, so every answer starts with reward 0. Reading the
    last answer token (the template's end token) lets the reward see the whole answer through causal attention,
    as InstructGPT's reward model does. PPO's value model is the same network read at every position (`values`).
    """

    def __init__(self, lm: nn.Module):
        super().__init__()
        if not all(hasattr(lm, name) for name in ("embed", "pos", "decoder")):
            raise TypeError(f"expected a DecoderOnlyLM (embed, pos, decoder), got {type(lm).__name__}")
        self.lm = lm
        self.head = nn.Linear(lm.config.d_model, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def hidden_states(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> the body's last hidden states (B, T, d_model), after its final norm."""
        x = self.lm.pos(self.lm.embed(ids))  # (B, T, d_model)
        return self.lm.decoder(x, tgt_mask=causal_mask(ids.shape[1], device=ids.device))  # (B, T, d_model)

    def values(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> the head at every position (B, T): as a value model, the value of each state."""
        return self.head(self.hidden_states(ids)).squeeze(-1)  # (B, T)

    def forward(self, ids: torch.Tensor, answer_mask: torch.Tensor) -> torch.Tensor:
        """ids (B, T), answer_mask (B, T) -> one reward per sequence (B,), read at its last answer token."""
        _check_same_shape(ids=ids, answer_mask=answer_mask)
        if not bool(answer_mask.bool().any(dim=1).all()):
            raise ValueError("every sequence needs at least one answer token (answer_mask all zero in a row)")
        positions = torch.arange(ids.shape[1], device=ids.device)  # (T,)
        last = (answer_mask.bool() * positions).argmax(dim=1)  # (B,): the last position marked
        hidden = self.hidden_states(ids)  # (B, T, d_model)
        return self.head(hidden[torch.arange(ids.shape[0]), last]).squeeze(-1)  # (B,)


def _encode_pairs(tok: ChatTokenizer, pairs: list[tuple[str, str, str]]) -> tuple[torch.Tensor, ...]:
    """(prompt, chosen, rejected) triples -> (chosen ids (B, Tc), chosen mask, rejected ids (B, Tr), rejected mask)."""
    prompts = [p for p, _, _ in pairs]
    chosen = chat_batch(tok, prompts, [c for _, c, _ in pairs])  # (B, Tc) ids and answer mask
    rejected = chat_batch(tok, prompts, [r for _, _, r in pairs])  # (B, Tr) ids and answer mask
    return (*chosen, *rejected)


def _pair_rewards(model: RewardModel, tok: ChatTokenizer, pairs: list[tuple[str, str, str]]):
    """(chosen rewards (B,), rejected rewards (B,)) of (prompt, chosen, rejected) triples."""
    device = next(model.parameters()).device
    c_ids, c_mask, r_ids, r_mask = (t.to(device) for t in _encode_pairs(tok, pairs))
    return model(c_ids, c_mask), model(r_ids, r_mask)


def train_reward_model(
    model: RewardModel,
    tok: ChatTokenizer,
    pairs: list[tuple[str, str, str]],
    steps: int,
    batch_size: int = 32,
    lr: float = 1e-4,
    seed: int = 0,
    progress: bool = False,
) -> History:
    """Train `model` in place on (prompt, chosen, rejected) triples with bradley_terry_loss: `steps` AdamW steps of
    `batch_size` pairs, drawn without replacement and reshuffled at every pass. Dropout is switched off."""
    if not pairs:
        raise ValueError("no preference pairs to train a reward model on")
    without_dropout(model)
    encoded = _encode_pairs(tok, pairs)  # chosen ids and mask (N, Tc), rejected ids and mask (N, Tr)

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        for rows in _cycle(list(range(len(pairs))), min(batch_size, len(pairs)), random.Random(seed)):
            index = torch.tensor(rows)
            yield tuple(t[index] for t in encoded)

    def loss_fn(m: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        c_ids, c_mask, r_ids, r_mask = batch
        return bradley_terry_loss(m(c_ids, c_mask), m(r_ids, r_mask))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fit(model, loss_fn, batches(), steps, lr=lr, warmup=1, weight_decay=0.0, progress=progress,
                   desc="reward model")  # fmt: skip


def preference_accuracy(model: RewardModel, tok: ChatTokenizer, pairs: list[tuple[str, str, str]]) -> float:
    """The share of (prompt, chosen, rejected) triples that `model` ranks right (chosen strictly above rejected)."""
    if not pairs:
        raise ValueError("no preference pairs to measure")
    was_training = model.training
    model.eval()
    with torch.no_grad():
        chosen, rejected = _pair_rewards(model, tok, pairs)
    model.train(was_training)
    return (chosen > rejected).double().mean().item()


def likelihood_accuracy(model: nn.Module, tok: ChatTokenizer, pairs: list[tuple[str, str, str]]) -> float:
    """The share of (prompt, chosen, rejected) triples whose chosen answer a language model finds likelier: the sum of
    its answer tokens' log-probabilities (answer_logprobs), strictly above the rejected answer's. A baseline for a
    reward model's preference_accuracy: how well the policy's own probabilities already judge the pairs."""
    if not pairs:
        raise ValueError("no preference pairs to measure")
    device = next(model.parameters()).device
    c_ids, c_mask, r_ids, r_mask = (t.to(device) for t in _encode_pairs(tok, pairs))
    with torch.no_grad():
        chosen = answer_logprobs(model(c_ids), c_ids, c_mask)  # (B,)
        rejected = answer_logprobs(model(r_ids), r_ids, r_mask)  # (B,)
    return (chosen > rejected).double().mean().item()


class LearnedReward:
    """A reward function from a reward model: reward(prompt, reply) -> float, and score(prompts, replies) -> (B,).

    Each reply is scored as a finished answer (the template's end token after it), in eval mode and without
    gradients, in batches of `batch_size`. `log`, when given, gets one entry per score() call: the mean of
    `also(prompt, reply)` over the batch, so a run can record a second reward (the program's) on the same samples.
    """

    def __init__(
        self,
        model: RewardModel,
        tok: ChatTokenizer,
        batch_size: int = 256,
        also: Callable[[str, str], float] | None = None,
        log: list[float] | None = None,
    ):
        if (also is None) != (log is None):
            raise ValueError("give both `also` and `log`, or neither")
        self.model, self.tok, self.batch_size, self.also, self.log = model, tok, batch_size, also, log

    def score(self, prompts: list[str], replies: list[str]) -> torch.Tensor:
        """The reward model's score of each (prompt, reply): (B,) float32 on the CPU."""
        if len(prompts) != len(replies):
            raise ValueError(f"expected one reply per prompt, got {len(prompts)} prompts and {len(replies)} replies")
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(prompts), self.batch_size):
                ids, mask = chat_batch(self.tok, prompts[start : start + self.batch_size],
                                       replies[start : start + self.batch_size])  # fmt: skip
                out.append(self.model(ids.to(device), mask.to(device)).float().cpu())  # (b,)
        self.model.train(was_training)
        if self.log is not None:
            self.log.append(sum(self.also(p, r) for p, r in zip(prompts, replies)) / max(len(prompts), 1))
        return torch.cat(out) if out else torch.zeros(0)

    def __call__(self, prompt: str, reply: str) -> float:
        return self.score([prompt], [reply])[0].item()
