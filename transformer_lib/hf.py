"""Weights to and from Hugging Face `transformers`: six decoder-only families (our DecoderOnlyLM), BERT, ViT, Whisper,
BART, wav2vec 2.0, CLIP, DeepSeek-V3.

Each family is one section below, read top to bottom: its config in ours, the table of parameter
names, loading (theirs -> ours) and saving (ours -> theirs), then one line that registers it.
`from_hf` finds the family by the model's class, `to_hf` by the config (the first family that
claims it, in the order they are registered). Adding a family is one new section.

- **GPT-2** is the 2017 decoder with four changes, each a config field here: the norm comes first
  (pre-LN) and once more at the end, positions are a learned table, the feed-forward uses GELU's
  tanh approximation, and the output layer shares the token table. Its linear layers are stored as
  `Conv1D`, which computes x @ W + b with W of shape (in, out): the transpose of `nn.Linear`'s.
- **Llama** goes further: RMSNorm, rotary positions, a SwiGLU feed-forward, grouped-query attention
  and no biases, again one config field each.
- **Qwen3** is Llama with an RMSNorm on each head's query and key before the rotation (QK-norm, `qk_norm`).
- **Mixtral** is Llama with a mixture of experts for its feed-forward blocks (`num_experts`,
  `experts_per_token`; see transformer_lib.moe) and another rotary base.
- **GPT-J** keeps LayerNorm and GELU but turns only the first `rotary_dim` dimensions of each head,
  pairs them as neighbours (2i, 2i + 1: the interleaved layout, where Llama in `transformers` pairs
  i with i + r/2), and runs attention and the feed-forward block side by side from one norm (a
  parallel block); its attention has no biases, its output layer has one.
- **GPT-NeoX** (Pythia) turns a share of each head in the rotate-half layout, fuses the query, key
  and value projections into one matrix (head by head), and runs a parallel block with a norm for
  each sublayer (`shared_norm=False`).
- **BERT** is the 2017 encoder, post-LN, with learned positions, token types, a norm on the
  embeddings, exact GELU, a pooler and a tied masked-LM head (transformer_lib.bert lists each one):
  BertForMaskedLM and BertForSequenceClassification become our bert.BertForMaskedLM and
  bert.BertClassifier.
- **ViT** is a pre-LN encoder that reads image patches through a strided convolution, with a class
  token and learned positions: ViTForImageClassification becomes our vit.VisionTransformer.
- **BART** is the 2017 encoder-decoder, post-LN, with one tied table for both sides, learned positions
  two rows in, a LayerNorm on each side's embeddings, exact GELU and a bias on the logits:
  BartForConditionalGeneration becomes our bart.BartForConditionalGeneration.
- **wav2vec 2.0** reads raw samples through convolutions, with positions from a grouped convolution and
  the 2017 encoder (post-LN, or pre-LN in the "stable" variant): Wav2Vec2ForCTC becomes our
  wav2vec2.Wav2Vec2ForCTC (transformer_lib.wav2vec2 lists what changes).
- **DeepSeek-V3** replaces attention with multi-head latent attention (transformer_lib.latent) in a pre-norm
  decoder with RMSNorm and SwiGLU: DeepseekV3ForCausalLM whose every layer is dense becomes our latent.LatentLM.
- **Whisper** is a pre-LN encoder-decoder: a convolutional stem and fixed sinusoids in front of the
  encoder, learned positions and a tied output layer on the decoder, no bias on the key projections:
  WhisperForConditionalGeneration becomes our speech.SpeechTranscriber.

`surgery.with_rotary_layout` (re-exported here) moves a model between the two rotary layouts
without changing what it computes. `transformers` is an optional dependency (the test extra
installs it); nothing here downloads.

    ours = from_hf(GPT2LMHeadModel.from_pretrained(folder))   # or Llama, Mixtral, GPT-J, GPT-NeoX, BERT; logits to 1e-5
    theirs = to_hf(ours)                                      # the same kind of model, with our weights
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .attention import MultiHeadAttention
from .bart import BartForConditionalGeneration, bart_config
from .bert import BertClassifier, BertForMaskedLM, bert_config
from .config import TransformerConfig
from .models import DecoderOnlyLM
from .speech import SpeechTranscriber, speech_config, whisper_positions
from .surgery import with_rotary_layout  # re-exported: checkpoints in the other rotary layout
from .tokenization import CharTokenizer
from .vit import VisionTransformer, vit_config
from .wav2vec2 import Wav2Vec2ForCTC, Wav2Vec2ForPreTraining, wav2vec2_config

__all__ = [
    "from_hf",
    "to_hf",
    "FAMILIES",
    "gpt2_config",
    "llama_config",
    "qwen3_config",
    "mixtral_config",
    "gptj_config",
    "neox_config",
    "with_rotary_layout",
    "to_hf_tokenizer",
]


# ---- what every family shares -------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One family of Hugging Face models: how its config and weights become ours, and back."""

    name: str  # as the errors say it: "GPT-2"
    hf_class: str  # the transformers class from_hf takes and to_hf returns: "GPT2LMHeadModel"
    config: Callable[[object], TransformerConfig]  # their config -> ours
    load: Callable[[dict[str, torch.Tensor], TransformerConfig], dict[str, torch.Tensor]]  # their state -> ours
    save: Callable[[DecoderOnlyLM], nn.Module]  # our model -> theirs, refusing what the family cannot hold
    claims: Callable[[TransformerConfig], bool]  # to_hf: is a model of this config one of ours?
    ours: type = DecoderOnlyLM  # the class of our model: from_hf builds one, to_hf takes one
    build: Callable[[TransformerConfig, object], nn.Module] = lambda cfg, hf_config: DecoderOnlyLM(cfg)
    # fields of this family's config that do not change what its model computes, beyond _NO_EFFECT's, with the reason
    no_effect: tuple[tuple[str, str], ...] = (
        ("pad_token_id", "a causal LM's forward pass never reads it (its padding is attention_mask's)"),
    )
    # after the weights: what the model holds outside its config and state (ours, theirs), if anything
    finish: Callable[[nn.Module, nn.Module], None] | None = None


#: The registered families by Hugging Face class name, in the order `to_hf` asks them.
FAMILIES: dict[str, Family] = {}


def _register(family: Family) -> None:
    FAMILIES[family.hf_class] = family


def _decoder_only(**fields) -> TransformerConfig:
    """What every family shares: pre-LN with a final norm, unscaled embeddings, no dropout at inference."""
    return TransformerConfig(dropout=0.0, norm_first=True, final_norm=True, scale_embedding=False, **fields)


def _check_architecture(
    ours: nn.Module, expected: TransformerConfig, family: str, head_bias: bool = False, ignore: tuple[str, ...] = ()
) -> None:
    """Refuse a model whose config differs from `family`'s (or whose output layer holds a bias the family does
    not have), naming what differs. rotary_dim None and rotary_dim = d_k are the same: every dimension turns.
    `ignore`: fields the family's model never reads."""
    cfg = ours.config

    def seen(c: TransformerConfig, k: str):
        return (c.rotary_dim or c.d_k) if k == "rotary_dim" else getattr(c, k)

    differ = {k: (seen(cfg, k), seen(expected, k)) for k in vars(expected) if k not in ("dropout", *ignore)}
    differ = {k: pair for k, pair in differ.items() if pair[0] != pair[1]}
    if differ:
        raise ValueError(f"not a {family} architecture; these fields differ (ours, {family}'s): {differ}")
    if not head_bias and ours.head.bias is not None and ours.head.bias.abs().max() > 0:
        raise ValueError(f"{family}'s output layer has no bias, and ours holds a non-zero one")


# The fields of a Hugging Face config that do not change what its model computes at inference, with the reason.
# A field of the source config that the config to_hf writes does not reproduce is refused by name, unless it is here
# (from_hf, `_refuse_what_is_not_carried`): a rule, not a list of the fields someone thought of.
_NO_EFFECT = {
    "_name_or_path": "where the model was read from",
    "architectures": "the class names it was saved with",
    "transformers_version": "the library version it was saved with",
    "dtype": "the storage type; from_hf computes in float32",
    "id2label": "label names (their number is the classifier's size, which is carried)",
    "label2id": "label names",
    "problem_type": "which loss to train with",
    "output_attentions": "what the forward pass returns besides the logits",
    "output_hidden_states": "what the forward pass returns besides the logits",
    "return_dict": "how the outputs are packed",
    "use_cache": "whether generation keeps keys and values (ours decides per call)",
    "chunk_size_feed_forward": "the feed-forward block in chunks: the same sums",
    "initializer_range": "how fresh weights are drawn; from_hf copies weights",
    "init_std": "how fresh weights are drawn; from_hf copies weights",
    "bos_token_id": "a generation setting: the forward pass never reads it",
    "eos_token_id": "a generation setting: the forward pass never reads it",
    "decoder_start_token_id": "where generation starts: read only when no decoder ids are given, never for logits",
    "begin_suppress_tokens": "a generation setting",
    "suppress_tokens": "a generation setting",
    "max_length": "a generation setting",
    "median_filter_width": "Whisper's word timestamps, not its logits",
    # dropout and other training-only randomness: from_hf returns the model in eval mode
    "attn_pdrop": "dropout (off at inference)",
    "embd_pdrop": "dropout (off at inference)",
    "resid_pdrop": "dropout (off at inference)",
    "summary_first_dropout": "dropout of GPT-2's double-heads model, which is not converted",
    "attention_dropout": "dropout (off at inference)",
    "hidden_dropout": "dropout (off at inference)",
    "hidden_dropout_prob": "dropout (off at inference)",
    "attention_probs_dropout_prob": "dropout (off at inference)",
    "classifier_dropout": "dropout (off at inference)",
    "activation_dropout": "dropout (off at inference)",
    "dropout": "dropout (off at inference)",
    "encoder_layerdrop": "layer drop (training only)",
    "decoder_layerdrop": "layer drop (training only)",
    "router_jitter_noise": "noise on the router's input in training only",
    "router_aux_loss_coef": "the weight of a training loss",
    "output_router_logits": "what the forward pass returns besides the logits",
    "apply_spec_augment": "SpecAugment, training only",
    "mask_time_prob": "SpecAugment, training only",
    "mask_time_length": "SpecAugment, training only",
    "mask_time_min_masks": "SpecAugment, training only",
    "mask_feature_prob": "SpecAugment, training only",
    "mask_feature_length": "SpecAugment, training only",
    "mask_feature_min_masks": "SpecAugment, training only",
    # parts of other heads of the same family, which the converted class does not have
    "summary_type": "GPT-2's double-heads model only",
    "summary_use_proj": "GPT-2's double-heads model only",
    "summary_activation": "GPT-2's double-heads model only",
    "summary_proj_to_labels": "GPT-2's double-heads model only",
    "classifier_proj_size": "an audio classifier's head only (Whisper's, wav2vec 2.0's), which is not converted",
    "use_weighted_layer_sum": "an audio classifier's head only (Whisper's, wav2vec 2.0's), which is not converted",
    "encoder_stride": "ViT's masked-image model only",
    "pooler_output_size": "ViT's pooler, which the image classifier does not build",
    "pooler_act": "ViT's pooler, which the image classifier does not build",
}


def _rope_as_read(value, config) -> object:
    """rope_parameters as transformers reads them: the fields a scaling leaves out at their defaults, numbers as
    floats (a written 32.0 and a left-out beta_fast are one value)."""
    if not isinstance(value, dict):
        return value
    read = {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True} if value.get("rope_type") == "yarn" else {}
    read |= {k: v for k, v in value.items() if v is not None}
    return {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in read.items()}


# Two spellings of one value: the field as the model reads it (None meaning a default the model computes).
_AS_READ = {
    "n_inner": lambda value, c: 4 * c.n_embd if value is None else value,  # GPT-2 and GPT-J: 4 x width by default
    "head_dim": lambda value, c: value or c.hidden_size // c.num_attention_heads,
    "rope_parameters": _rope_as_read,
}


# Our config's names, and the Hugging Face fields each comes from in one family or another.
_THEIR_NAMES = {
    "d_model": ("hidden_size", "n_embd", "d_model"),
    "num_heads": ("num_attention_heads", "n_head", "encoder_attention_heads", "decoder_attention_heads"),
    "num_kv_heads": ("num_key_value_heads",),
    "num_layers": ("num_hidden_layers", "n_layer", "encoder_layers", "decoder_layers"),
    "d_ff": ("intermediate_size", "n_inner", "encoder_ffn_dim", "decoder_ffn_dim"),
    "max_len": ("max_position_embeddings", "n_positions", "max_target_positions", "max_source_positions"),
    "rotary_dim": ("rotary_dim", "rope_parameters"),
    "d_k": ("hidden_size", "n_embd", "num_attention_heads", "n_head", "head_dim"),
    "vocab_size": ("vocab_size",),
}


