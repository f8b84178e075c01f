"""A model that shows its work: chapter 21's addition models, trained to answer directly or with worked steps.

The task is `tl.arithmetic`'s: "478+356=" answered "834." (direct) or "8+6+0=14;7+5+1=13;4+3+1=8;=834."
(scratchpad). Both models here are the same small decoder-only Transformer, over the same characters
(`arithmetic_tokenizer`), trained on the same problems (`train`: numbers of TRAIN_DIGITS digits, one loss on the
answer's characters only). Only what they are taught to write differs.

- `write` samples or greedily writes answers, prompts of one length decoding together with the key-value cache;
  an answer ends at END, or is cut at the budget `answer_budget` gives its problem (then it earns nothing).
- `accuracy` measures one style on fresh problems of a given number of digits, as a `tl.evaluation.Result`
  (one 0 or 1 per problem), so that two models measured on the same problems compare pair by pair.
- `sampled_groups` draws GRPO's samples from a policy (`group` answers per problem) and scores them with a reward:
  `final_answer_reward` pays for the right sum only, `steps_reward` only for a right sum reached by right steps.
  `train_grpo` runs the book's GRPO (`tl.alignment.train_grpo_from_samples`) on them.
- A learned verifier for best-of-N: `train_verifier` teaches a `tl.alignment.RewardModel` to tell the model's own
  right answers from its wrong ones (a logistic loss on the program's verdicts, read at the answer's last token;
  Cobbe et al., 2021, labelled their verifier's samples the same way); `verifier_scores` reads its score for each
  answer.

For EleutherAI's lm-evaluation-harness, `LM_EVAL_TASKS` are two task files' fields over `lm_eval_docs`: the
log-likelihood of the right scratchpad (and whether greedy decoding would write it), and the greedy sum. The models
have GPT-NeoX's shape, so `tl.hf.to_hf` exports them for it.

Dropout is off in these models: the problems are drawn afresh at every step, so few of them (only the shortest)
repeat.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import arithmetic
from .alignment import RewardModel, train_grpo_from_samples, without_dropout
from .config import TransformerConfig
from .decoding import generate
from .evaluation import Result
from .models import DecoderOnlyLM
from .tasks import pad_sequences
from .tokenization import CharTokenizer
from .training import History, fit

__all__ = [
    "STYLES",
    "TRAIN_DIGITS",
    "MAX_LEN",
    "arithmetic_tokenizer",
    "arithmetic_lm",
    "encode",
    "answer_budget",
    "train",
    "write",
    "accuracy",
    "sample_answers",
    "final_answer_reward",
    "steps_reward",
    "answer_ids",
    "sampled_groups",
    "train_grpo",
    "train_verifier",
    "verifier_scores",
    "LM_EVAL_TASKS",
    "LM_EVAL_MAX_NEW",
    "lm_eval_docs",
]

STYLES: dict[str, Callable[[int, int], str]] = {"direct": arithmetic.direct, "scratchpad": arithmetic.scratchpad}
TRAIN_DIGITS = (1, 4)  # each number of a training problem has 1 to 4 digits; 5 and more are never seen
MAX_LEN = 128  # positions: a 9-digit problem (<bos> and 20 characters) and its scratchpad budget (93 + 4) fit


def arithmetic_tokenizer() -> CharTokenizer:
    """One id per character of `arithmetic.ALPHABET`, after the four specials (the answer's end is END, ".")."""
    return CharTokenizer(arithmetic.ALPHABET)


def arithmetic_lm(seed: int = 0) -> DecoderOnlyLM:
    """3 pre-LN layers, d_model 128, 4 heads, rotary positions, GELU, tied embeddings, no dropout: 0.6 M weights.

    It fits Hugging Face's `GPTNeoXForCausalLM` configured sequential rather than parallel, with tied embeddings and
    every dimension rotary, so that `tl.hf.to_hf` exports it and EleutherAI's lm-evaluation-harness can read it.
    GPT-NeoX's output layer has no bias, so ours starts at zero and no training here moves it (`train`,
    `train_grpo`).
    """
    config = TransformerConfig(
        vocab_size=arithmetic_tokenizer().vocab_size,
        d_model=128,
        num_heads=4,
        num_layers=3,
        d_ff=512,
        dropout=0.0,
        max_len=MAX_LEN,
        norm_first=True,
        positional="rope",
        tie_embeddings=True,
        scale_embedding=False,
        activation="gelu",
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = DecoderOnlyLM(config)
    with torch.no_grad():
        model.head.bias.zero_()
    return _without_head_bias(model)


def _without_head_bias(model: nn.Module) -> nn.Module:
    """Hold the output layer's bias where it is (zero for these models): GPT-NeoX's output layer has none."""
    model.head.bias.requires_grad_(False)
    return model


def _check_style(style: str) -> Callable[[int, int], str]:
    if style not in STYLES:
        raise ValueError(f"style must be one of {list(STYLES)}, got {style!r}")
    return STYLES[style]


def encode(tok: CharTokenizer, pairs: Sequence[tuple[int, int]], style: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Problems and their answers in `style` -> (ids (N, T), answer mask (N, T)), padded on the right.

    Each row is <bos>, the problem "a+b=", then the answer; the mask is 1 on the answer's characters (its END
    included), the only ones the loss reads.
    """
    answer_of = _check_style(style)
    rows, masks = [], []
    for a, b in pairs:
        prompt = tok.encode(arithmetic.problem(a, b), bos=True)
        answer = tok.encode(answer_of(a, b))
        rows.append(prompt + answer)
        masks.append([0] * len(prompt) + [1] * len(answer))
    return pad_sequences(rows, tok.pad_id), pad_sequences(masks, 0)


def answer_loss(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the answer's characters, each predicted from everything before it."""
    logits = model(ids[:, :-1])  # (N, T - 1, V)
    per_token = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # (N, T - 1)
    weights = mask[:, 1:].to(per_token.dtype)  # (N, T - 1)
    return (per_token * weights).sum() / weights.sum()


def train(
    model: nn.Module,
    style: str,
    steps: int,
    batch_size: int = 128,
    digits: tuple[int, int] = TRAIN_DIGITS,
    lr: float = 1e-3,
    warmup: int = 100,
    seed: int = 0,
    progress: bool = False,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    eval_every: int = 0,
) -> History:
    """Supervised training on fresh problems: `steps` AdamW steps of `batch_size` problems each, their numbers of
    `digits` digits (drawn per number from random.Random(seed)), the loss on the answers in `style` only. The output
    layer's bias is held where it is.

    The problems depend on the seed alone, so a direct and a scratchpad model of one seed see the same problems in
    the same order. The learning rate warms up over `warmup` steps, then decays (`fit`'s cosine).
    """
    _check_style(style)
    _without_head_bias(model)
    tok = arithmetic_tokenizer()
    rng = random.Random(seed)

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield encode(tok, arithmetic.random_problems(batch_size, digits, rng), style)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fit(
            model,
            lambda m, batch: answer_loss(m, *batch),
            batches(),
            steps,
            lr=lr,
            warmup=warmup,
            weight_decay=0.0,
            progress=progress,
            eval_fn=eval_fn,
            eval_every=eval_every,
            desc=f"{style} answers",
        )


def answer_budget(prompt: str, style: str) -> int:
    """New characters a model may write for `prompt`: the longest right answer for its numbers' lengths, plus 4."""
    a, b = arithmetic.parse_problem(prompt)
    digits = max(len(str(a)), len(str(b)))
    largest = 10**digits - 1  # every column carries: the longest steps and sum
    return len(_check_style(style)(largest, largest)) + 4


def write(
    model: nn.Module,
    tok: CharTokenizer,
    prompts: Sequence[str],
    style: str,
    temperature: float = 0.0,
    rng: torch.Generator | None = None,
    budget: int | None = None,
) -> list[str]:
    """Each prompt's answer as text, up to and including END (cut after `budget` new characters when END never comes;
    by default the largest `answer_budget` among the prompts of its length).

    Greedy at temperature 0, sampled otherwise (rng: a generator on the model's device). Prompts of one length
    decode together; a prompt repeated n times in `prompts` gets n samples.
    """
    device = next(model.parameters()).device
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(len(p), []).append(i)  # problems of one length decode together, with one budget
    out = [""] * len(prompts)
    end = tok.encode(arithmetic.END)[0]
    for length, rows in groups.items():
        allowed = budget or max(answer_budget(prompts[i], style) for i in rows)
        ids = torch.tensor([tok.encode(prompts[i], bos=True) for i in rows], device=device)  # (n, length + 1)
        if ids.shape[1] + allowed > model.config.max_len:
            raise ValueError(
                f"a problem of {length} characters needs up to {allowed} more, "
                f"beyond the model's {model.config.max_len}"
            )
        was_training = model.training
        model.eval()
        with torch.no_grad():
            written = generate(model, ids, allowed, temperature=temperature, rng=rng)[:, ids.shape[1] :]  # (n, allowed)
        model.train(was_training)
        for i, row in zip(rows, written.tolist()):
            out[i] = tok.decode(row[: row.index(end) + 1] if end in row else row, stop_at_eos=False)
    return out


def accuracy(
    model: nn.Module, style: str, digits: int, problems: int = 200, seed: int = 0, temperature: float = 0.0
) -> Result:
    """Greedy (or sampled) answers to `problems` fresh problems of `digits` digits each, scored 1 when the final sum is
    right: a Result of one 0 or 1 per problem. The problems come from random.Random(seed * 1000 + digits), so two
    models measured with one seed answer the same problems."""
    rng = random.Random(seed * 1000 + digits)
    pairs = arithmetic.random_problems(problems, digits, rng)
    prompts = [arithmetic.problem(a, b) for a, b in pairs]
    g = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    answers = write(model, arithmetic_tokenizer(), prompts, style, temperature=temperature, rng=g)
    scores = torch.tensor([float(arithmetic.is_right(p, a)) for p, a in zip(prompts, answers)], dtype=torch.float64)
    return Result(f"{digits}-digit addition, {style}", "exact match", scores)


def sample_answers(
    model: nn.Module, style: str, digits: int, problems: int, samples: int, seed: int = 0, temperature: float = 1.0
) -> tuple[list[str], list[list[str]]]:
    """`samples` answers at `temperature` to each of `problems` fresh problems of `digits` digits: (the problems,
    one list of answers per problem). The problems are `accuracy`'s for the same seed; the draws come from a torch
    generator seeded with `seed`. What pass@k, the vote and best-of-N are measured on."""
    rng = random.Random(seed * 1000 + digits)
    prompts = [arithmetic.problem(a, b) for a, b in arithmetic.random_problems(problems, digits, rng)]
    g = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    repeated = [p for p in prompts for _ in range(samples)]  # a problem's samples next to each other
    written = write(model, arithmetic_tokenizer(), repeated, style, temperature=temperature, rng=g)
    return prompts, [written[i * samples : (i + 1) * samples] for i in range(problems)]


def final_answer_reward(prompt: str, answer: str) -> float:
    """1 for the right sum, however it was reached; else 0."""
    return float(arithmetic.is_right(prompt, answer))


def steps_reward(prompt: str, answer: str) -> float:
    """1 for the right sum reached by the right steps, every column's; else 0."""
    return float(arithmetic.steps_right(prompt, answer))


def answer_ids(tok: CharTokenizer, prompts: Sequence[str], answers: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Written answers as the models read them: (ids (N, T), answer mask (N, T)), <bos> and the problem first, padded
    on the right; `encode` does the same for the right answers of a style."""
    if len(prompts) != len(answers):
        raise ValueError(f"one answer per problem: got {len(prompts)} problems and {len(answers)} answers")
    prompt_ids = [tok.encode(p, bos=True) for p in prompts]
    ids = pad_sequences([p + tok.encode(a) for p, a in zip(prompt_ids, answers)], tok.pad_id)  # (N, T)
    mask = pad_sequences([[0] * len(p) + [1] * len(a) for p, a in zip(prompt_ids, answers)], 0)  # (N, T)
    return ids, mask


def sampled_groups(
    policy: nn.Module,
    reward: Callable[[str, str], float],
    style: str,
    problems_per_step: int,
    group: int,
    digits: int | tuple[int, int],
    seed: int,
    mean_rewards: list[float],
    lengths: list[float] | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Endless steps of on-policy samples: (ids (P * G, T), answer mask (P * G, T), rewards (P * G,)).

    Each step draws `problems_per_step` problems of `digits` digits (random.Random(seed)), samples `group` answers
    to each at temperature 1 (a torch generator seeded with `seed`) and scores them with `reward(problem, answer)`.
    The step's mean reward is appended to `mean_rewards`, and the mean answer length in characters to `lengths`.
    """
    tok = arithmetic_tokenizer()
    device = next(policy.parameters()).device
    problem_rng = random.Random(seed)
    sample_rng = torch.Generator(device=device).manual_seed(seed)
    while True:
        pairs = arithmetic.random_problems(problems_per_step, digits, problem_rng)
        prompts = [arithmetic.problem(a, b) for a, b in pairs for _ in range(group)]
        answers = write(policy, tok, prompts, style, temperature=1.0, rng=sample_rng)
        scores = torch.tensor([reward(p, a) for p, a in zip(prompts, answers)], dtype=torch.float32)  # (P * G,)
        mean_rewards.append(scores.mean().item())
        if lengths is not None:
            lengths.append(sum(len(a) for a in answers) / len(answers))
        ids, mask = answer_ids(tok, prompts, answers)  # (P * G, T) each
        yield ids, mask, scores


def train_grpo(
    policy: nn.Module,
    reference: nn.Module,
    reward: Callable[[str, str], float],
    steps: int,
    style: str = "scratchpad",
    digits: int | tuple[int, int] = TRAIN_DIGITS,
    problems_per_step: int = 16,
    group: int = 8,
    beta: float = 0.04,
    lr: float = 1e-4,
    warmup: int = 10,
    seed: int = 0,
    progress: bool = False,
) -> tuple[History, list[float], list[float]]:
    """GRPO on addition with a program's reward: returns (History, mean reward by step, mean answer length by step).

    `train_grpo_from_samples` with `sampled_groups`' samples: one AdamW step per sampling step, the loss
    `tl.alignment.grpo_loss` with group-relative advantages and a KL term (weight beta) to the frozen `reference`.
    """
    _without_head_bias(policy)
    rewards: list[float] = []
    lengths: list[float] = []
    samples = sampled_groups(policy, reward, style, problems_per_step, group, digits, seed, rewards, lengths)
    history = train_grpo_from_samples(
        policy, reference, samples, steps, problems_per_step, group, beta=beta, lr=lr, warmup=warmup, seed=seed,
        progress=progress,
    )  # fmt: skip
    return history, rewards, lengths


def train_verifier(
    verifier: RewardModel,
    prompts: Sequence[str],
    answers: Sequence[str],
    right: Sequence[bool],
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-4,
    seed: int = 0,
    progress: bool = False,
) -> History:
    """Teach `verifier` which answers are right: `steps` AdamW steps of `batch_size` (problem, answer) pairs drawn at
    random (random.Random(seed)), the loss binary cross-entropy between its score (a logit) and the program's
    verdict. Dropout is switched off. Returns the History."""
    if not len(prompts) == len(answers) == len(right) or not prompts:
        raise ValueError(f"one answer and one verdict per problem, at least one: got {len(prompts)}, {len(answers)}, "
                         f"{len(right)}")  # fmt: skip
    without_dropout(verifier)
    ids, mask = answer_ids(arithmetic_tokenizer(), prompts, answers)  # (N, T) each
    labels = torch.tensor([float(r) for r in right])  # (N,)
    rng = random.Random(seed)

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        while True:
            rows = torch.tensor([rng.randrange(len(prompts)) for _ in range(batch_size)])
            yield ids[rows], mask[rows], labels[rows]

    def loss_fn(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        batch_ids, batch_mask, batch_labels = batch
        return F.binary_cross_entropy_with_logits(model(batch_ids, batch_mask), batch_labels)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return fit(verifier, loss_fn, batches(), steps, lr=lr, warmup=20, weight_decay=0.0, progress=progress,
                   desc="verifier")  # fmt: skip


def verifier_scores(
    verifier: RewardModel, prompts: Sequence[str], answers: Sequence[str], batch_size: int = 512
) -> torch.Tensor:
    """The verifier's score (a logit: above 0, it judges the answer right) for each (problem, answer): (N,)."""
    device = next(verifier.parameters()).device
    ids, mask = answer_ids(arithmetic_tokenizer(), prompts, answers)  # (N, T) each
    was_training = verifier.training
    verifier.eval()
    with torch.no_grad():
        scores = [verifier(ids[i : i + batch_size].to(device), mask[i : i + batch_size].to(device)).cpu()
                  for i in range(0, len(prompts), batch_size)]  # fmt: skip
    verifier.train(was_training)
    return torch.cat(scores)  # (N,)


LM_EVAL_MAX_NEW = 64  # lm-eval's greedy task writes at most this many characters (`write(budget=...)` to match it)

# EleutherAI's lm-evaluation-harness, reading a model exported with tl.hf.to_hf (tl.evaluation.run_lm_eval): two
# task files' fields over lm_eval_docs. "acc" of a log-likelihood request is lm-eval's is_greedy: whether every
# character of the right scratchpad, its END included, is the model's likeliest. The greedy task stops at END (which
# lm-eval leaves out of the answer) and reads the sum after the last "=".
LM_EVAL_TASKS: dict[str, dict] = {
    "addition_scratchpad_likelihood": {
        "output_type": "loglikelihood",
        "doc_to_text": "{{problem}}",
        "doc_to_target": "{{scratchpad}}",
        "target_delimiter": "",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
    },
    "addition_greedy_sum": {
        "output_type": "generate_until",
        "doc_to_text": "{{problem}}",
        "doc_to_target": "{{sum}}",
        "target_delimiter": "",
        "generation_kwargs": {"until": [arithmetic.END], "do_sample": False, "max_gen_toks": LM_EVAL_MAX_NEW},
        "filter_list": [
            {
                "name": "final-sum",
                "filter": [{"function": "regex", "regex_pattern": r"=(\d+)$"}, {"function": "take_first"}],
            }
        ],
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
    },
}


def lm_eval_docs(pairs: Sequence[tuple[int, int]]) -> list[dict]:
    """One lm-eval document per problem: {"problem": "a+b=", "scratchpad": the right worked answer, "sum": "a + b"}."""
    return [{"problem": arithmetic.problem(a, b), "scratchpad": arithmetic.scratchpad(a, b), "sum": str(a + b)}
            for a, b in pairs]  # fmt: skip
