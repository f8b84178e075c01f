"""Build what the website's playgrounds load: the ONNX models, what the pages need to know, and PyTorch's answers.

    python tools/build_playground.py [--out _build/playground]

Writes into OUT (book/_ext/site_fixes.py copies it into the site's _static/playground/, next to
the pages' own JavaScript):

    vendor/         onnxruntime-web's ES module and its wasm, copied from node_modules (`npm ci`)
    models/*.onnx   the numbers-to-words translator, the Shakespeare character model as a step model
                    that keeps a KV cache (shakespeare_char_step.onnx: the page feeds the prompt once, then
                    one character per call, carrying the keys and values), its first attention layer with
                    the mask as an input (the masks playground), the bracket classifier, and the Shakespeare
                    model's logit lens with every layer's attention (shakespeare_char_lens.onnx: the page
                    "Inside the language model")
    models/meta.json    vocabularies and their special tokens' ids, lengths, file sizes, the bracket
                        head that tracks partners, and each model's int8 trial ("int8": see below)
    expected.json   PyTorch's answers on fixed inputs, which the browser tests ask the pages for: greedy
                    words and text (also the longest the model allows: 8 prompt characters and 120 new),
                    one step's sampling distribution, P(balanced), masked weights, the logit lens's top three
                    next characters per layer and position and every head's induction score

Every file is run in onnxruntime (Python) and compared with PyTorch before it is written out; the
step model call by call, from the prompt to the model's last position, against the full forward
pass's logits. The models come from the shipped checkpoints, so the files are build outputs and
stay out of git.

Each model is also tried in int8 (quantize_int8: onnxruntime's own MatMulNBitsQuantizer, weight-only,
which onnxruntime-web's wasm backend runs). The int8 file ships in place of the fp32 one only when
every answer it gives on AGREEMENT fixed inputs (for the brackets, every held-out string too) is
PyTorch fp32's: the same words, the same greedy text, the same verdict, the same top three; the same
numbers at two decimals where the page or its prose quotes them. Otherwise the fp32 file ships.
meta.json records for each model the two sizes, the count of answers that agree, the rule and which
file shipped; expected.json also holds the shipped int8 files' own numbers (onnxruntime in Python),
which the pages must give.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

import transformer_lib as tl
from transformer_lib import recipes
from transformer_lib.export import (
    empty_past,
    export_first_attention,
    export_lens,
    export_onnx,
    export_step,
    first_attention,
    lens_model,
    step_model,
    with_attention,
)

ROOT = Path(__file__).resolve().parents[1]
ORT_WEB = ROOT / "node_modules" / "onnxruntime-web"
RUNTIME = ["ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"]  # wasm backend only
TOLERANCE = 1e-5  # onnxruntime against PyTorch, on every output: |got - expected| <= 1e-5 (1 + |expected|)

NUMBERS = ["4021", "57913", "0", "99999", "700", "12", "80008"]  # the page zero-pads to 5 digits, as the data does
NUMBERS_MAX_NEW = 16  # the longest answers, such as 'seventy-seven thousand ...', are 7 word tokens and <eos>
PROMPTS = [("Romeo.\n", 60), ("To be, or not to be", 60)]  # (prompt, new characters), greedy
LONGEST = "Juliet.\n"  # 8 characters, then new ones up to the model's 128 positions: the longest text it writes
SAMPLING = {"prompt": "Romeo.\n", "temperature": 0.8, "top_k": 5, "top_p": 0.6}  # one step's distribution
BRACKETS = ["([()])[]", "([(])][]", "[[()]]", "[]", "(()", "([)]", "((((()))))"]  # the pages quote the first four
MASKS = {"text": "to be", "pad": 2, "side": "left", "padding_mask": True, "causal": True}
VERSE = "To be, or not to be, that is the question:"  # the inside page's default text
RANDOM = {"seed": 0, "block": 24}  # the inside page's "Repeated random string": 24 characters drawn with seed 0, twice
LENS_TOP = 3  # the inside page shows the lens's three likeliest next characters
AGREEMENT = 50  # fixed inputs per model for the int8 trial (the browser tests' own first, then seeded or corpus ones)
INT8_BLOCK = 32  # weights per int8 scale, along the input: finer than one per channel and as small on disk


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


def _check(
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


def _export(model, path: Path, inputs: tuple[torch.Tensor, ...]) -> float:
    export_onnx(model, path)
    with torch.no_grad():
        expected = with_attention(model)(*inputs)
    return _check(path.stem, ort.InferenceSession(str(path)), inputs, expected)


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


def _words_onnx(session: ort.InferenceSession, src: np.ndarray, tgt_tok) -> str:
    """The numbers page's greedy decoding in onnxruntime: `src` (1, 5) digit ids -> the words, up to <eos>."""
    tgt = [tgt_tok.bos_id]
    for _ in range(NUMBERS_MAX_NEW):
        logits = session.run(None, {"src": src, "tgt": np.array([tgt])})[0]  # (1, T, V)
        tgt.append(int(logits[0, -1].argmax()))
        if tgt[-1] == tgt_tok.eos_id:
            break
    return tgt_tok.decode(torch.tensor(tgt))


