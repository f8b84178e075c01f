"""Chapter 15's data: the plays as words for BERT's masked-word task, and a labelled task the plays provide.

- `PlayWords`: a word vocabulary with BERT's special tokens first ([PAD] = 0, [CLS], [SEP], [MASK],
  [UNK]). Text is lowercased and split into words (apostrophes kept inside: "o'er", "i'll") and
  single punctuation marks; a word seen fewer than `min_count` times in the training plays is [UNK].
- `mlm_windows`: the training plays as one stream of ids, cut into windows, each `[CLS] words [SEP]`.
- `speeches`, `scramble` and `order_task`: the held-out play, Twelfth Night, cut into speeches; about half
  of them have their words shuffled (each punctuation mark stays where it was), and the task is to tell a
  speech as written from one whose word order is scrambled. The two kinds hold the same words, so only
  word order tells them apart. No model has seen this play in pre-training, so what fine-tuning learns
  there is measured on text that is new to it.
- `fine_tune`: one of four ways to learn that task from a few labelled speeches or all of them
  (`METHODS`): a BERT trained from scratch, a linear probe on the pre-trained model's frozen features,
  full fine-tuning, and LoRA; and a fifth, between the probe and full fine-tuning, that trains only the
  encoder's last layer and the head ("last", in `ALL_METHODS`). Those that train the encoder read `[CLS]`
  through a pooler, as BERT does, or with `pooling="mean"` the probe's mean of the words' vectors
  (`MeanPooledClassifier`).
- `refill` and `masked_word_shares`: what fine-tuning cost the encoder at its first task, filling in hidden words
  (the fine-tuned encoder put back under the pre-trained masked-word head, and scored window by window).
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import corpus
from .bert import IGNORE, BertClassifier, BertForMaskedLM, BertModel, mask_tokens
from .config import TransformerConfig
from .lora import add_lora, merge_lora, trainable_parameters
from .tasks import iterate_batches
from .training import classification_loss, fit

__all__ = [
    "SPECIALS",
    "PAD",
    "CLS",
    "SEP",
    "MASK",
    "UNK",
    "PlayWords",
    "mlm_windows",
    "speeches",
    "scramble",
    "order_task",
    "encode_batch",
    "order_split",
    "ORDER_TEST",
    "METHODS",
    "ALL_METHODS",
    "POOLINGS",
    "mean_features",
    "MeanPooledClassifier",
    "fine_tune",
    "refill",
    "hide_words",
    "masked_word_shares",
]

SPECIALS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]")
PAD, CLS, SEP, MASK, UNK = range(len(SPECIALS))

_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*|'[a-z]+|[^\sa-z]")  # a word (inner apostrophes kept), or one other mark


class PlayWords:
    """Words <-> ids: the five specials, then the vocabulary in order of frequency (ties alphabetical)."""

    def __init__(self, words: Iterable[str]):
        vocabulary = list(dict.fromkeys(words))
        clash = sorted(set(vocabulary) & set(SPECIALS))
        if clash:
            raise ValueError(f"the vocabulary may not hold the special tokens {clash}")
        self.itos: list[str] = list(SPECIALS) + vocabulary
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}

    special_ids = tuple(range(len(SPECIALS)))
    pattern = _WORD.pattern  # what split() finds, as a regular expression (the fill-in-the-blank page reads it)

    @staticmethod
    def split(text: str) -> list[str]:
        """'O, it came o'er my ear' -> ['o', ',', 'it', 'came', "o'er", 'my', 'ear']."""
        return _WORD.findall(text.lower())

    @classmethod
    def from_text(cls, text: str, min_count: int = 3) -> PlayWords:
        """Every word seen at least min_count times in `text`, most frequent first."""
        counts = Counter(cls.split(text))
        kept = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
        return cls(kept)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        """text -> ids, no specials added; a word outside the vocabulary is [UNK]."""
        return [self.stoi.get(w, UNK) for w in self.split(text)]

    def decode(self, ids: Iterable[int] | torch.Tensor, *, keep_specials: bool = False) -> str:
        """ids -> words joined by spaces ([PAD] always dropped, other specials only when keep_specials is False)."""
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        words = [self.itos[i] for i in ids if i != PAD and (keep_specials or i >= len(SPECIALS))]
        return " ".join(words)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps({"format": "transformer_lib.playwords/1", "words": self.itos[len(SPECIALS) :]}))
        return path

    @classmethod
    def load(cls, path: str | Path) -> PlayWords:
        data = json.loads(Path(path).read_text())
        if data.get("format") != "transformer_lib.playwords/1":
            raise ValueError(f"{path} is not a PlayWords file (format {data.get('format')!r})")
        return cls(data["words"])


