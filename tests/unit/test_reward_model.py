"""Chapter 17's learned reward (transformer_lib.alignment): the Bradley-Terry loss, the reward model read at an
answer's last token, its training and its use as a reward in GRPO; and GRPO's trace (KL and the clip's share)
with several updates per batch of samples. TRL's versions of the loss and the clip's share are compared in
test_alignment_trl.py."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from transformer_lib import DecoderOnlyLM, alignment, chat, load_checkpoint
from transformer_lib.tokenization import CharTokenizer


@pytest.fixture(scope="module")
def tok():
    return chat.ChatTokenizer(CharTokenizer.from_texts(["abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"]))


def _lm(tok, seed=0):
    torch.manual_seed(seed)
    return DecoderOnlyLM(vocab_size=tok.vocab_size, d_model=32, num_heads=4, num_layers=2, d_ff=64, max_len=40)


def _judge(tok, seed=0):
    """A reward model whose head is random, so that rewards differ from answer to answer."""
    model = alignment.RewardModel(alignment.without_dropout(_lm(tok, seed))).eval()
    torch.nn.init.normal_(model.head.weight, std=1.0)
    return model


def test_the_bradley_terry_loss_is_the_pairs_negative_log_likelihood():
    chosen = torch.tensor([2.0, 0.5, -1.0, 3.0], dtype=torch.float64)
    rejected = torch.tensor([1.0, 0.5, 1.0, -4.0], dtype=torch.float64)
    expected = sum(math.log1p(math.exp(-(c - r))) for c, r in zip(chosen.tolist(), rejected.tolist())) / 4
    assert alignment.bradley_terry_loss(chosen, rejected).item() == pytest.approx(expected, rel=1e-12)
    assert alignment.bradley_terry_loss(torch.zeros(3), torch.zeros(3)).item() == pytest.approx(math.log(2))
    big = torch.tensor([200.0])  # no overflow far from zero: log-sigmoid, not log of a sigmoid
    assert alignment.bradley_terry_loss(-big, big).item() == pytest.approx(400.0)
    with pytest.raises(ValueError, match="one shape"):
        alignment.bradley_terry_loss(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match=r"\(B,\)"):
        alignment.bradley_terry_loss(torch.zeros(3, 1), torch.zeros(3, 1))


def test_the_clipped_share_counts_tokens_pushed_past_the_clip_in_the_advantages_direction():
    old = torch.zeros(3, 4)
    logprobs = torch.log(torch.tensor([[1.5, 1.1, 0.7, 1.0], [1.5, 1.1, 0.7, 1.0], [1.5, 0.5, 1.5, 0.5]]))
    advantages = torch.tensor([1.0, -1.0, 0.0])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]])
    # answer 0 (A > 0): only 1.5 binds; answer 1 (A < 0): only 0.7 binds; answer 2 (A = 0): nothing binds
    share = alignment.clipped_share(logprobs, old, advantages, mask, clip=0.2)
    assert share.item() == pytest.approx(2 / 11)
    assert alignment.clipped_share(logprobs, old, advantages, mask, clip=0.6).item() == 0.0
    with pytest.raises(ValueError, match="one per answer"):
        alignment.clipped_share(logprobs, old, advantages[:2], mask)


def test_the_reward_models_body_is_the_language_models_and_its_head_starts_at_zero(tok):
    lm = alignment.without_dropout(_lm(tok)).eval()
    model = alignment.RewardModel(lm).eval()
    ids, mask = chat.chat_batch(tok, ["reverse abc", "shout cab"])  # (2, T)
    with torch.no_grad():
        torch.testing.assert_close(lm.head(model.hidden_states(ids)), lm(ids))
        assert torch.equal(model(ids, mask), torch.zeros(2))


def test_the_reward_is_read_at_the_last_answer_token(tok):
    model = _judge(tok)
    ids, mask = chat.chat_batch(tok, ["reverse abc"], ["cba"])  # (1, T): the answer, then <|end|>
    padded_ids = torch.cat([ids, torch.full((1, 3), tok.base.pad_id)], dim=1)  # (1, T + 3)
    padded_mask = torch.cat([mask, torch.zeros(1, 3, dtype=mask.dtype)], dim=1)
    other_ids, other_mask = chat.chat_batch(tok, ["reverse abc"], ["cbb"])
    with torch.no_grad():
        reward = model(ids, mask)
        hidden = model.hidden_states(ids)[0, -1]  # (d_model,): the <|end|> token's
        assert reward.item() == pytest.approx((model.head.weight @ hidden + model.head.bias).item(), abs=1e-5)
        assert model(padded_ids, padded_mask).item() == pytest.approx(reward.item(), abs=1e-5)  # padding unseen
        assert model(other_ids, other_mask).item() != pytest.approx(reward.item(), abs=1e-4)  # the answer is read
        both = model(torch.cat([padded_ids[:, : ids.shape[1]], other_ids]), torch.cat([mask, other_mask]))
        torch.testing.assert_close(both, torch.cat([reward, model(other_ids, other_mask)]))


def test_the_reward_model_names_bad_input(tok):
    model = _judge(tok)
    ids, mask = chat.chat_batch(tok, ["reverse abc"])
    with pytest.raises(ValueError, match="at least one answer token"):
        model(ids, torch.zeros_like(mask))
    with pytest.raises(ValueError, match="one shape"):
        model(ids, mask[:, 1:])
    with pytest.raises(TypeError, match="DecoderOnlyLM"):
        alignment.RewardModel(torch.nn.Linear(3, 3))


def test_a_reward_model_learns_pairs_it_can_separate_and_its_accuracy_counts_them(tok):
    words = ["abc", "bad", "cafe", "dig", "ebb", "fig", "gab", "hid"]
    pairs = [(f"reverse {w}", w[::-1], w) for w in words] + [(f"shout {w}", w.upper(), w) for w in words]
    model = alignment.RewardModel(_lm(tok, seed=1))
    assert alignment.preference_accuracy(model, tok, pairs) == 0.0  # all rewards 0: no pair strictly ranked right
    history = alignment.train_reward_model(model, tok, pairs, steps=60, batch_size=8, lr=3e-3, seed=0)
    assert history.losses[-1] < 0.5 * history.losses[0] and history.losses[0] == pytest.approx(math.log(2))
    assert alignment.preference_accuracy(model, tok, pairs) == 1.0
    flipped = [(p, r, c) for p, c, r in pairs]
    assert alignment.preference_accuracy(model, tok, flipped) == 0.0
    with pytest.raises(ValueError, match="no preference pairs"):
        alignment.train_reward_model(model, tok, [], steps=1)


def test_a_learned_reward_scores_as_its_model_and_logs_the_second_reward(tok):
    model = _judge(tok)
    prompts, replies = ["reverse abc", "shout ab", "count abc"], ["cba", "xx", "3"]
    gold = []
    reward = alignment.LearnedReward(model, tok, batch_size=2, also=chat.exact_reward, log=gold)
    scores = reward.score(prompts, replies)
    with torch.no_grad():
        expected = model(*chat.chat_batch(tok, prompts, replies))
    torch.testing.assert_close(scores, expected, atol=1e-5, rtol=1e-5)
    assert gold == [pytest.approx(2 / 3)]  # two of the three are right
    assert reward("shout ab", "xx") == pytest.approx(scores[1].item(), abs=1e-5)
    with pytest.raises(ValueError, match="one reply per prompt"):
        reward.score(prompts, replies[:2])
    with pytest.raises(ValueError, match="both"):
        alignment.LearnedReward(model, tok, also=chat.exact_reward)


@pytest.fixture(scope="module")
def sft_tok():
    return chat.chat_tokenizer()


def _sft():
    sft, _ = load_checkpoint("assistant_sft")
    return alignment.without_dropout(sft)


def _odd_length(prompt, reply):  # a reward that splits the SFT model's answers, so that advantages are not zero
    return float(len(reply) % 2)


def test_grpo_traces_its_kl_and_the_clip_binds_only_with_several_updates(sft_tok):
    words = chat.task_words()[0]
    runs = {}
    for updates in (1, 3):
        trace = []
        policy = _sft()
        history, rewards = alignment.train_grpo(
            policy, _sft(), sft_tok, words, _odd_length, steps=2, prompts_per_step=4, group=4, lr=3e-3, warmup=1,
            seed=2, updates=updates, trace=trace,
        )  # fmt: skip
        assert len(trace) == len(rewards) == 2 and len(history.losses) == 2 * updates
        assert trace[0]["kl"] == pytest.approx(0.0, abs=1e-4)  # the policy is the reference when it first samples
        runs[updates] = trace
    assert all(t["clipped share"] == 0.0 for t in runs[1])  # one update: the ratio is 1
    assert runs[3][0]["clipped share"] > 0  # after an update at this learning rate, some ratios leave the clip
    with pytest.raises(ValueError, match="updates must be at least 1"):
        alignment.train_grpo(_sft(), _sft(), sft_tok, words, _odd_length, steps=1, updates=0)


def test_grpo_against_a_learned_reward_records_the_program_reward_on_the_same_samples(sft_tok):
    sft = _sft()
    gold = []
    judge = alignment.RewardModel(copy.deepcopy(sft)).eval()
    torch.nn.init.normal_(judge.head.weight, std=0.1)
    learned = alignment.LearnedReward(judge, sft_tok, also=chat.exact_reward, log=gold)
    words = chat.task_words()[0]
    _, rewards = alignment.train_grpo(sft, _sft(), sft_tok, words, learned, steps=2, prompts_per_step=4, group=2,
                                      seed=1)  # fmt: skip
    _, program = alignment.train_grpo(_sft(), _sft(), sft_tok, words, chat.exact_reward, steps=1,
                                      prompts_per_step=4, group=2, seed=1)  # fmt: skip
    assert len(gold) == len(rewards) == 2
    assert gold[0] == program[0]  # the first samples are the same: the program scores them the same


# PPO: advantages from a value model -------------------------------------------------------------------------------


def _gae_by_its_sum(rewards, values, mask, gamma, lam):
    """A_t = sum over l of (gamma lam)^l delta_{t + l}, written out term by term for one answer at a time."""
    out = torch.zeros_like(rewards)
    for i in range(rewards.shape[0]):
        tokens = mask[i].nonzero().flatten().tolist()  # the answer's positions, in a row
        for k, t in enumerate(tokens):
            total = 0.0
            for j, u in enumerate(tokens[k:]):
                following = values[i, tokens[k + j + 1]] if k + j + 1 < len(tokens) else 0.0
                delta = rewards[i, u] + gamma * following - values[i, u]
                total += (gamma * lam) ** j * delta
            out[i, t] = total
    return out


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 0.95), (1.0, 1.0), (1.0, 0.0), (0.9, 0.5)])
def test_generalized_advantages_equal_their_sum_written_out(gamma, lam):
    g = torch.Generator().manual_seed(int(10 * gamma + 100 * lam))
    rewards = torch.randn(3, 7, generator=g, dtype=torch.float64)
    values = torch.randn(3, 7, generator=g, dtype=torch.float64)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 0, 0, 0]])  # prompt, answer, pad
    # rewards and values outside the answers are noise that must be ignored: the value after an answer is 0
    advantages, returns = alignment.generalized_advantages(rewards, values, mask, gamma, lam)
    torch.testing.assert_close(advantages, _gae_by_its_sum(rewards, values, mask, gamma, lam))
    torch.testing.assert_close(returns, (advantages + values) * mask)
    if gamma == 1.0 and lam == 1.0:  # the return is the reward still to come
        to_go = (rewards * mask).flip(1).cumsum(1).flip(1) * mask
        torch.testing.assert_close(returns, to_go)
    with pytest.raises(ValueError, match="gamma and lam"):
        alignment.generalized_advantages(rewards, values, mask, 1.0, 1.5)


def test_ppo_losses_by_hand():
    logprobs = torch.log(torch.tensor([[1.5, 1.0, 0.5]], dtype=torch.float64))  # ratios against old = 0
    old = torch.zeros(1, 3, dtype=torch.float64)
    advantages = torch.tensor([[1.0, -2.0, -1.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 1.0, 0.0]], dtype=torch.float64)
    old_values = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)
    returns = torch.tensor([[1.0, 0.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    policy, value = alignment.ppo_losses(logprobs, old, advantages, values, old_values, returns, mask, 0.2, 0.2)
    # token 0: min(1.5 * 1, 1.2 * 1) = 1.2; token 1: min(1 * -2, 1 * -2) = -2; token 2 is masked out
    assert policy.item() == pytest.approx(-(1.2 - 2.0) / 2)
    # token 0: max((0.5 - 1)^2, (0.2 - 1)^2) = 0.64; token 1: max(1, 1) = 1
    assert value.item() == pytest.approx(0.5 * (0.64 + 1.0) / 2)


def test_ppo_learns_a_value_and_draws_grpos_first_samples(sft_tok):
    words = chat.task_words()[0]
    sft = _sft()
    critic = alignment.RewardModel(copy.deepcopy(sft))
    trace = []
    history, rewards = alignment.train_ppo(
        sft, critic, _sft(), sft_tok, words, _odd_length, steps=3, prompts_per_step=4, group=4, lr=3e-3, warmup=1,
        updates=3, seed=4, trace=trace,
    )  # fmt: skip
    _, grpo_rewards = alignment.train_grpo(_sft(), _sft(), sft_tok, words, _odd_length, steps=1, prompts_per_step=4,
                                           group=4, seed=4)  # fmt: skip
    assert rewards[0] == grpo_rewards[0] and len(trace) == 3 and len(history.losses) == 9
    assert trace[0]["kl"] == pytest.approx(0.0, abs=1e-4)
    assert trace[0]["clipped share"] > 0  # three updates at this learning rate move the ratios past the clip
    assert critic.head.weight.abs().sum() > 0  # the value model learned (its head started at zero)
    with pytest.raises(ValueError, match="updates must be at least 1"):
        alignment.train_ppo(_sft(), critic, _sft(), sft_tok, words, _odd_length, steps=1, updates=0)


def test_likelihood_accuracy_ranks_pairs_by_the_models_answer_probabilities(tok):
    lm = alignment.without_dropout(_lm(tok, seed=3)).eval()
    pairs = [("reverse abc", "cba", "abc"), ("shout ab", "AB", "ab"), ("reverse ab", "ba", "bb")]  # (no digits in tok)
    right = 0
    with torch.no_grad():
        for prompt, chosen, rejected in pairs:
            c_ids, c_mask = chat.chat_batch(tok, [prompt], [chosen])
            r_ids, r_mask = chat.chat_batch(tok, [prompt], [rejected])
            c = alignment.answer_logprobs(lm(c_ids), c_ids, c_mask)
            r = alignment.answer_logprobs(lm(r_ids), r_ids, r_mask)
            right += int(c.item() > r.item())
    assert 0 < right < 3  # a random model gets some pairs right and some wrong: the count is informative
    assert alignment.likelihood_accuracy(lm, tok, pairs) == pytest.approx(right / 3)
    flipped = [(p, r, c) for p, c, r in pairs]
    assert alignment.likelihood_accuracy(lm, tok, pairs) + alignment.likelihood_accuracy(lm, tok, flipped) == 1.0
    with pytest.raises(ValueError, match="no preference pairs"):
        alignment.likelihood_accuracy(lm, tok, [])
