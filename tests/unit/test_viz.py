import re

import matplotlib
import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

import transformer_lib as tl
from transformer_lib import viz


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_plots_return_figures_and_draw_on_a_given_ax():
    pe = tl.sinusoidal_encoding(20, 8)
    w = torch.softmax(torch.randn(3, 4, 5), -1)
    tokens_q, tokens_k = list("abcd"), list("vwxyz")
    before = dict(matplotlib.rcParams)
    for fn, args in [
        (viz.plot_positional_encoding, (pe,)),
        (viz.plot_sinusoids, (pe, (0, 3))),
        (viz.plot_attention, (w[0], tokens_q, tokens_k)),
        (viz.plot_mask, (tl.causal_mask(4),)),
        (viz.plot_architecture, (tl.Transformer(vocab_size=5, d_model=16, num_heads=2),)),
    ]:
        fig = fn(*args)
        assert isinstance(fig, Figure)
        f2, ax = plt.subplots()
        assert fn(*args, ax=ax) is f2
        assert ax.has_data() or ax.patches or ax.images
    assert len(viz.plot_attention_heads(w, tokens_q, tokens_k).axes) == 3
    assert len(viz.plot_attention_layers([w, w]).axes) == 6
    assert dict(matplotlib.rcParams) == before


def test_attention_labels_are_the_tokens():
    fig = viz.plot_attention(torch.eye(3), list("abc"), list("xyz"))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list("xyz")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("abc")


def test_architecture_reflects_the_module_tree():
    model = tl.Transformer(vocab_size=5, d_model=16, num_heads=2, num_layers=3)
    texts = [t.get_text() for t in viz.plot_architecture(model).axes[0].texts]
    assert "3 × layers[0..2]: EncoderLayer" in texts
    assert any("MultiHeadAttention (h=2)" in t for t in texts)


@pytest.mark.parametrize("block", ["2017", "modern"])
def test_dataflow_and_architecture_name_the_options_of_a_decoder_only_model(block):
    model = tl.DecoderOnlyLM(tl.recipes.shakespeare_lm(20, block=block).config.replace(num_layers=2))
    ax = viz.plot_dataflow(model).axes[0]
    texts, title = [t.get_text() for t in ax.texts], ax.get_title()
    assert "cross-attention" not in " ".join(texts) and "decoder-only model" in title
    assert "head: Linear 128 -> 20, tied to the embedding" in texts
    if block == "2017":
        assert texts.count("masked self-attention") == 2 and texts.count("LayerNorm") == 4
        assert "+ sinusoidal positions" in texts and title.startswith("post-LN")
    else:
        assert texts.count("masked self-attention (GQA, 2 kv heads), RoPE") == 2 and texts.count("RMSNorm") == 4
        assert texts.count("feed-forward (swiglu)") == 2 and "final RMSNorm" in texts
        assert title.startswith("pre-RMSNorm") and title.endswith("no biases")
        boxes = [t.get_text() for t in viz.plot_architecture(model, max_depth=4).axes[0].texts]
        assert any("MultiHeadAttention (h=4, kv heads=2, RoPE)" in t for t in boxes)
        assert any("FeedForward (swiglu)" in t for t in boxes) and any("no bias" in t for t in boxes)


def test_training_curves():
    h = tl.History(
        steps=list(range(50)), losses=[1 / (i + 1) for i in range(50)], eval_steps=[49], evals=[{"acc": 0.9}]
    )
    fig = viz.plot_training_curves(h, metric="acc")
    assert len(fig.axes) == 2


def test_widgets_build():
    pytest.importorskip("ipywidgets")
    box = viz.pe_explorer(tl.sinusoidal_encoding(10, 8))
    assert len(box.children) == 2
    box = viz.attention_explorer([torch.rand(2, 3, 3)] * 2, list("abc"), list("abc"))
    layer, head = box.children[0].children
    head.value = 1
    layer.value = 1
    assert head.max == 1


def test_bad_shapes_are_reported():
    with pytest.raises(ValueError, match=r"weights must be 2-D, got shape \(2, 3, 3\)"):
        viz.plot_attention(torch.rand(2, 3, 3))


def _draw_pe_row(fig, position):
    ax = fig.subplots()
    ax.bar(range(8), tl.sinusoidal_encoding(10, 8)[position].numpy())


