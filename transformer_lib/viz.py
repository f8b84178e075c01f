"""Every figure the book draws. Each function takes ``ax=None`` (or ``axes=None``) and returns the figure.

Nothing here changes matplotlib's global settings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyBboxPatch, Patch, Rectangle
from torch import nn

__all__ = [
    "plot_positional_encoding",
    "plot_sinusoids",
    "plot_attention",
    "plot_attention_heads",
    "plot_attention_layers",
    "plot_mask",
    "plot_mask_broadcast",
    "plot_architecture",
    "plot_dataflow",
    "plot_training_curves",
    "plot_curves",
    "plot_distribution",
    "plot_tokens",
    "plot_residual_wiring",
    "plot_head_split",
    "plot_kv_cache",
    "pe_explorer",
    "attention_explorer",
    "SliderFigure",
    "slider_figure",
]


def _axes(ax, figsize):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize, layout="constrained")
        return fig, ax
    return ax.figure, ax


def _as_2d(t: torch.Tensor, what: str) -> torch.Tensor:
    t = torch.as_tensor(t).detach().cpu().float()
    if t.dim() != 2:
        raise ValueError(f"{what} must be 2-D, got shape {tuple(t.shape)}")
    return t


def plot_positional_encoding(pe: torch.Tensor, ax=None, title: str = "Sinusoidal positional encoding") -> Figure:
    """Heatmap of a (max_len, d_model) encoding: positions down, dimensions across."""
    pe = _as_2d(pe, "pe")
    fig, ax = _axes(ax, (7, 4))
    im = ax.imshow(pe.numpy(), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="value")
    return fig


def plot_sinusoids(pe: torch.Tensor, dims: Sequence[int] = (0, 2, 4, 8), ax=None) -> Figure:
    """PE value against position for a few dimensions: low dimensions oscillate fast, high ones slowly."""
    pe = _as_2d(pe, "pe")
    fig, ax = _axes(ax, (7, 3.5))
    for d in dims:
        if not 0 <= d < pe.shape[1]:
            raise ValueError(f"dimension {d} is outside [0, {pe.shape[1] - 1}]")
        ax.plot(pe[:, d].numpy(), label=f"dim {d}")
    ax.set_xlabel("position")
    ax.set_ylabel("PE value")
    ax.legend(loc="upper right", fontsize="small")
    ax.set_title("One curve per dimension")
    return fig


def _label_axes(ax, query_tokens, key_tokens) -> None:
    if key_tokens is not None:
        ax.set_xticks(range(len(key_tokens)), list(key_tokens), rotation=90, fontsize="small")
    if query_tokens is not None:
        ax.set_yticks(range(len(query_tokens)), list(query_tokens), fontsize="small")


def plot_attention(
    weights: torch.Tensor,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    colorbar: bool = True,
) -> Figure:
    """One head's (T_q, T_k) attention weights: row = query, column = key."""
    w = _as_2d(weights, "weights")
    fig, ax = _axes(ax, (4.5, 4))
    im = ax.imshow(w.numpy(), cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
    _label_axes(ax, query_tokens, key_tokens)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if colorbar:
        fig.colorbar(im, ax=ax, shrink=0.8, label="weight")
    return fig


def plot_attention_heads(
    weights: torch.Tensor,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    axes=None,
    title: str | None = None,
) -> Figure:
    """All heads of one layer side by side; weights (num_heads, T_q, T_k)."""
    w = torch.as_tensor(weights).detach().cpu().float()
    if w.dim() != 3:
        raise ValueError(f"weights must be (num_heads, T_q, T_k), got shape {tuple(w.shape)}")
    h = w.shape[0]
    if axes is None:
        fig, axes = plt.subplots(1, h, figsize=(3 * h, 3.2), layout="constrained", squeeze=False)
        axes = axes[0]
    fig = axes[0].figure
    for i, ax in enumerate(axes):
        plot_attention(w[i], query_tokens if i == 0 else None, key_tokens, ax=ax, title=f"head {i}", colorbar=False)
        if i:
            ax.set_ylabel("")
            ax.set_yticks([])
    if title:
        fig.suptitle(title)
    return fig


def plot_attention_layers(
    weights: Sequence[torch.Tensor],
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    axes=None,
    layer_names: Sequence[str] | None = None,
) -> Figure:
    """A grid of layers (rows) by heads (columns); weights is a list of (num_heads, T_q, T_k)."""
    ws = [torch.as_tensor(w).detach().cpu().float() for w in weights]
    if not ws or any(w.dim() != 3 for w in ws):
        raise ValueError("weights must be a non-empty list of (num_heads, T_q, T_k) tensors")
    L, h = len(ws), ws[0].shape[0]
    if axes is None:
        fig, axes = plt.subplots(L, h, figsize=(2.6 * h, 2.6 * L), layout="constrained", squeeze=False)
    fig = axes[0][0].figure
    for layer in range(L):
        for head in range(h):
            ax = axes[layer][head]
            plot_attention(
                ws[layer][head],
                query_tokens if head == 0 else None,
                key_tokens if layer == L - 1 else None,
                ax=ax,
                colorbar=False,
            )
            name = layer_names[layer] if layer_names else f"layer {layer}"
            ax.set_title(f"{name}, head {head}", fontsize="small")
            ax.set_xlabel("" if layer < L - 1 else "key")
            ax.set_ylabel("" if head else "query")
            if layer < L - 1:
                ax.set_xticks([])
            if head:
                ax.set_yticks([])
    return fig


def plot_mask(
    mask: torch.Tensor,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    ax=None,
    title: str = "mask",
) -> Figure:
    """A (T_q, T_k) bool mask as an image: filled = may attend (True), empty = blocked."""
    m = torch.as_tensor(mask).detach().cpu()
    while m.dim() > 2 and m.shape[0] == 1:
        m = m[0]
    m = _as_2d(m, "mask")
    fig, ax = _axes(ax, (3.5, 3.5))
    ax.imshow(m.numpy(), cmap="Greens", vmin=0, vmax=1, interpolation="nearest")
    _label_axes(ax, query_tokens, key_tokens)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    ax.set_title(title)
    return fig


def plot_mask_broadcast(padding: torch.Tensor, causal: torch.Tensor, num_heads: int, axes=None) -> Figure:
    """How a padding mask (B, 1, 1, S) and a causal mask (T, T) broadcast onto the scores (B, h, T, T).

    One small image per sentence (rows) and head (columns): the mask each score matrix really
    gets, padding AND causal. Filled = may attend. The shapes are written in the titles.
    """
    padding, causal = torch.as_tensor(padding).cpu(), torch.as_tensor(causal).cpu()
    if padding.dim() != 4 or padding.shape[1:3] != (1, 1) or causal.dim() != 2:
        raise ValueError(
            f"expected a padding mask (B, 1, 1, S) and a causal mask (T, T), got {tuple(padding.shape)} and "
            f"{tuple(causal.shape)}"
        )
    B, S = padding.shape[0], padding.shape[-1]
    if causal.shape != (S, S):
        raise ValueError(f"in self-attention the causal mask is (S, S) = ({S}, {S}), got {tuple(causal.shape)}")
    combined = (padding & causal).expand(B, num_heads, *causal.shape)  # (B, h, T, T): what the scores see
    if axes is None:
        fig, axes = plt.subplots(B, num_heads, figsize=(2.0 * num_heads, 2.0 * B), layout="constrained", squeeze=False)
    else:
        fig = axes[0][0].figure
    for b in range(B):
        for h in range(num_heads):
            ax = axes[b][h]
            ax.imshow(combined[b, h].numpy(), cmap="Greens", vmin=0, vmax=1, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"sentence {b}, head {h}", fontsize=8)
    fig.suptitle(f"padding {tuple(padding.shape)} & causal {tuple(causal.shape)} -> scores {tuple(combined.shape)}",
                 fontsize=10)  # fmt: skip
    return fig


# ---- architecture diagram ---------------------------------------------------------------------

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


def _box(ax, x: float, y: float, text: str, width: float = 2.6, color: str = "#e8eef7") -> None:
    """A labelled box centred at (x, y)."""
    ax.add_patch(FancyBboxPatch((x - width / 2, y - 0.22), width, 0.44, boxstyle="round,pad=0.02",
                                facecolor=color, edgecolor="#555555", linewidth=0.8))  # fmt: skip
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
        sides.insert(0, (2.0, "source", cfg.num_layers, [names["self"], names["ffn"]]))  # fmt: skip
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
            ax.add_patch(Rectangle((x - 1.7, start + 0.3), 3.4, y - start + 0.05, fill=False, edgecolor="#999999",
                                   linestyle="--", linewidth=0.8))  # fmt: skip
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
            ax.annotate("", xy=(7.0 - 1.3, cy), xytext=(2.0 + 1.3, memory_y),
                        arrowprops=dict(_ARROW, color="#3182bd", connectionstyle="arc3,rad=-0.15"))  # fmt: skip
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
    ax.set_title(f"{'pre' if pre else 'post'}-{norm} {kind}, d_model = {cfg.d_model}, "
                 f"{cfg.num_heads} heads{bias}", fontsize=10)  # fmt: skip
    ax.set(xlim=(0.0, 9.2 if encoder else 4.2), ylim=(-0.5, max(top + 1.9, memory_y + 0.5)))
    ax.axis("off")
    return fig


def plot_training_curves(history, ax=None, smooth: int = 20, metric: str | None = None) -> Figure:
    """Training loss per step (raw and a moving average) and, if given, an evaluation metric."""
    fig, ax = _axes(ax, (6.5, 3.5))
    losses = torch.tensor(history.losses, dtype=torch.float64)
    ax.plot(history.steps, losses.numpy(), alpha=0.3, color="C0", label="loss (per step)")
    if len(losses) >= smooth > 1:
        kernel = torch.ones(smooth, dtype=torch.float64) / smooth
        avg = torch.nn.functional.conv1d(losses[None, None], kernel[None, None])[0, 0]
        ax.plot(history.steps[smooth - 1 :], avg.numpy(), color="C0", label=f"loss ({smooth}-step mean)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    if metric is not None and history.evals:
        ax2 = ax.twinx()
        ax2.plot(history.eval_steps, [e[metric] for e in history.evals], "o-", color="C1", label=metric)
        ax2.set_ylabel(metric)
        ax2.legend(loc="center right", fontsize="small")
    ax.legend(loc="upper right", fontsize="small")
    return fig


def plot_curves(
    curves: dict[str, tuple[Sequence[float], Sequence[float]]],
    ax=None,
    xlabel: str = "step",
    ylabel: str = "loss",
    title: str | None = None,
    hlines: dict[str, float] | None = None,
    log: str = "",
) -> Figure:
    """One line per named (x, y) curve, dashed horizontal lines for named levels; log="x", "y" or "xy"."""
    fig, ax = _axes(ax, (6.0, 3.5))
    for i, (name, (x, y)) in enumerate(curves.items()):
        if len(x) != len(y):
            raise ValueError(f"curve {name!r}: {len(x)} x values but {len(y)} y values")
        ax.plot(list(x), list(y), color=f"C{i}", label=name, marker="o" if len(x) <= 12 else None, markersize=3)
    for j, (name, level) in enumerate((hlines or {}).items()):
        ax.axhline(level, color="#555555", linestyle=("--", ":", "-.")[j % 3], linewidth=1, label=name)
    if "x" in log:
        ax.set_xscale("log", base=2)
    if "y" in log:
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small")
    return fig


def plot_distribution(
    probs: torch.Tensor, labels: Sequence[str] | None = None, ax=None, title: str | None = None
) -> Figure:
    """A bar chart of one probability distribution (V,), e.g. a label-smoothed target."""
    p = torch.as_tensor(probs).detach().cpu().float()
    if p.dim() != 1:
        raise ValueError(f"probs must be 1-D (V,), got shape {tuple(p.shape)}")
    fig, ax = _axes(ax, (5.0, 2.8))
    names = list(labels) if labels is not None else [str(i) for i in range(p.numel())]
    if len(names) != p.numel():
        raise ValueError(f"{len(names)} labels for {p.numel()} probabilities")
    bars = ax.bar(names, p.numpy(), color="C0")
    ax.bar_label(bars, fmt="%.3f", fontsize=7)
    ax.set(ylabel="probability", ylim=(0, max(1.0, float(p.max())) * 1.1))
    if title:
        ax.set_title(title)
    return fig


def plot_tokens(pieces: Sequence[str], ax=None, title: str | None = None, width: int = 60) -> Figure:
    """A text cut into tokens, each on its own coloured box: pieces ['To', ' be', ','] joined give the text.

    Letters are drawn in a monospaced font, a space as a middle dot so a token's leading space shows,
    and a line break starts a new row (its token keeps a box, drawn as a return arrow). Rows wrap
    at `width` characters.
    """
    pieces = [str(p) for p in pieces]
    fig, ax = _axes(ax, (7.0, 1.2))
    x = row = 0
    for i, piece in enumerate(pieces):
        shown = piece.replace(" ", "\u00b7").replace("\n", "\u21b5")
        if x and x + len(shown) > width:
            x, row = 0, row + 1
        color = ("#cfe2f3", "#fce5cd", "#d9ead3", "#ead1dc")[i % 4]
        ax.add_patch(plt.Rectangle((x + 0.05, -row - 0.45), max(len(shown), 1) - 0.1, 0.9, color=color, linewidth=0))
        for j, ch in enumerate(shown):
            ax.text(x + j + 0.5, -row, ch, ha="center", va="center", family="monospace", fontsize=10)
        x += max(len(shown), 1)
        if "\n" in piece:
            x, row = 0, row + 1
    ax.set(xlim=(0, width), ylim=(-row - 0.6, 0.6), aspect="equal")
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10, loc="left")
    return fig


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
    ax.text((plus + 6.05) / 2, -0.75, "identity from x to out" if norm_first else "passes a LayerNorm",
            ha="center", va="top", fontsize=8, color=ok if norm_first else bad)  # fmt: skip
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


# ---- widgets (need a live kernel) -------------------------------------------------------------


def pe_explorer(pe: torch.Tensor):
    """An ipywidgets explorer: slide a dimension (curve over positions) and a position (vector over dims)."""
    import ipywidgets as widgets

    pe = _as_2d(pe, "pe")
    max_len, d_model = pe.shape
    out = widgets.Output()
    dim = widgets.IntSlider(value=0, min=0, max=d_model - 1, description="dimension")
    pos = widgets.IntSlider(value=0, min=0, max=max_len - 1, description="position")

    def draw(*_):
        with out:
            out.clear_output(wait=True)
            fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3), layout="constrained")
            a.plot(pe[:, dim.value].numpy())
            a.axvline(pos.value, color="gray", linestyle=":")
            a.set(title=f"dimension {dim.value} across positions", xlabel="position", ylim=(-1.1, 1.1))
            b.bar(range(d_model), pe[pos.value].numpy(), color="C1")
            b.set(title=f"the vector added at position {pos.value}", xlabel="dimension", ylim=(-1.1, 1.1))
            plt.show()

    dim.observe(draw, names="value")
    pos.observe(draw, names="value")
    draw()
    return widgets.VBox([widgets.HBox([dim, pos]), out])


