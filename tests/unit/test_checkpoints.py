"""The shipped checkpoints come from their recipes, load into the right model, and keep their promise."""

import math

import pytest
import torch

import transformer_lib as tl
from transformer_lib import checkpoints, codec, recipes


def test_every_recipe_has_a_shipped_checkpoint_and_back():
    shipped = sorted(p.stem for p in checkpoints.CHECKPOINT_DIR.glob("*.pt"))
    assert shipped == sorted(recipes.RECIPES), "run `python tools/train_checkpoints.py` after changing a recipe"


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_the_shipped_bpe_tokenizer_is_the_one_its_recipe_trains():
    """shakespeare_data("bpe") loads merges instead of training them; training them again gives the same."""
    shipped, train_ids, _ = recipes.shakespeare_data("bpe")
    trained = tl.train_bpe(tl.corpus.shakespeare("train"), recipes.SHAKESPEARE_MERGES)
    assert shipped == trained and shipped.vocab_size == 256 + recipes.SHAKESPEARE_MERGES
    assert torch.equal(train_ids, torch.tensor(trained.encode(tl.corpus.shakespeare("train"))))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(recipes.RECIPES))
def test_checkpoint_losses_are_reproduced_by_its_recipe(name):
    """Re-run the recipe's first steps here and compare the losses with those the checkpoint recorded.

    Float sums round differently on other CPUs, so the losses are compared to 1e-3, not exactly;
    a different recipe (data, seed, model or learning rate) moves them by far more. A mixture of
    experts routes discretely: a rounding difference can send a token whose two best experts nearly
    tie to the other one, and with two threads instead of one, step 18 moved by 3e-3. Its losses are
    compared to 1e-2, still half of what the balancing loss alone adds at the first step (0.02). A codec's
    first losses are those of its plain autoencoder (no quantizer, so no discrete choice to flip), compared to 1e-3.
    """
    shipped, meta = tl.load_checkpoint(name)
    first = meta["first_losses"]
    steps = len(first)
    model, history, _ = recipes.RECIPES[name](steps=steps)
    moe = not isinstance(shipped, codec.Codec) and shipped.config.num_experts  # a codec has no TransformerConfig
    tolerance = 1e-2 if moe else 1e-3
    assert len(first) >= 10 and history.losses == pytest.approx(first[:steps], abs=tolerance)
    _, longer = tl.load_checkpoint(name)
    assert longer["steps"] > len(first)


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_bracket_classifier_checkpoint_keeps_the_chapter_promise():
    model, meta = tl.load_checkpoint("bracket_classifier")
    assert isinstance(model, tl.EncoderClassifier) and not model.training
    _, _, _, x_test, y_test = recipes.bracket_classifier_data()
    accuracy = tl.classification_accuracy(model, x_test, y_test)
    assert accuracy >= 0.95
    assert accuracy == pytest.approx(meta["evals"][-1]["test accuracy"], abs=0.005)


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_numbers_to_words_checkpoint_keeps_the_chapter_promise():
    """The encoder-decoder the website's playground exports: at least 99% exact match on 1000 unseen numbers."""
    model, meta = tl.load_checkpoint("numbers_to_words")
    assert isinstance(model, tl.Transformer) and not model.training
    src_tok, tgt_tok, _, _, test_src, test_tgt = recipes.numbers_to_words_data()
    accuracy = tl.exact_match(model, test_src, test_tgt, tgt_tok.bos_id, tgt_tok.eos_id)
    assert accuracy >= 0.99 and accuracy == pytest.approx(meta["evals"][-1]["exact match"], abs=0.005)
    out = model.greedy_decode(torch.tensor([src_tok.encode("04021")]), tgt_tok.bos_id, tgt_tok.eos_id, 10)
    assert tgt_tok.decode(out[0]) == tl.number_to_words(4021)
    # the playground's readers type small numbers: all below 1000 but zero (one example in the data) are right
    small = torch.tensor([src_tok.encode(str(k).zfill(5)) for k in range(1000)])  # (1000, 5)
    out = model.greedy_decode(small, tgt_tok.bos_id, tgt_tok.eos_id, 12)  # (1000, 1 + n)
    wrong = [k for k in range(1000) if tgt_tok.decode(out[k]) != tl.number_to_words(k)]
    assert set(wrong) <= {0}, f"numbers below 1000 translated wrongly: {wrong}"


