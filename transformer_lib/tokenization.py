"""Every tokenizer the book uses: characters, words, and byte-level BPE as GPT-2 uses it.

`CharTokenizer` and `WordTokenizer` hold a fixed vocabulary after four special tokens
(<pad>=0, <bos>=1, <eos>=2, <unk>=3); a token outside it becomes <unk>.

Byte-pair encoding (BPE) at the byte level: text is first cut into pieces by `pretokenize` (words
with their leading space, numbers, runs of punctuation, whitespace), and a merge never crosses a
piece's edge. Each piece starts as its UTF-8 bytes, ids 0-255, so every string has an encoding and
no token is ever unknown. Training repeats one step: find the most frequent adjacent pair of ids in
the corpus, give it the next id, and replace it everywhere. Encoding replays the learned merges on a
new piece, earliest merge first.

    tok = train_bpe(text, num_merges=1000)   # vocabulary: 256 bytes + 1000 merges
    ids = tok.encode("To be, or not to be")  # [int]
    tok.decode(ids) == "To be, or not to be"  # for every str, seen in training or not
"""

from __future__ import annotations

import heapq
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

__all__ = ["CharTokenizer", "WordTokenizer", "pretokenize", "train_bpe", "BPETokenizer", "load_bpe"]

# ---- characters and words ---------------------------------------------------------------------

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


class _Tokenizer:
    """What both tokenizers share: four specials first (<pad>=0, <bos>=1, <eos>=2, <unk>=3), then the vocabulary.

    A subclass says how text splits into tokens (`split`) and how tokens join back (`join`).
    """

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokens: Iterable[str]):
        vocabulary = sorted(set(tokens) - set(SPECIALS))
        for token in vocabulary:
            if self.split(token) != [token]:
                raise ValueError(
                    f"{type(self).__name__} takes {self._unit}s, got {token!r} (it splits into {self.split(token)})"
                )
        self.itos: list[str] = list(SPECIALS) + vocabulary
        self.stoi: dict[str, int] = {s: i for i, s in enumerate(self.itos)}

    _unit = "single token"

    @classmethod
    def split(cls, text: str) -> list[str]:
        raise NotImplementedError

    @staticmethod
    def join(tokens: list[str]) -> str:
        raise NotImplementedError

    @classmethod
    def from_texts(cls, texts: Iterable[str]):
        """A tokenizer whose vocabulary is every token that occurs in `texts`."""
        return cls(token for text in texts for token in cls.split(text))

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        return len(self.itos)

    def encode(self, text: str, bos: bool = False, eos: bool = False) -> list[int]:
        """text -> [ids]; unknown tokens map to <unk>; optionally wrapped in <bos> ... <eos>."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__}")
        ids = [self.stoi.get(token, self.unk_id) for token in self.split(text)]
        return [self.bos_id] * bos + ids + [self.eos_id] * eos

    def tokens(self, ids: Iterable[int] | torch.Tensor, stop_at_eos: bool = True) -> list[str]:
        """[ids] -> the tokens they stand for, specials dropped; stops at the first <eos> when `stop_at_eos`."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if i == self.eos_id and stop_at_eos:
                break
            if i >= len(SPECIALS):
                out.append(self.itos[i])
        return out

    def decode(self, ids: Iterable[int] | torch.Tensor, stop_at_eos: bool = True) -> str:
        """[ids] -> text, specials dropped; stops at the first <eos> when `stop_at_eos`."""
        return self.join(self.tokens(ids, stop_at_eos))


class CharTokenizer(_Tokenizer):
    """One id per character, after the four specials: 'abc' -> three ids."""

    _unit = "single character"

    @classmethod
    def split(cls, text: str) -> list[str]:
        """'abc' -> ['a', 'b', 'c']."""
        return list(text)

    @staticmethod
    def join(tokens: list[str]) -> str:
        return "".join(tokens)


