"""Diagrams drawn from real models and settings: the module tree, the data flow, residual wiring, head split, KV cache.

Each function takes ``ax=None`` and returns the figure; none changes matplotlib's global settings.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyBboxPatch, Patch, Rectangle
from torch import nn

from .plots import _axes

__all__ = [
    "plot_architecture",
    "plot_dataflow",
    "plot_residual_wiring",
    "plot_head_split",
    "plot_kv_cache",
]

# ---- the module tree -----------------------------------------------------------------------------

_SKIP = (nn.Dropout,)


def _describe(module: nn.Module) -> str:
    name = type(module).__name__
    if isinstance(module, nn.Linear):
        return f"Linear {module.in_features}→{module.out_features}" + (", no bias" if module.bias is None else "")
    if isinstance(module, nn.Embedding):
        return f"Embedding {module.num_embeddings}×{module.embedding_dim}"
    if hasattr(module, "num_heads") and hasattr(module, "d_model"):
        kv = getattr(module, "num_kv_heads", module.num_heads)
        extras = (f", kv heads={kv}" if kv != module.num_heads else "") + (
            ", RoPE" if getattr(module, "rotary", 0) else ""
        )
        return f"{name} (h={module.num_heads}{extras})"
    if hasattr(module, "activation_name"):
        return f"{name} ({module.activation_name})"
    return name


def _tree(module: nn.Module, key: str, depth: int, max_depth: int) -> dict:
    label = f"{key}: {_describe(module)}" if key else _describe(module)
    children = []
    if depth < max_depth:
        for child_key, child in module.named_children():
            if isinstance(child, _SKIP):
                continue
            if isinstance(child, nn.ModuleList) and len(child):
                node = _tree(child[0], f"{child_key}[0..{len(child) - 1}]", depth + 1, max_depth)
                node["label"] = f"{len(child)} × " + node["label"]
                children.append(node)
            else:
                children.append(_tree(child, child_key, depth + 1, max_depth))
    return {"label": label, "children": children}


_ROW, _PAD, _CHAR = 1.0, 0.35, 0.16


def _size(node: dict, horizontal: bool) -> tuple[float, float]:
    text_w = len(node["label"]) * _CHAR + 2 * _PAD
    if not node["children"]:
        node["size"] = (text_w, _ROW)
        return node["size"]
    sizes = [_size(c, False) for c in node["children"]]
    if horizontal:
        inner_w = sum(w for w, _ in sizes) + _PAD * (len(sizes) - 1)
        inner_h = max(h for _, h in sizes)
    else:
        inner_w = max(w for w, _ in sizes)
        inner_h = sum(h for _, h in sizes) + _PAD * (len(sizes) - 1)
    node["size"] = (max(text_w, inner_w + 2 * _PAD), inner_h + _ROW + _PAD)
    return node["size"]


def _draw(ax, node: dict, x: float, y: float, depth: int, horizontal: bool) -> None:
    """Draw node with top-left corner (x, y); y grows downwards."""
    w, h = node["size"]
    colors = ["#e8eef7", "#d4e4f7", "#fde9d9", "#e2f0d9", "#f2f2f2"]
    ax.add_patch(
        FancyBboxPatch(
            (x, -y - h),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=0.15",
            facecolor=colors[depth % len(colors)],
            edgecolor="#555555",
            linewidth=0.8,
        )
    )
    ax.text(
        x + _PAD,
        -y - _ROW / 2,
        node["label"],
        va="center",
        ha="left",
        fontsize=8,
        fontweight="bold" if node["children"] else "normal",
    )
    cx, cy = x + _PAD, y + _ROW
    for child in node["children"]:
        _draw(ax, child, cx, cy, depth + 1, False)
        if horizontal:
            cx += child["size"][0] + _PAD
        else:
            cy += child["size"][1] + _PAD


def plot_architecture(model: nn.Module, ax=None, max_depth: int = 3) -> Figure:
    """Nested boxes read off the model's own module tree (named_children); repeated layers shown as N ×."""
    tree = _tree(model, "", 0, max_depth)
    w, h = _size(tree, horizontal=True)
    fig, ax = _axes(ax, (min(18, 0.55 * w + 1), min(14, 0.55 * h + 1)))
    _draw(ax, tree, 0.0, 0.0, 0, horizontal=True)
    ax.set_xlim(-0.2, w + 0.2)
    ax.set_ylim(-h - 0.2, 0.2)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


# ---- data flow through a model -------------------------------------------------------------------