def test_load_checkpoint_names_what_it_ships_when_asked_for_something_else(tmp_path):
    with pytest.raises(FileNotFoundError, match="bracket_classifier"):
        tl.load_checkpoint("no_such_model")
    clf = tl.EncoderClassifier(vocab_size=7, num_classes=3, d_model=16, num_heads=2, num_layers=1, d_ff=32)
    path = checkpoints.save_checkpoint(clf, tmp_path / "clf.pt", init={"num_classes": 3}, note="a test")
    loaded, meta = tl.load_checkpoint(path)
    x = torch.randint(1, 7, (2, 5))
    assert meta == {"note": "a test"} and torch.equal(loaded(x), clf.eval()(x))


def test_shipped_checkpoints_stay_small():
    """5 MB each; the mixtures of experts hold four experts in every layer, 1.35 million float32 numbers, and
    chapter 18's BART two stacks under one table of 2,560 words, 1.27 million: 6 MB."""
    for path in checkpoints.CHECKPOINT_DIR.glob("*.pt"):
        limit = 6_000_000 if "moe" in path.stem or path.stem == "plays_bart" else 5_000_000
        assert path.stat().st_size <= limit, f"{path.name} is {path.stat().st_size:,} bytes, over {limit:,}"


def _bits_per_char(nats_per_token: float, ids: torch.Tensor, tok, block: int) -> float:
    """Mean loss over lm_eval_loss's windows -> bits per character of the text those windows predict."""
    n = (ids.numel() - 1) // block
    return nats_per_token * n * block / len(tok.decode(ids[1 : n * block + 1].tolist())) / math.log(2)


@pytest.mark.slow
def test_shakespeare_checkpoints_keep_the_chapter_promise():
    """Both long runs end at least 25% below the character bigram, in bits per character of the held-out play."""
    char_tok, char_train, char_valid = recipes.shakespeare_data("char")
    bigram_nats = tl.bigram_loss(char_train, char_valid, char_tok.vocab_size)
    bigram_bits = bigram_nats * (char_valid.numel() - 1) / len(char_tok.decode(char_valid[1:].tolist())) / math.log(2)
    for level in ("char", "bpe"):
        model, meta = tl.load_checkpoint(f"shakespeare_{level}")
        assert isinstance(model, tl.DecoderOnlyLM) and not model.training
        tok, _, valid = (char_tok, char_train, char_valid) if level == "char" else recipes.shakespeare_data("bpe")
        nats = tl.lm_eval_loss(model, valid, recipes.SHAKESPEARE_BLOCK)
        assert nats == pytest.approx(meta["evals"][-1]["validation loss"], abs=0.01)
        assert _bits_per_char(nats, valid, tok, recipes.SHAKESPEARE_BLOCK) < 0.75 * bigram_bits


@pytest.mark.slow
@pytest.mark.parametrize("name", ["shakespeare_char", "twelfth_night_lora"])
def test_a_recipe_with_dropout_does_not_depend_on_what_the_caller_drew_before(name):
    """The Shakespeare recipes train with dropout (and LoRA draws its A matrices); their random numbers come
    from a generator the recipe seeds."""
    first = recipes.RECIPES[name](steps=2)[1].losses
    torch.randn(1000)  # the caller's global generator moves on
    state = torch.random.get_rng_state()
    again = recipes.RECIPES[name](steps=2)[1].losses
    assert first == again
    assert torch.equal(torch.random.get_rng_state(), state)  # and the caller's generator is left as it was


@pytest.mark.slow
@pytest.mark.parametrize("block", ["2017", "modern"])
def test_the_two_blocks_of_the_modern_chapter_are_what_they_say_and_their_recorded_loss_holds(block):
    """The chapter "From 2017 to today" reads these runs' recorded held-out losses: recompute them here."""
    model, meta = tl.load_checkpoint(f"shakespeare_{block}")
    for field, value in recipes.SHAKESPEARE_BLOCKS[block].items():
        assert getattr(model.config, field) == value, field
    tok, _, valid = recipes.shakespeare_data("char")
    nats = tl.lm_eval_loss(model, valid, recipes.SHAKESPEARE_BLOCK)
    assert nats == pytest.approx(meta["evals"][-1]["validation loss"], abs=0.01)
    assert meta["steps"] == 3000 and len(meta["losses"]) == 3000


