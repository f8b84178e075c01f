"""Small synthetic tasks that need no download, padding and batching.

Every task maker takes a `seed` and returns the same data for the same seed; batching takes an `rng`.
The tokenizers these tasks are encoded with live in `tokenization`.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import torch

from .tokenization import CharTokenizer

__all__ = [
    "pad_sequences",
    "copy_task",
    "reverse_task",
    "number_to_words",
    "numbers_to_words_task",
    "is_balanced",
    "brackets_task",
    "char_corpus",
    "split_data",
    "encode_pairs",
    "encode_labelled",
    "iterate_batches",
    "lm_batches",
    "repeated_tokens",
    "repeated_batches",
]


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int, length: int | None = None) -> torch.Tensor:
    """A list of id lists -> (N, L) long tensor padded on the right with pad_id; L = longest or `length`."""
    longest = max((len(s) for s in seqs), default=0)
    L = longest if length is None else length
    if L < longest:
        raise ValueError(f"length={L} is shorter than the longest sequence ({longest})")
    out = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


def _random_strings(n: int, seed: int, min_len: int, max_len: int, alphabet: str) -> list[str]:
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    capacity = sum(len(alphabet) ** k for k in range(min_len, max_len + 1))
    if n > capacity:
        raise ValueError(f"only {capacity} distinct strings exist for these lengths, asked for {n}")
    while len(out) < n:
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(min_len, max_len)))
        if s not in seen:  # distinct strings, so a train/test split never shares an example
            seen.add(s)
            out.append(s)
    return out


def copy_task(
    n: int, seed: int = 0, min_len: int = 3, max_len: int = 10, alphabet: str = "abcdefghijklmnop"
) -> list[tuple[str, str]]:
    """n distinct (s, s) pairs of random strings."""
    return [(s, s) for s in _random_strings(n, seed, min_len, max_len, alphabet)]


def reverse_task(
    n: int, seed: int = 0, min_len: int = 3, max_len: int = 10, alphabet: str = "abcdefghijklmnop"
) -> list[tuple[str, str]]:
    """n distinct (s, reversed s) pairs of random strings."""
    return [(s, s[::-1]) for s in _random_strings(n, seed, min_len, max_len, alphabet)]


_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def _below_thousand(n: int) -> str:
    hundreds, rest = divmod(n, 100)
    parts = [f"{_ONES[hundreds]} hundred"] if hundreds else []
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        parts.append(_TENS[tens] + (f"-{_ONES[ones]}" if ones else ""))
    elif rest:
        parts.append(_ONES[rest])
    return " ".join(parts)


def number_to_words(n: int) -> str:
    """0 <= n < 10**6 in English words: 4021 -> 'four thousand twenty-one'."""
    if not isinstance(n, int) or not 0 <= n < 10**6:
        raise ValueError(f"number_to_words takes an int in [0, 999999], got {n!r}")
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    parts = [f"{_below_thousand(thousands)} thousand"] if thousands else []
    if rest:
        parts.append(_below_thousand(rest))
    return " ".join(parts)


def numbers_to_words_task(
    n: int, seed: int = 0, max_number: int = 99_999, all_below: int = 1000, zero_pad: bool = True
) -> list[tuple[str, str]]:
    """n distinct ('04021', 'four thousand twenty-one') pairs.

    Every number below `all_below` is included (so short numbers are well represented, not 1% of
    the data as under uniform sampling); the rest are drawn uniformly from [all_below, max_number].
    With `zero_pad`, sources are written to the width of `max_number` with leading zeros, so each
    position always holds the same place value.
    """
    if n > max_number + 1:
        raise ValueError(f"only {max_number + 1} distinct numbers exist up to {max_number}, asked for {n}")
    rng = random.Random(seed)
    small = list(range(min(all_below, n, max_number + 1)))
    rest = rng.sample(range(len(small), max_number + 1), n - len(small))
    numbers = small + rest
    rng.shuffle(numbers)
    width = len(str(max_number)) if zero_pad else 0
    return [(str(k).zfill(width), number_to_words(k)) for k in numbers]


_PAIRS = {")": "(", "]": "[", "}": "{", ">": "<"}


def is_balanced(text: str) -> bool:
    """True when every bracket in `text` is closed by its partner in the right order."""
    stack = []
    for c in text:
        if c in _PAIRS.values():
            stack.append(c)
        elif c in _PAIRS:
            if not stack or stack.pop() != _PAIRS[c]:
                return False
    return not stack


def _balanced_string(rng: random.Random, pairs: int, kinds: str) -> str:
    out, stack = [], []
    opens = kinds[0::2]
    closes = dict(zip(kinds[0::2], kinds[1::2]))
    remaining = pairs
    while remaining or stack:
        if remaining and (not stack or rng.random() < 0.5):
            c = rng.choice(opens)
            out.append(c)
            stack.append(c)
            remaining -= 1
        else:
            out.append(closes[stack.pop()])
    return "".join(out)


def brackets_task(
    n: int, seed: int = 0, min_pairs: int = 1, max_pairs: int = 8, kinds: str = "()[]"
) -> list[tuple[str, int]]:
    """n (string, label) pairs, label 1 if balanced; half of each, negatives one edit away from balanced."""
    rng = random.Random(seed)
    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 10_000:
            raise ValueError(
                f"found only {len(out)} distinct examples for n={n} with {min_pairs} to {max_pairs} pairs; "
                "ask for fewer examples or allow more pairs"
            )
        s = _balanced_string(rng, rng.randint(min_pairs, max_pairs), kinds)
        if len(out) % 2 == 1:  # make a near miss: change, swap or drop one character
            chars = list(s)
            i = rng.randrange(len(chars))
            edit = rng.choice(("change", "swap", "drop"))
            if edit == "change":
                chars[i] = rng.choice([c for c in kinds if c != chars[i]])
            elif edit == "swap" and len(chars) > 1:
                j = rng.randrange(len(chars))
                chars[i], chars[j] = chars[j], chars[i]
            else:
                del chars[i]
            s = "".join(chars)
        label = int(is_balanced(s))
        if s and s not in seen and label == (len(out) % 2 == 0):
            seen.add(s)
            out.append((s, label))
    return out


_SUBJECTS = [
    "the cat",
    "the dog",
    "a small bird",
    "my sister",
    "the old man",
    "the teacher",
    "a robot",
    "the child",
    "our neighbour",
    "the farmer",
]
_VERBS = ["sees", "likes", "follows", "draws", "finds", "carries", "watches", "paints", "helps", "calls"]
_OBJECTS = [
    "the red ball",
    "a green apple",
    "the river",
    "a tall tree",
    "the blue house",
    "an open window",
    "the quiet garden",
    "a wooden box",
    "the yellow kite",
    "the morning train",
]
_ENDINGS = ["", " every day", " in the rain", " after lunch", " with great care", " again"]


def char_corpus(num_sentences: int = 4000, seed: int = 0) -> str:
    """A generated English-like text: sentences from a small grammar, one per line.

    Words repeat and follow rules, so a model with context can predict far better than
    one that sees only the previous character.
    """
    rng = random.Random(seed)
    lines = []
    for _ in range(num_sentences):
        sentence = f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}{rng.choice(_ENDINGS)}."
        if rng.random() < 0.3:
            sentence += f" then {rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} it."
        lines.append(sentence)
    return "\n".join(lines) + "\n"


def split_data(items: Sequence, fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0) -> list[list]:
    """Shuffle once with `seed` and cut into consecutive parts of the given fractions (last part gets the rest)."""
    if abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"fractions must sum to 1, got {list(fractions)} (sum {sum(fractions)})")
    order = list(items)
    random.Random(seed).shuffle(order)
    parts, start = [], 0
    for i, f in enumerate(fractions):
        end = len(order) if i == len(fractions) - 1 else start + round(f * len(order))
        parts.append(order[start:end])
        start = end
    return parts


def encode_pairs(
    pairs: Sequence[tuple[str, str]], src_tok: CharTokenizer, tgt_tok: CharTokenizer
) -> tuple[torch.Tensor, torch.Tensor]:
    """(src, tgt) strings -> src ids (N, S) and target ids (N, T) as <bos> ... <eos>, both padded."""
    src = pad_sequences([src_tok.encode(s) for s, _ in pairs], src_tok.pad_id)  # (N, S)
    tgt = pad_sequences([tgt_tok.encode(t, bos=True, eos=True) for _, t in pairs], tgt_tok.pad_id)  # (N, T)
    return src, tgt


def encode_labelled(
    items: Sequence[tuple[str, int | float]], tok: CharTokenizer, bos: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(text, label) pairs -> ids (N, S) padded (each starting with <bos> if asked) and labels (N,)."""
    x = pad_sequences([tok.encode(s, bos=bos) for s, _ in items], tok.pad_id)  # (N, S)
    labels = [y for _, y in items]
    dtype = torch.float32 if any(isinstance(y, float) for y in labels) else torch.long
    return x, torch.tensor(labels, dtype=dtype)


