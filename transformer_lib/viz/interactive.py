"""Figures to explore: ipywidgets explorers (they need a live kernel) and their kernel-free twins.

`slider_figure` pre-renders a figure over a few values with matplotlib's ``FuncAnimation.to_jshtml``
and edits that HTML so the slider works on the static website, offline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from .plots import _as_2d, plot_attention

__all__ = ["pe_explorer", "attention_explorer", "SliderFigure", "slider_figure"]

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
    "fa-minus": "&minus;",
    "fa-fast-backward": "&laquo;",
    "fa-step-backward": "&lsaquo;",
    "fa-play fa-flip-horizontal": "&#9664;",
    "fa-pause": "&#10074;&#10074;",
    "fa-play": "&#9654;",
    "fa-step-forward": "&rsaquo;",
    "fa-fast-forward": "&raquo;",
    "fa-plus": "+",
}


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
    """Render draw(fig, value) for each value into a slider animation (matplotlib's HTMLWriter player).

    The result is plain HTML with the frames embedded, so the slider works on a static website.
    `alt` describes the frames for screen readers. Raises ValueError when there are more values
    than `frame_budget` or the HTML would weigh more than `size_budget` bytes.
    """
    import tempfile
    from pathlib import Path

    from matplotlib.animation import HTMLWriter
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
    # The writer's own loop, not FuncAnimation.to_jshtml: that draws each frame twice (an idle
    # redraw, then the save) and the first one once more, where one savefig per frame is enough.
    writer = HTMLWriter(fps=1000 / interval_ms, embed_frames=True, default_mode="once")
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder, "slider.html")
        with writer.saving(fig, page, dpi):
            for value in values:
                fig.clear()
                draw(fig, value)
                writer.grab_frame()
        html = page.read_text()
    kept = html.count("data:image/png;base64,")  # the writer drops frames past matplotlib's embed limit
    if kept != len(values):
        raise ValueError(f"only {kept} of {len(values)} frames fit matplotlib's embed limit (animation.embed_limit)")
    alt = alt or f"A figure with a slider over {label}: {len(values)} pre-rendered frames."
    twin = SliderFigure(_offline_player(html, alt, label), len(values), label)
    if twin.size > size_budget:
        raise ValueError(
            f"the slider figure weighs {twin.size / 1e3:.0f} kB, over its size budget of {size_budget / 1e3:.0f} kB; "
            "use fewer frames, a smaller figsize or a lower dpi"
        )
    return twin