def _named_as_theirs(error: ValueError, hf_config, family: str) -> ValueError:
    """An error of our config's, with the fields of their config it came from (an error that already names one of
    their fields is left as it is)."""
    fields = hf_config.to_dict()
    text = str(error)
    if any(re.search(rf"\b{re.escape(k)}\b", text) for k in fields if k not in _THEIR_NAMES):
        return error
    named = [
        f"{theirs}={fields[theirs]!r}"
        for ours, candidates in _THEIR_NAMES.items()
        if re.search(rf"\b{ours}\b", text)
        for theirs in candidates
        if theirs in fields
    ]
    if not named:
        return error
    return ValueError(f"{text} (in this {family} config: {', '.join(dict.fromkeys(named))})")


def _refuse_what_is_not_carried(source, written, family: Family) -> None:
    """Compare the config a model came with and the one to_hf writes for its conversion, field by field: a field
    that differs, and is not one that changes nothing (`_NO_EFFECT`, the family's `no_effect`), is refused with its
    name and both values."""
    theirs, back = source.to_dict(), written.to_dict()
    missing = object()
    differ = {}
    for key in sorted(theirs.keys() | back.keys()):
        if key in _NO_EFFECT or key in dict(family.no_effect):
            continue
        a, b = theirs.get(key, missing), back.get(key, missing)
        if key in _AS_READ:
            a, b = _AS_READ[key](a, source), _AS_READ[key](b, written)
        if a != b:
            differ[key] = (a if a is not missing else "(not set)", b if b is not missing else "(not set)")
    if differ:
        fields = "; ".join(f"{k}={a!r} (ours would compute {k}={b!r})" for k, (a, b) in differ.items())
        raise ValueError(
            f"from_hf cannot carry every field of this {family.name} config, so the converted model would compute "
            f"something else: {fields}"
        )


def _renamed(state: dict[str, torch.Tensor], names: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    """Pick and rename tensors: names holds (from, to) pairs."""
    return {b: state[a] for a, b in names}


def _flipped(names: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(b, a) for a, b in names]


def _tanh_gelu(hf_config, family: str) -> str:
    field = "activation_function" if hasattr(hf_config, "activation_function") else "hidden_act"
    act = getattr(hf_config, field, None)
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"only {family}'s tanh GELU is supported, got {field}={act!r}")
    return "gelu_tanh"


def _rope_theta(hf_config, scaled: tuple[str, ...] = ()) -> float:
    """The rotary base; a scaling other than those in `scaled` (which the caller carries) is refused by name."""
    parameters = getattr(hf_config, "rope_parameters", None) or {}
    kind = parameters.get("rope_type", "default")
    if kind != "default" and kind not in scaled:
        allowed = ", ".join(repr(k) for k in ("default", *scaled))
        raise ValueError(f"the rotary positions this family reads are {allowed}; got rope_parameters['rope_type']="
                         f"{kind!r}")  # fmt: skip
    return float(parameters.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0)))


# RoPE scalings that transformers and positional.rope_frequencies compute alike, with the fields each reads and the
# values ours fixes (YaRN's ramp from 32 turns to 1; Llama 3.1's bands at wavelengths of the trained length and a
# quarter of it, low_freq_factor 1 and high_freq_factor 4)
_ROPE_SCALED = {
    "linear": {},
    "yarn": {
        "beta_fast": (None, 32, 32.0),
        "beta_slow": (None, 1, 1.0),
        "attention_factor": (None,),
        "mscale": (None,),
        "mscale_all_dim": (None,),
        "truncate": (None, True),
    },  # fmt: skip
    "llama3": {"low_freq_factor": (1, 1.0), "high_freq_factor": (4, 4.0)},
}


def _rope_scaling(hf_config) -> dict:
    """A Llama-shaped config's rope_parameters -> our config's rope_scaling, rope_factor and rope_original_len."""
    parameters = dict(getattr(hf_config, "rope_parameters", None) or {})
    kind = parameters.get("rope_type", "default")
    if kind not in _ROPE_SCALED:
        return {}
    for key, allowed in _ROPE_SCALED[kind].items():
        if parameters.get(key) not in allowed:
            raise ValueError(f"our {kind} scaling fixes rope_parameters['{key}'] at {allowed[-1]!r}; got "
                             f"{parameters.get(key)!r}")  # fmt: skip
    known = {"rope_type", "rope_theta", "factor", "original_max_position_embeddings", *_ROPE_SCALED[kind]}
    unknown = sorted(set(parameters) - known)
    if unknown:
        raise ValueError(f"our {kind} scaling does not read rope_parameters[{unknown[0]!r}]={parameters[unknown[0]]!r}")
    original = parameters.get("original_max_position_embeddings") if kind != "linear" else None
    factor = parameters.get("factor")
    if factor is None and kind == "yarn" and original:  # transformers' own default: the ratio of the two lengths
        factor = hf_config.max_position_embeddings / original
    return dict(rope_scaling=kind, rope_factor=float(factor), rope_original_len=original)


def _rope_parameters(cfg: TransformerConfig, family: str) -> dict:
    """Our config's RoPE -> transformers' rope_parameters (the default, or a scaling both compute alike)."""
    if cfg.rope_scaling == "none":
        return {"rope_type": "default", "rope_theta": cfg.rope_base}
    if cfg.rope_scaling not in _ROPE_SCALED:
        raise ValueError(f"transformers' {family} has no rope_type for rope_scaling={cfg.rope_scaling!r}; it computes "
                         f"{', '.join(_ROPE_SCALED)}")  # fmt: skip
    written = {"rope_type": cfg.rope_scaling, "rope_theta": cfg.rope_base, "factor": cfg.rope_factor}
    if cfg.rope_original_len is not None:
        written["original_max_position_embeddings"] = cfg.rope_original_len
    return written | {key: allowed[-1] for key, allowed in _ROPE_SCALED[cfg.rope_scaling].items() if allowed[-1]}


# ---- GPT-2 --------------------------------------------------------------------------------------


def gpt2_config(hf_config) -> TransformerConfig:
    """A GPT2Config -> the TransformerConfig of the same architecture."""
    return _decoder_only(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.n_embd,
        num_heads=hf_config.n_head,
        num_layers=hf_config.n_layer,
        d_ff=hf_config.n_inner or 4 * hf_config.n_embd,
        max_len=hf_config.n_positions,
        positional="learned",
        activation=_tanh_gelu(hf_config, "GPT-2"),
        eps=hf_config.layer_norm_epsilon,
        tie_embeddings=True,
    )


def _gpt2_names(num_layers: int) -> list[tuple[str, str, bool]]:
    """(our name, GPT-2's name, transposed?) for every tensor but the fused q/k/v projection."""
    names = [
        ("embed.table.weight", "transformer.wte.weight", False),
        ("pos.table.weight", "transformer.wpe.weight", False),
        ("decoder.norm.weight", "transformer.ln_f.weight", False),
        ("decoder.norm.bias", "transformer.ln_f.bias", False),
    ]
    for i in range(num_layers):
        ours, theirs = f"decoder.layers.{i}.", f"transformer.h.{i}."
        pairs = (
            ("norm1", "ln_1", False),
            ("norm3", "ln_2", False),
            ("self_attn.out_proj", "attn.c_proj", True),
            ("feed_forward.linear1", "mlp.c_fc", True),
            ("feed_forward.linear2", "mlp.c_proj", True),
        )
        for a, b, t in pairs:
            names += [(f"{ours}{a}.weight", f"{theirs}{b}.weight", t), (f"{ours}{a}.bias", f"{theirs}{b}.bias", False)]
    return names


def _gpt2_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    state = {a: (theirs[b].T if t else theirs[b]) for a, b, t in _gpt2_names(cfg.num_layers)}
    for i in range(cfg.num_layers):
        w, b = theirs[f"transformer.h.{i}.attn.c_attn.weight"], theirs[f"transformer.h.{i}.attn.c_attn.bias"]
        for name, w_part, b_part in zip("qkv", w.T.chunk(3), b.chunk(3)):  # (3d, d) -> three (d, d)
            state[f"decoder.layers.{i}.self_attn.{name}_proj.weight"] = w_part
            state[f"decoder.layers.{i}.self_attn.{name}_proj.bias"] = b_part
    state["head.weight"] = state["embed.table.weight"]  # tied
    return state


def _gpt2_save(ours: DecoderOnlyLM) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = ours.config
    hf_config = GPT2Config(
        vocab_size=cfg.vocab_size,
        n_embd=cfg.d_model,
        n_head=cfg.num_heads,
        n_layer=cfg.num_layers,
        n_inner=cfg.d_ff,
        n_positions=cfg.max_len,
        layer_norm_epsilon=cfg.eps,
        activation_function="gelu_new",
    )
    _check_architecture(ours, gpt2_config(hf_config), "GPT-2")
    hf = GPT2LMHeadModel(hf_config)
    mine = ours.state_dict()
    state = {b: (mine[a].T if t else mine[a]) for a, b, t in _gpt2_names(cfg.num_layers)}
    for i in range(cfg.num_layers):
        attn = f"decoder.layers.{i}.self_attn."
        state[f"transformer.h.{i}.attn.c_attn.weight"] = torch.cat([mine[f"{attn}{n}_proj.weight"] for n in "qkv"]).T
        state[f"transformer.h.{i}.attn.c_attn.bias"] = torch.cat([mine[f"{attn}{n}_proj.bias"] for n in "qkv"])
    state["lm_head.weight"] = state["transformer.wte.weight"]
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(".attn.bias") and not k.endswith(".attn.masked_bias")]
    if missing or unexpected:
        raise ValueError(f"GPT-2 state does not match: missing {missing}, unexpected {unexpected}")
    return hf.eval()


# ---- Llama --------------------------------------------------------------------------------------


def _llama_fields(hf_config, family: str, checks: dict) -> dict:
    """The TransformerConfig fields of a Llama-shaped config (Llama, Mixtral), after refusing what the book
    does not build: `checks` maps a name to (its value, the value we need), beside the checks all share."""
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    checks = {
        "hidden_act": (hf_config.hidden_act, "silu"),
        "head_dim": (head_dim, hf_config.hidden_size // hf_config.num_attention_heads),
        **checks,
    }
    unsupported = {k: got for k, (got, want) in checks.items() if got != want}
    if unsupported:
        raise ValueError(f"this {family} differs from what the book builds: {unsupported}")
    return dict(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size,
        num_heads=hf_config.num_attention_heads,
        num_kv_heads=hf_config.num_key_value_heads,
        num_layers=hf_config.num_hidden_layers,
        d_ff=hf_config.intermediate_size,
        max_len=hf_config.max_position_embeddings,
        positional="rope",
        rope_base=_rope_theta(hf_config, scaled=tuple(_ROPE_SCALED)),
        **_rope_scaling(hf_config),
        activation="swiglu",
        norm="rms",
        eps=hf_config.rms_norm_eps,
        bias=False,
        tie_embeddings=hf_config.tie_word_embeddings,
    )


def llama_config(hf_config) -> TransformerConfig:
    """A LlamaConfig -> the TransformerConfig of the same architecture."""
    checks = {
        "attention_bias": (hf_config.attention_bias, False),
        "mlp_bias": (getattr(hf_config, "mlp_bias", False), False),
    }
    return _decoder_only(**_llama_fields(hf_config, "Llama", checks))


def _llama_names(num_layers: int) -> list[tuple[str, str]]:
    """(our name, Llama's name) for every tensor: the same layout and shapes, other names."""
    names = [
        ("embed.table.weight", "model.embed_tokens.weight"),
        ("decoder.norm.weight", "model.norm.weight"),
        ("head.weight", "lm_head.weight"),
    ]
    for i in range(num_layers):
        ours, theirs = f"decoder.layers.{i}.", f"model.layers.{i}."
        pairs = (
            ("self_attn.q_proj", "self_attn.q_proj"),
            ("self_attn.k_proj", "self_attn.k_proj"),
            ("self_attn.v_proj", "self_attn.v_proj"),
            ("self_attn.out_proj", "self_attn.o_proj"),
            ("feed_forward.linear1", "mlp.gate_proj"),
            ("feed_forward.linear3", "mlp.up_proj"),
            ("feed_forward.linear2", "mlp.down_proj"),
            ("norm1", "input_layernorm"),
            ("norm3", "post_attention_layernorm"),
        )
        names += [(f"{ours}{a}.weight", f"{theirs}{b}.weight") for a, b in pairs]
    return names


def _llama_kwargs(cfg: TransformerConfig, family: str = "Llama") -> dict:
    """The arguments of a LlamaConfig (or a MixtralConfig) for the architecture `cfg` describes."""
    return dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_len,
        rms_norm_eps=cfg.eps,
        rope_parameters=_rope_parameters(cfg, family),
        tie_word_embeddings=cfg.tie_embeddings,
    )