def numbers_to_words(models: Path) -> tuple[dict, dict]:
    model, _ = tl.load_checkpoint("numbers_to_words")
    src_tok, tgt_tok = recipes.numbers_to_words_data()[:2]
    answers = {}
    for number in NUMBERS:
        src = torch.tensor([src_tok.encode(number.zfill(5))])  # (1, 5)
        out = model.greedy_decode(src, tgt_tok.bos_id, tgt_tok.eos_id, NUMBERS_MAX_NEW)  # (1, 1 + n)
        answers[number] = tgt_tok.decode(out[0])
    path = models / "numbers_to_words.onnx"
    gap = _export(model, path, (src, out))
    drawn = np.random.default_rng(0).integers(0, 100_000, AGREEMENT - len(NUMBERS))
    numbers = NUMBERS + [str(n) for n in drawn]  # the browser tests' numbers, then seeded ones
    sources = [np.array([src_tok.encode(n.zfill(5))]) for n in numbers]  # (1, 5) each
    reference = [
        tgt_tok.decode(model.greedy_decode(torch.tensor(x), tgt_tok.bos_id, tgt_tok.eos_id, NUMBERS_MAX_NEW)[0])
        for x in sources
    ]
    path, int8 = try_int8(
        path, "the greedy words identical", sources, reference, lambda session, x: _words_onnx(session, x, tgt_tok)
    )
    if int8["shipped"] == "int8":
        with torch.no_grad():
            gap = _check(path.stem, ort.InferenceSession(str(path)), (src, out), with_attention(model)(src, out), None)
    cfg = model.config
    meta = {
        "src_itos": src_tok.itos,
        "tgt_itos": tgt_tok.itos,
        "src_specials": specials(src_tok),
        "tgt_specials": specials(tgt_tok),
        "width": 5,
        "max_number": 99_999,
        "gap": gap,
        "max_new_tokens": NUMBERS_MAX_NEW,
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "file": path.name,
        "int8": int8,
    }
    return meta, answers


def _greedy_with_margin(model, prompt: torch.Tensor, n: int) -> tuple[torch.Tensor, float]:
    """PyTorch's greedy continuation (model.generate, temperature 0) and the smallest gap between the two
    likeliest logits on the way: a gap near onnxruntime's rounding could let the page pick the other token."""
    out = model.generate(prompt, n, temperature=0.0)  # (1, T0 + n)
    with torch.no_grad():
        logits = model(out[:, :-1])[0, prompt.shape[1] - 1 :]  # (n, V): the logits each new token was chosen from
    top2 = logits.topk(2, dim=-1).values  # (n, 2)
    return out, float((top2[:, 0] - top2[:, 1]).min())


