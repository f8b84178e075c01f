"""Checkers for the exercises of the chapter "From a language model to an assistant" (SFT, DPO, GRPO)."""

from __future__ import annotations

import copy
import functools
import math
import random
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .. import alignment, chat
from ..chat import ChatTokenizer
from ..tasks import pad_sequences
from ..tokenization import CharTokenizer
from ._common import CORRECT, Wrong, _seeded, checker, measure, no, one_thread, run
from ._match import expect_tensor, same

__all__ = ["check_answer_mask", "check_dpo_loss", "check_group_advantages", "check_kl_drift"]

# ---- the chat template and its answer mask (by hand) ------------------------------------------------

_CHAPTER_IDS = (84, 85, 86)  # <|user|>, <|assistant|>, <|end|> of the chapter's tokenizer: typed in, they fail here
_LOWER = "abcdefghijklmnopqrstuvwxyz"


@functools.cache
def _tokenizers() -> tuple[ChatTokenizer, ...]:
    """Chat tokenizers whose special ids differ: (41, 42, 43), (75, 76, 77), (107, 108, 109) and the chapter's."""
    small = CharTokenizer.from_texts([_LOWER + " 0123456789"])
    mixed = CharTokenizer.from_texts([_LOWER + _LOWER.upper() + " 0123456789.,;:!?'-"])
    wide = CharTokenizer.from_texts([_LOWER + _LOWER.upper() + " 0123456789.,;:!?'-()[]{}<>|/@#$%^&*+=~_éèêàçôûüαβγ"])
    return ChatTokenizer(small), ChatTokenizer(mixed), ChatTokenizer(wide), chat.chat_tokenizer()


# (which tokenizer, prompt, answer): the three tasks, a long exchange with the chapter's tokenizer, an empty answer,
# a one-letter prompt and an answer with spaces
_MASK_CASES = (
    (0, "reverse night", "thgin"),
    (1, "shout gyve", "GYVE"),
    (2, "count redress", "7"),
    (3, "reverse a longer line, of words", "sdrow fo ,enil regnol a esrever"),
    (1, "say nothing at all", ""),
    (2, "a", "b c d"),
)
_ENCODE_CHAT = "tok.encode_chat (chat.chat_batch calls it)"
_READ = "tok.user_id, tok.assistant_id and tok.end_id"
_MASK_HINTS = {
    "prompt-included": "your mask is 1 on the prompt too, so the model would be trained to write the user's line: "
    "0 on <|user|>, the prompt and <|assistant|>, 1 on the answer and its <|end|>.",
    "inverted": "your mask is the other way round: 1 on the answer and its <|end|>, 0 on <|user|>, the prompt and "
    "<|assistant|>.",
    "end-left-out": "your mask leaves out <|end|>: it is 1 there too, or the model never learns to stop.",
    "assistant-included": "your mask is 1 on <|assistant|>: that token is the template's, written before the answer "
    "starts; only the answer and its <|end|> get 1.",
    "shifted": "your mask is shifted by one position. It marks the ids themselves, 1 where ids[t] is an answer id "
    "or <|end|>; lining it up with the targets happens later, in the loss (mask[:, 1:]).",
}


def _ints(x, what: str, case: str) -> list[int]:
    """x (a list, a tuple or a 1-D tensor of ints; a mask may hold bools or 0.0 / 1.0) as a list of ints."""
    if isinstance(x, torch.Tensor) or hasattr(x, "ndim") and hasattr(x, "tolist"):  # a tensor or a NumPy array
        if x.ndim != 1:
            hint = f"return one exchange's {what}, a list (or a 1-D tensor), not a batch"
            raise Wrong("shape", f"On {case}, your {what} has shape {tuple(x.shape)}: {hint}.")
        x = x.tolist()
    if not isinstance(x, (list, tuple)):
        raise Wrong("not-a-list", f"On {case}, you returned the {what} as a {type(x).__name__}: return a list of ints.")
    out = []
    for v in x:
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = v.item()
        if isinstance(v, float) and what == "mask" and v.is_integer():
            v = int(v)
        if isinstance(v, float):
            raise Wrong("dtype", f"On {case}, your {what} holds the float {v!r}: {what} are whole numbers (ints).")
        try:
            out.append(int(v.__index__()))  # an int, a bool (a mask of bools is fine) or a NumPy integer
        except (AttributeError, TypeError):
            raise Wrong("not-a-list", f"On {case}, your {what} holds {v!r}: return a list of ints.") from None
    return out


def _exchange(got, case: str) -> tuple[list[int], list[int]]:
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        hint = f"Return the pair (ids, mask); on {case} your answer returned a {type(got).__name__}"
        raise Wrong("not-a-pair", hint + (f" of length {len(got)}." if isinstance(got, (tuple, list)) else "."))
    return _ints(got[0], "ids", case), _ints(got[1], "mask", case)


def _specials(tok: ChatTokenizer) -> tuple[int, int, int]:
    return tok.user_id, tok.assistant_id, tok.end_id