def mlm_windows(vocab: PlayWords, text: str, length: int) -> torch.Tensor:
    """`text` as one stream of ids, cut into windows of length - 2 words, each [CLS] ... [SEP]: (N, length).

    The last, shorter piece is dropped, so there is no padding to learn from.
    """
    if length < 3:
        raise ValueError(f"a window needs room for [CLS], a word and [SEP]: length >= 3, got {length}")
    ids = torch.tensor(vocab.encode(text))  # (T,)
    words = length - 2
    n = ids.numel() // words
    body = ids[: n * words].view(n, words)  # (N, length - 2)
    cls, sep = torch.full((n, 1), CLS), torch.full((n, 1), SEP)
    return torch.cat([cls, body, sep], dim=1)  # (N, length)


_HEADER = re.compile(r"^[A-Z][A-Z' -]{0,28}\.$")  # a speaker's name in capitals on its own line: "SIR TOBY."
_DIRECTION = re.compile(r"\[[^\]]*(\]|$)")  # a stage direction in brackets, closed or running to the line's end


def speeches(play: str = "twelfth_night") -> list[tuple[str, str]]:
    """The play's speeches in order, (speaker, what they say), stage directions left out.

    Read from the layout of the texts where each speech is a block: the speaker's name in capitals on a
    line of its own, ending with a full stop, then the lines spoken (Twelfth Night, Macbeth, Othello...).
    """
    found = []
    for block in re.split(r"\n\s*\n", corpus.play(play)):
        lines = [line.strip() for line in block.strip().split("\n") if line.strip()]
        if len(lines) >= 2 and _HEADER.match(lines[0]):
            spoken = [_DIRECTION.sub("", line).strip() for line in lines[1:]]  # "[Aside.]", "[Reads.]"...
            spoken = [line for line in spoken if line]
            if spoken:
                found.append((lines[0][:-1], " ".join(spoken)))
    return found


def scramble(words: list[str], generator: torch.Generator) -> list[str]:
    """The same words in a random order; each punctuation mark keeps its place. ['o', ',', 'it', 'came', '.'] ->
    ['came', ',', 'o', 'it', '.'] (one of the orders)."""
    slots = [i for i, w in enumerate(words) if w[0].isalpha() or w[0] == "'"]  # where the words (not marks) stand
    order = torch.randperm(len(slots), generator=generator).tolist()
    out = list(words)
    for slot, src in zip(slots, order):
        out[slot] = words[slots[src]]
    return out


def order_task(min_words: int = 6, seed: int = 0) -> tuple[list[str], torch.Tensor]:
    """Twelfth Night's speeches of at least min_words words, each kept as written or scrambled (a fair coin per
    speech, from `seed`): (texts, words split by PlayWords and joined by spaces; labels (N,): 1 = as written)."""
    generator = torch.Generator().manual_seed(seed)
    texts, labels = [], []
    for _, said in speeches("twelfth_night"):
        words = PlayWords.split(said)
        if sum(w[0].isalpha() or w[0] == "'" for w in words) < min_words:
            continue
        as_written = bool(torch.rand((), generator=generator) < 0.5)
        texts.append(" ".join(words if as_written else scramble(words, generator)))
        labels.append(int(as_written))
    return texts, torch.tensor(labels)