def attention_explorer(
    weights: Sequence[torch.Tensor],
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
    layer_names: Sequence[str] | None = None,
):
    """An ipywidgets explorer over layers and heads; weights is a list of (num_heads, T_q, T_k)."""
    import ipywidgets as widgets

    ws = [torch.as_tensor(w).detach().cpu().float() for w in weights]
    names = list(layer_names) if layer_names else [f"layer {i}" for i in range(len(ws))]
    out = widgets.Output()
    layer = widgets.Dropdown(options=list(range(len(ws))), description="layer")
    layer.options = [(n, i) for i, n in enumerate(names)]
    head = widgets.IntSlider(value=0, min=0, max=ws[0].shape[0] - 1, description="head")

    def draw(*_):
        with out:
            out.clear_output(wait=True)
            plot_attention(
                ws[layer.value][head.value], query_tokens, key_tokens, title=f"{names[layer.value]}, head {head.value}"
            )
            plt.show()

    layer.observe(draw, names="value")
    head.observe(draw, names="value")
    draw()
    return widgets.VBox([widgets.HBox([layer, head]), out])


# ---- kernel-free twins (work on the static website) ---------------------------------------------

_BEGIN, _END = "<!-- transformer_lib slider figure -->", "<!-- end slider figure -->"
# matplotlib's player draws its buttons with Font Awesome from a CDN; plain glyphs work offline.
_ICONS = {
    "fa-minus": "&minus;", "fa-fast-backward": "&laquo;", "fa-step-backward": "&lsaquo;",
    "fa-play fa-flip-horizontal": "&#9664;", "fa-pause": "&#10074;&#10074;", "fa-play": "&#9654;",
    "fa-step-forward": "&rsaquo;", "fa-fast-forward": "&raquo;", "fa-plus": "+",
}  # fmt: skip


