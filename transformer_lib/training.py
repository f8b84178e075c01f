"""A plain training loop with a progress bar, the losses, and evaluation."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ._adamw import LeanAdamW

__all__ = [
    "History",
    "fit",
    "warmup_cosine",
    "noam_rate",
    "label_smoothed_cross_entropy",
    "smoothed_targets",
    "smoothing_floor",
    "seq2seq_loss",
    "lm_loss",
    "classification_loss",
    "exact_match",
    "classification_accuracy",
    "lm_eval_loss",
    "bigram_loss",
    "repeat_losses",
    "expect",
]


@dataclass
class History:
    """What `fit` saw: the training loss per step, evaluations, and the seconds spent."""

    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0


def label_smoothed_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, pad_id: int | None = None, smoothing: float = 0.0
) -> torch.Tensor:
    """Mean cross-entropy of logits (..., V) against targets (...), skipping pad_id, with label smoothing.

    Smoothing spreads `smoothing` of the target's probability mass uniformly over the vocabulary.
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(f"logits (..., V) and targets (...) disagree: {tuple(logits.shape)} vs {tuple(targets.shape)}")
    V = logits.shape[-1]
    return F.cross_entropy(
        logits.reshape(-1, V),  # (N, V)
        targets.reshape(-1),  # (N,)
        ignore_index=-100 if pad_id is None else pad_id,
        label_smoothing=smoothing,
    )


def seq2seq_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], smoothing: float = 0.1) -> torch.Tensor:
    """Teacher forcing: feed tgt[:, :-1], predict tgt[:, 1:]; batch = (src (B, S), tgt (B, T))."""
    src, tgt = batch
    logits = model(src, tgt[:, :-1])  # (B, T-1, V)
    return label_smoothed_cross_entropy(logits, tgt[:, 1:], model.pad_id, smoothing)


def lm_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Next-token cross-entropy; batch = (x (B, T), y (B, T)) with y = x shifted by one."""
    x, y = batch
    return label_smoothed_cross_entropy(model(x), y)


def classification_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Cross-entropy of class logits (B, C) against labels (B,)."""
    x, y = batch
    return F.cross_entropy(model(x), y)


def warmup_cosine(step: int, warmup: int, total: int, floor: float = 0.1) -> float:
    """The factor `fit` multiplies its learning rate by at `step` (0-based).

    Linear warm-up from 1/warmup to 1 over the first `warmup` steps, then a cosine decay from 1 to
    `floor` over the remaining `total - warmup` steps.
    """
    if warmup < 1 or total < 1:
        raise ValueError(f"warmup and total must be at least 1, got warmup={warmup}, total={total}")
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def noam_rate(step_num: int, d_model: int, warmup: int = 4000) -> float:
    """The 2017 paper's learning rate at step_num (1-based): d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    It rises linearly for `warmup` steps, peaks at step_num = warmup, then decays as 1/sqrt(step).
    """
    if step_num < 1:
        raise ValueError(f"step_num counts from 1, as in the paper; got {step_num}")
    return d_model**-0.5 * min(step_num**-0.5, step_num * warmup**-1.5)


def smoothed_targets(targets: torch.Tensor, vocab_size: int, smoothing: float) -> torch.Tensor:
    """The distribution label smoothing trains towards: targets (...) -> (..., V).

    As in F.cross_entropy(label_smoothing=...): (1 - smoothing) on the target plus smoothing / V on
    every class, the target included.
    """
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"smoothing must be in [0, 1], got {smoothing}")
    one_hot = F.one_hot(targets, vocab_size).float()  # (..., V)
    return (1.0 - smoothing) * one_hot + smoothing / vocab_size


def smoothing_floor(vocab_size: int, smoothing: float) -> float:
    """The lowest label-smoothed cross-entropy any model can reach: the entropy of the smoothed target.

    The target class gets p = 1 - smoothing + smoothing / V and each of the other V - 1 classes
    gets q = smoothing / V; the floor is -p log p - (V - 1) q log q (nats), reached when the
    model predicts exactly that distribution.
    """
    q = smoothing / vocab_size
    p = 1.0 - smoothing + q
    return -(p * math.log(p) if p > 0 else 0.0) - ((vocab_size - 1) * q * math.log(q) if q > 0 else 0.0)