def encode_batch(vocab: PlayWords, texts: list[str], max_len: int) -> torch.Tensor:
    """Texts -> ids (B, S), each [CLS] words [SEP], cut to max_len and padded with [PAD] to the longest row."""
    if max_len < 3:
        raise ValueError(f"max_len must leave room for [CLS], a word and [SEP]: >= 3, got {max_len}")
    rows = [[CLS, *vocab.encode(t)[: max_len - 2], SEP] for t in texts]
    out = torch.full((len(rows), max(map(len, rows))), PAD)  # (B, S)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


ORDER_TEST = 300  # speeches held out to measure every method; labels are drawn from the rest (the pool)
METHODS = ("scratch", "probe", "full", "lora")  # the chapter's figure
ALL_METHODS = (*METHODS, "last")  # and the last encoder layer with the head, the rest frozen
POOLINGS = ("cls", "mean")  # what a classifier that trains its encoder reads: [CLS] through a pooler, or mean_features
# steps of 16 speeches, and learning rates, of each method (the same at every label budget)
_STEPS = 200
_LR = {"scratch": 3e-4, "probe": 1e-2, "full": 1e-4, "lora": 1e-3, "last": 1e-4}  # "last": full fine-tuning's


def order_split(vocab: PlayWords, max_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """order_task's speeches, encoded and split once (seed 0): (pool ids (P, S), pool labels (P,), test ids (T, S'),
    test labels (T,)), with T = ORDER_TEST. Label budgets are drawn from the pool."""
    texts, labels = order_task()
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(0)).tolist()
    test, pool = order[:ORDER_TEST], order[ORDER_TEST:]
    pick = lambda rows: (encode_batch(vocab, [texts[i] for i in rows], max_len), labels[rows])
    return (*pick(pool), *pick(test))


