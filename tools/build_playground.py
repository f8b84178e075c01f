"""Export the book's shipped models to ONNX for the website's playgrounds, and check each in onnxruntime.

    python tools/export_models.py [--out _build/models]

Writes bracket_classifier.onnx, shakespeare_char.onnx and numbers_to_words.onnx (with their
attention weights as extra outputs, see transformer_lib.export), runs each on an input from its
own task in onnxruntime and compares with PyTorch. The files are build outputs, not committed:
they are made again from the shipped checkpoints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import transformer_lib as tl
from transformer_lib import checkpoints
from transformer_lib.export import export_onnx, with_attention

ROOT = Path(__file__).resolve().parents[1]


def _inputs(name: str, model) -> tuple[torch.Tensor, ...]:
    """(1, T) ids of a real input for each model: a bracket string, a line of the held-out play, or a number
    with the words the model writes for it."""
    if name == "bracket_classifier":
        tok = checkpoints.bracket_classifier_data()[0]
        return (torch.tensor([tok.encode("(()())(")]),)
    if name == "numbers_to_words":
        src_tok, tgt_tok = checkpoints.numbers_to_words_data()[:2]
        src = torch.tensor([src_tok.encode("57913")])  # (1, 5)
        return src, model.greedy_decode(src, tgt_tok.bos_id, tgt_tok.eos_id, max_new_tokens=10)  # (1, 1 + n)
    tok, _, valid = checkpoints.shakespeare_data("char")
    return (valid[:64][None],)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "models")
    args = parser.parse_args()
    for name in ("bracket_classifier", "shakespeare_char", "numbers_to_words"):
        model, _ = tl.load_checkpoint(name)
        path = export_onnx(model, args.out / f"{name}.onnx")
        inputs = _inputs(name, model)
        with torch.no_grad():
            logits, weights = with_attention(model)(*inputs)
        session = ort.InferenceSession(str(path))
        feeds = {spec.name: x.numpy() for spec, x in zip(session.get_inputs(), inputs)}
        got_logits, got_weights = session.run(None, feeds)
        gap = max(np.abs(got_logits - logits.numpy()).max(), np.abs(got_weights - weights.numpy()).max())
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        lengths = [x.shape[1] for x in inputs]
        print(f"{shown}: {path.stat().st_size / 1e6:.2f} MB, inputs of {lengths} tokens, "
              f"largest difference from PyTorch {gap:.1e}")  # fmt: skip
        if gap > 1e-5:
            print(f"{name}: onnxruntime differs from PyTorch by {gap:.1e}, more than 1e-5", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