def test_slider_figure_renders_frames_and_enforces_budgets():
    twin = viz.slider_figure(_draw_pe_row, range(4), label="position", figsize=(3, 2), dpi=50)
    assert re.search(r'<input aria-label="position: choose a frame" id="_anim_slider\w+" type="range"', twin.html)
    assert twin.frames == 4 and repr(twin) == "SliderFigure(4 frames over position)"
    html = twin._repr_html_()
    assert html.count("data:image/png;base64") == 4
    assert 'type="range"' in html and twin.size == len(html.encode())
    assert "http" not in html and "font-awesome" not in html, "nothing may be fetched from outside the page"
    assert 'alt="A figure with a slider over position: 4 pre-rendered frames."' in html
    assert not plt.get_fignums(), "slider_figure must not leave pyplot figures behind"
    with pytest.raises(ValueError, match=r"5 frames exceed the frame budget of 4"):
        viz.slider_figure(_draw_pe_row, range(5), frame_budget=4)
    with pytest.raises(ValueError, match=r"over its size budget of 1 kB"):
        viz.slider_figure(_draw_pe_row, range(2), size_budget=1000, figsize=(3, 2), dpi=50)
    with pytest.raises(ValueError, match="at least one value"):
        viz.slider_figure(_draw_pe_row, [])


def test_slider_figure_draws_each_frame_once_and_in_order():
    drawn = []
    twin = viz.slider_figure(
        lambda fig, position: (drawn.append(position), _draw_pe_row(fig, position)), [3, 0, 2], figsize=(3, 2), dpi=50
    )
    assert drawn == [3, 0, 2], "one draw per value: drawing is most of a slider figure's cost"
    frames = re.findall(r'frames\[(\d+)\] = "data:image/png;base64,', twin.html)
    assert frames == ["0", "1", "2"]


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_wiring_diagram_puts_the_norm_where_the_wiring_does(norm_first):
    fig = viz.plot_residual_wiring(norm_first)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.texts]
    boxes = [t for t in texts if t in ("LayerNorm", "Sublayer", "+")]
    assert boxes == (["LayerNorm", "Sublayer", "+"] if norm_first else ["Sublayer", "+", "LayerNorm"])
    assert ax.get_title().startswith("pre-LN" if norm_first else "post-LN")
    assert ("identity from x to out" in texts) == norm_first
    f2, ax2 = plt.subplots()
    assert viz.plot_residual_wiring(norm_first, ax=ax2) is f2


def test_kv_cache_picture_marks_one_new_position_per_step_and_the_rest_cached():
    fig = viz.plot_kv_cache(5)
    grid = torch.as_tensor(fig.axes[0].images[0].get_array())  # (steps, positions)
    assert grid.shape == (5, 5)
    for t in range(5):
        assert grid[t, t] == 2 and torch.all(grid[t, :t] == 1) and torch.all(grid[t, t + 1 :] == 0)
    with pytest.raises(ValueError, match="at least 1"):
        viz.plot_kv_cache(0)


def test_head_split_colours_each_feature_by_its_head_in_all_three_rows():
    fig = viz.plot_head_split(12, 3)
    ax = fig.axes[0]
    cells = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() == 0.9]
    assert len(cells) == 3 * 12  # the vector, the heads, the concatenation
    by_row = {}
    for c in cells:
        by_row.setdefault(c.get_y(), []).append(c)
    assert sorted(by_row) == [0.0, 1.0, 2.0] and all(len(r) == 12 for r in by_row.values())
    for row in by_row.values():
        colours = [tuple(c.get_facecolor()) for c in sorted(row, key=lambda c: c.get_x())]
        assert [len(set(colours[h * 4 : h * 4 + 4])) for h in range(3)] == [1, 1, 1] and len(set(colours)) == 3
    assert [t.get_text() for t in ax.texts if t.get_text().startswith("head")] == ["head 0", "head 1", "head 2"]
    with pytest.raises(ValueError, match="divisible"):
        viz.plot_head_split(10, 3)


def test_mask_broadcast_shows_padding_and_causal_for_every_sentence_and_head():
    tokens = torch.tensor([[5, 6, 7, 8], [5, 6, 0, 0]])
    fig = viz.plot_mask_broadcast(tl.padding_mask(tokens, 0), tl.causal_mask(4), num_heads=3)
    assert len(fig.axes) == 2 * 3
    want = tl.target_mask(tokens, 0)  # (B, 1, T, T)
    for b in range(2):
        for h in range(3):
            shown = torch.as_tensor(fig.axes[b * 3 + h].images[0].get_array())
            assert torch.equal(shown.bool(), want[b, 0])
    assert "(2, 3, 4, 4)" in fig._suptitle.get_text()
    with pytest.raises(ValueError, match=r"\(B, 1, 1, S\)"):
        viz.plot_mask_broadcast(tokens != 0, tl.causal_mask(4), num_heads=2)
    with pytest.raises(ValueError, match="causal mask is"):
        viz.plot_mask_broadcast(tl.padding_mask(tokens, 0), tl.causal_mask(3), num_heads=2)