def _judge_ids(ids: list[int], tok: ChatTokenizer, prompt: str, answer: str, want: list[int], case: str) -> None:
    """Raise the verdict of the mistake the ids show: specials of another tokenizer, no <|end|>, the template's
    tokens written as text or misplaced."""
    if ids == want:
        return
    render = f"expected {tok.render(want)!r}, ids {want}"
    specials = _specials(tok)
    if len(ids) == len(want) and all(g == w or w in specials for g, w in zip(ids, want)):  # only specials differ
        wrong = sorted({g for g, w in zip(ids, want) if g != w})
        if set(wrong) <= set(_CHAPTER_IDS):
            hint = f"you wrote the chapter tokenizer's ids {wrong}; this tokenizer's are {list(specials)}"
            raise Wrong("hard-coded-ids", f"On {case}: {hint}. Read them from {_READ}.")
        hint = f"the template's tokens have the ids {list(specials)} here, you wrote {wrong}"
        raise Wrong("special-ids", f"On {case}: {hint}. Read them from {_READ}.")
    if ids == want[:-1]:
        if answer == "":
            hint = "an empty answer is still an answer: the model must learn to stop at once, so it is <|end|> alone"
            raise Wrong("empty-answer", f"On {case}, your ids end at <|assistant|>: {hint} ({render}).")
        hint = "the answer ends with <|end|> (tok.end_id): without it the model never learns to stop"
        raise Wrong("no-end", f"On {case}, your ids stop after the answer: {hint}.")
    if ids == tok.encode("<|user|>" + prompt + "<|assistant|>" + answer + "<|end|>"):
        hint = "you encoded the template's tokens as text, character by character: each is one id of its own"
        raise Wrong("specials-as-text", f"On {case}: {hint}, {_READ}.")
    if ids == [tok.user_id, *tok.encode(answer), tok.assistant_id, *tok.encode(prompt), tok.end_id]:
        hint = "the prompt and the answer are swapped: the prompt goes after <|user|>, the answer after <|assistant|>"
        raise Wrong("swapped", f"On {case}: {hint} ({render}).")
    text = [i for i in ids if i not in specials]
    if text == tok.encode(prompt) + tok.encode(answer):
        hint = "the prompt's and the answer's ids are right, but the template's tokens are missing or misplaced"
        raise Wrong("template", f"On {case}: {hint}: {render}.")
    raise Wrong("ids", f"On {case}, your ids are {ids}: {render}.")


def _mask_mistakes(want: list[int], prompt_length: int) -> Iterator[tuple[list[int], str]]:
    """(mask, id) of each classic mistake; prompt_length: the prompt's ids, between <|user|> and <|assistant|>."""
    n, assistant = len(want), prompt_length + 1
    yield [1] * n, "prompt-included"
    yield [1 - m for m in want], "inverted"
    yield want[:-1] + [0], "end-left-out"
    yield [1 if i == assistant else m for i, m in enumerate(want)], "assistant-included"
    yield want[1:] + [0], "shifted"
    yield [0] + want[:-1], "shifted"


def _judge_mask(mask: list[int], want: list[int], prompt_length: int, case: str) -> None:
    if mask == want:
        return
    if len(mask) != len(want):
        hint = "one mask entry per id"
        raise Wrong("lengths", f"On {case}, your mask has {len(mask)} entries for {len(want)} ids: {hint}.")
    if set(mask) - {0, 1}:
        raise Wrong("not-binary", f"On {case}, your mask holds {sorted(set(mask) - {0, 1})}: use 1 and 0 only.")
    for wrong, mistake in _mask_mistakes(want, prompt_length):
        if mask == wrong and wrong != want:
            raise Wrong(mistake, f"On {case}: {_MASK_HINTS[mistake]} Expected {want}, got {mask}.")
    prompt = slice(1, prompt_length + 1)
    if mask[prompt_length + 2 :] == want[prompt_length + 2 :] and any(mask[prompt]):
        raise Wrong("prompt-included", f"On {case}: {_MASK_HINTS['prompt-included']} Expected {want}, got {mask}.")
    hint = "1 on the answer's ids and its <|end|>, 0 on <|user|>, the prompt and <|assistant|>"
    raise Wrong("other", f"On {case}, expected the mask {want}, got {mask}: {hint}.")


@checker
def check_answer_mask(fn: Callable) -> str:
    """fn(tok, prompt, answer) -> (ids, mask): <|user|> prompt <|assistant|> answer <|end|>, the mask 1 on the
    answer's ids and its <|end|> and 0 elsewhere (lists of ints, or 1-D tensors; a mask of bools too); by hand."""
    toks = _tokenizers()
    cases, gots = [], []
    for which, prompt, answer in _MASK_CASES:
        tok = copy.deepcopy(toks[which])
        before = (*_specials(tok), list(tok.base.itos))
        case = f"prompt {prompt!r}, answer {answer!r} and a tokenizer whose special ids are {list(_specials(tok))}"
        got = run(fn, tok, prompt, answer, case=case, forbidden=(ChatTokenizer.encode_chat,), names=_ENCODE_CHAT)
        if (*_specials(tok), list(tok.base.itos)) != before:
            hint = "your code changed the tokenizer it was given: read its ids, change nothing"
            raise Wrong("in-place", f"On {case}, {hint}.")
        cases.append((tok, prompt, answer, case))
        gots.append(_exchange(got, case))
    if all(got == gots[0] for got in gots):
        hint = "build the ids from the tokenizer, the prompt and the answer you are given"
        return no("constant", f"Your function returns {gots[0][0]} and {gots[0][1]} for every exchange: {hint}.")
    for (tok, prompt, answer, case), (ids, mask) in zip(cases, gots):
        want_ids, want_mask = tok.encode_chat(prompt, answer)
        _judge_ids(ids, tok, prompt, answer, want_ids, case)
        _judge_mask(mask, want_mask, len(tok.encode(prompt)), case)
    return CORRECT


