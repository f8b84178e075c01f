"""The book's models as ONNX files, with their attention weights as extra outputs, for the website's playgrounds.

`export_onnx(model, path)` writes a `DecoderOnlyLM`, an `EncoderOnlyModel` (classifier or
regressor), a `Transformer` or BERT with its masked-LM head (`bert.BertForMaskedLM`, one
segment) with batch 1 and dynamic sequence lengths, or a `VisionTransformer` with one image of
its own size (nothing in it is dynamic), through
`torch.onnx.export` with `dynamo=False`: the TorchScript exporter, which PyTorch marks as legacy,
but which traces these models with dynamic lengths as they are, and whose files onnxruntime-web
was seen to run. Each file has one output more than the model: the
attention weights a playground draws, stacked over the layers.

    DecoderOnlyLM:     tokens (1, T)             -> logits (1, T, V), attention (L, h, T, T)
    EncoderOnlyModel:  tokens (1, S)             -> logits (1, C),    attention (L, h, S, S)
    BertForMaskedLM:   tokens (1, S)             -> logits (1, S, V), attention (L, h, S, S)
    Transformer:       src (1, S), tgt (1, T)    -> logits (1, T, V), cross_attention (L, h, T, S)
    VisionTransformer: images (1, C, H, W)       -> logits (1, classes), attention (L, h, 1 + N, 1 + N)

(N patches, and the class token first, for a ViT with pool="cls".)

`export_first_attention(model, path)` writes the masks playground's probe instead: a language
model's first self-attention layer, with the mask as an input the page builds.

    DecoderOnlyLM:     tokens (1, T), mask (T, T) bool -> attention (h, T, T)

`export_step(model, path)` writes a language model that keeps a KV cache, for a page that writes
one token at a time: the keys and values of the positions seen so far go in, and come back out
with the new positions' appended, so each step computes only its new tokens (the language-model
playground feeds the prompt once, then one character per step). It is `step_model(model)`: the
model's own forward pass with one `KVCache` per layer, filled from the inputs.

    DecoderOnlyLM:     tokens (1, T_new), past_keys (L, 1, h_kv, T_past, d_k), past_values (same)
                       -> logits (1, T_new, V), present_keys (L, 1, h_kv, T_past + T_new, d_k), present_values

`export_lens(model, path)` writes what the "Inside the language model" playground reads: the
logit lens of every layer and every layer's attention, in one pass. It is `lens_model(model)`,
which computes what ``inside.logit_lens`` and the patterns captured by ``inside.run_with_cache``
hold, for batch 1. The lens is logits, not probabilities: each layer's residual stream through
the final norm and the output layer; the last layer's row is the model's logits.

    DecoderOnlyLM:     tokens (1, T)             -> lens (L, T, V), attention (L, h, T, T)

T_past is 0 on the first call (`empty_past(model)`), which feeds the whole prompt: onnxruntime,
in Python and on the web, takes the zero-length past as it is. h_kv is the model's key-value heads
(num_heads unless grouped-query attention). The forward pass reads the cached length as
`KVCache.length`, a shape the tracer follows, so that T_past stays dynamic in the file.

`export_ablation(model, means, path)` writes the switches of the inside playground's "Break it, and watch":
`ablation_model(model, means)`, the model with every head and layer switchable (on, zeroed, or its mean
output), the positions and each norm, as inputs, so that one file serves every setting. It gives the numbers
of tl.inside's interventions (zero_heads, mean_heads, zero_output, mean_output, without_positions, skip_norms).

    DecoderOnlyLM:     tokens (1, T), heads (L, h), layers (L,), positions (1,), norms (N,) -> logits (1, T, V)

`for_playground(model, tokenizer, name)` writes a reader's own model for a page's "Your own model" picker:
one file, ``name.playground``, with what the page must know (kind, vocabulary, lengths) and the ONNX model
(the step model for the language-model page; the classifier with its attention for the brackets page, and
the ViT with its attention for the draw-a-digit page);
`read_playground` reads it back, checking its framing.

`onnx` and `onnxscript` are needed to export and `onnxruntime` to run the files; the test extra
installs them, and the package itself does not need them.
"""

from __future__ import annotations

import json
import struct
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention, watch_weights
from .bert import BertForMaskedLM
from .inside import norm_names
from .masks import causal_mask
from .models import DecoderOnlyLM, EncoderOnlyModel, Transformer
from .vit import VisionTransformer

