"""Chapter 15's data and fine-tuning methods (transformer_lib.pretraining)."""

from __future__ import annotations

import json

import pytest
import torch

from transformer_lib import bert, corpus, recipes
from transformer_lib import pretraining as P


def test_words_split_lowercase_keep_inner_apostrophes_and_one_mark_each():
    assert P.PlayWords.split("O, it came o'er my ear--'Tis") == [
        "o",
        ",",
        "it",
        "came",
        "o'er",
        "my",
        "ear",
        "-",
        "-",
        "'tis",
    ]


def test_the_vocabulary_round_trips_and_marks_rare_words_unknown(tmp_path):
    vocab = P.PlayWords.from_text("the cat the dog the cat zebra", min_count=2)
    assert vocab.itos == [*P.SPECIALS, "the", "cat"]  # most frequent first; "dog" and "zebra" are rare
    assert vocab.encode("The cat, the zebra") == [5, 6, P.UNK, 5, P.UNK]
    assert vocab.decode([P.CLS, 5, 6, P.SEP, P.PAD]) == "the cat"
    assert vocab.decode([P.CLS, 5, P.MASK, P.PAD], keep_specials=True) == "[CLS] the [MASK]"
    again = P.PlayWords.load(vocab.save(tmp_path / "words.json"))
    assert again.itos == vocab.itos
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a PlayWords file"):
        P.PlayWords.load(tmp_path / "other.json")
    with pytest.raises(ValueError, match=r"may not hold the special tokens \['\[MASK\]'\]"):
        P.PlayWords(["a", "[MASK]"])


def test_windows_are_cls_words_sep_and_cover_the_stream_in_order():
    vocab = P.PlayWords.from_text("a b c d e f g", min_count=1)
    windows = P.mlm_windows(vocab, "a b c d e f g", length=5)  # 3 words each: two windows, "g" left over
    assert windows.tolist() == [[P.CLS, 5, 6, 7, P.SEP], [P.CLS, 8, 9, 10, P.SEP]]
    with pytest.raises(ValueError, match="length >= 3, got 2"):
        P.mlm_windows(vocab, "a b", length=2)


def test_twelfth_nights_speeches_and_the_order_task():
    spoken = P.speeches("twelfth_night")
    assert spoken[0] == ("DUKE", spoken[0][1]) and spoken[0][1].startswith("If music be the food of love, play on,")
    assert not any("[" in said for _, said in spoken)  # stage directions left out
    assert {"SIR TOBY", "VIOLA", "OLIVIA", "CLOWN", "MALVOLIO", "DUKE"} <= {who for who, _ in spoken}
    texts, labels = P.order_task()
    assert len(texts) == len(labels) == 725 and 0.4 < labels.float().mean() < 0.6
    is_word = lambda w: w[0].isalpha() or w[0] == "'"
    kept = [P.PlayWords.split(said) for _, said in spoken]
    kept = [words for words in kept if sum(map(is_word, words)) >= 6]
    for words, text, y in zip(kept, texts, labels.tolist()):
        got = text.split(" ")
        assert sorted(got) == sorted(words)  # the same words, scrambled or not
        assert [w for w in got if not is_word(w)] == [w for w in words if not is_word(w)]
        assert [i for i, w in enumerate(got) if not is_word(w)] == [i for i, w in enumerate(words) if not is_word(w)]
        assert (got == words) == bool(y) or len(set(filter(is_word, words))) == 1  # scrambled means moved
    assert texts[0].startswith("if music be the food of love , play on")
    again, other = P.order_task(), P.order_task(seed=1)
    assert again[0] == texts and torch.equal(again[1], labels)  # fixed by its seed
    assert not torch.equal(other[1], labels)


def test_scramble_moves_only_the_words():
    words = ["o", ",", "it", "came", "o'er", "my", "ear", "."]
    out = P.scramble(words, torch.Generator().manual_seed(1))
    assert out[1] == "," and out[-1] == "." and sorted(out) == sorted(words) and out != words


