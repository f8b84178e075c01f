"""Chapter 17's chat: a template with special tokens, word tasks a program can check, and answering.

The base model is chapter 10's character-level Shakespeare model. It has never seen an
instruction. The chat template wraps each turn in three new special tokens:

    ``<|user|>reverse night<|assistant|>thgin<|end|>``

A `ChatTokenizer` is the plays' character tokenizer with those three ids appended after its
vocabulary, so an old id keeps its meaning and `surgery.add_tokens` gives the model rows for the
new ones. `encode_chat` returns the ids and the loss mask: only the answer and its ``<|end|>`` are
learned.

The tasks are three instructions about one word: `reverse`, `shout` (capitals) and `count` (its
letters). Every answer can be checked by a program, so the same tasks give exact-match accuracy,
DPO's preference pairs and GRPO's rewards.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from . import corpus
from .decoding import generate
from .tasks import pad_sequences
from .tokenization import CharTokenizer

__all__ = [
    "SPECIAL_TOKENS",
    "TASKS",
    "MAX_ANSWER",
    "ChatTokenizer",
    "chat_tokenizer",
    "task_words",
    "instruction",
    "solve",
    "random_instructions",
    "chat_batch",
    "sft_loss",
    "answer",
    "sample_answers",
    "exact_match_by_task",
    "exact_reward",
]

SPECIAL_TOKENS = ("<|user|>", "<|assistant|>", "<|end|>")

TASKS: dict[str, Callable[[str], str]] = {
    "reverse": lambda word: word[::-1],
    "shout": str.upper,
    "count": lambda word: str(len(word)),
}
WORD_LENGTHS = (3, 7)  # the words asked about: lower-case words of the training plays, 3 to 7 letters
HELD_OUT_WORDS = 300  # kept out of every training set: the accuracy is measured on words never asked about
MAX_ANSWER = 8  # new tokens an answer may take: 7 letters and <|end|>


class ChatTokenizer:
    """A CharTokenizer with the chat template's three special tokens after its vocabulary.

    ids below `base.vocab_size` mean what they meant to the base model; `user_id`,
    `assistant_id` and `end_id` are the new ones.
    """

    def __init__(self, base: CharTokenizer):
        if not isinstance(base, CharTokenizer):
            raise TypeError(f"ChatTokenizer wraps a CharTokenizer, got {type(base).__name__}")
        self.base = base
        self.user_id, self.assistant_id, self.end_id = range(base.vocab_size, base.vocab_size + 3)

    @property
    def vocab_size(self) -> int:
        """The base vocabulary plus the three special tokens."""
        return self.base.vocab_size + len(SPECIAL_TOKENS)

    def encode(self, text: str) -> list[int]:
        """Plain text -> ids of the base vocabulary (a character it lacks becomes <unk>)."""
        return self.base.encode(text)

    def encode_chat(self, prompt: str, answer: str | None = None) -> tuple[list[int], list[int]]:
        """One exchange -> (ids, answer mask): ``<|user|>`` prompt ``<|assistant|>`` [answer ``<|end|>``].

        The mask is 1 on the answer's ids and its ``<|end|>``, 0 on the rest. Without an answer, the ids
        end at ``<|assistant|>``: a prompt for the model to continue.
        """
        ids = [self.user_id, *self.encode(prompt), self.assistant_id]
        mask = [0] * len(ids)
        if answer is not None:
            reply = [*self.encode(answer), self.end_id]
            ids += reply
            mask += [1] * len(reply)
        return ids, mask

    def decode_answer(self, ids: Sequence[int] | torch.Tensor) -> str:
        """The ids a model wrote after ``<|assistant|>`` -> its answer, up to (not including) ``<|end|>``.

        A special token met before ``<|end|>`` ends the answer too, and so does padding.
        """
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        text = []
        for i in ids:
            if i >= self.base.vocab_size or i == self.base.pad_id:
                break
            text.append(i)
        return self.base.decode(text)

    def render(self, ids: Sequence[int] | torch.Tensor) -> str:
        """ids -> text with the special tokens written out, padding dropped: for printing a batch."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if i >= self.base.vocab_size:
                out.append(SPECIAL_TOKENS[i - self.base.vocab_size])
            elif i != self.base.pad_id:
                out.append(self.base.decode([i]))
        return "".join(out)


def chat_tokenizer() -> ChatTokenizer:
    """The chat tokenizer of chapter 17: the character tokenizer of the plays (chapter 10's) plus the specials."""
    text = corpus.shakespeare("train")
    return ChatTokenizer(CharTokenizer.from_texts([text]))


def task_words() -> tuple[list[str], list[str]]:
    """(training words, held-out words): the plays' lower-case words of 3 to 7 letters, shuffled once.

    Words written with an apostrophe are left out. The first HELD_OUT_WORDS of the shuffle are
    held out; the rest may be asked about in training.
    """
    low, high = WORD_LENGTHS
    text = corpus.shakespeare("train")
    # whole words only: "approv'd" and "'tis" are not cut down to "approv" and "tis"
    words = sorted({w for w in re.findall(r"(?<![\w'])[a-z]+(?![\w'])", text) if low <= len(w) <= high})
    random.Random(0).shuffle(words)
    return words[HELD_OUT_WORDS:], words[:HELD_OUT_WORDS]


