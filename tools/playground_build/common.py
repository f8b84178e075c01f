"""What the playgrounds' models share as they are built: the pages' defaults, the check against PyTorch, int8.

The pages' defaults: book/_static/playground/defaults.json holds, page by page, the value each field of the page's
form starts with, by the field's id ({"numbers": {"numbers-input": "4021"}, ...}). The page's JavaScript gives its
form those values when it loads (playground.js's fillDefaults; the file is served next to it), and each model's
module reads them here (page_defaults) for the inputs whose answers it records, so the answers that the browser
tests ask the pages for are those of the inputs the pages open with.

Every file is run in onnxruntime (Python) and compared with PyTorch before it is written out (check_session,
export_checked; a step model with a KV cache call by call, check_steps). The pages that decode greedily with such a
model share greedy_with_margin (PyTorch's text and its closest tie) and greedy_onnx (the page's loop, in Python).
The models come from the shipped checkpoints, so the files are build outputs and stay out of git.

Each model is also tried in int8 (quantize_int8: onnxruntime's own MatMulNBitsQuantizer, weight-only,
which onnxruntime-web's wasm backend runs). The int8 file ships in place of the fp32 one only when
every answer it gives on AGREEMENT fixed inputs (for the brackets, every held-out string too) is
PyTorch fp32's: the same words, the same greedy text, the same verdict, the same top three; the same
numbers at two decimals where the page or its prose quotes them. Otherwise the fp32 file ships (try_int8).
meta.json records for each model the two sizes, the count of answers that agree, the rule and which
file shipped; expected.json also holds the shipped int8 files' own numbers (onnxruntime in Python),
which the pages must give.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

from transformer_lib.export import empty_past, export_onnx, step_model, with_attention

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = ROOT / "book" / "_static" / "playground" / "defaults.json"  # each page's form's starting values
# onnxruntime against PyTorch, on every output: |got - expected| <= 1e-4 (1 + |expected|). Two float32 engines sum in
# other orders: plays_bert's logits once came 1.1e-5 apart in a fresh clone's build (1e-5 failed it), 1e-4 is
# still invisible on any page (the browser tests hold the pages to their own tolerances)
TOLERANCE = 1e-4
AGREEMENT = 50  # fixed inputs per model for the int8 trial (the browser tests' own first, then seeded or corpus ones)
INT8_BLOCK = 32  # weights per int8 scale, along the input: finer than one per channel and as small on disk


def page_defaults(page: str) -> dict:
    """Page `page`'s form's starting values, by field id, from DEFAULTS: page_defaults("brackets") is
    {"brackets-text": "[[()]]"}. The page's JavaScript sets its form from the same entry."""
    pages = json.loads(DEFAULTS.read_text(encoding="utf-8"))
    if page not in pages:
        raise SystemExit(f"{DEFAULTS.relative_to(ROOT)} has no page {page!r}")
    return pages[page]


def specials(tok) -> dict[str, int]:
    """The tokenizer's special tokens as the pages read them from meta.json: each one's id by name, and
    `count`, the number of ids before the vocabulary's own tokens: {"pad": 0, "bos": 1, "eos": 2, "unk": 3, "count": 4}.

    All of it comes from the tokenizer itself: its `<name>_id` attributes (tok.pad_id, ...), checked against
    its itos, and the ids its `tokens` drops as specials. So no page hard-codes an id."""
    ids = {a.removesuffix("_id"): getattr(tok, a) for a in dir(tok) if a.endswith("_id") and not a.startswith("_")}
    wrong = [f"{name}_id = {i}" for name, i in ids.items() if not isinstance(i, int) or tok.itos[i] != f"<{name}>"]
    count = len(tok.itos) - len(tok.tokens(range(len(tok.itos)), stop_at_eos=False))  # what `tokens` drops
    if wrong or sorted(ids.values()) != list(range(count)):
        raise SystemExit(f"{type(tok).__name__}: its specials are not its first {count} ids ({wrong or ids})")
    return {**ids, "count": count}


def check_session(
    name: str, session: ort.InferenceSession, inputs: tuple[torch.Tensor, ...], expected, tolerance=TOLERANCE
) -> float:
    """Run `session` on `inputs`; fail unless every output is within `tolerance` of PyTorch's `expected`
    (relative to the value's size, for logits of 10 or more; None: only measure, as for an int8 file).
    Returns the largest absolute difference."""
    feeds = {spec.name: x.numpy() for spec, x in zip(session.get_inputs(), inputs)}
    got = session.run(None, feeds)
    for g, e in zip(got, expected):
        worst = float((np.abs(g - e.numpy()) / (1 + np.abs(e.numpy()))).max())
        if tolerance is not None and worst > tolerance:
            raise SystemExit(
                f"{name}: onnxruntime differs from PyTorch by {worst:.1e} (relative), more than {TOLERANCE:.0e}"
            )
    return max(float(np.abs(g - e.numpy()).max()) for g, e in zip(got, expected))


def export_checked(model, path: Path, inputs: tuple[torch.Tensor, ...]) -> float:
    """Export `model` to `path` (transformer_lib.export.export_onnx) and check it on `inputs` against PyTorch,
    attention weights included (check_session). Returns the largest absolute difference."""
    export_onnx(model, path)
    with torch.no_grad():
        expected = with_attention(model)(*inputs)
    return check_session(path.stem, ort.InferenceSession(str(path)), inputs, expected)


