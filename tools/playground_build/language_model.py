"""The language-model page (book/playground/language_model.md): the Shakespeare character model as a step model.

models/shakespeare_char_step.onnx keeps a KV cache: the page feeds the prompt once, then one character per call,
carrying the keys and values. The step model is checked call by call, from the prompt to the model's last position,
against the full forward pass's logits (_check_steps).

The build records PyTorch's greedy text on PROMPTS, the page's default prompt and length first (defaults.json), and
on the longest the model allows: 8 prompt characters and 120 new (LONGEST); and one step's sampling distribution
(SAMPLING: the page's default prompt and temperature, with top-k and top-p set so that both cut). Its int8 file
would ship when its greedy text is PyTorch's on all AGREEMENT prompts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import recipes
from transformer_lib.export import empty_past, export_step, step_model

from .common import AGREEMENT, check_session, corpus_texts, page_defaults, specials, try_int8

PAGE = page_defaults("language_model")  # the form's starting values: {"lm-prompt": "Romeo.\n", "lm-length": 60, ...}
PROMPTS = [(PAGE["lm-prompt"], PAGE["lm-length"]), ("To be, or not to be", 60)]  # (prompt, new characters), greedy
LONGEST = "Juliet.\n"  # 8 characters, then new ones up to the model's 128 positions: the longest text it writes
# one step's distribution: the page's prompt and temperature; top-k 5 and top-p 0.6 (the test sets them) both cut
SAMPLING = {"prompt": PAGE["lm-prompt"], "temperature": PAGE["lm-temperature"], "top_k": 5, "top_p": 0.6}


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
        gap = max(gap, check_session(f"{path.stem} at position {start}", session, (tokens, keys, values), expected))
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


def build(models: Path) -> tuple[dict, dict]:
    """Write the step model into `models`; -> (meta, PyTorch's greedy texts, longest text and sampling step)."""
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
    return meta, {"greedy": answers, "longest": longest, "sampling": sampling}