class WordTokenizer(_Tokenizer):
    """One id per word, after the four specials.

    Words are split at spaces, and a hyphenated word after its hyphen, which stays on the first
    part: 'twenty-seven thousand' -> ['twenty-', 'seven', 'thousand']. So decode(encode(t)) == t
    for any text of known words separated by single spaces.
    """

    _unit = "single word"
    _WORD = re.compile(r"[^\s-]+-?|-")

    @classmethod
    def split(cls, text: str) -> list[str]:
        """'twenty-seven thousand' -> ['twenty-', 'seven', 'thousand']."""
        return cls._WORD.findall(text)

    @staticmethod
    def join(tokens: list[str]) -> str:
        """Words joined by spaces, except straight after a hyphen."""
        text = ""
        for w in tokens:
            text += w if not text or text.endswith("-") else " " + w
        return text


# ---- byte-level BPE --------------------------------------------------------------------------

# GPT-2's split, written for Python's `re`: [^\W\d_] is a word character that is not a decimal digit
# (letters, and numerals such as ½ that GPT-2 counts as numbers), \d a digit, (?:[^\s\w]|_) anything
# else that is not a space. Every character falls in one alternative, so the pieces join to the text.
PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
_SPLIT = re.compile(PATTERN)
FORMAT = "transformer_lib.bpe/1"  # the format name saved files carry (BPE had a module of its own then)


def pretokenize(text: str) -> list[str]:
    """'To be, or not' -> ['To', ' be', ',', ' or', ' not']: the pieces inside which merges happen."""
    if not isinstance(text, str):
        raise TypeError(f"pretokenize expects a str, got {type(text).__name__}")
    return _SPLIT.findall(text)


def _merge(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """[a, b, c, a, b] with pair (a, b) -> [new_id, c, new_id]: every non-overlapping occurrence, left to right."""
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


@dataclass(frozen=True)
class BPETokenizer:
    """A trained byte-level BPE: id i < 256 is byte i, id 256 + r is the r-th merge (a pair of earlier ids).

    `counts`, when training filled it in, holds how often each merged pair occurred when it was chosen.
    """

    merges: tuple[tuple[int, int], ...]
    counts: tuple[int, ...] = field(default=(), compare=False)
    _ranks: dict = field(init=False, repr=False, compare=False)
    _vocab: list = field(init=False, repr=False, compare=False)
    _cache: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if len(set(self.merges)) != len(self.merges):
            raise ValueError("a pair can be merged only once, but merges repeats one")
        if self.counts and len(self.counts) != len(self.merges):
            raise ValueError(f"{len(self.counts)} counts for {len(self.merges)} merges")
        vocab = [bytes([b]) for b in range(256)]
        for r, (a, b) in enumerate(self.merges):
            if not (0 <= a < 256 + r and 0 <= b < 256 + r):
                raise ValueError(f"merge {r} is {(a, b)}, but only ids below {256 + r} exist at that point")
            vocab.append(vocab[a] + vocab[b])
        object.__setattr__(self, "_ranks", {pair: r for r, pair in enumerate(self.merges)})
        object.__setattr__(self, "_vocab", vocab)
        object.__setattr__(self, "_cache", {})

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.merges)

    def token_bytes(self, i: int) -> bytes:
        """The bytes id i stands for: token_bytes(256 + r) is the r-th merge's two parts joined."""
        return self._vocab[i]

    def _encode_piece(self, piece: str) -> list[int]:
        ids = self._cache.get(piece)
        if ids is None:
            ids = list(piece.encode("utf-8"))
            while len(ids) > 1:
                # the earliest-learned merge among the adjacent pairs, as training applied them
                rank, pair = min((self._ranks.get(p, len(self._ranks)), p) for p in zip(ids, ids[1:]))
                if rank == len(self._ranks):
                    break
                ids = _merge(ids, pair, 256 + rank)
            self._cache[piece] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """str -> [ids], any Unicode string; decode(encode(text)) == text."""
        return [i for piece in pretokenize(text) for i in self._encode_piece(piece)]

    def decode(self, ids: Iterable[int]) -> str:
        """[ids] -> str. Ids that end inside a multi-byte character decode to U+FFFD rather than failing."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids must lie in [0, {self.vocab_size}), got {bad[:5]}")
        return b"".join(self._vocab[i] for i in ids).decode("utf-8", errors="replace")

    def tokens(self, text: str) -> list[str]:
        """str -> the text of each token, for showing: 'To be' -> ['To', ' be']."""
        return [self._vocab[i].decode("utf-8", errors="replace") for i in self.encode(text)]

    def save(self, path: str | Path) -> Path:
        """Write the merges as JSON; load_bpe(path) gives an equal tokenizer."""
        path = Path(path)
        saved = {"format": FORMAT, "pattern": PATTERN, "merges": self.merges, "counts": self.counts}
        path.write_text(json.dumps(saved))
        return path


def load_bpe(path: str | Path) -> BPETokenizer:
    """Read a tokenizer that BPETokenizer.save wrote."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a saved BPETokenizer (expected format {FORMAT!r})")
    if data["pattern"] != PATTERN:
        raise ValueError(f"{path} was trained with another pre-tokenizer pattern: {data['pattern']!r}")
    return BPETokenizer(tuple((a, b) for a, b in data["merges"]), tuple(data.get("counts", ())))


