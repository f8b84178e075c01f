"""The language-model page (book/playground/language_model.md): the Shakespeare character model as a step model.

models/shakespeare_char_step.onnx keeps a KV cache: the page feeds the prompt once, then one character per call,
carrying the keys and values. The step model is checked call by call, from the prompt to the model's last position,
against the full forward pass's logits (common.check_steps).

The build records PyTorch's greedy text on PROMPTS, the page's default prompt and length first (defaults.json), and
on the longest the model allows: 8 prompt characters and 120 new (LONGEST); and one step's sampling distribution
(SAMPLING: the page's default prompt and temperature, with top-k and top-p set so that both cut). Its int8 file
would ship when its greedy text is PyTorch's on all AGREEMENT prompts.
"""

from __future__ import annotations

from pathlib import Path

import torch

import transformer_lib as tl
from transformer_lib import recipes
from transformer_lib.export import export_step

from .common import (
    AGREEMENT,
    check_steps,
    corpus_texts,
    greedy_onnx,
    greedy_with_margin,
    page_defaults,
    specials,
    try_int8,
)

PAGE = page_defaults("language_model")  # the form's starting values: {"lm-prompt": "Romeo.\n", "lm-length": 60, ...}
PROMPTS = [(PAGE["lm-prompt"], PAGE["lm-length"]), ("To be, or not to be", 60)]  # (prompt, new characters), greedy
LONGEST = "Juliet.\n"  # 8 characters, then new ones up to the model's 128 positions: the longest text it writes
# one step's distribution: the page's prompt and temperature; top-k 5 and top-p 0.6 (the test sets them) both cut
SAMPLING = {"prompt": PAGE["lm-prompt"], "temperature": PAGE["lm-temperature"], "top_k": 5, "top_p": 0.6}


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


def build(models: Path) -> tuple[dict, dict]:
    """Write the step model into `models`; -> (meta, PyTorch's greedy texts, longest text and sampling step)."""
    model, _ = tl.load_checkpoint("shakespeare_char")
    tok, _, val = recipes.shakespeare_data("char")
    cfg = model.config
    answers = []
    for prompt, n in [*PROMPTS, (LONGEST, cfg.max_len - len(LONGEST))]:
        out, margin = greedy_with_margin(model, torch.tensor([tok.encode(prompt)]), n)
        if margin < 1e-3:
            raise SystemExit(f"the greedy continuation of {prompt!r} passes a near tie ({margin:.1e}); pick another")
        answers.append({"prompt": prompt, "new": n, "text": tok.decode(out[0, len(prompt) :]), "margin": margin})
    longest = answers.pop()  # the browser tests' longest text, apart from the cases they loop over
    path = export_step(model, models / "shakespeare_char_step.onnx")
    gap = check_steps(path, model, out, len(LONGEST))  # out: the longest text, all of max_len
    cases = [(tok.encode(p), n) for p, n in [*PROMPTS, (LONGEST, cfg.max_len - len(LONGEST))]]
    cases += [(ids, PROMPTS[0][1]) for ids in corpus_texts(val, AGREEMENT - len(cases), 16)]  # 16 characters, 60 new
    reference = [model.generate(torch.tensor([ids]), n, temperature=0.0)[0, len(ids) :].tolist() for ids, n in cases]
    path, int8 = try_int8(
        path,
        f"the greedy text identical, {PROMPTS[0][1]} new characters or more",
        cases,
        reference,
        lambda session, case: greedy_onnx(session, model, *case),
    )
    if int8["shipped"] == "int8":
        raise SystemExit("an int8 step model would need its own step check (check_steps holds it to 1e-5)")
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
