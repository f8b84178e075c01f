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


def test_two_codebooks_interleave_frame_by_frame_and_come_back():
    vocab = viola.SoundVocabulary(KEYS, 8, codebooks=2)
    assert vocab.first_code == 18 and vocab.size == 18 + 2 * 8
    assert vocab.code_range(0) == range(18, 26) and vocab.code_range(1) == range(26, 34)
    codes = torch.tensor([[[3, 0], [7, 5]], [[1, 1], [0, 7]]])  # (B 2, F 2, Q 2)
    ids = vocab.code_ids(codes)  # (2, 4): frame 1's codebooks 1 and 2, then frame 2's
    assert ids.tolist() == [[21, 26, 25, 31], [19, 27, 18, 33]]
    assert torch.equal(vocab.codes_of(ids), codes)
    with pytest.raises(ValueError, match="not a code of its codebook"):
        vocab.codes_of(torch.tensor([26, 26]))  # codebook 2's id where codebook 1's belongs
    with pytest.raises(ValueError, match="not whole frames of 2 codebooks"):
        vocab.codes_of(torch.tensor([21, 26, 25]))
    with pytest.raises(ValueError, match=r"\(\.\.\., F, 2\)"):
        vocab.code_ids(torch.tensor([[3, 0, 1]]))  # three codebooks to a frame
    with pytest.raises(ValueError, match="codebook q must be from 0 to 1"):
        vocab.code_range(2)
    with pytest.raises(ValueError, match="codebooks must be"):
        viola.SoundVocabulary(KEYS, 8, codebooks=0)
    ids, targets = viola.task_sequence(vocab, "synthesise", codes[0], "5")
    assert ids == [1, 5, 13, 3, 21, 26, 25, 31] and targets == [-100, -100, -100, 21, 26, 25, 31, -100]
    with pytest.raises(ValueError, match=r"\(F, 2\)"):
        viola.task_sequence(vocab, "recognise", codes[0, :, 0], "5")


def test_synthesise_writes_each_position_from_its_own_codebook():
    vocab = viola.SoundVocabulary(KEYS, 8, codebooks=2)

    class FirstBookFan(_Scripted):
        def forward(self, ids, caches=None):
            logits = torch.zeros(*ids.shape, self.size)
            logits[..., 20] = 9  # codebook 1's code 2, likeliest everywhere
            logits[..., 30] = 3  # codebook 2's code 4
            return logits

    written = viola.synthesise(FirstBookFan(vocab.size), vocab, ["1", "23"], frames=3, temperature=0)
    assert written.shape == (2, 3, 2)  # (B, frames, Q)
    assert written[..., 0].eq(2).all() and written[..., 1].eq(4).all()  # never codebook 1's id in codebook 2's place
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(vocab_size=vocab.size, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=32).eval()
    greedy = viola.synthesise(model, vocab, ["23"], frames=3, temperature=0)
    seq = [vocab.bos_id, vocab.task_id("synthesise"), *vocab.key_ids("23"), vocab.sep_id]
    with torch.no_grad():
        for position, id_ in enumerate(vocab.code_ids(greedy[0]).tolist()):
            allowed = vocab.code_range(position % 2)
            logits = model(torch.tensor([seq]))[0, -1, allowed.start : allowed.stop]
            assert id_ == allowed.start + int(logits.argmax())
            seq.append(id_)
    sampled = viola.synthesise(model, vocab, ["1", "23"], frames=5, generator=torch.Generator().manual_seed(3))
    assert sampled.shape == (2, 5, 2) and sampled.min() >= 0 and sampled.max() < 8


def test_recognise_reads_interleaved_codes():
    vocab = viola.SoundVocabulary(KEYS, 8, codebooks=2)
    seen = []

    class Script(_Scripted):
        def forward(self, ids, caches=None):
            seen.append(ids.shape[1])
            logits = torch.zeros(*ids.shape, self.size)
            logits[ids == vocab.sep_id, 13] = 5  # after <sep>: '5'
            logits[ids == 13, vocab.eos_id] = 5
            return logits

    assert viola.recognise(Script(vocab.size), vocab, torch.zeros(1, 3, 2, dtype=torch.long)) == ["5"]
    assert seen[0] == 2 + 3 * 2 + 1  # <bos> <recognise>, 3 frames of 2 codes, <sep>


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