__all__ = [
    "ablation_model",
    "ablation_points",
    "ablation_switches",
    "empty_past",
    "export_ablation",
    "export_first_attention",
    "export_lens",
    "export_onnx",
    "export_step",
    "for_playground",
    "read_playground",
    "first_attention",
    "lens_model",
    "step_model",
    "with_attention",
]


class _WithAttention(nn.Module):
    """model(*inputs) -> (its output, the watched layers' attention weights stacked: (L, h, T_q, T_k))."""

    def __init__(self, model: nn.Module, watched: list[MultiHeadAttention]):
        super().__init__()
        self.model = model
        self.watched = watched  # a plain list: the modules stay registered under `model` only

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weights, out = _watching(self.watched, lambda: self.model(*inputs))
        return out, torch.stack([w[0] for w in weights])  # batch 1: (L, h, T_q, T_k)


def _watching(watched: list[MultiHeadAttention], run: Callable[[], object]) -> tuple[list[torch.Tensor], object]:
    """run() with the watched layers' weights recorded by hooks (in the order they ran), then the hooks removed."""
    weights: list[torch.Tensor] = []
    handles = [h for m in watched for h in watch_weights(m, weights.append)]
    try:
        return weights, run()
    finally:
        for handle in handles:
            handle.remove()


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
    if isinstance(model, BertForMaskedLM):  # one segment: the token types are all 0, as the model's default
        watched = [layer.self_attn for layer in model.bert.encoder.layers]
        return (
            watched,
            ["tokens"],
            ["logits", "attention"],
            {"tokens": {1: "S"}, "logits": {1: "S"}, "attention": {2: "S", 3: "S"}},
        )
    if isinstance(model, Transformer):
        watched = [layer.cross_attn for layer in model.decoder.layers]
        return (
            watched,
            ["src", "tgt"],
            ["logits", "cross_attention"],
            {"src": {1: "S"}, "tgt": {1: "T"}, "logits": {1: "T"}, "cross_attention": {2: "T", 3: "S"}},
        )
    if isinstance(model, VisionTransformer):  # one image of the model's size: no axis is dynamic
        watched = [layer.self_attn for layer in model.encoder.layers]
        return watched, ["images"], ["logits", "attention"], {}
    raise TypeError(
        "export_onnx takes a BertForMaskedLM, a DecoderOnlyLM, an EncoderOnlyModel, a Transformer or a "
        f"VisionTransformer, got {type(model).__name__}"
    )


def with_attention(model: nn.Module) -> nn.Module:
    """The module that export_onnx traces: the model, returning also its attention weights (batch 1).

    Running it in PyTorch gives what the ONNX file must give, which is how the tests compare them.
    The watched attention layers hand their weights over through hooks during each call
    (`attention.watch_weights`), which nothing leaves behind on the model.
    """
    watched, _, _, _ = _plan(model)
    return _WithAttention(model, watched).eval()  # the wrapper too: export restores its mode


def export_onnx(model: nn.Module, path: str | Path, example: tuple[torch.Tensor, ...] | None = None) -> Path:
    """Write `model` (on the CPU, in eval mode) to `path` as ONNX with batch 1 and dynamic lengths; return the path.

    `example` are the inputs traced, (1, length) token ids each; by default ids 1..5 (and 1..4 for
    a Transformer's target). The lengths are dynamic in the file; the batch stays 1. A VisionTransformer
    is traced on one image (1, C, H, W) of its own size, by default a blank one.
    """
    watched, inputs, outputs, dynamic = _plan(model)
    if isinstance(model, VisionTransformer):
        example = _image_example(model, example)
        return _trace(with_attention(model.cpu()), example, path, inputs, outputs, dynamic)
    if example is None:
        example = (torch.arange(1, 6)[None], torch.arange(1, 5)[None])[: len(inputs)]  # (1, 5), and (1, 4) ids
    for name, tensor in zip(inputs, example):
        if tensor.dim() != 2 or tensor.shape[0] != 1:
            raise ValueError(f"{name} must be a (1, length) tensor of token ids, got shape {tuple(tensor.shape)}")
    return _trace(with_attention(model.cpu()), example, path, inputs, outputs, dynamic)


def _image_example(model: VisionTransformer, example: tuple[torch.Tensor, ...] | None) -> tuple[torch.Tensor]:
    """The image a ViT is traced on: `example` once checked, or a blank one, (1, C, H, W) zeros."""
    shape = (1, model.patches.channels, model.image_size, model.image_size)
    if example is None:
        return (torch.zeros(shape),)  # (1, C, H, W)
    if len(example) != 1 or tuple(example[0].shape) != shape or not example[0].is_floating_point():
        got = [(tuple(x.shape), str(x.dtype)) for x in example]
        raise ValueError(f"images must be one float tensor of shape {shape} (one image of the model's size), got {got}")
    return tuple(example)


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
    return _FirstAttention(model).eval()  # the wrapper too: export restores its mode