@pytest.mark.parametrize("norm_first", [False, True])
def test_dataflow_is_read_off_the_model_layer_by_layer(norm_first):
    model = tl.Transformer(
        vocab_size=11,
        tgt_vocab_size=7,
        d_model=16,
        num_heads=2,
        num_layers=1,
        num_decoder_layers=3,
        norm_first=norm_first,
    )
    fig = viz.plot_dataflow(model)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("self-attention") == 1 and texts.count("masked self-attention") == 3
    assert texts.count("cross-attention") == 3 and texts.count("+") == 2 * 1 + 3 * 3
    assert texts.count("final LayerNorm") == (2 if norm_first else 0)
    assert "head: Linear 16 -> 7" in texts
    memory_arrows = [
        a
        for a in fig.axes[0].texts
        if type(a).__name__ == "Annotation"
        and a.arrow_patch is not None
        and a.arrow_patch.get_edgecolor()[:3] == matplotlib.colors.to_rgb("#3182bd")
    ]
    assert len(memory_arrows) == 3  # the encoder's output reaches every decoder layer


def test_curves_draw_one_line_per_curve_plus_the_levels_and_check_lengths():
    fig = viz.plot_curves(
        {"a": ([1, 2, 3], [3.0, 2.0, 1.0]), "b": ([1, 2, 3], [1.0, 1.5, 2.0])}, hlines={"floor": 0.5}, log="x"
    )
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b", "floor"]
    assert list(ax.get_lines()[1].get_ydata()) == [1.0, 1.5, 2.0] and ax.get_xscale() == "log"
    f2, ax2 = plt.subplots()
    assert viz.plot_curves({"a": ([0], [1.0])}, ax=ax2) is f2
    with pytest.raises(ValueError, match="3 x values but 2 y values"):
        viz.plot_curves({"bad": ([1, 2, 3], [1.0, 2.0])})


def test_distribution_draws_one_bar_per_class_at_its_probability():
    probs = tl.smoothed_targets(torch.tensor(1), 4, 0.2)
    fig = viz.plot_distribution(probs, labels=list("abcd"))
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == pytest.approx([0.05, 0.85, 0.05, 0.05])
    with pytest.raises(ValueError, match=r"must be 1-D"):
        viz.plot_distribution(torch.rand(2, 3))
    with pytest.raises(ValueError, match="3 labels for 4"):
        viz.plot_distribution(probs, labels=list("abc"))


def test_every_figure_of_viz_is_reached_from_the_package_root():
    assert all(getattr(tl, name) is getattr(viz, name) for name in viz.__all__)
    assert set(viz.__all__) <= set(dir(tl))
    with pytest.raises(AttributeError, match="no attribute 'plot_nothing'"):
        getattr(tl, "plot_nothing")  # noqa: B009


def test_plot_tokens_draws_one_box_per_token_and_wraps_rows():
    pieces = ["To", " be", ",", " or", " not", "\n", "to", " be"]
    fig = tl.plot_tokens(pieces, width=12)
    ax = fig.axes[0]
    assert len(ax.patches) == len(pieces)
    assert [t.get_text() for t in ax.texts][:5] == ["T", "o", "·", "b", "e"]  # a leading space shows as a dot
    assert ax.get_ylim()[0] < -1  # the line break started a second row
    plt.close(fig)


def test_grid_writes_every_value_in_its_cell_and_checks_the_labels():
    values = torch.tensor([[0.1, 0.9, 0.5], [0.0, 1.0, 0.25]])
    fig = viz.plot_grid(values, ["layer 1", "layer 2"], ["h1", "h2", "h3"], limits=(0.0, 1.0), title="scores")
    ax = fig.axes[0]
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
    assert texts == {(0, 0): "0.10", (0, 1): "0.90", (0, 2): "0.50", (1, 0): "0.00", (1, 1): "1.00", (1, 2): "0.25"}
    assert [t.get_text() for t in ax.get_yticklabels()] == ["layer 1", "layer 2"]
    assert ax.images[0].get_clim() == (0.0, 1.0) and ax.get_title() == "scores"
    f2, ax2 = plt.subplots()
    assert viz.plot_grid(values, ["a", "b"], ["x", "y", "z"], ax=ax2) is f2
    with pytest.raises(ValueError, match=r"shape \(2, 3\) but there are 3 row and 3 column labels"):
        viz.plot_grid(values, ["a", "b", "c"], ["x", "y", "z"])