def _offline_player(html: str, alt: str, label: str = "frame") -> str:
    """Remove the CDN stylesheet, swap icon fonts for glyphs, give the frame image alt text and the slider a label."""
    import html as html_lib
    import re

    html = re.sub(r"<link[^>]*font-awesome[^>]*>", "", html)
    for icon, glyph in _ICONS.items():
        html = html.replace(f'<i class="fa {icon}"></i>', glyph)
    html = html.replace('<img id="_anim_img', f'<img alt="{html_lib.escape(alt, quote=True)}" id="_anim_img', 1)
    name = html_lib.escape(f"{label}: choose a frame", quote=True)  # what a screen reader says for the slider
    html = html.replace('<input id="_anim_slider', f'<input aria-label="{name}" id="_anim_slider', 1)
    if "http://" in html or "https://" in html or "<i class=" in html or 'aria-label="' not in html:
        raise RuntimeError("the slider figure still refers to an outside resource; matplotlib's template changed")
    return html


class SliderFigure:
    """A pre-rendered figure with a slider: self-contained HTML that needs no kernel.

    Displays itself in Jupyter and on the built website. `html` is the markup, `size` its bytes.
    """

    def __init__(self, html: str, frames: int, label: str):
        self.html = f"{_BEGIN}\n{html}\n{_END}"
        self.frames = frames
        self.label = label

    @property
    def size(self) -> int:
        """Page weight added by this figure, in bytes."""
        return len(self.html.encode("utf-8"))

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return f"SliderFigure({self.frames} frames over {self.label})"


