"""The recipes that trained the shipped checkpoints, and the data each chapter builds the same way.

A chapter whose demonstration needs more training than a notebook should spend on a laptop
trains the same model briefly in front of the reader, then loads the longer run with
`load_checkpoint`. Nothing is hidden: each checkpoint is made by a recipe below, through
``python tools/train_checkpoints.py NAME``, and a test re-runs the first steps of the recipe and
compares their losses with the ones the checkpoint recorded.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import corpus, reasoning
from .alignment import (
    LearnedReward,
    RewardModel,
    preference_accuracy,
    preference_pairs,
    train_dpo,
    train_expert_iteration,
    train_grpo,
    train_ppo,
    train_reward_model,
    without_dropout,
)
from .bart import (
    BartForConditionalGeneration,
    bart_config,
    denoising_pairs,
    gap_source,
    read_fill,
    strip_marks,
    written,
)
from .bert import IGNORE, BertForMaskedLM, bert_config, mask_tokens, mlm_loss
from .chat import (
    MAX_ANSWER,
    TASKS,
    ChatTokenizer,
    answer,
    chat_batch,
    chat_tokenizer,
    exact_match_by_task,
    exact_reward,
    instruction,
    random_instructions,
    sft_loss,
    task_words,
)
from .clip import (
    CAPTION_TEMPLATES,
    HELD_OUT_TEMPLATES,
    CLIPModel,
    caption_tokenizer,
    class_embeddings,
    clip_config,
    clip_loss,
    digit_captions,
    encode_captions,
    zero_shot_accuracy,
)
from .codec import Codec, codec_loss, spectral_loss
from .config import TransformerConfig
from .ctc import greedy_ctc_decode
from .lora import add_lora, merge_lora, trainable_parameters
from .models import DecoderOnlyLM, EncoderClassifier, Transformer
from .moe import expert_use, moe_lm_loss
from .pretraining import CLS, MASK, PAD, SEP, PlayWords, hide_words, mlm_windows
from .speech import (
    COLUMN_TONES,
    ROW_TONES,
    SAMPLING_RATE,
    TOUCH_TONE_KEYS,
    SpeechTranscriber,
    character_error_rate,
    dft_power,
    dtmf_decode,
    edit_distance,
    speech_config,
    touch_tone_clips,
    touch_tone_tokenizer,
    train_touch_tones,
    transcribe,
)
from .tasks import (
    brackets_task,
    encode_labelled,
    encode_pairs,
    iterate_batches,
    lm_batches,
    numbers_to_words_task,
    pad_sequences,
    repeated_batches,
    repeated_tokens,
    split_data,
)
from .tokenization import BPETokenizer, CharTokenizer, WordTokenizer, load_bpe
from .training import (
    History,
    classification_accuracy,
    classification_loss,
    exact_match,
    fit,
    lm_eval_loss,
    lm_loss,
    repeat_losses,
    seq2seq_loss,
)
from .viola import SoundVocabulary, recognise, synthesise, task_batch, task_loss
from .vit import DigitsCNN, VisionTransformer, digits_data, image_accuracy, random_shifts, shift_images, vit_config
from .wav2vec2 import (
    Wav2Vec2ForCTC,
    Wav2Vec2ForPreTraining,
    contrastive_logits,
    contrastive_loss,
    conv_frames,
    normalize_samples,
    sample_negatives,
    span_mask,
    wav2vec2_config,
)

__all__ = [
    "bracket_classifier_data",
    "numbers_to_words_data",
    "shakespeare_bpe_path",
    "shakespeare_data",
    "shakespeare_lm",
    "SHAKESPEARE_BLOCK",
    "SHAKESPEARE_BLOCKS",
    "SHAKESPEARE_MERGES",
    "MOE_BALANCE",
    "busiest_expert_shares",
    "adaptation_data",
    "ADAPT_SPLIT",
    "LORA_TARGETS",
    "INDUCTION_LENGTHS",
    "induction_lm",
    "induction_test",
    "plays_words",
    "plays_mlm_data",
    "plays_bert",
    "masked_batches",
    "masked_accuracy",
    "BERT_WINDOW",
    "LABEL_BUDGETS",
    "FORGETTING",
    "finetune_runs_path",
    "load_finetune_runs",
    "digits_vit",
    "digits_clip",
    "train_digits_clip",
    "CLIP_STEPS",
    "clip_runs_path",
    "CODEC_RATE",
    "CODEC_STEPS",
    "CODEC_PLAIN_STEPS",
    "touch_tone_codec",
    "codec_clips",
    "codec_scores",
    "train_touch_tone_codec",
    "VIOLA_STEPS",
    "VIOLA_CODEBOOKS",
    "VIOLA_TEST_SEED",
    "viola_vocabulary",
    "touch_tone_viola",
    "viola_batches",
    "viola_scores",
    "train_touch_tone_viola",
    "VIOLA_LINES",
    "SYNTHESIS_TEMPERATURES",
    "viola_test",
    "viola_runs_path",
    "load_viola_runs",
    "load_clip_runs",
    "digits_variant",
    "train_digits_vit",
    "VIT_STEPS",
    "VIT_VARIANTS",
    "vit_runs_path",
    "load_vit_runs",
    "touch_tone_model",
    "touch_tone_test",
    "touch_tone_scores",
    "SPEECH_STEPS",
    "speech_runs_path",
    "load_speech_runs",
    "W2V_RATE",
    "W2V_KERNELS",
    "W2V_STRIDES",
    "W2V_STEPS",
    "CTC_STEPS",
    "CTC_BUDGETS",
    "telephone_clips",
    "telephone_test",
    "telephone_frame_labels",
    "telephone_wav2vec2",
    "telephone_ctc",
    "telephone_batches",
    "w2v_scores",
    "ctc_targets",
    "ctc_transcribe",
    "ctc_scores",
    "finetune_ctc",
    "ctc_stream",
    "ctc_runs_path",
    "load_ctc_runs",
    "BART_LINE",
    "BART_STEPS",
    "BART_BUDGETS",
    "BART_TUNE_STEPS",
    "BART_GAPS",
    "BART_GAP_AT",
    "BART_HELD_OUT",
    "plays_lines",
    "plays_bart",
    "bart_batches",
    "bart_scores",
    "bart_written",
    "punctuation_marks",
    "punctuation_pairs",
    "punctuation_scores",
    "finetune_punctuation",
    "gap_cases",
    "bart_gap_fills",
    "bert_gap_fills",
    "bart_runs_path",
    "load_bart_runs",
    "assistant_base",
    "assistant_scores",
    "sampled_pass_at_1",
    "sampled_right",
    "held_out_pairs",
    "kl_from_start",
    "REWARD_MODEL_STEPS",
    "GRPO_UPDATES",
    "length_reward",
    "REWARDS",
    "SFT_STEPS",
    "GRPO_STEPS",
    "DPO_STEPS",
    "DPO_BETAS",
    "sft_batches",
    "dpo_pairs",
    "user_imitation",
    "ASSISTANT_RUNS",
    "assistant_runs_path",
    "load_assistant_runs",
    "ADDITION_STEPS",
    "ADDITION_BATCH",
    "ADDITION_LONG_STEPS",
    "ADDITION_START_STEPS",
    "ADDITION_DIGITS",
    "ADDITION_PROBLEMS",
    "REASONING_GRPO",
    "REASONING_SAMPLES",
    "REASONING_VERIFIER",
    "VERIFIER_PROBLEM_SEED",
    "LM_EVAL_PROBLEMS",
    "reasoning_grpo",
    "reasoning_verifier",
    "addition_scores",
    "REASONING_RUNS",
    "reasoning_runs_path",
    "load_reasoning_runs",
    "RECIPES",
    "SEEDS",
    "MOE_SEEDS",
    "SEED_RUN_STEPS",
    "LORA_RANKS",
    "LORA_ALPHAS",
    "LORA_CONTROL_LR",
    "SEED_RUNS",
    "SEED_RUN_METRICS",
    "seed_runs_path",
    "load_seed_runs",
]


def bracket_classifier_data() -> tuple[CharTokenizer, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The encoder chapter's bracket data: (tokenizer, x_train (N, S), y_train (N,), x_test (M, S), y_test (M,))."""
    items = brackets_task(14000, seed=0, max_pairs=6)
    train_items, test_items = split_data(items, (0.9, 0.1), seed=0)
    tok = CharTokenizer("()[]")
    x_train, y_train = encode_labelled(train_items, tok, bos=True)
    x_test, y_test = encode_labelled(test_items, tok, bos=True)
    return tok, x_train, y_train, x_test, y_test


def _bracket_classifier(steps: int | None = None, progress: bool = False) -> tuple[nn.Module, History, dict]:
    """The encoder chapter's classifier: 3 pre-LN layers, d_model 64, 8 heads, 1500 AdamW steps of 64 strings."""
    tok, x_train, y_train, x_test, y_test = bracket_classifier_data()
    with torch.random.fork_rng():  # seeded weights, and the caller's global generator left as it was
        torch.manual_seed(0)
        model = EncoderClassifier(
            vocab_size=tok.vocab_size,
            num_classes=2,
            d_model=64,
            num_heads=8,
            num_layers=3,
            d_ff=128,
            dropout=0.0,
            max_len=64,
            norm_first=True,
        )
    rng = torch.Generator().manual_seed(0)  # the order of the batches
    batches = iterate_batches(x_train, y_train, batch_size=64, rng=rng, pad_id=tok.pad_id, forever=True)
    held_out = lambda m: {"test accuracy": classification_accuracy(m, x_test, y_test)}
    history = fit(
        model,
        classification_loss,
        batches,
        steps=steps or 1500,
        lr=3e-3,
        warmup=100,
        eval_fn=held_out,
        eval_every=300,
        progress=progress,
        desc="brackets (long run)",
    )
    return model, history, {"num_classes": 2}


def numbers_to_words_data() -> tuple[
    CharTokenizer, WordTokenizer, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor
]:
    """The encoder-decoder chapter's data: (source tokenizer, target tokenizer, src, tgt, test_src, test_tgt).

    30,000 distinct numbers (all of 0..999 and the rest up to 99,999), split 90/10; digits in,
    words out, each target <bos> ... <eos>. The test part is the first 1000 held-out pairs.
    """
    pairs = numbers_to_words_task(30000, seed=0)
    train_pairs, test_pairs = split_data(pairs, (0.9, 0.1), seed=0)
    src_tok = CharTokenizer("0123456789")
    tgt_tok = WordTokenizer.from_texts(t for _, t in pairs)
    src, tgt = encode_pairs(train_pairs, src_tok, tgt_tok)
    test_src, test_tgt = encode_pairs(test_pairs[:1000], src_tok, tgt_tok)
    return src_tok, tgt_tok, src, tgt, test_src, test_tgt


def _numbers_to_words(steps: int | None = None, progress: bool = False) -> tuple[nn.Module, History, dict]:
    """The encoder-decoder chapter's translator: 2 + 2 post-LN layers, d_model 64, 1000 AdamW steps of 64 pairs.

    The chapter stops at 300 steps, where the held-out numbers (nearly all above 1000) are already
    right; the playground's readers type small numbers too, and 300 steps still get 12 and 40
    wrong. 1000 steps get every number below 1000 right except 0, which the data holds once.
    """
    src_tok, tgt_tok, src, tgt, test_src, test_tgt = numbers_to_words_data()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Transformer(
            vocab_size=src_tok.vocab_size,
            tgt_vocab_size=tgt_tok.vocab_size,
            d_model=64,
            num_heads=4,
            num_layers=2,
            d_ff=256,
            dropout=0.0,
            max_len=64,
            pad_id=src_tok.pad_id,
        )
    rng = torch.Generator().manual_seed(0)  # the order of the batches
    batches = iterate_batches(src, tgt, batch_size=64, rng=rng, pad_id=src_tok.pad_id, forever=True)
    held_out = lambda m: {"exact match": exact_match(m, test_src, test_tgt, tgt_tok.bos_id, tgt_tok.eos_id)}
    history = fit(
        model,
        seq2seq_loss,
        batches,
        steps=steps or 1000,
        lr=3e-3,
        eval_fn=held_out,
        eval_every=250,
        progress=progress,
        desc="numbers to words (checkpoint)",
    )
    return model, history, {}


SHAKESPEARE_MERGES = 500  # the BPE language model's vocabulary: 256 bytes + 500 merges
SHAKESPEARE_BLOCK = 128  # tokens of context in both Shakespeare models