def _trim(t: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Drop columns that are padding in every row: (N, L) -> (N, L')."""
    if t.dim() != 2:
        return t
    used = (t != pad_id).any(dim=0).nonzero()
    return t[:, : int(used.max()) + 1] if used.numel() else t[:, :1]


def iterate_batches(
    *tensors: torch.Tensor,
    batch_size: int,
    shuffle: bool = True,
    rng: torch.Generator | None = None,
    pad_id: int | None = None,
    forever: bool = False,
) -> Iterator[tuple[torch.Tensor, ...]]:
    """Yield tuples of aligned row slices (batch_size rows each); trims all-pad columns when pad_id is given."""
    n = tensors[0].shape[0]
    if any(t.shape[0] != n for t in tensors):
        raise ValueError(f"all tensors need the same number of rows, got {[t.shape[0] for t in tensors]}")
    while True:
        order = torch.randperm(n, generator=rng) if shuffle else torch.arange(n)
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            batch = tuple(t[idx] for t in tensors)
            yield batch if pad_id is None else tuple(_trim(b, pad_id) for b in batch)
        if not forever:
            return


def lm_batches(
    ids: torch.Tensor, block_size: int, batch_size: int, rng: torch.Generator | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless random windows of a 1-D id stream: x (B, block_size) and y = x shifted by one."""
    if ids.dim() != 1 or ids.numel() <= block_size:
        raise ValueError(f"need a 1-D id stream longer than block_size={block_size}, got shape {tuple(ids.shape)}")
    while True:
        starts = torch.randint(0, ids.numel() - block_size, (batch_size,), generator=rng)  # (B,)
        offsets = torch.arange(block_size)  # (block_size,)
        x = ids[starts[:, None] + offsets]  # (B, block_size)
        y = ids[starts[:, None] + offsets + 1]  # (B, block_size)
        yield x, y


def repeated_tokens(batch_size: int, n: int, vocab_size: int, rng: torch.Generator | None = None) -> torch.Tensor:
    """Random blocks of n tokens, each shown twice: (B, 2n) ids drawn uniformly from 1 .. vocab_size - 1.

    Id 0 is left out: it is the models' padding id, so the data never contain it. (A DecoderOnlyLM does
    not hold that id's embedding at zero; the blocks never read it.)

    The first copy cannot be predicted; the second can, token by token, by a model that finds where
    the current token appeared before and copies what came next: an induction head's job.
    """
    if n < 2 or vocab_size < 3:
        raise ValueError(f"need n >= 2 tokens from vocab_size >= 3, got n={n}, vocab_size={vocab_size}")
    block = torch.randint(1, vocab_size, (batch_size, n), generator=rng)  # (B, n)
    return torch.cat([block, block], dim=1)  # (B, 2n)


def repeated_batches(
    vocab_size: int, lengths: tuple[int, int], batch_size: int, rng: torch.Generator | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless language-model batches of repeated random blocks: x (B, 2n - 1), y = x shifted by one.

    Each batch draws its block length n uniformly from lengths = (low, high), both included, so the
    repeat is not always the same distance back and a model must match content, not positions.
    """
    low, high = lengths
    if not 2 <= low <= high:
        raise ValueError(f"lengths must be (low, high) with 2 <= low <= high, got {lengths}")
    while True:
        n = int(torch.randint(low, high + 1, (1,), generator=rng))
        seq = repeated_tokens(batch_size, n, vocab_size, rng)  # (B, 2n)
        yield seq[:, :-1], seq[:, 1:]  # (B, 2n - 1) each
