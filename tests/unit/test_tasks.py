import pytest
import torch

from transformer_lib import tasks, tokenization


def test_tokenizer_round_trip_and_specials():
    tok = tokenization.CharTokenizer("abc ")
    ids = tok.encode("cab a", bos=True, eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    assert tok.decode(ids) == "cab a"
    assert tok.vocab_size == 4 + 4
    assert tok.encode("z") == [tok.unk_id]


def test_pad_sequences():
    out = tasks.pad_sequences([[5, 6, 7], [8]], pad_id=0)
    assert out.tolist() == [[5, 6, 7], [8, 0, 0]]
    with pytest.raises(ValueError, match="shorter than the longest"):
        tasks.pad_sequences([[1, 2, 3]], 0, length=2)


@pytest.mark.parametrize(
    "n,words",
    [
        (0, "zero"),
        (13, "thirteen"),
        (40, "forty"),
        (99, "ninety-nine"),
        (100, "one hundred"),
        (101, "one hundred one"),
        (4021, "four thousand twenty-one"),
        (70000, "seventy thousand"),
        (999999, "nine hundred ninety-nine thousand nine hundred ninety-nine"),
    ],
)
def test_number_to_words(n, words):
    assert tasks.number_to_words(n) == words


def test_tasks_are_deterministic_and_distinct():
    assert tasks.reverse_task(50, seed=3) == tasks.reverse_task(50, seed=3)
    assert tasks.reverse_task(50, seed=3) != tasks.reverse_task(50, seed=4)
    pairs = tasks.reverse_task(200, seed=0)
    assert all(t == s[::-1] for s, t in pairs)
    assert len({s for s, _ in pairs}) == 200
    assert all(s == t for s, t in tasks.copy_task(20))
    nums = tasks.numbers_to_words_task(100, seed=1)
    assert len({s for s, _ in nums}) == 100
    assert all(tasks.number_to_words(int(s)) == t for s, t in nums)


def test_brackets_are_labelled_correctly_and_balanced_in_count():
    items = tasks.brackets_task(400, seed=0)
    assert all(label == int(tasks.is_balanced(s)) for s, label in items)
    assert sum(label for _, label in items) == 200
    assert tasks.is_balanced("([])[]") and not tasks.is_balanced("([)]") and not tasks.is_balanced("((")


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_brackets_task_refuses_more_examples_than_exist():
    with pytest.raises(ValueError, match=r"found only \d+ distinct examples for n=5000 with 1 to 2 pairs"):
        tasks.brackets_task(5000, seed=0, min_pairs=1, max_pairs=2)


def test_corpus_is_deterministic_text():
    a, b = tasks.char_corpus(50, seed=0), tasks.char_corpus(50, seed=0)
    assert a == b and a.count("\n") == 50 and a != tasks.char_corpus(50, seed=1)


def test_split_is_a_disjoint_partition():
    train, val, test = tasks.split_data(list(range(100)), (0.8, 0.1, 0.1), seed=0)
    assert (len(train), len(val), len(test)) == (80, 10, 10)
    assert sorted(train + val + test) == list(range(100))


def test_encode_pairs_and_batches():
    tok = tokenization.CharTokenizer("abc")
    src, tgt = tasks.encode_pairs([("ab", "ba"), ("abc", "cba")], tok, tok)
    assert src.shape == (2, 3) and tgt.shape == (2, 5)
    assert tgt[0].tolist() == [tok.bos_id, *tok.encode("ba"), tok.eos_id, tok.pad_id]
    batches = list(tasks.iterate_batches(src, tgt, batch_size=1, shuffle=False, pad_id=tok.pad_id))
    assert [b[0].shape for b in batches] == [(1, 2), (1, 3)]  # all-pad columns trimmed


def test_encode_labelled_with_and_without_bos():
    tok = tokenization.CharTokenizer("()")
    x, y = tasks.encode_labelled([("()", 1), ("(", 0)], tok)
    assert x.tolist() == [[4, 5], [4, 0]] and y.tolist() == [1, 0] and y.dtype == torch.long
    xb, _ = tasks.encode_labelled([("()", 1)], tok, bos=True)
    assert xb.tolist() == [[tok.bos_id, 4, 5]]
    _, yf = tasks.encode_labelled([("(", 0.5)], tok)
    assert yf.dtype == torch.float32


def test_lm_batches_are_shifted_by_one():
    ids = torch.arange(100)
    x, y = next(tasks.lm_batches(ids, block_size=8, batch_size=4, rng=torch.Generator().manual_seed(0)))
    assert x.shape == y.shape == (4, 8)
    assert torch.equal(y, x + 1)


def test_word_tokenizer_round_trip_keeps_hyphens_and_marks_unknown_words():
    pairs = tasks.numbers_to_words_task(3000, seed=1)
    tok = tokenization.WordTokenizer.from_texts(t for _, t in pairs)
    assert tokenization.WordTokenizer.split("twenty-seven thousand") == ["twenty-", "seven", "thousand"]
    for _, text in pairs:
        ids = tok.encode(text, bos=True, eos=True)
        assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and tok.unk_id not in ids
        assert tok.decode(ids) == text
    assert tok.encode("seven apples") == [tok.stoi["seven"], tok.unk_id]
    assert tok.decode(tok.encode("seven") + [tok.eos_id, tok.stoi["one"]]) == "seven"
    with pytest.raises(ValueError, match="single words"):
        tokenization.WordTokenizer(["two words"])
    with pytest.raises(TypeError, match="str"):
        tok.encode(7)


def test_repeated_tokens_show_each_block_twice_and_batches_vary_the_length():
    g = torch.Generator().manual_seed(0)
    seqs = tasks.repeated_tokens(5, 7, 10, g)
    assert seqs.shape == (5, 14) and torch.equal(seqs[:, :7], seqs[:, 7:])
    assert seqs.min() >= 1 and seqs.max() <= 9  # never the padding id 0
    batches = tasks.repeated_batches(10, (3, 6), 4, torch.Generator().manual_seed(1))
    lengths = set()
    for _ in range(30):
        x, y = next(batches)
        n = (x.shape[1] + 1) // 2
        assert x.shape == y.shape == (4, 2 * n - 1) and torch.equal(x[:, 1:], y[:, :-1])
        assert torch.equal(y[:, n - 1 :], x[:, :n])  # the second copy is the first again
        lengths.add(n)
    assert lengths == {3, 4, 5, 6}
    with pytest.raises(ValueError, match="n >= 2"):
        tasks.repeated_tokens(2, 1, 10)
    with pytest.raises(ValueError, match="lengths must be"):
        next(tasks.repeated_batches(10, (5, 3), 4))
