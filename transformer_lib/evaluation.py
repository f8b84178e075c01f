"""One way to measure, for every chapter that measures: items a program scores, three metrics, and a report.

A chapter's measurement is a list of items, each scored alone: 1 or 0 for an exact answer, the chance that
one of k samples is right (pass@k), or a number of bits. `Result` keeps the per-item scores, so that two
models measured on the same items can be compared pair by pair (`tl.evidence.compare`), and says its mean
with a 95% bootstrap interval; `report` prints several results as one table; `run_lm_eval` hands a model
exported to Hugging Face (`tl.hf.to_hf`) to EleutherAI's lm-evaluation-harness with task files of our own, so that
the two can be compared item by item.

- `exact_match`: the answer equals the target after an optional normalisation (stripping, lower-casing).
- `pass_at_k` (from `tl.alignment`): the unbiased estimate from n samples of which c are right.
- Test-time compute, on n samples per item: `majority_vote` (self-consistency: the answer given most often),
  `best_of` (the answer a verifier scores highest), and `accuracy_at_n`, which measures either over random sets of
  n of an item's samples, so that one set of samples gives the whole curve of accuracy against n.
- `bits_per_byte`: a language model's total loss on a text, in bits, over the text's UTF-8 bytes: a
  measure that does not depend on the tokenizer, so a character model and a BPE model can be compared.
  Long texts are read in rolling windows as EleutherAI's lm-evaluation-harness reads them
  (`rolling_windows`): the first window starts from a prefix token; each later one reads the token just
  before its (up to) `max_len` targets and the targets themselves (lm-eval's context length 1), so its first
  target has one token of context and its last `max_len`; every token is predicted exactly once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .alignment import pass_at_k

__all__ = [
    "Result",
    "exact_match",
    "pass_at_k",
    "majority_vote",
    "best_of",
    "accuracy_at_n",
    "rolling_windows",
    "bits_per_byte",
    "report",
    "run_lm_eval",
]


@dataclass(frozen=True)
class Result:
    """One task's scores: `scores` (N,) float64, one per item, in the items' order."""

    task: str
    metric: str
    scores: torch.Tensor

    def __post_init__(self) -> None:
        if self.scores.dim() != 1 or self.scores.numel() == 0:
            raise ValueError(f"scores must be one number per item, (N,) with N >= 1, got {tuple(self.scores.shape)}")
        if not torch.isfinite(self.scores).all():
            raise ValueError(f"{self.task}: some scores are not finite numbers")

    @property
    def mean(self) -> float:
        return self.scores.double().mean().item()

    def interval(self, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
        """The 95% percentile bootstrap interval of the mean, resampling items (seeded: the same every time)."""
        g = torch.Generator().manual_seed(seed)
        picks = torch.randint(0, self.scores.numel(), (resamples, self.scores.numel()), generator=g)  # (R, N)
        means = self.scores.double()[picks].mean(dim=1)  # (R,)
        low, high = torch.quantile(means, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
        return low, high


def exact_match(
    answers: Sequence[str], targets: Sequence[str], normalize: Callable[[str], str] | None = None
) -> torch.Tensor:
    """(N,) float64: 1.0 where answer i equals target i (after `normalize`, applied to both), else 0.0."""
    if len(answers) != len(targets):
        raise ValueError(f"one answer per target: got {len(answers)} answers and {len(targets)} targets")
    norm = normalize or (lambda s: s)
    return torch.tensor([float(norm(a) == norm(t)) for a, t in zip(answers, targets)], dtype=torch.float64)


def majority_vote(answers: Sequence) -> object | None:
    """The answer given most often, None (no answer) left out; a tie goes to the tied answer given first. None when
    every answer is None."""
    counts: dict = {}
    for a in answers:
        if a is not None:
            counts[a] = counts.get(a, 0) + 1
    if not counts:
        return None
    most = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == most)  # the first of the tied, in order given


def best_of(answers: Sequence, scores: Sequence[float]) -> object:
    """The answer whose score is highest (a verifier's); a tie goes to the first."""
    if len(answers) != len(scores) or not answers:
        raise ValueError(f"one score per answer, at least one: got {len(answers)} answers and {len(scores)} scores")
    best = max(range(len(answers)), key=lambda i: (scores[i], -i))
    return answers[best]


def accuracy_at_n(
    right: Sequence[Sequence[bool]],
    n: int,
    choose: Callable[[int, list[int]], int | None],
    draws: int = 200,
    seed: int = 0,
    task: str = "",
    metric: str = "",
) -> Result:
    """Accuracy when each item gets n samples and one is chosen, measured on the samples an item already has.

    right[i][j] says whether item i's sample j is right. For each item, `draws` sets of n of its samples are drawn
    without replacement (a seeded torch generator); choose(i, indices) returns the index of the sample it picks
    from the set, or None to give no answer; the item scores the share of draws whose pick is right. With n equal to
    an item's number of samples, every draw is the whole set.
    """
    if not right or any(len(r) < n for r in right) or n < 1:
        raise ValueError(f"n must be between 1 and every item's number of samples, got n = {n}")
    g = torch.Generator().manual_seed(seed)
    scores = []
    for i, item in enumerate(right):
        hits = 0
        for _ in range(draws):
            indices = torch.randperm(len(item), generator=g)[:n].tolist()
            picked = choose(i, indices)
            if picked is not None and picked not in indices:
                raise ValueError(f"choose must pick one of the indices it was given, got {picked} for {indices}")
            hits += picked is not None and bool(item[picked])
        scores.append(hits / draws)
    return Result(task or "items", metric or f"accuracy with {n} samples", torch.tensor(scores, dtype=torch.float64))


def rolling_windows(ids: Sequence[int], prefix_id: int, max_len: int) -> list[tuple[list[int], list[int]]]:
    """Cut a text's token ids into (inputs, targets) windows that predict every token once.

    The first window reads `prefix_id` and the first max_len - 1 tokens and predicts the first max_len;
    each later one predicts the next max_len tokens (fewer at the end) from the max_len tokens before its
    last one, so its first prediction has one token of context beyond what it predicts. Inputs and targets
    have the same length in the first window; later ones may read more inputs than they predict, and then
    only the last len(targets) outputs are scored.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")
    ids = list(ids)
    if not ids:
        return []
    first = min(max_len, len(ids))
    windows = [([prefix_id] + ids[: first - 1], ids[:first])]
    done = first
    while done < len(ids):
        end = done + min(max_len, len(ids) - done)
        windows.append((ids[max(end - max_len - 1, 0) : end - 1], ids[done:end]))
        done = end
    return windows


def bits_per_byte(model: nn.Module, ids: Sequence[int], text: str, prefix_id: int, max_len: int) -> float:
    """The model's loss on the token ids of `text`, every token predicted once (`rolling_windows`), summed in bits and
    divided by the number of UTF-8 bytes of `text`. `model` maps ids (1, T) to logits (1, T, V)."""
    total = 0.0  # nats
    device = next(model.parameters()).device
    model.eval()
    with torch.inference_mode():
        for inputs, targets in rolling_windows(ids, prefix_id, max_len):
            logits = model(torch.tensor([inputs], device=device))[0, -len(targets) :]  # (n, V): the scored outputs
            total += F.cross_entropy(logits.double(), torch.tensor(targets, device=device), reduction="sum").item()
    return total / math.log(2) / len(text.encode("utf-8"))


def report(results: Sequence[Result]) -> str:
    """A table of results: task, metric, items, mean and its 95% bootstrap interval."""
    rows = [("task", "metric", "items", "mean", "95% interval")]
    for r in results:
        low, high = r.interval()
        rows.append((r.task, r.metric, str(r.scores.numel()), f"{r.mean:.4f}", f"{low:.4f} to {high:.4f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def run_lm_eval(
    model: nn.Module,
    tokenizer,
    tasks: dict[str, dict],
    docs: Sequence[dict],
    batch_size: int = 32,
    add_bos_token: bool | None = None,
) -> dict:
    """Evaluate a Hugging Face causal language model with EleutherAI's lm-evaluation-harness (the `lm-eval` package,
    in the test extra), in this process, on tasks of our own.

    `tasks` maps each task's name to the fields of its YAML file (output_type, doc_to_text, metric_list, ...); every
    task reads `docs`, written as one JSON line each to a file beside the YAML files in a temporary folder (the
    dataset_path, data_files and test split are filled in here). `tokenizer` is a Hugging Face tokenizer
    (`tl.hf.to_hf_tokenizer` for the book's character models). Returns lm-eval's output: "results" per task, and
    "samples", every document's record (its requests' answers and its scores), in the documents' order.

    `add_bos_token` is lm-eval's own switch for how it encodes text: None leaves it to the tokenizer, and
    `to_hf_tokenizer`'s puts `<bos>` first, as the book's prompts have it. A rolling log-likelihood (bits per byte)
    wants False: the text then starts from lm-eval's prefix token alone (the tokenizer's `<bos>`), as
    `bits_per_byte` with `prefix_id` the `<bos>` id reads it, rather than predicting a `<bos>` as part of the text.
    """
    import json
    import tempfile
    from pathlib import Path

    import yaml
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    if not docs or not tasks:
        raise ValueError(f"run_lm_eval needs at least one task and one document, got {len(tasks)} and {len(docs)}")
    with tempfile.TemporaryDirectory() as folder:
        data = Path(folder) / "docs.jsonl"
        data.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
        for name, fields in tasks.items():
            task = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data)}},
                    "test_split": "test", **fields}  # fmt: skip
            (Path(folder) / f"{name}.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
        lm = HFLM(
            pretrained=model,
            tokenizer=tokenizer,
            batch_size=batch_size,
            max_length=getattr(model.config, "max_position_embeddings", None),
            add_bos_token=add_bos_token,
        )
        out = simple_evaluate(
            model=lm, tasks=list(tasks), task_manager=TaskManager(include_path=folder), log_samples=True
        )
    for name in tasks:
        out["samples"][name] = sorted(out["samples"][name], key=lambda record: record["doc_id"])
    return out