def _box(ax, x: float, y: float, text: str, width: float = 2.6, color: str = "#e8eef7") -> None:
    """A labelled box centred at (x, y)."""
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - 0.22),
            width,
            0.44,
            boxstyle="round,pad=0.02",
            facecolor=color,
            edgecolor="#555555",
            linewidth=0.8,
        )
    )
    ax.text(x, y, text, ha="center", va="center", fontsize=7.5)


def _up(ax, x: float, y0: float, y1: float, color: str = "#333333") -> None:
    ax.annotate("", xy=(x, y1 - 0.23), xytext=(x, y0 + 0.23), arrowprops=dict(_ARROW, color=color))


def _sublayer(ax, x: float, y: float, name: str, norm_first: bool, norm: str = "LayerNorm") -> float:
    """One sublayer with its norm and its residual arrow, from y upwards; returns the y it ends at."""
    steps = [norm, name, "+"] if norm_first else [name, "+", norm]
    ys = [y + 0.6 * (i + 1) for i in range(3)]
    for i, (step, yy) in enumerate(zip(steps, ys)):
        if step == "+":
            ax.add_patch(Circle((x, yy), 0.16, facecolor="white", edgecolor="#333333"))
            ax.text(x, yy, "+", ha="center", va="center", fontsize=9)
        else:
            _box(ax, x, yy, step, color="#fde9d9" if step == name else "#f2f2f2")
        _up(ax, x, y if i == 0 else ys[i - 1], yy)
    plus = ys[steps.index("+")]
    ax.plot([x - 1.45, x - 1.45, x - 0.2], [y + 0.1, plus, plus], color="#31a354", linewidth=1.3)  # residual
    return ys[-1]


def _block_labels(cfg) -> dict[str, str]:
    """The names plot_dataflow writes in its boxes, with the config's options in them."""
    kv = cfg.num_kv_heads
    heads = "" if kv == cfg.num_heads else (" (multi-query)" if kv == 1 else f" (GQA, {kv} kv heads)")
    rope = ", RoPE" if cfg.positional == "rope" else ""
    return {
        "norm": "RMSNorm" if cfg.norm == "rms" else "LayerNorm",
        "self": f"self-attention{heads}",
        "masked": f"masked self-attention{heads}{rope}",
        "cross": f"cross-attention{heads}",
        "ffn": "feed-forward" if cfg.activation == "relu" else f"feed-forward ({cfg.activation})",
        "positions": "(positions: RoPE, in attention)" if cfg.positional == "rope" else f"+ {cfg.positional} positions",
    }