def export_first_attention(model: DecoderOnlyLM, path: str | Path) -> Path:
    """Write `first_attention(model)` (on the CPU) to `path` as ONNX with a dynamic length T; return the path."""
    example = (torch.arange(1, 6)[None], torch.ones(5, 5, dtype=torch.bool).tril())  # (1, 5) ids, (5, 5) mask
    dynamic = {"tokens": {1: "T"}, "mask": {0: "T", 1: "T"}, "attention": {1: "T", 2: "T"}}
    return _trace(first_attention(model.cpu()), example, path, ["tokens", "mask"], ["attention"], dynamic)


class _Lens(nn.Module):
    """tokens (1, T) -> (lens (L, T, V): each layer's residual stream read as logits, attention (L, h, T, T))."""

    def __init__(self, model: DecoderOnlyLM):
        super().__init__()
        self.model = model
        self.watched = [layer.self_attn for layer in model.decoder.layers]  # a plain list, as in _WithAttention

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weights, lens = _watching(self.watched, lambda: self._lens(tokens))
        return lens, torch.stack([w[0] for w in weights])  # (L, T, V), (L, h, T, T)

    def _lens(self, tokens: torch.Tensor) -> torch.Tensor:
        model = self.model
        _, T = tokens.shape
        mask = causal_mask(T, device=tokens.device)  # (T, T), as DecoderOnlyLM.forward builds it
        norm = model.decoder.norm if model.decoder.norm is not None else nn.Identity()
        x = model.pos(model.embed(tokens))  # (1, T, d_model)
        lens = []
        for layer in model.decoder.layers:  # Decoder.forward's loop, reading the stream after each layer
            x = layer(x, None, mask)  # (1, T, d_model): the layer's resid_post
            lens.append(model.head(norm(x))[0])  # (T, V): as inside.logit_lens reads it
        return torch.stack(lens)  # (L, T, V)


def lens_model(model: DecoderOnlyLM) -> nn.Module:
    """The module that export_lens traces: tokens (1, T) -> (lens (L, T, V), attention (L, h, T, T)).

    ``lens[i]`` is layer i's residual stream through the final norm and the output layer: logits,
    which the page turns into probabilities with a softmax. It equals ``inside.logit_lens`` on the
    cache of ``inside.run_with_cache``, and its last row is the model's logits; ``attention[i]`` is
    layer i's captured pattern, handed over by hooks as in ``with_attention``.
    """
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"lens_model takes a DecoderOnlyLM, got {type(model).__name__}")
    return _Lens(model).eval()  # the wrapper too: export restores its mode


def export_lens(model: DecoderOnlyLM, path: str | Path) -> Path:
    """Write ``lens_model(model)`` (on the CPU) to `path` as ONNX with a dynamic length T; return the path."""
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"export_lens takes a DecoderOnlyLM, got {type(model).__name__}")
    lens = lens_model(model.cpu())
    _all_rotary_tables(model)
    dynamic = {"tokens": {1: "T"}, "lens": {1: "T"}, "attention": {2: "T", 3: "T"}}
    return _trace(lens, (torch.arange(1, 6)[None],), path, ["tokens"], ["lens", "attention"], dynamic)