def _mean_over_words(hidden: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """hidden (N, S, d_model) averaged over each row's words ([CLS], [SEP], [PAD] left out): (N, d_model)."""
    words = (ids >= len(SPECIALS)).unsqueeze(-1).to(hidden.dtype)  # (N, S, 1)
    return (hidden * words).sum(1) / words.sum(1).clamp(min=1.0)  # (N, d_model)


@torch.no_grad()  # not inference_mode: the probe trains on these features
def mean_features(model: BertForMaskedLM | BertClassifier, ids: torch.Tensor) -> torch.Tensor:
    """The encoder's last hidden states averaged over each row's words ([CLS], [SEP], [PAD] left out): (N, d_model)."""
    model.eval()
    hidden, _ = model.bert(ids)  # (N, S, d_model)
    return _mean_over_words(hidden, ids)


class MeanPooledClassifier(nn.Module):
    """A BERT encoder (no pooler) read as the probe reads it, the mean of its words' last hidden vectors, by one linear
    layer: tokens (B, S) -> class logits (B, num_classes). Unlike the probe, the encoder can train."""

    def __init__(self, config: TransformerConfig, num_classes: int = 2):
        super().__init__()
        self.bert = BertModel(config, pooler=False)
        self.config = self.bert.config
        self.classifier = nn.Linear(self.config.d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, S), padded with [PAD] -> class logits (B, num_classes)."""
        hidden, _ = self.bert(tokens)  # (B, S, d_model)
        return self.classifier(_mean_over_words(hidden, tokens))  # (B, d_model) -> (B, num_classes)


def fine_tune(
    method: str,
    pretrained: BertForMaskedLM,
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    budget: int,
    seed: int = 0,
    *,
    steps: int = _STEPS,
    pooling: str = "cls",
    progress: bool = False,
    device: torch.device | str | None = None,
) -> tuple[nn.Module, dict[str, float]]:
    """Learn the order task from `budget` labelled speeches of the pool, one of ALL_METHODS; measure it on the test set.

    - "scratch": a BertClassifier of the pre-trained model's shape, from random weights.
    - "probe": the pre-trained encoder frozen; a linear layer on its mean_features learns alone.
    - "full": a BertClassifier that starts from the pre-trained encoder (its pooler and head are new);
      every weight trains.
    - "lora": the same start, frozen, with rank-8 adapters on every linear layer of the encoder; the
      adapters, the pooler and the head train.
    - "last": the same start; only the encoder's last layer, the pooler (if any) and the head train, at full
      fine-tuning's rate.

    `pooling` is what "scratch", "full", "lora" and "last" read: "cls", the pooled `[CLS]` vector (BertClassifier), or
    "mean", the mean of the words' last hidden vectors, as the probe reads them (MeanPooledClassifier, no pooler).
    `seed` picks the budget's speeches, the new weights and dropout's masks; `device` is where they train (default:
    the pre-trained model's; the pre-trained model is moved there). Returns (model, {"test accuracy",
    "trainable parameters", "seconds", "test correct", "history"}): "test correct" is a (T,) bool tensor, each test
    speech right or not, and "history" is `fit`'s History of the training steps. Every method takes `steps` AdamW
    steps of 16 speeches (the probe: of the whole budget at once).
    """
    if method not in ALL_METHODS:
        raise ValueError(f"method must be one of {ALL_METHODS}, got {method!r}")
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
    pool_ids, pool_labels, test_ids, test_labels = data
    if not 2 <= budget <= pool_ids.shape[0]:
        raise ValueError(f"budget must be from 2 to the pool's {pool_ids.shape[0]} speeches, got {budget}")
    device = torch.device(device) if device is not None else next(pretrained.parameters()).device
    pretrained = pretrained.to(device)
    rng = torch.Generator().manual_seed(seed)
    rows = torch.randperm(pool_ids.shape[0], generator=rng)[:budget]
    x, y = pool_ids[rows], pool_labels[rows]  # (budget, S), (budget,)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        if method == "probe":
            probe = nn.Linear(pretrained.config.d_model, 2).to(device)
            # (budget, d_model), computed once: the encoder is frozen
            features, y = mean_features(pretrained, x.to(device)), y.to(device)
            history = fit(
                probe,
                lambda m, batch: F.cross_entropy(m(batch[0]), batch[1]),
                iter(lambda: (features, y), None),  # the whole budget every step
                steps=steps,
                lr=_LR[method],
                warmup=10,
                progress=progress,
                desc=f"probe, {budget} labels",
            )
            with torch.inference_mode():
                right = probe(mean_features(pretrained, test_ids.to(device))).argmax(-1).cpu() == test_labels
            return probe, {
                "test accuracy": int(right.sum()) / len(right),  # a count over T, as for the other methods
                "trainable parameters": float(sum(p.numel() for p in probe.parameters())),
                "seconds": history.seconds,
                "test correct": right,
                "history": history,
            }
        if pooling == "cls":
            model = BertClassifier(pretrained.config, 2).to(device)
        else:
            model = MeanPooledClassifier(pretrained.config, 2).to(device)
        if method != "scratch":
            missing, unexpected = model.bert.load_state_dict(pretrained.bert.state_dict(), strict=False)
            assert not unexpected and all(k.startswith("pooler.") for k in missing), (missing, unexpected)
        if method == "lora":
            add_lora(model.bert.encoder, ("q_proj", "k_proj", "v_proj", "out_proj", "linear1", "linear2"), r=8)
            new_parts = [model.classifier] + ([model.bert.pooler] if pooling == "cls" else [])
            for part in (model.bert.embeddings, *new_parts):
                part.requires_grad_(part is not model.bert.embeddings)  # embeddings stay frozen
        if method == "last":  # everything frozen but the last encoder layer and what reads it
            model.requires_grad_(False)
            for part in (model.bert.encoder.layers[-1], model.classifier, model.bert.pooler):
                if part is not None:
                    part.requires_grad_(True)
        batches = iterate_batches(x, y, batch_size=16, rng=rng, pad_id=PAD, forever=True)
        history = fit(
            model,
            classification_loss,
            batches,
            steps=steps,
            lr=_LR[method],
            warmup=20,
            progress=progress,
            desc=f"{method}, {budget} labels" + (", mean pooling" if pooling == "mean" else ""),
        )
    trainable, _ = trainable_parameters(model)
    model.eval()
    with torch.inference_mode():
        right = model(test_ids.to(device)).argmax(-1).cpu() == test_labels  # (T,): each test speech right or not
    return model, {
        "test accuracy": int(right.sum()) / len(right),
        "trainable parameters": float(trainable),
        "seconds": history.seconds,
        "test correct": right,
        "history": history,
    }


def refill(pretrained: BertForMaskedLM, tuned: nn.Module) -> BertForMaskedLM:
    """A copy of `pretrained` whose encoder is `tuned`'s (a fine_tune model that trained its encoder), under the
    pre-trained masked-word head. LoRA adapters are merged into their weights first (on a copy: `tuned` is left as it
    was); a classifier's pooler and head are left out, as the masked-word model has no place for them."""
    if not isinstance(getattr(tuned, "bert", None), BertModel):
        raise TypeError(f"refill needs a model with a BERT encoder (.bert), got {type(tuned).__name__}")
    encoder = merge_lora(copy.deepcopy(tuned.bert))
    out = copy.deepcopy(pretrained)
    missing, left_over = out.bert.load_state_dict(encoder.state_dict(), strict=False)
    if missing or any(not k.startswith("pooler.") for k in left_over):
        raise ValueError(f"the encoders do not match: missing {missing}, left over {left_over}")
    return out