def test_intervals_mark_each_rows_mean_and_draw_its_spread_between_the_quantiles():
    a = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0, 1.0]])  # (R, N): 2 rows of 5 samples
    b = torch.tensor([[10.0, 10.0, 10.0, 10.0, 20.0], [-1.0, 0.0, 1.0, 2.0, 3.0]])
    fig = viz.plot_intervals({"a": a, "b": b}, ["row 1", "row 2"], quantiles=(0.25, 0.75), lines=(0.0, 1.0))
    ax = fig.axes[0]
    marks = [line for line in ax.get_lines() if line.get_label().startswith(("a:", "b:"))]
    assert [list(m.get_xdata()) for m in marks] == [[2.0, 1.0], [12.0, 1.0]]  # the means
    assert marks[0].get_label() == "a: mean, 25% to 75% of samples"
    bars = [c for c in ax.collections if c.get_segments()]
    assert [[(s[0][0], s[1][0]) for s in bar.get_segments()] for bar in bars] == [[(1.0, 3.0), (1.0, 1.0)],
                                                                              [(10.0, 10.0), (0.0, 2.0)]]  # fmt: skip
    assert [t.get_text() for t in ax.get_yticklabels()] == ["row 1", "row 2"] and ax.get_ylim()[0] > ax.get_ylim()[1]
    assert sum(1 for line in ax.get_lines() if list(line.get_xdata()) in ([0.0, 0.0], [1.0, 1.0])) == 2
    f2, ax2 = plt.subplots()
    assert viz.plot_intervals({"a": a}, ["x", "y"], ax=ax2) is f2
    with pytest.raises(ValueError, match=r"has shape \(2, 5\); expected \(3, N >= 1\)"):
        viz.plot_intervals({"a": a}, ["x", "y", "z"])
    with pytest.raises(ValueError, match="quantiles must be"):
        viz.plot_intervals({"a": a}, ["x", "y"], quantiles=(0.9, 0.1))


def test_seeds_draw_a_dot_per_seed_the_mean_and_the_range_of_each_run():
    fig = viz.plot_seeds({"dense": [2.0, 2.2, 2.1], "moe": [1.9, 1.95]}, xlabel="bits", lines=(2.5,))
    ax = fig.axes[0]
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert [list(d.get_xdata()) for d in dots] == [[2.0, 2.2, 2.1], [1.9, 1.95]]
    means = [line for line in ax.get_lines() if line.get_marker() != "o" and len(set(line.get_xdata())) == 1]
    assert [round(m.get_xdata()[0], 6) for m in means] == [2.5, 2.1, 1.925]  # the line at 2.5, then the means
    ranges = [c.get_segments()[0] for c in ax.collections]
    assert [(s[0][0], s[1][0]) for s in ranges] == [(2.0, 2.2), (1.9, 1.95)]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["dense", "moe"] and ax.get_xlabel() == "bits"
    f2, ax2 = plt.subplots()
    assert viz.plot_seeds({"a": [1.0]}, ax=ax2) is f2
    with pytest.raises(ValueError, match="at least one number"):
        viz.plot_seeds({"a": []})


def test_budget_curves_draw_the_mean_of_the_seeds_and_their_range_on_a_log_axis():
    results = {"probe": {20: [0.6, 0.7, 0.8], 200: [0.75, 0.8]}, "scratch": {20: [0.5], 200: [0.55, 0.65]}}
    fig = viz.plot_budget_curves(results, baseline=0.55, baseline_label="majority")
    ax = fig.axes[0]
    curves = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert [list(c.get_xdata()) for c in curves] == [[20, 200], [20, 200]]
    assert [[round(y, 6) for y in c.get_ydata()] for c in curves] == [[0.7, 0.775], [0.5, 0.6]]  # the means
    bands = [c.get_paths()[0].vertices for c in ax.collections]  # each band spans min to max at every budget
    assert [(round(b[:, 1].min(), 6), round(b[:, 1].max(), 6)) for b in bands] == [(0.6, 0.8), (0.5, 0.65)]
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_xticklabels()] == ["20", "200"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["majority", "probe", "scratch"]
    f2, ax2 = plt.subplots()
    assert viz.plot_budget_curves({"a": {1: [0.5]}}, ax=ax2) is f2
    with pytest.raises(ValueError, match="at least one value"):
        viz.plot_budget_curves({"a": {1: []}})
    steps = viz.plot_budget_curves({"a": {0: [0.5], 500: [0.6], 1000: [0.7]}}, xscale="linear").axes[0]
    assert steps.get_xscale() == "linear" and [list(c.get_xdata()) for c in steps.get_lines()] == [[0, 500, 1000]]
    with pytest.raises(ValueError, match="xscale must be 'log' or 'linear', got 'symlog'"):
        viz.plot_budget_curves({"a": {1: [0.5]}}, xscale="symlog")
