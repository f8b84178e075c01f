"""Plots of tensors: heatmaps (positional encodings, attention maps, masks), curves, distributions, tokens.

Each function takes ``ax=None`` (or ``axes=None``) and returns the figure; none changes matplotlib's
global settings.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

__all__ = [
    "plot_positional_encoding",
    "plot_sinusoids",
    "plot_attention",
    "plot_attention_heads",
    "plot_attention_layers",
    "plot_mask",
    "plot_mask_broadcast",
    "plot_training_curves",
    "plot_curves",
    "plot_distribution",
    "plot_tokens",
    "plot_grid",
    "plot_intervals",
    "plot_seeds",
    "plot_budget_curves",
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
    fig.suptitle(
        f"padding {tuple(padding.shape)} & causal {tuple(causal.shape)} -> scores {tuple(combined.shape)}", fontsize=10
    )
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


def plot_grid(
    values: torch.Tensor,
    rows: Sequence[str],
    columns: Sequence[str],
    ax=None,
    title: str | None = None,
    xlabel: str = "",
    ylabel: str = "",
    limits: tuple[float, float] | None = None,
    fmt: str = "{:.2f}",
) -> Figure:
    """A table of numbers (R, C) as a heatmap with each cell's value written in it: head scores, patching results.

    rows and columns label the axes; limits = (low, high) fixes the colour scale (default: the values' range).
    """
    values = _as_2d(torch.as_tensor(values).detach().cpu().float(), "values")  # (R, C)
    if values.shape != (len(rows), len(columns)):
        raise ValueError(
            f"values has shape {tuple(values.shape)} but there are {len(rows)} row and {len(columns)} column labels"
        )
    fig, ax = _axes(ax, (0.7 * len(columns) + 2.0, 0.5 * len(rows) + 1.2))
    low, high = limits if limits is not None else (float(values.min()), float(values.max()))
    image = ax.imshow(values.numpy(), cmap="viridis", vmin=low, vmax=high, aspect="auto")
    middle = (low + high) / 2  # viridis-like maps are light above the middle: black text there, white below
    for i in range(len(rows)):
        for j in range(len(columns)):
            v = float(values[i, j])
            ax.text(
                j,
                i,
                fmt.format(v),
                ha="center",
                va="center",
                fontsize="small",
                color="black" if v > middle else "white",
            )
    ax.set_xticks(range(len(columns)), list(columns))
    ax.set_yticks(range(len(rows)), list(rows))
    ax.set(xlabel=xlabel, ylabel=ylabel)
    if title:
        ax.set_title(title)
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def plot_intervals(
    samples: dict[str, torch.Tensor],
    rows: Sequence[str],
    ax=None,
    quantiles: tuple[float, float] = (0.1, 0.9),
    title: str | None = None,
    xlabel: str = "",
    lines: Sequence[float] = (),
) -> Figure:
    """Each row's mean (a marker) and spread (a bar between two quantiles) of its N samples, one colour per series.

    samples: series name -> (R, N), e.g. "denoising" -> one patching result per site and pair; rows
    labels the R rows, top to bottom. lines: x values marked with thin vertical lines (0 and 1, say).
    """
    low, high = quantiles
    if not 0.0 <= low < high <= 1.0:
        raise ValueError(f"quantiles must be (low, high) with 0 <= low < high <= 1, got {quantiles}")
    series = {name: _as_2d(values, f"samples[{name!r}]") for name, values in samples.items()}  # each (R, N)
    for name, values in series.items():
        if values.shape[0] != len(rows) or values.shape[1] == 0:
            raise ValueError(f"samples[{name!r}] has shape {tuple(values.shape)}; expected ({len(rows)}, N >= 1): "
                             f"one row of samples per row label")  # fmt: skip
    fig, ax = _axes(ax, (6.0, 0.3 * len(rows) * max(1, len(series)) ** 0.5 + 1.2))
    for x in lines:
        ax.axvline(x, color="#bbbbbb", linewidth=0.8, zorder=0)
    at = torch.arange(len(rows)).float()  # (R,)
    step = 0.6 / max(1, len(series))  # the series of one row side by side, within 0.6 of a row
    markers = "os^Dv<>"
    for i, (name, values) in enumerate(series.items()):
        y = at + (i - (len(series) - 1) / 2) * step  # (R,)
        ends = values.quantile(torch.tensor([low, high]), dim=1)  # (2, R)
        mean = values.mean(1)  # (R,)
        ax.hlines(y.numpy(), ends[0].numpy(), ends[1].numpy(), color=f"C{i}", linewidth=2.0)
        ax.plot(mean.numpy(), y.numpy(), markers[i % len(markers)], color=f"C{i}", markersize=5, linestyle="none",
                label=f"{name}: mean, {low:.0%} to {high:.0%} of samples")  # fmt: skip
    ax.set_yticks(at.tolist(), list(rows))
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the first row on top
    ax.set(xlabel=xlabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize="small")
    return fig


def plot_seeds(
    values: dict[str, Sequence[float]],
    ax=None,
    title: str | None = None,
    xlabel: str = "",
    lines: Sequence[float] = (),
) -> Figure:
    """One row per run, top to bottom: a dot per seed, the mean as a tick and the range (lowest to highest) as a bar.

    values: run name -> its result at each seed (a few numbers, e.g. bits per character at seeds 0, 1, 2).
    lines: x values marked with thin vertical lines (a baseline, say).
    """
    if not values or any(len(v) == 0 for v in values.values()):
        raise ValueError(f"values must map each run to at least one number, got {dict(values)}")
    rows = {name: torch.as_tensor(list(v), dtype=torch.float64) for name, v in values.items()}  # each (N,)
    fig, ax = _axes(ax, (6.0, 0.45 * len(rows) + 1.2))
    for x in lines:
        ax.axvline(x, color="#bbbbbb", linewidth=0.8, zorder=0)
    for i, v in enumerate(rows.values()):
        ax.hlines(i, v.min().item(), v.max().item(), color=f"C{i}", linewidth=2.0, alpha=0.5)
        ax.plot(v.tolist(), [i] * len(v), "o", color=f"C{i}", markersize=5, linestyle="none")
        ax.plot([v.mean().item()] * 2, [i - 0.25, i + 0.25], color=f"C{i}", linewidth=1.5)
    ax.set_yticks(range(len(rows)), list(rows))
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the first run on top
    ax.set(xlabel=xlabel)
    if title:
        ax.set_title(title)
    return fig


def plot_budget_curves(
    results: dict[str, dict[int, Sequence[float]]],
    ax=None,
    xlabel: str = "labelled examples",
    ylabel: str = "test accuracy",
    baseline: float | None = None,
    baseline_label: str = "",
    xscale: str = "log",
) -> Figure:
    """A learning curve per method over label budgets: the mean of the seeds as a line, their range as a band.

    results: method -> {budget: its result at each seed}. The budgets sit on a log axis, each marked; with
    xscale="linear", on a linear axis with matplotlib's own ticks (for many points, such as steps of training).
    baseline: a horizontal line (chance, or the majority class), labelled baseline_label.
    """
    if not results or any(not curve or any(len(v) == 0 for v in curve.values()) for curve in results.values()):
        raise ValueError(f"results must map each method to budgets, each with at least one value, got {results}")
    if xscale not in ("log", "linear"):
        raise ValueError(f"xscale must be 'log' or 'linear', got {xscale!r}")
    fig, ax = _axes(ax, (6.5, 3.8))
    budgets = sorted({b for curve in results.values() for b in curve})
    if baseline is not None:
        ax.axhline(baseline, color="#888888", linewidth=1.0, linestyle="--", label=baseline_label or None)
    for i, (method, curve) in enumerate(results.items()):
        xs = sorted(curve)
        values = [torch.as_tensor(list(curve[b]), dtype=torch.float64) for b in xs]  # each (seeds,)
        low, mean, high = ([getattr(v, f)().item() for v in values] for f in ("min", "mean", "max"))
        ax.fill_between(xs, low, high, color=f"C{i}", alpha=0.2, linewidth=0)
        ax.plot(xs, mean, "o-", color=f"C{i}", label=method, markersize=4)
    if xscale == "log":
        ax.set_xscale("log")
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.minorticks_off()
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.legend(frameon=False)
    return fig
