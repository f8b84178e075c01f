"""Looking inside a model: capture what each layer computes, and change it, with PyTorch's own hooks.

One forward pass of any of our models (`Transformer`, `DecoderOnlyLM`, `EncoderClassifier`) records,
keyed by the layer's module name (``"decoder.layers.0"``):

    "<layer>.resid_pre"            (B, T, d)        the residual stream entering the layer
    "<layer>.<sublayer>.out"       (B, T, d)        what the sublayer adds (self_attn, cross_attn, feed_forward)
    "<layer>.<sublayer>.resid"     (B, T, d)        the residual stream once that output is in (post-LN: normalised)
    "<layer>.<attention>.heads"    (B, T, h, d_k)   every head's output, before the output projection mixes them
    "<layer>.<attention>.pattern"  (B, h, T, T_k)   every head's attention weights
    "<layer>.resid_post"           (B, T, d)        the residual stream leaving the layer

Nothing computes the forward pass a second time: the values are what the model's own modules
received and returned. `head_contributions` turns "heads" into what each head writes into the
residual stream (they sum, with out_proj's bias, to "out"). `intervene` changes the same points
during a forward pass: ablate a head, patch a head, a position or a whole layer from another run;
`patching_effect` patches site after site over a batch of clean/corrupted pairs, in either direction.
Breaking a model: `zero_output` and `mean_output` switch a sublayer off, `skip_norms` skips norms and
`without_positions` removes the positional encoding; `mean_activations` gives the means that mean ablation uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from .attention import MultiHeadAttention, watch_weights
from .decoder import DecoderLayer
from .encoder import EncoderLayer

__all__ = [
    "capture",
    "run_with_cache",
    "intervene",
    "head_contributions",
    "hook_points",
    "logit_lens",
    "head_scores",
    "induction_scores",
    "zero_heads",
    "mean_heads",
    "zero_output",
    "mean_output",
    "norm_names",
    "skip_norms",
    "without_positions",
    "mean_activations",
    "patch",
    "patching_effect",
    "head_circuits",
    "composition_score",
    "ov_copying",
]

_Edit = Callable[[torch.Tensor], torch.Tensor]


def _sublayers(layer: nn.Module) -> list[tuple[str, nn.Module, nn.Module]]:
    """(name, sublayer, its norm) in the order the layer runs them; the layers name their norms by role."""
    out = [("self_attn", layer.self_attn, layer.attn_norm)]
    if getattr(layer, "cross_attn", None) is not None:
        out.append(("cross_attn", layer.cross_attn, layer.cross_norm))
    out.append(("feed_forward", layer.feed_forward, layer.ff_norm))
    return [(name, module, norm) for name, module, norm in out if module is not None]  # attention-only: no FF


def _layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    layers = [(name, m) for name, m in model.named_modules() if isinstance(m, (EncoderLayer, DecoderLayer))]
    if not layers:
        raise TypeError(f"{type(model).__name__} has no EncoderLayer or DecoderLayer to look inside")
    return layers


def hook_points(model: nn.Module) -> list[str]:
    """Every name `capture` fills and `intervene` accepts, in the order of the forward pass."""
    names = []
    for prefix, layer in _layers(model):
        names.append(f"{prefix}.resid_pre")
        for sub, module, _ in _sublayers(layer):
            if isinstance(module, MultiHeadAttention):
                names += [f"{prefix}.{sub}.pattern", f"{prefix}.{sub}.heads"]
            names.append(f"{prefix}.{sub}.out")
            if not layer.config.parallel_block:  # a parallel block adds both outputs at once: no stream between
                names.append(f"{prefix}.{sub}.resid")
        names.append(f"{prefix}.resid_post")
    return names


def _resid_hooks(prefix: str, layer: nn.Module, record: Callable[[str, torch.Tensor], None]) -> list:
    """Hooks that record the residual stream after each sublayer, read where the layer itself has it."""
    handles = []
    if layer.config.parallel_block:  # both sublayers read one norm's output: no stream between them to record
        return handles
    subs = _sublayers(layer)
    for i, (sub, _, norm) in enumerate(subs):
        name = f"{prefix}.{sub}.resid"
        if not layer.config.norm_first:  # post-LN: the norm's output is the residual stream
            handles.append(norm.register_forward_hook(lambda m, a, out, name=name: record(name, out)))
        elif i + 1 < len(subs):  # pre-LN: the next sublayer's norm reads the residual stream
            nxt = subs[i + 1][2]
            handles.append(nxt.register_forward_pre_hook(lambda m, args, name=name: record(name, args[0])))
        else:  # pre-LN, last sublayer: the layer's output
            handles.append(layer.register_forward_hook(lambda m, a, out, name=name: record(name, out)))
    return handles


@contextmanager
def capture(model: nn.Module, names: Sequence[str] | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Within the block, record every hook point (or only `names`) of each forward pass; detached tensors.

    A second forward pass in the same block overwrites the first one's values. Attention patterns
    make the attention modules take their step-by-step path (`attention.watch_weights`, as capture_attention).
    """
    wanted = set(hook_points(model) if names is None else names)
    unknown = wanted - set(hook_points(model))
    if unknown:
        raise KeyError(f"no hook point {sorted(unknown)}; hook_points(model) lists them")
    cache: dict[str, torch.Tensor] = {}

    def record(name: str, value: torch.Tensor) -> None:
        if name in wanted:
            cache[name] = value.detach()

    handles = []
    try:
        for prefix, layer in _layers(model):
            handles.append(layer.register_forward_pre_hook(lambda m, args, p=prefix: record(f"{p}.resid_pre", args[0])))
            handles.append(layer.register_forward_hook(lambda m, a, out, p=prefix: record(f"{p}.resid_post", out)))
            handles += _resid_hooks(prefix, layer, record)
            for sub, module, _ in _sublayers(layer):
                name = f"{prefix}.{sub}"
                if isinstance(module, MultiHeadAttention):
                    handles.append(module.register_forward_hook(lambda m, a, out, n=name: record(f"{n}.out", out[0])))
                    handles.append(
                        module.out_proj.register_forward_pre_hook(
                            lambda m, args, n=name, mha=module: record(
                                f"{n}.heads",
                                args[0].unflatten(-1, (mha.num_heads, mha.d_k)),  # (B, T, h, d_k)
                            )
                        )
                    )
                    if f"{name}.pattern" in wanted:
                        handles += watch_weights(module, lambda w, n=name: record(f"{n}.pattern", w))
                else:
                    handles.append(module.register_forward_hook(lambda m, a, out, n=name: record(f"{n}.out", out)))
        yield cache
    finally:
        for handle in handles:
            handle.remove()