def test_the_split_is_fixed_and_no_speech_is_in_both_parts():
    vocab = recipes.plays_words()
    pool_ids, pool_y, test_ids, test_y = P.order_split(vocab, recipes.BERT_WINDOW)
    again = P.order_split(vocab, recipes.BERT_WINDOW)
    assert torch.equal(again[0], pool_ids) and torch.equal(again[2], test_ids)
    assert test_ids.shape[0] == P.ORDER_TEST and pool_ids.shape[0] == recipes.LABEL_BUDGETS[-1]
    assert (pool_ids[:, 0] == P.CLS).all() and pool_ids.shape[1] <= recipes.BERT_WINDOW
    rows = lambda ids: {tuple(r[r != P.PAD].tolist()) for r in ids}
    assert len(rows(pool_ids) & rows(test_ids)) <= 3  # a few speeches may occur twice in the play


def test_the_vocabulary_and_windows_of_the_chapter():
    vocab, train, held_out = recipes.plays_mlm_data()
    assert vocab.vocab_size == 2560
    assert train.shape[1] == held_out.shape[1] == recipes.BERT_WINDOW
    assert train.shape[0] > 10 * held_out.shape[0]
    assert vocab.decode(held_out[0], keep_specials=True).startswith("[CLS] [UNK] night ; or , what you will")


def test_fine_tune_refuses_what_it_cannot_do():
    vocab = P.PlayWords.from_text("a b c d", min_count=1)
    pre = bert.BertForMaskedLM(bert.bert_config(vocab_size=vocab.vocab_size, d_model=8, num_heads=2, num_layers=1))
    ids = P.encode_batch(vocab, ["a b", "c d", "a c"], 8)
    data = (ids, torch.tensor([0, 1, 0]), ids, torch.tensor([0, 1, 0]))
    with pytest.raises(
        ValueError, match=r"method must be one of \('scratch', 'probe', 'full', 'lora', 'last'\), got 'fine'"
    ):
        P.fine_tune("fine", pre, data, 2)
    with pytest.raises(ValueError, match="budget must be from 2 to the pool's 3 speeches, got 4"):
        P.fine_tune("full", pre, data, 4)
    with pytest.raises(ValueError, match=r"pooling must be one of \('cls', 'mean'\), got 'max'"):
        P.fine_tune("full", pre, data, 2, pooling="max")


def test_the_mean_pooled_classifier_reads_what_the_probe_reads():
    """Its logits are its linear layer on mean_features: the words' mean, [CLS], [SEP] and padding left out."""
    vocab = P.PlayWords.from_text("a b c d e f", min_count=1)
    torch.manual_seed(0)
    cfg = bert.bert_config(vocab_size=vocab.vocab_size, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=8)
    pre = bert.BertForMaskedLM(cfg)
    model = P.MeanPooledClassifier(cfg, 3)
    model.bert.load_state_dict(pre.bert.state_dict())  # strict: no pooler on either side
    model.eval()
    ids = P.encode_batch(vocab, ["a b c", "d e", "f"], 8)  # (3, 5), padded
    with torch.no_grad():
        logits = model(ids)  # (3, 3)
        assert torch.allclose(logits, model.classifier(P.mean_features(pre, ids)), atol=1e-6)
        hidden, _ = pre.bert(ids)  # (3, 5, 8)
        by_hand = torch.stack([hidden[i, 1 : 1 + n].mean(0) for i, n in enumerate((3, 2, 1))])  # words only
        assert torch.allclose(logits, model.classifier(by_hand), atol=1e-6)
        wider = torch.cat([ids, torch.full((3, 2), P.PAD)], 1)  # (3, 7): more padding changes nothing
        assert torch.allclose(model(wider), logits, atol=1e-6)


