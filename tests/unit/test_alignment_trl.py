"""Chapter 17's losses equal Hugging Face TRL's on the same numbers: DPO's sigmoid loss, GRPO's group
advantages and GRPO's clipped loss with its KL penalty (transformer_lib.alignment).

Every comparison calls TRL's own code, none copies it:

- DPO's loss: `DPOTrainer._compute_loss`, unbound, on a stand-in for the trainer (the attributes it reads,
  set from a real `DPOConfig`) and a stand-in model that returns given per-token log-probabilities; and a
  whole `DPOTrainer` on a tiny random Llama, against our `answer_logprobs` on the model's logits.
- GRPO's loss: `GRPOTrainer._compute_loss`, unbound, the same way; and a whole `GRPOTrainer` on a tiny
  random Llama that samples answers and then has its weights moved, so the ratios differ from 1.
- The reward model's Bradley-Terry loss and the accuracy and margin TRL logs: `RewardTrainer.compute_loss`,
  unbound, on a stand-in model that returns given rewards.
- GRPO's share of clipped tokens: what `GRPOTrainer._compute_loss` logs as "clip_ratio/region_mean".
- GRPO's advantages: a whole `GRPOTrainer`'s `_generate_and_score_completions`, the method that computes
  them inline, with a reward function that hands back chosen rewards.

The tiny models are built here from a random configuration and a word-level tokenizer: nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import io
import types
import warnings
from collections import defaultdict

import pytest
import torch

from transformer_lib import alignment

pytest.importorskip("trl")
transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")

from trl import DPOConfig, DPOTrainer, GRPOConfig, GRPOTrainer, RewardConfig, RewardTrainer  # noqa: E402

pytestmark = [
    pytest.mark.slow,  # importing TRL alone takes seconds: make test runs these, make check leaves the file out
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

WORDS = [f"w{i}" for i in range(20)]
# TRL's fused LM head computes the logits and log-probabilities in float32 whatever the model's dtype
# (trl/kernels: `torch.mm(hidden_chunk.float(), w.float())`), so the whole-trainer comparisons hold to float32's
# precision; the others run in float64 and hold to 1e-6.
FLOAT32 = 1e-5


def _close(ours: torch.Tensor, theirs: torch.Tensor, tol: float = 1e-6) -> None:
    torch.testing.assert_close(ours, theirs, atol=tol, rtol=tol)


def _quiet():
    """TRL and transformers print progress bars and notices while building a trainer; keep the test output clean."""
    stack = contextlib.ExitStack()
    stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
    stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
    stack.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    return stack


def _tokenizer():
    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", *WORDS])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def _tiny_llama(seed: int):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=2 + len(WORDS),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=1,
    )
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # a sharper next-token distribution than the initialisation's, so the answers differ
        model.lm_head.weight.normal_(0.0, 1.0)
    return model


def _jiggle(model, scale: float, seed: int) -> None:
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn_like(p))


def _grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


# DPO ------------------------------------------------------------------------------------------------------------


def _dpo_stand_in(tmp_path, beta: float):
    """The attributes `DPOTrainer._compute_loss` reads, set as `DPOTrainer.__init__` sets them from a DPOConfig."""
    args = DPOConfig(
        output_dir=str(tmp_path), beta=beta, precompute_ref_log_probs=True, report_to="none", use_cpu=True, bf16=False
    )
    # the defaults that make TRL's loss the plain sigmoid DPO loss of Rafailov et al.
    assert args.loss_type == ["sigmoid"] and args.label_smoothing == 0.0 and args.f_divergence_type == "reverse_kl"
    assert args.ld_alpha is None and not args.use_weighting
    return types.SimpleNamespace(
        args=args,
        model=types.SimpleNamespace(training=False),  # eval mode: TRL then skips its token counter
        accelerator=types.SimpleNamespace(
            device=torch.device("cpu"), gather=lambda t: t, gather_for_metrics=lambda t: t
        ),
        beta=args.beta,
        precompute_ref_logps=args.precompute_ref_log_probs,
        loss_types=args.loss_type,
        loss_weights=args.loss_weights or [1.0] * len(args.loss_type),
        ld_alpha=args.ld_alpha,
        f_divergence_type=args.f_divergence_type,
        f_alpha_divergence_coef=args.f_alpha_divergence_coef,
        label_smoothing=args.label_smoothing,
        use_weighting=args.use_weighting,
        aux_loss_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
    )


@pytest.mark.parametrize(
    ("pairs", "length", "beta", "spread"),
    [(1, 4, 0.1, 1.0), (5, 9, 0.1, 1.0), (8, 6, 0.5, 3.0), (3, 12, 0.01, 1.0), (4, 5, 2.0, 20.0)],
)
def test_dpo_loss_equals_trls_sigmoid_loss(tmp_path, pairs, length, beta, spread):
    g = torch.Generator().manual_seed(pairs * 100 + length)
    rows = 2 * pairs  # TRL's batch: the chosen answers, then the rejected ones
    completion_mask = torch.zeros(rows, length, dtype=torch.long)
    for i in range(rows):  # a prompt of 1 or more tokens, then an answer of 1 or more
        start = int(torch.randint(1, length - 1, (1,), generator=g))
        stop = int(torch.randint(start + 1, length + 1, (1,), generator=g))
        completion_mask[i, start:stop] = 1
    scored = completion_mask[:, 1:].double()  # TRL's per-token fields are zero where the label is -100
    per_token = (-spread * torch.rand(rows, length - 1, generator=g, dtype=torch.float64) * scored).requires_grad_()
    reference = -spread * length * torch.rand(rows, generator=g, dtype=torch.float64) / 2
    inputs = {
        "input_ids": torch.randint(2, 2 + len(WORDS), (rows, length), generator=g),
        "attention_mask": torch.ones(rows, length, dtype=torch.long),
        "completion_mask": completion_mask,
        "ref_chosen_logps": reference[:pairs],
        "ref_rejected_logps": reference[pairs:],
    }

    def model(*, input_ids, labels, fused_lm_head, **kwargs):
        assert fused_lm_head
        torch.testing.assert_close((labels[:, 1:] != -100).double(), scored)  # the positions we scored
        zeros = torch.zeros_like(per_token)
        return types.SimpleNamespace(log_probs=per_token, entropy=zeros, mean_logits=zeros, is_top1=zeros.bool())

    trainer = _dpo_stand_in(tmp_path, beta)
    theirs = DPOTrainer._compute_loss(trainer, model, inputs, return_outputs=False)
    (their_grad,) = torch.autograd.grad(theirs, per_token)

    answer = per_token.sum(dim=1)  # (rows,): each answer's log-probability
    ours, chosen_rewards, rejected_rewards = alignment.dpo_loss(
        answer[:pairs], answer[pairs:], reference[:pairs], reference[pairs:], beta=beta
    )
    (our_grad,) = torch.autograd.grad(ours, per_token)
    _close(ours, theirs)
    _close(our_grad, their_grad)
    logged = trainer._metrics["eval"]  # TRL keeps the batch means of its rewards
    assert logged["rewards/chosen"][0] == pytest.approx(chosen_rewards.mean().item(), abs=1e-9)
    assert logged["rewards/rejected"][0] == pytest.approx(rejected_rewards.mean().item(), abs=1e-9)
    margins = chosen_rewards - rejected_rewards
    assert logged["rewards/margins"][0] == pytest.approx(margins.mean().item(), abs=1e-9)
    assert logged["rewards/accuracies"][0] == pytest.approx((margins > 0).double().mean().item())


def test_a_whole_dpo_trainer_on_a_tiny_model_gives_our_loss_and_gradients(tmp_path):
    policy, reference = _tiny_llama(0), _tiny_llama(1)
    data = datasets.Dataset.from_dict(
        {
            "prompt": ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9"],
            "chosen": [" w10 w11", " w12", " w13 w14 w15"],
            "rejected": [" w16", " w17 w18 w19", " w2 w3"],
        }
    )
    args = DPOConfig(
        output_dir=str(tmp_path), beta=0.2, per_device_train_batch_size=3, report_to="none", use_cpu=True, bf16=False
    )
    with _quiet():
        trainer = DPOTrainer(
            model=policy, ref_model=reference, args=args, train_dataset=data, processing_class=_tokenizer()
        )
        batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.eval()  # no dropout in these models; eval mode skips TRL's token counter
    theirs = trainer.compute_loss(trainer.model, batch)
    theirs.backward()
    their_grads = _grads(trainer.model)
    trainer.model.zero_grad()

    ids, mask, answer = batch["input_ids"], batch["attention_mask"], batch["completion_mask"]
    assert answer.sum(dim=1).min() > 0 and (answer[:, 0] == 0).all()
    logits = trainer.model(input_ids=ids, attention_mask=mask).logits
    chosen, rejected = alignment.answer_logprobs(logits, ids, answer).chunk(2)
    with torch.no_grad():
        ref_logits = reference(input_ids=ids, attention_mask=mask).logits
        ref_chosen, ref_rejected = alignment.answer_logprobs(ref_logits, ids, answer).chunk(2)
    ours, _, _ = alignment.dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.2)
    ours.backward()
    _close(ours, theirs, FLOAT32)
    for mine, other in zip(_grads(trainer.model), their_grads, strict=True):
        _close(mine, other, FLOAT32)
    assert 0.05 < theirs.item() < 5.0 and abs(theirs.item() - 0.6931) > 1e-3  # not the trivial log 2 of equal models


# GRPO's loss ----------------------------------------------------------------------------------------------------


def _grpo_stand_in(tmp_path, beta: float, clip: float, per_token_logps: torch.Tensor, kl_correction: bool = False):
    """The attributes `GRPOTrainer._compute_loss` reads, set as `GRPOTrainer.__init__` sets them.

    TRL's default multiplies the KL term by the ratio (`use_bias_correction_kl=True`, DeepSeek-V3.2); the
    original GRPO, which chapter 17 follows, does not: `kl_correction=False` turns it off.
    """
    args = GRPOConfig(
        output_dir=str(tmp_path),
        beta=beta,
        epsilon=clip,
        loss_type="grpo",
        use_bias_correction_kl=kl_correction,
        report_to="none",
        use_cpu=True,
        bf16=False,
    )
    # the defaults that make TRL's loss the original GRPO loss: per-token ratios, no extra masks or bonuses
    assert args.importance_sampling_level == "token" and args.top_entropy_quantile == 1.0
    assert args.off_policy_mask_threshold is None and args.delta is None
    assert args.entropy_coef == 0.0 and not args.use_adaptive_entropy and not args.use_vllm

    def logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        assert logits_to_keep == per_token_logps.shape[1]
        return per_token_logps, torch.zeros_like(per_token_logps), None

    return types.SimpleNamespace(
        args=args,
        model=types.SimpleNamespace(training=False),  # eval mode: no division by gradient accumulation steps
        accelerator=types.SimpleNamespace(gather=lambda t: t, reduce=lambda t, reduction: t, num_processes=1),
        _get_per_token_logps_and_entropies=logps_and_entropies,
        beta=args.beta,
        epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        loss_type=args.loss_type,
        importance_sampling_level=args.importance_sampling_level,
        off_policy_mask_threshold=args.off_policy_mask_threshold,
        top_entropy_quantile=args.top_entropy_quantile,
        use_vllm=args.use_vllm,
        vllm_importance_sampling_correction=args.vllm_importance_sampling_correction,
        _entropy_bonus_enabled=args.entropy_coef != 0.0 or args.use_adaptive_entropy,
        aux_loss_enabled=False,
        current_gradient_accumulation_steps=1,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )


@pytest.mark.parametrize(
    ("answers", "length", "beta", "clip", "drift"),
    [(4, 6, 0.04, 0.2, 0.3), (8, 10, 0.0, 0.2, 0.5), (6, 3, 0.1, 0.1, 0.05), (3, 16, 0.04, 0.28, 1.0)],
)
def test_grpo_loss_equals_trls_grpo_loss(tmp_path, answers, length, beta, clip, drift):
    g = torch.Generator().manual_seed(answers * 100 + length)
    mask = torch.zeros(answers, length, dtype=torch.long)  # right-padded answers of 1 to `length` tokens ...
    for i, n in enumerate(torch.randint(1, length + 1, (answers,), generator=g).tolist()):
        mask[i, :n] = 1
    mask[-1] = 0  # ... and one answer with no tokens at all (TRL and we both divide by at least 1)
    logprobs = (-3 * torch.rand(answers, length, generator=g, dtype=torch.float64)).requires_grad_()
    old = logprobs.detach() + drift * torch.randn(answers, length, generator=g, dtype=torch.float64)
    reference = logprobs.detach() + 0.5 * torch.randn(answers, length, generator=g, dtype=torch.float64)
    advantages = torch.randn(answers, generator=g, dtype=torch.float64)
    advantages[0] = 0.0  # a group whose rewards were all equal
    inputs = {
        "prompt_ids": torch.randint(2, 10, (answers, 3), generator=g),
        "prompt_mask": torch.ones(answers, 3, dtype=torch.long),
        "completion_ids": torch.randint(2, 10, (answers, length), generator=g),
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old,
        "ref_per_token_logps": reference,
    }
    trainer = _grpo_stand_in(tmp_path, beta, clip, logprobs)
    theirs = GRPOTrainer._compute_loss(trainer, None, inputs)
    (their_grad,) = torch.autograd.grad(theirs, logprobs)

    ours = alignment.grpo_loss(logprobs, old, reference, advantages, mask, clip=clip, beta=beta)
    (our_grad,) = torch.autograd.grad(ours, logprobs)
    _close(ours, theirs)
    _close(our_grad, their_grad)
    clipped = trainer._metrics["eval"]["clip_ratio/region_mean"][0]  # TRL counts the clipped tokens
    ratio, a = (logprobs.detach() - old).exp(), advantages[:, None]
    expected = (((ratio < 1 - clip) & (a < 0)) | ((ratio > 1 + clip) & (a > 0))).double()
    assert clipped == pytest.approx(((expected * mask).sum() / mask.sum()).item())
    assert clipped == pytest.approx(alignment.clipped_share(logprobs, old, advantages, mask, clip).item())
    if drift >= 0.3:
        assert clipped > 0  # the clip mattered in this case


def test_grpo_loss_on_a_first_update_equals_trls(tmp_path):
    """The first update after sampling: the old log-probabilities are the current ones, every ratio is 1."""
    g = torch.Generator().manual_seed(7)
    logprobs = (-2 * torch.rand(6, 5, generator=g, dtype=torch.float64)).requires_grad_()
    reference = logprobs.detach() + 0.3 * torch.randn(6, 5, generator=g, dtype=torch.float64)
    mask = torch.ones(6, 5, dtype=torch.long)
    mask[2, 3:] = 0
    advantages = torch.randn(6, generator=g, dtype=torch.float64)
    inputs = {
        "prompt_ids": torch.randint(2, 10, (6, 2), generator=g),
        "prompt_mask": torch.ones(6, 2, dtype=torch.long),
        "completion_ids": torch.randint(2, 10, (6, 5), generator=g),
        "completion_mask": mask,
        "advantages": advantages,
        "ref_per_token_logps": reference,  # no old_per_token_logps: TRL uses the current ones, detached
    }
    theirs = GRPOTrainer._compute_loss(_grpo_stand_in(tmp_path, 0.04, 0.2, logprobs), None, inputs)
    (their_grad,) = torch.autograd.grad(theirs, logprobs)
    ours = alignment.grpo_loss(logprobs, logprobs.detach(), reference, advantages, mask)
    (our_grad,) = torch.autograd.grad(ours, logprobs)
    _close(ours, theirs)
    _close(our_grad, their_grad)


def test_trls_default_kl_correction_changes_only_the_gradient_on_a_first_update(tmp_path):
    """TRL multiplies the KL term by the ratio unless told not to (`use_bias_correction_kl`, default True).

    On a first update the ratio is 1, so the loss is ours; its gradient, though, gains beta * KL per token
    (the ratio's own derivative), averaged as the loss is. Chapter 17 follows the original GRPO, without it.
    """
    g = torch.Generator().manual_seed(11)
    logprobs = (-2 * torch.rand(5, 7, generator=g, dtype=torch.float64)).requires_grad_()
    reference = logprobs.detach() + 0.4 * torch.randn(5, 7, generator=g, dtype=torch.float64)
    mask = (torch.arange(7) < torch.tensor([7, 3, 5, 1, 6])[:, None]).long()
    advantages = torch.randn(5, generator=g, dtype=torch.float64)
    inputs = {
        "prompt_ids": torch.randint(2, 10, (5, 2), generator=g),
        "prompt_mask": torch.ones(5, 2, dtype=torch.long),
        "completion_ids": torch.randint(2, 10, (5, 7), generator=g),
        "completion_mask": mask,
        "advantages": advantages,
        "ref_per_token_logps": reference,
    }
    beta = 0.04
    trainer = _grpo_stand_in(tmp_path, beta, 0.2, logprobs, kl_correction=True)
    assert GRPOConfig.__dataclass_fields__["use_bias_correction_kl"].default is True
    theirs = GRPOTrainer._compute_loss(trainer, None, inputs)
    (their_grad,) = torch.autograd.grad(theirs, logprobs)
    ours = alignment.grpo_loss(logprobs, logprobs.detach(), reference, advantages, mask, beta=beta)
    (our_grad,) = torch.autograd.grad(ours, logprobs)
    _close(ours, theirs)
    log_ratio = reference - logprobs.detach()
    kl = log_ratio.exp() - log_ratio - 1
    weight = mask / mask.sum(dim=1, keepdim=True) / mask.shape[0]  # d loss / d per-token term
    _close(their_grad - our_grad, beta * kl * weight)


# A whole GRPOTrainer: advantages, and the loss from a model ---------------------------------------------------------


def _grpo_trainer(tmp_path, generations: int, prompts: int, scale_rewards: str = "group", **config):
    """A GRPOTrainer on a tiny random Llama saved to disk (TRL loads its reference model from the same path)."""
    path = tmp_path / "tiny"
    with _quiet():
        _tiny_llama(0).save_pretrained(path)
        _tokenizer().save_pretrained(path)
        args = GRPOConfig(
            output_dir=str(tmp_path / "out"),
            use_cpu=True,
            bf16=False,
            report_to="none",
            save_strategy="no",
            num_generations=generations,
            per_device_train_batch_size=generations * prompts,
            max_completion_length=6,
            scale_rewards=scale_rewards,
            loss_type="grpo",
            seed=0,
            **config,
        )
        data = datasets.Dataset.from_dict({"prompt": ["w1 w2 w3"], "reward": [0.0]})

        def reward(prompts, completions, reward, **kwargs):
            return [float(r) for r in reward]  # the rewards the test chose, carried in a dataset column

        return GRPOTrainer(model=str(path), reward_funcs=reward, args=args, train_dataset=data)


@pytest.mark.parametrize(
    ("prompts", "generations", "scale_rewards"),
    [(1, 2, "group"), (3, 4, "group"), (2, 8, "group"), (3, 4, "none"), (2, 3, "none")],
)
def test_group_advantages_equal_trls(tmp_path, prompts, generations, scale_rewards):
    g = torch.Generator().manual_seed(prompts * 10 + generations)
    rewards = torch.randn(prompts, generations, generator=g).round(decimals=2)  # TRL holds rewards in float32
    rewards[-1] = 1.5 if prompts > 1 else rewards[-1]  # a group whose answers all scored the same
    trainer = _grpo_trainer(tmp_path, generations, prompts, scale_rewards)
    batch = [
        {"prompt": ["w1 w2 w3", "w4 w5 w6", "w7 w8 w9"][i], "reward": r}
        for i, row in enumerate(rewards.tolist())
        for r in row
    ]
    with _quiet(), torch.no_grad():
        theirs = trainer._generate_and_score_completions(batch)["advantages"]
    ours = alignment.group_advantages(rewards, scale=scale_rewards == "group").flatten()
    _close(ours, theirs)
    if prompts > 1:
        assert (theirs[-generations:] == 0).all()


def test_a_whole_grpo_trainer_on_a_tiny_model_gives_our_loss_and_gradients(tmp_path):
    """Sample, move the policy's weights (a second update on the same samples), then compare the losses."""
    trainer = _grpo_trainer(
        tmp_path, generations=4, prompts=2, beta=0.04, num_iterations=2, epsilon=0.2, use_bias_correction_kl=False
    )
    rewards = [0.0, 1.0, 0.5, 2.0, 1.0, 1.0, 0.0, 3.0]
    batch = [{"prompt": "w1 w2 w3" if i < 4 else "w4 w5 w6", "reward": r} for i, r in enumerate(rewards)]
    with _quiet(), torch.no_grad():
        inputs = trainer._generate_and_score_completions(batch)
    assert "old_per_token_logps" in inputs and "ref_per_token_logps" in inputs
    _jiggle(trainer.model, 0.01, seed=3)  # the policy after a first update: ratios differ from 1 now
    trainer.model.eval()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop in a real run
    theirs = trainer.compute_loss(trainer.model, inputs)
    theirs.backward()
    their_grads = _grads(trainer.model)
    trainer.model.zero_grad()

    prompt, answer, mask = inputs["prompt_ids"], inputs["completion_ids"], inputs["completion_mask"]
    ids = torch.cat([prompt, answer], dim=1)
    attention = torch.cat([inputs["prompt_mask"], mask], dim=1)
    n = answer.shape[1]
    logprobs = alignment.token_logprobs(trainer.model(input_ids=ids, attention_mask=attention).logits, ids)[:, -n:]
    with torch.no_grad():
        ref_logits = trainer.ref_model(input_ids=ids, attention_mask=attention).logits
        reference = alignment.token_logprobs(ref_logits, ids)[:, -n:]
    masked = mask.bool()
    _close(reference[masked], inputs["ref_per_token_logps"][masked], FLOAT32)
    ours = alignment.grpo_loss(
        logprobs, inputs["old_per_token_logps"], reference, inputs["advantages"], mask, clip=0.2, beta=0.04
    )
    ours.backward()
    _close(ours, theirs, FLOAT32)
    for mine, other in zip(_grads(trainer.model), their_grads, strict=True):
        _close(mine, other, FLOAT32)
    assert trainer._metrics["eval"]["clip_ratio/region_mean"][-1] > 0  # the ratios moved, some beyond the clip


# the reward model -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pairs", "spread"), [(1, 1.0), (6, 1.0), (16, 5.0), (5, 50.0)])
def test_bradley_terry_loss_equals_trls_reward_trainer(tmp_path, pairs, spread):
    g = torch.Generator().manual_seed(pairs)
    chosen = (spread * torch.randn(pairs, generator=g, dtype=torch.float64)).requires_grad_()
    rejected = (spread * torch.randn(pairs, generator=g, dtype=torch.float64)).requires_grad_()
    args = RewardConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False)
    assert args.center_rewards_coefficient is None  # the default: the plain Bradley-Terry loss
    model = lambda **inputs: types.SimpleNamespace(logits=torch.cat([chosen, rejected])[:, None])  # noqa: E731
    trainer = types.SimpleNamespace(
        args=args,
        model=types.SimpleNamespace(training=False),
        accelerator=types.SimpleNamespace(gather=lambda t: t, gather_for_metrics=lambda t: t),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _total_train_tokens=0,
        _tp_size=1,
    )
    inputs = {"input_ids": torch.zeros(2 * pairs, 3, dtype=torch.long), "attention_mask": torch.ones(2 * pairs, 3)}
    theirs = RewardTrainer.compute_loss(trainer, model, inputs)
    their_grads = torch.autograd.grad(theirs, (chosen, rejected))
    ours = alignment.bradley_terry_loss(chosen, rejected)
    our_grads = torch.autograd.grad(ours, (chosen, rejected))
    _close(ours, theirs)
    for a, b in zip(our_grads, their_grads):
        _close(a, b)
    logged = trainer._metrics["eval"]
    assert logged["accuracy"][0] == pytest.approx((chosen > rejected).double().mean().item())
    assert logged["margin"][0] == pytest.approx((chosen - rejected).mean().item())