def plot_dataflow(model: nn.Module, ax=None) -> Figure:
    """A Transformer or DecoderOnlyLM as data flows through it, read off the model: layers, sublayers, residuals.

    Bottom to top: ids, embeddings, positions, each encoder layer (left) and decoder layer (right)
    with its sublayers, norms and residual paths (green), the encoder's output feeding every
    decoder layer's cross-attention (blue), the final norms, and the output head. A decoder-only
    model has the right column alone. The config's options are written in the boxes: RMSNorm,
    rotary positions, grouped-query attention, the feed-forward activation, no biases, tying.
    """
    cfg = model.config
    encoder = hasattr(model, "encoder")
    names = _block_labels(cfg)
    per_layer = 9 if encoder else 6
    fig, ax = _axes(ax, (9.0 if encoder else 5.0, 1.2 + 0.62 * (4 + per_layer * cfg.num_decoder_layers)))
    pre = cfg.norm_first
    scale = " x sqrt(d_model)" if cfg.scale_embedding else ""
    x_dec = 7.0 if encoder else 2.0
    columns = {}
    sides = [
        (
            x_dec,
            "target",
            cfg.num_decoder_layers,
            [names["masked"], names["cross"], names["ffn"]] if encoder else [names["masked"], names["ffn"]],
        )
    ]
    if encoder:
        sides.insert(0, (2.0, "source", cfg.num_layers, [names["self"], names["ffn"]]))
    for x, side, layers, sublayers in sides:
        _box(ax, x, 0.0, f"{side if encoder else 'token'} ids (B, {'S' if side == 'source' else 'T'})", color="white")
        _box(ax, x, 0.7, f"embedding{scale}")
        _up(ax, x, 0.0, 0.7)
        _box(ax, x, 1.4, names["positions"])
        _up(ax, x, 0.7, 1.4)
        y, cross_ys = 1.4, []
        for layer in range(layers):
            start = y
            for name in sublayers:
                top = _sublayer(ax, x, y, name, pre, names["norm"])
                if name == names["cross"]:
                    cross_ys.append(y + 0.6 * (2 if pre else 1))  # the row of the cross-attention box
                y = top
            ax.add_patch(
                Rectangle(
                    (x - 1.7, start + 0.3),
                    3.4,
                    y - start + 0.05,
                    fill=False,
                    edgecolor="#999999",
                    linestyle="--",
                    linewidth=0.8,
                )
            )
            ax.text(x + 1.75, start + 0.4, f"layer {layer}", fontsize=7, color="#777777")
        if cfg.final_norm:
            _box(ax, x, y + 0.7, f"final {names['norm']}", color="#f2f2f2")
            _up(ax, x, y, y + 0.7)
            y += 0.7
        columns[side] = (y, cross_ys)
    memory_y = 0.0
    if encoder:
        memory_y = columns["source"][0] + 0.7
        _box(ax, 2.0, memory_y, "memory (B, S, d_model)", color="white")
        _up(ax, 2.0, columns["source"][0], memory_y)
        for cy in columns["target"][1]:  # the encoder's output reaches every decoder layer's cross-attention
            ax.annotate(
                "",
                xy=(7.0 - 1.3, cy),
                xytext=(2.0 + 1.3, memory_y),
                arrowprops=dict(_ARROW, color="#3182bd", connectionstyle="arc3,rad=-0.15"),
            )
    top = columns["target"][0]
    vocab = cfg.tgt_vocab_size if encoder else cfg.vocab_size
    tied = ", tied to the embedding" if cfg.tie_embeddings else ""
    _box(ax, x_dec, top + 0.7, f"head: Linear {cfg.d_model} -> {vocab}{tied}", width=3.2)
    _up(ax, x_dec, top, top + 0.7)
    _box(ax, x_dec, top + 1.4, "logits (B, T, V)", color="white")
    _up(ax, x_dec, top + 0.7, top + 1.4)
    kind = "encoder-decoder" if encoder else "decoder-only model"
    bias = "" if cfg.bias else ", no biases"
    norm = "LN" if cfg.norm == "layer" else "RMSNorm"
    ax.set_title(
        f"{'pre' if pre else 'post'}-{norm} {kind}, d_model = {cfg.d_model}, {cfg.num_heads} heads{bias}", fontsize=10
    )
    ax.set(xlim=(0.0, 9.2 if encoder else 4.2), ylim=(-0.5, max(top + 1.9, memory_y + 0.5)))
    ax.axis("off")
    return fig


# ---- one mechanism at a time: residual wiring, head split, KV cache ------------------------------

_ARROW = dict(arrowstyle="-|>", color="#333333", linewidth=1.2)


def plot_residual_wiring(norm_first: bool, ax=None) -> Figure:
    """One sublayer's residual wiring as a diagram: pre-LN (norm_first=True) or post-LN (the 2017 paper).

    The residual path (input to output around the sublayer) is green where it is a pure identity
    and red where a LayerNorm sits on it.
    """
    fig, ax = _axes(ax, (5.6, 2.3))
    steps = ["LayerNorm", "Sublayer", "+"] if norm_first else ["Sublayer", "+", "LayerNorm"]
    xs = [1.7, 3.3, 4.9]  # box centres, left to right
    plus = xs[steps.index("+")]
    ax.text(0.2, 0, "x", ha="center", va="center", fontsize=12)
    ax.text(6.4, 0, "out", ha="center", va="center", fontsize=11)
    for x, step in zip(xs, steps):
        if step == "+":
            ax.add_patch(Circle((x, 0), 0.22, facecolor="white", edgecolor="#333333", linewidth=1.2))
            ax.text(x, 0, "+", ha="center", va="center", fontsize=13)
        else:
            on_path = step == "LayerNorm" and not norm_first  # post-LN: the norm sits on the residual path
            face = "#fde0dd" if on_path else "#e8eef7"
            box = FancyBboxPatch(
                (x - 0.6, -0.25), 1.2, 0.5, boxstyle="round,pad=0.02", facecolor=face, edgecolor="#555"
            )
            ax.add_patch(box)
            ax.text(x, 0, step, ha="center", va="center", fontsize=9)
    edges = [0.4, *xs, 6.05]
    for (a, b), left_step in zip(zip(edges[:-1], edges[1:]), [None, *steps]):
        start = a if left_step is None else a + (0.22 if left_step == "+" else 0.6)
        end = b - (0.22 if b == plus else 0.6) if b != edges[-1] else b
        ax.annotate("", xy=(end, 0), xytext=(start, 0), arrowprops=_ARROW)
    ok, bad = "#31a354", "#de2d26"
    ax.plot([0.4, 0.4, plus, plus], [0.1, 0.85, 0.85, 0.3], color=ok, linewidth=2)  # the skip connection
    ax.annotate("", xy=(plus, 0.23), xytext=(plus, 0.32), arrowprops=dict(_ARROW, color=ok))
    ax.plot([plus + 0.25, 6.05], [-0.55, -0.55], color=ok if norm_first else bad, linewidth=2)
    ax.text(
        (plus + 6.05) / 2,
        -0.75,
        "identity from x to out" if norm_first else "passes a LayerNorm",
        ha="center",
        va="top",
        fontsize=8,
        color=ok if norm_first else bad,
    )
    title = "pre-LN: x + Sublayer(LN(x))" if norm_first else "post-LN: LN(x + Sublayer(x))"
    ax.set_title(title, fontsize=10)
    ax.set(xlim=(-0.1, 6.8), ylim=(-1.1, 1.15))
    ax.axis("off")
    return fig


