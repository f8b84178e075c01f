"""Export the book's shipped models to ONNX for the website's playgrounds, and check each in onnxruntime.

    python tools/export_models.py [--out _build/models]

Writes bracket_classifier.onnx and shakespeare_char.onnx (with their attention weights as extra
outputs, see transformer_lib.export), runs each on an input from its own task in onnxruntime and
compares with PyTorch. The files are build outputs, not committed: they are made again from the
shipped checkpoints. The numbers-to-words model has no shipped checkpoint yet, so it is not here.
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


def _inputs(name: str) -> torch.Tensor:
    """(1, T) ids of a real input for each model: a bracket string, or a line of the held-out play."""
    if name == "bracket_classifier":
        tok = checkpoints.bracket_classifier_data()[0]
        return torch.tensor([tok.encode("(()())(")])
    tok, _, valid = checkpoints.shakespeare_data("char")
    return valid[:64][None]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "models")
    args = parser.parse_args()
    for name in ("bracket_classifier", "shakespeare_char"):
        model, _ = tl.load_checkpoint(name)
        path = export_onnx(model, args.out / f"{name}.onnx")
        ids = _inputs(name)
        with torch.no_grad():
            logits, weights = with_attention(model)(ids)
        got_logits, got_weights = ort.InferenceSession(str(path)).run(None, {"tokens": ids.numpy()})
        gap = max(np.abs(got_logits - logits.numpy()).max(), np.abs(got_weights - weights.numpy()).max())
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {path.stat().st_size / 1e6:.2f} MB, "
              f"input of {ids.shape[1]} tokens, largest difference from PyTorch {gap:.1e}")  # fmt: skip
        if gap > 1e-5:
            print(f"{name}: onnxruntime differs from PyTorch by {gap:.1e}, more than 1e-5", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