def _sampling_distribution(model, prompt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The first new token's probabilities: (the model's, at temperature 1; those the library's _sample_next draws from
    with SAMPLING's temperature, top-k and top-p), each (V,). The same steps as _sample_next, which draws at once."""
    with torch.no_grad():
        logits = model(prompt)[0, -1]  # (V,)
    scaled = logits / SAMPLING["temperature"]
    kth = scaled.topk(SAMPLING["top_k"]).values[-1]
    scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    scaled = scaled.masked_fill(~tl.nucleus(scaled, SAMPLING["top_p"]), float("-inf"))
    return logits.softmax(-1), scaled.softmax(-1)


def _check_steps(path: Path, model, sequence: torch.Tensor, prompt: int) -> float:
    """Run the step model `path` as the page does on `sequence` (1, T): the first `prompt` tokens with an empty
    past, then one token per call. Each call's logits must be the full forward pass's for its positions, and its
    keys and values PyTorch's step model's (TOLERANCE). Returns the largest absolute difference."""
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
        gap = max(gap, _check(f"{path.stem} at position {start}", session, (tokens, keys, values), expected))
        keys, values, start = present_keys, present_values, end
    return gap


def _greedy_onnx(session: ort.InferenceSession, model, ids: list[int], n: int) -> list[int]:
    """The language-model page's greedy text in onnxruntime with the step model: the prompt `ids` once, then one
    token per call with the keys and values carried; returns the `n` new ids."""
    keys = values = empty_past(model).numpy()  # (L, 1, h_kv, 0, d_k)
    feed, new = np.array([ids]), []
    for _ in range(n):
        logits, keys, values = session.run(None, {"tokens": feed, "past_keys": keys, "past_values": values})
        new.append(int(logits[0, -1].argmax()))
        feed = np.array([new[-1:]])  # (1, 1)
    return new


def corpus_texts(val: torch.Tensor, count: int, length: int) -> list[list[int]]:
    """`count` pieces of `length` token ids, evenly spaced through the validation text `val` (M,): the int8
    trial's inputs beyond the browser tests' own."""
    return [val[int(s) : int(s) + length].tolist() for s in np.linspace(0, len(val) - length - 1, count)]


def shakespeare(models: Path) -> tuple[dict, dict, dict, dict]:
    model, _ = tl.load_checkpoint("shakespeare_char")
    tok, _, val = recipes.shakespeare_data("char")
    cfg = model.config
    answers = []
    for prompt, n in [*PROMPTS, (LONGEST, cfg.max_len - len(LONGEST))]:
        out, margin = _greedy_with_margin(model, torch.tensor([tok.encode(prompt)]), n)
        if margin < 1e-3:
            raise SystemExit(f"the greedy continuation of {prompt!r} passes a near tie ({margin:.1e}); pick another")
        answers.append({"prompt": prompt, "new": n, "text": tok.decode(out[0, len(prompt) :]), "margin": margin})
    longest = answers.pop()  # the browser tests' longest text, apart from the cases they loop over
    path = export_step(model, models / "shakespeare_char_step.onnx")
    gap = _check_steps(path, model, out, len(LONGEST))  # out: the longest text, all of max_len
    cases = [(tok.encode(p), n) for p, n in [*PROMPTS, (LONGEST, cfg.max_len - len(LONGEST))]]
    cases += [(ids, PROMPTS[0][1]) for ids in corpus_texts(val, AGREEMENT - len(cases), 16)]  # 16 characters, 60 new
    reference = [model.generate(torch.tensor([ids]), n, temperature=0.0)[0, len(ids) :].tolist() for ids, n in cases]
    path, int8 = try_int8(
        path,
        f"the greedy text identical, {PROMPTS[0][1]} new characters or more",
        cases,
        reference,
        lambda session, case: _greedy_onnx(session, model, *case),
    )
    if int8["shipped"] == "int8":
        raise SystemExit("an int8 step model would need its own step check (_check_steps holds it to 1e-5)")
    attn = model.decoder.layers[0].self_attn
    meta = {
        "itos": tok.itos,
        "specials": specials(tok),
        "max_len": cfg.max_len,
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "kv_heads": attn.num_kv_heads,  # the past's shape, (layers, 1, kv_heads, T_past, head_width)
        "head_width": attn.d_k,
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    probs, drawn = _sampling_distribution(model, torch.tensor([tok.encode(SAMPLING["prompt"])]))
    top = probs.argsort(descending=True)[:8].tolist()  # the page's table: the eight likeliest, likeliest first
    sampling = {
        **SAMPLING,
        "tokens": [tok.itos[i] for i in top],
        "probs": probs[top].tolist(),
        "drawn": drawn[top].tolist(),
    }

    # the masks playground: the same model's first attention layer, with the reader's mask
    ids = tok.encode(MASKS["text"])
    ids = [tok.pad_id] * MASKS["pad"] + ids if MASKS["side"] == "left" else ids + [tok.pad_id] * MASKS["pad"]
    tokens = torch.tensor([ids])  # (1, T)
    T = tokens.shape[1]
    mask = torch.ones(T, T, dtype=torch.bool)
    if MASKS["padding_mask"]:
        mask &= tl.padding_mask(tokens, tok.pad_id)[0, 0]  # (1, T): no query looks at a <pad> key
    if MASKS["causal"]:
        mask &= tl.causal_mask(T)
    path = export_first_attention(model, models / "shakespeare_char_layer1.onnx")
    with torch.no_grad():
        weights = first_attention(model)(tokens, mask)  # (h, T, T)
    masks_gap = _check(path.stem, ort.InferenceSession(str(path)), (tokens, mask), (weights,))
    probes = [(tokens, mask)]  # the browser test's input, then pieces of verse with the causal mask
    probes += [(torch.tensor([ids]), tl.causal_mask(len(ids))) for ids in corpus_texts(val, AGREEMENT - 1, 16)]
    with torch.no_grad():
        reference = [np.round(first_attention(model)(*probe).numpy(), 2).tolist() for probe in probes]

    def weights_onnx(session: ort.InferenceSession, probe: tuple[torch.Tensor, torch.Tensor]) -> list:
        feeds = {"tokens": probe[0].numpy(), "mask": probe[1].numpy()}
        return np.round(session.run(None, feeds)[0], 2).tolist()  # (h, T, T), as the table prints them

    rule = "every head's weights identical at two decimals, as the page's table prints them"
    path, masks_int8 = try_int8(path, rule, probes, reference, weights_onnx)
    if masks_int8["shipped"] == "int8":
        raise SystemExit(
            "an int8 masks probe would need its own weights in expected.json (the test holds them to 1e-5)"
        )
    masks_meta = {
        "itos": tok.itos,
        "specials": specials(tok),
        "max_len": cfg.max_len,
        "heads": cfg.num_heads,
        "gap": masks_gap,
        "file": path.name,
        "int8": masks_int8,
    }
    expected = {"greedy": answers, "longest": longest, "sampling": sampling}
    return meta, expected, masks_meta, {**MASKS, "weights": weights.tolist()}


def mulberry32(seed: int):
    """The pages' seeded generator (mulberry32 in playground.js), number for number: seed -> an endless iterator of
    floats in [0, 1). With it the build draws the same repeated random string as the inside page's button."""
    m = 0xFFFFFFFF
    a = seed & m
    while True:
        a = (a + 0x6D2B79F5) & m
        t = ((a ^ (a >> 15)) * (1 | a)) & m
        t = ((t + (((t ^ (t >> 7)) * (61 | t)) & m)) & m) ^ t
        yield ((t ^ (t >> 14)) & m) / 4294967296


def repeated_random(tok, seed: int, block: int) -> str:
    """`block` characters of the vocabulary (no special token) drawn with mulberry32(seed), shown twice: the page's
    button does the same, so a seed gives the same string here and there."""
    chars = tok.itos[specials(tok)["count"] :]
    draw = mulberry32(seed)
    text = "".join(chars[int(next(draw) * len(chars))] for _ in range(block))
    return text + text


def _lens_answers(model, tok, text: str) -> dict:
    """PyTorch's answers for the inside page on `text`: per layer and position the logit lens's LENS_TOP likeliest
    next tokens with their probabilities, and every head's induction score (tl.inside), per layer. Fails when a
    top-three comparison sits on a near tie: the lens's logits of ranks 1 to 4 must be 1e-3 apart or more."""
    tokens = torch.tensor([tok.encode(text)])  # (1, T)
    logits, cache = tl.inside.run_with_cache(model, tokens)
    lens = tl.inside.logit_lens(model, cache)[:, 0]  # (L, T, V)
    top = lens.topk(LENS_TOP + 1, dim=-1).values  # (L, T, 4)
    margin = float((top[..., :-1] - top[..., 1:]).min())
    if margin < 1e-3:
        raise SystemExit(
            f"the logit lens on {text!r} has a near tie in its top {LENS_TOP} ({margin:.1e}); pick another"
        )
    probs = lens.double().softmax(-1)  # (L, T, V), as the page computes them from the same logits
    p, ids = probs.topk(LENS_TOP, dim=-1)  # (L, T, 3) each
    layers = len(model.decoder.layers)
    patterns = [cache[f"decoder.layers.{i}.self_attn.pattern"] for i in range(layers)]  # (1, h, T, T) each
    return {
        "text": text,
        "margin": margin,
        "top": [[[tok.itos[i] for i in row] for row in layer] for layer in ids.tolist()],  # (L, T, 3) tokens
        "probs": p.tolist(),  # (L, T, 3)
        "induction": [tl.inside.induction_scores(pattern, tokens).tolist() for pattern in patterns],  # (L, h)
    }


def _top(lens: np.ndarray) -> list:
    """The logit lens (L, T, V) -> the LENS_TOP likeliest ids at each layer and position, likeliest first."""
    return np.argsort(-lens, axis=-1, kind="stable")[..., :LENS_TOP].tolist()  # (L, T, 3)


def inside_lm(models: Path) -> tuple[dict, dict]:
    """The inside page: the Shakespeare character model's logit lens and attention, as ONNX, and PyTorch's answers on
    a line of verse and on a repeated random string."""
    model, _ = tl.load_checkpoint("shakespeare_char")
    tok, _, val = recipes.shakespeare_data("char")
    cfg = model.config
    random_text = repeated_random(tok, RANDOM["seed"], RANDOM["block"])
    answers = {
        "verse": _lens_answers(model, tok, VERSE),
        "random": {**RANDOM, **_lens_answers(model, tok, random_text)},
    }
    path = export_lens(model, models / "shakespeare_char_lens.onnx")
    session = ort.InferenceSession(str(path))
    gap = 0.0
    for text in (VERSE, random_text, "T", repeated_random(tok, 1, cfg.max_len // 2)):
        tokens = torch.tensor([tok.encode(text)])  # (1, T): the answers' texts, one character, all of max_len
        with torch.no_grad():
            expected = lens_model(model)(tokens)  # lens (L, T, V), attention (L, h, T, T)
        gap = max(gap, _check(f"{path.stem} on {len(text)} characters", session, (tokens,), expected))
    texts = [tok.encode(VERSE), tok.encode(random_text), *corpus_texts(val, AGREEMENT - 2, 64)]  # (T,) ids each
    with torch.no_grad():
        reference = [_top(lens_model(model)(torch.tensor([ids]))[0].numpy()) for ids in texts]
    path, int8 = try_int8(
        path,
        f"the lens's top {LENS_TOP} identical, in order, at every layer and position",
        texts,
        reference,
        lambda session, ids: _top(session.run(None, {"tokens": np.array([ids])})[0]),
    )
    if int8["shipped"] == "int8":
        raise SystemExit("an int8 lens would need its own probabilities in expected.json (the test holds them to 5e-5)")
    meta = {
        "itos": tok.itos,
        "specials": specials(tok),
        "max_len": cfg.max_len,
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "top": LENS_TOP,
        "random_block": RANDOM["block"],
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    return meta, answers


def partner_head(model, tok) -> tuple[int, int, float]:
    """(layer, head, mean weight) of the head that looks most from each bracket to its partner, on held-out
    balanced strings: the encoder chapter's measure."""
    x_test, y_test = recipes.bracket_classifier_data()[3:]
    total, count = None, 0
    for ids in x_test[y_test == 1][:200]:
        ids = ids[ids != tok.pad_id][None]  # (1, S) with <bos> first
        with torch.no_grad():
            _, weights = with_attention(model)(ids)  # (L, h, S, S)
        text = tok.decode(ids[0])
        stack, pairs = [], []
        for i, c in enumerate(text, start=1):  # +1: position 0 is <bos>
            if c in "([":
                stack.append(i)
            else:
                j = stack.pop()
                pairs += [(i, j), (j, i)]
        rows, cols = zip(*pairs)
        mass = weights[:, :, list(rows), list(cols)].sum(-1)  # (L, h)
        total = mass if total is None else total + mass
        count += len(pairs)
    mean = total / count  # (L, h)
    layer, head = divmod(int(mean.argmax()), mean.shape[1])
    return layer, head, float(mean[layer, head])


def brackets(models: Path) -> tuple[dict, dict, dict | None]:
    """The bracket classifier's meta, its P(balanced) on BRACKETS, and the shipped int8 file's own P (None: fp32)."""
    model, _ = tl.load_checkpoint("bracket_classifier")
    tok = recipes.bracket_classifier_data()[0]
    answers = {}
    for text in BRACKETS:
        ids = torch.tensor([tok.encode(text, bos=True)])  # (1, 1 + S)
        with torch.no_grad():
            answers[text] = float(model(ids).softmax(-1)[0, 1])  # P(balanced)
    path = models / "bracket_classifier.onnx"
    gap = _export(model, path, (ids,))
    x_test = recipes.bracket_classifier_data()[3]
    texts = BRACKETS + [tok.decode(row[row != tok.pad_id]) for row in x_test]  # and every held-out string
    with torch.no_grad():
        probs = [float(model(torch.tensor([tok.encode(t, bos=True)])).softmax(-1)[0, 1]) for t in texts]

    def onnx_probability(session: ort.InferenceSession, text: str) -> float:
        logits = session.run(None, {"tokens": np.array([tok.encode(text, bos=True)])})[0][0]  # (2,)
        return float(torch.tensor(logits).softmax(-1)[1])

    def verdict(p: float, text: str) -> tuple:  # the page's verdict, and P at two decimals where the prose quotes it
        return (p > 0.5, round(p, 2) if text in BRACKETS[:4] else None)

    path, int8 = try_int8(
        path,
        "the verdict (P > 0.5) identical; P at two decimals too for the four strings the page quotes",
        texts,
        [verdict(p, t) for p, t in zip(probs, texts)],
        lambda session, t: verdict(onnx_probability(session, t), t),
    )
    onnx_answers = None
    if int8["shipped"] == "int8":
        session = ort.InferenceSession(str(path))
        with torch.no_grad():
            gap = _check(path.stem, session, (ids,), with_attention(model)(ids), None)
        shipped = [onnx_probability(session, t) for t in texts]
        int8["max_probability_change"] = max(abs(a - b) for a, b in zip(shipped, probs))
        onnx_answers = {t: onnx_probability(session, t) for t in BRACKETS}  # what the page must show
    layer, head, weight = partner_head(model, tok)
    cfg = model.config
    meta = {
        "itos": tok.itos,
        "specials": specials(tok),
        "max_len": cfg.max_len,
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "partner": {"layer": layer, "head": head, "mean_weight": weight},
        "gap": gap,
        "file": path.name,
        "int8": int8,
    }
    return meta, answers, onnx_answers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "playground")
    args = parser.parse_args()
    missing = [f for f in RUNTIME if not (ORT_WEB / "dist" / f).is_file()]
    if missing:
        print(
            f"onnxruntime-web is not installed ({', '.join(missing)} missing from {ORT_WEB}/dist); run `npm ci`",
            file=sys.stderr,
        )
        return 1
    shutil.rmtree(args.out, ignore_errors=True)
    vendor, models = args.out / "vendor", args.out / "models"
    vendor.mkdir(parents=True)
    models.mkdir()
    for f in RUNTIME:
        shutil.copy(ORT_WEB / "dist" / f, vendor / f)
    package = json.loads((ORT_WEB / "package.json").read_text())
    (vendor / "README.txt").write_text(
        f"onnxruntime-web {package['version']} ({package['license']} license), "
        "copied from npm by tools/build_playground.py\n"
    )

    torch.manual_seed(0)  # nothing here samples; a fixed seed keeps it so
    meta, expected = {}, {}
    meta["numbers_to_words"], expected["numbers_to_words"] = numbers_to_words(models)
    meta["shakespeare_char"], expected["shakespeare_char"], meta["masks"], expected["masks"] = shakespeare(models)
    meta["bracket_classifier"], expected["bracket_classifier"], onnx_brackets = brackets(models)
    if onnx_brackets is not None:  # the int8 file's own numbers, which the page must give (the tests compare)
        expected["onnx"] = {"bracket_classifier": onnx_brackets}
    meta["inside"], expected["inside"] = inside_lm(models)
    keys = ["numbers_to_words", "shakespeare_char", "masks", "bracket_classifier", "inside"]
    for key in keys:
        meta[key]["bytes"] = (models / meta[key]["file"]).stat().st_size
    meta["runtime_bytes"] = sum((vendor / f).stat().st_size for f in RUNTIME)
    (models / "meta.json").write_text(json.dumps(meta, ensure_ascii=False))
    (args.out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1))
    for key in keys:
        m, t = meta[key], meta[key]["int8"]
        print(
            f"{m['file']}: {m['bytes'] / 1e6:.2f} MB, at most {m['gap']:.1e} from PyTorch; int8 "
            f"{t['int8_bytes'] / 1e6:.2f} MB against fp32 {t['fp32_bytes'] / 1e6:.2f} MB, {t['agree']} of "
            f"{t['inputs']} answers agree ({t['rule']}): {t['shipped']} ships"
        )
    print(
        f"models: {sum(meta[k]['bytes'] for k in keys) / 1e6:.2f} MB shipped, fp32 all: "
        f"{sum(meta[k]['int8']['fp32_bytes'] for k in keys) / 1e6:.2f} MB"
    )
    b = meta["bracket_classifier"]["partner"]
    print(
        f"runtime: {meta['runtime_bytes'] / 1e6:.1f} MB; the partner head is layer {b['layer'] + 1}, "
        f"head {b['head'] + 1} (mean weight {b['mean_weight']:.2f})"
    )
    shown = args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
    print(f"the playground's files are in {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