@pytest.mark.slow
def test_the_fine_tuned_models_are_what_they_say_and_their_recorded_loss_holds():
    """Chapter 14 reads these runs: both fine-tuned models beat the shipped one on the held-out play's test part,
    LoRA trained 9% of the parameters, and what it changed in each weight has rank 8 at most."""
    base, _ = tl.load_checkpoint("shakespeare_char")
    _, _, test = recipes.adaptation_data()
    before = tl.lm_eval_loss(base, test, recipes.SHAKESPEARE_BLOCK)
    after = {}
    for method in ("lora", "full"):
        model, meta = tl.load_checkpoint(f"twelfth_night_{method}")
        after[method] = tl.lm_eval_loss(model, test, recipes.SHAKESPEARE_BLOCK)
        assert after[method] == pytest.approx(meta["evals"][-1]["test loss"], abs=0.01)
        assert after[method] < before - 0.05
        trained = meta["evals"][-1]["trainable parameters"]
        if method == "lora":
            assert trained == 4 * (4 * 8 * (128 + 128) + 2 * 8 * (128 + 512))  # rank 8 on six layers of four blocks
            changed = 0
            for name, w in model.state_dict().items():
                change = w - base.state_dict()[name]
                if change.abs().max() > 0:
                    changed += 1
                    s = torch.linalg.svdvals(change.double())
                    assert int((s > s[0] * 1e-4).sum()) <= 8, name
            assert changed == 4 * len(recipes.LORA_TARGETS)  # the adapted weights, and nothing else
        else:
            assert trained == sum(p.numel() for p in base.parameters())


@pytest.mark.slow
def test_the_mixtures_of_experts_are_what_they_say_and_keep_the_chapter_promise():
    """Chapter 14 reads these runs: 4 experts of width 256, top-2, the recorded held-out losses hold, both mixtures
    end below the dense model, and the balancing loss over all layers is lower in the run that trained with it."""
    _, dense_meta = tl.load_checkpoint("shakespeare_char")
    _, _, valid = recipes.shakespeare_data("char")
    sample = valid[: 16 * recipes.SHAKESPEARE_BLOCK].view(16, recipes.SHAKESPEARE_BLOCK)
    pooled = {}
    for name in ("shakespeare_moe", "shakespeare_moe_unbalanced"):
        model, meta = tl.load_checkpoint(name)
        for field, value in recipes.SHAKESPEARE_BLOCKS["moe"].items():
            assert getattr(model.config, field) == value, field
        nats = tl.lm_eval_loss(model, valid, recipes.SHAKESPEARE_BLOCK)
        assert nats == pytest.approx(meta["evals"][-1]["validation loss"], abs=0.01)
        assert nats < dense_meta["evals"][-1]["validation loss"] - 0.01
        assert meta["steps"] == 3000 and len(meta["losses"]) == 3000
        with torch.no_grad(), tl.moe.router_logits(model) as logits:
            model(sample)
        pooled[name] = tl.moe.load_balancing_loss(logits, 2).item()
    assert pooled["shakespeare_moe"] < pooled["shakespeare_moe_unbalanced"] - 0.05


def test_every_shipped_file_goes_into_the_package_a_learner_installs():
    """Colab installs the package from git (pip builds a wheel), not in editable mode: a checkpoint or a run file
    that package-data does not name is missing there, and the chapter that reads it fails."""
    import fnmatch
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "transformer_lib"
    ]
    package = root / "transformer_lib"
    shipped = [
        path.relative_to(package).as_posix()
        for folder in ("checkpoints", "texts")
        for path in (package / folder).iterdir()
        if path.is_file() and not path.name.startswith(".") and path.suffix != ".py"
    ]
    missing = [name for name in shipped if not any(fnmatch.fnmatch(name, g) for g in globs)]
    assert not missing, f"in the repository but not in the wheel (pyproject.toml's package-data): {missing}"