def run_with_cache(model: nn.Module, *inputs, names: Sequence[str] | None = None, **kwargs):
    """``model(*inputs, **kwargs)`` without gradients; returns (its output, the captured dict)."""
    with capture(model, names) as cache, torch.no_grad():
        output = model(*inputs, **kwargs)
    return output, cache


def head_contributions(model: nn.Module, cache: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """What each head writes into the residual stream: "<attention>.heads" (B, T, h, d_k) -> (B, T, h, d).

    Head i's output times its d_k columns of out_proj.weight; the h contributions plus out_proj's
    bias sum to "<attention>.out".
    """
    if not name.endswith(".heads"):
        raise ValueError(f"head_contributions needs a '.heads' hook point, got {name!r}")
    mha = model.get_submodule(name.removesuffix(".heads"))
    heads = cache[name]  # (B, T, h, d_k)
    w = mha.out_proj.weight.detach().view(mha.d_model, mha.num_heads, mha.d_k)  # (d, h, d_k): columns by head
    return torch.einsum("bthk,dhk->bthd", heads, w)  # (B, T, h, d)


def logit_lens(model: nn.Module, cache: dict[str, torch.Tensor]) -> torch.Tensor:
    """A DecoderOnlyLM's residual stream after each layer, read as logits: (num_layers, B, T, V).

    Each "<layer>.resid_post" goes through the final norm and the output layer, as the last one
    does in the forward pass: the last row equals the model's logits.
    """
    from .models import DecoderOnlyLM

    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"logit_lens reads a DecoderOnlyLM's stream through its head, got {type(model).__name__}")
    norm = model.decoder.norm if model.decoder.norm is not None else nn.Identity()
    with torch.no_grad():
        streams = [cache[f"decoder.layers.{i}.resid_post"] for i in range(len(model.decoder.layers))]
        return torch.stack([model.head(norm(x)) for x in streams])  # (L, B, T, V)