def _llama_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    return _renamed(theirs, _flipped(_llama_names(cfg.num_layers)))


def _llama_save(ours: DecoderOnlyLM) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = ours.config
    hf_config = LlamaConfig(**_llama_kwargs(cfg))
    _check_architecture(ours, llama_config(hf_config), "Llama")
    hf = LlamaForCausalLM(hf_config)
    hf.load_state_dict(_renamed(ours.state_dict(), _llama_names(cfg.num_layers)))
    return hf.eval()


# ---- Qwen3: Llama with an RMSNorm on each head's query and key ----------------------------------------


def qwen3_config(hf_config) -> TransformerConfig:
    """A Qwen3Config -> the TransformerConfig of the same architecture: Llama's with QK-norm (`qk_norm`). Its
    sliding-window layers and a head width other than hidden_size // num_attention_heads are refused by name."""
    window = getattr(hf_config, "use_sliding_window", False)
    checks = {
        "attention_bias": (hf_config.attention_bias, False),
        "use_sliding_window": (window, False),
        "layer_types": (set(getattr(hf_config, "layer_types", None) or ["full_attention"]), {"full_attention"}),
    }
    return _decoder_only(**_llama_fields(hf_config, "Qwen3", checks), qk_norm=True)


def _qwen3_names(num_layers: int) -> list[tuple[str, str]]:
    norms = [(f"decoder.layers.{i}.self_attn.{n}.weight", f"model.layers.{i}.self_attn.{n}.weight")
             for i in range(num_layers) for n in ("q_norm", "k_norm")]  # fmt: skip
    return _llama_names(num_layers) + norms


def _qwen3_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    return _renamed(theirs, _flipped(_qwen3_names(cfg.num_layers)))


def _qwen3_save(ours: DecoderOnlyLM) -> nn.Module:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = ours.config
    hf_config = Qwen3Config(**_llama_kwargs(cfg, "Qwen3"), head_dim=cfg.d_k, attention_bias=False)
    _check_architecture(ours, qwen3_config(hf_config), "Qwen3")
    hf = Qwen3ForCausalLM(hf_config)
    hf.load_state_dict(_renamed(ours.state_dict(), _qwen3_names(cfg.num_layers)))
    return hf.eval()


# ---- Mixtral: Llama with routed SwiGLU experts -----------------------------------------------------


def mixtral_config(hf_config) -> TransformerConfig:
    """A MixtralConfig -> the TransformerConfig of the same architecture: Llama's, with routed SwiGLU experts."""
    window = getattr(hf_config, "sliding_window", None)
    checks = {
        "sliding_window": (window is not None and window < hf_config.max_position_embeddings, False),
        "router_jitter_noise": (getattr(hf_config, "router_jitter_noise", 0.0), 0.0),
    }
    return _decoder_only(
        **_llama_fields(hf_config, "Mixtral", checks),
        num_experts=hf_config.num_local_experts,
        experts_per_token=hf_config.num_experts_per_tok,
    )


def _mixtral_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    """Mixtral's state dict -> ours: Llama's names for attention and norms; each expert's gate, up and down
    matrices cut out of Mixtral's stacked (E, 2 d_ff, d) and (E, d, d_ff) tensors."""
    state = {a: theirs[b] for a, b in _llama_names(cfg.num_layers) if ".feed_forward." not in a}
    f = cfg.d_ff
    for i in range(cfg.num_layers):
        ours, mlp = f"decoder.layers.{i}.feed_forward.", f"model.layers.{i}.mlp."
        state[ours + "router.weight"] = theirs[mlp + "gate.weight"]  # (E, d)
        gate_up, down = theirs[mlp + "experts.gate_up_proj"], theirs[mlp + "experts.down_proj"]
        for e in range(cfg.num_experts):
            state[f"{ours}experts.{e}.linear1.weight"] = gate_up[e, :f]  # (d_ff, d): the SiLU-activated branch
            state[f"{ours}experts.{e}.linear3.weight"] = gate_up[e, f:]  # (d_ff, d): the linear branch
            state[f"{ours}experts.{e}.linear2.weight"] = down[e]  # (d, d_ff)
    return state


def _mixtral_save(ours: DecoderOnlyLM) -> nn.Module:
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = ours.config
    hf_config = MixtralConfig(
        **_llama_kwargs(cfg, "Mixtral"),
        num_local_experts=cfg.num_experts,
        num_experts_per_tok=cfg.experts_per_token,
        bos_token_id=None,
        eos_token_id=None,
    )
    _check_architecture(ours, mixtral_config(hf_config), "Mixtral")
    hf = MixtralForCausalLM(hf_config)
    mine = ours.state_dict()
    state = {b: mine[a] for a, b in _llama_names(cfg.num_layers) if ".feed_forward." not in a}
    for i in range(cfg.num_layers):
        ff, mlp = f"decoder.layers.{i}.feed_forward.", f"model.layers.{i}.mlp."
        state[mlp + "gate.weight"] = mine[ff + "router.weight"]
        gate_up = [
            torch.cat([mine[f"{ff}experts.{e}.linear1.weight"], mine[f"{ff}experts.{e}.linear3.weight"]])
            for e in range(cfg.num_experts)
        ]  # each (2 d_ff, d)
        state[mlp + "experts.gate_up_proj"] = torch.stack(gate_up)  # (E, 2 d_ff, d)
        down = [mine[f"{ff}experts.{e}.linear2.weight"] for e in range(cfg.num_experts)]  # each (d, d_ff)
        state[mlp + "experts.down_proj"] = torch.stack(down)  # (E, d, d_ff)
    hf.load_state_dict(state)
    return hf.eval()


# ---- GPT-J: interleaved partial rotary, a parallel block with one norm -----------------------------


def gptj_config(hf_config) -> TransformerConfig:
    """A GPTJConfig -> the TransformerConfig of the same architecture (interleaved, partial RoPE; parallel block)."""
    head_dim = hf_config.n_embd // hf_config.n_head
    if hf_config.rotary_dim is None:
        raise ValueError("this GPT-J has rotary_dim=None; set it (GPT-J-6B turns 64 of its 256 head dimensions)")
    return _decoder_only(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.n_embd,
        num_heads=hf_config.n_head,
        num_layers=hf_config.n_layer,
        d_ff=hf_config.n_inner or 4 * hf_config.n_embd,
        max_len=hf_config.n_positions,
        positional="rope",
        rotary_layout="interleaved",
        rotary_dim=min(hf_config.rotary_dim, head_dim),
        parallel_block=True,
        activation=_tanh_gelu(hf_config, "GPT-J"),
        eps=hf_config.layer_norm_epsilon,
        tie_embeddings=hf_config.tie_word_embeddings,
    )


def _gptj_names(num_layers: int) -> list[tuple[str, str]]:
    """(our name, GPT-J's name) for every tensor GPT-J has: the same shapes, other names."""
    names = [
        ("embed.table.weight", "transformer.wte.weight"),
        ("decoder.norm.weight", "transformer.ln_f.weight"),
        ("decoder.norm.bias", "transformer.ln_f.bias"),
        ("head.weight", "lm_head.weight"),
        ("head.bias", "lm_head.bias"),
    ]
    for i in range(num_layers):
        ours, theirs = f"decoder.layers.{i}.", f"transformer.h.{i}."
        pairs = [
            ("norm1.weight", "ln_1.weight"),
            ("norm1.bias", "ln_1.bias"),
            *((f"self_attn.{n}_proj.weight", f"attn.{n}_proj.weight") for n in "qkv"),
            ("self_attn.out_proj.weight", "attn.out_proj.weight"),
            ("feed_forward.linear1.weight", "mlp.fc_in.weight"),
            ("feed_forward.linear1.bias", "mlp.fc_in.bias"),
            ("feed_forward.linear2.weight", "mlp.fc_out.weight"),
            ("feed_forward.linear2.bias", "mlp.fc_out.bias"),
        ]
        names += [(ours + a, theirs + b) for a, b in pairs]
    return names


def _gptj_attention_biases(num_layers: int) -> list[str]:
    """Our attention biases, which GPT-J does not have: zeros when loading, refused unless zero when saving."""
    return [f"decoder.layers.{i}.self_attn.{n}_proj.bias" for i in range(num_layers) for n in ("q", "k", "v", "out")]


def _gptj_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    state = _renamed(theirs, _flipped(_gptj_names(cfg.num_layers)))
    state.update({name: torch.zeros(cfg.d_model) for name in _gptj_attention_biases(cfg.num_layers)})
    return state


def _gptj_save(ours: DecoderOnlyLM) -> nn.Module:
    from transformers import GPTJConfig, GPTJForCausalLM

    cfg = ours.config
    hf_config = GPTJConfig(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.max_len,
        n_embd=cfg.d_model,
        n_layer=cfg.num_layers,
        n_head=cfg.num_heads,
        rotary_dim=cfg.rotary_dim or cfg.d_k,
        n_inner=cfg.d_ff,
        layer_norm_epsilon=cfg.eps,
        tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=None,
        eos_token_id=None,
    )
    _check_architecture(ours, gptj_config(hf_config), "GPT-J", head_bias=True)
    mine = ours.state_dict()
    biased = [n for n in _gptj_attention_biases(cfg.num_layers) if mine[n].abs().max() > 0]
    if biased:
        raise ValueError(f"GPT-J's attention has no biases, and ours holds non-zero ones: {biased[:3]}")
    hf = GPTJForCausalLM(hf_config)
    hf.load_state_dict(_renamed(mine, _gptj_names(cfg.num_layers)))
    return hf.eval()


# ---- GPT-NeoX: rotate-half partial rotary, fused q/k/v, a parallel block with two norms --------------