@pytest.mark.parametrize(
    ("method", "pooling"), [(m, "cls") for m in P.ALL_METHODS] + [("full", "mean"), ("lora", "mean"), ("last", "mean")]
)
def test_each_method_trains_what_it_says_and_the_same_seed_gives_the_same_model(method, pooling):
    vocab = P.PlayWords.from_text("a b c d e f", min_count=1)
    torch.manual_seed(0)
    cfg = bert.bert_config(vocab_size=vocab.vocab_size, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=8)
    pre = bert.BertForMaskedLM(cfg)
    ids = P.encode_batch(vocab, ["a b", "c d", "a c", "e f", "b f", "d e"], 8)
    y = torch.tensor([0, 1, 0, 1, 0, 1])
    data = (ids, y, ids, y)
    model, result = P.fine_tune(method, pre, data, 4, seed=3, steps=3, pooling=pooling)
    again, _ = P.fine_tune(method, pre, data, 4, seed=3, steps=3, pooling=pooling)
    correct = result["test correct"]  # (6,): each test row right or not, and the accuracy is their share
    assert correct.shape == (6,) and correct.dtype == torch.bool
    assert result["test accuracy"] == pytest.approx(correct.double().mean().item())
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), name
    trains = {n for n, p in model.named_parameters() if p.requires_grad}
    if method == "probe":
        assert isinstance(model, torch.nn.Linear) and result["trainable parameters"] == 8 * 2 + 2
    else:  # the classifier that reads what `pooling` says, and only it has a pooler
        assert isinstance(model, bert.BertClassifier if pooling == "cls" else P.MeanPooledClassifier)
        assert (model.bert.pooler is None) == (pooling == "mean")
    if method == "lora":
        assert trains and all("lora_" in n or n.startswith(("bert.pooler", "classifier")) for n in trains)
    elif method == "last":  # the last encoder layer (of one here) and what reads it
        last = f"bert.encoder.layers.{len(model.bert.encoder.layers) - 1}."
        assert trains == {n for n, _ in model.named_parameters() if n.startswith((last, "bert.pooler", "classifier"))}
        assert any(n.startswith(last) for n in trains)
    elif method != "probe":
        assert "bert.embeddings.word.table.weight" in trains
    if method in ("full", "lora", "last"):  # they start from the pre-trained encoder; scratch does not
        start = pre.bert.embeddings.position.weight
        assert torch.equal(model.bert.embeddings.position.weight, start) == (method != "full")


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_the_shipped_checkpoint_loads_and_fills_in_words():
    from transformer_lib.checkpoints import CHECKPOINT_DIR, load_checkpoint

    if not (CHECKPOINT_DIR / "plays_bert.pt").is_file():
        pytest.skip("plays_bert.pt is not trained yet")
    model, meta = load_checkpoint("plays_bert")
    assert isinstance(model, bert.BertForMaskedLM) and meta["recipe"] == "plays_bert"
    _, _, held_out = recipes.plays_mlm_data()
    assert recipes.masked_accuracy(model, held_out)["masked accuracy"] == pytest.approx(
        meta["evals"][-1]["masked accuracy"], abs=0.01
    )
    assert corpus.HELD_OUT == ("twelfth_night",)


def test_the_learning_curve_file_holds_every_method_budget_and_seed():
    runs = recipes.load_finetune_runs()
    assert runs["budgets"] == list(recipes.LABEL_BUDGETS)
    read_mean = [f"{m} mean" for m in ("full", "lora", "last")]  # reading the words' mean, not [CLS]
    assert set(runs["runs"]) == {f"{m} {b}" for m in [*P.METHODS, *read_mean] for b in recipes.LABEL_BUDGETS}
    for name, records in runs["runs"].items():
        assert [r["seed"] for r in records] == list(recipes.SEEDS), name
        assert all(0.0 <= r["test_accuracy"] <= 1.0 and r["seconds"] >= 0 for r in records), name
        if not name.startswith("scratch"):  # chapter 15 pairs the pre-trained methods over the test speeches
            for r in records:
                assert len(r["test_correct"]) == P.ORDER_TEST and set(r["test_correct"]) <= {"0", "1"}, name
                assert r["test_correct"].count("1") / P.ORDER_TEST == pytest.approx(r["test_accuracy"]), name
    assert 0.5 <= runs["test majority"] < 0.6


@pytest.mark.slow
def test_a_point_of_the_learning_curve_is_reproduced_by_its_method():
    """Full fine-tuning at the smallest budget, seed 1, run again: the same accuracy as the file, up to a few of the
    300 test speeches (kernels on another machine round differently)."""
    from transformer_lib.checkpoints import load_checkpoint

    budget = recipes.LABEL_BUDGETS[0]
    pretrained, _ = load_checkpoint("plays_bert")
    task = P.order_split(recipes.plays_words(), recipes.BERT_WINDOW)
    _, result = P.fine_tune("full", pretrained, task, budget, seed=1)
    shipped = recipes.load_finetune_runs()["runs"][f"full {budget}"][1]["test_accuracy"]
    assert result["test accuracy"] == pytest.approx(shipped, abs=0.02)


