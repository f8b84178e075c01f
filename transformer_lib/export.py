"""The book's models as ONNX files, with their attention weights as extra outputs, for the website's playgrounds.

`export_onnx(model, path)` writes a `DecoderOnlyLM`, an `EncoderOnlyModel` (classifier or
regressor) or a `Transformer` with batch 1 and dynamic sequence lengths, through
`torch.onnx.export` with `dynamo=False`: the TorchScript exporter, which PyTorch marks as legacy,
but which traces these models with dynamic lengths as they are, and whose files onnxruntime-web
was seen to run. Each file has one output more than the model: the
attention weights a playground draws, stacked over the layers.

    DecoderOnlyLM:     tokens (1, T)             -> logits (1, T, V), attention (L, h, T, T)
    EncoderOnlyModel:  tokens (1, S)             -> logits (1, C),    attention (L, h, S, S)
    Transformer:       src (1, S), tgt (1, T)    -> logits (1, T, V), cross_attention (L, h, T, S)

`export_first_attention(model, path)` writes the masks playground's probe instead: a language
model's first self-attention layer, with the mask as an input the page builds.

    DecoderOnlyLM:     tokens (1, T), mask (T, T) bool -> attention (h, T, T)

`onnx` and `onnxscript` are needed to export and `onnxruntime` to run the files; the test extra
installs them, and the package itself does not need them.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from .attention import MultiHeadAttention
from .models import DecoderOnlyLM, EncoderOnlyModel, Transformer

__all__ = ["export_first_attention", "export_onnx", "first_attention", "with_attention"]


class _WithAttention(nn.Module):
    """model(*inputs) -> (its output, the watched layers' attention weights stacked: (L, h, T_q, T_k))."""

    def __init__(self, model: nn.Module, watched: list[MultiHeadAttention]):
        super().__init__()
        self.model = model
        self.watched = watched  # a plain list: the modules stay registered under `model` only

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(*inputs)
        return out, torch.stack([m.last_weights[0] for m in self.watched])  # batch 1: (L, h, T_q, T_k)


def _plan(model: nn.Module) -> tuple[list[MultiHeadAttention], list[str], list[str], dict]:
    """(attention modules to watch, input names, output names, dynamic axes) for one kind of model."""
    if isinstance(model, DecoderOnlyLM):
        watched = [layer.self_attn for layer in model.decoder.layers]
        return (
            watched,
            ["tokens"],
            ["logits", "attention"],
            {"tokens": {1: "T"}, "logits": {1: "T"}, "attention": {2: "T", 3: "T"}},
        )
    if isinstance(model, EncoderOnlyModel):
        watched = [layer.self_attn for layer in model.encoder.layers]
        return watched, ["tokens"], ["logits", "attention"], {"tokens": {1: "S"}, "attention": {2: "S", 3: "S"}}
    if isinstance(model, Transformer):
        watched = [layer.cross_attn for layer in model.decoder.layers]
        return (
            watched,
            ["src", "tgt"],
            ["logits", "cross_attention"],
            {"src": {1: "S"}, "tgt": {1: "T"}, "logits": {1: "T"}, "cross_attention": {2: "T", 3: "S"}},
        )
    raise TypeError(
        f"export_onnx takes a DecoderOnlyLM, an EncoderOnlyModel or a Transformer, got {type(model).__name__}"
    )


def with_attention(model: nn.Module) -> nn.Module:
    """The module that export_onnx traces: the model, returning also its attention weights (batch 1).

    Running it in PyTorch gives what the ONNX file must give, which is how the tests compare them.
    It switches the watched attention layers to keeping their weights (`keep_weights`), and leaves
    them so; export_onnx puts them back as they were.
    """
    watched, _, _, _ = _plan(model)
    for m in watched:
        m.keep_weights = True  # the weights path: the scores are computed explicitly and kept
    return _WithAttention(model.eval(), watched)


def export_onnx(model: nn.Module, path: str | Path, example: tuple[torch.Tensor, ...] | None = None) -> Path:
    """Write `model` (on the CPU, in eval mode) to `path` as ONNX with batch 1 and dynamic lengths; return the path.

    `example` are the inputs traced, (1, length) token ids each; by default ids 1..5 (and 1..4 for
    a Transformer's target). The lengths are dynamic in the file; the batch stays 1.
    """
    watched, inputs, outputs, dynamic = _plan(model)
    if example is None:
        example = (torch.arange(1, 6)[None], torch.arange(1, 5)[None])[: len(inputs)]  # (1, 5), and (1, 4) ids
    for name, tensor in zip(inputs, example):
        if tensor.dim() != 2 or tensor.shape[0] != 1:
            raise ValueError(f"{name} must be a (1, length) tensor of token ids, got shape {tuple(tensor.shape)}")
    kept = [m.keep_weights for m in watched]
    try:
        return _trace(with_attention(model.cpu()), example, path, inputs, outputs, dynamic)
    finally:
        for m, k in zip(watched, kept):
            m.keep_weights, m.last_weights = k, None


def _trace(
    module: nn.Module, example: tuple, path: str | Path, inputs: list[str], outputs: list[str], dynamic: dict
) -> Path:
    """torch.onnx.export with the settings every file here shares: opset 17, the TorchScript exporter."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # about the Python-side input checks it bakes in
        warnings.simplefilter("ignore", DeprecationWarning)  # the legacy TorchScript exporter, on purpose
        torch.onnx.export(
            module,
            example,
            str(path),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=dynamic,
            opset_version=17,
            dynamo=False,
        )
    return path


class _FirstAttention(nn.Module):
    """(tokens (1, T), mask (T, T) bool, True = may attend) -> the first layer's attention weights (h, T, T)."""

    def __init__(self, model: DecoderOnlyLM):
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        layer = self.model.decoder.layers[0]
        x = self.model.pos(self.model.embed(tokens))  # (1, T, d_model)
        h = layer.norm1(x) if layer.config.norm_first else x  # what the attention reads in each kind of block
        _, weights = layer.self_attn(h, h, h, mask[None, None], need_weights=True)  # (1, h, T, T)
        return weights[0]  # (h, T, T); a fully masked row is zeros


def first_attention(model: DecoderOnlyLM) -> nn.Module:
    """The module that export_first_attention traces: tokens (1, T), mask (T, T) -> the first layer's weights (h, T, T).

    The mask is whatever the caller builds (padding, causal, both or neither), not the model's own
    causal mask: the masks playground lets the reader choose it.
    """
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"first_attention takes a DecoderOnlyLM, got {type(model).__name__}")
    return _FirstAttention(model.eval())


def export_first_attention(model: DecoderOnlyLM, path: str | Path) -> Path:
    """Write `first_attention(model)` (on the CPU) to `path` as ONNX with a dynamic length T; return the path."""
    example = (torch.arange(1, 6)[None], torch.ones(5, 5, dtype=torch.bool).tril())  # (1, 5) ids, (5, 5) mask
    dynamic = {"tokens": {1: "T"}, "mask": {0: "T", 1: "T"}, "attention": {1: "T", 2: "T"}}
    return _trace(first_attention(model.cpu()), example, path, ["tokens", "mask"], ["attention"], dynamic)