def neox_config(hf_config) -> TransformerConfig:
    """A GPTNeoXConfig -> the TransformerConfig of the same architecture (Pythia's)."""
    if not hf_config.attention_bias:
        raise ValueError("this GPT-NeoX has attention_bias=False; the book's bias field covers every linear layer")
    act = hf_config.hidden_act
    activation = "gelu" if act == "gelu" else _tanh_gelu(hf_config, "GPT-NeoX (or exact GELU)")
    head_dim = hf_config.hidden_size // hf_config.num_attention_heads
    share = (getattr(hf_config, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0)
    parallel = bool(hf_config.use_parallel_residual)
    return _decoder_only(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size,
        num_heads=hf_config.num_attention_heads,
        num_layers=hf_config.num_hidden_layers,
        d_ff=hf_config.intermediate_size,
        max_len=hf_config.max_position_embeddings,
        positional="rope",
        rotary_dim=int(head_dim * share),  # the first `share` of each head turns, pairs (i, i + r/2)
        rope_base=_rope_theta(hf_config),
        parallel_block=parallel,
        shared_norm=not parallel,  # parallel: a norm for each sublayer; sequential: the usual two anyway
        activation=activation,
        eps=hf_config.layer_norm_eps,
        tie_embeddings=hf_config.tie_word_embeddings,
    )


def _neox_names(num_layers: int) -> list[tuple[str, str]]:
    """(our name, GPT-NeoX's name) for every tensor but the fused q/k/v projection."""
    names = [
        ("embed.table.weight", "gpt_neox.embed_in.weight"),
        ("decoder.norm.weight", "gpt_neox.final_layer_norm.weight"),
        ("decoder.norm.bias", "gpt_neox.final_layer_norm.bias"),
        ("head.weight", "lm_head.weight"),
    ]
    for i in range(num_layers):
        ours, theirs = f"decoder.layers.{i}.", f"gpt_neox.layers.{i}."
        pairs = (
            ("norm1", "input_layernorm"),
            ("norm3", "post_attention_layernorm"),
            ("self_attn.out_proj", "attention.dense"),
            ("feed_forward.linear1", "mlp.dense_h_to_4h"),
            ("feed_forward.linear2", "mlp.dense_4h_to_h"),
        )
        names += [(f"{ours}{a}.{p}", f"{theirs}{b}.{p}") for a, b in pairs for p in ("weight", "bias")]
    return names


def _neox_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    state = _renamed(theirs, _flipped(_neox_names(cfg.num_layers)))
    h, d_k = cfg.num_heads, cfg.d_k
    for i in range(cfg.num_layers):
        fused = f"gpt_neox.layers.{i}.attention.query_key_value."
        w = theirs[fused + "weight"].view(h, 3, d_k, cfg.d_model)  # (3d, d) -> (h, q|k|v, d_k, d): head by head
        b = theirs[fused + "bias"].view(h, 3, d_k)  # (3d,) -> (h, q|k|v, d_k)
        for j, name in enumerate("qkv"):
            ours = f"decoder.layers.{i}.self_attn.{name}_proj."
            state[ours + "weight"] = w[:, j].reshape(h * d_k, cfg.d_model)  # (h, d_k, d) -> (d, d)
            state[ours + "bias"] = b[:, j].reshape(h * d_k)  # (h, d_k) -> (d,)
    return state


def _neox_save(ours: DecoderOnlyLM) -> nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    cfg = ours.config
    hf_config = GPTNeoXConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.d_ff,
        hidden_act="gelu" if cfg.activation == "gelu" else "gelu_new",
        max_position_embeddings=cfg.max_len,
        rotary_pct=(cfg.rotary_dim or cfg.d_k) / cfg.d_k,
        rotary_emb_base=cfg.rope_base,
        layer_norm_eps=cfg.eps,
        use_parallel_residual=cfg.parallel_block,
        tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=None,
        eos_token_id=None,
    )
    _check_architecture(ours, neox_config(hf_config), "GPT-NeoX")
    mine = ours.state_dict()
    state = _renamed(mine, _neox_names(cfg.num_layers))
    h, d_k = cfg.num_heads, cfg.d_k
    for i in range(cfg.num_layers):
        attn = f"decoder.layers.{i}.self_attn."
        w = torch.stack([mine[f"{attn}{n}_proj.weight"].view(h, d_k, cfg.d_model) for n in "qkv"], 1)  # (h, 3, d_k, d)
        b = torch.stack([mine[f"{attn}{n}_proj.bias"].view(h, d_k) for n in "qkv"], 1)  # (h, 3, d_k)
        fused = f"gpt_neox.layers.{i}.attention.query_key_value."
        state[fused + "weight"] = w.reshape(3 * cfg.d_model, cfg.d_model)  # (h, 3, d_k, d) -> (3d, d)
        state[fused + "bias"] = b.reshape(3 * cfg.d_model)  # (h, 3, d_k) -> (3d,)
    hf = GPTNeoXForCausalLM(hf_config)
    hf.load_state_dict(state)
    return hf.eval()


# ---- BERT: the 2017 encoder (post-LN) with learned positions, token types and normalised embeddings --------
# (transformer_lib.bert lists every difference.) Our BertForMaskedLM and BertClassifier hold a BertModel
# called `bert`, as theirs do, so the names below are the same in both models under "bert.".