class _Step(nn.Module):
    """(tokens (1, T_new), past_keys, past_values (L, 1, h_kv, T_past, d_k)) -> (logits (1, T_new, V), present_keys,
    present_values (L, 1, h_kv, T_past + T_new, d_k)): the model's forward pass with a KVCache per layer."""

    def __init__(self, model: DecoderOnlyLM):
        super().__init__()
        self.model = model
        cfg, attn = model.config, model.decoder.layers[0].self_attn
        self.past_shape = (cfg.num_layers, 1, attn.num_kv_heads, attn.d_k)  # (L, 1, h_kv, d_k): all but T_past

    def forward(
        self, tokens: torch.Tensor, past_keys: torch.Tensor, past_values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self._check(tokens, past_keys, past_values)
        caches = []
        for k, v in zip(past_keys, past_values):  # one layer's (1, h_kv, T_past, d_k) each
            cache = KVCache()  # no capacity: update appends by concatenation, which the tracer records
            cache.key, cache.value = k, v  # the positions seen so far, possibly none (T_past = 0)
            caches.append(cache)
        logits = self.model(tokens, caches)  # (1, T_new, V); positions continue after the cached ones
        present_keys = torch.stack([c.key for c in caches])  # (L, 1, h_kv, T_past + T_new, d_k)
        present_values = torch.stack([c.value for c in caches])  # (L, 1, h_kv, T_past + T_new, d_k)
        return logits, present_keys, present_values

    def _check(self, tokens: torch.Tensor, past_keys: torch.Tensor, past_values: torch.Tensor) -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long:
            raise TypeError(
                f"tokens must be an int64 tensor of token ids, got {getattr(tokens, 'dtype', type(tokens))}"
            )
        if tokens.dim() != 2 or tokens.shape[0] != 1 or tokens.shape[1] < 1:
            raise ValueError(f"tokens must be a (1, T_new) tensor with T_new >= 1, got shape {tuple(tokens.shape)}")
        L, B, h, d = self.past_shape
        for name, past in (("past_keys", past_keys), ("past_values", past_values)):
            if not isinstance(past, torch.Tensor) or not past.is_floating_point():
                raise TypeError(f"{name} must be a float tensor, got {getattr(past, 'dtype', type(past))}")
            if past.dim() != 5 or (past.shape[0], past.shape[1], past.shape[2], past.shape[4]) != (L, B, h, d):
                raise ValueError(
                    f"{name} must have shape (L, 1, h_kv, T_past, d_k) = ({L}, {B}, {h}, T_past, {d}) for this "
                    f"model, got {tuple(past.shape)}; on the first call pass empty_past(model)"
                )
        if past_keys.shape != past_values.shape:
            raise ValueError(
                f"past_keys and past_values must have the same shape, got {tuple(past_keys.shape)} "
                f"and {tuple(past_values.shape)}"
            )


def step_model(model: DecoderOnlyLM) -> nn.Module:
    """The module that export_step traces: (tokens (1, T_new), past_keys, past_values (L, 1, h_kv, T_past, d_k))
    -> (logits (1, T_new, V), present_keys, present_values (L, 1, h_kv, T_past + T_new, d_k)).

    Feed the prompt with `empty_past(model)` as both pasts, then each new token with the last call's
    presents: the logits are those of `model` run on the whole sequence.
    """
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"step_model takes a DecoderOnlyLM, got {type(model).__name__}")
    return _Step(model).eval()  # the wrapper too: torch.onnx.export puts it back in its own mode


def empty_past(model: DecoderOnlyLM) -> torch.Tensor:
    """The past keys (or values) before the first call: (L, 1, h_kv, 0, d_k) zeros, no position seen yet."""
    L, B, h, d = step_model(model).past_shape
    return torch.zeros(L, B, h, 0, d)  # (L, 1, h_kv, 0, d_k)


def export_step(model: DecoderOnlyLM, path: str | Path) -> Path:
    """Write `step_model(model)` (on the CPU) to `path` as ONNX with dynamic T_new and T_past; return the path."""
    step = step_model(model.cpu())
    L, B, h, d = step.past_shape
    g = torch.Generator().manual_seed(0)
    # traced with T_new = 3 after T_past = 2: both above 1, so no branch on a length of 1 is taken
    example = (
        torch.arange(1, 4)[None],
        torch.randn(L, B, h, 2, d, generator=g),
        torch.randn(L, B, h, 2, d, generator=g),
    )
    past, present = {3: "T_past"}, {3: "T_total"}
    dynamic = {
        "tokens": {1: "T_new"},
        "past_keys": past,
        "past_values": past,
        "logits": {1: "T_new"},
        "present_keys": present,
        "present_values": present,
    }
    inputs, outputs = ["tokens", "past_keys", "past_values"], ["logits", "present_keys", "present_values"]
    _all_rotary_tables(model)
    return _trace(step, example, path, inputs, outputs, dynamic)


def _all_rotary_tables(model: DecoderOnlyLM) -> None:
    """RoPE: compute the cos and sin tables for every position before tracing, so they are traced as one constant
    that covers max_len (tables made for the traced length only would be too short for longer inputs)."""
    for layer in model.decoder.layers:
        if layer.self_attn.rotary:
            layer.self_attn._rotary_tables(model.config.max_len, torch.device("cpu"))