# ---- DPO's loss -------------------------------------------------------------------------------------

# (pairs, beta, how far apart the log-probabilities spread, how far the policy is from the reference): betas from
# 0.03 to 2, one pair to a dozen; the last case's margins are hundreds of nats, so log(sigmoid(x)) underflows: in
# float32 below about -100, in float64 below about -745 (the -900)
_DPO_CASES = ((8, 0.1, 30.0, 2.0), (5, 0.5, 12.0, 1.0), (13, 0.03, 60.0, 5.0), (3, 2.0, 8.0, 3.0), (1, 0.2, 20.0, 4.0))
_DPO_EXTREME = (1.0, (-250.0, 180.0, -140.0, 300.0, -900.0, -120.0, 5.0))  # beta, each pair's difference of margins
_DPO_HINTS = {
    "swapped": "your loss rewards the rejected answer: log-sigmoid's argument is beta * (chosen margin - rejected "
    "margin), each margin the policy's log-probability minus the reference's. Chosen and rejected swapped, margins "
    "taken as reference minus policy, or softplus(x) written for softplus(-x), all give this.",
    "sign": "your loss is negative: DPO's loss is minus the mean log-sigmoid, -F.logsigmoid(...).mean().",
    "no-beta": "beta is missing: multiply the difference of the margins by beta, inside the log-sigmoid.",
    "beta-outside": "beta goes inside the log-sigmoid, multiplying the difference of the margins, not outside it.",
    "beta-divides": "you divided by beta: multiply the difference of the margins by beta.",
    "no-reference": "the reference is missing: each margin is the policy's log-probability minus the reference's.",
    "margin-sign": "one margin is the wrong way round: both are policy minus reference (policy_chosen - "
    "reference_chosen, and policy_rejected - reference_rejected).",
    "sum": "that is the sum over the pairs: take their mean.",
    "no-log": "you averaged sigmoid itself: the loss is minus the log of the sigmoid, -F.logsigmoid(x).",
    "log-of-mean": "that is the log of the mean sigmoid: take the log-sigmoid of each pair, then the mean.",
    "mean-inside": "you averaged the margins first: take the log-sigmoid of each pair, then the mean.",
}
_NO_GRADIENT = "your loss is a new tensor, cut from the policy's log-probabilities (torch.tensor(loss.item()), or "
_NO_GRADIENT += ".detach().requires_grad_()): return the loss computed from them, without .item() or .detach(), so "
_NO_GRADIENT += "that loss.backward() reaches the policy"


def _dpo_case(g: torch.Generator, B: int, spread: float, gap: float) -> tuple[torch.Tensor, ...]:
    """(policy_chosen, policy_rejected, reference_chosen, reference_rejected), each (B,): answers' log-probabilities."""
    chosen, rejected = (-1 - torch.rand(B, generator=g) * spread for _ in range(2))
    return chosen, rejected, chosen + torch.randn(B, generator=g) * gap, rejected + torch.randn(B, generator=g) * gap


