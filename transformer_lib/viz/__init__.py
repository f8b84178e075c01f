"""Every figure the book draws: `plots` of tensors, `diagrams` read off real models, `interactive` explorers.

Each plotting function takes ``ax=None`` (or ``axes=None``) and returns the figure. Nothing here
changes matplotlib's global settings. Importing `transformer_lib` does not import this package (nor
matplotlib's pyplot); the first figure asked for does.
"""

from .diagrams import plot_architecture, plot_dataflow, plot_head_split, plot_kv_cache, plot_residual_wiring
from .interactive import SliderFigure, attention_explorer, pe_explorer, slider_figure
from .plots import (
    plot_attention,
    plot_attention_heads,
    plot_attention_layers,
    plot_budget_curves,
    plot_curves,
    plot_distribution,
    plot_grid,
    plot_intervals,
    plot_mask,
    plot_mask_broadcast,
    plot_positional_encoding,
    plot_seeds,
    plot_sinusoids,
    plot_tokens,
    plot_training_curves,
)

__all__ = [
    # plots
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
    # diagrams
    "plot_architecture",
    "plot_dataflow",
    "plot_residual_wiring",
    "plot_head_split",
    "plot_kv_cache",
    # interactive
    "pe_explorer",
    "attention_explorer",
    "SliderFigure",
    "slider_figure",
]