def hide_words(windows: torch.Tensor, vocab_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption of the plays' windows (N, S), drawn from torch.Generator().manual_seed(seed): (inputs, labels),
    each (N, S) on the CPU, as bert.mask_tokens makes them with this vocabulary's [MASK] and special ids. The same seed
    hides the same words, so two models measured with it guess at the same positions."""
    return mask_tokens(
        windows.cpu(),
        mask_id=MASK,
        special_ids=PlayWords.special_ids,
        vocab_size=vocab_size,
        generator=torch.Generator().manual_seed(seed),
    )


@torch.no_grad()
def masked_word_shares(model: BertForMaskedLM, windows: torch.Tensor, seeds: Iterable[int] = (0, 1)) -> torch.Tensor:
    """For each of `windows` (N, S): the share of its hidden words the model's top guess gets right, averaged over the
    masking `seeds` (each hides words by BERT's rule with torch.Generator().manual_seed(seed), so two models scored
    with the same seeds guess at the same words). Returns (N,); a window with no hidden word counts 0."""
    seeds = list(seeds)
    if not seeds:
        raise ValueError("masked_word_shares needs at least one masking seed")
    model.eval()
    device = next(model.parameters()).device
    total = torch.zeros(windows.shape[0], dtype=torch.float64)
    for seed in seeds:
        inputs, labels = hide_words(windows, model.config.vocab_size, seed)  # (N, S) each
        chosen = labels != IGNORE  # (N, S): the hidden words
        guesses = model(inputs.to(device), at=chosen.to(device)).argmax(-1).cpu()  # (n,)
        right = (guesses == labels[chosen]).double()  # (n,)
        window_of = chosen.nonzero()[:, 0]  # (n,)
        hidden = torch.bincount(window_of, minlength=len(windows)).clamp(min=1)  # (N,)
        total += torch.bincount(window_of, weights=right, minlength=len(windows)) / hidden
    return total / len(seeds)