@pytest.mark.slow  # 300 clips at 16 kHz, three times: make test runs it, make check does not
def test_the_held_out_clips_are_chapter_16s_on_either_line_at_any_rate():
    from transformer_lib import recipes, speech

    quiet, texts = recipes.viola_test("quiet", recipes.CODEC_RATE)
    noisy, same = recipes.viola_test("noisy")
    assert quiet.shape == (300, 4000) and noisy.shape == (300, 16000)
    assert texts == same == recipes.touch_tone_test()[1]
    assert torch.equal(noisy, recipes.touch_tone_test()[0])  # the noisy line is chapter 16's test set itself
    clean = speech.touch_tone_clips(300, seed=recipes._SPEECH_TEST[1], snr_db=None)[0][:, ::4]  # (300, 4000)
    snr = 10 * torch.log10(clean.pow(2).mean(1) / (quiet - clean).pow(2).mean(1))  # (300,): each clip's line
    assert 29.5 < float(snr.min()) and float(snr.max()) < 40.5  # decimated noise keeps its power
    with pytest.raises(ValueError, match="line must be one of"):
        recipes.viola_test("loud")
    with pytest.raises(ValueError, match="sampling_rate must be 16000, 8000 or 4000"):
        recipes.viola_test("quiet", 5000)


@pytest.mark.slow  # a few seconds: make test runs it, make check does not
def test_the_shipped_viola_recognises_and_speaks_as_its_checkpoint_recorded():
    from transformer_lib import recipes

    model, meta = tl.load_checkpoint("touch_tone_viola")
    codec, _ = tl.load_checkpoint("touch_tone_codec")
    assert model.config.vocab_size == recipes.viola_vocabulary().size == 146
    scores, recorded = recipes.viola_scores(model, codec), meta["evals"][-1]
    assert scores["recognised"] == pytest.approx(recorded["recognised"], abs=3 / 64)
    # sampling: a rounding difference on another CPU can change one draw, and the rest of that clip with it
    assert scores["read back, sampled"] == pytest.approx(recorded["read back, sampled"], abs=0.1)
    assert scores["recognised"] >= 0.85 and scores["read back, sampled"] >= 0.45
    assert scores["read back, greedy"] <= 0.1  # greedy writing repeats itself: the chapter's point


def test_synthesise_with_uniforms_samples_by_the_inverse_cdf_of_each_codebooks_distribution():
    """With `uniforms`, each code is the first whose cumulative probability (the softmax over its position's
    codebook, at the temperature) exceeds that position's number: checked step by step against the model's own
    logits, and at the boundaries of the first step's distribution, where a hair's difference picks the next code."""
    vocab = viola.SoundVocabulary(KEYS, 8, codebooks=2)
    torch.manual_seed(0)
    model = tl.DecoderOnlyLM(vocab_size=vocab.size, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=32).eval()
    u = torch.rand(1, 3 * 2, generator=torch.Generator().manual_seed(4))  # (1, frames * Q)
    written = viola.synthesise(model, vocab, ["23"], frames=3, temperature=0.7, uniforms=u)  # (1, 3, 2)
    seq = [vocab.bos_id, vocab.task_id("synthesise"), *vocab.key_ids("23"), vocab.sep_id]
    with torch.no_grad():
        for position, code in enumerate(written[0].flatten().tolist()):
            ids = vocab.code_range(position % 2)
            probs = (model(torch.tensor([seq]))[0, -1, ids.start : ids.stop] / 0.7).double().softmax(-1)  # (8,)
            cdf = probs.cumsum(0)
            assert code == int((cdf <= u[0, position]).sum())  # the first code whose sum exceeds u
            seq.append(code + ids.start)
    # at the first step's boundaries: just below cdf[k] gives code k, just above gives code k + 1
    prefix = torch.tensor([[vocab.bos_id, vocab.task_id("synthesise"), *vocab.key_ids("23"), vocab.sep_id]])
    with torch.no_grad():
        cdf = model(prefix)[0, -1, vocab.code_range(0).start : vocab.code_range(0).stop].softmax(-1).cumsum(0)
    for k in (0, 3, 6):
        for shift, want in ((-1e-4, k), (1e-4, k + 1)):
            first = torch.full((1, 2), 0.5)
            first[0, 0] = float(cdf[k]) + shift
            assert int(viola.synthesise(model, vocab, ["23"], frames=1, uniforms=first)[0, 0, 0]) == want
    # a number the rounded sum never reaches still gives a code: the last one with any probability
    beyond = torch.full((1, 2), 1 - 1e-12, dtype=torch.float64)  # 1.0 once in float32, above every rounded sum
    assert int(viola.synthesise(model, vocab, ["23"], frames=1, uniforms=beyond)[0, 0, 0]) == 7
    with pytest.raises(ValueError, match=r"one number per text and position, \(1, 6\), got \(1, 5\)"):
        viola.synthesise(model, vocab, ["23"], frames=3, uniforms=torch.rand(1, 5))
    with pytest.raises(ValueError, match=r"uniforms must lie in \[0, 1\)"):
        viola.synthesise(model, vocab, ["23"], frames=1, uniforms=torch.ones(1, 2))
    with pytest.raises(TypeError, match="uniforms must be a float tensor"):
        viola.synthesise(model, vocab, ["23"], frames=1, uniforms=torch.zeros(1, 2, dtype=torch.long))