def fit(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, tuple], torch.Tensor],
    batches: Iterable[tuple],
    steps: int,
    lr: float = 1e-3,
    warmup: int = 100,
    weight_decay: float = 0.01,
    clip_norm: float = 1.0,
    device: torch.device | str | None = None,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    eval_every: int = 0,
    progress: bool = True,
    desc: str = "training",
) -> History:
    """Train `model` with AdamW for exactly `steps` batches; return the History.

    loss_fn(model, batch) -> scalar loss. eval_fn(model) -> metrics, called every `eval_every`
    steps and at the end, with the model in eval mode. Batches are moved to `device`. The number
    of steps never depends on the clock, so a slow machine trains the same model as a fast one;
    History.seconds records how long it took.
    """
    from tqdm.auto import tqdm

    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    # torch.optim.AdamW's numbers, fused: one kernel for all parameters instead of a loop over them
    optimizer = LeanAdamW(
        model.parameters(), betas=(0.9, 0.98), weight_decay=weight_decay, fused=device.type in ("cpu", "cuda")
    )
    history = History()
    iterator: Iterator[tuple] = iter(batches)
    start = time.perf_counter()
    bar = tqdm(range(steps), desc=desc, disable=not progress, mininterval=0.5)

    def evaluate(step: int) -> None:
        model.eval()
        with torch.no_grad():
            metrics = eval_fn(model)
        model.train()
        history.eval_steps.append(step)
        history.evals.append(metrics)
        bar.set_postfix({k: round(v, 4) for k, v in metrics.items()})

    model.train()
    for step in bar:
        batch = tuple(t.to(device) for t in next(iterator))
        loss = loss_fn(model, batch)
        optimizer.zero_grad()
        loss.backward()
        if clip_norm:
            nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        optimizer.step(lr * warmup_cosine(step, warmup, steps))  # the rate torch's LambdaLR would set at this step
        history.steps.append(step)
        history.losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=round(history.losses[-1], 4))
        if eval_fn is not None and eval_every and step and step % eval_every == 0:
            evaluate(step)
    if eval_fn is not None:
        evaluate(history.steps[-1] if history.steps else 0)
    bar.close()
    model.eval()
    history.seconds = time.perf_counter() - start
    return history


def _strip(ids: list[int], eos_id: int, pad_id: int) -> list[int]:
    out = []
    for i in ids:
        if i == eos_id:
            break
        if i != pad_id:
            out.append(i)
    return out


@torch.inference_mode()  # returns a number: no autograd bookkeeping at all
def exact_match(
    model: nn.Module, src: torch.Tensor, tgt: torch.Tensor, bos_id: int, eos_id: int, batch_size: int = 512
) -> float:
    """Fraction of rows whose greedy output equals the target exactly; tgt rows are <bos> ... <eos> padded."""
    model.eval()
    device = next(model.parameters()).device
    pad_id = model.pad_id
    correct = 0
    for start in range(0, src.shape[0], batch_size):
        s = src[start : start + batch_size].to(device)
        t = tgt[start : start + batch_size].cpu()
        pred = model.greedy_decode(s, bos_id, eos_id, max_new_tokens=t.shape[1]).cpu()  # (b, 1 + n)
        for p, g in zip(pred[:, 1:].tolist(), t[:, 1:].tolist()):
            correct += _strip(p, eos_id, pad_id) == _strip(g, eos_id, pad_id)
    return correct / src.shape[0]


@torch.inference_mode()  # returns a number: no autograd bookkeeping at all
def classification_accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 512) -> float:
    """Fraction of rows of x (N, S) whose argmax class equals y (N,)."""
    model.eval()
    device = next(model.parameters()).device
    correct = 0
    for start in range(0, x.shape[0], batch_size):
        logits = model(x[start : start + batch_size].to(device))  # (b, C)
        correct += int((logits.argmax(-1).to(y.device) == y[start : start + batch_size]).sum())  # y on any device
    return correct / x.shape[0]


