"""VioLA's tasks in one decoder (transformer_lib.viola): the id space, the sequences and their targets, the loss,
and reading and writing with a model."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib import viola

KEYS = "#*0123456789"


def _vocab(codes=8):
    return viola.SoundVocabulary(KEYS, codes)


def test_the_id_space_puts_specials_tasks_keys_and_codes_in_order():
    vocab = _vocab()
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.sep_id) == (0, 1, 2, 3)
    assert vocab.task_id("recognise") == 4 and vocab.task_id("synthesise") == 5
    assert vocab.key_ids("#9") == [6, 17] and vocab.first_code == 18 and vocab.size == 26
    assert vocab.code_ids(torch.tensor([0, 7])).tolist() == [18, 25]
    assert vocab.keys_of([1, 5, 6, 17, 20, 3, 8, 2, 9]) == "#90"  # codes and specials skipped, stops at <eos>
    with pytest.raises(ValueError, match=r"not keys: \['a'\]"):
        vocab.key_ids("1a")
    with pytest.raises(ValueError, match="below the codebook's size 8"):
        vocab.code_ids(torch.tensor([8]))
    with pytest.raises(ValueError, match="task must be one of"):
        vocab.task_id("translate")
    with pytest.raises(ValueError, match="distinct characters"):
        viola.SoundVocabulary("11", 8)
    with pytest.raises(ValueError, match="at least 2"):
        viola.SoundVocabulary(KEYS, 1)


def test_each_task_is_trained_on_its_answer_alone():
    vocab = _vocab()
    codes = torch.tensor([3, 0, 7])
    ids, targets = viola.task_sequence(vocab, "recognise", codes, "5#")
    assert ids == [1, 4, 21, 18, 25, 3, 13, 6, 2]  # '5' is id 13, '#' id 6
    # position t predicts ids[t + 1]; only the keys and <eos> (after <sep>) are targets
    assert targets == [-100, -100, -100, -100, -100, 13, 6, 2, -100]
    ids, targets = viola.task_sequence(vocab, "synthesise", codes, "5#")
    assert ids == [1, 5, 13, 6, 3, 21, 18, 25]
    assert targets == [-100, -100, -100, -100, 21, 18, 25, -100]  # the codes; no <eos>: the frames are fixed
    with pytest.raises(ValueError, match=r"\(F,\)"):
        viola.task_sequence(vocab, "recognise", codes[None], "5")


def test_a_batch_pads_and_the_loss_counts_only_the_answers():
    vocab = _vocab()
    codes = torch.tensor([[1, 2], [3, 4], [5, 6]])
    inputs, targets = viola.task_batch(vocab, ["recognise", "synthesise", "recognise"], codes, ["12", "7", "0"])
    assert inputs.shape == targets.shape == (3, 8)
    assert inputs[1, -1] == vocab.pad_id and targets[1, -1] == -100
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(vocab_size=vocab.size, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=16).eval()
    logits = model(inputs)
    kept = targets != -100
    by_hand = F.cross_entropy(logits[kept], targets[kept])
    assert torch.allclose(viola.task_loss(model, (inputs, targets)), by_hand)
    assert int(kept.sum()) == 3 + 2 + 2  # "12"<eos>, two codes, "0"<eos>
    with pytest.raises(ValueError, match="one task and one text per clip"):
        viola.task_batch(vocab, ["recognise"], codes, ["1", "2", "3"])


class _Scripted(torch.nn.Module):
    """A stand-in language model whose logits are set by hand (`forward`), with the caches a DecoderOnlyLM offers:
    what recognise reads from a model."""

    def __init__(self, size):
        super().__init__()
        self.size = size
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def new_cache(self, capacity=None):
        return []


def test_recognise_reads_keys_greedily_until_the_end_and_never_writes_a_code():
    vocab = _vocab()
    codes = torch.tensor([[1, 2, 3]])

    class Script(_Scripted):
        def forward(self, ids, caches=None):
            logits = torch.zeros(*ids.shape, self.size)
            logits[..., 20] = 9  # a code, the likeliest everywhere: masked out
            logits[ids == vocab.sep_id, 13] = 5  # after <sep>: key '5'
            logits[ids == 13, 6] = 5  # after '5': '#'
            logits[ids == 6, vocab.eos_id] = 5  # after '#': the end
            return logits

    assert viola.recognise(Script(vocab.size), vocab, codes) == ["5#"]


def test_synthesise_writes_exactly_the_frames_and_only_codes():
    vocab = _vocab()
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(vocab_size=vocab.size, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=32).eval()
    codes = viola.synthesise(model, vocab, ["1", "23", "4"], frames=6, generator=torch.Generator().manual_seed(1))
    assert codes.shape == (3, 6) and codes.min() >= 0 and codes.max() < vocab.codes
    again = viola.synthesise(model, vocab, ["1", "23", "4"], frames=6, generator=torch.Generator().manual_seed(1))
    assert torch.equal(codes, again)
    # greedy: each code is the argmax over the codes of the model's logits on the sequence so far
    greedy = viola.synthesise(model, vocab, ["23"], frames=4, temperature=0)
    seq = [vocab.bos_id, vocab.task_id("synthesise"), *vocab.key_ids("23"), vocab.sep_id]
    with torch.no_grad():
        for code in greedy[0].tolist():
            logits = model(torch.tensor([seq]))[0, -1, vocab.first_code :]
            assert code == int(logits.argmax())
            seq.append(code + vocab.first_code)
    with pytest.raises(ValueError, match="temperature must be a number >= 0"):
        viola.synthesise(model, vocab, ["1"], frames=2, temperature=-1)


def test_recognise_stops_at_max_keys_when_the_model_never_ends():
    vocab = _vocab()

    class Chatty(_Scripted):
        def forward(self, ids, caches=None):
            logits = torch.zeros(*ids.shape, self.size)
            logits[..., 13] = 5  # always '5', never the end
            return logits

    assert viola.recognise(Chatty(vocab.size), vocab, torch.tensor([[1, 2]]), max_keys=3) == ["555"]
    with pytest.raises(ValueError, match="top_k must be None or an int from 1 to the codebook's size 8"):
        viola.synthesise(Chatty(vocab.size), vocab, ["1"], frames=2, top_k=9)


def _filler(codes=8, quantizers=3, seed=0):
    torch.manual_seed(seed)
    config = tl.TransformerConfig(d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0, max_len=12,
                                  norm_first=True)  # fmt: skip
    return viola.CodebookFiller(config, _vocab(codes), quantizers).eval()


def test_the_filler_reads_every_frame_and_padding_the_keys_changes_nothing():
    model, vocab = _filler(), _vocab()
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 8, (2, 5, 3), generator=g)  # (B, F, Q)
    alone = model(torch.tensor([vocab.key_ids("7")]), codes[:1, :, :2], 3)  # (1, 5, 8)
    keys = viola.key_rows(vocab, ["7", "123"])  # (2, 3): the first row padded
    together = model(keys, codes[:, :, :2], 3)  # (2, 5, 8)
    assert together.shape == (2, 5, 8) and torch.allclose(alone[0], together[0], atol=1e-6)
    # every frame can see every other: changing the last frame's code moves the first frame's logits
    moved = codes.clone()
    moved[0, -1, 0] = (moved[0, -1, 0] + 1) % 8
    assert not torch.allclose(model(keys, moved[:, :, :2], 3)[0, 0], together[0, 0])
    with pytest.raises(ValueError, match="j must be a codebook from 2 to 3"):
        model(keys, codes[:, :, :0], 1)
    with pytest.raises(ValueError, match=r"reads codes \(B, F, 1\) of codebooks 1 to 1"):
        model(keys, codes[:, :, :2], 2)
    with pytest.raises(ValueError, match="at least 2 codebooks"):
        viola.CodebookFiller(model.config, vocab, 1)


def test_the_filler_loss_draws_a_codebook_and_fill_writes_them_in_turn():
    model, vocab = _filler(), _vocab()
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 8, (2, 5, 3), generator=g)
    texts = ["7", "123"]
    j = int(torch.randint(2, 4, (), generator=torch.Generator().manual_seed(9)))
    logits = model(viola.key_rows(vocab, texts), codes[..., : j - 1], j)
    by_hand = F.cross_entropy(logits.flatten(0, 1), codes[..., j - 1].flatten())
    assert torch.allclose(viola.filler_loss(model, texts, codes, torch.Generator().manual_seed(9)), by_hand)
    ids = viola.key_rows(vocab, texts)  # (2, 3): what a batch of fit carries
    assert torch.allclose(viola.filler_loss(model, ids, codes, torch.Generator().manual_seed(9)), by_hand)
    filled = viola.fill_codebooks(model, texts, codes[..., 0])
    assert filled.shape == (2, 5, 3) and torch.equal(filled[..., 0], codes[..., 0])
    for j in (2, 3):  # each codebook is the argmax given the ones before it
        expected = model(viola.key_rows(vocab, texts), filled[..., : j - 1], j).argmax(-1)
        assert torch.equal(filled[..., j - 1], expected)
    with pytest.raises(ValueError, match="must hold all 3 codebooks"):
        viola.filler_loss(model, texts, codes[..., :2])