# One file that a playground page reads from the reader's own disk: the model as ONNX and what the page must know.
#
#   PLAYGROUND_MAGIC (16 bytes) | format version (uint32, little-endian) | header length n (uint32) |
#   header: n bytes of UTF-8 JSON | the ONNX file (header["onnx_bytes"] bytes)
#
# The header has the kind ("language_model": the language-model page's step model with a KV cache, as
# export_step writes it), the name, the parameter count, the vocabulary (itos), the special tokens' ids and
# the lengths the page checks its input against: everything models/meta.json tells a page about the book's model.
PLAYGROUND_MAGIC = b"TBS-PLAYGROUND\r\n"  # 16 bytes; \r\n catches a file mangled by a text-mode copy
PLAYGROUND_VERSION = 1
PLAYGROUND_MAX_BYTES = 64_000_000  # the pages refuse larger files: a model this size still runs in a browser tab
PLAYGROUND_SUFFIX = ".playground"
PLAYGROUND_KINDS = {  # what each page runs, as the messages name it
    "language_model": "a DecoderOnlyLM with a CharTokenizer (the language-model page)",
    "bracket_classifier": "an EncoderClassifier with two classes and a CharTokenizer over ( ) [ ] (the brackets page)",
    "digit_classifier": "a VisionTransformer of 8 x 8 one-channel images, ten classes and a class token, with "
    "tokenizer None (the draw-a-digit page)",
}


def _playground_kind(model: nn.Module, tokenizer) -> str:
    """Which page runs `model` with `tokenizer`: a key of PLAYGROUND_KINDS, or a TypeError naming them all."""
    from .models import EncoderClassifier
    from .tokenization import CharTokenizer

    tok = "None" if tokenizer is None else f"a {type(tokenizer).__name__}"
    missing = None  # what a model of a known kind lacks, for the message
    if isinstance(model, DecoderOnlyLM):
        if isinstance(tokenizer, CharTokenizer):
            return "language_model"
        missing = f"the language-model page types characters: it needs a CharTokenizer, got {tok}"
    elif isinstance(model, EncoderClassifier):
        brackets = isinstance(tokenizer, CharTokenizer) and tokenizer.itos[4:] == sorted("()[]")
        if model.head.out_features == 2 and brackets:
            return "bracket_classifier"
        vocabulary = tokenizer.itos[4:] if isinstance(tokenizer, CharTokenizer) else tok
        missing = (
            f"the brackets page needs two classes and a CharTokenizer over ( ) [ ], got {model.head.out_features} "
            f"classes and {vocabulary}"
        )
    elif isinstance(model, VisionTransformer):
        shape = (model.image_size, model.patches.channels, model.head.out_features, model.pool, tok)
        if shape == (8, 1, 10, "cls", "None"):
            return "digit_classifier"
        missing = (
            "the draw-a-digit page needs (image size, channels, classes, pool, tokenizer) = (8, 1, 10, 'cls', None), "
            f"got {shape}"
        )
    kinds = "; or ".join(PLAYGROUND_KINDS.values())
    got = f"{type(model).__name__} with {tok}" + (f" ({missing})" if missing else "")
    raise TypeError(f"for_playground takes {kinds}; got {got}")


def _vit_header(model: VisionTransformer) -> dict:
    """What the draw-a-digit page needs of a ViT beyond every kind's fields."""
    return {"image_size": model.image_size, "patch_size": model.patch_size, "classes": model.head.out_features}