@torch.inference_mode()  # returns a number: no autograd bookkeeping at all
def lm_eval_loss(model: nn.Module, ids: torch.Tensor, block_size: int, batch_size: int = 16) -> float:
    """Mean next-token loss (nats) of a language model over a 1-D id stream, cut into disjoint windows.

    `batch_size` windows run at once; the number is the same for any batch size (up to rounding).
    """
    model.eval()
    device = next(model.parameters()).device
    n = (ids.numel() - 1) // block_size
    x = ids[: n * block_size].view(n, block_size)  # (n, block_size)
    y = ids[1 : n * block_size + 1].view(n, block_size)  # (n, block_size)
    total = 0.0
    for start in range(0, n, batch_size):
        xb, yb = x[start : start + batch_size].to(device), y[start : start + batch_size].to(device)
        total += label_smoothed_cross_entropy(model(xb), yb).item() * xb.shape[0]
    return total / n


def bigram_loss(train_ids: torch.Tensor, val_ids: torch.Tensor, vocab_size: int, alpha: float = 0.1) -> float:
    """Validation loss (nats) of a counted bigram model with add-alpha smoothing: the baseline to beat."""
    train_ids, val_ids = train_ids.cpu(), val_ids.cpu()  # counting is cheap; keep it on the CPU on any device
    counts = torch.full((vocab_size, vocab_size), alpha, dtype=torch.float64)  # (V, V)
    counts.index_put_(
        (train_ids[:-1], train_ids[1:]), torch.ones(train_ids.numel() - 1, dtype=torch.float64), accumulate=True
    )
    log_probs = (counts / counts.sum(dim=1, keepdim=True)).log()  # (V, V): row = previous token
    return float(-log_probs[val_ids[:-1], val_ids[1:]].mean())


@torch.inference_mode()
def repeat_losses(model: nn.Module, seqs: torch.Tensor) -> tuple[float, float]:
    """A language model's mean next-token loss (nats) on each copy of blocks shown twice: seqs (B, 2n).

    Returns (first, second): the loss on predicting tokens 2 .. n of the first copy, which nothing
    before them foretells, and on tokens 2 .. n of the second copy, which the first copy does. The
    first token of each copy is left out of both: it follows nothing the model has seen.
    """
    if seqs.dim() != 2 or seqs.shape[1] % 2 or seqs.shape[1] < 4:
        raise ValueError(f"seqs must be (B, 2n) blocks shown twice with n >= 2, got shape {tuple(seqs.shape)}")
    model.eval()
    n = seqs.shape[1] // 2
    seqs = seqs.to(next(model.parameters()).device)
    logits = model(seqs[:, :-1])  # (B, 2n - 1, V): the prediction of tokens 1 .. 2n - 1
    loss = F.cross_entropy(logits.transpose(1, 2), seqs[:, 1:], reduction="none")  # (B, 2n - 1)
    return float(loss[:, : n - 1].mean()), float(loss[:, n:].mean())  # tokens 1 .. n - 1, and n + 1 .. 2n - 1


def expect(what: str, value: float, band: tuple[float, float], *, laptop: str, check: str) -> float:
    """Set a trained result beside the band a learner should expect, and say how long the run takes.

    Prints ``what``, its value, the band and the run's time on a laptop CPU (``laptop``, e.g.
    "4 s"); raises an AssertionError that says what to ``check`` when the value falls outside
    the band. The band holds on every machine and CPU kernel the book's tests run on, with a
    margin: a value outside it means something differs from the book's run, not bad luck.
    Returns the value.
    """
    low, high = band
    if not low <= high:
        raise ValueError(f"band must be (low, high) with low <= high, got {band!r}")
    value = float(value)
    print(f"{what}: {value:.3g} (expected {low:g} to {high:g}; training takes about {laptop} on a laptop CPU)")
    if not low <= value <= high:  # NaN falls outside too
        raise AssertionError(
            f"{what} is {value:.4g}, outside the band {low:g} to {high:g} that this run reaches. Check {check}."
        )
    return value