@pytest.mark.slow
def test_the_sweep_tool_skips_what_the_file_holds_and_refuses_unknown_methods(tmp_path, monkeypatch):
    import finetune_runs  # tools/ is on pytest's pythonpath

    calls = []

    def stand_in(method, pretrained, task, budget, seed, pooling):
        calls.append((method, budget, seed) if pooling == "cls" else (method, pooling, budget, seed))
        return None, {"test accuracy": 0.5, "trainable parameters": 1.0, "seconds": 0.1}

    monkeypatch.setattr(finetune_runs.pretraining, "fine_tune", stand_in)
    monkeypatch.setattr(finetune_runs, "load_checkpoint", lambda name: (None, {}))
    out = tmp_path / "runs.json"
    assert finetune_runs.main(["probe", "--seeds", "2", "--out", str(out)]) == 0
    assert calls == [("probe", b, s) for b in recipes.LABEL_BUDGETS for s in (0, 1)]
    calls.clear()
    finetune_runs.main(["probe", "--seeds", "2", "--out", str(out)])
    assert calls == []  # everything is in the file already
    finetune_runs.main(["probe", "--seeds", "1", "--force", "--out", str(out)])
    assert calls == [("probe", b, 0) for b in recipes.LABEL_BUDGETS]
    calls.clear()
    finetune_runs.main(["full", "--seeds", "1", "--pooling", "mean", "--out", str(out)])
    assert calls == [("full", "mean", b, 0) for b in recipes.LABEL_BUDGETS]
    assert {f"full mean {b}" for b in recipes.LABEL_BUDGETS} <= set(json.loads(out.read_text())["runs"])
    with pytest.raises(SystemExit):
        finetune_runs.main(["fine", "--out", str(out)])
    with pytest.raises(SystemExit):  # the probe reads the mean already
        finetune_runs.main(["probe", "--pooling", "mean", "--out", str(out)])


def _tiny_task():
    vocab = P.PlayWords.from_text("a b c d e f", min_count=1)
    torch.manual_seed(0)
    cfg = bert.bert_config(vocab_size=vocab.vocab_size, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=8)
    ids = P.encode_batch(vocab, ["a b", "c d", "a c", "e f", "b f", "d e"], 8)
    y = torch.tensor([0, 1, 0, 1, 0, 1])
    return bert.BertForMaskedLM(cfg), (ids, y, ids, y)


def test_refill_puts_the_fine_tuned_encoder_under_the_pre_trained_head_and_merges_lora():
    pre, data = _tiny_task()
    before = {k: v.clone() for k, v in pre.state_dict().items()}
    ids = data[0]
    for method in ("full", "lora"):
        tuned, _ = P.fine_tune(method, pre, data, 4, seed=1, steps=5)
        refilled = P.refill(pre, tuned)
        tuned.eval(), refilled.eval()
        with torch.no_grad():  # the refilled encoder computes what the fine-tuned one does (LoRA merged)
            assert torch.allclose(refilled.bert(ids)[0], tuned.bert(ids)[0], atol=1e-5), method
        assert torch.equal(refilled.output_bias, pre.output_bias)  # the head's own weights are the pre-trained ones
        name = "layers.0.feed_forward.linear1.weight"  # a weight LoRA adapts: fine-tuning moved it
        assert not torch.equal(refilled.bert.encoder.state_dict()[name], pre.bert.encoder.state_dict()[name]), method
        if method == "lora":  # the fine-tuned model keeps its adapters: refill merged a copy
            assert any("lora_" in n for n, _ in tuned.named_parameters())
    for k, v in pre.state_dict().items():  # and the pre-trained model is untouched
        assert torch.equal(v, before[k]), k
    # adapters that have not trained (B = 0) change nothing: LoRA kept apart forgets nothing
    untrained, _ = P.fine_tune("lora", pre, data, 4, seed=1, steps=0)
    for k, v in P.refill(pre, untrained).state_dict().items():
        assert torch.equal(v, pre.state_dict()[k]), k
    probe, _ = P.fine_tune("probe", pre, data, 4, steps=2)
    with pytest.raises(TypeError, match="refill needs a model with a BERT encoder \\(.bert\\), got Linear"):
        P.refill(pre, probe)


