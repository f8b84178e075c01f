"""Checkers for the exercises of the chapter "Attention at scale" (the online softmax by hand, speculative decoding's
acceptance rule and residual by hand, and the loss at each position of a model read at some length)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .. import flash, speculative
from ..config import TransformerConfig
from ..models import DecoderOnlyLM
from ._common import CORRECT, Wrong, aten_ops, checker, no, one_thread, refusing, run

__all__ = ["check_online_softmax", "check_acceptance_and_residual", "check_position_losses"]

# ---- the online softmax (by hand) --------------------------------------------------------------------------------

_SOFTMAX_OPS = aten_ops("_softmax", "_log_softmax", "_safe_softmax", "logsumexp")  # every spelling of a softmax
_SOFTMAX_LIBRARY = "a softmax of the library (torch.softmax, F.softmax, .softmax, logsumexp or flash.online_softmax)"
# (rows N, columns T, block, dtype, the scores' spread, seed, rows rising): blocks that divide T and do not, of one
# column and wider than the row; scores that overflow an exponential in float32 (above 88) and float64 (above 709);
# rows whose scores rise from left to right, so that the maximum rises in every block
_SOFTMAX_CASES = (
    (3, 20, 7, torch.float64, 4.0, 0, False),
    (4, 64, 16, torch.float32, 3.0, 1, True),
    (2, 50, 1, torch.float64, 8.0, 2, True),
    (5, 33, 100, torch.float32, 2.0, 3, False),
    (2, 40, 8, torch.float64, 900.0, 4, True),
    (3, 17, 5, torch.float32, 120.0, 5, True),
)


def _scores(n, t, block, dtype, spread, seed, rising) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, t, generator=g, dtype=torch.float64) * spread  # (n, t)
    if rising:
        s = s.sort(-1).values  # each row's maximum comes last, so every block raises it
    return s.to(dtype)


def _blocked(s: torch.Tensor, block: int, *, rescale=True, update=True, flip=False) -> torch.Tensor:
    """The reference (defaults) and its mistakes: a running maximum and sum, a block at a time."""
    m = torch.full((s.shape[0], 1), float("-inf"), dtype=s.dtype)
    total = torch.zeros(s.shape[0], 1, dtype=s.dtype)
    for start in range(0, s.shape[1], block):
        chunk = s[:, start : start + block]
        new_m = torch.maximum(m, chunk.max(-1, keepdim=True).values) if update or start == 0 else m
        shrink = torch.exp(new_m - m) if flip else torch.exp(m - new_m)
        shrink = torch.where(torch.isinf(m), torch.zeros_like(m), shrink)  # nothing summed yet
        total = (total * shrink if rescale else total) + torch.exp(chunk - new_m).sum(-1, keepdim=True)
        m = new_m
    return torch.exp(s - m) / total


def _per_block(s: torch.Tensor, block: int) -> torch.Tensor:
    return torch.cat([torch.softmax(s[:, i : i + block], -1) for i in range(0, s.shape[1], block)], -1)


_SOFTMAX_MISTAKES: tuple[tuple[str, Callable, str], ...] = (
    (
        "no-max",
        lambda s, b: torch.exp(s) / torch.exp(s).sum(-1, keepdim=True),
        "you did not subtract the maximum: e^s overflows for large scores (above about 88 in float32, 709 in "
        "float64) and the weights become nan; subtract the running maximum in every exponential",
    ),
    (
        "no-rescale",
        lambda s, b: _blocked(s, b, rescale=False),
        "the running sum was not rescaled when the maximum rose: multiply what was summed so far by e^(m - m_new) "
        "before adding the new block's terms",
    ),
    (
        "rescale-inverted",
        lambda s, b: _blocked(s, b, flip=True),
        "you rescaled the sum by e^(m_new - m), the wrong way round: each old term e^(s - m) must become "
        "e^(s - m_new), so multiply by e^(m - m_new), a number at most 1",
    ),
    (
        "first-block-max",
        lambda s, b: _blocked(s, b, update=False),
        "you kept the first block's maximum for the whole row: when a later block holds a larger score, its "
        "exponential overflows; update the maximum with every block (and rescale the sum)",
    ),
    (
        "per-block",
        _per_block,
        "each block was normalised on its own, so each block's weights sum to 1: the sum must run over the whole "
        "row, and only then divide",
    ),
    (
        "wrong-axis",
        lambda s, b: torch.softmax(s, 0),
        "the softmax ran down the columns: each row (one query's scores) is a distribution, so read along the last "
        "axis",
    ),
)


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    tol = 1e-10 if want.dtype == torch.float64 else 1e-5
    return got.shape == want.shape and torch.allclose(got.to(want.dtype), want, rtol=tol, atol=tol, equal_nan=True)


@checker
def check_online_softmax(fn: Callable) -> str:
    """fn(scores (N, T), block) -> the softmax of each row (N, T), read `block` columns at a time with a running
    maximum and a rescaled running sum; by hand (no library softmax or logsumexp)."""
    cases = []
    for case in _SOFTMAX_CASES:
        n, t, block, dtype, spread, _, rising = case
        name = f"{n} rows of {t} scores in blocks of {block}, {dtype}, scores up to about {spread:g}"
        cases.append((_scores(*case), block, name + (", rising along each row" if rising else "")))
    gots = []
    for s, block, name in cases:
        got = run(refusing(fn, ops=_SOFTMAX_OPS), s.clone(), block, case=name, forbidden=(flash.online_softmax,),
                  names=_SOFTMAX_LIBRARY)  # fmt: skip
        if not isinstance(got, torch.Tensor):
            raise Wrong("not-a-tensor", f"On {name} you returned a {type(got).__name__}: return the weights, a tensor.")
        if got.shape != s.shape:
            raise Wrong("shape", f"On {name} expected shape {tuple(s.shape)} (one weight per score), got "
                        f"{tuple(got.shape)}.")  # fmt: skip
        if not got.is_floating_point():
            raise Wrong("dtype", f"On {name} the weights came back as {got.dtype}: weights are fractions.")
        gots.append(got.detach().cpu())
    wants = [_blocked(s, block) for s, block, _ in cases]
    if all(_close(got, want) for got, want in zip(gots, wants)):
        return CORRECT
    first = next(i for i, (got, want) in enumerate(zip(gots, wants)) if not _close(got, want))
    s, block, name = cases[first]
    bad = int((~torch.isclose(gots[first].to(wants[first].dtype), wants[first], equal_nan=True)).sum())
    on = f"On {name}, {bad} of {s.numel()} weights differ from the softmax"
    for mistake, wrong, hint in _SOFTMAX_MISTAKES:  # named only when the answer follows it on every case
        if all(_close(got, wrong(s, b)) for got, (s, b, _) in zip(gots, cases)):
            return no(mistake, f"{on}: {hint}.")
    if any(not torch.isfinite(got).all() for got in gots):
        return no("overflow", f"{on}, and some are nan or infinite: keep every exponential's argument at most 0 by "
                  "subtracting the running maximum, and rescale the sum whenever the maximum rises.")  # fmt: skip
    hint = ("keep per row a running maximum m and sum l; for each block, m' = max(m, the block's maximum), "
            "l = l e^(m - m') + the block's sum of e^(s - m'); at the end, weights e^(s - m) / l")  # fmt: skip
    return no("other", f"{on}: {hint}.")


# ---- speculative decoding's acceptance rule and residual (by hand) -----------------------------------------------

_RULE_LIBRARY = "speculative.acceptance or speculative.residual"
# (shape, dtype, seed): one distribution, a batch, a batch of batches; float32 and float64
_RULE_CASES = (((9,), torch.float64, 0), ((4, 13), torch.float32, 1), ((2, 3, 6), torch.float64, 2),
               ((5, 40), torch.float64, 3))  # fmt: skip


def _distributions(shape, dtype, seed) -> tuple[torch.Tensor, torch.Tensor]:
    """p and q over the last axis, with tokens the draft never proposes (q = 0), tokens the target never writes
    (p = 0), and in a batch one row where the two are equal."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(shape, generator=g, dtype=torch.float64) ** 2
    q = torch.rand(shape, generator=g, dtype=torch.float64)
    q[..., 1] = 0.0  # the draft never proposes token 1
    p[..., 2] = 0.0  # the target never writes token 2
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    if len(shape) > 1:
        q.view(-1, shape[-1])[0] = p.view(-1, shape[-1])[0]  # one row where draft and target agree
    return p.to(dtype), q.to(dtype)