def train_bpe(text: str | Iterable[str], num_merges: int, progress: bool = False) -> BPETokenizer:
    """Learn `num_merges` merges from text (a str, or an iterable of pre-tokenized pieces).

    Ties between equally frequent pairs go to the smaller (left id, right id). Counting is
    incremental: a merge only re-counts the distinct pieces that contain its pair, so 1000 merges on
    a megabyte of text take about a second, not minutes. Training stops early, with fewer merges, when no
    pair occurs twice or more.
    """
    if not isinstance(num_merges, int) or num_merges < 0:
        raise ValueError(f"num_merges must be a non-negative int, got {num_merges!r}")
    pieces = Counter(pretokenize(text) if isinstance(text, str) else text)
    words = [list(p.encode("utf-8")) for p in pieces]  # each distinct piece, as ids
    freqs = list(pieces.values())
    counts: Counter = Counter()  # pair -> occurrences in the corpus
    where = defaultdict(set)  # pair -> indices of the words it occurs in (may hold stale entries)
    for w, (ids, f) in enumerate(zip(words, freqs)):
        for pair in zip(ids, ids[1:]):
            counts[pair] += f
            where[pair].add(w)
    heap = [(-c, pair) for pair, c in counts.items()]
    heapq.heapify(heap)
    merges, merged_counts = [], []
    for r in tqdm(range(num_merges), desc="BPE merges", disable=not progress):
        while heap and -heap[0][0] != counts.get(heap[0][1], 0):  # drop entries whose count has changed
            heapq.heappop(heap)
        if not heap or -heap[0][0] < 2:
            break
        count, pair = heapq.heappop(heap)
        new_id = 256 + r
        merges.append(pair)
        merged_counts.append(-count)
        changed = set()
        for w in where.pop(pair):
            ids, f = words[w], freqs[w]
            if len(ids) < 2 or pair not in zip(ids, ids[1:]):
                continue
            for p in zip(ids, ids[1:]):
                counts[p] -= f
                changed.add(p)
            ids = words[w] = _merge(ids, pair, new_id)
            for p in zip(ids, ids[1:]):
                counts[p] += f
                where[p].add(w)
                changed.add(p)
        del counts[pair]
        changed.discard(pair)
        for p in changed:
            if counts[p] > 0:
                heapq.heappush(heap, (-counts[p], p))
            else:
                del counts[p]
    return BPETokenizer(tuple(merges), tuple(merged_counts))
