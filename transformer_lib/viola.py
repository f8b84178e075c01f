"""VioLA's idea at laptop scale: one decoder-only Transformer that reads and writes both keys and codec tokens.

VioLA (Wang et al., 2023) turns speech into the discrete codes of a neural codec (EnCodec) and trains one
decoder-only Transformer on sequences that mix text tokens, codec tokens and a token naming the task, so that
recognition (speech to text), synthesis (text to speech) and translation are all next-token prediction in one
network. VALL-E (Wang et al., 2023), on which it builds (through VALL-E X), writes the first codebook's codes
autoregressively, frame by frame, and each other codebook j with a second, non-autoregressive model that sees the
phonemes, an acoustic prompt and codebooks 1 to j - 1 of every frame at once.

Here the "text" is the keys of a touch-tone clip and the codec is chapter 19's (`tl.codec`, 100 frames a second).
A `SoundVocabulary` lays out one id space: the specials, two task tokens, the twelve keys and the codes of the
first `codebooks` codebooks, each codebook its own block of ids. With more than one codebook, a clip's codes are
interleaved frame by frame (codebook 1 of frame 1, codebook 2 of frame 1, codebook 1 of frame 2, ...), so one
decoder writes them all in turn: the "flattened" layout of AudioLM's coarse acoustic stage, one of those MusicGen
compares. A recognition sequence is <bos> <recognise> codes... <sep> keys... <eos>, trained on the keys and <eos>;
a synthesis sequence is <bos> <synthesise> keys... <sep> codes..., trained on the codes (every clip has the same
number of frames, so the model writes exactly that many). `task_batch` builds both with their targets, `recognise`
reads keys back greedily, and `synthesise` samples codes, at each position from the ids of the codebook that
position holds.

`CodebookFiller` is VALL-E's second stage at this size: a bidirectional encoder that reads the keys and, for every
frame at once, the sum of the embeddings of codebooks 1 to j - 1, told which j it is writing, and predicts
codebook j of every frame (`filler_loss` draws j at random per batch, as VALL-E does; `fill_codebooks` writes
codebooks 2 to Q in turn, greedily). With it, what `synthesise` writes decodes through all of the codec's codebooks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig
from .encoder import Encoder
from .masks import padding_mask
from .tasks import pad_sequences

__all__ = [
    "IGNORE",
    "TASKS",
    "SoundVocabulary",
    "task_sequence",
    "task_batch",
    "task_loss",
    "recognise",
    "synthesise",
    "CodebookFiller",
    "key_rows",
    "filler_loss",
    "fill_codebooks",
]

IGNORE = -100  # a target the loss skips (F.cross_entropy's ignore_index)
TASKS = ("recognise", "synthesise")


@dataclass(frozen=True)
class SoundVocabulary:
    """One id space for keys and codec codes: <pad> 0, <bos> 1, <eos> 2, <sep> 3, the task tokens (4 recognise,
    5 synthesise), then one id per key in `keys`' order, then `codes` ids for each of the first `codebooks`
    codebooks of `codes` entries (codebook q's code c is first_code + q * codes + c, q from 0)."""

    keys: str
    codes: int
    codebooks: int = 1

    def __post_init__(self):
        if not self.keys or len(set(self.keys)) != len(self.keys):
            raise ValueError(f"keys must be distinct characters, at least one, got {self.keys!r}")
        if isinstance(self.codes, bool) or not isinstance(self.codes, int) or self.codes < 2:
            raise ValueError(f"codes must be a codebook's size, an int of at least 2, got {self.codes!r}")
        if isinstance(self.codebooks, bool) or not isinstance(self.codebooks, int) or self.codebooks < 1:
            raise ValueError(f"codebooks must be how many codebooks the sequences hold, an int >= 1, "
                             f"got {self.codebooks!r}")  # fmt: skip

    pad_id, bos_id, eos_id, sep_id = 0, 1, 2, 3

    def task_id(self, task: str) -> int:
        """The id of a task's token: 4 for "recognise", 5 for "synthesise"."""
        if task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {task!r}")
        return 4 + TASKS.index(task)

    @property
    def first_key(self) -> int:
        return 4 + len(TASKS)

    @property
    def first_code(self) -> int:
        return self.first_key + len(self.keys)

    @property
    def size(self) -> int:
        """How many ids: the vocabulary size a model over it needs."""
        return self.first_code + self.codebooks * self.codes

    def code_range(self, q: int) -> range:
        """The ids of codebook q's codes (q from 0)."""
        if not 0 <= q < self.codebooks:
            raise ValueError(f"codebook q must be from 0 to {self.codebooks - 1}, got {q!r}")
        return range(self.first_code + q * self.codes, self.first_code + (q + 1) * self.codes)

    def key_ids(self, text: str) -> list[int]:
        """'4#1' -> the keys' ids; a character that is not a key is an error."""
        unknown = sorted(set(text) - set(self.keys))
        if unknown:
            raise ValueError(f"{text!r} holds characters that are not keys: {unknown}; the keys are {self.keys!r}")
        return [self.first_key + self.keys.index(c) for c in text]

    def code_ids(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes in [0, codes) -> their ids, interleaved frame by frame: (..., F) with one codebook, (..., F, Q)
        with Q = codebooks -> (..., F * Q), codebook q of frame f at position f * Q + q."""
        Q = self.codebooks
        if codes.dtype not in (torch.int32, torch.int64) or codes.numel() and not 0 <= int(codes.min()):
            raise ValueError(f"codes must be integer codes from 0, got {codes.dtype}")
        if codes.numel() and int(codes.max()) >= self.codes:
            raise ValueError(f"codes must be below the codebook's size {self.codes}, got {int(codes.max())}")
        if Q == 1:
            return codes.long() + self.first_code
        if codes.dim() < 2 or codes.shape[-1] != Q:
            raise ValueError(f"codes must be (..., F, {Q}), the {Q} codebooks of each frame, got {tuple(codes.shape)}")
        offsets = self.first_code + self.codes * torch.arange(Q)  # (Q,): where each codebook's ids start
        return (codes.long() + offsets).flatten(-2)  # (..., F, Q) -> (..., F * Q)

    def codes_of(self, ids: torch.Tensor) -> torch.Tensor:
        """The inverse of `code_ids`: ids (..., F * Q) -> codes (..., F) with one codebook, (..., F, Q) with Q.
        An id that is not a code of the codebook its position holds is an error."""
        Q = self.codebooks
        if ids.shape[-1] % Q:
            raise ValueError(f"{ids.shape[-1]} ids are not whole frames of {Q} codebooks")
        codes = ids.long().unflatten(-1, (-1, Q)) - self.first_code - self.codes * torch.arange(Q)  # (..., F, Q)
        wrong = (codes < 0) | (codes >= self.codes)
        if bool(wrong.any()):
            where = [int(i) for i in wrong.nonzero()[0]]
            raise ValueError(f"an id at {where} (index ..., frame, codebook) is not a code of its codebook")
        return codes[..., 0] if Q == 1 else codes

    def keys_of(self, ids: Sequence[int]) -> str:
        """Ids -> the keys among them, in order, up to the first <eos>; any other id is skipped."""
        out = []
        for i in ids:
            if i == self.eos_id:
                break
            if self.first_key <= i < self.first_code:
                out.append(self.keys[i - self.first_key])
        return "".join(out)


def task_sequence(vocab: SoundVocabulary, task: str, codes: torch.Tensor, keys: str) -> tuple[list[int], list[int]]:
    """One training sequence and its targets (next-token ids, IGNORE where the model is not trained), both of
    length L: recognise: <bos> <recognise> codes <sep> keys <eos>; synthesise: <bos> <synthesise> keys <sep> codes.
    codes: one clip's codes, (F,) with one codebook, (F, Q) with vocab.codebooks = Q; keys: what was dialled."""
    if codes.dim() != (1 if vocab.codebooks == 1 else 2):
        shape = "(F,)" if vocab.codebooks == 1 else f"(F, {vocab.codebooks})"
        raise ValueError(f"codes must be one clip's codes {shape}, got shape {tuple(codes.shape)}")
    audio, text = vocab.code_ids(codes).tolist(), vocab.key_ids(keys)
    head = [vocab.bos_id, vocab.task_id(task)]
    if task == "recognise":
        ids = head + audio + [vocab.sep_id] + text + [vocab.eos_id]
        answer = len(head) + len(audio) + 1  # where the keys start
    else:
        ids = head + text + [vocab.sep_id] + audio
        answer = len(head) + len(text) + 1  # where the codes start
    # the target at position t is the id at t + 1, kept only where that id is part of the answer
    targets = [ids[t + 1] if t + 1 >= answer else IGNORE for t in range(len(ids) - 1)] + [IGNORE]
    return ids, targets


def task_batch(
    vocab: SoundVocabulary, tasks: Sequence[str], codes: torch.Tensor, texts: Sequence[str]
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of mixed tasks: codes (B, F) (or (B, F, Q) with Q codebooks), one task and one text per clip ->
    (inputs (B, L), targets (B, L)), padded on the right (<pad> in the inputs, IGNORE in the targets)."""
    if not (len(tasks) == len(texts) == codes.shape[0]):
        raise ValueError(
            f"one task and one text per clip: {len(tasks)} tasks, {len(texts)} texts, {codes.shape[0]} clips"
        )
    rows = [task_sequence(vocab, task, c, text) for task, c, text in zip(tasks, codes, texts)]
    inputs = pad_sequences([r[0] for r in rows], vocab.pad_id)  # (B, L)
    targets = pad_sequences([r[1] for r in rows], IGNORE, inputs.shape[1])  # (B, L)
    return inputs, targets


def task_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The mean next-token cross-entropy over the answer positions of a `task_batch`."""
    inputs, targets = batch
    logits = model(inputs)  # (B, L, V)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)


def _step(model: nn.Module, ids: torch.Tensor, caches: list) -> torch.Tensor:
    """Feed ids (B, t) into the caches; the logits at the last position (B, V)."""
    return model(ids, caches)[:, -1]


@torch.no_grad()
def recognise(model: nn.Module, vocab: SoundVocabulary, codes: torch.Tensor, max_keys: int = 8) -> list[str]:
    """Read the keys of clips from their codes, (B, F) (or (B, F, Q) with vocab.codebooks = Q), greedily: each step
    the likeliest key or <eos>, until <eos>; after max_keys keys only <eos> may follow."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    B = codes.shape[0]
    prompt = torch.cat(
        [
            torch.tensor([vocab.bos_id, vocab.task_id("recognise")]).expand(B, 2),
            vocab.code_ids(codes.cpu()),  # (B, F * Q)
            torch.full((B, 1), vocab.sep_id),
        ],
        dim=1,
    ).to(device)  # (B, 2 + F * Q + 1)
    caches = model.new_cache(capacity=prompt.shape[1] + max_keys + 1)
    logits, written = _step(model, prompt, caches), []
    allowed = torch.full((vocab.size,), float("-inf"), device=device)
    allowed[vocab.first_key : vocab.first_code] = 0  # a key
    allowed[vocab.eos_id] = 0  # or the end
    for step in range(max_keys + 1):
        if step == max_keys:  # max_keys written: the end is all that may come
            allowed[vocab.first_key : vocab.first_code] = float("-inf")
        next_id = (logits + allowed).argmax(-1, keepdim=True)  # (B, 1)
        written.append(next_id)
        logits = _step(model, next_id, caches)
    model.train(was_training)
    return [vocab.keys_of(row) for row in torch.cat(written, dim=1).tolist()]


@torch.no_grad()
def synthesise(
    model: nn.Module,
    vocab: SoundVocabulary,
    texts: Sequence[str],
    frames: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    uniforms: torch.Tensor | None = None,
) -> torch.Tensor:
    """Write `frames` frames of codes for each text: (B, frames) codes in [0, vocab.codes) with one codebook,
    (B, frames, Q) with vocab.codebooks = Q, written in `code_ids`' interleaved order. Each step samples from the
    model's distribution over the codes of the codebook that position holds (every other id masked out), at
    `temperature` (0: greedy), from the top_k likeliest when given. Texts of different lengths are run one length
    at a time. generator: a torch.Generator on the model's device.

    uniforms: (B, frames * Q) numbers in [0, 1), one per text and position, to sample with instead of the
    generator, by the inverse of the distribution's cumulative sum: the first code whose cumulative probability
    exceeds the number (the last code with any probability when rounding leaves the sum below it). A web page
    that draws the same numbers from the same seeded stream writes the same codes (the "Hear the keys" page)."""
    if not (isinstance(temperature, (int, float)) and temperature >= 0):
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    if uniforms is not None:
        if not isinstance(uniforms, torch.Tensor) or not uniforms.is_floating_point():
            raise TypeError(f"uniforms must be a float tensor (B, frames * Q), got {type(uniforms).__name__}")
        want = (len(texts), frames * vocab.codebooks)
        if tuple(uniforms.shape) != want:
            raise ValueError(f"uniforms must be one number per text and position, {want}, got {tuple(uniforms.shape)}")
        if uniforms.numel() and not ((uniforms >= 0) & (uniforms < 1)).all():
            raise ValueError("uniforms must lie in [0, 1)")
    if top_k is not None and not (isinstance(top_k, int) and not isinstance(top_k, bool) and 1 <= top_k <= vocab.codes):
        raise ValueError(f"top_k must be None or an int from 1 to the codebook's size {vocab.codes}, got {top_k!r}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    Q = vocab.codebooks
    out = torch.empty(len(texts), frames * Q, dtype=torch.long)  # ids, interleaved
    for length in sorted({len(t) for t in texts}):
        rows = [i for i, t in enumerate(texts) if len(t) == length]
        prompt = torch.tensor(
            [[vocab.bos_id, vocab.task_id("synthesise"), *vocab.key_ids(texts[i]), vocab.sep_id] for i in rows],
            device=device,
        )  # (b, 2 + length + 1)
        caches = model.new_cache(capacity=prompt.shape[1] + frames * Q)
        logits, written = _step(model, prompt, caches), []
        for position in range(frames * Q):
            ids = vocab.code_range(position % Q)
            scores = logits[:, ids.start : ids.stop]  # (b, codes): the codes of this position's codebook alone
            if temperature == 0:
                code = scores.argmax(-1, keepdim=True)  # (b, 1)
            else:
                scores = scores / temperature
                if top_k is not None:
                    kth = scores.topk(top_k, dim=-1).values[:, -1:]  # (b, 1)
                    scores = scores.masked_fill(scores < kth, float("-inf"))
                probs = scores.softmax(-1)  # (b, codes)
                if uniforms is None:
                    code = torch.multinomial(probs, 1, generator=generator)  # (b, 1)
                else:
                    code = _inverse_cdf(probs, uniforms[rows, position].to(probs))  # (b, 1)
            written.append(code + ids.start)
            logits = _step(model, written[-1], caches)
        out[rows] = torch.cat(written, dim=1).cpu()
    model.train(was_training)
    return vocab.codes_of(out)


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """probs (b, K) rows summing to 1, u (b,) in [0, 1) -> (b, 1): the first index whose cumulative probability
    exceeds u; where rounding leaves the whole sum at or below u, the last index with any probability."""
    cdf = probs.cumsum(-1)  # (b, K)
    chosen = torch.searchsorted(cdf, u[:, None], right=True)  # (b, 1): how many sums are <= u
    last = (probs > 0).long().cumsum(-1).argmax(-1, keepdim=True)  # (b, 1): the last index with any probability
    return torch.minimum(chosen, last)


# ---- VALL-E's second stage: the other codebooks, all frames at once ------------------------------------------------


class CodebookFiller(nn.Module):
    """keys (B, K) as `SoundVocabulary` ids (padded with <pad>), codes (B, F, j - 1) of codebooks 1 to j - 1, j ->
    logits (B, F, codes) for codebook j of every frame.

    The input sequence is the keys' embeddings, then one vector per frame: the sum of its codes' embeddings (one
    table per codebook, as VALL-E's) plus the embedding of the stage j; learned positions, one table for the keys
    and one for the frames (so that padding the keys moves no frame); a pre-LN encoder that attends both ways (the
    keys' padding masked); and a linear map to the codes. config.max_len bounds the keys and the frames each."""

    def __init__(self, config: TransformerConfig, vocab: SoundVocabulary, num_quantizers: int):
        super().__init__()
        if isinstance(num_quantizers, bool) or not isinstance(num_quantizers, int) or num_quantizers < 2:
            raise ValueError(f"a filler needs at least 2 codebooks (it writes the 2nd on), got {num_quantizers!r}")
        self.config, self.vocab, self.num_quantizers = config, vocab, num_quantizers
        d = config.d_model
        self.key_embed = nn.Embedding(vocab.first_code, d)  # the ids below the codes: specials, tasks and keys
        self.code_embed = nn.ModuleList(nn.Embedding(vocab.codes, d) for _ in range(num_quantizers - 1))
        self.stage_embed = nn.Embedding(num_quantizers + 1, d)  # rows 2 .. Q used
        self.key_position = nn.Embedding(config.max_len, d)
        self.frame_position = nn.Embedding(config.max_len, d)
        self.encoder = Encoder(config)
        self.head = nn.Linear(d, vocab.codes)

    def forward(self, keys: torch.Tensor, codes: torch.Tensor, j: int) -> torch.Tensor:
        """keys (B, K), codes (B, F, j - 1), j in 2..num_quantizers -> logits (B, F, codes) for codebook j."""
        if isinstance(j, bool) or not isinstance(j, int) or not 2 <= j <= self.num_quantizers:
            raise ValueError(f"j must be a codebook from 2 to {self.num_quantizers}, got {j!r}")
        if codes.dim() != 3 or codes.shape[-1] != j - 1 or codes.shape[0] != keys.shape[0]:
            raise ValueError(f"to write codebook {j} the filler reads codes (B, F, {j - 1}) of codebooks 1 to {j - 1}, "
                             f"got {tuple(codes.shape)} for {keys.shape[0]} key rows")  # fmt: skip
        B, K = keys.shape
        frames = sum(table(codes[..., i]) for i, table in enumerate(self.code_embed[: j - 1]))  # (B, F, d)
        if max(K, codes.shape[1]) > self.config.max_len:
            raise ValueError(f"{K} keys or {codes.shape[1]} frames exceed the filler's max_len {self.config.max_len}")
        frames = frames + self.stage_embed.weight[j] + self.frame_position.weight[: codes.shape[1]]  # (B, F, d)
        x = torch.cat([self.key_embed(keys) + self.key_position.weight[:K], frames], dim=1)  # (B, K + F, d)
        mask = padding_mask(torch.cat([keys, keys.new_ones(B, codes.shape[1])], dim=1), self.vocab.pad_id)
        return self.head(self.encoder(x, mask)[:, K:])  # (B, F, codes)


def key_rows(vocab: SoundVocabulary, keys: Sequence[str] | torch.Tensor) -> torch.Tensor:
    """Texts -> their keys' ids (B, K), padded with <pad>; ids (B, K) pass as they are."""
    if isinstance(keys, torch.Tensor):
        return keys
    return pad_sequences([vocab.key_ids(t) for t in keys], vocab.pad_id)


def filler_loss(
    model: CodebookFiller,
    keys: Sequence[str] | torch.Tensor,
    codes: torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Cross-entropy of codebook j of every frame, j drawn uniformly from 2..Q for the batch with `generator`:
    keys, B texts or their ids (B, K) padded with <pad>; codes (B, F, Q) of all the codebooks."""
    if codes.dim() != 3 or codes.shape[-1] != model.num_quantizers:
        raise ValueError(f"codes must hold all {model.num_quantizers} codebooks (B, F, Q), got {tuple(codes.shape)}")
    j = int(torch.randint(2, model.num_quantizers + 1, (), generator=generator))
    device = model.head.weight.device
    logits = model(key_rows(model.vocab, keys).to(device), codes[..., : j - 1].to(device), j)  # (B, F, codes)
    return F.cross_entropy(logits.flatten(0, 1), codes[..., j - 1].flatten().to(device))


@torch.no_grad()
def fill_codebooks(model: CodebookFiller, keys: Sequence[str] | torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """Codebooks 2 to Q for first-codebook codes (B, F) of clips with these keys (B texts, or their ids (B, K)),
    greedily, one codebook at a time, each from the ones before it: -> codes (B, F, Q), `first` as codebook 1."""
    was_training = model.training
    model.eval()
    device = model.head.weight.device
    keys, codes = key_rows(model.vocab, keys).to(device), first[..., None].to(device)  # (B, K), (B, F, 1)
    for j in range(2, model.num_quantizers + 1):
        codes = torch.cat([codes, model(keys, codes, j).argmax(-1, keepdim=True)], dim=-1)  # (B, F, j)
    model.train(was_training)
    return codes.cpu()
