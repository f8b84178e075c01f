"""The watch-it-think page (book/playground/watch_think.md): chapter 21's addition models write their answers to the
reader's problem in the page, a program checks each step and the sum, and several samples show the vote.

Three models of tl.reasoning, one file each, each a step model with a KV cache (transformer_lib.export.export_step,
checked call by call along the longest answer the page allows, common.check_steps): the scratchpad model
(checkpoint addition_scratchpad: 600 steps, worked steps), the start model (addition_start: 400 steps, the one GRPO
and the test-time compute of the chapter start from) and the direct model (addition_direct: 600 steps, the sum
alone). The page feeds <bos> and "a+b=" once, then each character chosen, until END (".") or the model's budget
(reasoning.answer_budget: the longest right answer for the numbers' lengths, plus 4); an answer cut at the budget
earns nothing.

Greedy, the page writes as reasoning.write does at temperature 0: the build records each model's ids on PROBLEMS
(equal to write's text, and no step passing a near tie). Sampled, the page asks for what the language-model page asks:
the numbers it samples with come from the pages' seeded generator (mulberry32: common.mulberry32 here, playground.js's
generator there), one per character, and each character is the inverse of the model's distribution at temperature 1
at that number, the sums taken first to last (page_sample). So a seed gives the same answers in PyTorch and in the
page, character for character, unless a number falls within a rounding error of a boundary: the build requires every
recorded draw to keep MARGIN or more from every boundary. The seed's generator runs on through the samples: sample 2
uses the numbers after sample 1's.

The verdicts are the program's (tl.arithmetic: final_answer, is_right, steps_right), and the vote is
tl.evaluation.majority_vote over the sums read (None, no sum, left out; a tie to the sum given first); the build
records them with the answers, and the browser tests hold the page to them.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import arithmetic, reasoning
from transformer_lib.export import empty_past, export_step

from .common import (
    AGREEMENT,
    check_steps,
    greedy_onnx,
    greedy_with_margin,
    mulberry32,
    page_defaults,
    specials,
    try_int8,
)

PAGE = page_defaults("watch_think")  # the form's starting values: {"think-problem": ..., "think-seed": ..., ...}
MODELS = {  # meta.json's keys, in the page's order: (checkpoint, the style it writes, its name in the page)
    "think_scratchpad": ("addition_scratchpad", "scratchpad", "scratchpad"),
    "think_start": ("addition_start", "scratchpad", "start"),
    "think_direct": ("addition_direct", "direct", "direct"),
}
MAX_DIGITS = 9  # the most digits a number may have: <bos>, "a+b=" and the longest scratchpad's budget fit in 128
SAMPLES = (1, 4, 8, 16)  # the page's choices of the number of samples
# the page's default problem first, then its example buttons: a 3-digit problem, numbers of two lengths, a 5-digit
# problem (longer than any trained on), one digit each
EXAMPLES = [PAGE["think-problem"], "478+356", "95+7", "13458+86735", "7+8"]
LONGEST = "9" * MAX_DIGITS + "+" + "9" * MAX_DIGITS  # the longest problem the page takes, every column carrying
# beyond the buttons: a 6-digit problem, a 4-digit one without carries, zeros, the longest
MORE = ["503112+498764", "1234+4321", "0+0", "1000+9000", LONGEST]
PROBLEMS = list(dict.fromkeys([*EXAMPLES, *MORE]))  # greedy answers recorded for every model
DEFAULT = (PAGE["think-problem"], PAGE["think-model"], int(PAGE["think-samples"]), int(PAGE["think-seed"]))
# (problem, model, samples, seed) recorded sampled: the page's default, the two other models on its problem, then the
# examples with other models, numbers of samples and seeds. Each seed keeps its draws MARGIN from every boundary
CASES = list(
    dict.fromkeys(
        [
            DEFAULT,
            (DEFAULT[0], "think_scratchpad", 8, 2),
            (DEFAULT[0], "think_direct", 8, 1),
            ("478+356", "think_start", 16, 3),
            ("13458+86735", "think_scratchpad", 4, 1),
            ("13458+86735", "think_start", 4, 0),  # its third sample writes a special token, which decode drops
            ("7+8", "think_direct", 1, 2),
        ]
    )
)
MARGIN = 1e-4  # the least distance from a sampling number to a boundary of the cumulative distribution
NEAR_TIE = 1e-3  # the least gap between the two likeliest logits of a greedy step


def prompt_ids(tok, problem: str) -> list[int]:
    """<bos> "a+b=": what the page feeds first, for the page's problem "a+b"."""
    return tok.encode(f"{problem}=", bos=True)


def budget(problem: str, style: str) -> int:
    """The new characters the page lets a model write (reasoning.answer_budget)."""
    return reasoning.answer_budget(f"{problem}=", style)