def slider_figure(
    draw: Callable[[Figure, object], None],
    values: Sequence,
    label: str = "value",
    alt: str | None = None,
    frame_budget: int = 16,
    size_budget: int = 600_000,
    figsize: tuple[float, float] = (6.0, 3.0),
    dpi: int = 72,
    interval_ms: int = 700,
) -> SliderFigure:
    """Render draw(fig, value) for each value into a slider animation (FuncAnimation.to_jshtml).

    The result is plain HTML with the frames embedded, so the slider works on a static website.
    `alt` describes the frames for screen readers. Raises ValueError when there are more values
    than `frame_budget` or the HTML would weigh more than `size_budget` bytes.
    """
    from matplotlib.animation import FuncAnimation
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    values = list(values)
    if not values:
        raise ValueError("slider_figure needs at least one value to draw")
    if len(values) > frame_budget:
        raise ValueError(
            f"{len(values)} frames exceed the frame budget of {frame_budget}; pass fewer values or raise frame_budget"
        )
    fig = Figure(figsize=figsize, dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)  # a canvas of its own: never shown by pyplot, no global state touched

    def update(i: int):
        fig.clear()
        draw(fig, values[i])
        return []

    animation = FuncAnimation(fig, update, frames=len(values), interval=interval_ms, repeat=False)
    html = animation.to_jshtml(default_mode="once")
    alt = alt or f"A figure with a slider over {label}: {len(values)} pre-rendered frames."
    twin = SliderFigure(_offline_player(html, alt, label), len(values), label)
    if twin.size > size_budget:
        raise ValueError(
            f"the slider figure weighs {twin.size / 1e3:.0f} kB, over its size budget of {size_budget / 1e3:.0f} kB; "
            "use fewer frames, a smaller figsize or a lower dpi"
        )
    return twin
