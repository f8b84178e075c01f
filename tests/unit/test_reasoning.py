"""Chapter 21's addition models (transformer_lib.reasoning): the encoding, the budget, the writing and the rewards,
against hand-made answers and the model's own probabilities."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from transformer_lib import arithmetic as ar
from transformer_lib import reasoning as R


@pytest.fixture(scope="module")
def tok():
    return R.arithmetic_tokenizer()


def test_the_mask_covers_the_answer_and_nothing_else(tok):
    pairs = [(478, 356), (5, 12345), (0, 0)]
    for style, answer_of in R.STYLES.items():
        ids, mask = R.encode(tok, pairs, style)
        assert ids.shape == mask.shape and ids.shape[0] == 3
        for row, m, (a, b) in zip(ids.tolist(), mask.tolist(), pairs):
            length = 1 + len(ar.problem(a, b)) + len(answer_of(a, b))  # <bos>, the problem, the answer
            assert row[0] == tok.bos_id and all(t == tok.pad_id for t in row[length:])
            assert tok.decode([t for t, k in zip(row, m) if k], stop_at_eos=False) == answer_of(a, b)
            prompt_length = 1 + len(ar.problem(a, b))
            assert m[:prompt_length] == [0] * prompt_length and sum(m) == len(answer_of(a, b))
    with pytest.raises(ValueError, match="style must be one of"):
        R.encode(tok, pairs, "steps")


def test_the_budget_holds_every_right_answer_of_that_many_digits():
    rng = random.Random(0)
    for a, b in ar.random_problems(300, (1, 9), rng):
        for style, answer_of in R.STYLES.items():
            assert len(answer_of(a, b)) + 4 <= R.answer_budget(ar.problem(a, b), style)
    assert R.answer_budget("9999+9999=", "scratchpad") == len(ar.scratchpad(9999, 9999)) + 4
    with pytest.raises(ValueError, match="a\\+b="):
        R.answer_budget("12 + 3", "direct")


def test_greedy_writing_is_the_argmax_step_by_step_and_stops_at_the_end(tok):
    model = R.arithmetic_lm(seed=3).eval()
    prompts = ["12+7=", "478+356=", "3+4="]  # two lengths: decoded in two groups
    written = R.write(model, tok, prompts, "scratchpad")
    end = tok.encode(ar.END)[0]
    for prompt, text in zip(prompts, written):
        ids = tok.encode(prompt, bos=True)
        expected = []
        with torch.no_grad():
            for _ in range(R.answer_budget(prompt, "scratchpad")):
                nxt = model(torch.tensor([ids]))[0, -1].argmax().item()  # the whole sequence again: no cache
                ids.append(nxt)
                expected.append(nxt)
                if nxt == end:
                    break
        assert text == tok.decode(expected, stop_at_eos=False)
        assert text.count(ar.END) <= 1 and (ar.END not in text or text.endswith(ar.END))


def test_sampling_repeats_with_its_generator_and_each_copy_of_a_prompt_is_its_own_sample(tok):
    model = R.arithmetic_lm(seed=1)
    prompts = ["23+45="] * 16
    first = R.write(model, tok, prompts, "direct", temperature=1.0, rng=torch.Generator().manual_seed(7))
    again = R.write(model, tok, prompts, "direct", temperature=1.0, rng=torch.Generator().manual_seed(7))
    assert first == again and len(set(first)) > 1  # an untrained model spreads its probability
    assert model.training  # write leaves the model's mode as it found it


def test_a_problem_too_long_for_the_model_is_refused_by_name(tok):
    model = R.arithmetic_lm()
    with pytest.raises(ValueError, match="beyond the model's 128"):
        R.write(model, tok, [ar.problem(10**20, 1)], "scratchpad")


def test_the_two_rewards_pay_for_what_they_say():
    prompt = ar.problem(478, 356)
    right = ar.scratchpad(478, 356)
    wrong_step = right.replace("7+5+1=13", "7+5+1=23")  # a wrong step, the sum still copied right
    for reward, expected in ((R.final_answer_reward, (1.0, 1.0, 0.0, 0.0)), (R.steps_reward, (1.0, 0.0, 0.0, 0.0))):
        got = tuple(reward(prompt, a) for a in (right, wrong_step, "=835.", right[:-1]))
        assert got == expected, reward.__name__


def test_accuracy_pairs_two_models_on_the_same_problems_and_scores_each():
    a, b = R.arithmetic_lm(seed=0), R.arithmetic_lm(seed=1)
    first, second = R.accuracy(a, "direct", 2, problems=20, seed=4), R.accuracy(b, "direct", 2, problems=20, seed=4)
    assert first.scores.shape == second.scores.shape == (20,)
    assert set(first.scores.tolist()) <= {0.0, 1.0} and first.task == "2-digit addition, direct"


@pytest.mark.slow  # trains a model for seconds: make test runs it, make check does not
def test_training_on_one_digit_problems_learns_them_and_the_scratchpad_writes_its_steps():
    # both styles on 1-digit problems for 150 steps: 100 problems in all, so each is seen many times
    for style in R.STYLES:
        model = R.arithmetic_lm(seed=0)
        history = R.train(model, style, steps=150, batch_size=32, digits=(1, 1), lr=3e-3, warmup=20)
        assert history.losses[-1] < 0.2 * history.losses[0], style
        assert R.accuracy(model, style, 1, problems=50).mean >= 0.9, style
    pad = R.write(model, R.arithmetic_tokenizer(), ["7+8="], "scratchpad")[0]
    assert pad == ar.scratchpad(7, 8)


@pytest.mark.slow  # trains a model for seconds: make test runs it, make check does not
def test_grpo_samples_are_scored_by_the_reward_given():
    policy = R.arithmetic_lm(seed=0)
    R.train(policy, "scratchpad", steps=60, batch_size=32, digits=(1, 1), lr=3e-3, warmup=10)  # partly right
    rewards: list[float] = []
    lengths: list[float] = []
    ids, mask, scores = next(R.sampled_groups(policy, R.steps_reward, "scratchpad", 4, 4, 1, 0, rewards, lengths))
    tok = R.arithmetic_tokenizer()
    answers = []
    for row, m, score in zip(ids.tolist(), mask.tolist(), scores.tolist()):
        prompt = tok.decode(row[1 : m.index(1)], stop_at_eos=False)  # after <bos>, up to the answer
        answers.append(tok.decode([t for t, k in zip(row, m) if k], stop_at_eos=False))
        assert score == R.steps_reward(prompt, answers[-1])
    assert 0 < scores.mean() < 1  # some right, some wrong: the groups have something to teach
    assert rewards == [scores.mean().item()] and lengths == [sum(map(len, answers)) / len(answers)]


@pytest.mark.slow  # trains a model for seconds: make test runs it, make check does not
def test_grpo_learns_what_its_reward_pays_for():
    # an untrained model, paid for answers that begin with "1": about 1 in 18 at first
    policy = R.arithmetic_lm(seed=0)
    reference = copy.deepcopy(policy)
    first_one = lambda prompt, answer: float(answer.startswith("1"))
    history, by_step, lengths = R.train_grpo(policy, reference, first_one, 20, style="direct", digits=1, lr=1e-3)
    assert len(by_step) == len(lengths) == len(history.losses) == 20
    assert by_step[0] < 0.2 and sum(by_step[-10:]) / 10 > 0.8, by_step
    ref_answers = R.write(reference, R.arithmetic_tokenizer(), ["3+4="] * 64, "direct", 1.0, torch.Generator())
    assert sum(a.startswith("1") for a in ref_answers) < 16  # the reference stays where it started


@pytest.mark.slow  # trains a model for seconds: make test runs it, make check does not
def test_the_models_export_to_gpt_neox_with_the_same_logits_after_training():
    pytest.importorskip("transformers")
    import transformer_lib as tl

    model = R.arithmetic_lm(seed=2)
    R.train(model, "scratchpad", steps=5, batch_size=8, digits=(1, 2))
    assert model.head.bias.abs().max() == 0  # held at zero: GPT-NeoX's output layer has no bias
    theirs = tl.hf.to_hf(model.eval())
    assert type(theirs).__name__ == "GPTNeoXForCausalLM"
    ids, _ = R.encode(R.arithmetic_tokenizer(), [(478, 356), (12, 9)], "scratchpad")
    with torch.no_grad():
        assert torch.allclose(model(ids), theirs(ids).logits, atol=1e-4)


def test_the_hugging_face_tokenizer_gives_our_ids_and_text_back(tok):
    pytest.importorskip("transformers")
    import transformer_lib as tl

    theirs = tl.hf.to_hf_tokenizer(tok)
    for text in ("478+356=", "8+6+0=14;7+5+1=13;4+3+1=8;=834.", "0+0=", ""):
        assert theirs.encode(text) == tok.encode(text, bos=True)  # <bos> first, as the models read a problem
        assert theirs.encode(text, add_special_tokens=False) == tok.encode(text)
        assert theirs.decode(tok.encode(text)) == text
    assert theirs.encode("<bos>12+3=", add_special_tokens=False) == tok.encode("12+3=", bos=True)
    assert theirs.encode("1x")[-1] == tok.unk_id  # a character outside the alphabet
    assert (theirs.pad_token_id, theirs.bos_token_id, theirs.eos_token_id) == (tok.pad_id, tok.bos_id, tok.eos_id)
    with pytest.raises(TypeError, match="takes a CharTokenizer"):
        tl.hf.to_hf_tokenizer(tl.WordTokenizer(["a"]))


@pytest.mark.slow  # trains a model for seconds: make test runs it, make check does not
def test_a_verifier_learns_the_programs_verdicts():
    from transformer_lib.alignment import RewardModel

    rng = random.Random(0)
    pairs = ar.random_problems(200, 1, rng)
    prompts = [ar.problem(a, b) for a, b in pairs]
    # half the answers right, half with the final sum one too large (the steps right)
    answers = [ar.scratchpad(a, b) if i % 2 else ar.scratchpad(a, b).replace(f"={a + b}.", f"={a + b + 1}.")
               for i, (a, b) in enumerate(pairs)]  # fmt: skip
    right = [ar.is_right(p, a) for p, a in zip(prompts, answers)]
    assert sum(right) == 100
    verifier = RewardModel(R.arithmetic_lm(seed=0))
    history = R.train_verifier(verifier, prompts, answers, right, steps=80, lr=1e-3, seed=0)
    verifier.train()
    scores = R.verifier_scores(verifier, prompts, answers, batch_size=64)  # four batches: the pieces joined in order
    assert scores.shape == (200,) and verifier.training  # verifier_scores leaves the mode as it found it
    assert ((scores > 0) == torch.tensor(right)).float().mean() > 0.9
    assert sum(history.losses[-10:]) / 10 < 0.5 * history.losses[0]
    with pytest.raises(ValueError, match="one answer and one verdict"):
        R.train_verifier(verifier, prompts, answers[:-1], right, steps=1)