def head_circuits(model: nn.Module, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The QK and OV circuits of every head of a DecoderOnlyLM's layer: two (h, d, d) tensors, read off the weights.

    QK[h] = W_Q^T W_K: head h's score between a query vector x and a key vector y is x^T QK[h] y / sqrt(d_k)
    (biases aside). OV[h] = W_O W_V: attending to y, head h adds OV[h] y to the residual stream. The
    gain of the norm in front of the attention (pre-LN) scales each feature it reads, so it is folded
    into W_Q, W_K and W_V; the norm's centring and scaling by the vector's size are not (Elhage et al. 2021
    read circuits the same way). Grouped-query heads are read through the key-value head they share.
    """
    from .models import DecoderOnlyLM

    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"head_circuits reads a DecoderOnlyLM's weights, got {type(model).__name__}")
    block = model.decoder.layers[layer]
    attn = block.self_attn
    h, d_k = attn.num_heads, attn.d_k
    gain = block.attn_norm.weight.detach() if model.config.norm_first else torch.ones(attn.d_model)
    with torch.no_grad():
        group = h // attn.num_kv_heads  # query heads per key-value head
        w_q = (attn.q_proj.weight * gain).view(h, d_k, -1)  # (h, d_k, d)
        w_k = (attn.k_proj.weight * gain).view(-1, d_k, attn.d_model).repeat_interleave(group, 0)  # (h, d_k, d)
        w_v = (attn.v_proj.weight * gain).view(-1, d_k, attn.d_model).repeat_interleave(group, 0)  # (h, d_k, d)
        w_o = attn.out_proj.weight.view(attn.d_model, h, d_k).transpose(0, 1)  # (h, d, d_k): the columns reading head h
        return w_q.transpose(1, 2) @ w_k, w_o @ w_v  # (h, d, d) each


def composition_score(reader: torch.Tensor, writer: torch.Tensor) -> torch.Tensor:
    """How much a later head reads what an earlier one writes: ``norm(reader @ writer) / (norm(reader) norm(writer))``.

    reader (..., d, d): a circuit of the later head (its QK circuit for K-composition, where the keys
    read the earlier head's output; its QK transposed for Q-composition; its OV circuit for
    V-composition); writer (..., d, d): the earlier head's OV circuit. Broadcasts over leading
    dimensions. The norms are Frobenius norms (Elhage et al. 2021).

    The score is 0 when the reader ignores what the writer writes and larger the more of it the reader
    reads, but it reaches 1 only for circuits of rank 1: since norm(AB) <= ||A||_2 norm(B), it is at
    most ||A||_2 / norm(A), which is 1 / sqrt(r) when A has r equal singular values. A reader and a
    writer that are the same projection onto 16 directions (rank d_k = 16, a head's rank here) score
    0.25; random pairs of that rank in 64 dimensions score about 0.125.
    """
    if reader.dim() < 2 or writer.dim() < 2 or reader.shape[-1] != writer.shape[-2]:
        raise ValueError(f"reader (..., d, d) and writer (..., d, d) must chain, got {tuple(reader.shape)} and "
                         f"{tuple(writer.shape)}")  # fmt: skip
    norms = torch.linalg.matrix_norm(reader) * torch.linalg.matrix_norm(writer)
    return torch.linalg.matrix_norm(reader @ writer) / norms


def ov_copying(
    model: nn.Module, layer: int, tokens: Sequence[int] | torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Does each head of a layer copy the token it attends to into the logits? -> (eigenvalue share (h,), hits (h,)).

    The full OV circuit W_U diag(g) OV[h] W_E^T (V, V) maps a token the head attends to (a column) to
    what it adds to every token's logit; W_E is the token table, W_U the output layer and g the final
    norm's gain. A copying head raises the attended token's own logit: its eigenvalues are mostly
    positive, and the share ``sum(eigenvalues) / sum(abs(eigenvalues))`` is near 1 (-1 for a head that
    suppresses its token). `hits` is the fraction of tokens whose own logit rises most in their column.
    tokens: the ids that count (default: all); both measures then read the circuit's rows and columns of
    those ids only, so that a token the data never contains (padding, say) is left out.
    """
    _, ov = head_circuits(model, layer)  # (h, d, d)
    norm = model.decoder.norm
    gain = norm.weight.detach() if norm is not None else torch.ones(ov.shape[-1], device=ov.device)
    with torch.no_grad():
        full = (model.head.weight * gain) @ ov @ model.embed.weight.T  # (h, V, V): column t = token t attended to
        if tokens is not None:
            ids = torch.as_tensor(tokens, device=full.device).long()  # (n,)
            full = full[:, ids][:, :, ids]  # (h, n, n): those tokens' rows and columns
        eig = torch.linalg.eigvals(full.double().cpu())  # (h, V), complex
        share = eig.real.sum(-1) / eig.abs().sum(-1)  # (h,)
        vocab = torch.arange(full.shape[-1], device=full.device)
        hits = (full.argmax(-2) == vocab).float().mean(-1)  # (h,): own logit the largest in its column
    return share.float().to(ov.device), hits


def head_scores(pattern: torch.Tensor, offset: int) -> torch.Tensor:
    """Each head's mean attention from position t to position t - offset: pattern (B, h, T, T_k) -> (h,).

    offset 1 scores previous-token heads. On a random block of n tokens shown twice, offset n - 1
    scores induction heads: in the second copy, the key just after this token's first occurrence.
    Only query positions t >= offset count.
    """
    if pattern.dim() != 4 or not 1 <= offset < pattern.shape[-2]:
        raise ValueError(
            f"pattern must be (B, h, T, T_k) with 1 <= offset < T, got shape {tuple(pattern.shape)}, offset {offset}"
        )
    diagonal = pattern.diagonal(offset=-offset, dim1=-2, dim2=-1)  # (B, h, T - offset): weight on t - offset
    return diagonal.mean(dim=(0, 2))  # (h,)


def induction_scores(pattern: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Each head's induction score on any text: pattern (B, h, T, T) and tokens (B, T) -> (h,).

    At position t, an induction head looks back for an earlier occurrence of tokens[t] and attends
    to the token just after it: the keys s with 1 <= s <= t and tokens[s - 1] == tokens[t]. The score
    is the attention on those keys, summed, averaged over the positions that have at least one.
    On a random block shown twice it matches head_scores(pattern, n - 1), up to chance repeats.
    """
    if pattern.dim() != 4 or pattern.shape[-1] != pattern.shape[-2]:
        raise ValueError(f"pattern must be self-attention weights (B, h, T, T), got shape {tuple(pattern.shape)}")
    B, _, T, _ = pattern.shape
    if tokens.shape != (B, T):
        raise ValueError(f"tokens must be (B, T) = ({B}, {T}) to match the pattern, got {tuple(tokens.shape)}")
    same = tokens[:, :, None] == tokens[:, None, :]  # (B, T, T): [b, t, j] tokens[t] == tokens[j]
    targets = torch.zeros_like(same)  # (B, T, T): [b, t, s] key s follows an earlier copy of tokens[t]
    targets[:, :, 1:] = same[:, :, :-1]  # s = j + 1
    targets &= torch.ones(T, T, dtype=torch.bool, device=tokens.device).tril()  # s <= t: keys a causal head can see
    counted = targets.any(-1)  # (B, T): positions whose token came before
    if not counted.any():
        raise ValueError("no token repeats an earlier one, so there is nothing for an induction head to find")
    mass = (pattern * targets[:, None].to(pattern)).sum(-1)  # (B, h, T): attention on the targets
    return mass.permute(1, 0, 2)[:, counted].mean(-1)  # (h,)


@contextmanager
def intervene(model: nn.Module, edits: dict[str, _Edit]) -> Iterator[None]:
    """Within the block, replace a hook point's value by edit(value) in every forward pass.

    Editable points: "<layer>.resid_pre", "<layer>.resid_post", "<layer>.<sublayer>.out" and
    "<layer>.<attention>.heads" (B, T, h, d_k); see zero_heads, mean_heads and patch for edits.
    An edit must return a tensor of the shape it was given. Hooks run in the order they were added:
    open `capture` inside `intervene` (as run_with_cache within the block does) to record the edited values.
    """
    points = set(hook_points(model))
    handles = []

    def checked(name: str, edit: _Edit, value: torch.Tensor) -> torch.Tensor:
        new = edit(value)
        if not isinstance(new, torch.Tensor) or new.shape != value.shape:
            got = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
            raise ValueError(f"the edit of {name} must return a tensor of shape {tuple(value.shape)}, got {got}")
        return new

    try:
        for name, edit in edits.items():
            if name not in points:
                raise KeyError(f"no hook point {name!r}; hook_points(model) lists them")
            where, what = name.rsplit(".", 1)
            module = model.get_submodule(where)
            if what == "resid_pre":
                hook = lambda m, args, n=name, e=edit: (checked(n, e, args[0]), *args[1:])  # noqa: E731
                handles.append(module.register_forward_pre_hook(hook))
            elif what == "resid_post":
                handles.append(module.register_forward_hook(lambda m, a, out, n=name, e=edit: checked(n, e, out)))
            elif what == "out" and isinstance(module, MultiHeadAttention):
                hook = lambda m, a, out, n=name, e=edit: (checked(n, e, out[0]), out[1])  # noqa: E731
                handles.append(module.register_forward_hook(hook))
            elif what == "out":
                handles.append(module.register_forward_hook(lambda m, a, out, n=name, e=edit: checked(n, e, out)))
            elif what == "heads":

                def hook(m, args, n=name, e=edit, mha=module):
                    heads = args[0].unflatten(-1, (mha.num_heads, mha.d_k))  # (B, T, h, d_k)
                    return (checked(n, e, heads).flatten(-2),)  # (B, T, h * d_k)

                handles.append(module.out_proj.register_forward_pre_hook(hook))
            else:
                raise ValueError(f"{name} can be read (capture) but not edited")
        yield
    finally:
        for handle in handles:
            handle.remove()


def _as_list(heads: int | Sequence[int]) -> list[int]:
    return [heads] if isinstance(heads, int) else list(heads)


def zero_heads(heads: int | Sequence[int]) -> _Edit:
    """An edit for "<attention>.heads": these heads output zeros (zero ablation)."""
    index = _as_list(heads)

    def edit(value: torch.Tensor) -> torch.Tensor:  # (B, T, h, d_k)
        out = value.clone()
        out[:, :, index] = 0.0
        return out

    return edit


def mean_heads(heads: int | Sequence[int], mean: torch.Tensor) -> _Edit:
    """An edit for "<attention>.heads": these heads output `mean` (h, d_k) or (T, h, d_k), e.g. over a dataset."""
    index = _as_list(heads)

    def edit(value: torch.Tensor) -> torch.Tensor:  # (B, T, h, d_k)
        out = value.clone()
        out[:, :, index] = mean.to(value)[..., index, :].expand_as(out[:, :, index])
        return out

    return edit


def patch(source: torch.Tensor, positions: int | Sequence[int] | None = None, heads=None) -> _Edit:
    """An edit that copies `source` (the same hook point, captured on another input) into this run.

    positions: only these positions (dim 1); heads: only these heads (dim 2, for "<attention>.heads").
    Both default to everything.
    """

    def edit(value: torch.Tensor) -> torch.Tensor:
        if source.shape != value.shape:
            raise ValueError(f"the patch's source has shape {tuple(source.shape)}, the run {tuple(value.shape)}")
        rows = torch.arange(value.shape[1]) if positions is None else torch.tensor(_as_list(positions))
        out = value.clone()
        if heads is None:
            out[:, rows] = source.to(value)[:, rows]
        else:
            cols = torch.tensor(_as_list(heads))
            at = (slice(None), rows[:, None], cols[None, :])  # every (position, head) pair: (P, H)
            out[at] = source.to(value)[at]
        return out

    return edit


_Site = str | tuple  # a hook point, or (hook point, positions) or (hook point, positions, heads), as `patch` takes them


def patching_effect(
    model: nn.Module,
    clean: torch.Tensor | Sequence[torch.Tensor],
    corrupt: torch.Tensor | Sequence[torch.Tensor],
    sites: Sequence[_Site],
    metric: Callable[[torch.Tensor], torch.Tensor],
    direction: str = "denoise",
) -> torch.Tensor:
    """Activation patching over B clean/corrupted pairs, site by site: the share of the difference moved -> (S, B).

    clean, corrupt: the model's inputs, a tensor or a tuple of tensors (``(src, tgt)``), row b of one
    paired with row b of the other. sites: S hook points, each a name, ``(name, positions)`` or
    ``(name, positions, heads)``, patched as `patch` does. metric: the model's output -> (B,), e.g. a
    logit difference. With m_clean and m_corrupt the metric of the two runs without a patch:

    - ``"denoise"``: run the corrupted input with the site's clean activation patched in; the share
      is (m_patched - m_corrupt) / (m_clean - m_corrupt): 1 when the site alone restores the clean
      metric (it is sufficient), 0 when it restores nothing.
    - ``"noise"``: run the clean input with the site's corrupted activation patched in; the share is
      (m_clean - m_patched) / (m_clean - m_corrupt): 1 when the site alone breaks it (it is
      necessary), 0 when the clean run does not notice.

    One forward pass per site for the whole batch; every pair's metric must differ between the runs.
    """
    if direction not in ("denoise", "noise"):
        raise ValueError(f"direction must be 'denoise' (clean into corrupted) or 'noise' (corrupted into clean), "
                         f"got {direction!r}")  # fmt: skip
    clean = (clean,) if isinstance(clean, torch.Tensor) else tuple(clean)
    corrupt = (corrupt,) if isinstance(corrupt, torch.Tensor) else tuple(corrupt)
    if [tuple(x.shape) for x in clean] != [tuple(x.shape) for x in corrupt]:
        raise ValueError(f"clean and corrupted inputs must pair row by row with the same shapes, got "
                         f"{[tuple(x.shape) for x in clean]} and {[tuple(x.shape) for x in corrupt]}")  # fmt: skip
    parsed = [(site, None, None) if isinstance(site, str) else (*site, None, None)[:3] for site in sites]
    names = sorted({name for name, _, _ in parsed})
    clean_out, clean_cache = run_with_cache(model, *clean, names=names)
    corrupt_out, corrupt_cache = run_with_cache(model, *corrupt, names=names)
    m_clean, m_corrupt = metric(clean_out), metric(corrupt_out)  # (B,) each
    difference = m_clean - m_corrupt  # (B,)
    if difference.dim() != 1 or (difference.abs() < 1e-6).any():
        raise ValueError(f"metric must give one number per pair (B,), different in the clean and the corrupted run; "
                         f"got shape {tuple(difference.shape)}, smallest difference "
                         f"{difference.abs().min().item():.2g}")  # fmt: skip
    source, run = (clean_cache, corrupt) if direction == "denoise" else (corrupt_cache, clean)
    shares = []
    for name, positions, heads in parsed:
        with intervene(model, {name: patch(source[name], positions, heads)}), torch.no_grad():
            m = metric(model(*run))  # (B,)
        shares.append((m - m_corrupt) / difference if direction == "denoise" else (m_clean - m) / difference)
    return torch.stack(shares)  # (S, B)


# Breaking a model while watching it: a layer switched off, the positions removed, a norm skipped. These join
# zero_heads and mean_heads; the inside playground's switches give the same numbers (export.ablation_model).


def zero_output() -> _Edit:
    """An edit for "<layer>.<sublayer>.out": the sublayer adds nothing (zero ablation of it)."""
    return torch.zeros_like


def mean_output(mean: torch.Tensor) -> _Edit:
    """An edit for "<layer>.<sublayer>.out": the sublayer adds `mean` (d,) or (T, d), e.g. its mean over a dataset."""

    def edit(value: torch.Tensor) -> torch.Tensor:  # (B, T, d)
        return mean.to(value).expand_as(value).clone()

    return edit


def norm_names(model: nn.Module) -> list[str]:
    """The norms `skip_norms` can skip, in the order they run: each layer's "<layer>.attn_norm" (and "cross_norm"),
    "<layer>.ff_norm", then the stack's final norm ("decoder.norm")."""
    names = []
    for prefix, layer in _layers(model):
        roles = ["attn_norm", "cross_norm", "ff_norm"]
        names += [f"{prefix}.{role}" for role in roles if getattr(layer, role, None) is not None]
    for stack in ("encoder", "decoder"):
        if isinstance(getattr(getattr(model, stack, None), "norm", None), nn.Module):
            names.append(f"{stack}.norm")
    return names


@contextmanager
def skip_norms(model: nn.Module, names: Sequence[str]) -> Iterator[None]:
    """Within the block, each named norm (`norm_names`) hands its input on unchanged: as if it were not there.

    A parallel block's shared norm is one module: skipping its attn_norm skips its ff_norm too."""
    known = norm_names(model)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(f"no norm {unknown}; norm_names(model) lists them: {known}")
    modules = []
    for name in names:
        where, role = name.rsplit(".", 1)
        modules.append(getattr(model.get_submodule(where), role))
    handles = [m.register_forward_hook(lambda m, args, out: args[0]) for m in {id(m): m for m in modules}.values()]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def without_positions(model: nn.Module) -> Iterator[None]:
    """Within the block, the model's positional encoding adds nothing (nor its dropout): every position looks alike,
    and in a causal model only the mask still tells the positions apart. For a learned or sinusoidal encoding
    (model.pos); rotary positions turn the queries and keys inside attention instead, which this does not undo."""
    pos = getattr(model, "pos", None)
    kind = getattr(getattr(model, "config", None), "positional", None)
    if pos is None or kind not in ("learned", "sinusoidal"):
        raise ValueError(
            f"without_positions takes a model that adds learned or sinusoidal positions (model.pos), got a "
            f"{type(model).__name__} with positional={kind!r}"
        )
    handle = pos.register_forward_hook(lambda m, args, out: args[0])  # x, not x + the position's vector
    try:
        yield
    finally:
        handle.remove()


def mean_activations(model: nn.Module, tokens: torch.Tensor, names: Sequence[str]) -> dict[str, torch.Tensor]:
    """The mean of each hook point in `names` over the batch `tokens` (B, T) and its positions: (h, d_k) for
    "<attention>.heads", (d,) for a residual stream or a sublayer's output; what mean_heads and mean_output take."""
    _, cache = run_with_cache(model, tokens, names=names)
    return {name: cache[name].flatten(0, 1).mean(0) for name in names}  # (B * T, ...) -> (...)