def _rule(p, q, *, inverted=False, cap=True, zero_q=1.0, residual="right"):
    """The reference (defaults) and its mistakes: (acceptance, residual)."""
    ratio = q / p if inverted else p / q
    keep = ratio.clamp(max=1) if cap else ratio
    keep = torch.where(q > 0, keep, torch.full_like(keep, zero_q))
    if residual == "p":
        return keep, p
    left = (
        (p - q).abs() if residual == "abs" else (q - p).clamp_min(0) if residual == "flipped" else (p - q).clamp_min(0)
    )
    if residual == "raw":
        return keep, left
    total = left.sum(-1, keepdim=True)
    return keep, torch.where(total > 0, left / torch.where(total > 0, total, torch.ones_like(total)), p)


_RULE_MISTAKES: tuple[tuple[str, Callable, str], ...] = (
    (
        "inverted",
        lambda p, q: _rule(p, q, inverted=True),
        "you kept tokens with probability q / p: the rule is "
        "min(1, p / q), so that a token the draft proposes too often (q > p) is kept only in the proportion p / q",
    ),
    (
        "uncapped",
        lambda p, q: _rule(p, q, cap=False),
        "the chance of keeping a token went above 1: cap p / q at 1, min(1, p / q)",
    ),
    (
        "residual-is-p",
        lambda p, q: _rule(p, q, residual="p"),
        "a rejected token was redrawn from p itself: that "
        "counts the tokens the draft proposed too often twice; redraw from max(0, p - q), renormalised",
    ),
    (
        "residual-unnormalised",
        lambda p, q: _rule(p, q, residual="raw"),
        "the residual max(0, p - q) was not "
        "renormalised: divide it by its sum over the vocabulary, so that it is a distribution",
    ),
    (
        "residual-flipped",
        lambda p, q: _rule(p, q, residual="flipped"),
        "you redrew from max(0, q - p), what the "
        "draft has too much of: redraw from max(0, p - q), what the target has that the draft gave too little",
    ),
    (
        "residual-abs",
        lambda p, q: _rule(p, q, residual="abs"),
        "you redrew from |p - q|: only where p exceeds q, max(0, p - q), renormalised",
    ),
)