def for_playground(model: nn.Module, tokenizer, name: str, directory: str | Path = ".") -> Path:
    """Write `model` and its `tokenizer` into one file, ``<directory>/<name>.playground``, for a playground
    page's "Your own model" picker; return its path. Nothing is uploaded: the page reads the file from your disk.

    - A DecoderOnlyLM with the CharTokenizer it was trained with runs on the language-model page, which writes
      with it through a KV cache (the file holds `export_step`'s model).
    - An EncoderClassifier with two classes (not balanced, balanced) and a CharTokenizer over ( ) [ ], read
      with <bos> first as chapter 8 trains it, runs on the brackets page (the file holds `export_onnx`'s model,
      with its attention).
    - A VisionTransformer of chapter 16's digits (8 x 8 one-channel images scaled to 0..1, ten classes, a class
      token), with tokenizer None, runs on the draw-a-digit page (`export_onnx`'s model, with its attention).

    The model itself is left as it was: a copy is exported, on the CPU, in eval mode. Needs `onnx` and
    `onnxscript` (pip install onnx onnxscript); when `onnxruntime` is installed too, the file is run once and
    compared with PyTorch before it is written.
    """
    if not isinstance(name, str) or not name or len(name) > 64 or not all(c.isalnum() or c in "_-" for c in name):
        raise ValueError(f"name must be 1 to 64 letters, digits, '_' or '-' (it names the file), got {name!r}")
    kind = _playground_kind(model, tokenizer)
    cfg = model.config
    if tokenizer is not None and len(tokenizer.itos) != cfg.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer.itos)} tokens and the model's vocabulary {cfg.vocab_size}: "
            "pass the tokenizer the model was trained with"
        )
    try:
        import onnx  # noqa: F401  (torch.onnx.export needs it; say so before a long trace fails)
    except ImportError as err:
        raise ImportError(
            "for_playground writes ONNX: pip install onnx onnxscript (and onnxruntime, to check the file against "
            "PyTorch), then call it again"
        ) from err
    import copy
    import tempfile

    exported = copy.deepcopy(model).cpu().eval()
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "language_model":
            onnx_bytes = export_step(exported, Path(tmp) / f"{name}.onnx").read_bytes()
        elif kind == "digit_classifier":  # one image of the model's size: nothing in it is dynamic
            onnx_bytes = export_onnx(exported, Path(tmp) / f"{name}.onnx").read_bytes()
        else:  # traced on <bos> and a few brackets: lengths are dynamic in the file
            example = (torch.tensor([[tokenizer.bos_id, *tokenizer.encode("([])")]]),)  # (1, 5)
            onnx_bytes = export_onnx(exported, Path(tmp) / f"{name}.onnx", example).read_bytes()
    _check_against_pytorch(kind, exported, tokenizer, onnx_bytes)
    attn = next(m for m in exported.modules() if isinstance(m, MultiHeadAttention))
    header = {
        "kind": kind,
        "name": name,
        "parameters": sum(p.numel() for p in exported.parameters()),
        "itos": list(tokenizer.itos) if tokenizer is not None else [],  # a ViT reads pixels: no vocabulary
        "specials": {
            **{s: getattr(tokenizer, f"{s}_id", None) for s in ("pad", "bos", "eos", "unk")},
            "count": 4 if tokenizer is not None else 0,  # the ids before the characters: <pad>, <bos>, <eos>, <unk>
        },
        **(_vit_header(exported) if kind == "digit_classifier" else {}),
        "max_len": cfg.max_len,
        "d_model": cfg.d_model,
        "layers": cfg.num_layers,
        "heads": cfg.num_heads,
        "kv_heads": attn.num_kv_heads,  # a language model's cache: (layers, 1, kv_heads, T_past, head_width)
        "head_width": attn.d_k,
        "onnx_bytes": len(onnx_bytes),
    }
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    data = PLAYGROUND_MAGIC + struct.pack("<II", PLAYGROUND_VERSION, len(text)) + text + onnx_bytes
    if len(data) > PLAYGROUND_MAX_BYTES:
        raise ValueError(
            f"the file would be {len(data) / 1e6:.1f} MB; the pages take up to {PLAYGROUND_MAX_BYTES / 1e6:.0f} MB. "
            "Train a smaller model (fewer layers or a smaller d_model)"
        )
    path = Path(directory) / f"{name}{PLAYGROUND_SUFFIX}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def read_playground(path: str | Path) -> tuple[dict, bytes]:
    """A file of for_playground -> (its header, its ONNX bytes), its framing checked (first bytes, version, header,
    kind and lengths; the pages also check the header's fields and the ONNX model's inputs): ValueError naming
    what was expected and what came for a file of another kind, version, or one cut short."""
    data = Path(path).read_bytes()
    if len(data) > PLAYGROUND_MAX_BYTES:
        raise ValueError(f"{path} has {len(data) / 1e6:.1f} MB, more than the {PLAYGROUND_MAX_BYTES / 1e6:.0f} MB read")
    fixed = len(PLAYGROUND_MAGIC) + 8
    if len(data) < fixed or not data.startswith(PLAYGROUND_MAGIC):
        raise ValueError(
            f"{path} is not a playground file: expected one written by tl.export.for_playground, starting with "
            f"{PLAYGROUND_MAGIC!r}, got {data[: len(PLAYGROUND_MAGIC)]!r}"
        )
    version, n = struct.unpack("<II", data[len(PLAYGROUND_MAGIC) : fixed])
    if version != PLAYGROUND_VERSION:
        raise ValueError(f"{path} has format version {version}; this library reads version {PLAYGROUND_VERSION}")
    if len(data) < fixed + n:
        raise ValueError(f"{path} is cut short: its header should have {n} bytes, {len(data) - fixed} are there")
    try:
        header = json.loads(data[fixed : fixed + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is damaged: its header is not readable JSON ({err})") from err
    if not isinstance(header, dict):
        raise ValueError(f"{path} is damaged: its header should be a JSON object, got {type(header).__name__}")
    onnx_bytes = data[fixed + n :]
    if header.get("kind") not in PLAYGROUND_KINDS:
        kind = header.get("kind")
        raise ValueError(f"{path} holds a model of kind {kind!r}; expected one of {list(PLAYGROUND_KINDS)}")
    if len(onnx_bytes) != header.get("onnx_bytes"):
        raise ValueError(
            f"{path} is cut short or padded: its model should have {header.get('onnx_bytes')} bytes, "
            f"{len(onnx_bytes)} are there"
        )
    return header, onnx_bytes


def _check_against_pytorch(kind: str, model: nn.Module, tokenizer, onnx_bytes: bytes) -> None:
    """Run the exported file once in onnxruntime, when it is installed, and compare its logits with PyTorch's."""
    try:
        import onnxruntime as ort
    except ImportError:
        return  # the export itself is tested in the book's own suite (tests/unit/test_playground_file.py)
    session = ort.InferenceSession(onnx_bytes)
    if kind == "language_model":
        tokens = torch.arange(min(5, model.config.max_len))[None] % model.config.vocab_size  # (1, 5)
        past = empty_past(model).numpy()  # (L, 1, h_kv, 0, d_k)
        feeds = {"tokens": tokens.numpy(), "past_keys": past, "past_values": past}
    elif kind == "digit_classifier":
        tokens = torch.linspace(0, 1, 64).reshape(1, 1, 8, 8)  # (1, 1, 8, 8): an image of every level
        feeds = {"images": tokens.numpy()}
    else:
        tokens = torch.tensor([[tokenizer.bos_id, *tokenizer.encode("[(])()")]])  # (1, 7)
        feeds = {"tokens": tokens.numpy()}
    got = session.run(None, feeds)[0]
    with torch.no_grad():
        expected = model(tokens)  # (1, T, V) or (1, 2)
    worst = float((torch.from_numpy(got) - expected).abs().max())
    if worst > 1e-4 * (1 + float(expected.abs().max())):
        raise RuntimeError(f"the exported model's logits differ from PyTorch's by {worst:.1e}: please report this")


# The inside page's switches: one graph whose inputs say what is switched off, so that the page needs no file per
# switch. Codes: a head or a layer is 0 on, 1 zeroed, 2 replaced by its mean; positions and norms are 1 on, 0 off.
ABLATION_ON, ABLATION_ZERO, ABLATION_MEAN = 0, 1, 2


class _Ablation(nn.Module):
    """(tokens (1, T), heads (L, h), layers (L,), positions (1,), norms (N,)) -> logits (1, T, V)."""

    def __init__(self, model: DecoderOnlyLM, head_means: torch.Tensor, output_means: torch.Tensor):
        super().__init__()
        self.model = model
        self.register_buffer("head_means", head_means)  # (L, h, d_k): each head's mean output
        self.register_buffer("output_means", output_means)  # (L, 2, d): each layer's attention's and FF's mean output

    def forward(self, tokens, heads, layers, positions, norms) -> torch.Tensor:
        def switched(value, code, mean):  # code 0: the value; 1: zeros; 2: the mean, broadcast over the positions
            return value * (code == ABLATION_ON).to(value) + mean * (code == ABLATION_MEAN).to(value)

        def skipped(on):  # a norm's forward hook: its output when on is 1, its input when 0
            return lambda m, args, out: out * on.to(out) + args[0] * (1 - on.to(out))

        hooks = []
        try:
            for i, layer in enumerate(self.model.decoder.layers):
                mha = layer.self_attn

                def head_hook(m, args, i=i, mha=mha):
                    value = args[0].unflatten(-1, (mha.num_heads, mha.d_k))  # (1, T, h, d_k)
                    code = heads[i][:, None]  # (h, 1)
                    return (switched(value, code, self.head_means[i]).flatten(-2),)  # (1, T, h * d_k)

                hooks.append(mha.out_proj.register_forward_pre_hook(head_hook))
                hooks.append(
                    mha.register_forward_hook(
                        lambda m, a, out, i=i: (switched(out[0], layers[i], self.output_means[i, 0]), out[1])
                    )
                )
                hooks.append(
                    layer.feed_forward.register_forward_hook(
                        lambda m, a, out, i=i: switched(out, layers[i], self.output_means[i, 1])
                    )
                )
            for k, name in enumerate(norm_names(self.model)):  # each layer's attn_norm and ff_norm, the final norm
                where, role = name.rsplit(".", 1)
                norm = getattr(self.model.get_submodule(where), role)
                hooks.append(norm.register_forward_hook(skipped(norms[k])))
            hooks.append(self.model.pos.register_forward_hook(skipped(positions[0])))
            return self.model(tokens)  # (1, T, V)
        finally:
            for hook in hooks:
                hook.remove()


def ablation_model(model: DecoderOnlyLM, means: torch.Tensor) -> nn.Module:
    """The module that export_ablation traces: the model with switches as inputs.

        tokens (1, T), heads (L, h) int64, layers (L,) int64, positions (1,) int64, norms (N,) int64
            -> logits (1, T, V)

    heads[i, j] and layers[i]: ABLATION_ON (0), ABLATION_ZERO (1) or ABLATION_MEAN (2); a layer switched off
    adds neither its attention's output nor its feed-forward's. positions[0] and norms (the N norms of
    inside.norm_names: each layer's attn_norm and ff_norm, then a pre-LN model's final norm): 1 on, 0 off. `means` is
    ``inside.mean_activations(model, tokens, names)`` of a dataset, with names as `ablation_points(model)` gives
    them. For a DecoderOnlyLM with a dense feed-forward and learned or sinusoidal positions: the same numbers
    as inside.zero_heads, mean_heads, zero_output, mean_output, skip_norms and without_positions."""
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"ablation_model takes a DecoderOnlyLM, got {type(model).__name__}")
    cfg = model.config
    if cfg.positional not in ("learned", "sinusoidal") or cfg.attention_only or cfg.parallel_block or cfg.num_experts:
        raise ValueError(
            "ablation_model takes a model with learned or sinusoidal positions, a dense feed-forward in every layer "
            f"and no parallel block; got positional={cfg.positional!r}, attention_only={cfg.attention_only}, "
            f"num_experts={cfg.num_experts}, parallel_block={cfg.parallel_block}"
        )
    points = ablation_points(model)
    missing = [p for p in points if p not in means]
    if missing:
        raise KeyError(f"means lacks {missing}: pass inside.mean_activations(model, tokens, ablation_points(model))")
    L = cfg.num_layers
    head_means = torch.stack([means[f"decoder.layers.{i}.self_attn.heads"] for i in range(L)])  # (L, h, d_k)
    output_means = torch.stack(
        [
            torch.stack([means[f"decoder.layers.{i}.self_attn.out"], means[f"decoder.layers.{i}.feed_forward.out"]])
            for i in range(L)
        ]
    )  # (L, 2, d)
    return _Ablation(model, head_means.float(), output_means.float()).eval()


def ablation_points(model: DecoderOnlyLM) -> list[str]:
    """The hook points whose means ablation_model needs: each layer's heads, attention output and FF output."""
    return [
        f"decoder.layers.{i}.{point}"
        for i in range(model.config.num_layers)
        for point in ("self_attn.heads", "self_attn.out", "feed_forward.out")
    ]


def ablation_switches(model: DecoderOnlyLM) -> tuple[torch.Tensor, ...]:
    """Every switch on: (heads (L, h), layers (L,), positions (1,), norms (N,)), int64 (N: inside.norm_names)."""
    L, h = model.config.num_layers, model.config.num_heads
    return (
        torch.zeros(L, h, dtype=torch.long),
        torch.zeros(L, dtype=torch.long),
        torch.ones(1, dtype=torch.long),
        torch.ones(len(norm_names(model)), dtype=torch.long),
    )


def export_ablation(model: DecoderOnlyLM, means: dict, path: str | Path) -> Path:
    """Write ``ablation_model(model, means)`` (a copy on the CPU: the model stays where it is) to `path` as ONNX with a
    dynamic length T."""
    import copy

    cpu_means = {name: mean.detach().cpu() for name, mean in means.items()}
    module = ablation_model(copy.deepcopy(model).cpu(), cpu_means)
    example = (torch.arange(1, 6)[None], *ablation_switches(model))
    example[1][0, 0] = ABLATION_MEAN  # a head and a layer switched in the traced example: the graph reads the inputs
    example[2][1] = ABLATION_ZERO
    inputs = ["tokens", "heads", "layers", "positions", "norms"]
    return _trace(module, example, path, inputs, ["logits"], {"tokens": {1: "T"}, "logits": {1: "T"}})