def _bert_config(hf_config) -> TransformerConfig:
    """A BertConfig -> the TransformerConfig of the same encoder."""
    if getattr(hf_config, "position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"only absolute positions are supported, got {hf_config.position_embedding_type!r}")
    if hf_config.hidden_act != "gelu":
        raise ValueError(f"only BERT's exact GELU is supported, got hidden_act={hf_config.hidden_act!r}")
    return bert_config(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size,
        num_heads=hf_config.num_attention_heads,
        num_layers=hf_config.num_hidden_layers,
        d_ff=hf_config.intermediate_size,
        max_len=hf_config.max_position_embeddings,
        eps=hf_config.layer_norm_eps,
        pad_id=hf_config.pad_token_id,  # None: no id is padding (pass attention_mask, as to theirs)
        dropout=0.0,
    )


def _bert_names(num_layers: int, head: str) -> list[tuple[str, str]]:
    """(our name, BERT's name) for every tensor; head is "mlm" (the masked-LM head) or "classifier"."""
    names = [
        ("bert.embeddings.word.table.weight", "bert.embeddings.word_embeddings.weight"),
        ("bert.embeddings.position.weight", "bert.embeddings.position_embeddings.weight"),
        ("bert.embeddings.token_type.weight", "bert.embeddings.token_type_embeddings.weight"),
    ]
    pairs = [("bert.embeddings.norm", "bert.embeddings.LayerNorm")]
    for i in range(num_layers):
        ours, theirs = f"bert.encoder.layers.{i}.", f"bert.encoder.layer.{i}."
        pairs += [
            (f"{ours}self_attn.q_proj", f"{theirs}attention.self.query"),
            (f"{ours}self_attn.k_proj", f"{theirs}attention.self.key"),
            (f"{ours}self_attn.v_proj", f"{theirs}attention.self.value"),
            (f"{ours}self_attn.out_proj", f"{theirs}attention.output.dense"),
            (f"{ours}norm1", f"{theirs}attention.output.LayerNorm"),  # post-LN: after attention's residual add
            (f"{ours}feed_forward.linear1", f"{theirs}intermediate.dense"),
            (f"{ours}feed_forward.linear2", f"{theirs}output.dense"),
            (f"{ours}norm2", f"{theirs}output.LayerNorm"),
        ]
    if head == "mlm":
        pairs += [
            ("transform", "cls.predictions.transform.dense"),
            ("transform_norm", "cls.predictions.transform.LayerNorm"),
        ]
        names += [("output_bias", "cls.predictions.bias")]
    else:
        pairs += [("bert.pooler", "bert.pooler.dense"), ("classifier", "classifier")]
    return names + [(f"{a}.{w}", f"{b}.{w}") for a, b in pairs for w in ("weight", "bias")]


def _bert_load(head: str) -> Callable[[dict[str, torch.Tensor], TransformerConfig], dict[str, torch.Tensor]]:
    return lambda theirs, cfg: _renamed(theirs, _flipped(_bert_names(cfg.num_layers, head)))


def _bert_save(head: str) -> Callable[[nn.Module], nn.Module]:
    def save(ours: nn.Module) -> nn.Module:
        import transformers

        cfg = ours.config
        hf_config = transformers.BertConfig(
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.d_model,
            num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads,
            intermediate_size=cfg.d_ff,
            hidden_act="gelu",
            max_position_embeddings=cfg.max_len,
            type_vocab_size=ours.bert.embeddings.token_type.num_embeddings,
            layer_norm_eps=cfg.eps,
            pad_token_id=cfg.pad_id,
            hidden_dropout_prob=cfg.dropout,
            attention_probs_dropout_prob=cfg.dropout,
            num_labels=ours.classifier.out_features if head == "classifier" else 2,
        )
        _check_architecture(ours, _bert_config(hf_config), "BERT", head_bias=True)  # BERT's head is not `head`
        kind = "BertForMaskedLM" if head == "mlm" else "BertForSequenceClassification"
        hf = getattr(transformers, kind)(hf_config)
        state = _renamed(ours.state_dict(), _bert_names(cfg.num_layers, head))
        if head == "mlm":  # the output layer is the token table again (tied), with the per-word bias
            state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"]
            state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
        hf.load_state_dict(state, strict=True)
        return hf.eval()

    return save


# ---- ViT: the pre-LN encoder on image patches, with a class token and learned positions -----------------------
# (transformer_lib.vit says what differs from the 2017 encoder.) Our VisionTransformer reads the class token.


def _vit_config(hf_config) -> TransformerConfig:
    """A ViTConfig -> the TransformerConfig of the same encoder."""
    if hf_config.hidden_act != "gelu":
        raise ValueError(f"only ViT's exact GELU is supported, got hidden_act={hf_config.hidden_act!r}")
    for field in ("image_size", "patch_size"):
        value = getattr(hf_config, field)
        if isinstance(value, tuple | list):
            raise ValueError(f"our ViT reads square images in square patches, one size each: got {field}={value!r}")
    if not hf_config.qkv_bias:
        raise ValueError("only ViT with biases on the query, key and value projections is supported (qkv_bias=True)")
    return vit_config(
        positional="learned",  # ViT's own table (VisionTransformer keeps it; the field only says so)
        vocab_size=1,  # no tokens: the patches come from a convolution
        d_model=hf_config.hidden_size,
        num_heads=hf_config.num_attention_heads,
        num_layers=hf_config.num_hidden_layers,
        d_ff=hf_config.intermediate_size,
        max_len=(hf_config.image_size // hf_config.patch_size) ** 2 + 1,
        eps=hf_config.layer_norm_eps,
    )


def _vit_names(num_layers: int) -> list[tuple[str, str]]:
    """(our name, ViT's name) for every tensor of ViTForImageClassification."""
    names = [("cls_token", "vit.embeddings.cls_token"), ("position", "vit.embeddings.position_embeddings")]
    pairs = [("patches.projection", "vit.embeddings.patch_embeddings.projection")]
    for i in range(num_layers):
        ours, theirs = f"encoder.layers.{i}.", f"vit.layers.{i}."
        pairs += [
            (f"{ours}self_attn.q_proj", f"{theirs}attention.q_proj"),
            (f"{ours}self_attn.k_proj", f"{theirs}attention.k_proj"),
            (f"{ours}self_attn.v_proj", f"{theirs}attention.v_proj"),
            (f"{ours}self_attn.out_proj", f"{theirs}attention.o_proj"),
            (f"{ours}norm1", f"{theirs}layernorm_before"),  # pre-LN: before attention
            (f"{ours}feed_forward.linear1", f"{theirs}mlp.fc1"),
            (f"{ours}feed_forward.linear2", f"{theirs}mlp.fc2"),
            (f"{ours}norm2", f"{theirs}layernorm_after"),  # before the feed-forward block
        ]
    pairs += [("encoder.norm", "vit.layernorm"), ("head", "classifier")]
    return names + [(f"{a}.{w}", f"{b}.{w}") for a, b in pairs for w in ("weight", "bias")]


def _vit_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    theirs = {k: v for k, v in theirs.items() if not k.startswith("vit.pooler.")}  # unused by classification
    return _renamed(theirs, _flipped(_vit_names(cfg.num_layers)))


def _vit_save(ours: nn.Module) -> nn.Module:
    import transformers

    cfg = ours.config
    if ours.pool != "cls":
        raise ValueError(f"transformers' ViT reads the class token; this model pools by {ours.pool!r}")
    hf_config = transformers.ViTConfig(
        image_size=ours.image_size,
        patch_size=ours.patch_size,
        num_channels=ours.patches.channels,
        hidden_size=cfg.d_model,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.d_ff,
        hidden_act="gelu",
        layer_norm_eps=cfg.eps,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.dropout,
        num_labels=ours.head.out_features,
    )
    # VisionTransformer keeps its own learned table whatever config.positional says
    _check_architecture(ours, _vit_config(hf_config), "ViT", head_bias=True, ignore=("positional",))
    hf = transformers.ViTForImageClassification(hf_config)
    hf.load_state_dict(_renamed(ours.state_dict(), _vit_names(cfg.num_layers)), strict=True)
    return hf.eval()


# ---- Whisper: the pre-LN encoder-decoder on log-mel frames, with a convolutional stem -----------------------
# (transformer_lib.speech says what is new.) Our SpeechTranscriber has Whisper's parts under other names; its key
# projections have no bias, as Whisper's. The encoder's sinusoids are a formula in ours and a frozen table in
# theirs: loading checks the table is the formula's, saving writes the formula's.


def _one_shape_for_both_stacks(hf_config) -> dict:
    """The checks of a Hugging Face encoder-decoder config that both stacks have one head count and one feed-forward
    width, as ours: named as both fields, since either may be the odd one."""
    return {
        "decoder_attention_heads / encoder_attention_heads": (
            (hf_config.decoder_attention_heads, hf_config.encoder_attention_heads),
            (hf_config.encoder_attention_heads,) * 2,
        ),
        "decoder_ffn_dim / encoder_ffn_dim": (
            (hf_config.decoder_ffn_dim, hf_config.encoder_ffn_dim),
            (hf_config.encoder_ffn_dim,) * 2,
        ),
    }


def _seq2seq_shape(cfg: TransformerConfig) -> dict:
    """The shape of our encoder-decoder in the fields Whisper's and BART's configs share."""
    return dict(
        d_model=cfg.d_model,
        encoder_layers=cfg.num_layers,
        decoder_layers=cfg.num_decoder_layers,
        encoder_attention_heads=cfg.num_heads,
        decoder_attention_heads=cfg.num_heads,
        encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff,
    )


def _seq2seq_layer_names(side: str, i: int, key_bias: bool = True) -> list[tuple[str, str]]:
    """(our name, theirs) for layer i of side "encoder" or "decoder" of Whisper or BART, which name their layers alike:
    self_attn, encoder_attn (cross), fc1 and fc2, and a norm per sublayer (before it in Whisper, after it in BART)."""
    ours, theirs = f"{side}.layers.{i}.", f"model.{side}.layers.{i}."
    attentions = [("self_attn", "self_attn")] + [("cross_attn", "encoder_attn")] * (side == "decoder")
    norms = ["self_attn_layer_norm"] + ["encoder_attn_layer_norm"] * (side == "decoder") + ["final_layer_norm"]
    names, pairs = [], []
    for a, b in attentions:
        if not key_bias:  # Whisper's key projections have no bias
            names.append((f"{ours}{a}.k_proj.weight", f"{theirs}{b}.k_proj.weight"))
        kinds = ("q_proj", "v_proj", "out_proj") if not key_bias else ("q_proj", "k_proj", "v_proj", "out_proj")
        pairs += [(f"{ours}{a}.{p}", f"{theirs}{b}.{p}") for p in kinds]
    pairs += [(f"{ours}norm{j}", f"{theirs}{norm}") for j, norm in enumerate(norms, 1)]
    pairs += [(f"{ours}feed_forward.linear1", f"{theirs}fc1"), (f"{ours}feed_forward.linear2", f"{theirs}fc2")]
    return names + [(f"{a}.{w}", f"{b}.{w}") for a, b in pairs for w in ("weight", "bias")]


def _whisper_config(hf_config) -> TransformerConfig:
    """A WhisperConfig -> the TransformerConfig of the same encoder-decoder; refuses by name what ours cannot build."""
    checks = {
        "activation_function": (hf_config.activation_function, "gelu"),
        **_one_shape_for_both_stacks(hf_config),
        "scale_embedding": (hf_config.scale_embedding, False),
    }
    unsupported = {k: got for k, (got, want) in checks.items() if got != want}
    if unsupported:
        raise ValueError(
            f"this Whisper differs from what the book builds (exact GELU, one head count and one feed-forward width "
            f"for both stacks, unscaled embeddings): {unsupported}"
        )
    return speech_config(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.d_model,
        num_heads=hf_config.encoder_attention_heads,
        num_layers=hf_config.encoder_layers,
        num_decoder_layers=hf_config.decoder_layers,
        d_ff=hf_config.encoder_ffn_dim,
        max_len=hf_config.max_target_positions,
        pad_id=hf_config.pad_token_id if hf_config.pad_token_id is not None else 0,
        tie_embeddings=hf_config.tie_word_embeddings,
    )


def _whisper_names(cfg: TransformerConfig) -> list[tuple[str, str]]:
    """(our name, Whisper's name) for every tensor of WhisperForConditionalGeneration but the encoder's sinusoids."""
    names = [
        ("tgt_embed.table.weight", "model.decoder.embed_tokens.weight"),
        ("tgt_pos.table.weight", "model.decoder.embed_positions.weight"),
        ("head.weight", "proj_out.weight"),  # the token table itself when tied
    ]
    pairs = [
        ("stem.conv1", "model.encoder.conv1"),
        ("stem.conv2", "model.encoder.conv2"),
        ("encoder.norm", "model.encoder.layer_norm"),
        ("decoder.norm", "model.decoder.layer_norm"),
    ]
    for side, layers in (("encoder", cfg.num_layers), ("decoder", cfg.num_decoder_layers)):
        for i in range(layers):
            names += _seq2seq_layer_names(side, i, key_bias=False)  # pre-LN: each norm before its sublayer
    return names + [(f"{a}.{w}", f"{b}.{w}") for a, b in pairs for w in ("weight", "bias")]


def _whisper_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    table = theirs["model.encoder.embed_positions.weight"]  # (max_source_positions, d_model)
    formula = whisper_positions(*table.shape)
    if not torch.allclose(table.float(), formula, atol=1e-3, rtol=0):  # float32 rounding of angles up to ~1500 rad
        off = (table.float() - formula).abs().max().item()
        raise ValueError(
            f"this Whisper's encoder positions are not its fixed sinusoids (off by up to {off:.3g}; were they "
            "trained?): ours are the formula's, so they would be lost"
        )
    return _renamed(theirs, _flipped(_whisper_names(cfg)))


def _whisper_save(ours: nn.Module) -> nn.Module:
    import transformers

    cfg = ours.config
    keyed = [n for n, m in ours.named_modules() if isinstance(m, MultiHeadAttention) and m.k_proj.bias is not None]
    if keyed:
        raise ValueError(f"Whisper's key projections have no bias; these attentions of ours have one: {keyed}")
    if ours.n_frames % 2:
        raise ValueError(
            f"Whisper takes exactly 2 * max_source_positions frames, an even number; this model takes {ours.n_frames}"
        )
    hf_config = transformers.WhisperConfig(
        vocab_size=cfg.tgt_vocab_size,
        num_mel_bins=ours.n_mels,
        **_seq2seq_shape(cfg),
        activation_function="gelu",
        max_source_positions=ours.n_frames // 2,
        max_target_positions=cfg.max_len,
        scale_embedding=False,
        tie_word_embeddings=cfg.tie_embeddings,
        dropout=cfg.dropout,
        attention_dropout=cfg.dropout,
        activation_dropout=cfg.dropout,
        pad_token_id=cfg.pad_id,
        bos_token_id=CharTokenizer.bos_id,  # the book's tokenizers' ids, for generate; no weight depends on them
        eos_token_id=CharTokenizer.eos_id,
        decoder_start_token_id=CharTokenizer.bos_id,
        begin_suppress_tokens=None,
        suppress_tokens=None,
    )
    _check_architecture(ours, _whisper_config(hf_config), "Whisper")
    hf = transformers.WhisperForConditionalGeneration(hf_config)
    state = _renamed(ours.state_dict(), _whisper_names(cfg))
    state["model.encoder.embed_positions.weight"] = ours.src_positions.clone()  # the formula's table, frozen there
    hf.load_state_dict(state, strict=True)
    return hf.eval()


# ---- BART: the post-LN encoder-decoder with one tied table and normalised embeddings ---------------------------
# (transformer_lib.bart says what is new.) One table serves both sides and the output layer; Hugging Face stores it
# four times (shared, each side's embed_tokens, lm_head), one tensor under four names.

_BART_ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}


def _bart_config(hf_config) -> TransformerConfig:
    """A BartConfig -> our config; refuses by name what ours does not build."""
    checks = {
        "activation_function": (hf_config.activation_function in _BART_ACTIVATIONS, True),
        **_one_shape_for_both_stacks(hf_config),
        "tie_word_embeddings": (hf_config.tie_word_embeddings, True),
    }
    unsupported = {k: got for k, (got, want) in checks.items() if got != want}
    if "activation_function" in unsupported:
        unsupported["activation_function"] = hf_config.activation_function
    if unsupported:
        raise ValueError(
            f"this BART differs from what the book builds (exact GELU or ReLU, one head count and one feed-forward "
            f"width for both stacks, one tied table): {unsupported}"
        )
    return bart_config(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.d_model,
        num_heads=hf_config.encoder_attention_heads,
        num_layers=hf_config.encoder_layers,
        num_decoder_layers=hf_config.decoder_layers,
        d_ff=hf_config.encoder_ffn_dim,
        max_len=hf_config.max_position_embeddings,
        pad_id=hf_config.pad_token_id,
        scale_embedding=hf_config.scale_embedding,
        activation=_BART_ACTIVATIONS[hf_config.activation_function],
        dropout=0.0,
    )


def _bart_names(cfg: TransformerConfig) -> list[tuple[str, str]]:
    """(our name, Hugging Face's name) for every tensor of BartForConditionalGeneration but the table's copies."""
    names = [("src_embed.table.weight", "model.shared.weight")]
    pairs = []
    for side, layers in (("encoder", cfg.num_layers), ("decoder", cfg.num_decoder_layers)):
        pos = "src_pos" if side == "encoder" else "tgt_pos"
        names.append((f"{pos}.table.weight", f"model.{side}.embed_positions.weight"))
        pairs.append((f"{pos}.norm", f"model.{side}.layernorm_embedding"))
        for i in range(layers):
            names += _seq2seq_layer_names(side, i)  # post-LN: each norm after its sublayer
    return names + [(f"{a}.{w}", f"{b}.{w}") for a, b in pairs for w in ("weight", "bias")]


def _bart_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    state = _renamed(theirs, _flipped(_bart_names(cfg)))
    table = state["src_embed.table.weight"]
    state |= {"tgt_embed.table.weight": table, "head.weight": table, "head.bias": theirs["final_logits_bias"][0]}
    return state


def _bart_save(ours: nn.Module) -> nn.Module:
    import transformers

    cfg = ours.config
    act = {v: k for k, v in _BART_ACTIVATIONS.items()}
    if cfg.activation not in act:
        raise ValueError(f"BART's feed-forward uses {sorted(act)}; this model uses activation={cfg.activation!r}")
    hf_config = transformers.BartConfig(
        vocab_size=cfg.vocab_size,
        **_seq2seq_shape(cfg),
        activation_function=act[cfg.activation],
        max_position_embeddings=cfg.max_len,
        scale_embedding=cfg.scale_embedding,
        pad_token_id=cfg.pad_id,
        dropout=cfg.dropout,
        attention_dropout=cfg.dropout,
        activation_dropout=cfg.dropout,
        tie_word_embeddings=True,
    )
    _check_architecture(ours, _bart_config(hf_config), "BART", head_bias=True)
    hf = transformers.BartForConditionalGeneration(hf_config)
    state = _renamed(ours.state_dict(), _bart_names(cfg))
    table = state["model.shared.weight"]
    state |= {f"model.{side}.embed_tokens.weight": table for side in ("encoder", "decoder")}
    state |= {"lm_head.weight": table, "final_logits_bias": ours.head.bias.detach()[None].clone()}
    hf.load_state_dict(state, strict=True)
    return hf.eval()


# ---- wav2vec 2.0: samples through convolutions, then the 2017 encoder, with a CTC head ---------------------------
# (transformer_lib.wav2vec2 says what is new.) The positional convolution keeps its weight norm in both, as the same
# two tensors (a length per tap and a direction). Only clips read whole: ours takes no attention_mask.


def _wav2vec2_config(hf_config) -> TransformerConfig:
    """A Wav2Vec2Config -> our config; refuses by name what ours does not build."""
    checks = {
        "hidden_act": (hf_config.hidden_act, "gelu"),
        "feat_extract_activation": (hf_config.feat_extract_activation, "gelu"),
        "add_adapter": (hf_config.add_adapter, False),
        "adapter_attn_dim": (getattr(hf_config, "adapter_attn_dim", None), None),
        "num_feat_extract_layers": (hf_config.num_feat_extract_layers, len(hf_config.conv_dim)),
    }
    unsupported = {k: got for k, (got, want) in checks.items() if got != want}
    if hf_config.feat_extract_norm not in ("group", "layer"):
        unsupported["feat_extract_norm"] = hf_config.feat_extract_norm
    if unsupported:
        raise ValueError(
            f"this wav2vec 2.0 differs from what the book builds (exact GELU, a group or layer norm in the "
            f"convolutions, no adapters): {unsupported}"
        )
    return wav2vec2_config(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size,
        num_heads=hf_config.num_attention_heads,
        num_layers=hf_config.num_hidden_layers,
        d_ff=hf_config.intermediate_size,
        eps=hf_config.layer_norm_eps,
        norm_first=hf_config.do_stable_layer_norm,
        dropout=0.0,
    )


def _wav2vec2_pretraining_config(hf_config) -> TransformerConfig:
    """As `_wav2vec2_config`, and pre-training hides frames: with apply_spec_augment=False Hugging Face's model
    ignores the frames it is told to hide, which ours never does."""
    if not hf_config.apply_spec_augment:
        raise ValueError(
            "apply_spec_augment=False: this Wav2Vec2ForPreTraining ignores the frames it is asked to hide, "
            "and ours hides them; the two would compute different losses"
        )
    return _wav2vec2_config(hf_config)


def _wav2vec2_kwargs(hf_config) -> dict:
    return dict(
        conv_dims=tuple(hf_config.conv_dim),
        kernels=tuple(hf_config.conv_kernel),
        strides=tuple(hf_config.conv_stride),
        conv_norm=hf_config.feat_extract_norm,
        conv_bias=hf_config.conv_bias,
        pos_kernel=hf_config.num_conv_pos_embeddings,
        pos_groups=hf_config.num_conv_pos_embedding_groups,
    )


def _wav2vec2_names(
    conv_layers: int, conv_bias: bool, normed: list[int], norm_first: bool, num_layers: int
) -> list[tuple[str, str]]:
    """(our name, Hugging Face's name) for every tensor of Wav2Vec2Model (under wav2vec2.) but the mask vector.
    normed: the convolutions followed by a norm (the first for "group", all for "layer")."""
    pairs = [("wav2vec2.feature_norm", "wav2vec2.feature_projection.layer_norm")]
    pairs += [("wav2vec2.projection", "wav2vec2.feature_projection.projection")]
    pairs.append(("wav2vec2.encoder.norm" if norm_first else "wav2vec2.input_norm", "wav2vec2.encoder.layer_norm"))
    ours_pos, theirs_pos = "wav2vec2.positions.conv", "wav2vec2.encoder.pos_conv_embed.conv"
    names = [(f"{ours_pos}.bias", f"{theirs_pos}.bias")]
    names += [
        (f"{ours_pos}.parametrizations.weight.original{j}", f"{theirs_pos}.parametrizations.weight.original{j}")
        for j in (0, 1)
    ]
    for i in range(conv_layers):
        ours_i, theirs_i = f"wav2vec2.features.layers.{i}", f"wav2vec2.feature_extractor.conv_layers.{i}"
        names.append((f"{ours_i}.conv.weight", f"{theirs_i}.conv.weight"))
        if conv_bias:
            names.append((f"{ours_i}.conv.bias", f"{theirs_i}.conv.bias"))
        if i in normed:
            pairs.append((f"{ours_i}.norm", f"{theirs_i}.layer_norm"))
    for i in range(num_layers):
        ours_i, theirs_i = f"wav2vec2.encoder.layers.{i}", f"wav2vec2.encoder.layers.{i}"
        pairs += [
            (f"{ours_i}.self_attn.{p}", f"{theirs_i}.attention.{p}") for p in ("q_proj", "k_proj", "v_proj", "out_proj")
        ]
        pairs += [(f"{ours_i}.norm1", f"{theirs_i}.layer_norm"), (f"{ours_i}.norm2", f"{theirs_i}.final_layer_norm")]
        pairs += [
            (f"{ours_i}.feed_forward.linear1", f"{theirs_i}.feed_forward.intermediate_dense"),
            (f"{ours_i}.feed_forward.linear2", f"{theirs_i}.feed_forward.output_dense"),
        ]
    return names + [(f"{a}.{w}", f"{b}.{w}") for a, b in pairs for w in ("weight", "bias")]


# each head's tensors: (ours, theirs) pairs of weight-and-bias modules, and single tensors
_WAV2VEC2_HEADS = {
    "ctc": ([("head", "lm_head")], []),
    "pretraining": (
        [
            ("quantizer.scores", "quantizer.weight_proj"),
            ("project_context", "project_hid"),
            ("project_codes", "project_q"),
        ],
        [],
    ),
}


def _wav2vec2_head_names(head: str) -> list[tuple[str, str]]:
    pairs, names = _WAV2VEC2_HEADS[head]
    return names + [(f"{a}.{w}", f"{b}.{w}") for a, b in pairs for w in ("weight", "bias")]


def _wav2vec2_ours_names(ours: nn.Module, head: str) -> list[tuple[str, str]]:
    m = ours.wav2vec2
    normed = [i for i, layer in enumerate(m.features.layers) if hasattr(layer, "norm")]
    body = _wav2vec2_names(len(m.features.layers), m.conv_bias, normed, ours.config.norm_first, ours.config.num_layers)
    return body + _wav2vec2_head_names(head)


def _wav2vec2_load(head: str) -> Callable[[dict[str, torch.Tensor], TransformerConfig], dict[str, torch.Tensor]]:
    def load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
        conv = "wav2vec2.feature_extractor.conv_layers"
        layers = len({k.split(".")[3] for k in theirs if k.startswith(conv + ".")})
        normed = [i for i in range(layers) if f"{conv}.{i}.layer_norm.weight" in theirs]
        bias = f"{conv}.0.conv.bias" in theirs
        names = _wav2vec2_names(layers, bias, normed, cfg.norm_first, cfg.num_layers) + _wav2vec2_head_names(head)
        state = _renamed(theirs, _flipped(names))
        if "wav2vec2.masked_spec_embed" in theirs:  # absent where their config turns masking off
            state["wav2vec2.mask_embedding"] = theirs["wav2vec2.masked_spec_embed"]
        elif head == "pretraining":  # (the CTC model never reads it: ours keeps its own, unused)
            raise ValueError(
                "this model has no mask vector (mask_time_prob and mask_feature_prob are 0), so it cannot hide "
                "frames as pre-training does; ours would hide them with a vector of its own"
            )
        if head == "pretraining":  # (1, G V, code_dim / G) in theirs, (G, V, code_dim / G) in ours
            codebooks = theirs["quantizer.codevectors"]
            state["quantizer.codebooks"] = codebooks.view(_codebook_groups(theirs), -1, codebooks.shape[-1])
        return state

    return load


def _codebook_groups(theirs: dict[str, torch.Tensor]) -> int:
    """The number of codebooks, G, read off a Wav2Vec2ForPreTraining state: weight_proj has G V rows, the
    codevectors G V entries of code_dim / G, and project_q reads code_dim = G * (code_dim / G)."""
    return theirs["project_q.weight"].shape[1] // theirs["quantizer.codevectors"].shape[-1]


def _wav2vec2_save(head: str) -> Callable[[nn.Module], nn.Module]:
    def save(ours: nn.Module) -> nn.Module:
        import transformers

        cfg, m = ours.config, ours.wav2vec2
        fields = dict(
            hidden_size=cfg.d_model,
            num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads,
            intermediate_size=cfg.d_ff,
            hidden_act="gelu",
            layer_norm_eps=cfg.eps,
            feat_extract_norm=m.conv_norm,
            feat_extract_activation="gelu",
            conv_dim=list(m.conv_dims),
            conv_kernel=list(m.kernels),
            conv_stride=list(m.strides),
            conv_bias=m.conv_bias,
            num_conv_pos_embeddings=m.pos_kernel,
            num_conv_pos_embedding_groups=m.pos_groups,
            do_stable_layer_norm=cfg.norm_first,
            hidden_dropout=cfg.dropout,
            attention_dropout=cfg.dropout,
            activation_dropout=cfg.dropout,
            feat_proj_dropout=cfg.dropout,
            final_dropout=cfg.dropout,
            layerdrop=0.0,  # ours runs every layer in training too
            feat_quantizer_dropout=0.0,
        )
        if head == "ctc":
            fields["vocab_size"] = cfg.vocab_size
        else:
            q = ours.quantizer
            fields |= dict(
                num_codevector_groups=q.groups,
                num_codevectors_per_group=q.entries,
                codevector_dim=q.codebooks.shape[-1] * q.groups,
                proj_codevector_dim=ours.project_codes.out_features,
                contrastive_logits_temperature=ours.temperature,
                diversity_loss_weight=ours.diversity_weight,
            )
        hf_config = transformers.Wav2Vec2Config(**fields)
        _check_architecture(ours, _wav2vec2_config(hf_config), "wav2vec 2.0", head_bias=True, ignore=_W2V_IGNORED[head])
        hf = getattr(transformers, "Wav2Vec2ForCTC" if head == "ctc" else "Wav2Vec2ForPreTraining")(hf_config)
        state = _renamed(ours.state_dict(), _wav2vec2_ours_names(ours, head))
        state["wav2vec2.masked_spec_embed"] = ours.wav2vec2.mask_embedding.detach().clone()
        if head == "pretraining":
            state["quantizer.codevectors"] = ours.quantizer.codebooks.detach().reshape(
                1, -1, ours.quantizer.codebooks.shape[-1]
            )
        hf.load_state_dict(state, strict=True)
        if head == "pretraining":
            hf.quantizer.temperature = ours.quantizer.tau
        return hf.eval()

    return save


_W2V_IGNORED = {
    "ctc": (),
    "pretraining": ("vocab_size", "tgt_vocab_size"),
}  # pre-training has no CTC head: its size is not read


def _wav2vec2_temperature(ours: nn.Module, theirs: nn.Module) -> None:
    """The Gumbel-softmax temperature, which training anneals: an attribute of the quantizer, not a config field."""
    ours.quantizer.tau = float(theirs.quantizer.temperature)


def _wav2vec2_pretraining_build(cfg: TransformerConfig, hf_config) -> Wav2Vec2ForPreTraining:
    return Wav2Vec2ForPreTraining(
        cfg,
        groups=hf_config.num_codevector_groups,
        entries=hf_config.num_codevectors_per_group,
        code_dim=hf_config.codevector_dim,
        proj_dim=hf_config.proj_codevector_dim,
        temperature=hf_config.contrastive_logits_temperature,
        diversity_weight=hf_config.diversity_loss_weight,
        **_wav2vec2_kwargs(hf_config),
    )


_WAV2VEC2_NO_EFFECT = (
    ("pad_token_id", "CTC's blank for the loss; the logits never read it"),
    ("ctc_loss_reduction", "how the CTC loss is reduced, not the logits"),
    ("ctc_zero_infinity", "how the CTC loss treats impossible targets, not the logits"),
    ("layerdrop", "layers skipped at random in training only"),
    ("feat_quantizer_dropout", "dropout of pre-training's quantizer input (off at inference)"),
    ("final_dropout", "dropout before the CTC head (off at inference)"),
    ("feat_proj_dropout", "dropout (off at inference)"),
    ("num_codevectors_per_group", "pre-training's quantizer, which Wav2Vec2ForCTC does not build"),
    ("num_codevector_groups", "pre-training's quantizer, which Wav2Vec2ForCTC does not build"),
    ("codevector_dim", "pre-training's quantizer, which Wav2Vec2ForCTC does not build"),
    ("proj_codevector_dim", "pre-training's heads, which Wav2Vec2ForCTC does not build"),
    ("contrastive_logits_temperature", "pre-training's loss"),
    ("num_negatives", "how many distractors a caller draws; the forward pass takes the ones it is given"),
    ("diversity_loss_weight", "pre-training's loss"),
    ("tdnn_dim", "the x-vector head only"),
    ("tdnn_kernel", "the x-vector head only"),
    ("tdnn_dilation", "the x-vector head only"),
    ("xvector_output_dim", "the x-vector head only"),
    ("output_hidden_size", "the adapter's width (no adapter here: add_adapter is refused)"),
    ("adapter_kernel_size", "the adapter only (refused)"),
    ("adapter_stride", "the adapter only (refused)"),
    ("num_adapter_layers", "the adapter only (refused)"),
)
# the loss's settings that Wav2Vec2ForPreTraining carries (the CTC model has no use for them)
_PRETRAINING_CARRIED = {
    "num_codevectors_per_group",
    "num_codevector_groups",
    "codevector_dim",
    "proj_codevector_dim",
    "contrastive_logits_temperature",
    "diversity_loss_weight",
}


# ---- the registry and the two directions ---------------------------------------------------------

# to_hf asks in this order: the interleaved or one-norm parallel model is GPT-J's, a rotary LayerNorm
# model GPT-NeoX's, a routed one Mixtral's, another rotary one Llama's, the rest GPT-2's.
_register(
    Family(
        "GPT-J",
        "GPTJForCausalLM",
        gptj_config,
        _gptj_load,
        _gptj_save,
        lambda c: c.rotary_layout == "interleaved" or (c.parallel_block and c.shared_norm),
    )
)
_register(
    Family(
        "GPT-NeoX",
        "GPTNeoXForCausalLM",
        neox_config,
        _neox_load,
        _neox_save,
        lambda c: c.positional == "rope" and c.norm == "layer" and not c.num_experts,
    )
)
_register(
    Family("Mixtral", "MixtralForCausalLM", mixtral_config, _mixtral_load, _mixtral_save, lambda c: c.num_experts > 0)
)
_register(Family("Qwen3", "Qwen3ForCausalLM", qwen3_config, _qwen3_load, _qwen3_save, lambda c: c.qk_norm))
_register(Family("Llama", "LlamaForCausalLM", llama_config, _llama_load, _llama_save, lambda c: c.positional == "rope"))
_register(Family("GPT-2", "GPT2LMHeadModel", gpt2_config, _gpt2_load, _gpt2_save, lambda c: True))
_register(
    Family(
        "BERT (masked LM)",
        "BertForMaskedLM",
        _bert_config,
        _bert_load("mlm"),
        _bert_save("mlm"),
        lambda c: True,
        ours=BertForMaskedLM,
        build=lambda cfg, hf_config: BertForMaskedLM(cfg, token_types=hf_config.type_vocab_size),
        no_effect=(),
    )
)
_register(
    Family(
        "BERT (classifier)",
        "BertForSequenceClassification",
        _bert_config,
        _bert_load("classifier"),
        _bert_save("classifier"),
        lambda c: True,
        ours=BertClassifier,
        build=lambda cfg, hf_config: BertClassifier(cfg, hf_config.num_labels, token_types=hf_config.type_vocab_size),
        no_effect=(),
    )
)

_register(
    Family(
        "ViT",
        "ViTForImageClassification",
        _vit_config,
        _vit_load,
        _vit_save,
        lambda c: True,
        ours=VisionTransformer,
        no_effect=(),
        build=lambda cfg, hf: VisionTransformer(
            cfg, image_size=hf.image_size, patch_size=hf.patch_size, num_classes=hf.num_labels, channels=hf.num_channels
        ),
    )
)
_register(
    Family(
        "Whisper",
        "WhisperForConditionalGeneration",
        _whisper_config,
        _whisper_load,
        _whisper_save,
        lambda c: True,
        ours=SpeechTranscriber,
        no_effect=(),
        build=lambda cfg, hf: SpeechTranscriber(cfg, n_mels=hf.num_mel_bins, n_frames=2 * hf.max_source_positions),
    )
)
_register(
    Family(
        "BART",
        "BartForConditionalGeneration",
        _bart_config,
        _bart_load,
        _bart_save,
        lambda c: True,
        ours=BartForConditionalGeneration,
        no_effect=(),
        build=lambda cfg, hf: BartForConditionalGeneration(cfg),
    )
)
_register(
    Family(
        "wav2vec 2.0 (CTC)",
        "Wav2Vec2ForCTC",
        _wav2vec2_config,
        _wav2vec2_load("ctc"),
        _wav2vec2_save("ctc"),
        lambda c: True,
        ours=Wav2Vec2ForCTC,
        no_effect=_WAV2VEC2_NO_EFFECT,
        build=lambda cfg, hf: Wav2Vec2ForCTC(cfg, **_wav2vec2_kwargs(hf)),
    )
)
_register(
    Family(
        "wav2vec 2.0 (pre-training)",
        "Wav2Vec2ForPreTraining",
        _wav2vec2_pretraining_config,
        _wav2vec2_load("pretraining"),
        _wav2vec2_save("pretraining"),
        lambda c: True,
        ours=Wav2Vec2ForPreTraining,
        no_effect=tuple((field, why) for field, why in _WAV2VEC2_NO_EFFECT if field not in _PRETRAINING_CARRIED)
        + (("vocab_size", "the CTC head's size; pre-training has no CTC head"),),
        build=_wav2vec2_pretraining_build,
        finish=_wav2vec2_temperature,
    )
)


def from_hf(hf_model: nn.Module) -> nn.Module:
    """A Hugging Face model of a registered family (`FAMILIES`) -> ours with its weights, in eval mode, on the CPU:
    a DecoderOnlyLM for the causal LMs, a bert.BertForMaskedLM or bert.BertClassifier for BERT, a
    vit.VisionTransformer for ViT, a speech.SpeechTranscriber for Whisper, a bart.BartForConditionalGeneration
    for BART, a wav2vec2.Wav2Vec2ForCTC for wav2vec 2.0, a clip.CLIPModel for CLIP. Every field of the model's config is
    carried or refused by name: the conversion is written back with to_hf and the two configs compared."""
    family = FAMILIES.get(type(hf_model).__name__)
    if family is None:
        names = ", ".join(FAMILIES)
        raise TypeError(f"from_hf takes one of {names}; got {type(hf_model).__name__}")
    try:
        cfg = family.config(hf_model.config)
        state = family.load(hf_model.state_dict(), cfg)
        ours = family.build(cfg, hf_model.config)
    except ValueError as error:  # a rule of our config's: say which of their fields broke it
        raise _named_as_theirs(error, hf_model.config, family.name) from error
    if isinstance(ours, DecoderOnlyLM):
        state.setdefault("head.bias", torch.zeros(cfg.vocab_size))  # most families' output layers have no bias
    ours.load_state_dict(state)
    if family.finish is not None:
        family.finish(ours, hf_model)
    _refuse_what_is_not_carried(hf_model.config, family.save(ours).config, family)
    return ours.eval()


def to_hf(ours: nn.Module) -> nn.Module:
    """Our model -> the Hugging Face model of the first family that claims it (`FAMILIES`): its class, then its
    config."""
    kinds = tuple(dict.fromkeys(f.ours for f in FAMILIES.values()))
    if not isinstance(ours, kinds):
        raise TypeError(f"to_hf takes one of {', '.join(k.__name__ for k in kinds)}, got {type(ours).__name__}")
    family = next(f for f in FAMILIES.values() if isinstance(ours, f.ours) and f.claims(ours.config))
    return family.save(ours)


def to_hf_tokenizer(tok: CharTokenizer):
    """The book's character tokenizer as a Hugging Face `PreTrainedTokenizerFast` with the same ids, so that tools
    written for Hugging Face models (EleutherAI's lm-evaluation-harness) read an exported model's text as ours does.

    Every character is one token (a word-level vocabulary over single characters, after a split into characters);
    the four specials keep their ids and are recognised in text; encoding with special tokens puts <bos> first, as
    `tok.encode(text, bos=True)` does; decoding joins the characters with nothing between them. Padding is <pad>.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if type(tok) is not CharTokenizer:
        raise TypeError(f"to_hf_tokenizer takes a CharTokenizer, got {type(tok).__name__}")
    pad, bos, eos, unk = (tok.itos[i] for i in (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id))
    inner = Tokenizer(models.WordLevel(vocab=dict(tok.stoi), unk_token=unk))
    inner.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # every character its own token
    inner.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.bos_id)])
    inner.decoder = decoders.Fuse()  # characters joined as they are, no spaces between
    theirs = PreTrainedTokenizerFast(
        tokenizer_object=inner,
        bos_token=bos,
        eos_token=eos,
        unk_token=unk,
        pad_token=pad,
        clean_up_tokenization_spaces=False,
    )
    for text in ("".join(tok.itos[4:]), tok.itos[-1] * 3):  # the whole alphabet, and a repeated character
        if theirs.encode(text, add_special_tokens=False) != tok.encode(text):
            raise ValueError(f"the Hugging Face tokenizer splits {text!r} differently from ours")
    return theirs


# ---- CLIP: two pre-LN towers, causal text and ViT-like images, joined by cosine similarity --------------------------
# (transformer_lib.clip says what differs from the book's other encoders.) Our CLIPModel's config is its text tower's;
# the vision tower's and the rest come from CLIPConfig when the model is built. The two towers' configs are compared
# field by field after loading (_clip_finish): the top-level comparison sees each as one dict.

_CLIP_TOWER_NO_EFFECT = {
    "bos_token_id": "the start-of-text id: the forward pass reads only the end-of-text position",
    "pad_token_id": "the padding id: padding comes after the end-of-text token, which a causal text tower reads",
    "initializer_range": "how fresh weights are drawn",
    "initializer_factor": "how fresh weights are drawn",
    "projection_dim": "a copy of CLIPConfig's own, which is carried",
}


def _clip_tower(hf_tower) -> TransformerConfig:
    """A CLIPTextConfig or CLIPVisionConfig -> the TransformerConfig of its encoder; a refusal names the field."""
    from .clip import clip_config

    is_text = hasattr(hf_tower, "vocab_size")
    side = "text_config" if is_text else "vision_config"
    if hf_tower.hidden_act != "quick_gelu":
        raise ValueError(f"only CLIP's QuickGELU is supported, got {side}.hidden_act={hf_tower.hidden_act!r}")
    for field in () if is_text else ("image_size", "patch_size"):
        if not isinstance(getattr(hf_tower, field), int):
            raise ValueError(f"our CLIP reads square images in square patches: got {side}.{field}="
                             f"{getattr(hf_tower, field)!r}")  # fmt: skip
    return clip_config(
        vocab_size=hf_tower.vocab_size if is_text else 1,
        d_model=hf_tower.hidden_size,
        num_heads=hf_tower.num_attention_heads,
        num_layers=hf_tower.num_hidden_layers,
        d_ff=hf_tower.intermediate_size,
        max_len=hf_tower.max_position_embeddings if is_text else (hf_tower.image_size // hf_tower.patch_size) ** 2 + 1,
        eps=hf_tower.layer_norm_eps,
        dropout=hf_tower.attention_dropout,  # theirs drops attention weights only, ours more: the same in eval mode
    )


def _clip_config(hf_config) -> TransformerConfig:
    return _clip_tower(hf_config.text_config)


def _clip_build(cfg: TransformerConfig, hf_config) -> nn.Module:
    from .clip import CLIPModel

    vision = hf_config.vision_config
    eos = hf_config.text_config.eos_token_id
    return CLIPModel(
        cfg,
        _clip_tower(vision),
        image_size=vision.image_size,
        patch_size=vision.patch_size,
        channels=vision.num_channels,
        projection_dim=hf_config.projection_dim,
        eos_id=None if eos == 2 else eos,  # 2: transformers' older configs, read at the largest id (its own rule)
        logit_scale=hf_config.logit_scale_init_value,
    )


def _clip_layer_names(ours: str, theirs: str, num_layers: int) -> list[tuple[str, str]]:
    pairs = []
    for i in range(num_layers):
        a, b = f"{ours}.encoder.layers.{i}.", f"{theirs}.encoder.layers.{i}."
        pairs += [
            (f"{a}self_attn.q_proj", f"{b}self_attn.q_proj"),
            (f"{a}self_attn.k_proj", f"{b}self_attn.k_proj"),
            (f"{a}self_attn.v_proj", f"{b}self_attn.v_proj"),
            (f"{a}self_attn.out_proj", f"{b}self_attn.out_proj"),
            (f"{a}norm1", f"{b}layer_norm1"),
            (f"{a}feed_forward.linear1", f"{b}mlp.fc1"),
            (f"{a}feed_forward.linear2", f"{b}mlp.fc2"),
            (f"{a}norm2", f"{b}layer_norm2"),
        ]
    return [(f"{a}.{w}", f"{b}.{w}") for a, b in pairs for w in ("weight", "bias")]


def _clip_names(text_layers: int, vision_layers: int) -> list[tuple[str, str]]:
    """(our name, transformers' name) for every tensor of CLIPModel."""
    names = [
        ("text.embed.weight", "text_model.embeddings.token_embedding.weight"),
        ("text.position.weight", "text_model.embeddings.position_embedding.weight"),
        ("text.encoder.norm.weight", "text_model.final_layer_norm.weight"),
        ("text.encoder.norm.bias", "text_model.final_layer_norm.bias"),
        ("image.cls_token", "vision_model.embeddings.class_embedding"),
        ("image.patches.projection.weight", "vision_model.embeddings.patch_embedding.weight"),
        ("image.position.weight", "vision_model.embeddings.position_embedding.weight"),
        ("text_projection.weight", "text_projection.weight"),
        ("image_projection.weight", "visual_projection.weight"),
        ("logit_scale", "logit_scale"),
    ]
    for norm, theirs in (("pre_norm", "pre_layrnorm"), ("post_norm", "post_layernorm")):
        names += [(f"image.{norm}.{w}", f"vision_model.{theirs}.{w}") for w in ("weight", "bias")]
    return (
        names
        + _clip_layer_names("text", "text_model", text_layers)
        + _clip_layer_names("image", "vision_model", vision_layers)
    )


def _clip_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    vision_layers = 1 + max(int(k.split(".")[3]) for k in theirs if k.startswith("vision_model.encoder.layers."))
    return _renamed(theirs, _flipped(_clip_names(cfg.num_layers, vision_layers)))


def _clip_save(ours: nn.Module) -> nn.Module:
    import transformers

    text, vision = ours.text.config, ours.image.config
    tower = dict(hidden_act="quick_gelu")

    def shape(cfg: TransformerConfig) -> dict:
        return (
            dict(
                hidden_size=cfg.d_model,
                num_attention_heads=cfg.num_heads,
                num_hidden_layers=cfg.num_layers,
                intermediate_size=cfg.d_ff,
                layer_norm_eps=cfg.eps,
                attention_dropout=cfg.dropout,
                projection_dim=ours.text_projection.out_features,
            )
            | tower
        )

    for cfg, side in ((text, "text"), (vision, "image")):
        if (cfg.norm_first, cfg.activation, cfg.bias, cfg.norm) != (True, "quick_gelu", True, "layer"):
            raise ValueError(f"transformers' CLIP has pre-LN layers with biases, LayerNorm and QuickGELU; our {side} "
                             f"tower has norm_first={cfg.norm_first}, activation={cfg.activation!r}, "
                             f"bias={cfg.bias}, norm={cfg.norm!r}")  # fmt: skip
        if cfg.num_kv_heads != cfg.num_heads:
            raise ValueError(f"transformers' CLIP has one key and value per head; our {side} tower shares them")
    eos = 2 if ours.text.eos_id is None else ours.text.eos_id  # transformers reads the largest id when it is 2
    if ours.text.eos_id == 2:
        raise ValueError("transformers' CLIP reads eos_token_id=2 as 'the largest id'; give the end of text another id")
    hf_config = transformers.CLIPConfig(
        text_config=shape(text)
        | dict(vocab_size=text.vocab_size, max_position_embeddings=text.max_len, eos_token_id=eos)
        | dict(bos_token_id=None, pad_token_id=None),  # no effect on the forward pass (_CLIP_TOWER_NO_EFFECT)
        vision_config=shape(vision)
        | dict(
            image_size=ours.image.image_size,
            patch_size=ours.image.patch_size,
            num_channels=ours.image.patches.channels,
        ),
        projection_dim=ours.text_projection.out_features,
        logit_scale_init_value=float(ours.logit_scale.detach()),
    )
    hf = transformers.CLIPModel(hf_config)
    state = _renamed(ours.state_dict(), _clip_names(text.num_layers, vision.num_layers))
    hf.load_state_dict(state, strict=True)
    return hf.eval()


def _clip_finish(ours: nn.Module, hf_model: nn.Module) -> None:
    """Each tower's config, field by field: what ours would write back must be what was read."""
    written = _clip_save(ours).config
    for side in ("text_config", "vision_config"):
        theirs, back = getattr(hf_model.config, side).to_dict(), getattr(written, side).to_dict()
        skip = _NO_EFFECT.keys() | _CLIP_TOWER_NO_EFFECT.keys()
        differ = {k: (theirs.get(k), back.get(k)) for k in theirs.keys() | back.keys()
                  if k not in skip and theirs.get(k) != back.get(k)}  # fmt: skip
        if differ:
            fields = "; ".join(f"{side}.{k}={a!r} (ours would compute {b!r})" for k, (a, b) in sorted(differ.items()))
            raise ValueError(f"from_hf cannot carry every field of this CLIP config: {fields}")


def _clip_registration() -> None:
    from .clip import CLIPModel

    _register(
        Family(
            "CLIP",
            "CLIPModel",
            _clip_config,
            _clip_load,
            _clip_save,
            lambda c: True,
            ours=CLIPModel,
            build=_clip_build,
            no_effect=(
                ("text_config", "compared field by field after loading (_clip_finish)"),
                ("vision_config", "compared field by field after loading (_clip_finish)"),
                ("logit_scale_init_value", "the starting temperature: the loaded logit_scale is the model's"),
                ("initializer_factor", "how fresh weights are drawn"),
            ),
            finish=_clip_finish,
        )
    )


_clip_registration()


# ---- DeepSeek-V3: multi-head latent attention, its dense layers ---------------------------------------------------
# (transformer_lib.latent says what MLA is.) DeepSeek-V3's first `first_k_dense_replace` layers have dense SwiGLU
# feed-forward blocks and the rest a mixture of routed experts beside a shared one; from_hf takes the configs whose
# every layer is dense, which our latent.LatentLM builds. Its rotary part pairs dimensions 2i and 2i + 1
# (`rope_interleave`); ours pairs i with i + r/2, so the rotary rows of the query and latent projections are reordered
# on the way in (_deepseek_finish) and back on the way out: the scores are dot products of vectors reordered alike.

_DEEPSEEK_EXPERTS = ("n_routed_experts", "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size",
                     "routed_scaling_factor", "n_group", "topk_group", "norm_topk_prob")  # fmt: skip


def _deepseek_config(hf_config) -> TransformerConfig:
    """A DeepseekV3Config -> the TransformerConfig of a LatentLM (the latent's shape comes from _deepseek_build)."""
    layers, heads, dense = hf_config.num_hidden_layers, hf_config.num_attention_heads, hf_config.first_k_dense_replace
    if hf_config.hidden_act != "silu":
        raise ValueError(f"DeepSeek-V3's feed-forward blocks are SwiGLU: only hidden_act='silu', got "
                         f"{hf_config.hidden_act!r}")  # fmt: skip
    if hf_config.num_key_value_heads != heads:
        raise ValueError(f"MLA makes a key and a value for every head: num_key_value_heads="
                         f"{hf_config.num_key_value_heads} must equal num_attention_heads={heads}")  # fmt: skip
    if (dense or 0) < layers:
        raise ValueError(f"the book builds DeepSeek-V3's dense layers only: first_k_dense_replace={dense} leaves "
                         f"layers with experts among num_hidden_layers={layers}")  # fmt: skip
    return TransformerConfig(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size,
        num_heads=hf_config.num_attention_heads,
        num_layers=layers,
        d_ff=hf_config.intermediate_size,
        max_len=hf_config.max_position_embeddings,
        dropout=0.0,
        norm_first=True,
        final_norm=True,
        scale_embedding=False,
        positional="rope",
        rope_base=_rope_theta(hf_config),
        activation="swiglu",
        norm="rms",
        eps=hf_config.rms_norm_eps,
        bias=hf_config.attention_bias,
        tie_embeddings=hf_config.tie_word_embeddings,
    )


def _deepseek_build(cfg: TransformerConfig, hf_config) -> nn.Module:
    from .latent import LatentLM

    shape = dict(kv_rank=hf_config.kv_lora_rank, nope_dim=hf_config.qk_nope_head_dim)
    shape |= dict(rope_dim=hf_config.qk_rope_head_dim, v_dim=hf_config.v_head_dim, q_rank=hf_config.q_lora_rank)
    return LatentLM(cfg, **shape)


def _deepseek_names(num_layers: int, low_rank_query: bool, bias: bool) -> list[tuple[str, str]]:
    """(our name, DeepSeek-V3's name) for every tensor of a LatentLM."""
    names = [
        ("embed.table.weight", "model.embed_tokens.weight"),
        ("norm.weight", "model.norm.weight"),
        ("head.weight", "lm_head.weight"),
    ]
    query = (
        (("q_down", "q_a_proj"), ("q_norm", "q_a_layernorm"), ("q_up", "q_b_proj"))
        if low_rank_query
        else (("q_proj", "q_proj"),)
    )
    for i in range(num_layers):
        ours, theirs = f"layers.{i}.", f"model.layers.{i}."
        attention = (*query, ("kv_down", "kv_a_proj_with_mqa"), ("kv_norm", "kv_a_layernorm"),
                     ("kv_up", "kv_b_proj"), ("out_proj", "o_proj"))  # fmt: skip
        pairs = [(f"attn.{a}", f"self_attn.{b}") for a, b in attention] + [
            ("feed_forward.linear1", "mlp.gate_proj"),
            ("feed_forward.linear3", "mlp.up_proj"),
            ("feed_forward.linear2", "mlp.down_proj"),
            ("attn_norm", "input_layernorm"),
            ("ff_norm", "post_attention_layernorm"),
        ]
        names += [(f"{ours}{a}.weight", f"{theirs}{b}.weight") for a, b in pairs]
        if bias:  # attention_bias: the down projections and the output projection have biases
            with_bias = ("q_down", "q_a_proj"), ("kv_down", "kv_a_proj_with_mqa"), ("out_proj", "o_proj")
            names += [(f"{ours}attn.{a}.bias", f"{theirs}self_attn.{b}.bias") for a, b in with_bias
                      if low_rank_query or a != "q_down"]  # fmt: skip
    return names


def _deepseek_load(theirs: dict[str, torch.Tensor], cfg: TransformerConfig) -> dict[str, torch.Tensor]:
    low_rank = "model.layers.0.self_attn.q_a_proj.weight" in theirs
    return _renamed(theirs, _flipped(_deepseek_names(cfg.num_layers, low_rank, cfg.bias)))


def _rotary_rows(ours: nn.Module, to: str) -> None:
    """Reorder, in place, the rotary rows of every layer's query and latent projections into layout `to`."""
    from .positional import rotary_permutation

    shape = ours.latent
    nope, rope, h = shape["nope_dim"], shape["rope_dim"], ours.config.num_heads
    perm = rotary_permutation(rope, to=to)  # (rope,)
    head = torch.cat([torch.arange(nope), nope + perm])  # one head's query rows: the rotary part reordered
    query_rows = torch.cat([j * (nope + rope) + head for j in range(h)])  # (h * (nope + rope),)
    latent_rows = torch.cat([torch.arange(shape["kv_rank"]), shape["kv_rank"] + perm])  # (kv_rank + rope,)
    with torch.no_grad():
        for layer in ours.layers:
            attn = layer.attn
            query = attn.q_proj if attn.q_proj is not None else attn.q_up
            query.weight.copy_(query.weight[query_rows])
            attn.kv_down.weight.copy_(attn.kv_down.weight[latent_rows])
            if attn.kv_down.bias is not None:
                attn.kv_down.bias.copy_(attn.kv_down.bias[latent_rows])


def _deepseek_finish(ours: nn.Module, hf_model: nn.Module) -> None:
    if hf_model.config.rope_interleave:
        _rotary_rows(ours, "half")


def _deepseek_save(ours: nn.Module) -> nn.Module:
    import copy

    import transformers

    cfg, shape = ours.config, ours.latent
    wanted = {"norm": "rms", "activation": "swiglu", "norm_first": True, "final_norm": True}
    differ = {k: getattr(cfg, k) for k, v in wanted.items() if getattr(cfg, k) != v}
    if differ:
        raise ValueError(f"DeepSeek-V3's layers are pre-norm with RMSNorm and SwiGLU; this config has {differ}")
    hf_config = transformers.DeepseekV3Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        first_k_dense_replace=cfg.num_layers,  # every layer dense
        kv_lora_rank=shape["kv_rank"],
        q_lora_rank=shape["q_rank"],
        qk_nope_head_dim=shape["nope_dim"],
        qk_rope_head_dim=shape["rope_dim"],
        v_head_dim=shape["v_dim"],
        max_position_embeddings=cfg.max_len,
        rms_norm_eps=cfg.eps,
        rope_parameters={"rope_theta": cfg.rope_base, "rope_type": "default"},
        rope_interleave=True,
        attention_bias=cfg.bias,
        tie_word_embeddings=cfg.tie_embeddings,
    )
    interleaved = copy.deepcopy(ours)
    _rotary_rows(interleaved, "interleaved")
    hf = transformers.DeepseekV3ForCausalLM(hf_config)
    names = _deepseek_names(cfg.num_layers, shape["q_rank"] is not None, cfg.bias)
    hf.load_state_dict(_renamed(interleaved.state_dict(), names))
    return hf.eval()


def _deepseek_registration() -> None:
    from .latent import LatentLM

    no_dense = "no layer has experts: from_hf takes only configs whose every layer is dense"
    _register(
        Family(
            "DeepSeek-V3",
            "DeepseekV3ForCausalLM",
            _deepseek_config,
            _deepseek_load,
            _deepseek_save,
            lambda c: True,
            ours=LatentLM,
            build=_deepseek_build,
            no_effect=(
                ("pad_token_id", "a causal LM's forward pass never reads it (its padding is attention_mask's)"),
                ("rope_interleave", "the order of the rotary rows, which from_hf and to_hf reorder"),
                ("first_k_dense_replace", "every layer is dense at any value from num_hidden_layers up (checked)"),
                ("num_nextn_predict_layers", "the multi-token prediction module, which transformers does not build"),
                ("pretraining_tp", "transformers' DeepSeek-V3 never reads it"),
                *((field, no_dense) for field in _DEEPSEEK_EXPERTS),
            ),
            finish=_deepseek_finish,
        )
    )


_deepseek_registration()