def greedy_with_margin(model, prompt: torch.Tensor, n: int, stop: int | None = None) -> tuple[torch.Tensor, float]:
    """PyTorch's greedy continuation (model.generate, temperature 0: `n` new tokens) and the smallest gap between the
    two likeliest logits on the way, up to the first `stop` id written (all `n` steps when None or never written): a
    gap near onnxruntime's rounding could let a page pick the other token. Returns ((1, T0 + n), the gap)."""
    out = model.generate(prompt, n, temperature=0.0)  # (1, T0 + n)
    with torch.no_grad():
        logits = model(out[:, :-1])[0, prompt.shape[1] - 1 :]  # (n, V): the logits each new token was chosen from
    new = out[0, prompt.shape[1] :].tolist()
    steps = new.index(stop) + 1 if stop in new else n  # the steps a page that stops at `stop` takes
    top2 = logits[:steps].topk(2, dim=-1).values  # (steps, 2)
    return out, float((top2[:, 0] - top2[:, 1]).min())


def check_steps(path: Path, model, sequence: torch.Tensor, prompt: int, tolerance=TOLERANCE) -> float:
    """Run the step model `path` (transformer_lib.export.export_step) as a page does on `sequence` (1, T): the first
    `prompt` tokens with an empty past, then one token per call. Each call's logits must be the full forward pass's
    for its positions, and its keys and values PyTorch's step model's (`tolerance`; None: only measure, as for an
    int8 file). Returns the largest absolute difference."""
    session, step = ort.InferenceSession(str(path)), step_model(model)
    with torch.no_grad():
        full = model(sequence)  # (1, T, V)
    keys = values = empty_past(model)  # (L, 1, h_kv, 0, d_k)
    gap, start = 0.0, 0
    for end in range(prompt, sequence.shape[1] + 1):
        tokens = sequence[:, start:end]  # (1, T_new): the prompt, then one token
        with torch.no_grad():
            _, present_keys, present_values = step(tokens, keys, values)
        expected = (full[:, start:end], present_keys, present_values)
        checked = check_session(
            f"{path.stem} at position {start}", session, (tokens, keys, values), expected, tolerance
        )
        gap = max(gap, checked)
        keys, values, start = present_keys, present_values, end
    return gap


def greedy_onnx(session: ort.InferenceSession, model, ids: list[int], n: int, stop: int | None = None) -> list[int]:
    """A page's greedy text in onnxruntime with a step model: the prompt `ids` once, then one token per call with the
    keys and values carried; returns the new ids: `n`, or fewer when the `stop` id comes (it is the last one)."""
    keys = values = empty_past(model).numpy()  # (L, 1, h_kv, 0, d_k)
    feed, new = np.array([ids]), []
    for _ in range(n):
        logits, keys, values = session.run(None, {"tokens": feed, "past_keys": keys, "past_values": values})
        new.append(int(logits[0, -1].argmax()))
        if new[-1] == stop:
            break
        feed = np.array([new[-1:]])  # (1, 1)
    return new


def quantize_int8(path: Path) -> Path:
    """Write `path` with its MatMul weights in int8 to <stem>.int8.onnx; return that path.

    onnxruntime's MatMulNBitsQuantizer with 8 bits: symmetric, one fp32 scale per INT8_BLOCK weights along the
    input, computed in fp32 (accuracy_level 1), so only the weights are rounded, not the activations. The
    embeddings (Gather) stay fp32. Its MatMulNBits operator runs in onnxruntime-web's wasm backend."""
    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)  # it logs every node at INFO
    quantizer = MatMulNBitsQuantizer(
        onnx.load(path),
        bits=8,
        block_size=INT8_BLOCK,
        is_symmetric=True,
        accuracy_level=1,
        op_types_to_quantize=("MatMul",),
    )
    quantizer.process()
    out = path.with_name(f"{path.stem}.int8.onnx")
    quantizer.model.save_model_to_file(str(out), use_external_data_format=False)
    return out


def try_int8(path: Path, rule: str, inputs: list, reference: list, answer) -> tuple[Path, dict]:
    """Quantize `path` (quantize_int8) and ask the int8 file `answer(session, x)` for every input; it ships when all
    its answers equal PyTorch fp32's `reference`, else the fp32 file does. The other file is deleted.
    Returns (the shipped file, the trial for meta.json: sizes, answers that agree out of how many, rule, shipped)."""
    int8 = quantize_int8(path)
    session = ort.InferenceSession(str(int8))
    agree = sum(answer(session, x) == r for x, r in zip(inputs, reference, strict=True))
    ship = agree == len(inputs)
    trial = {
        "fp32_bytes": path.stat().st_size,
        "int8_bytes": int8.stat().st_size,
        "agree": agree,
        "inputs": len(inputs),
        "rule": rule,
        "shipped": "int8" if ship else "fp32",
    }
    (path if ship else int8).unlink()
    return (int8 if ship else path), trial


def mulberry32(seed: int):
    """The pages' seeded generator (mulberry32 in playground.js), number for number: seed -> an endless iterator of
    floats in [0, 1). With it the build draws what the pages draw: the inside page's repeated random string, and
    the numbers the hear-the-keys page samples its codes with."""
    m = 0xFFFFFFFF
    a = seed & m
    while True:
        a = (a + 0x6D2B79F5) & m
        t = ((a ^ (a >> 15)) * (1 | a)) & m
        t = ((t + (((t ^ (t >> 7)) * (61 | t)) & m)) & m) ^ t
        yield ((t ^ (t >> 14)) & m) / 4294967296


def corpus_texts(val: torch.Tensor, count: int, length: int) -> list[list[int]]:
    """`count` pieces of `length` token ids, evenly spaced through the validation text `val` (M,): the int8
    trial's inputs beyond the browser tests' own."""
    return [val[int(s) : int(s) + length].tolist() for s in np.linspace(0, len(val) - length - 1, count)]