def test_masked_word_shares_scores_each_window_over_the_same_hidden_words():
    pre, data = _tiny_task()
    windows = data[0].repeat(4, 1)  # (24, 4): short windows, so some hide nothing at a seed
    shares = P.masked_word_shares(pre, windows, seeds=[3])
    generator = torch.Generator().manual_seed(3)
    inputs, labels = bert.mask_tokens(
        windows,
        mask_id=P.MASK,
        special_ids=P.PlayWords.special_ids,
        vocab_size=pre.config.vocab_size,
        generator=generator,
    )
    hidden = P.hide_words(windows, pre.config.vocab_size, 3)  # the plays' settings, the same draws
    assert torch.equal(hidden[0], inputs) and torch.equal(hidden[1], labels) and (labels != bert.IGNORE).any()
    pre.eval()
    with torch.no_grad():
        logits = pre(inputs)  # (24, 4, V)
    for i in range(len(windows)):  # by hand, one window at a time
        chosen = labels[i] != bert.IGNORE
        want = (logits[i][chosen].argmax(-1) == labels[i][chosen]).double().mean().item() if chosen.any() else 0.0
        assert shares[i].item() == pytest.approx(want), i
    two = P.masked_word_shares(pre, windows, seeds=[3, 4])
    assert torch.allclose(two, (shares + P.masked_word_shares(pre, windows, seeds=[4])) / 2)
    with pytest.raises(ValueError, match="at least one masking seed"):
        P.masked_word_shares(pre, windows, seeds=[])


@pytest.mark.slow
def test_the_transfer_file_is_the_shipped_recipe_measured_along_the_way():
    """tools/transfer_runs.py ran the recipe that made plays_bert.pt again (on another device), probing as it went."""
    from transformer_lib.checkpoints import CHECKPOINT_DIR, load_checkpoint

    data = json.loads((CHECKPOINT_DIR / "transfer_runs.json").read_text())
    _, meta = load_checkpoint("plays_bert")
    assert data["recipe"] == meta["recipe"] == "plays_bert" and data["steps"] == meta["steps"]
    assert data["first_losses"] == pytest.approx(meta["first_losses"], abs=1e-3)  # the same recipe, the same start
    steps = [p["steps"] for p in data["points"]]
    assert steps[0] == 0 and steps[-1] == meta["steps"] and steps == sorted(set(steps))
    assert data["budgets"] == list(recipes.LABEL_BUDGETS) and data["seeds"] == list(recipes.SEEDS)
    for p in data["points"]:
        assert set(p["probe"]) == {str(b) for b in recipes.LABEL_BUDGETS}
        assert all(len(v) == len(recipes.SEEDS) and all(0 <= a <= 1 for a in v) for v in p["probe"].values())
    # its end is where the shipped run ended, up to the two devices' rounding over 10,000 steps
    shipped = meta["evals"][-1]["masked accuracy"]
    assert data["points"][-1]["masked accuracy"] == pytest.approx(shipped, abs=0.02)
    assert data["points"][0]["masked accuracy"] < 0.05  # random weights guess almost nothing


@pytest.mark.slow
def test_the_transfer_tool_probes_before_the_first_step_and_at_every_measurement(tmp_path, capsys):
    import transfer_runs  # tools/ is on pytest's pythonpath

    out = tmp_path / "transfer.json"
    assert (
        transfer_runs.main(["--steps", "3", "--every", "2", "--budgets", "20", "--seeds", "1", "--out", str(out)]) == 0
    )
    data = json.loads(out.read_text())
    assert [p["steps"] for p in data["points"]] == [0, 3]  # before any step, and after the last (not twice)
    assert data["first_losses"] == pytest.approx(
        recipes.RECIPES["plays_bert"](steps=3)[1].losses
    )  # measuring changed nothing the model trained on
    assert all(set(p["probe"]) == {"20"} and len(p["probe"]["20"]) == 1 for p in data["points"])
    for bad, message in ((["--every", "0"], "positive"), (["--budgets", "1"], "from 2 to the pool")):
        with pytest.raises(SystemExit):
            transfer_runs.main([*bad, "--out", str(out)])
        assert message in capsys.readouterr().err