def _choose(logits: np.ndarray, u: float) -> tuple[int, float]:
    """One character at temperature 1 from `logits` (V,) at the number `u`: the first whose cumulative probability
    exceeds u, the sums taken first to last as the page takes them. -> (its id, u's least distance to a boundary)."""
    scores = logits.astype(np.float64)
    scaled = np.exp(scores - scores.max())
    probs = scaled / scaled.sum()
    total, chosen, near = 0.0, None, float("inf")
    for i, p in enumerate(probs):
        total += p
        if i < len(probs) - 1:
            near = min(near, abs(u - total))
        if chosen is None and u < total:
            chosen = i
    return (int(np.flatnonzero(probs > 0)[-1]) if chosen is None else chosen), near


def page_sample(model, ids: list[int], n: int, end: int, draw: Iterator[float]) -> tuple[list[int], float]:
    """One sampled answer in PyTorch as the page writes it: at most `n` ids after the prompt `ids`, ending at `end`,
    each from mulberry32's next number `draw`. -> (the ids written, the least distance to a boundary)."""
    written, least = [], float("inf")
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids + written]))[0, -1].numpy()  # (V,)
            chosen, near = _choose(logits, next(draw))
            written.append(chosen)
            least = min(least, near)
            if chosen == end:
                break
    return written, least


def onnx_samples(session: ort.InferenceSession, model, ids: list[int], n: int, end: int, count: int, seed: int):
    """The page's loop in onnxruntime: `count` answers of at most `n` ids, one generator for all of them."""
    draw, answers = mulberry32(seed), []
    for _ in range(count):
        keys = values = empty_past(model).numpy()  # (L, 1, h_kv, 0, d_k)
        feed, written = np.array([ids]), []
        for _ in range(n):
            logits, keys, values = session.run(None, {"tokens": feed, "past_keys": keys, "past_values": values})
            written.append(_choose(logits[0, -1], next(draw))[0])
            if written[-1] == end:
                break
            feed = np.array([written[-1:]])  # (1, 1)
        answers.append(written)
    return answers


def verdict(problem: str, text: str) -> dict:
    """The program's verdict on one answer: the sum read (None when none), right or not, every step right or not."""
    prompt = f"{problem}="
    return {
        "sum": arithmetic.final_answer(text),
        "right": arithmetic.is_right(prompt, text),
        "steps_right": arithmetic.steps_right(prompt, text),
    }


def _greedy(key: str, model, tok, style: str) -> dict[str, dict]:
    """PyTorch's greedy answer of one model on PROBLEMS, equal to reasoning.write's and with no near tie on the way."""
    end = tok.encode(arithmetic.END)[0]
    answers = {}
    for problem in PROBLEMS:
        ids = torch.tensor([prompt_ids(tok, problem)])  # (1, T0)
        out, margin = greedy_with_margin(model, ids, budget(problem, style), stop=end)
        written = out[0, ids.shape[1] :].tolist()
        written = written[: written.index(end) + 1] if end in written else written
        text = tok.decode(written, stop_at_eos=False)
        if text != reasoning.write(model, tok, [f"{problem}="], style)[0]:
            raise SystemExit(f"{key}: {problem!r} is answered otherwise by reasoning.write")
        if margin < NEAR_TIE:
            raise SystemExit(f"{key}: the greedy answer to {problem!r} passes a near tie ({margin:.1e})")
        answers[problem] = {"ids": written, "text": text, "margin": margin, **verdict(problem, text)}
    return answers


def _sampled(case: tuple[str, str, int, int], model, tok, style: str) -> dict:
    """PyTorch's samples for one case, with margins, the verdicts and the vote."""
    problem, key, count, seed = case
    end, draw = tok.encode(arithmetic.END)[0], mulberry32(seed)
    samples, least = [], float("inf")
    for _ in range(count):
        written, near = page_sample(model, prompt_ids(tok, problem), budget(problem, style), end, draw)
        least = min(least, near)
        text = tok.decode(written, stop_at_eos=False)
        samples.append({"ids": written, "text": text, **verdict(problem, text)})
    if least < MARGIN:
        raise SystemExit(f"watch_think: {case} draws a number {least:.1e} from a boundary; pick another seed")
    vote = tl.evaluation.majority_vote([s["sum"] for s in samples])
    a, b = arithmetic.parse_problem(f"{problem}=")
    return {
        "problem": problem,
        "model": key,
        "samples": samples,
        "seed": seed,
        "margin": least,
        "vote": vote,
        "votes": sum(s["sum"] == vote for s in samples) if vote is not None else 0,
        "vote_right": vote == a + b,
    }