def instruction(task: str, word: str) -> str:
    """The user's line for a task: 'reverse night'."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {task!r}")
    return f"{task} {word}"


def solve(prompt: str) -> str:
    """The right answer to a user's line, by program: solve('reverse night') == 'thgin'."""
    task, _, word = prompt.partition(" ")
    if task not in TASKS or not word:
        raise ValueError(f"expected '<task> <word>' with a task in {list(TASKS)}, got {prompt!r}")
    return TASKS[task](word)


def random_instructions(n: int, words: Sequence[str], rng: random.Random) -> list[str]:
    """n user lines, each a task drawn uniformly and a word from `words`."""
    tasks = list(TASKS)
    return [instruction(rng.choice(tasks), rng.choice(words)) for _ in range(n)]


def chat_batch(
    tok: ChatTokenizer, prompts: Sequence[str], answers: Sequence[str] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exchanges -> (ids (B, T), answer mask (B, T)), padded on the right.

    answers default to the right ones (`solve`). Padding on the right never changes a decoder's
    earlier positions, and the mask leaves it out of every loss.
    """
    answers = [solve(p) for p in prompts] if answers is None else answers
    if len(answers) != len(prompts):
        raise ValueError(f"expected one answer per prompt, got {len(answers)} answers for {len(prompts)} prompts")
    pairs = [tok.encode_chat(p, a) for p, a in zip(prompts, answers)]
    ids = pad_sequences([i for i, _ in pairs], tok.base.pad_id)  # (B, T)
    mask = pad_sequences([m for _, m in pairs], 0)  # (B, T)
    return ids, mask


def sft_loss(
    model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor], mask_prompt: bool = True
) -> torch.Tensor:
    """Supervised fine-tuning's loss on a chat batch: next-token cross-entropy, averaged over the learned tokens.

    With mask_prompt (the default, and the right way), only the answer's tokens and ``<|end|>`` are
    learned. Without it, every token but padding is: the model is also trained to write the user's
    line.
    """
    ids, answer_mask = batch
    logits = model(ids)[:, :-1]  # (B, T - 1, V): position t predicts token t + 1
    targets = ids[:, 1:]  # (B, T - 1)
    if mask_prompt:
        weight = answer_mask[:, 1:].float()  # (B, T - 1)
    else:
        pad_id = getattr(model.config, "pad_id", 0)
        weight = (targets != pad_id).float()  # (B, T - 1)
    losses = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    return (losses.view_as(weight) * weight).sum() / weight.sum()


def _by_length(prompts: Sequence[list[int]]) -> dict[int, list[int]]:
    """Indices of the prompts grouped by length: each group decodes as one batch with no padding."""
    groups: dict[int, list[int]] = {}
    for i, ids in enumerate(prompts):
        groups.setdefault(len(ids), []).append(i)
    return groups


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def sample_answers(
    model: torch.nn.Module,
    tok: ChatTokenizer,
    prompts: Sequence[str],
    temperature: float = 0.0,
    rng: torch.Generator | None = None,
) -> list[list[int]]:
    """Each prompt's answer as ids: what the model writes after ``<|assistant|>``, up to and including ``<|end|>``.

    Greedy at temperature 0, sampled otherwise (rng: a generator on the model's device). Prompts of
    one length decode together with the key-value cache. An answer that has not ended after
    MAX_ANSWER tokens is cut there, without ``<|end|>``.
    """
    if model.config.vocab_size != tok.vocab_size:
        raise ValueError(
            f"the model has {model.config.vocab_size} token ids and the tokenizer {tok.vocab_size}: "
            "give the model the chat tokens first (surgery.add_tokens)"
        )
    encoded = [tok.encode_chat(p)[0] for p in prompts]
    out: list[list[int]] = [[] for _ in prompts]
    for length, rows in _by_length(encoded).items():
        prompt = torch.tensor([encoded[i] for i in rows], device=_device(model))  # (n, length)
        written = generate(model, prompt, MAX_ANSWER, temperature=temperature, rng=rng)[:, length:]  # (n, MAX_ANSWER)
        for i, ids in zip(rows, written.tolist()):
            out[i] = ids[: ids.index(tok.end_id) + 1] if tok.end_id in ids else ids
    return out


def answer(
    model: torch.nn.Module,
    tok: ChatTokenizer,
    prompts: Sequence[str] | str,
    temperature: float = 0.0,
    rng: torch.Generator | None = None,
) -> list[str] | str:
    """The model's answers as text (greedy by default); a single prompt gives a single answer."""
    if isinstance(prompts, str):
        return answer(model, tok, [prompts], temperature, rng)[0]
    return [tok.decode_answer(ids) for ids in sample_answers(model, tok, prompts, temperature, rng)]


def exact_reward(prompt: str, reply: str) -> float:
    """1.0 when the answer is exactly right, else 0.0: the reward a checker gives."""
    return float(reply == solve(prompt))


def exact_match_by_task(model: torch.nn.Module, tok: ChatTokenizer, words: Sequence[str]) -> dict[str, float]:
    """Greedy exact-match accuracy on each task over `words`: {task: share of words answered exactly right}."""
    scores = {}
    for task in TASKS:
        prompts = [instruction(task, w) for w in words]
        replies = answer(model, tok, prompts)
        scores[task] = sum(exact_reward(p, r) for p, r in zip(prompts, replies)) / len(words)
    return scores