def plot_head_split(d_model: int, num_heads: int, ax=None) -> Figure:
    """How multi-head attention cuts one d_model vector into num_heads pieces of d_k and joins them again.

    Top: a projected vector, its features coloured by the head they go to. Middle: the heads,
    each attending on its own d_k features. Bottom: the outputs concatenated back to d_model,
    ready for W_O. This is the view(B, T, h, d_k) and transpose of `MultiHeadAttention`.
    """
    if num_heads < 1 or d_model % num_heads != 0:
        raise ValueError(f"d_model must be divisible by num_heads: got d_model={d_model}, num_heads={num_heads}")
    d_k = d_model // num_heads
    fig, ax = _axes(ax, (7.5, 3.4))
    colors = plt.get_cmap("tab10")
    gap = 1.0  # space between heads in the middle row, in cells
    middle = [j + (j // d_k) * gap for j in range(d_model)]  # x of feature j when the heads stand apart
    shift = (middle[-1] - (d_model - 1)) / 2  # centre the top and bottom rows over the middle one
    for j in range(d_model):
        color = colors((j // d_k) % 10)
        for x, y in ((j + shift, 2.0), (middle[j], 1.0), (j + shift, 0.0)):
            ax.add_patch(Rectangle((x, y), 0.9, 0.5, facecolor=color, edgecolor="white"))
    for head in range(num_heads):
        centre = (middle[head * d_k] + middle[head * d_k + d_k - 1] + 0.9) / 2
        ax.text(centre, 1.25, f"head {head}", ha="center", va="center", fontsize=8, color="white", weight="bold")
        ax.annotate("", xy=(centre, 1.55), xytext=(shift + head * d_k + d_k / 2, 1.95), arrowprops=_ARROW)
        ax.annotate("", xy=(shift + head * d_k + d_k / 2, 0.55), xytext=(centre, 0.95), arrowprops=_ARROW)
    right = middle[-1] + 1.3
    ax.text(right, 2.25, f"one vector, d_model = {d_model}", va="center", fontsize=9)
    ax.text(right, 1.25, f"{num_heads} heads of d_k = {d_k}, each attends alone", va="center", fontsize=9)
    ax.text(right, 0.25, "concatenated again, then W_O", va="center", fontsize=9)
    ax.set(xlim=(-0.5, right + 9), ylim=(-0.3, 2.8))
    ax.axis("off")
    return fig


def plot_kv_cache(length: int, ax=None) -> Figure:
    """Generation with a KV cache, step by step: which keys and values are new, read back, or not there yet.

    Row t is decoding step t (T = length steps), column j is position j: at step t position t is
    projected for the first time and positions 0..t-1 are read from the cache.
    """
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    fig, ax = _axes(ax, (4.2, 3.6))
    steps = torch.arange(length)[:, None]  # (T, 1)
    positions = torch.arange(length)[None, :]  # (1, T)
    grid = (positions < steps).float() + 2 * (positions == steps).float()  # (T, T): 0 empty, 1 cached, 2 new
    ax.imshow(grid.numpy(), cmap=ListedColormap(["#f2f2f2", "#9ecae1", "#e6550d"]), vmin=0, vmax=2)
    ax.set(xlabel="position of the key and value", ylabel="decoding step")
    ax.set_xticks(range(length))
    ax.set_yticks(range(length))
    keys = [Patch(color="#e6550d", label="computed at this step"), Patch(color="#9ecae1", label="read from the cache")]
    ax.legend(handles=keys, loc="upper right", fontsize="small", framealpha=0.9)
    return fig