def _rule_close(got, want) -> bool:
    tol = 1e-10 if want.dtype == torch.float64 else 1e-5
    return (
        isinstance(got, torch.Tensor)
        and got.shape == want.shape
        and torch.allclose(got.detach().cpu().to(want.dtype), want, rtol=tol, atol=tol, equal_nan=True)
    )


@checker
def check_acceptance_and_residual(fn: Callable) -> str:
    """fn(p (..., V), q (..., V)) -> (the chance of keeping each draft token, min(1, p / q) and 1 where q = 0; the
    residual, max(0, p - q) renormalised, p where p = q); by hand (not speculative's functions)."""
    cases = [(*_distributions(*case), f"distributions of shape {case[0]}, {case[1]}") for case in _RULE_CASES]
    gots = []
    for p, q, name in cases:
        got = run(fn, p.clone(), q.clone(), case=name, forbidden=(speculative.acceptance, speculative.residual),
                  names=_RULE_LIBRARY)  # fmt: skip
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            raise Wrong("not-a-pair", f"On {name} you returned a {type(got).__name__}: return two tensors, "
                        "(acceptance, residual).")  # fmt: skip
        for what, t in zip(("acceptance", "residual"), got):
            if not isinstance(t, torch.Tensor) or t.shape != p.shape:
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise Wrong("shape", f"On {name} the {what} should have p's shape {tuple(p.shape)}, got {shape}.")
        gots.append(tuple(got))
    wants = [_rule(p, q) for p, q, _ in cases]
    keep_ok = [_rule_close(got[0], want[0]) for got, want in zip(gots, wants)]
    left_ok = [_rule_close(got[1], want[1]) for got, want in zip(gots, wants)]
    if all(keep_ok) and all(left_ok):
        return CORRECT
    first = next(i for i in range(len(cases)) if not (keep_ok[i] and left_ok[i]))
    p, q, name = cases[first]
    on = f"On {name} your {'acceptance' if not keep_ok[first] else 'residual'} differs from the rule's"
    for mistake, wrong, hint in _RULE_MISTAKES:  # named only when the answer follows it on every case
        if all(_rule_close(g[0], w[0]) and _rule_close(g[1], w[1])
               for g, w in zip(gots, (wrong(p, q) for p, q, _ in cases))):  # fmt: skip
            return no(mistake, f"{on}: {hint}.")
    if all(left_ok):
        zero = gots[first][0][q == 0]
        if zero.numel() and not torch.allclose(zero.to(torch.float64), torch.ones_like(zero, dtype=torch.float64)):
            return no("zero-q", f"{on} where q = 0 (a token the draft never proposes): give it 1 there, not "
                      f"{float(zero.flatten()[0]):g}; guard the division, for instance with torch.where.")  # fmt: skip
    if all(keep_ok):
        same = (p == q).all(-1)  # the rows where the draft is the target
        if same.any() and not torch.isfinite(gots[first][1][same]).all():
            return no("no-fallback", f"{on} where p = q: max(0, p - q) is all zeros there and 0 / 0 is nan; return "
                      "p in such a row (nothing is ever rejected, so any distribution would do).")  # fmt: skip
    return no("other", f"{on}: acceptance = min(1, p / q), 1 where q = 0; residual = max(0, p - q) divided by its "
              "sum over the last axis, or p where that sum is 0.")  # fmt: skip