def _trial_problems(n: int) -> list[str]:
    """Seeded problems for the int8 trial beyond PROBLEMS: numbers of 1 to 6 digits."""
    rng = random.Random(0)
    return [f"{a}+{b}" for a, b in arithmetic.random_problems(n, (1, 6), rng)]


def _export(key: str, model, tok, style: str, models: Path, greedy: dict, cases: list[dict]) -> tuple[Path, dict]:
    """Write one model's step file (int8 where its greedy and sampled answers stay PyTorch's); -> (file, meta)."""
    end = tok.encode(arithmetic.END)[0]
    path = export_step(model, models / f"{key}_step.onnx")
    longest = prompt_ids(tok, LONGEST)
    sequence = torch.tensor([longest + greedy[LONGEST]["ids"]])  # (1, T): the longest problem and its answer
    sequence = torch.cat([sequence, sequence.new_full((1, model.config.max_len - sequence.shape[1]), end)], dim=1)
    gap = check_steps(path, model, sequence, len(longest))  # every position the model has, one call each
    session = ort.InferenceSession(str(path))
    for case in cases:  # the page's loop in Python: the same answers
        got = onnx_samples(session, model, prompt_ids(tok, case["problem"]), budget(case["problem"], style), end,
                           len(case["samples"]), case["seed"])  # fmt: skip
        if got != [s["ids"] for s in case["samples"]]:
            raise SystemExit(f"{key}: onnxruntime samples otherwise on {case['problem']!r}, seed {case['seed']}")
    problems = PROBLEMS + _trial_problems(AGREEMENT - len(PROBLEMS) - len(cases))
    trial = [("greedy", p) for p in problems] + [("sampled", c) for c in cases]
    reference = [
        [s["ids"] for s in p["samples"]] if what == "sampled"
        else greedy[p]["ids"] if p in greedy
        else tok.encode(reasoning.write(model, tok, [f"{p}="], style)[0])  # its ids, up to END or the budget
        for what, p in trial
    ]  # fmt: skip

    def answer(session: ort.InferenceSession, item) -> list:
        what, p = item
        if what == "greedy":
            return greedy_onnx(session, model, prompt_ids(tok, p), budget(p, style), stop=end)
        ids = prompt_ids(tok, p["problem"])
        return onnx_samples(session, model, ids, budget(p["problem"], style), end, len(p["samples"]), p["seed"])

    path, int8 = try_int8(path, "every greedy and sampled answer's ids identical, up to END or the budget", trial,
                          reference, answer)  # fmt: skip
    if int8["shipped"] == "int8":  # the int8 file's own distance from PyTorch, measured the same way, not held
        gap = check_steps(path, model, sequence, len(longest), tolerance=None)
    attn = model.decoder.layers[0].self_attn
    meta = {
        "itos": tok.itos,
        "specials": specials(tok),
        "end": end,
        "style": style,
        "name": MODELS[key][2],
        "max_digits": MAX_DIGITS,
        "samples": list(SAMPLES),
        "max_len": model.config.max_len,
        "layers": model.config.num_layers,
        "heads": model.config.num_heads,
        "kv_heads": attn.num_kv_heads,  # the past's shape, (layers, 1, kv_heads, T_past, head_width)
        "head_width": attn.d_k,
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    return path, meta


def build(models: Path) -> tuple[dict[str, dict], dict]:
    """Write the three models' step files into `models`; -> ({key: its meta}, PyTorch's answers)."""
    tok = reasoning.arithmetic_tokenizer()
    longest = len(prompt_ids(tok, LONGEST)) + budget(LONGEST, "scratchpad")
    if longest > reasoning.MAX_LEN:
        raise SystemExit(f"watch_think: {MAX_DIGITS} digits need {longest} positions, beyond {reasoning.MAX_LEN}")
    metas, greedy, sampled = {}, {}, []
    for key, (checkpoint, style, _) in MODELS.items():
        model = tl.load_checkpoint(checkpoint)[0].eval()
        greedy[key] = _greedy(key, model, tok, style)
        cases = [_sampled(case, model, tok, style) for case in CASES if case[1] == key]
        _, metas[key] = _export(key, model, tok, style, models, greedy[key], cases)
        sampled += cases
    problems = [
        {"problem": p, "prompt": prompt_ids(tok, p), "sum": sum(arithmetic.parse_problem(f"{p}=")),
         "steps": arithmetic.scratchpad(*arithmetic.parse_problem(f"{p}=")),
         "answers": {key: greedy[key][p] for key in MODELS}}
        for p in PROBLEMS
    ]  # fmt: skip
    order = {case: i for i, case in enumerate(CASES)}
    sampled.sort(key=lambda c: order[(c["problem"], c["model"], len(c["samples"]), c["seed"])])
    return metas, {"examples": EXAMPLES, "longest": LONGEST, "problems": problems, "cases": sampled}