def _dpo_extreme(g: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Pairs whose margins differ by hundreds of nats: the reference far less sure of one answer than the policy.
    Every log-probability is below 0: a positive difference lowers the reference's chosen one, a negative one the
    reference's rejected one."""
    diff = torch.tensor(_DPO_EXTREME[1])  # (B,): chosen margin - rejected margin
    chosen, rejected = (-1 - torch.rand(len(diff), generator=g) * 20 for _ in range(2))
    return chosen, rejected, chosen - diff.clamp(min=0), rejected - (-diff).clamp(min=0)


def _dpo_gradient(pc, pr, rc, rr, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The right loss's gradients with respect to policy_chosen and policy_rejected, (B,) each, in float64."""
    policy = [t.detach().double().requires_grad_() for t in (pc, pr)]
    with torch.enable_grad():
        loss = -F.logsigmoid(beta * ((policy[0] - rc.double()) - (policy[1] - rr.double()))).mean()
        return torch.autograd.grad(loss, policy)


def _dpo_losses(pc, pr, rc, rr, beta: float) -> tuple[float, list[tuple[str, float]]]:
    """The right loss and (id, what the mistake computes instead) for each mistake of _DPO_HINTS, in float64."""
    pc, pr, rc, rr = (t.detach().double() for t in (pc, pr, rc, rr))
    x = beta * ((pc - rc) - (pr - rr))  # (B,)
    ls = F.logsigmoid
    return -ls(x).mean().item(), [
        ("swapped", -ls(-x).mean().item()),
        ("sign", ls(x).mean().item()),
        ("no-beta", -ls(x / beta).mean().item()),
        ("beta-outside", -beta * ls(x / beta).mean().item()),
        ("beta-divides", -ls(x / beta**2).mean().item()),
        ("no-reference", -ls(beta * (pc - pr)).mean().item()),
        ("margin-sign", -ls(beta * ((rc - pc) - (pr - rr))).mean().item()),  # the chosen margin reversed
        ("margin-sign", -ls(beta * ((pc - rc) - (rr - pr))).mean().item()),  # the rejected one
        ("sum", -ls(x).sum().item()),
        ("no-log", -torch.sigmoid(x).mean().item()),
        ("log-of-mean", -torch.sigmoid(x).mean().log().item()),
        ("mean-inside", -ls(x.mean()).item()),
    ]


def _near(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)


def _underflowed(value: float, pc, pr, rc, rr, beta: float) -> bool:
    """value is inf or NaN, or -mean(log(sigmoid(x) + eps)) for a small eps: a log of a sigmoid that underflowed."""
    if not math.isfinite(value):
        return True
    x = beta * ((pc - rc) - (pr - rr)).detach().double()
    return any(_near(value, -(torch.sigmoid(x) + 10.0**-k).log().mean().item()) for k in range(4, 46))


def _dpo_answer(fn: Callable, pc, pr, rc, rr, beta: float, case: str) -> tuple[float, bool, tuple | None]:
    """fn's loss on this case as a number, whether it carries a graph (requires_grad) and, when it does, the
    gradients loss.backward() leaves on policy_chosen and policy_rejected (None where none reaches one)."""
    leaves = (pc.clone().requires_grad_(), pr.clone().requires_grad_())  # the reference's are frozen
    forbidden, names = (alignment.dpo_loss,), "tl.alignment.dpo_loss"
    with torch.enable_grad():  # a check run under torch.no_grad() still lets the answer build its graph
        policy = tuple(t.clone() for t in leaves)  # not leaves: an answer that changes them in place is named so
        got = run(fn, *policy, rc.clone(), rr.clone(), beta, case=case, forbidden=forbidden, names=names)
    if isinstance(got, (tuple, list)):
        hint = "return the loss alone, one number (the library's dpo_loss also returns the rewards)"
        raise Wrong("not-a-scalar", f"On {case} you returned a {type(got).__name__}: {hint}.")
    if isinstance(got, torch.Tensor) and got.numel() != 1:
        what = "one loss per pair" if got.numel() == len(pc) else "a tensor"
        raise Wrong("not-a-scalar", f"On {case} you returned {what} of shape {tuple(got.shape)}: take the mean.")
    graph = isinstance(got, torch.Tensor) and got.requires_grad
    value = measure("the loss", got.detach() if isinstance(got, torch.Tensor) else got)[0]
    if not graph:
        return value, False, None
    try:
        with torch.enable_grad():
            got.reshape(()).backward()  # () from one element: the loss as training would call backward on it
    except Exception as error:  # the learner's graph, e.g. a tensor changed in place after it was used
        raise Wrong("raised", f"loss.backward() raised {type(error).__name__} on {case}: {error}") from None
    return value, True, tuple(t.grad for t in leaves)


def _judge_dpo_gradient(grads: tuple, want: tuple, case: str, extreme: bool) -> None:
    """Raise the verdict when the gradients that reached policy_chosen and policy_rejected are not the loss's."""
    names = ("policy_chosen", "policy_rejected")
    missing = [name for name, grad in zip(names, grads) if grad is None or not grad.any()]
    if len(missing) == 2:
        raise Wrong("no-gradient", f"On {case} no gradient reaches the policy's log-probabilities: {_NO_GRADIENT}.")
    if missing:
        hint = f"it was cut from the loss (.detach(), .item() or torch.no_grad() on the way): keep {missing[0]} in "
        hint += "the graph, so that training moves both answers' log-probabilities"
        raise Wrong("no-gradient", f"On {case} no gradient reaches {missing[0]}: {hint}.")
    for name, grad, right in zip(names, grads, want):
        if same(grad, right, atol=1e-6, rtol=1e-4):
            continue
        expected, yours = ([round(x, 6) for x in t.tolist()] for t in (right, grad.double()))
        on = f"On {case} the gradient on {name} is {yours}, expected {expected}"
        if extreme and not grad.isfinite().all():
            hint = "a log of a sigmoid that rounds to 0 sends inf or NaN back, even on a branch torch.where "
            hint += "leaves out: use F.logsigmoid(x) (or -F.softplus(-x)), whose gradient is finite everywhere"
            raise Wrong("unstable-log-sigmoid", f"{on}: {hint}.")
        hint = "compute the loss from the log-probabilities you are given, with nothing detached or added on the way"
        raise Wrong("wrong-gradient", f"{on}: right numbers, but not the loss's gradient: {hint}.")


@checker
def check_dpo_loss(fn: Callable) -> str:
    """fn(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta) -> DPO's loss, the mean over
    pairs of -log sigmoid(beta * ((policy_chosen - reference_chosen) - (policy_rejected - reference_rejected))):
    a 0-dim tensor the policy's log-probabilities' gradients flow through (backward is called on it and its
    gradients compared with the loss's), stable for margins of hundreds of nats. Each argument but beta is (B,)."""
    g = _seeded(17)
    cases = [(_dpo_case(g, B, spread, gap), beta, False) for B, beta, spread, gap in _DPO_CASES]
    cases.append((_dpo_extreme(g), _DPO_EXTREME[0], True))
    answers = []
    for (pc, pr, rc, rr), beta, extreme in cases:
        large = ", margins hundreds of nats apart" if extreme else ""
        case = f"{len(pc)} pair{'s' * (len(pc) > 1)} with beta={beta}{large}"
        answers.append((case, *_dpo_answer(fn, pc, pr, rc, rr, beta, case)))
    if len({value for _, value, _, _ in answers}) == 1:
        hint = "compute it from the log-probabilities and the beta you are given"
        return no("constant", f"Your function returns {answers[0][1]:g} for every input: {hint}.")
    for ((pc, pr, rc, rr), beta, extreme), (case, value, _, _) in zip(cases, answers):
        right, mistakes = _dpo_losses(pc, pr, rc, rr, beta)
        if _near(value, right):
            continue
        if extreme and _underflowed(value, pc, pr, rc, rr, beta):  # right on every case before: the numerics
            hint = "sigmoid(x) rounds to 0 for x below about -100 in float32 (about -745 in float64: no dtype is "
            hint += "wide enough for every margin), and its log is -inf"
            if math.isfinite(value):
                hint += " (a small number added inside the log keeps it finite, but wrong)"
            hint += ": use F.logsigmoid(x) (or -F.softplus(-x)), which computes it without the sigmoid"
            return no("unstable-log-sigmoid", f"On {case} you returned {value:g}, expected {right:.4f}: {hint}.")
        on = f"On {case} expected {right:.4f}, got {value:.4f}: "
        for mistake, wrong in mistakes:
            if not _near(wrong, right) and _near(value, wrong):
                return no(mistake, on + _DPO_HINTS[mistake])
        hint = "-F.logsigmoid(beta * ((policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)))"
        return no("other", f"{on}the loss is the mean over pairs of {hint}.")
    if not all(graph for _, _, graph, _ in answers):
        hint = "Right numbers, but the loss is cut from the policy's log-probabilities (a float, .item(), .detach() "
        hint += "or torch.no_grad()): return the tensor itself, so that loss.backward() reaches the policy."
        return no("detached", hint)
    for ((pc, pr, rc, rr), beta, extreme), (case, _, _, grads) in zip(cases, answers):
        _judge_dpo_gradient(grads, _dpo_gradient(pc, pr, rc, rr, beta), case, extreme)
    return CORRECT


# ---- GRPO's group-relative advantages ---------------------------------------------------------------

_EPS = 1e-4  # added to each group's standard deviation, as tl.alignment.group_advantages does
# (P prompts, G answers each, the rewards): every case holds a group whose answers all scored the same; the tiny
# rewards make eps matter
_ADVANTAGE_CASES = ((4, 6, "binary"), (3, 5, "real"), (5, 2, "binary"), (2, 16, "tiny"), (6, 3, "integer"))
_ADVANTAGE_HINTS = {
    "whole-batch": "each group is normalised on its own: its mean and its standard deviation over dim=1 "
    "(keepdim=True), not the whole batch's.",
    "wrong-axis": "you normalised over the prompts (dim 0): each row is one prompt's group of answers, so take the "
    "mean and the standard deviation over dim=1.",
    "biased-std": "that is the population standard deviation (divided by G): use the unbiased one, divided by G - 1, "
    "torch.std's default.",
    "no-scale": "you only subtracted the mean: divide by the group's standard deviation plus eps too.",
    "no-eps": "a group whose answers all scored the same has a standard deviation of 0, so 0 / 0 gives NaN: add "
    "eps = 1e-4 to the standard deviation.",
    "eps-inside": "eps goes outside the root, added to the standard deviation: std + 1e-4, not sqrt(var + 1e-4).",
    "no-centre": "subtract the group's mean before dividing: an advantage says how much better than its group an "
    "answer did.",
    "eps-value": "add eps = 1e-4 to the standard deviation, as tl.alignment.group_advantages does.",
}


def _rewards(g: torch.Generator, P: int, G: int, kind: str) -> torch.Tensor:
    """rewards (P, G) of a kind; row 1 (binary: and row P - 1 too) scored the same for every answer."""
    if kind == "binary":
        r = (torch.rand(P, G, generator=g) < 0.5).float()
        r[:, :2] = torch.tensor([0.0, 1.0])  # every group mixed, in its own order ...
        r = r.gather(1, torch.rand(P, G, generator=g).argsort(1))
        r[1], r[-1] = 1.0, 0.0  # ... but two, all right and all wrong
    elif kind == "real":
        r = torch.rand(P, G, generator=g) * 2 - 0.5
        r[1] = 0.75
    elif kind == "tiny":
        r = torch.randn(P, G, generator=g) * 1e-3
        r[1] = 2.0**-10
    else:
        r = torch.randint(0, 11, (P, G), generator=g).float()
        r[:, :2] = torch.tensor([2.0, 9.0])
        r[1] = 5.0
    return r


def _advantage_mistakes(rewards: torch.Tensor) -> Iterator[tuple[torch.Tensor, str]]:
    """(the advantages as a classic mistake computes them, its id), in float64."""
    r = rewards.double()
    m, s = r.mean(1, keepdim=True), r.std(1, keepdim=True)  # (P, 1) each
    yield (r - r.mean()) / (r.std() + _EPS), "whole-batch"
    yield (r - m) / (r.std() + _EPS), "whole-batch"
    yield (r - r.mean()) / (s + _EPS), "whole-batch"
    yield (r - r.mean(0)) / (r.std(0) + _EPS), "wrong-axis"
    yield (r - m) / (r.std(1, keepdim=True, unbiased=False) + _EPS), "biased-std"
    yield r - m, "no-scale"
    yield (r - m) / s, "no-eps"
    yield (r - m) / (r.var(1, keepdim=True) + _EPS).sqrt(), "eps-inside"
    yield (r - m) / (r.var(1, keepdim=True, unbiased=False) + _EPS).sqrt(), "eps-inside"
    yield r / (s + _EPS), "no-centre"
    for eps in (1e-3, 1e-5, 1e-6, 1e-8):
        yield (r - m) / (s + eps), "eps-value"


@checker
def check_group_advantages(fn: Callable) -> str:
    """fn(rewards (P, G)) -> advantages (P, G): each reward minus its group's mean, over the group's standard
    deviation (unbiased) plus 1e-4; a group that all scored the same gets zeros. By hand."""
    g = _seeded(18)
    forbidden, names = (alignment.group_advantages,), "tl.alignment.group_advantages"
    for P, G, kind in _ADVANTAGE_CASES:
        rewards = _rewards(g, P, G, kind)
        case = f"{kind} rewards of shape {(P, G)} (row 1: every answer scored {rewards[1, 0].item():g})"
        want = alignment.group_advantages(rewards.double())  # (P, G), computed before the library is refused
        got = run(fn, rewards.clone(), case=case, forbidden=forbidden, names=names)
        expect_tensor(got, want, case)
        if not got.is_floating_point():
            raise Wrong("dtype", f"On {case} your advantages are {got.dtype}: return them as a float tensor.")
        if same(got, want, atol=1e-5, rtol=1e-5):
            continue
        for wrong, mistake in _advantage_mistakes(rewards):
            if not same(wrong, want, atol=1e-5, rtol=1e-5) and same(got, wrong, atol=1e-5, rtol=1e-5):
                return no(mistake, f"On {case}: {_ADVANTAGE_HINTS[mistake]}")
        if got.isnan().any():
            hint = "a group that all scored the same gets advantages of 0: add eps to its standard deviation"
            return no("nan", f"On {case} your advantages hold NaN: {hint}.")
        row = int((got.double() - want).abs().nan_to_num(math.inf).amax(1).argmax())  # the row furthest off
        expected, yours = ([round(x, 4) for x in t[row].tolist()] for t in (want, got.double()))
        hint = "(reward - group mean) / (group standard deviation + 1e-4), each group a row"
        return no("other", f"On {case}, row {row}: expected {expected}, got {yours}: {hint}.")
    return CORRECT


# ---- how far a policy drifted from its reference (experiment) ----------------------------------------

_NOISE = 0.01  # the jitter added to the SFT model's weights: a drift of about 0.7 nats per answer
# (what, policy, reference, prompts, the prompts' seed, the sampling seed): the SFT model against itself (0), a
# jittered copy against it (both ways), the SFT model against the base model it came from (about 33 nats), and the
# base model as the policy, whose answers never end and are cut at MAX_ANSWER tokens
_DRIFT_CASES = (
    ("the SFT model against a copy of itself", "sft", "sft", 16, 1, 171),
    ("the SFT model with jittered weights against the SFT model", "jittered", "sft", 24, 2, 172),
    ("the SFT model against the base model it was fine-tuned from", "sft", "base", 20, 3, 173),
    ("the SFT model against a copy with jittered weights", "sft", "jittered", 24, 4, 174),
    ("the base model against the SFT model", "base", "sft", 12, 5, 175),
)
_OTHER_SEED = 176  # case 2 once more, with a seed not used before
_DRIFT_HINTS = {
    "sign": "you measured the reference against the policy: the drift is log p_policy - log p_reference, "
    "positive on average on the policy's own answers.",
    "per-token": "you averaged over the tokens: sum each answer's log-ratios (the log-ratio of the whole answer), "
    "then average over the prompts.",
    "prompt-included": "you also counted the prompt's tokens: only the answer's tokens (the ids sample_answers "
    "returns, <|end|> included) count.",
    "assistant-included": "you also counted <|assistant|>, which belongs to the prompt: only the answer's tokens "
    "count.",
    "mask-misaligned": "your mask is one position off: the log-probability at position t is that of token t + 1, "
    "so the answer's tokens are read at positions len(prompt ids) - 1 onwards (answer_mask[:, 1:]).",
    "sum": "you summed over the prompts: average over them.",
    "sampled-from-reference": "the answers were sampled from the reference: sample them from the policy, whose "
    "drift this measures.",
    "roles-swapped": "the policy and the reference swapped roles: you measured the reference's drift from the "
    "policy. Sample the answers from the policy, then take log p_policy - log p_reference.",
    "greedy": "the answers were decoded greedily: sample them at temperature 1.0, with the generator made from the "
    "seed.",
    "k3": "that is GRPO's per-token estimator exp(r - p) - (r - p) - 1: here measure the plain log-ratio, "
    "log p_policy - log p_reference, summed over each answer.",
    "vocabulary-kl": "you summed the exact KL over the vocabulary at each position: measure the log-ratio of the "
    "sampled tokens, log p_policy - log p_reference of each answer's ids.",
    "probabilities": "you took probabilities, not log-probabilities: the log-ratio is log p_policy - log p_reference.",
    "re-encoded": "you turned the answers into text and encoded them again, which adds an <|end|> to an answer cut "
    "at MAX_ANSWER tokens: measure the ids sample_answers returns.",
}
_SAMPLE = "sample with chat.sample_answers(policy, tok, prompts, temperature=1.0, rng=generator), the generator "
_SAMPLE += "torch.Generator().manual_seed(seed)"


@functools.cache
def _assistants() -> tuple[nn.Module, nn.Module, nn.Module, ChatTokenizer, list[str]]:
    """The shipped SFT model, a copy with jittered weights, the base model (dropout off, eval mode), the chat
    tokenizer and the held-out words the prompts are about."""
    from ..checkpoints import load_checkpoint
    from ..recipes import assistant_base

    with torch.random.fork_rng(devices=[]):  # building a model draws its initial weights
        sft = alignment.without_dropout(load_checkpoint("assistant_sft")[0])
        base, tok = assistant_base()
    jittered = copy.deepcopy(sft)
    g = _seeded(1717)
    with torch.no_grad():
        for p in jittered.parameters():
            p.add_(torch.randn(p.shape, generator=g) * _NOISE)
    return sft.eval(), jittered.eval(), base.eval(), tok, chat.task_words()[1]


def _own(name: str) -> nn.Module:
    """The checker's own model by name, for the checker's own reading (it never changes them)."""
    sft, jittered, base, _, _ = _assistants()
    return {"sft": sft, "jittered": jittered, "base": base}[name]


def _subject(name: str) -> nn.Module:
    """A fresh copy of the model, for a learner's function: what it does to it stays there."""
    return copy.deepcopy(_own(name))


def _prompts(n: int, seed: int) -> list[str]:
    return chat.random_instructions(n, _assistants()[4], random.Random(seed))


def _estimates(policy: nn.Module, reference: nn.Module, tok: ChatTokenizer, prompts, written) -> list[tuple]:
    """("right", the drift of these answers), then (id, what the mistake computes instead) for each mistake that
    measures the same answers; some ids twice, two ways to make one mistake."""
    encoded = [tok.encode_chat(p)[0] for p in prompts]
    ids = pad_sequences([e + a for e, a in zip(encoded, written)], tok.base.pad_id)  # (N, T)
    mask = pad_sequences([[0] * len(e) + [1] * len(a) for e, a in zip(encoded, written)], 0).double()  # (N, T)
    real = pad_sequences([[1] * (len(e) + len(a)) for e, a in zip(encoded, written)], 0).double()[:, 1:]  # (N, T-1)
    with torch.no_grad():
        lp_all = F.log_softmax(policy(ids).double(), -1)[:, :-1]  # (N, T - 1, V)
        lr_all = F.log_softmax(reference(ids).double(), -1)[:, :-1]
    lp, lr = (x.gather(-1, ids[:, 1:, None])[..., 0] for x in (lp_all, lr_all))  # (N, T - 1) each
    d, answer = lp - lr, mask[:, 1:]  # (N, T - 1) each: position t holds token t + 1
    right = (d * answer).sum(1)  # (N,)
    with_assistant = answer.clone()
    for row, e in enumerate(encoded):
        with_assistant[row, len(e) - 2] = 1  # the position that predicts <|assistant|>
    unshifted = mask[:, :-1]  # (N, T - 1): the mask read at the ids' own positions
    return [
        ("right", right.mean().item()),
        ("sign", -right.mean().item()),
        ("per-token", (right / answer.sum(1).clamp(min=1)).mean().item()),  # each answer's mean
        ("per-token", ((d * answer).sum() / answer.sum()).item()),  # every token of the batch together
        ("prompt-included", (d * real).sum(1).mean().item()),
        ("assistant-included", (d * with_assistant).sum(1).mean().item()),
        ("mask-misaligned", (d * unshifted).sum(1).mean().item()),  # a padded batch: the pad after an answer read
        ("mask-misaligned", (d * unshifted * real).sum(1).mean().item()),  # one answer at a time
        ("sum", right.sum().item()),
        ("k3", ((torch.exp(-d) + d - 1) * answer).sum(1).mean().item()),
        ("vocabulary-kl", ((lp_all.exp() * (lp_all - lr_all)).sum(-1) * answer).sum(1).mean().item()),
        ("probabilities", ((lp.exp() - lr.exp()) * answer).sum(1).mean().item()),
    ]


def _drift(policy: nn.Module, reference: nn.Module, tok: ChatTokenizer, prompts: list[str], seed: int) -> float:
    """The drift the exercise asks for: on the policy's own answers, sampled from `seed`."""
    written = chat.sample_answers(policy, tok, prompts, temperature=1.0, rng=_seeded(seed))
    return _estimates(policy, reference, tok, prompts, written)[0][1]


def _drift_mistakes(policy, reference, tok, prompts, seed: int) -> list[tuple[str, float]]:
    """(id, what the mistake measures on this case) for each classic mistake, in one order for every case."""
    written = chat.sample_answers(policy, tok, prompts, temperature=1.0, rng=_seeded(seed))
    from_reference = chat.sample_answers(reference, tok, prompts, temperature=1.0, rng=_seeded(seed))
    greedy = chat.sample_answers(policy, tok, prompts)
    again = [tok.encode(tok.decode_answer(a)) + [tok.end_id] for a in written]  # the text, encoded again
    return [
        *_estimates(policy, reference, tok, prompts, written)[1:],
        ("sampled-from-reference", _estimates(policy, reference, tok, prompts, from_reference)[0][1]),
        ("roles-swapped", _estimates(reference, policy, tok, prompts, from_reference)[0][1]),
        ("greedy", _estimates(policy, reference, tok, prompts, greedy)[0][1]),
        ("re-encoded", _estimates(policy, reference, tok, prompts, again)[0][1]),
    ]


def _close(a: float, b: float) -> bool:
    return math.isfinite(a) and abs(a - b) <= 2e-3 + 1e-3 * abs(b)


def _theirs(fn: Callable, case: tuple, seed: int | None = None) -> tuple[float, str]:
    """fn's drift on a case (seed: another one than the case's), on fresh models; and the case, in words."""
    what, policy, reference, n, prompt_seed, case_seed = case
    seed = case_seed if seed is None else seed
    tok = copy.deepcopy(_assistants()[3])
    given = f"{what}, {n} prompts of the checker's own, seed={seed}"
    got = run(fn, _subject(policy), _subject(reference), tok, _prompts(n, prompt_seed), seed, case=given)
    if isinstance(got, torch.Tensor) and got.numel() == n or isinstance(got, (list, tuple)) and len(got) == n:
        hint = "return one number, the mean over the prompts of each answer's summed log-ratio"
        raise Wrong("not-averaged", f"On {given} you returned one number per prompt: {hint}.")
    return measure("the drift", got)[0], given


def _wanted(case: tuple, seed: int | None = None, mistakes: bool = False):
    _, policy, reference, n, prompt_seed, case_seed = case
    args = (_own(policy), _own(reference), _assistants()[3], _prompts(n, prompt_seed))
    seed = case_seed if seed is None else seed
    return _drift_mistakes(*args, seed) if mistakes else _drift(*args, seed)


@checker
def check_kl_drift(fn: Callable) -> str:
    """Experiment: fn(policy, reference, tok, prompts, seed) -> the policy's drift from the reference: one answer per
    prompt sampled from the policy at temperature 1 (chat.sample_answers, rng=torch.Generator().manual_seed(seed)),
    the sum over its tokens of log p_policy - log p_reference, averaged over the prompts. Run on the checker's
    models, prompts and seeds."""
    with one_thread(), torch.random.fork_rng(devices=[]):
        return _check_drift(fn)


def _check_drift(fn: Callable) -> str:
    measured = [_theirs(fn, case) for case in _DRIFT_CASES]  # on fresh models: the checker's own stay untouched
    wants = [_wanted(case) for case in _DRIFT_CASES]
    gots = [got for got, _ in measured]
    if len(set(gots)) == 1:
        hint = "measure it: sample the policy's answers, then compare the two models' log-probabilities of them"
        return no("constant", f"Your function gives {gots[0]:g} for every pair of models, prompts and seed: {hint}.")
    pairs = [(i, j) for i in range(len(gots)) for j in range(i + 1, len(gots))]
    typed = [(i, j) for i, j in pairs if gots[i] == gots[j] and not _close(wants[i], wants[j])]
    if typed:  # two cases of other models, prompts and seeds whose drifts differ, one number for both
        i, j = typed[0]
        hint = "a number typed in does not follow the models: measure it, sampling the policy's answers, then "
        hint += "comparing the two models' log-probabilities of them"
        on = f"{measured[i][1]} (expected {wants[i]:.4f}) and on {measured[j][1]} (expected {wants[j]:.4f})"
        return no("constant", f"Your function gives {gots[i]:g} both on {on}: {hint}.")
    wrong = [k for k, (got, want) in enumerate(zip(gots, wants)) if not _close(got, want)]
    if not wrong:  # the seed: once more with the same one, and with another
        again, given = _theirs(fn, _DRIFT_CASES[1])
        if again != gots[1]:
            return no("seed-ignored", f"On {given} the same seed gave {gots[1]:g}, then {again:g}: {_SAMPLE}.")
        other, given = _theirs(fn, _DRIFT_CASES[1], _OTHER_SEED)
        want = _wanted(_DRIFT_CASES[1], _OTHER_SEED)
        if _close(other, want):
            return CORRECT
        if other == gots[1]:
            return no("seed-ignored", f"Two seeds gave the same number, {other:g}: {_SAMPLE}.")
        return no("other", f"On {given} expected {want:.4f}, got {other:.4f}: {_SAMPLE}.")
    first, given = wrong[0], measured[wrong[0]][1]
    on = f"On {given} expected {wants[first]:.4f}, got {gots[first]:.4f}"
    mistakes = [_wanted(case, mistakes=True) for case in _DRIFT_CASES]  # per case, (id, value) of each mistake
    for j, (mistake, _) in enumerate(mistakes[0]):  # named only when the answer follows it on every case
        if all(_close(got, theirs[j][1]) for got, theirs in zip(gots, mistakes)):
            return no(mistake, f"{on}: {_DRIFT_HINTS[mistake]}")
    again, _ = _theirs(fn, _DRIFT_CASES[first])
    if again != gots[first]:
        return no("seed-ignored", f"{on}, then {again:.4f} with the same seed: {_SAMPLE}.")
    if _theirs(fn, _DRIFT_CASES[1], _OTHER_SEED)[0] == gots[1]:
        return no("seed-ignored", f"{on}, and two seeds gave the same number: {_SAMPLE}.")
    hint = "then sum log p_policy - log p_reference over each answer's ids and average over the prompts"
    return no("other", f"{on}: {_SAMPLE}, {hint}.")