def shakespeare_bpe_path() -> Path:
    """Where the BPE model's tokenizer ships: next to its weights, as JSON (tl.load_bpe reads it)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "shakespeare_bpe.tokenizer.json"


def shakespeare_data(level: str) -> tuple[CharTokenizer | BPETokenizer, torch.Tensor, torch.Tensor]:
    """The language-model chapter's data at 'char' or 'bpe' level: (tokenizer, train ids (N,), validation ids (M,)).

    Characters get a CharTokenizer over the training plays (a character that only the held-out play
    uses becomes <unk>). BPE is tl.train_bpe on the training plays with SHAKESPEARE_MERGES merges:
    training takes about a second, so the result ships next to the model (shakespeare_bpe_path(),
    written by tools/train_checkpoints.py) and a unit test re-trains it and compares.
    """
    train, valid = corpus.shakespeare("train"), corpus.shakespeare("validation")
    if level == "char":
        tok = CharTokenizer.from_texts([train])
    elif level == "bpe":
        tok = load_bpe(shakespeare_bpe_path())
    else:
        raise ValueError(f"level must be 'char' or 'bpe', got {level!r}")
    return tok, torch.tensor(tok.encode(train)), torch.tensor(tok.encode(valid))


# The chapter "From 2017 to today" trains the same model with two kinds of block (same data, steps and seed):
SHAKESPEARE_BLOCKS = {
    "gpt": {},  # the language-model chapter's block: pre-LN, ReLU, learned positions
    "2017": {"norm_first": False, "positional": "sinusoidal"},  # post-LN, ReLU, sinusoidal, as in the paper
    "modern": {
        "norm_first": True,
        "norm": "rms",
        "positional": "rope",
        "activation": "swiglu",
        "d_ff": 341,
        "num_kv_heads": 2,
        "bias": False,
    },  # Llama's: pre-RMSNorm, RoPE, SwiGLU at 2/3 width, GQA
    # "From 2017 to today, part two": the "gpt" block with a routed feed-forward block of 4 experts of
    # width 256, each token through 2 of them: 2 x 256 = 512 active units, as many as the dense d_ff.
    "moe": {"num_experts": 4, "experts_per_token": 2, "d_ff": 256},
    # Chapter 20's draft models for speculative decoding: the "gpt" block, narrower and shallower (the target is the
    # shipped "gpt" model, 4 layers of width 128, 820,564 weights; these have 19,636 and 113,748); same data, steps,
    # rate and seed
    "draft_tiny": {"d_model": 32, "num_heads": 2, "num_layers": 1, "d_ff": 128},
    "draft_small": {"d_model": 64, "num_heads": 4, "num_layers": 2, "d_ff": 256},
}
DRAFTS = ("draft_tiny", "draft_small")  # smallest first: the drafts chapter 20 checks the Shakespeare model with
MOE_BALANCE = 0.01  # the load-balancing loss's coefficient in the "moe" recipe (pooled over layers)


def shakespeare_lm(vocab_size: int, seed: int = 0, block: str = "gpt") -> DecoderOnlyLM:
    """The Shakespeare model: 4 layers, d_model 128, 4 heads, tied embeddings; `block` picks the layer's kind.

    "gpt" (pre-LN, ReLU, learned positions) is the language-model chapter's; "2017" and "modern"
    are the two blocks the chapter "From 2017 to today" compares (see SHAKESPEARE_BLOCKS).
    """
    if block not in SHAKESPEARE_BLOCKS:
        raise ValueError(f"block must be one of {sorted(SHAKESPEARE_BLOCKS)}, got {block!r}")
    config = TransformerConfig(
        vocab_size=vocab_size,
        d_model=128,
        num_heads=4,
        num_layers=4,
        d_ff=512,
        dropout=0.1,
        max_len=SHAKESPEARE_BLOCK,
        norm_first=True,
        positional="learned",
        tie_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return DecoderOnlyLM(config.replace(**SHAKESPEARE_BLOCKS[block]))


def busiest_expert_shares(model: nn.Module, ids: torch.Tensor, windows: int = 16) -> list[float]:
    """For each MoE layer, the share of routing slots its busiest expert got on the first `windows` windows of ids.

    A balanced router gives 1 / num_experts; a collapsed one gives 1 / top_k.
    """
    x = ids[: windows * SHAKESPEARE_BLOCK].view(windows, SHAKESPEARE_BLOCK)  # (windows, block)
    return expert_use(model, x.to(next(model.parameters()).device)).max(dim=-1).values.tolist()  # (L,)


def _shakespeare(
    level: str,
    steps: int | None = None,
    progress: bool = False,
    block: str = "gpt",
    balance: float = MOE_BALANCE,
    seed: int = 0,
) -> tuple[nn.Module, History, dict]:
    """A Shakespeare language model at one level: 3000 AdamW steps of 32 windows of 128 tokens.

    The "moe" block adds `balance` times the load-balancing loss to the language-model loss, and its
    evaluations also record each layer's busiest expert share on the held-out play. `seed` picks the
    initial weights, the windows drawn and dropout's masks together; the shipped checkpoints use seed 0.
    """
    tok, train_ids, valid_ids = shakespeare_data(level)
    model = shakespeare_lm(tok.vocab_size, seed=seed, block=block)
    rng = torch.Generator().manual_seed(seed)  # the windows drawn
    batches = lm_batches(train_ids, SHAKESPEARE_BLOCK, batch_size=32, rng=rng)
    loss_fn = lm_loss
    held_out = lambda m: {"validation loss": lm_eval_loss(m, valid_ids, SHAKESPEARE_BLOCK)}
    if block == "moe":
        loss_fn = moe_lm_loss(balance)
        dense_eval = held_out
        held_out = lambda m: {
            **dense_eval(m),
            **{f"layer {i} busiest expert": s for i, s in enumerate(busiest_expert_shares(m, valid_ids))},
        }
    name = level if block == "gpt" else f"{level}, {block} block" + ("" if balance else ", no balancing loss")
    with torch.random.fork_rng():  # dropout's masks come from a seeded generator, not from the caller's state
        torch.manual_seed(seed)
        history = fit(
            model,
            loss_fn,
            batches,
            steps=steps or 3000,
            lr=2e-3,
            warmup=200,
            eval_fn=held_out,
            eval_every=500,
            progress=progress,
            desc=f"Shakespeare {name} (long run)",
        )
    return model, history, {}


ADAPT_SPLIT = 0.8  # the held-out play's first 80% is what fine-tuning learns from; its last 20% measures it
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj", "linear1", "linear2")  # every linear layer of a block
LORA_RANK, LORA_ALPHA = 8, 16.0


def adaptation_data() -> tuple[CharTokenizer, torch.Tensor, torch.Tensor]:
    """The held-out play (Twelfth Night) cut in two for fine-tuning: (tokenizer, first 80% (N,), last 20% (M,)).

    The tokenizer is the character model's, so that the shipped model reads it as it is.
    """
    tok, _, play = shakespeare_data("char")
    cut = int(ADAPT_SPLIT * play.numel())
    return tok, play[:cut], play[cut:]


def _adapt(
    method: str,
    steps: int | None = None,
    progress: bool = False,
    seed: int = 0,
    rank: int = LORA_RANK,
    alpha: float = LORA_ALPHA,
    lr_scale: float = 1.0,
) -> tuple[nn.Module, History, dict]:
    """The shipped character model fine-tuned on adaptation_data's first part: 300 AdamW steps of 16 windows.

    "lora" trains rank-8 adapters (alpha 16) on every linear layer of every block (everything else
    frozen, lr 2e-3) and returns the merged model; "full" trains every weight (lr 3e-4). Both are
    evaluated on the play's last 20%. `seed` picks the windows drawn, the adapters' A and dropout's
    masks; the shipped checkpoints use seed 0, rank 8, alpha 16 and lr_scale 1 (the learning rate's
    multiplier: chapter 14's control runs alpha 16 at 4 times the rate beside alpha 64).
    """
    if not lr_scale > 0:
        raise ValueError(f"lr_scale must be positive, got {lr_scale}")
    from .checkpoints import load_checkpoint

    _, learn, test = adaptation_data()
    with torch.random.fork_rng():  # building the model draws initial weights, which the checkpoint replaces
        model, _ = load_checkpoint("shakespeare_char")
    rng = torch.Generator().manual_seed(seed)  # the windows drawn
    batches = lm_batches(learn, SHAKESPEARE_BLOCK, batch_size=16, rng=rng)
    held_out = lambda m: {"test loss": lm_eval_loss(m, test, SHAKESPEARE_BLOCK)}
    with torch.random.fork_rng():  # the adapters' A and dropout's masks come from this seed, not the caller's state
        torch.manual_seed(seed)
        lr = 3e-4 * lr_scale
        if method == "lora":
            add_lora(model, LORA_TARGETS, r=rank, alpha=alpha)
            lr = 2e-3 * lr_scale
        trainable, total = trainable_parameters(model)
        history = fit(
            model,
            lm_loss,
            batches,
            steps=steps or 300,
            lr=lr,
            warmup=20,
            eval_fn=held_out,
            eval_every=100,
            progress=progress,
            desc=f"Twelfth Night, {method} fine-tuning",
        )
    history.evals[-1]["trainable parameters"] = float(trainable)
    history.evals[-1]["parameters"] = float(total)
    return (merge_lora(model) if method == "lora" else model), history, {}


INDUCTION_VOCAB = 64  # the induction model's tokens: ids 1 .. 63 in the data (0 is padding)
INDUCTION_LENGTHS = (8, 24)  # each training batch repeats a block of n tokens, n drawn from these (both included)


def induction_lm(seed: int = 0) -> DecoderOnlyLM:
    """The chapter "Inside the trained models"'s toy: two attention-only pre-LN layers, d_model 64, 4 heads.

    No feed-forward block and learned positions: all a token can learn from its context has to go
    through attention, which is what makes its heads easy to read.
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return DecoderOnlyLM(
            vocab_size=INDUCTION_VOCAB,
            d_model=64,
            num_heads=4,
            num_layers=2,
            dropout=0.0,
            max_len=2 * INDUCTION_LENGTHS[1],
            norm_first=True,
            positional="learned",
            scale_embedding=False,
            attention_only=True,
        )


def induction_test(batch_size: int = 256, n: int = 16) -> torch.Tensor:
    """Held-out blocks of n tokens shown twice, from a seed of their own: (batch_size, 2n)."""
    return repeated_tokens(batch_size, n, INDUCTION_VOCAB, torch.Generator().manual_seed(1))


def _induction(steps: int | None = None, progress: bool = False) -> tuple[nn.Module, History, dict]:
    """The induction model: 3000 AdamW steps of 32 random blocks shown twice, n from INDUCTION_LENGTHS."""
    model = induction_lm()
    rng = torch.Generator().manual_seed(0)  # the blocks drawn
    batches = repeated_batches(INDUCTION_VOCAB, INDUCTION_LENGTHS, batch_size=32, rng=rng)
    test = induction_test()
    held_out = lambda m: dict(zip(("first copy loss", "second copy loss"), repeat_losses(m, test)))
    history = fit(
        model,
        lm_loss,
        batches,
        steps=steps or 3000,
        lr=3e-3,
        warmup=50,
        eval_fn=held_out,
        eval_every=250,
        progress=progress,
        desc="induction (long run)",
    )
    return model, history, {}


# Chapter 15 ("Pre-train, then fine-tune") pre-trains a small BERT on the ten training plays by filling in hidden
# words, and measures it on the held-out play, Twelfth Night.
BERT_WINDOW = 64  # tokens per pre-training window: [CLS], 62 words, [SEP]
BERT_MASK_SEED = 1234  # the held-out windows' masking, the same for every model measured


def plays_words() -> PlayWords:
    """The chapter's vocabulary: every word seen at least 8 times in the training plays (2,555), after 5 specials."""
    return PlayWords.from_text(corpus.shakespeare("train"), min_count=8)


def plays_mlm_data() -> tuple[PlayWords, torch.Tensor, torch.Tensor]:
    """(vocabulary, training windows (N, BERT_WINDOW), held-out windows (M, BERT_WINDOW)) of the plays' words."""
    vocab = plays_words()
    train = mlm_windows(vocab, corpus.shakespeare("train"), BERT_WINDOW)
    held_out = mlm_windows(vocab, corpus.shakespeare("validation"), BERT_WINDOW)
    return vocab, train, held_out


def masked_batches(
    windows: torch.Tensor, vocab_size: int, batch_size: int, rng: torch.Generator
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless batches of random windows, masked afresh each time they are drawn (RoBERTa's dynamic masking):
    (inputs (B, S), labels (B, S))."""
    while True:
        rows = windows[torch.randint(windows.shape[0], (batch_size,), generator=rng)]  # (B, S)
        yield mask_tokens(rows, mask_id=MASK, special_ids=PlayWords.special_ids, vocab_size=vocab_size, generator=rng)


@torch.inference_mode()
def masked_accuracy(model: nn.Module, windows: torch.Tensor, seed: int = BERT_MASK_SEED) -> dict[str, float]:
    """The masked-word loss (nats) and top-1 accuracy on `windows`, masked by BERT's rule with a fixed seed."""
    model.eval()
    device = next(model.parameters()).device
    inputs, labels = hide_words(windows, model.config.vocab_size, seed)  # (N, S) each
    total, right, loss = 0, 0, 0.0
    for start in range(0, windows.shape[0], 256):
        y = labels[start : start + 256]  # (b, S)
        chosen = y != IGNORE
        logits = model(inputs[start : start + 256].to(device), at=chosen.to(device)).cpu()  # (n, V)
        loss += float(mlm_loss(logits, y)) * logits.shape[0]
        right += int((logits.argmax(-1) == y[chosen]).sum())
        total += logits.shape[0]
    return {"masked loss": loss / total, "masked accuracy": right / total}


def plays_bert(vocab_size: int, seed: int = 0) -> BertForMaskedLM:
    """The chapter's BERT: 4 post-LN layers of width 128 (4 heads, feed-forward 512), windows of 64 tokens.

    No dropout: the masking already makes every draw of a window new, and without it the first steps give the same
    losses on a CPU and a GPU (the shipped run was made on a GPU; tests re-run its first steps on the CPU)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        cfg = bert_config(
            vocab_size=vocab_size, d_model=128, num_heads=4, num_layers=4, d_ff=512, max_len=BERT_WINDOW, dropout=0.0
        )
        return BertForMaskedLM(cfg)


def _plays_bert(
    steps: int | None = None,
    progress: bool = False,
    seed: int = 0,
    device: str | None = None,
    *,
    eval_every: int = 1000,
    also: Callable[[nn.Module], dict[str, float]] | None = None,
) -> tuple[nn.Module, History, dict]:
    """BERT pre-trained on the training plays: 10,000 AdamW steps of 64 windows, each masked afresh when drawn.

    About 75 minutes on one laptop core, 4 minutes on an H200 (the shipped checkpoint's run, `meta["device"]`).
    Every `eval_every` steps the held-out masked-word accuracy is measured, with `also(model)`'s metrics beside it
    (tools/transfer_runs.py probes the order task there); neither changes what the model trains on."""
    vocab, train, held_out = plays_mlm_data()
    model = plays_bert(vocab.vocab_size, seed=seed)
    batches = masked_batches(train, vocab.vocab_size, batch_size=64, rng=torch.Generator().manual_seed(seed))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        history = fit(
            model,
            lambda m, batch: mlm_loss(m(batch[0], at=batch[1] != IGNORE), batch[1]),  # the head at chosen positions
            batches,
            steps=steps or 10_000,
            lr=1e-3,
            warmup=500,
            eval_fn=lambda m: {**masked_accuracy(m, held_out), **(also(m) if also else {})},
            eval_every=eval_every,
            device=device,
            progress=progress,
            desc="BERT on the plays (masked words)",
        )
    return model, history, {"token_types": 2}


# The chapter's learning curve: pretraining.fine_tune's four methods at these label budgets (the last is the whole
# pool of order_split) over SEEDS; `python tools/finetune_runs.py` makes the runs, the chapter reads the file.
LABEL_BUDGETS = (20, 60, 200, 425)


def finetune_runs_path() -> Path:
    """Where the learning curve ships: transformer_lib/checkpoints/finetune_runs.json (tools/finetune_runs.py)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "finetune_runs.json"


def load_finetune_runs(path: Path | None = None) -> dict:
    """The learning curve's results: {"budgets": [...], "runs": {"<method> <budget>": [one record per seed]},
    "test majority": share}; each record holds "seed", "test_accuracy", "trainable_parameters", "seconds"."""
    import json

    path = path or finetune_runs_path()
    if not path.is_file():
        raise FileNotFoundError(f"no learning-curve results at {path}; run `python tools/finetune_runs.py`")
    return json.loads(path.read_text())


# What full fine-tuning and LoRA cost the masked-word task (chapter 15's "What fine-tuning costs" and exercise 3):
# fine_tune on all 425 labelled speeches of the pool, each cut to [CLS], 14 words and marks, [SEP]; measured on the
# first 300 held-out windows at masking seeds 0 and 1 (`python tools/finetune_runs.py --forgetting` writes the runs).
FORGETTING = {"budget": 425, "max_len": 16, "windows": 300, "masking seeds": [0, 1]}


def _plays_bert_order(steps: int | None = None, progress: bool = False) -> tuple[nn.Module, History, dict]:
    """Chapter 15's exercise 3 ships its fine-tuned model: the shipped plays_bert fully fine-tuned on the order task
    as FORGETTING says, with fine_tune("full", ..., seed=0): 200 AdamW steps of 16 speeches, about 5 s on one laptop
    core. The same run as the forgetting runs' full fine-tuning at seed 0. One evaluation, after the last step: the
    test accuracy on the order task (the same cut)."""
    from .checkpoints import load_checkpoint
    from .pretraining import fine_tune, order_split

    vocab, _, _ = plays_mlm_data()
    with torch.random.fork_rng():  # building the model draws initial weights, which the checkpoint replaces
        pretrained, _ = load_checkpoint("plays_bert")
    short = order_split(vocab, FORGETTING["max_len"])
    more = {"steps": steps} if steps else {}  # fine_tune's own 200 steps unless told
    model, result = fine_tune("full", pretrained, short, FORGETTING["budget"], seed=0, progress=progress, **more)
    history = result["history"]
    history.eval_steps.append(history.steps[-1])
    history.evals.append({"test accuracy": result["test accuracy"]})
    return model, history, {"num_classes": 2}


def load_transfer_runs(path: Path | None = None) -> dict:
    """Transfer against pre-training steps (tools/transfer_runs.py): the plays_bert recipe run again, measured every
    "every" steps: {"points": [{"steps", "masked loss", "masked accuracy", "probe": {"<budget>": [accuracy per
    seed]}}], "budgets", "seeds", "first_losses", "machine", "seconds", ...}."""
    import json

    from .checkpoints import CHECKPOINT_DIR

    path = path or CHECKPOINT_DIR / "transfer_runs.json"
    if not path.is_file():
        raise FileNotFoundError(f"no transfer results at {path}; run `python tools/transfer_runs.py`")
    return json.loads(path.read_text())


VIT_STEPS = 1000  # the digits ViT: 1,000 AdamW steps of 64 images (about 53 passes over the 1,200)
# chapter 16's comparisons (tools/vit_runs.py over SEEDS): name -> digits_variant's arguments (a ViT's, or
# model="cnn"), with "shift": the largest random move, in pixels, of each training image (0: none)
VIT_VARIANTS = {
    "class token": dict(pool="cls"),
    "mean pooling": dict(pool="mean"),
    "no positions": dict(pool="cls", positions=False),
    "class token, shifted in training": dict(pool="cls", shift=1),
    "convolutional network": dict(model="cnn"),
    "convolutional network, shifted in training": dict(model="cnn", shift=1),
}


def digits_vit(seed: int = 0, pool: str = "cls", positions: bool = True) -> VisionTransformer:
    """Chapter 16's ViT for 8 x 8 digits: patches of 2 x 2 (16 of them), 2 pre-LN layers of width 64, 4 heads."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        cfg = vit_config(d_model=64, num_heads=4, num_layers=2, d_ff=128, max_len=17)
        return VisionTransformer(cfg, image_size=8, patch_size=2, num_classes=10, pool=pool, positions=positions)


def digits_variant(name: str, seed: int = 0) -> tuple[nn.Module, dict]:
    """One of VIT_VARIANTS, built at `seed`: (the model, train_digits_vit's keyword arguments)."""
    if name not in VIT_VARIANTS:
        raise ValueError(f"no variant called {name!r}; the variants are {list(VIT_VARIANTS)}")
    arguments = dict(VIT_VARIANTS[name])
    train = {"shift": arguments.pop("shift", 0)}
    if arguments.pop("model", "vit") == "cnn":
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            return DigitsCNN(channels=1, num_classes=10, width=32), train
    return digits_vit(seed, **arguments), train


def train_digits_vit(
    model: nn.Module,
    steps: int = VIT_STEPS,
    seed: int = 0,
    *,
    shift: int = 0,
    progress: bool = False,
    device: torch.device | str | None = None,
) -> History:
    """Train `model` on the digits' 1,200 training images: `steps` AdamW steps of 64 drawn at random (seeded).

    Learning rate 1e-3 with 100 warm-up steps and a cosine decay, weight decay 0.05; the held-out accuracy is
    measured at the end (History.evals[-1]["test accuracy"]). shift > 0 moves every training image by a random
    whole number of pixels, up to `shift` each way, (0, 0) included (`vit.random_shifts` with still=True, from
    the same seeded draws): the bias a convolution has, given as data instead. Any image classifier trains this
    way (the chapter's CNN too)."""
    if shift < 0:
        raise ValueError(f"shift must be 0 (no moves) or a positive number of pixels, got {shift}")
    train_x, train_y, test_x, test_y = digits_data()
    rng = torch.Generator().manual_seed(seed)

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            rows = torch.randint(len(train_y), (64,), generator=rng)  # (64,)
            images = train_x[rows]  # (64, 1, 8, 8)
            if shift:
                images = shift_images(images, random_shifts(64, shift, rng, still=True))  # (64, 1, 8, 8)
            yield images, train_y[rows]  # (64, 1, 8, 8), (64,)

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return fit(
            model,
            lambda m, batch: nn.functional.cross_entropy(m(batch[0]), batch[1]),
            batches(),
            steps=steps,
            lr=1e-3,
            warmup=100,
            weight_decay=0.05,
            eval_fn=lambda m: {"test accuracy": image_accuracy(m, test_x, test_y)},
            eval_every=steps,
            device=device,
            progress=progress,
            desc="ViT on the digits",
        )


def _digits_vit(steps: int | None = None, progress: bool = False) -> tuple[nn.Module, History, dict]:
    """The shipped digits ViT (class token, learned positions): VIT_STEPS steps, about 15 s on one laptop core."""
    model = digits_vit()
    history = train_digits_vit(model, steps or VIT_STEPS, progress=progress)
    return model, history, {"image_size": 8, "patch_size": 2, "num_classes": 10, "pool": "cls"}


CLIP_STEPS = 1500  # the digits CLIP: 1,500 AdamW steps of 64 image-caption pairs (80 passes over the 1,200)


def digits_clip(seed: int = 0) -> CLIPModel:
    """Chapter 19's CLIP for the digits: chapter 16's ViT shape on the image side (8 x 8 images in 2 x 2 patches, 2
    pre-LN layers of width 64, 4 heads) and a causal text tower of the same size over `caption_tokenizer`'s
    characters, both projected to 64 numbers; CLIP's starting temperature, 0.07."""
    tokenizer = caption_tokenizer()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        sizes = dict(d_model=64, num_heads=4, num_layers=2, d_ff=128)
        return CLIPModel(
            clip_config(vocab_size=tokenizer.vocab_size, max_len=48, **sizes),
            clip_config(max_len=17, **sizes),
            image_size=8,
            patch_size=2,
            channels=1,
            projection_dim=64,
            eos_id=tokenizer.eos_id,
        )


def train_digits_clip(
    model: CLIPModel,
    steps: int = CLIP_STEPS,
    seed: int = 0,
    *,
    progress: bool = False,
    device: torch.device | str | None = None,
) -> History:
    """Train a digits CLIP on the 1,200 training images, each batch 64 images drawn at random (seeded) with one
    caption each in a training phrasing (`CAPTION_TEMPLATES`), by the symmetric contrastive loss.

    Learning rate 1e-3 with 100 warm-up steps and a cosine decay, weight decay 0.05 on every weight (the ViT's recipe;
    CLIP exempts gains, biases and the temperature); the learned temperature is clamped before each step, as CLIP's
    is, so that exp(logit_scale) stays at most 100. At the end History.evals[-1] holds the zero-shot accuracy on the
    597 test images with the held-out phrasings ("zero-shot, held-out phrasings") and with the training phrasings that
    name the digit, all but the last ("zero-shot, training phrasings")."""
    train_x, train_y, test_x, test_y = digits_data()
    tokenizer = caption_tokenizer()
    rng = torch.Generator().manual_seed(seed)

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            rows = torch.randint(len(train_y), (64,), generator=rng)  # (64,)
            yield (
                train_x[rows],
                encode_captions(tokenizer, digit_captions(train_y[rows], rng)),
            )  # (64, 1, 8, 8), (64, T)

    def loss_fn(m: CLIPModel, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            m.logit_scale.clamp_(max=math.log(100))  # CLIP's clamp: a temperature of at least 0.01
        return clip_loss(m(*batch))

    def evaluate(m: CLIPModel) -> dict[str, float]:
        return {
            f"zero-shot, {name} phrasings": zero_shot_accuracy(m, test_x, test_y, class_embeddings(m, tokenizer, t))
            for name, t in (("held-out", HELD_OUT_TEMPLATES), ("training", CAPTION_TEMPLATES[:-1]))
        }

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return fit(
            model,
            loss_fn,
            batches(),
            steps=steps,
            lr=1e-3,
            warmup=100,
            weight_decay=0.05,
            eval_fn=evaluate,
            eval_every=steps,
            device=device,
            progress=progress,
            desc="CLIP on the digits",
        )


def _digits_clip(steps: int | None = None, progress: bool = False) -> tuple[nn.Module, History, dict]:
    """The shipped digits CLIP (seed 0): CLIP_STEPS steps, about a minute on one laptop core."""
    model = digits_clip()
    history = train_digits_clip(model, steps or CLIP_STEPS, progress=progress)
    init = model.checkpoint_init()
    return model, history, init


CODEC_RATE = 4000  # the codec's clips: 4 kHz holds the highest keypad tone (1,633 Hz) and costs a quarter of 16 kHz
CODEC_STEPS = 3000  # the touch-tone codec: 3,000 AdamW steps of 8 clips of 0.48 s in all,
CODEC_PLAIN_STEPS = 1000  # the first 1,000 of them without the quantizer (train_touch_tone_codec says why)


def touch_tone_codec(seed: int = 0, dropout: bool = False) -> Codec:
    """Chapter 19's codec for touch tones at CODEC_RATE: strides 2, 4 and 5 (one frame per 40 samples, 100 frames a
    second), 16 to 128 channels, frames of 16 numbers coded by 4 codebooks of 64 entries (6 bits each: 600 bits a
    second per codebook). Without quantizer dropout by default (the shipped codec was trained without it): trained
    with it (SoundStream's), seed 0 read back 25% of the held-out clips from its first codebook alone, against 23%
    without, and 100% from all four."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Codec(channels=16, strides=(2, 4, 5), dim=16, num_quantizers=4, size=64, dropout=dropout)


def codec_clips(n: int, seed: int | torch.Generator, **clips) -> tuple[torch.Tensor, list[str]]:
    """Touch-tone clips as the codec hears them: at CODEC_RATE, with white noise 30 to 40 dB below the tones (a
    quiet line: the codec codes the tones, not the noise), 1 s long with 3 to 6 keys unless `clips` says otherwise."""
    return touch_tone_clips(n, seed=seed, sampling_rate=CODEC_RATE, snr_db=(30.0, 40.0), **clips)


@torch.no_grad()
def codec_scores(model: Codec, n: int = 64, seed: int = 123) -> dict[str, float]:
    """For 1 to all of the codec's codebooks, on n held-out clips: the share read back right, key for key, by the
    Goertzel decoder (which learned nothing, so it judges the sound, not the codec), and the signal-to-noise ratio of
    the reconstruction in dB, 10 log10(mean x^2 / mean (x - y)^2)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    samples, texts = codec_clips(n, seed)
    codes = model.encode(samples.to(device))  # (n, F, Q): the first k columns are what k codebooks choose
    scores = {}
    for k in range(1, model.quantizer.num_quantizers + 1):
        rebuilt = model.decode(codes[..., :k]).cpu()  # (n, T)
        read = dtmf_decode(rebuilt, sampling_rate=CODEC_RATE, frame=100, hop=40)  # 25 ms frames, 10 ms apart
        scores[f"read back, {k} codebooks"] = sum(r == t for r, t in zip(read, texts)) / n
        error = (samples - rebuilt).pow(2).mean()
        scores[f"snr dB, {k} codebooks"] = float(10 * torch.log10(samples.pow(2).mean() / error))
    model.train(was_training)
    return scores


def train_touch_tone_codec(
    model: Codec,
    steps: int = CODEC_STEPS,
    seed: int = 0,
    *,
    plain_steps: int = CODEC_PLAIN_STEPS,
    evaluate: bool = True,
    progress: bool = False,
    device: torch.device | str | None = None,
) -> History:
    """Train a codec to rebuild touch-tone clips (`codec_clips`: 8 a batch, 0.48 s with 1 to 3 keys, drawn from a
    seeded stream) with torch's AdamW at a constant learning rate of 1e-3 and no clipping, in three stages:

    1. `plain_steps` steps as a plain autoencoder, the quantizer left out: the waveform's mean absolute error and
       `spectral_loss` of decoder(encoder(x));
    2. every codebook started by k-means (`ResidualVectorQuantizer.kmeans_init`, 10 iterations) on the encoder's
       frames of 64 fresh clips, as EnCodec starts its codebooks from its first batch;
    3. the rest of the `steps` through the quantizer, by `codec_loss`.

    Why the stages: trained through the quantizer from random codebooks (and with `spectral_loss`'s floor at 0.1),
    the same codec learned slowly and then suddenly (the clips read back right through all four codebooks went from
    6% at 3,000 steps to 100% at 6,000 in one run), and the jump was fragile (other random numbers for the restarts,
    the same recipe otherwise: 17% after 6,000 steps). With the stages, the plain autoencoder of seeds 0, 1 and 2
    read back 95% to 100% after 1,000 steps; through all four codebooks, seeds 0, 1 and 2 read back 100%, 98% and
    100% at 1,500 steps and 98%, 95% and 98% at 3,000 (signal-to-noise 16.6, 14.9 and 16.3 dB, against 5.6 dB for
    the codec trained without the stages; seed 0 ships). The restarts and the k-means draw from a stream of their
    own (seed + 1), so that a restart flipped by rounding on another machine does not move the clips. Not `fit`: it
    has no place for the stages, and its cosine decay and clipping held the old recipe at 9%. History.evals holds
    `codec_scores` at the middle and the end (with evaluate=True)."""
    from tqdm.auto import tqdm

    if not 0 <= plain_steps <= steps:
        raise ValueError(f"plain_steps must be from 0 to the {steps} steps, got {plain_steps}")
    clips = torch.Generator().manual_seed(seed)  # the clips
    draws = torch.Generator().manual_seed(seed + 1)  # k-means's start and the quantizer's restarts
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    history, start = History(), time.perf_counter()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for step in tqdm(range(steps), desc="codec on touch tones", disable=not progress, mininterval=0.5):
            if step == plain_steps:
                with torch.no_grad():
                    frames = model.encoder(codec_clips(64, clips, duration=0.48, keys=(1, 3))[0].to(device))
                model.quantizer.kmeans_init(frames, generator=draws)  # frames (64, 48, dim)
            samples = codec_clips(8, clips, duration=0.48, keys=(1, 3))[0].to(device)  # (8, 1920)
            if step < plain_steps:
                rebuilt = model.decoder(model.encoder(samples))  # (8, 1920), no quantizer
                loss = F.l1_loss(rebuilt, samples) + spectral_loss(rebuilt, samples)
            else:
                loss = codec_loss(model, samples, draws)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            history.steps.append(step)
            history.losses.append(loss.item())
            if evaluate and step + 1 in (steps // 2, steps):
                history.eval_steps.append(step)  # as fit records them: the index of the step just taken
                history.evals.append(codec_scores(model))
    model.eval()
    history.seconds = time.perf_counter() - start
    return history


def _touch_tone_codec(
    steps: int | None = None, progress: bool = False, evaluate: bool = True
) -> tuple[nn.Module, History, dict]:
    """The shipped touch-tone codec (seed 0): CODEC_STEPS steps, about 3 minutes on one laptop core. Fewer steps
    than CODEC_PLAIN_STEPS train the plain autoencoder alone (what the provenance test re-runs)."""
    model = touch_tone_codec()
    steps = steps or CODEC_STEPS
    plain = min(CODEC_PLAIN_STEPS, steps)
    history = train_touch_tone_codec(model, steps, plain_steps=plain, evaluate=evaluate, progress=progress)
    return model, history, model.checkpoint_init()


VIOLA_STEPS = 6000  # the touch-tone VioLA: 6,000 of fit's AdamW steps of 32 sequences, half of each task
VIOLA_CODEBOOKS = 2  # it reads and writes the codec's first two codebooks, interleaved frame by frame
VIOLA_TEST_SEED = 999  # its held-out clips: codec_clips(64, VIOLA_TEST_SEED)


def viola_vocabulary() -> SoundVocabulary:
    """The touch-tone VioLA's ids: the specials, the two tasks, the twelve keys, then 64 codes for each of the codec's
    first VIOLA_CODEBOOKS codebooks (146 ids in all)."""
    return SoundVocabulary(TOUCH_TONE_KEYS, 64, VIOLA_CODEBOOKS)


def touch_tone_viola(seed: int = 0) -> DecoderOnlyLM:
    """Chapter 19's VioLA at laptop scale: a pre-LN decoder-only Transformer over `viola_vocabulary`, 3 layers,
    d_model 96, 4 heads, learned positions up to 224 (the longest sequence is 2 + 200 + 1 + 6 + 1 = 210 ids: a
    second of 100 frames of 2 codes, 6 keys), no dropout."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return DecoderOnlyLM(
            vocab_size=viola_vocabulary().size,
            d_model=96,
            num_heads=4,
            num_layers=3,
            d_ff=384,
            dropout=0.0,
            max_len=224,
            norm_first=True,
        )


def viola_batches(codec: Codec, seed: int, batch_size: int = 32) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless `task_batch`es over fresh `codec_clips` (1 s, 3 to 6 keys) from a stream seeded with `seed`, coded by
    `codec`'s first VIOLA_CODEBOOKS codebooks: even rows recognise, odd rows synthesise."""
    vocab, rng = viola_vocabulary(), torch.Generator().manual_seed(seed)
    tasks = ["recognise" if i % 2 == 0 else "synthesise" for i in range(batch_size)]
    while True:
        samples, texts = codec_clips(batch_size, rng)
        with torch.no_grad():
            codes = codec.encode(samples, VIOLA_CODEBOOKS)  # (B, 100, 2)
        yield task_batch(vocab, tasks, codes, texts)


@torch.no_grad()
def viola_scores(model: nn.Module, codec: Codec, n: int = 64, seed: int = VIOLA_TEST_SEED) -> dict[str, float]:
    """On n held-out clips: "recognised", the share whose keys `recognise` reads exactly from their codes; "read
    back, sampled" and "read back, greedy", the share of clips that `synthesise` writes for their keys (at
    temperature 1 with a generator seeded 5, and greedily) whose sound, decoded by `codec`, the Goertzel decoder
    reads back as those keys exactly. The Goertzel decoder learned nothing, so it judges the sound alone."""
    vocab = viola_vocabulary()
    samples, texts = codec_clips(n, seed)
    codes = codec.encode(samples, VIOLA_CODEBOOKS)  # (n, F, 2)
    scores = {"recognised": sum(r == t for r, t in zip(recognise(model, vocab, codes), texts)) / n}
    for name, temperature in (("sampled", 1.0), ("greedy", 0.0)):
        generator = torch.Generator(next(model.parameters()).device).manual_seed(5)
        written = synthesise(model, vocab, texts, codes.shape[1], temperature=temperature, generator=generator)
        read = dtmf_decode(codec.decode(written), sampling_rate=CODEC_RATE, frame=100, hop=40)  # (n, F, 2) -> sound
        scores[f"read back, {name}"] = sum(r == t for r, t in zip(read, texts)) / n
    return scores


VIOLA_LINES = {"noisy": (0.0, 20.0), "quiet": (30.0, 40.0)}  # chapter 16's line and the codec's, snr in dB
SYNTHESIS_TEMPERATURES = (0.0, 0.5, 0.8, 1.0, 1.2)  # viola_runs.json's synthesis: 0 is greedy


def viola_test(line: str, sampling_rate: int = SAMPLING_RATE) -> tuple[torch.Tensor, list[str]]:
    """Chapter 16's 300 held-out clips (touch_tone_test's keys, timings and noise) on a line of VIOLA_LINES: the
    noise scaled to that line's signal-to-noise range, every (16,000 / sampling_rate)-th sample kept (the tones,
    all under 1.5 kHz, survive at 4 kHz; white noise decimated is white noise of the same power). -> ((300,
    sampling_rate) waveforms, the keys)."""
    if line not in VIOLA_LINES:
        raise ValueError(f"line must be one of {sorted(VIOLA_LINES)}, got {line!r}")
    if sampling_rate not in (SAMPLING_RATE, W2V_RATE, CODEC_RATE):
        raise ValueError(f"sampling_rate must be {SAMPLING_RATE}, {W2V_RATE} or {CODEC_RATE} Hz, got {sampling_rate!r}")
    n, seed = _SPEECH_TEST
    waves, texts = touch_tone_clips(n, seed=seed, snr_db=VIOLA_LINES[line])  # (300, 16000)
    return waves[:, :: SAMPLING_RATE // sampling_rate].contiguous(), texts  # (300, sampling_rate)


def viola_runs_path() -> Path:
    """Where chapter 19's VioLA measurements ship: transformer_lib/checkpoints/viola_runs.json (tools/viola_runs.py)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "viola_runs.json"


# Chapter 20's speculative decoding measured (tools/speculative_runs.py): each draft writes NEW_TOKENS characters
# after each of PROMPTS prompts (PROMPT_LEN characters at evenly spaced places of the held-out play), with k draft
# tokens per round, at temperature 1, for each sampling seed; the target is the shipped shakespeare_char
SPECULATIVE = {"prompts": 16, "prompt_len": 16, "new_tokens": 48, "k": 4, "temperature": 1.0, "seeds": (0, 1, 2)}


def speculative_prompts() -> list[torch.Tensor]:
    """SPECULATIVE's prompts: the held-out play's characters at evenly spaced places, each (1, prompt_len)."""
    _, _, held_out = shakespeare_data("char")
    n, length = SPECULATIVE["prompts"], SPECULATIVE["prompt_len"]
    starts = torch.linspace(0, len(held_out) - length - 1, n).long()
    return [held_out[s : s + length][None] for s in starts]


def speculative_runs_path() -> Path:
    """Where chapter 20's speculative decoding measurements ship: transformer_lib/checkpoints/speculative_runs.json
    (tools/speculative_runs.py)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "speculative_runs.json"


def load_speculative_runs(path: Path | None = None) -> dict:
    """tools/speculative_runs.py's file: {"settings": SPECULATIVE, "runs": {draft: {"acceptance": [...], "tokens per
    target pass": [...]}}, ...}, one number per (seed, prompt), seed by seed, so that the drafts pair run by run."""
    import json

    path = path or speculative_runs_path()
    if not path.is_file():
        raise FileNotFoundError(f"no speculative decoding runs at {path}; run `python tools/speculative_runs.py`")
    return json.loads(path.read_text())


def load_viola_runs(path: Path | None = None) -> dict:
    """tools/viola_runs.py's file: {"recognition": {line: {reader: "0110..."}}, "synthesis": {temperature:
    ["0110..." per sampling seed]}, "codec": {"2 codebooks": "0110...", ...}, ...}: one 0 or 1 per held-out clip,
    1 where the keys were read exactly, so that readers pair clip by clip."""
    import json

    path = path or viola_runs_path()
    if not path.is_file():
        raise FileNotFoundError(f"no VioLA runs at {path}; run `python tools/viola_runs.py`")
    return json.loads(path.read_text())


def train_touch_tone_viola(
    model: nn.Module,
    codec: Codec,
    steps: int = VIOLA_STEPS,
    seed: int = 0,
    *,
    evaluate: bool = True,
    progress: bool = False,
    device: torch.device | str | None = None,
) -> History:
    """Train a VioLA on both tasks at once with `fit` (AdamW at 1e-3, 100 warm-up steps, cosine decay, clipping at
    1): `viola_batches` of `codec`'s codes from the stream seed + 1. History.evals holds `viola_scores` at a third,
    two thirds and the end (with evaluate=True). Seed 0's 6,000 steps took 41 minutes on one CPU core."""
    codec.eval()
    return fit(
        model,
        task_loss,
        viola_batches(codec, seed + 1),
        steps=steps,
        lr=1e-3,
        warmup=100,
        eval_fn=(lambda m: viola_scores(m, codec)) if evaluate else None,
        eval_every=steps // 3 if evaluate else 0,
        progress=progress,
        device=device,
        desc="VioLA on touch tones",
    )


def _touch_tone_viola(
    steps: int | None = None, progress: bool = False, evaluate: bool | None = None
) -> tuple[nn.Module, History, dict]:
    """The shipped touch-tone VioLA (seed 0) over the shipped codec: VIOLA_STEPS steps, about 40 minutes on one
    laptop core. A shorter run (what the provenance test re-runs) skips the evaluations unless asked."""
    from .checkpoints import load_checkpoint

    codec, _ = load_checkpoint("touch_tone_codec")
    model = touch_tone_viola()
    evaluate = steps is None if evaluate is None else evaluate
    return model, train_touch_tone_viola(model, codec, steps or VIOLA_STEPS, evaluate=evaluate, progress=progress), {}


def clip_runs_path() -> Path:
    """Where chapter 19's CLIP runs ship: transformer_lib/checkpoints/clip_runs.json (tools/clip_runs.py)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "clip_runs.json"


def load_clip_runs(path: Path | None = None) -> dict:
    """Chapter 19's CLIP runs: {"runs": [one record per seed], "steps", ...}; each record holds "zero_shot" (the
    held-out phrasings together), "zero_shot_training_phrasings", "zero_shot_by_phrasing", "zero_shot_right" and
    "probe_right" (one "0" or "1" per held-out image), "probe_accuracy", "recall_at_1" and "recall_at_5" (both ways),
    "temperature", "final_loss" (the mean of the last 50 steps) and the wall time. See tools/clip_runs.py."""
    import json

    path = path or clip_runs_path()
    if not path.is_file():
        raise FileNotFoundError(f"no CLIP runs at {path}; run `python tools/clip_runs.py`")
    return json.loads(path.read_text())


def vit_runs_path() -> Path:
    """Where chapter 16's comparisons ship: transformer_lib/checkpoints/vit_runs.json (tools/vit_runs.py)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "vit_runs.json"


def load_vit_runs(path: Path | None = None) -> dict:
    """Chapter 16's ViT comparisons: {"runs": {variant: [one record per seed]}, "logistic regression": accuracy};
    each record holds "seed", "test_accuracy", "shuffled_accuracy" (every test image's patches moved, a new order
    per image) and "seconds"."""
    import json

    path = path or vit_runs_path()
    if not path.is_file():
        raise FileNotFoundError(f"no ViT comparisons at {path}; run `python tools/vit_runs.py`")
    return json.loads(path.read_text())


SPEECH_STEPS = 800  # the touch-tone model: 800 AdamW steps of 32 fresh clips (25,600 clips, none seen twice)
_SPEECH_TEST = (300, 12345)  # the held-out clips: 300, drawn from a seed that no training stream uses


def touch_tone_model(seed: int = 0) -> SpeechTranscriber:
    """Chapter 16's speech model: Whisper's architecture with 2 + 2 layers of width 64, 4 heads, feed-forward 256,
    80 mel filters, 1-second clips (100 frames, 50 after the stem), up to 15 decoder positions after <bos>."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        vocab = touch_tone_tokenizer().vocab_size
        cfg = speech_config(vocab_size=vocab, d_model=64, num_heads=4, num_layers=2, d_ff=256, max_len=16)
        return SpeechTranscriber(cfg, n_mels=80, n_frames=100)


def touch_tone_test() -> tuple[torch.Tensor, list[str]]:
    """The held-out touch-tone clips every measure uses: (waveforms (300, 16000), the keys dialled in each)."""
    n, seed = _SPEECH_TEST
    return touch_tone_clips(n, seed=seed)


def touch_tone_scores(model: SpeechTranscriber, waves: torch.Tensor, texts: list[str]) -> dict[str, float]:
    """Greedy transcripts of `waves` against `texts`: {"character error rate", "exact share"} (clips all right)."""
    heard = transcribe(model, waves, touch_tone_tokenizer(), sampling_rate=SAMPLING_RATE, max_new_tokens=8)
    exact = sum(h == t for h, t in zip(heard, texts)) / len(texts)
    return {"character error rate": character_error_rate(heard, texts), "exact share": exact}


def _touch_tones(steps: int | None = None, progress: bool = False, seed: int = 0) -> tuple[nn.Module, History, dict]:
    """The shipped touch-tone model: SPEECH_STEPS steps, about 40 s on a two-core laptop CPU."""
    model = touch_tone_model(seed)
    waves, texts = touch_tone_test()
    steps = steps or SPEECH_STEPS
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        history = train_touch_tones(model, steps=steps, seed=seed, progress=progress)
    model.eval()
    with torch.no_grad():
        history.eval_steps.append(steps)
        history.evals.append(touch_tone_scores(model, waves, texts))
    return model, history, {"n_mels": 80, "n_frames": 100}


def speech_runs_path() -> Path:
    """Where chapter 16's touch-tone seeds ship: transformer_lib/checkpoints/speech_runs.json (tools/speech_runs.py)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "speech_runs.json"


def load_speech_runs(path: Path | None = None) -> dict:
    """Chapter 16's touch-tone runs: {"runs": [one record per seed]}, each with "seed", "character_error_rate",
    "exact_share", "seconds" (held-out clips: touch_tone_test)."""
    import json

    path = path or speech_runs_path()
    if not path.is_file():
        raise FileNotFoundError(f"no touch-tone runs at {path}; run `python tools/speech_runs.py`")
    return json.loads(path.read_text())


# Chapter 21, a model that shows its work: one small model taught addition directly or with worked steps (tl.reasoning),
# then GRPO with a program's reward from a shorter scratchpad run. tools/reasoning_runs.py makes the runs.
ADDITION_STEPS = 600  # the direct and scratchpad models: 600 AdamW steps of ADDITION_BATCH fresh problems (38,400)
ADDITION_BATCH = 64
ADDITION_LONG_STEPS = 2400  # the direct model again with four times the problems (153,600)
ADDITION_START_STEPS = 400  # the scratchpad model GRPO starts from: a 400-step run (its own schedule), partly right
ADDITION_DIGITS = (1, 2, 3, 4, 5, 6)  # measured at each: 1 to 4 as trained, 5 and 6 longer than any trained on
ADDITION_PROBLEMS = 200  # greedy accuracy: fresh problems at each number of digits, per seed
REASONING_GRPO = {"steps": 150, "problems per step": 16, "group": 8, "lr": 1e-4, "beta": 0.04, "digits": (3, 4)}
REASONING_SAMPLES = {"digits": (3, 4), "problems": 100, "samples": 16}  # pass@k, the vote and best-of-N
# the learned verifier: trained on the start model's samples of other problems (`samples` answers to each of `problems`
# problems of each number of `digits`, drawn from random.Random(VERIFIER_PROBLEM_SEED + seed)), then scoring the
# REASONING_SAMPLES draws of the same seed
REASONING_VERIFIER = {"digits": (3, 4), "problems": 1500, "samples": 4, "steps": 800, "lr": 3e-4}
VERIFIER_PROBLEM_SEED = 10_000
LM_EVAL_PROBLEMS = {"digits": (3, 4), "problems": 200, "seed": 21}  # lm-evaluation-harness's run on addition_start


def _addition(
    style: str, steps: int | None = None, progress: bool = False, seed: int = 0, full: int = ADDITION_STEPS
) -> tuple[nn.Module, History, dict]:
    """A `style` model of tl.reasoning: `steps` (default `full`) steps of ADDITION_BATCH problems of 1 to 4 digits.
    Its one evaluation, at the end: greedy accuracy on 100 problems of 3 and of 4 digits (seed 99's problems)."""
    model = reasoning.arithmetic_lm(seed)
    held_out = lambda m: {f"{d} digits": reasoning.accuracy(m, style, d, 100, seed=99).mean for d in (3, 4)}
    history = reasoning.train(
        model, style, steps or full, batch_size=ADDITION_BATCH, seed=seed, progress=progress, eval_fn=held_out
    )
    return model, history, {}


def addition_scores(model: nn.Module, style: str, seed: int) -> dict[str, str]:
    """Greedy right or wrong on ADDITION_PROBLEMS fresh problems at each of ADDITION_DIGITS (the seed's problems):
    {"3 digits": "0110...", ...}, one character per problem, so that two models of a seed pair problem by problem."""
    scores = {}
    for d in ADDITION_DIGITS:
        result = reasoning.accuracy(model, style, d, ADDITION_PROBLEMS, seed=seed)
        scores[f"{d} digits"] = "".join(str(int(x)) for x in result.scores.tolist())
    return scores


def reasoning_grpo(reward: str, seed: int = 0, steps: int | None = None) -> tuple[nn.Module, History, dict]:
    """GRPO from the shipped addition_start with `reward` ("final answer" or "steps"), REASONING_GRPO's settings;
    the extra holds the mean reward and answer length of each step's samples."""
    from .checkpoints import load_checkpoint

    policy, _ = load_checkpoint("addition_start")
    reference, _ = load_checkpoint("addition_start")
    rewards = {"final answer": reasoning.final_answer_reward, "steps": reasoning.steps_reward}
    if reward not in rewards:
        raise ValueError(f"reward must be one of {list(rewards)}, got {reward!r}")
    cfg = REASONING_GRPO
    history, by_step, lengths = reasoning.train_grpo(
        policy, reference, rewards[reward], steps or cfg["steps"], digits=cfg["digits"],
        problems_per_step=cfg["problems per step"], group=cfg["group"], beta=cfg["beta"], lr=cfg["lr"], seed=seed,
    )  # fmt: skip
    rounded = lambda xs: [round(x, 4) for x in xs]
    return policy, history, {"reward by step": rounded(by_step), "length by step": rounded(lengths)}


def reasoning_verifier(seed: int = 0) -> tuple[nn.Module, History, dict]:
    """The learned verifier of chapter 21 (REASONING_VERIFIER): the shipped addition_start's body with a scalar head
    (alignment.RewardModel), trained by reasoning.train_verifier on addition_start's own samples at temperature 1 of
    problems from random.Random(VERIFIER_PROBLEM_SEED + seed), each labelled by the program (is_right). The extra
    holds the share of right samples it was trained on."""
    import random

    from . import arithmetic
    from .checkpoints import load_checkpoint

    start, _ = load_checkpoint("addition_start")
    cfg = REASONING_VERIFIER
    problem_rng = random.Random(VERIFIER_PROBLEM_SEED + seed)
    prompts = [
        arithmetic.problem(a, b)
        for d in cfg["digits"]
        for a, b in arithmetic.random_problems(cfg["problems"], d, problem_rng)
    ]
    repeated = [p for p in prompts for _ in range(cfg["samples"])]
    g = torch.Generator().manual_seed(VERIFIER_PROBLEM_SEED + seed)
    answers = reasoning.write(start, reasoning.arithmetic_tokenizer(), repeated, "scratchpad", temperature=1.0, rng=g)
    right = [arithmetic.is_right(p, a) for p, a in zip(repeated, answers)]
    body, _ = load_checkpoint("addition_start")
    verifier = RewardModel(body)
    history = reasoning.train_verifier(verifier, repeated, answers, right, cfg["steps"], lr=cfg["lr"], seed=seed)
    return verifier, history, {"right share": round(sum(right) / len(right), 4)}


# name -> run(seed) -> (model, history, extra): tools/reasoning_runs.py's runs, over SEEDS
REASONING_RUNS: dict[str, Callable[..., tuple[nn.Module, History, dict]]] = {
    "scratchpad": lambda seed: _addition("scratchpad", seed=seed),
    "direct": lambda seed: _addition("direct", seed=seed),
    "direct, 4x the problems": lambda seed: _addition("direct", seed=seed, full=ADDITION_LONG_STEPS),
    "grpo, final answer": lambda seed: reasoning_grpo("final answer", seed),
    "grpo, steps": lambda seed: reasoning_grpo("steps", seed),
}


def reasoning_runs_path() -> Path:
    """Where chapter 21's runs ship: transformer_lib/checkpoints/reasoning_runs.json (tools/reasoning_runs.py)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "reasoning_runs.json"


def load_reasoning_runs(path: Path | None = None) -> dict:
    """tools/reasoning_runs.py's file: {"runs": {name: [one record per seed]}, "start": [...], ...}."""
    import json

    path = path or reasoning_runs_path()
    if not path.is_file():
        raise FileNotFoundError(f"no reasoning runs at {path}; run `python tools/reasoning_runs.py`")
    return json.loads(path.read_text())


# Chapter 17, from a language model to an assistant. The base model is the shipped character model
# (chapter 10's) with the chat template's three tokens added; every stage switches dropout off.
SFT_STEPS = 400  # supervised fine-tuning: 400 AdamW steps of 64 exchanges (lr 1e-3, 50 warm-up steps)
GRPO_STEPS = (
    100  # GRPO from the shipped SFT model: 100 steps of 16 prompts x 8 sampled answers (lr 1e-4, 20 warm-up steps)
)
DPO_STEPS = 60  # DPO from the shipped SFT model: 60 steps of 32 pairs, about one pass over them (lr 3e-5)
DPO_BETAS = (0.03, 0.1, 0.3, 1.0)
_DPO_PROMPTS = (6000, 100)  # the preference pairs: the SFT model's samples on 6,000 training prompts (seeded)
_PASS_SEED = 4321  # the samples that measure pass@1: one generator seed for every model measured
REWARD_MODEL_STEPS = 150  # the reward model: 150 AdamW steps of 32 of dpo_pairs' pairs (about two passes, lr 3e-4)
_HELD_OUT_PAIRS = (1500, 7)  # the reward model's test pairs: the SFT model's samples on 1,500 held-out prompts
GRPO_UPDATES = 4  # "grpo, 4 updates per batch": AdamW steps on each batch of samples, so that the clip binds


def assistant_base() -> tuple[DecoderOnlyLM, ChatTokenizer]:
    """(the shipped character model with the three chat tokens added, dropout off, the chat tokenizer)."""
    from .checkpoints import load_checkpoint
    from .surgery import add_tokens

    tok = chat_tokenizer()
    with torch.random.fork_rng():
        base, _ = load_checkpoint("shakespeare_char")
    return without_dropout(add_tokens(base, 3)), tok


def length_reward(prompt: str, reply: str) -> float:
    """A grader with a loophole: marks for a full answer, the length over MAX_ANSWER. It never reads the content."""
    return min(len(reply), MAX_ANSWER) / MAX_ANSWER


REWARDS: dict[str, Callable[[str, str], float]] = {"exact": exact_reward, "length": length_reward}


def sampled_right(model: nn.Module, tok: ChatTokenizer, words: list[str], seed: int = _PASS_SEED) -> str:
    """One sampled answer (temperature 1) to each (task, word) prompt, tasks in TASKS order: "1" where it is exactly
    right, "0" where not. Every model is measured on the same draws of its generator, so two runs pair prompt by
    prompt."""
    prompts = [instruction(task, w) for task in TASKS for w in words]
    rng = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    replies = answer(model, tok, prompts, temperature=1.0, rng=rng)
    return "".join("1" if exact_reward(p, r) else "0" for p, r in zip(prompts, replies))


def sampled_pass_at_1(model: nn.Module, tok: ChatTokenizer, words: list[str], seed: int = _PASS_SEED) -> float:
    """pass@1 at temperature 1: the share of (task, word) prompts that one sampled answer gets exactly right."""
    right = sampled_right(model, tok, words, seed)
    return right.count("1") / len(right)


def kl_from_start(model: nn.Module, start: nn.Module, tok: ChatTokenizer, seed: int = _PASS_SEED) -> float:
    """How far `model` moved from `start`: the mean over the held-out requests of log pi_model - log pi_start, summed
    over the answer tokens of one answer sampled from `model` (temperature 1, the generator seeded as pass@1's, so
    the answers are the ones pass@1 scores). Nats per answer: a sampled estimate of KL(pi_model || pi_start)."""
    from .alignment import answer_logprobs
    from .chat import sample_answers

    _, held_out = task_words()
    prompts = [instruction(task, w) for task in TASKS for w in held_out]
    device = next(model.parameters()).device
    written = sample_answers(model, tok, prompts, temperature=1.0, rng=torch.Generator(device=device).manual_seed(seed))
    contexts = [tok.encode_chat(p)[0] for p in prompts]
    ids = pad_sequences([c + a for c, a in zip(contexts, written)], tok.base.pad_id).to(device)  # (N, T)
    mask = pad_sequences([[0] * len(c) + [1] * len(a) for c, a in zip(contexts, written)], 0).to(device)  # (N, T)
    with torch.no_grad():
        return (answer_logprobs(model(ids), ids, mask) - answer_logprobs(start(ids), ids, mask)).mean().item()


def assistant_scores(model: nn.Module, tok: ChatTokenizer) -> dict[str, float]:
    """On the held-out words: greedy exact match per task and on average, sampled pass@1, mean greedy answer length."""
    _, held_out = task_words()
    scores = {f"exact {task}": v for task, v in exact_match_by_task(model, tok, held_out).items()}
    scores["exact match"] = sum(scores.values()) / len(scores)
    scores["pass@1"] = sampled_pass_at_1(model, tok, held_out)
    replies = answer(model, tok, [instruction(task, w) for task in TASKS for w in held_out])
    scores["answer length"] = sum(len(r) for r in replies) / len(replies)
    return scores


def sft_batches(tok: ChatTokenizer, words: list[str], seed: int = 0, batch_size: int = 64) -> Iterator[tuple]:
    """Endless batches of right exchanges (ids, answer mask), each a task and a training word drawn from `seed`."""
    import random

    rng = random.Random(seed)
    while True:
        yield chat_batch(tok, random_instructions(batch_size, words, rng))


def _assistant_sft(
    steps: int | None = None, progress: bool = False, seed: int = 0, mask_prompt: bool = True
) -> tuple[nn.Module, History, dict]:
    """Supervised fine-tuning of the base model on the three word tasks: SFT_STEPS steps, about 50 s on one thread.

    The History's last evaluation holds assistant_scores, measured when the run has all SFT_STEPS steps.
    """
    model, tok = assistant_base()
    train, _ = task_words()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        history = fit(
            model,
            lambda m, batch: sft_loss(m, batch, mask_prompt=mask_prompt),
            sft_batches(tok, train, seed),
            steps=steps or SFT_STEPS,
            lr=1e-3,
            warmup=50,
            progress=progress,
            desc="supervised fine-tuning" + ("" if mask_prompt else ", prompt not masked"),
        )
    if history.steps[-1] + 1 >= SFT_STEPS:  # a short re-run of the first steps skips the held-out scores
        history.eval_steps.append(history.steps[-1])
        history.evals.append(assistant_scores(model, tok))
    return model, history, {}


def dpo_pairs(model: nn.Module, tok: ChatTokenizer) -> list[tuple[str, str, str]]:
    """Chapter 17's preference pairs: (prompt, right answer, a wrong answer the SFT model sampled) on training words."""
    return _sampled_pairs(model, tok, task_words()[0], *_DPO_PROMPTS)


def held_out_pairs(model: nn.Module, tok: ChatTokenizer) -> list[tuple[str, str, str]]:
    """Preference pairs as dpo_pairs makes them, on held-out words: the reward model's test set."""
    return _sampled_pairs(model, tok, task_words()[1], *_HELD_OUT_PAIRS)


def _sampled_pairs(model: nn.Module, tok: ChatTokenizer, words: list[str], n: int, seed: int) -> list[tuple]:
    """preference_pairs on n requests about `words`, the requests and the samples both drawn from `seed`."""
    import random

    prompts = random_instructions(n, words, random.Random(seed))
    rng = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    return preference_pairs(model, tok, prompts, rng)


def _from_sft() -> tuple[nn.Module, nn.Module, ChatTokenizer]:
    """(policy, frozen reference): two copies of the shipped SFT model, dropout off; and the chat tokenizer."""
    from .checkpoints import load_checkpoint

    policy, _ = load_checkpoint("assistant_sft")
    reference, _ = load_checkpoint("assistant_sft")
    return without_dropout(policy), without_dropout(reference), chat_tokenizer()


def _assistant_grpo(
    steps: int | None = None, progress: bool = False, seed: int = 0, reward: str = "exact", updates: int = 1
) -> tuple[nn.Module, History, dict]:
    """GRPO from the shipped SFT model with REWARDS[reward]: GRPO_STEPS steps of samples, `updates` AdamW steps on
    each, about 50 s on one thread at one update. The third value returned holds "reward by step", the mean reward
    of each step's samples, "kl by step" and "clipped share by step" (train_grpo's trace; RECIPES' entry drops it).

    The History's last evaluation holds the mean reward of the first and last 20 steps' samples, and the held-out
    scores (assistant_scores) when the run has all GRPO_STEPS steps.
    """
    if reward not in REWARDS:
        raise ValueError(f"reward must be one of {list(REWARDS)}, got {reward!r}")
    policy, reference, tok = _from_sft()
    train, _ = task_words()
    trace: list[dict[str, float]] = []
    history, rewards = train_grpo(
        policy, reference, tok, train, REWARDS[reward], steps or GRPO_STEPS, lr=1e-4, seed=seed, progress=progress,
        updates=updates, trace=trace,
    )  # fmt: skip
    _rewards_and_scores(history, rewards, policy, tok)
    return policy, history, {"reward by step": rewards, **_by_step(trace)}


def _by_step(trace: list[dict[str, float]]) -> dict[str, list[float]]:
    """train_grpo's trace as lists: {"kl by step": [...], "clipped share by step": [...]}, rounded to 5 digits."""
    return {f"{key} by step": [round(t[key], 5) for t in trace] for key in ("kl", "clipped share")}


def _assistant_grpo_learned_reward(
    steps: int | None = None, progress: bool = False, seed: int = 0
) -> tuple[nn.Module, History, dict]:
    """A reward model trained at `seed` on dpo_pairs (REWARD_MODEL_STEPS steps), then GRPO from the shipped SFT model
    against it, with GRPO's steps and learning rate: about 25 s + 60 s on one thread. The program's reward is
    computed on the same samples and recorded, never trained on. The third value returned holds "reward by step"
    (the reward model's mean score), "gold reward by step" (the program's), "kl by step", the reward model's
    accuracy on its training pairs and on held_out_pairs, and its mean score of the pass@1 samples on the held-out
    requests of the trained policy ("reward model score") and of the SFT model ("reward model score, sft")."""
    import copy as _copy

    policy, reference, tok = _from_sft()
    pairs, test_pairs = dpo_pairs(reference, tok), held_out_pairs(reference, tok)
    judge = RewardModel(_copy.deepcopy(reference))
    train_reward_model(judge, tok, pairs, REWARD_MODEL_STEPS, lr=3e-4, seed=seed, progress=progress)
    gold: list[float] = []
    trace: list[dict[str, float]] = []
    train, _ = task_words()
    learned = LearnedReward(judge, tok, also=exact_reward, log=gold)
    history, rewards = train_grpo(
        policy, reference, tok, train, learned, steps or GRPO_STEPS, lr=1e-4, seed=seed, progress=progress,
        trace=trace,
    )  # fmt: skip
    _rewards_and_scores(history, rewards, policy, tok)
    _, held_out = task_words()
    requests = [instruction(task, w) for task in TASKS for w in held_out]
    judged = {}  # the reward model's mean score of each model's pass@1 samples on the held-out requests
    for key, model in (("reward model score", policy), ("reward model score, sft", reference)):
        rng = torch.Generator(device=next(model.parameters()).device).manual_seed(_PASS_SEED)
        replies = answer(model, tok, requests, temperature=1.0, rng=rng)
        judged[key] = LearnedReward(judge, tok).score(requests, replies).mean().item()
    return (
        policy,
        history,
        {
            **judged,
            "reward by step": rewards,
            "gold reward by step": gold,
            **_by_step(trace),
            "reward model accuracy": preference_accuracy(judge, tok, test_pairs),
            "reward model training accuracy": preference_accuracy(judge, tok, pairs),
            "reward model pairs": [len(pairs), len(test_pairs)],
        },
    )


def _assistant_ppo(steps: int | None = None, progress: bool = False, seed: int = 0) -> tuple[nn.Module, History, dict]:
    """PPO from the shipped SFT model with the checker's reward (alignment.train_ppo): GRPO's steps, samples, KL
    weight and learning rate, GRPO_UPDATES updates per batch, a value model started from the SFT model with a zero
    head; about 3 minutes on one thread. The History's last evaluation holds what GRPO's does; the third value
    returned holds "reward by step", "kl by step", "clipped share by step" and "value loss by step"."""
    import copy as _copy

    policy, reference, tok = _from_sft()
    critic = RewardModel(_copy.deepcopy(reference))
    train, _ = task_words()
    trace: list[dict[str, float]] = []
    history, rewards = train_ppo(
        policy, critic, reference, tok, train, REWARDS["exact"], steps or GRPO_STEPS, lr=1e-4, seed=seed,
        updates=GRPO_UPDATES, progress=progress, trace=trace,
    )  # fmt: skip
    _rewards_and_scores(history, rewards, policy, tok)
    value_loss = {"value loss by step": [round(t["value loss"], 5) for t in trace]}
    return policy, history, {"reward by step": rewards, **_by_step(trace), **value_loss}


def _assistant_expert_iteration(
    steps: int | None = None, progress: bool = False, seed: int = 0
) -> tuple[nn.Module, History, dict]:
    """Expert iteration from the shipped SFT model with the checker's reward: GRPO's steps, samples and learning
    rate (alignment.train_expert_iteration), about 40 s on one thread. The History's last evaluation holds the
    mean reward of the first and last 20 steps' samples, and the held-out scores after all GRPO_STEPS steps; the
    third value returned holds "reward by step", the mean reward of each step's samples."""
    policy, _, tok = _from_sft()
    train, _ = task_words()
    history, rewards = train_expert_iteration(
        policy, tok, train, REWARDS["exact"], steps or GRPO_STEPS, lr=1e-4, seed=seed, progress=progress
    )
    _rewards_and_scores(history, rewards, policy, tok)
    return policy, history, {"reward by step": rewards}


def _rewards_and_scores(history: History, rewards: list[float], policy: nn.Module, tok: ChatTokenizer) -> None:
    """Append to `history` the mean reward of the first and last 20 steps, and assistant_scores when the run had
    all GRPO_STEPS steps (a short re-run skips them)."""
    window = min(20, len(rewards))
    scores = assistant_scores(policy, tok) if len(rewards) >= GRPO_STEPS else {}
    history.eval_steps.append(history.steps[-1])
    history.evals.append(
        {
            **scores,
            "reward, first steps": sum(rewards[:window]) / window,
            "reward, last steps": sum(rewards[-window:]) / window,
        }
    )


def _assistant_grpo_own_sft(
    steps: int | None = None, progress: bool = False, seed: int = 0
) -> tuple[nn.Module, History, dict]:
    """Supervised fine-tuning at `seed`, then GRPO from that model at `seed` (about 50 s + 50 s on one thread), so
    that the RL gain is measured against the SFT run it started from. The History's last evaluation holds GRPO's
    rewards and scores, and the SFT model's scores under keys that start with "sft "; the third value returned holds
    "sft right", the held-out prompts the SFT model's sampled answers got right (sampled_right)."""
    start, sft_history, _ = _assistant_sft(seed=seed)
    sft_scores = sft_history.evals[-1] if sft_history.evals else {}
    policy, reference, tok = without_dropout(start), without_dropout(copy.deepcopy(start)), chat_tokenizer()
    train, held_out = task_words()
    sft_right = sampled_right(start, tok, held_out) if sft_scores else ""  # before GRPO moves the weights
    history, rewards = train_grpo(
        policy, reference, tok, train, REWARDS["exact"], steps or GRPO_STEPS, lr=1e-4, seed=seed, progress=progress
    )
    _rewards_and_scores(history, rewards, policy, tok)
    history.evals[-1].update({f"sft {key}": value for key, value in sft_scores.items()})
    return policy, history, {"sft right": sft_right, "reward by step": rewards}


def _assistant_dpo(
    steps: int | None = None,
    progress: bool = False,
    seed: int = 0,
    beta: float = 0.1,
    nll_weight: float = 0.0,
    pairs: list[tuple[str, str, str]] | None = None,
) -> tuple[nn.Module, History, dict]:
    """DPO from the shipped SFT model on dpo_pairs: DPO_STEPS steps of 32 pairs, about 12 s on one thread.

    `pairs` may be given when several runs share them (they are dpo_pairs of the shipped SFT model).
    """
    policy, reference, tok = _from_sft()
    pairs = dpo_pairs(reference, tok) if pairs is None else pairs
    history = train_dpo(
        policy, reference, tok, pairs, steps or DPO_STEPS, beta=beta, lr=3e-5, seed=seed, progress=progress,
        nll_weight=nll_weight,
    )  # fmt: skip
    history.eval_steps.append(history.steps[-1])
    history.evals.append({**assistant_scores(policy, tok), "pairs": float(len(pairs))})
    return policy, history, {}


def user_imitation(model: nn.Module, tok: ChatTokenizer, samples: int = 64, seed: int = 0) -> float:
    """The share of `samples` continuations of a lone ``<|user|>`` that start like a request ('reverse '...).

    A model trained on the whole exchange learned to write the user's part too; one trained on the
    answers only never saw what follows ``<|user|>``.
    """
    from .decoding import generate

    device = next(model.parameters()).device
    rng = torch.Generator(device=device).manual_seed(seed)
    prompt = torch.full((samples, 1), tok.user_id, device=device)  # (samples, 1)
    written = generate(model, prompt, 8, temperature=1.0, rng=rng)[:, 1:]  # (samples, 8)
    starts = tuple(f"{task} " for task in TASKS)
    return (
        sum(tok.base.decode([i for i in row if i < tok.base.vocab_size]).startswith(starts) for row in written.tolist())
        / samples
    )


# chapter 17's comparisons (tools/assistant_runs.py over SEEDS): name -> run(seed) -> (model, history, {}); the DPO
# runs also take pairs= (dpo_pairs of the shipped SFT model, computed once for all of them).
# The SFT runs vary the seed of the SFT run itself; the DPO and GRPO runs all start from the shipped SFT
# model (seed 0) and vary their own seed (DPO: the order of the same pairs; GRPO: the prompts and samples).
ASSISTANT_RUNS: dict[str, Callable[..., tuple[nn.Module, History, dict]]] = {
    "sft": lambda seed: _assistant_sft(seed=seed),
    "sft, prompt not masked": lambda seed: _assistant_sft(seed=seed, mask_prompt=False),
    "grpo": lambda seed: _assistant_grpo(seed=seed),
    "grpo, length reward": lambda seed: _assistant_grpo(seed=seed, reward="length"),
    "grpo, learned reward": lambda seed: _assistant_grpo_learned_reward(seed=seed),
    f"grpo, {GRPO_UPDATES} updates per batch": lambda seed: _assistant_grpo(seed=seed, updates=GRPO_UPDATES),
    "ppo": lambda seed: _assistant_ppo(seed=seed),
    "expert iteration": lambda seed: _assistant_expert_iteration(seed=seed),
    "grpo from its own sft": lambda seed: _assistant_grpo_own_sft(seed=seed),
    **{
        f"dpo, beta {beta}": (lambda seed, pairs=None, beta=beta: _assistant_dpo(seed=seed, beta=beta, pairs=pairs))
        for beta in DPO_BETAS
    },
    "dpo + nll, beta 0.1": lambda seed, pairs=None: _assistant_dpo(seed=seed, beta=0.1, nll_weight=1.0, pairs=pairs),
}


def assistant_runs_path() -> Path:
    """Where chapter 17's seeds ship: transformer_lib/checkpoints/assistant_runs.json (tools/assistant_runs.py)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "assistant_runs.json"


def load_assistant_runs(path: Path | None = None) -> dict:
    """Chapter 17's runs: {"runs": {name: [one record per seed]}, "base": scores}; each record holds "seed",
    the held-out scores of assistant_scores, "seconds", and for GRPO the mean rewards of the first and last steps."""
    import json

    path = path or assistant_runs_path()
    if not path.is_file():
        raise FileNotFoundError(f"no chapter 17 runs at {path}; run `python tools/assistant_runs.py`")
    return json.loads(path.read_text())


# Chapter 18 ("Learning without labels") pre-trains a small wav2vec 2.0 on touch-tone clips at 8 kHz, the
# telephone network's rate, with no labels, then teaches it the keys with CTC from a few labelled clips.
W2V_RATE = 8000  # samples per second: a telephone line's
W2V_KERNELS = (10, 3, 3, 3, 3, 2)  # the paper's stack without its last layer: 20 ms frames at 8 kHz
W2V_STRIDES = (5, 2, 2, 2, 2, 2)  # a hop of 160 samples (20 ms), a receptive field of 240 (30 ms)
W2V_STEPS = 2000  # pre-training: 2,000 AdamW steps of 32 fresh unlabelled clips (lr 5e-4, 100 warm-up steps)
W2V_DISTRACTORS = 20  # distractors per hidden frame, from the clip's other hidden frames (the paper: 100, of ~380)
W2V_TAU = (2.0, 0.5, 0.998)  # the Gumbel temperature: from 2, times 0.998 a step, down to 0.5 (the base model's range)
W2V_CODEBOOKS = (2, 32)  # the quantizer: 2 codebooks of 32 entries, 1,024 codes (the paper: 2 of 320)
CTC_STEPS = 600  # CTC fine-tuning: 600 AdamW steps of 16 labelled clips drawn from the budget (lr 1e-3)
CTC_BUDGETS = (8, 32, 128, 512)  # labelled clips: from 8 (8 seconds of audio) to the whole pool
_CTC_POOL = (512, 777)  # the labelled pool: 512 clips from a seed no other stream uses
_W2V_HELD_OUT = (64, 4242)  # the clips pre-training is measured on: masks and distractors fixed by the seed


def telephone_clips(n: int, seed: int | torch.Generator, **clips) -> tuple[torch.Tensor, list[str]]:
    """n touch-tone clips at W2V_RATE, each normalised (wav2vec2.normalize_samples): ((n, 8000), the keys).

    They are chapter 16's clips of the same seed, every other sample kept: the tones (all under 1.5 kHz) are the
    same sines, sampled half as often, and every other sample of white noise is white noise of the same power, so
    the signal-to-noise ratio is unchanged. A generator draws what chapter 16's stream of that seed draws.
    `clips` go to touch_tone_clips (snr_db=None: the same clips without their noise).
    """
    waves, texts = touch_tone_clips(n, seed=seed, sampling_rate=SAMPLING_RATE, **clips)  # (n, 16000)
    return normalize_samples(waves[:, :: SAMPLING_RATE // W2V_RATE].contiguous()), texts  # (n, 8000)


def telephone_test() -> tuple[torch.Tensor, list[str]]:
    """Chapter 16's 300 held-out clips (touch_tone_test's), every other sample, normalised: ((300, 8000), keys)."""
    n, seed = _SPEECH_TEST
    return telephone_clips(n, seed)


def telephone_frame_labels(n: int, seed: int) -> torch.Tensor:
    """What each 20 ms frame of `telephone_clips(n, seed)` holds, from the same clips drawn without noise:
    (n, 49) long, 0 where the frame's 240 samples are all silence, key i + 1 (of TOUCH_TONE_KEYS) where they all
    sound one key (the strongest row and column tone, by `dft_power`), -1 where the frame straddles an edge."""
    clean, _ = touch_tone_clips(n, seed=seed, snr_db=None)  # (n, 16000): the clips minus their noise
    clean = clean[:, :: SAMPLING_RATE // W2V_RATE]  # (n, 8000): at 8 kHz, as telephone_clips keeps them
    field, hop = 240, 160  # our stack's receptive field and hop (wav2vec2.conv_geometry(W2V_KERNELS, W2V_STRIDES))
    windows = clean.unfold(1, field, hop)  # (n, 49, 240): the samples each frame sees
    sounding = (windows != 0).double().mean(-1)  # (n, 49): the share of the field inside a tone
    power = dft_power(windows.double(), (*ROW_TONES, *COLUMN_TONES), W2V_RATE)  # (n, 49, 7)
    key = power[..., :4].argmax(-1) * 3 + power[..., 4:].argmax(-1)  # (n, 49): row * 3 + column
    labels = torch.full(sounding.shape, -1, dtype=torch.long)
    labels[sounding == 0] = 0
    labels[sounding == 1] = key[sounding == 1] + 1
    return labels


def _telephone_shape(seed: int) -> dict:
    torch.manual_seed(seed)
    cfg = wav2vec2_config(
        d_model=64,
        num_heads=4,
        num_layers=2,
        d_ff=128,
        dropout=0.0,
        vocab_size=len(TOUCH_TONE_KEYS) + 1,
        norm_first=True,
        final_norm=True,  # the "stable layer norm" variant: post-LN did not leave the blank here
    )
    return dict(
        config=cfg,
        conv_dims=(32,) * len(W2V_KERNELS),
        kernels=W2V_KERNELS,
        strides=W2V_STRIDES,
        pos_kernel=16,
        pos_groups=4,
    )


def telephone_wav2vec2(seed: int = 0) -> Wav2Vec2ForPreTraining:
    """Chapter 18's wav2vec 2.0 for pre-training: six convolutions of 32 channels, a pre-LN encoder of 2 layers of
    width 64 (4 heads, feed-forward 128), positions from a 16-frame convolution in 4 groups, and a quantizer of
    2 codebooks of 32 entries; contrastive and code vectors projected to 64."""
    with torch.random.fork_rng():
        groups, entries = W2V_CODEBOOKS
        return Wav2Vec2ForPreTraining(
            groups=groups, entries=entries, code_dim=64, proj_dim=64, **_telephone_shape(seed)
        )


def telephone_ctc(seed: int = 0, pretrained: Wav2Vec2ForPreTraining | None = None) -> Wav2Vec2ForCTC:
    """The same network with a CTC head over the blank (id 0) and the twelve keys (ids 1 to 12): fresh weights from
    `seed`, or the pre-trained model's network (copied) under a fresh head."""
    with torch.random.fork_rng():
        model = Wav2Vec2ForCTC(**_telephone_shape(seed))
    if pretrained is not None:
        model.wav2vec2.load_state_dict(pretrained.wav2vec2.state_dict())
    return model


def telephone_batches(batch_size: int, seed: int, **clips) -> Iterator[tuple[torch.Tensor, ...]]:
    """Endless pre-training batches: (clips (B, 8000), hidden frames (B, T), distractors (B, T, K), the Gumbel
    temperature as a 0-d tensor), one generator seeded with `seed` drawing each in turn; `clips` go to
    touch_tone_clips (keys, tone_ms, gap_ms, snr_db)."""
    generator = torch.Generator().manual_seed(seed)
    frames = conv_frames(W2V_RATE, W2V_KERNELS, W2V_STRIDES)
    start, low, factor = W2V_TAU
    step = 0
    while True:
        waves, _ = telephone_clips(batch_size, generator, **clips)
        mask = span_mask(batch_size, frames, min_spans=2, generator=generator)  # (B, T): the paper's 0.065 and 10
        negatives = sample_negatives(mask, W2V_DISTRACTORS, generator=generator)  # (B, T, K)
        yield waves, mask, negatives, torch.tensor(max(low, start * factor**step))
        step += 1


def _w2v_loss(model: Wav2Vec2ForPreTraining, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The pre-training loss per hidden frame: (contrastive + 0.1 x diversity x hidden frames) / hidden frames."""
    waves, mask, negatives, tau = batch
    model.quantizer.tau = float(tau)
    loss, _, _ = model.loss(waves, mask, negatives)
    return loss / mask.sum()


@torch.no_grad()
def w2v_scores(model: Wav2Vec2ForPreTraining) -> dict[str, float]:
    """On 64 held-out clips with fixed masks and distractors, in eval mode: the contrastive loss per hidden frame,
    the share of hidden frames whose own code scores highest ("pick accuracy", chance about 1 / 21) and the
    codebooks' perplexity (2 when one entry of each is used, 64 when all alike)."""
    was = model.training
    model.eval()
    n, seed = _W2V_HELD_OUT
    generator = torch.Generator().manual_seed(seed)
    waves, _ = telephone_clips(n, generator)
    frames = conv_frames(W2V_RATE, W2V_KERNELS, W2V_STRIDES)
    mask = span_mask(n, frames, min_spans=2, generator=generator)
    negatives = sample_negatives(mask, W2V_DISTRACTORS, generator=generator)
    device = next(model.parameters()).device
    waves, mask, negatives = waves.to(device), mask.to(device), negatives.to(device)
    context, targets, perplexity = model(waves, mask)
    logits = contrastive_logits(context, targets, negatives, model.temperature)  # (B, T, 1 + K)
    model.train(was)
    return {
        "contrastive loss": contrastive_loss(logits, mask, reduction="mean").item(),
        "pick accuracy": (logits.argmax(-1)[mask] == 0).double().mean().item(),
        "perplexity": perplexity.item(),
    }


def _telephone_wav2vec2(steps: int | None = None, progress: bool = False, seed: int = 0) -> tuple:
    """The shipped pre-trained model: W2V_STEPS steps, about 5 minutes on one laptop CPU thread."""
    model = telephone_wav2vec2(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # the Gumbel noise
        history = fit(
            model,
            _w2v_loss,
            telephone_batches(32, seed),
            steps or W2V_STEPS,
            lr=5e-4,
            warmup=100,
            eval_fn=w2v_scores,
            eval_every=250,
            progress=progress,
            desc="wav2vec 2.0, no labels",
        )
    groups, entries = W2V_CODEBOOKS
    init = dict(
        groups=groups,
        entries=entries,
        code_dim=64,
        proj_dim=64,
        conv_dims=(32,) * len(W2V_KERNELS),
        kernels=W2V_KERNELS,
        strides=W2V_STRIDES,
        pos_kernel=16,
        pos_groups=4,
    )
    return model, history, init


def ctc_targets(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys -> CTC's targets: (ids (B, S) padded with the blank's 0, key i of TOUCH_TONE_KEYS as i + 1; lengths)."""
    ids = [[TOUCH_TONE_KEYS.index(key) + 1 for key in text] for text in texts]
    return pad_sequences(ids, 0), torch.tensor([len(i) for i in ids])


@torch.no_grad()
def ctc_transcribe(model: Wav2Vec2ForCTC, waves: torch.Tensor, batch_size: int = 150) -> list[str]:
    """Normalised clips (B, 8000) -> the keys heard, greedy CTC decoding (best path, collapsed)."""
    model.eval()
    device = next(model.parameters()).device
    heard = []
    for i in range(0, waves.shape[0], batch_size):
        log_probs = model(waves[i : i + batch_size].to(device)).log_softmax(-1).transpose(0, 1).cpu()  # (T, B, C)
        heard += ["".join(TOUCH_TONE_KEYS[s - 1] for s in path) for path in greedy_ctc_decode(log_probs)]
    return heard


def ctc_scores(model: Wav2Vec2ForCTC, waves: torch.Tensor, texts: list[str]) -> dict:
    """{"character error rate", "exact share", "edits"} of the greedy transcripts; "edits" is each clip's edit
    distance (a list), so that two models pair clip by clip."""
    heard = ctc_transcribe(model, waves)
    edits = [edit_distance(h, t) for h, t in zip(heard, texts)]
    return {
        "character error rate": character_error_rate(heard, texts),
        "exact share": sum(h == t for h, t in zip(heard, texts)) / len(texts),
        "edits": edits,
    }


def _train_ctc(
    model: Wav2Vec2ForCTC,
    batches: Iterator[tuple],
    steps: int,
    seed: int,
    desc: str,
    progress: bool,
    evaluate: bool = True,
):
    """CTC on batches of (normalised clips (B, 8000), targets (B, S), lengths (B,)): AdamW at 1e-3, 50 warm-up
    steps; returns (model, ctc_scores on telephone_test() plus "seconds" and "first_losses"; without the scores when
    evaluate=False)."""
    frames = conv_frames(W2V_RATE, W2V_KERNELS, W2V_STRIDES)

    def loss_fn(m: Wav2Vec2ForCTC, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, y, n = batch
        log_probs = m(x).log_softmax(-1).transpose(0, 1)  # (T, B, C)
        return F.ctc_loss(log_probs, y, torch.full((x.shape[0],), frames), n)

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        history = fit(model, loss_fn, batches, steps, lr=1e-3, warmup=50, progress=progress, desc=desc)
    ran = {"seconds": history.seconds, "first_losses": history.losses[:20]}
    return model, (ctc_scores(model, *telephone_test()) | ran) if evaluate else ran


def finetune_ctc(
    budget: int,
    seed: int,
    pretrained: Wav2Vec2ForPreTraining | None = None,
    *,
    steps: int = CTC_STEPS,
    progress: bool = False,
    evaluate: bool = True,
) -> tuple[Wav2Vec2ForCTC, dict]:
    """CTC fine-tuning on `budget` labelled clips of the pool (the seed picks which, the head's weights and the
    batches), from the pre-trained network or, with pretrained=None, from scratch; every weight trains. Returns
    (model, ctc_scores on telephone_test() plus "seconds" and "first_losses"); evaluate=False, only the last two
    (a re-run of the first steps needs no scores)."""
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= _CTC_POOL[0]:
        raise ValueError(f"budget must be an int from 1 to the pool's {_CTC_POOL[0]} clips, got {budget!r}")
    pool, texts = telephone_clips(*_CTC_POOL)
    rows = torch.randperm(_CTC_POOL[0], generator=torch.Generator().manual_seed(seed))[:budget]
    waves = pool[rows]  # (budget, 8000)
    targets, lengths = ctc_targets([texts[i] for i in rows])  # (budget, S), (budget,)

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        generator = torch.Generator().manual_seed(seed)
        while True:
            pick = torch.randint(budget, (16,), generator=generator)  # (16,): with replacement, any budget
            yield waves[pick], targets[pick], lengths[pick]

    start = "pre-trained" if pretrained is not None else "from scratch"
    return _train_ctc(telephone_ctc(seed, pretrained), batches(), steps, seed,
                      f"CTC, {budget} labelled clips, {start}", progress, evaluate)  # fmt: skip


def ctc_stream(
    seed: int, pretrained: Wav2Vec2ForPreTraining | None = None, *, steps: int = SPEECH_STEPS, progress: bool = False
) -> tuple[Wav2Vec2ForCTC, dict]:
    """CTC on chapter 16's training stream: `steps` batches of 32 fresh labelled clips, the very clips
    train_touch_tones(seed=seed) draws (touch_tone_batches), every other sample, so that the CTC model and
    chapter 16's encoder-decoder of the same seed hear the same clips. Returns (model, ctc_scores plus "seconds")."""

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        generator = torch.Generator().manual_seed(seed)
        while True:
            waves, texts = telephone_clips(32, generator)
            yield (waves, *ctc_targets(texts))

    start = "pre-trained" if pretrained is not None else "from scratch"
    return _train_ctc(telephone_ctc(seed, pretrained), batches(), steps, seed,
                      f"CTC, fresh labelled clips, {start}", progress)  # fmt: skip


def ctc_runs_path() -> Path:
    """Where chapter 18's fine-tuning runs ship: transformer_lib/checkpoints/ctc_runs.json (tools/ctc_runs.py)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "ctc_runs.json"


def load_ctc_runs(path: Path | None = None) -> dict:
    """Chapter 18's CTC runs: {"runs": {"pre-trained <budget>" | "scratch <budget>": [one record per seed]}, ...};
    each record holds "seed", "character_error_rate", "exact_share", "edits" (per held-out clip) and "seconds"."""
    import json

    path = path or ctc_runs_path()
    if not path.is_file():
        raise FileNotFoundError(f"no CTC runs at {path}; run `python tools/ctc_runs.py`")
    return json.loads(path.read_text())


# Chapter 18's BART: pre-trained on the ten training plays (chapter 15's words) to write back lines broken by text
# infilling, then measured on Twelfth Night: a gap of unknown length against chapter 15's BERT, and putting the
# punctuation back into lines stripped of it, over label budgets, against the same model from scratch.
BART_LINE = 24  # tokens per line: words and marks, cut from the play's stream at any token
BART_STEPS = 15_000  # pre-training: 15,000 AdamW steps of 64 fresh lines (lr 1e-3, 500 warm-up steps)
BART_BUDGETS = (32, 128, 512, 2048)  # lines with their punctuation, from the pool of the training plays
BART_TUNE_STEPS = 300  # punctuation fine-tuning: 300 AdamW steps of 32 lines drawn from the budget (lr 5e-4)
BART_GAPS = (1, 2, 3)  # the gap's length in tokens; it starts at token BART_GAP_AT of a held-out line
BART_GAP_AT = 10
BART_HELD_OUT = 300  # Twelfth Night's first 300 lines: the gaps and the punctuation are measured on them
_BART_NOISE_SEED = 99  # the held-out lines' infilling, the same for every model measured


def plays_lines(split: str = "train") -> torch.Tensor:
    """The split's plays as one stream of chapter 15's word ids, cut into lines of BART_LINE: (N, BART_LINE)."""
    ids = torch.tensor(plays_words().encode(corpus.shakespeare(split)))  # (T,)
    n = ids.numel() // BART_LINE
    return ids[: n * BART_LINE].view(n, BART_LINE)  # (N, BART_LINE)


def plays_bart(vocab_size: int, seed: int = 0) -> BartForConditionalGeneration:
    """The chapter's BART: 2 + 2 post-LN layers of width 128 (4 heads, feed-forward 512), no dropout, chapter 15's
    specials ([PAD] 0 pads, [CLS] 1 begins what the decoder writes, [SEP] 2 ends it, [MASK] 3 hides a span)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        cfg = bart_config(
            vocab_size=vocab_size,
            d_model=128,
            num_heads=4,
            num_layers=2,
            num_decoder_layers=2,
            d_ff=512,
            max_len=2 * BART_LINE,
            dropout=0.0,
            pad_id=PAD,
        )
        return BartForConditionalGeneration(cfg)


def _denoise(lines: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Lines (B, BART_LINE) -> (src (B, S), tgt (B, BART_LINE + 2)): text infilling, 30% in Poisson(3) spans."""
    return denoising_pairs(list(lines), mask_id=MASK, bos_id=CLS, eos_id=SEP, pad_id=PAD, generator=generator)


def bart_batches(batch_size: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless pre-training batches of the training plays: lines of BART_LINE tokens from anywhere in the stream,
    each broken afresh when drawn; one generator seeded with `seed` draws both."""
    stream = plays_lines("train").flatten()  # (T,)
    generator = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(stream.numel() - BART_LINE, (batch_size,), generator=generator)  # (B,)
        lines = stream[starts[:, None] + torch.arange(BART_LINE)]  # (B, BART_LINE)
        yield _denoise(lines, generator)


@torch.no_grad()
def bart_scores(model: BartForConditionalGeneration, exact: bool = True) -> dict[str, float]:
    """The denoising loss (nats per token written) on the first BART_HELD_OUT lines of Twelfth Night, broken by a
    fixed seed, and the share of those lines written back exactly (greedy; left out when exact=False)."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    lines = plays_lines("validation")[:BART_HELD_OUT]  # (300, BART_LINE)
    src, tgt = _denoise(lines, torch.Generator().manual_seed(_BART_NOISE_SEED))
    src, tgt = src.to(device), tgt.to(device)
    scores = {"denoising loss": seq2seq_loss(model, (src, tgt), smoothing=0.0).item()}
    if exact:
        wrote = bart_written(model, src, BART_LINE + 4)
        scores["exact lines"] = sum(w == t for w, t in zip(wrote, lines.tolist())) / len(wrote)
    model.train(was)
    return scores


def bart_written(model: BartForConditionalGeneration, src: torch.Tensor, max_new_tokens: int) -> list[list[int]]:
    """bart.written with the chapter's markers, in batches of 256 sources: src (B, S) -> B lists of ids."""
    out = []
    for start in range(0, src.shape[0], 256):
        out += written(model, src[start : start + 256], bos_id=CLS, eos_id=SEP, max_new_tokens=max_new_tokens)
    return out


def _plays_bart(
    steps: int | None = None, progress: bool = False, seed: int = 0, device: str | None = None, evaluate: bool = True
) -> tuple[nn.Module, History, dict]:
    """BART pre-trained on the training plays by text infilling: BART_STEPS AdamW steps of 64 lines, broken afresh
    when drawn, the held-out denoising loss measured every 1,000 steps and at the end (never, when evaluate=False:
    a re-run of the first steps needs no scores)."""
    model = plays_bart(plays_words().vocab_size, seed=seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)  # dropout's masks
        history = fit(
            model,
            lambda m, batch: seq2seq_loss(m, batch, smoothing=0.0),
            bart_batches(64, seed),
            steps=steps or BART_STEPS,
            lr=1e-3,
            warmup=500,
            eval_fn=bart_scores if evaluate else None,
            eval_every=1000 if evaluate else 0,
            device=device,
            progress=progress,
            desc="BART on the plays (text infilling)",
        )
    return model, history, {}


def punctuation_marks() -> tuple[int, ...]:
    """The ids of chapter 15's vocabulary that hold no letter: the marks the punctuation task takes away."""
    return tuple(
        i
        for i, w in enumerate(plays_words().itos)
        if i >= len(PlayWords.special_ids) and not any(c.isalnum() for c in w)
    )


def punctuation_pairs(lines: torch.Tensor, marks: tuple[int, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Lines (B, BART_LINE) -> (src: each line without its marks, then [SEP]; tgt: [CLS], the line, [SEP]).
    marks: punctuation_marks(), computed once by a caller that makes many batches."""
    marks, pad = punctuation_marks() if marks is None else marks, torch.nn.utils.rnn.pad_sequence
    sources = [torch.cat([strip_marks(line, marks), line.new_tensor([SEP])]) for line in lines]
    targets = [torch.cat([line.new_tensor([CLS]), line, line.new_tensor([SEP])]) for line in lines]
    return pad(sources, batch_first=True, padding_value=PAD), pad(targets, batch_first=True, padding_value=PAD)


def punctuation_scores(model: BartForConditionalGeneration, lines: torch.Tensor | None = None) -> dict:
    """Punctuation put back into lines stripped of it (default: the BART_HELD_OUT held-out lines), greedily: the
    token error rate (edits to the true line over its tokens), the share of lines exactly right, each line's edits
    ("edits", for paired comparisons) and the first five lines written ("written"). Writing the stripped line back
    unchanged scores the marks' share."""
    lines = plays_lines("validation")[:BART_HELD_OUT] if lines is None else lines
    src, _ = punctuation_pairs(lines)
    wrote = bart_written(model, src.to(next(model.parameters()).device), BART_LINE + 8)
    edits = [edit_distance(w, t) for w, t in zip(wrote, lines.tolist())]
    return {
        "token error rate": sum(edits) / lines.numel(),
        "exact lines": sum(e == 0 for e in edits) / len(edits),
        "edits": edits,
        "written": wrote[:5],
    }


def finetune_punctuation(
    budget: int,
    seed: int,
    pretrained: BartForConditionalGeneration | None = None,
    *,
    steps: int = BART_TUNE_STEPS,
    progress: bool = False,
    evaluate: bool = True,
) -> tuple[BartForConditionalGeneration, dict]:
    """Teach BART to put the punctuation back from `budget` lines of the training plays (the seed picks which, and
    the batches and dropout), from the pre-trained model or, with pretrained=None, from scratch; every weight
    trains, at the same rate either way. Returns (model, punctuation_scores plus "seconds" and "first_losses"); with
    evaluate=False, only the last two (a re-run of the first steps needs no scores)."""
    pool = plays_lines("train")  # (N, BART_LINE)
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= pool.shape[0]:
        raise ValueError(f"budget must be an int from 1 to the pool's {pool.shape[0]} lines, got {budget!r}")
    generator = torch.Generator().manual_seed(seed)
    chosen = pool[torch.randperm(pool.shape[0], generator=generator)[:budget]]  # (budget, BART_LINE)
    model = copy.deepcopy(pretrained) if pretrained is not None else plays_bart(plays_words().vocab_size, seed=seed)

    marks = punctuation_marks()

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield punctuation_pairs(
                chosen[torch.randint(budget, (32,), generator=generator)], marks
            )  # with replacement

    start = "pre-trained" if pretrained is not None else "from scratch"
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        history = fit(
            model,
            lambda m, batch: seq2seq_loss(m, batch, smoothing=0.0),
            batches(),
            steps=steps,
            lr=5e-4,
            warmup=30,
            progress=progress,
            desc=f"punctuation, {budget} lines, {start}",
        )
    ran = {"seconds": history.seconds, "first_losses": history.losses[:20]}
    return model, (punctuation_scores(model) | ran) if evaluate else ran


def gap_cases(lines: torch.Tensor | None = None) -> list[tuple[list[int], int]]:
    """The chapter's gaps: each held-out line with each length of BART_GAPS, from token BART_GAP_AT:
    [(line, length), ...], the lines in order and the lengths in turn for each."""
    lines = plays_lines("validation")[:BART_HELD_OUT] if lines is None else lines
    return [(line, length) for line in lines.tolist() for length in BART_GAPS]


def bart_gap_fills(model: BartForConditionalGeneration, cases: list[tuple[list[int], int]]) -> list[list[int] | None]:
    """What BART writes into each case's gap, told nothing but where the gap is (one [MASK]): bart.read_fill of its
    greedy line: the tokens between the line's beginning and the two tokens after the gap; None where it changed the
    beginning or never wrote those two."""
    sources = [gap_source(torch.tensor(line), BART_GAP_AT, n, mask_id=MASK, eos_id=SEP) for line, n in cases]
    src = torch.nn.utils.rnn.pad_sequence(sources, batch_first=True, padding_value=PAD)  # (N, S)
    wrote = bart_written(model, src.to(next(model.parameters()).device), BART_LINE + 6)
    return [read_fill(w, line, BART_GAP_AT, n) for w, (line, n) in zip(wrote, cases)]


@torch.no_grad()
def bert_gap_fills(
    bert: BertForMaskedLM, cases: list[tuple[list[int], int]], masks: int | None = None
) -> list[list[int]]:
    """What chapter 15's BERT writes into each gap, one word per [MASK], each its top guess (all at once): told the
    gap's length (masks=None: as many masks as missing tokens), or always `masks` of them."""
    if masks is not None and (isinstance(masks, bool) or not isinstance(masks, int) or masks < 1):
        raise ValueError(f"masks must be None (told the gap's length) or a positive int, got {masks!r}")
    bert.eval()
    device = next(bert.parameters()).device
    rows, counts = [], []
    for line, n in cases:
        k = n if masks is None else masks
        rows.append([CLS, *line[:BART_GAP_AT], *[MASK] * k, *line[BART_GAP_AT + n :], SEP])
        counts.append(k)
    tokens = torch.nn.utils.rnn.pad_sequence([torch.tensor(r) for r in rows], batch_first=True, padding_value=PAD)
    guesses = bert(tokens.to(device)).argmax(-1).cpu()  # (N, S)
    return [guesses[i, 1 + BART_GAP_AT : 1 + BART_GAP_AT + k].tolist() for i, k in enumerate(counts)]


def bart_runs_path() -> Path:
    """Where chapter 18's BART runs ship: transformer_lib/checkpoints/bart_runs.json (tools/bart_runs.py)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "bart_runs.json"


def load_bart_runs(path: Path | None = None) -> dict:
    """Chapter 18's BART runs: {"punctuation": {"pre-trained <budget>" | "scratch <budget>": [one record per seed]},
    "gaps": {...}, ...}; each punctuation record holds "seed", "token_error_rate", "exact_lines", "edits" and
    "seconds"."""
    import json

    path = path or bart_runs_path()
    if not path.is_file():
        raise FileNotFoundError(f"no BART runs at {path}; run `python tools/bart_runs.py`")
    return json.loads(path.read_text())


# name -> recipe(steps=None, progress=False) -> (model, history, constructor arguments beyond the config)
RECIPES: dict[str, Callable[..., tuple[nn.Module, History, dict]]] = {
    "bracket_classifier": _bracket_classifier,
    "induction": _induction,
    "numbers_to_words": _numbers_to_words,
    "shakespeare_char": lambda steps=None, progress=False: _shakespeare("char", steps, progress),
    "shakespeare_bpe": lambda steps=None, progress=False: _shakespeare("bpe", steps, progress),
    "shakespeare_2017": lambda steps=None, progress=False: _shakespeare("char", steps, progress, "2017"),
    "shakespeare_modern": lambda steps=None, progress=False: _shakespeare("char", steps, progress, "modern"),
    "twelfth_night_lora": lambda steps=None, progress=False: _adapt("lora", steps, progress),
    "twelfth_night_full": lambda steps=None, progress=False: _adapt("full", steps, progress),
    "plays_bert": _plays_bert,
    "plays_bert_order": _plays_bert_order,
    "digits_vit": _digits_vit,
    "digits_clip": _digits_clip,
    "touch_tone_codec": _touch_tone_codec,
    "touch_tone_viola": _touch_tone_viola,
    "touch_tones": _touch_tones,
    "shakespeare_moe": lambda steps=None, progress=False: _shakespeare("char", steps, progress, "moe"),
    "shakespeare_moe_unbalanced": lambda steps=None, progress=False: _shakespeare("char", steps, progress, "moe", 0.0),
    "shakespeare_draft_tiny": lambda steps=None, progress=False: _shakespeare("char", steps, progress, "draft_tiny"),
    "shakespeare_draft_small": lambda steps=None, progress=False: _shakespeare("char", steps, progress, "draft_small"),
    "assistant_sft": _assistant_sft,
    "assistant_grpo": lambda steps=None, progress=False: _assistant_grpo(steps, progress)[:2] + ({},),
    "telephone_wav2vec2": _telephone_wav2vec2,
    "plays_bart": _plays_bart,
    "addition_scratchpad": lambda steps=None, progress=False: _addition("scratchpad", steps, progress),
    "addition_direct": lambda steps=None, progress=False: _addition("direct", steps, progress),
    "addition_start": lambda steps=None, progress=False: _addition(
        "scratchpad", steps, progress, full=ADDITION_START_STEPS
    ),
}


# Chapter 14 ("From 2017 to today, part two") compares a mixture of experts with the dense model and LoRA with
# full fine-tuning over three seeds, and sweeps LoRA's rank. `python tools/seed_runs.py` makes these
# runs and writes what each ended at to seed_runs_path(); the chapter reads that file (training them takes
# longer than a notebook may). Seed 0 of each run starts as its shipped recipe does: the same weights, windows
# and dropout masks. The fine-tuning runs are the shipped recipes' full 300 steps, so their seed 0 is the
# shipped checkpoint; the mixture and dense runs stop at SEED_RUN_STEPS, with the schedule's warm-up and cosine
# decay fitted to that length, while the shipped checkpoints are single-seed runs of 3000 steps.
SEEDS = (0, 1, 2)
MOE_SEEDS = (0, 1, 2, 3, 4, 5)  # the mixture against the dense model: six paired seeds (three can never separate)
SEED_RUN_STEPS = 400  # the mixture-against-dense runs: 400 of the recipe's AdamW steps of 32 windows of 128
LORA_RANKS = (1, 4, 8, 32)  # the rank sweep, alpha held at LORA_ALPHA (so the scale alpha / r falls as r grows)
LORA_ALPHAS = (4.0, 16.0, 64.0)  # the alpha sweep at rank LORA_RANK: the adapters' scale alpha / r is 0.5, 2 or 8
LORA_CONTROL_LR = 4.0  # alpha 16 at 4 times the learning rate: does a larger alpha act as a larger learning rate?

# name -> run(seed, steps=None, progress=False) -> (model, history, {}); the metric each records is
# SEED_RUN_METRICS[name] from its last evaluation: the whole held-out play, or the play's last 20% (fine-tuning)
SEED_RUNS: dict[str, Callable[..., tuple[nn.Module, History, dict]]] = {
    "dense": lambda seed, steps=None, progress=False: _shakespeare(
        "char", steps or SEED_RUN_STEPS, progress, "gpt", seed=seed
    ),
    "moe": lambda seed, steps=None, progress=False: _shakespeare(
        "char", steps or SEED_RUN_STEPS, progress, "moe", seed=seed
    ),
    "full": lambda seed, steps=None, progress=False: _adapt("full", steps, progress, seed=seed),
    **{
        f"lora r{r}": lambda seed, steps=None, progress=False, r=r: _adapt("lora", steps, progress, seed=seed, rank=r)
        for r in LORA_RANKS
    },
    **{
        f"lora r{LORA_RANK} alpha {a:g}": lambda seed, steps=None, progress=False, a=a: _adapt(
            "lora", steps, progress, seed=seed, alpha=a
        )
        for a in LORA_ALPHAS
        if a != LORA_ALPHA  # alpha 16 at rank 8 is "lora r8"
    },
    # the control for the alpha sweep: alpha 16 at LORA_CONTROL_LR times the learning rate, beside alpha 64
    f"lora r{LORA_RANK} alpha {LORA_ALPHA:g} lr x{LORA_CONTROL_LR:g}": lambda seed, steps=None, progress=False: _adapt(
        "lora", steps, progress, seed=seed, lr_scale=LORA_CONTROL_LR
    ),
}
SEED_RUN_METRICS = {name: "validation loss" if name in ("dense", "moe") else "test loss" for name in SEED_RUNS}


def seed_runs_path() -> Path:
    """Where the seed runs' results ship: transformer_lib/checkpoints/seed_runs.json (tools/seed_runs.py writes it)."""
    from .checkpoints import CHECKPOINT_DIR

    return CHECKPOINT_DIR / "seed_runs.json"


def load_seed_runs(path: Path | None = None) -> dict:
    """The seed runs' results: {"runs": {name: [one record per seed, by seed]}, "base test loss": nats, ...}.

    Each record holds seed, steps, "loss" (the run's metric in nats per character), "bits" (the same in
    bits per character), "seconds" (the run's wall time, its evaluations included) and "first_losses".
    """
    import json

    data = json.loads((path or seed_runs_path()).read_text())
    data["runs"] = {name: sorted(records, key=lambda r: r["seed"]) for name, records in data["runs"].items()}
    return data