# ---- the loss at each position (experiment) ----------------------------------------------------------------------

# (vocab, d_model, layers, length, windows, scaling, ids, seed): rotary models of two sizes, read at their length,
# and at twice the trained length with NTK-aware or YaRN scaling, on random ids of several lengths
_LOSS_CASES = (
    (23, 16, 1, 24, 5, None, 300, 0),
    (31, 24, 2, 40, 3, "yarn", 400, 1),
    (17, 16, 2, 16, 8, "ntk", 250, 2),
    (29, 16, 1, 33, 4, "yarn", 180, 3),
)


def _loss_model(vocab, d, layers, length, scaling, seed) -> DecoderOnlyLM:
    """A small random rotary model with dropout, left in training mode as a freshly built model is."""
    scaled = {} if scaling is None else dict(rope_scaling=scaling, rope_factor=2.0, rope_original_len=length // 2)
    config = TransformerConfig(vocab_size=vocab, d_model=d, num_heads=2, num_layers=layers, d_ff=2 * d, dropout=0.1,
                               max_len=length, positional="rope", norm_first=True, **scaled)  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = DecoderOnlyLM(config)
    for p in model.parameters():
        p.data.mul_(3.0)  # weights large enough that the positions move the losses
    return model.train()


@torch.no_grad()
def _position_losses(model, ids, length, windows, *, shift=1, spread="even", reduce="mean", base=None) -> torch.Tensor:
    """The reference (defaults) and its mistakes: the loss at each position over `windows` windows."""
    if spread == "even":
        starts = torch.linspace(0, len(ids) - length - 1, windows).long()
    else:  # side by side from the start
        starts = torch.arange(windows) * length
    batch = torch.stack([ids[s : s + length + 1] for s in starts])  # (windows, length + 1)
    was = model.training
    model.eval()
    logits = model(batch[:, :-1])  # (windows, length, V)
    model.train(was)
    targets = batch[:, :-1] if shift == 0 else batch[:, 1:]
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (windows, length)
    if base is not None:
        losses = losses / torch.log(torch.tensor(base, dtype=losses.dtype))
    return losses.sum(0) if reduce == "sum" else losses.mean(0)


_LOSS_MISTAKES: tuple[tuple[str, dict, str], ...] = (
    (
        "unshifted",
        dict(shift=0),
        "each position was scored on its own input token: the target at position t is "
        "the id at t + 1 (inputs window[:-1], targets window[1:])",
    ),
    (
        "summed",
        dict(reduce="sum"),
        "you summed over the windows: average them, so the loss does not grow with the number of windows",
    ),
    (
        "side-by-side",
        dict(spread="side"),
        "your windows were cut side by side from the start: start them at "
        "torch.linspace(0, len(ids) - length - 1, windows).long(), spread over all the ids",
    ),
    ("bits", dict(base=2.0), "you returned bits: the loss is in nats, F.cross_entropy's natural log"),
)


@checker
def check_position_losses(fn: Callable) -> str:
    """fn(model, ids (M,), length, windows) -> (length,): the next-token loss at each position averaged over
    `windows` windows of length + 1 ids starting at torch.linspace(0, M - length - 1, windows).long(), the model in
    eval mode; measured on small rotary models and random ids the learner has not seen, scaled and not."""
    names, models, inputs = [], [], []
    for vocab, d, layers, length, windows, scaling, n, seed in _LOSS_CASES:
        names.append(f"a {layers}-layer rotary model of width {d}, {windows} windows of {length}"
                     + ("" if scaling is None else f", {scaling} scaling"))  # fmt: skip
        models.append(_loss_model(vocab, d, layers, length, scaling, seed))
        inputs.append((torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(100 + seed)), length,
                       windows))  # fmt: skip
    with one_thread():
        wants = [_position_losses(m, *x) for m, x in zip(models, inputs)]
        gots = []
        for model, (ids, length, windows), name in zip(models, inputs, names):
            got = run(fn, model.train(), ids.clone(), length, windows, case=name)
            if not isinstance(got, torch.Tensor):
                raise Wrong("not-a-tensor", f"On {name} you returned a {type(got).__name__}: return the losses, a "
                            "tensor with one number per position.")  # fmt: skip
            if got.shape != (length,):
                raise Wrong("shape", f"On {name} expected shape ({length},), one loss per position, got "
                            f"{tuple(got.shape)}: average over the windows only (windows of length + 1 ids give "
                            "length inputs and length targets).")  # fmt: skip
            gots.append(got.detach().cpu().double())
        again = run(fn, models[0].train(), inputs[0][0].clone(), *inputs[0][1:], case=f"{names[0]}, again")
        if (
            isinstance(again, torch.Tensor)
            and again.shape == gots[0].shape
            and not torch.allclose(again.detach().cpu().double(), gots[0], atol=1e-9)
        ):
            raise Wrong("irreproducible", f"On {names[0]} two calls gave different losses: the models come in "
                        "training mode, so put the model in eval mode (model.eval()) to switch dropout off, and take "
                        "the windows at the evenly spaced starts, not at random.")  # fmt: skip
    close = [torch.allclose(g, w.double(), rtol=1e-4, atol=1e-5) for g, w in zip(gots, wants)]
    if all(close):
        return CORRECT
    first = close.index(False)
    on = (f"On {names[first]} your losses differ from the measurement (mean {float(gots[first].mean()):.4f} "
          f"against {float(wants[first].mean()):.4f})")  # fmt: skip
    for mistake, how, hint in _LOSS_MISTAKES:  # named only when the answer follows it on every case
        if all(torch.allclose(g, _position_losses(m, *x, **how).double(), rtol=1e-4, atol=1e-5)
               for g, m, x in zip(gots, models, inputs)):  # fmt: skip
            return no(mistake, f"{on}: {hint}.")
    if len({round(float(g.mean()), 6) for g in gots}) == 1:
        return no("constant", f"{on}: every model gave the same numbers; measure the model and ids given.")
    return no("other", f"{on}: stack the windows ids[s : s + length + 1] for s in torch.linspace(0, len(ids) - "
              "length - 1, windows).long(), run the model in eval mode on window[:, :-1], take F.cross_entropy "
              "against window[:, 1:] with reduction='none', and average over the windows.")  # fmt: skip
