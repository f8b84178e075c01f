"""Chapter 16's Vision Transformer (work in progress): patches by hand equal the strided convolution, and the
model gives transformers' ViTForImageClassification's logits when its weights are copied over."""

import pytest
import torch

from transformer_lib import vit

transformers = pytest.importorskip("transformers")


def test_patchify_by_hand_equals_the_strided_convolution():
    torch.manual_seed(0)
    images = torch.randn(3, 2, 8, 12)  # (B, C, H, W), not square
    embed = vit.PatchEmbedding(channels=2, d_model=5, patch=4)
    w = embed.projection.weight.reshape(5, -1)  # (d, C * p * p): the kernel in patchify's order
    by_hand = vit.patchify(images, 4) @ w.T + embed.projection.bias  # (B, 6, d)
    torch.testing.assert_close(embed(images), by_hand)
    first = images[0, :, :4, :4].reshape(-1)  # the top-left patch, channel first
    assert torch.equal(vit.patchify(images, 4)[0, 0], first)
    second = images[0, :, :4, 4:8].reshape(-1)  # next: the patch to its right
    assert torch.equal(vit.patchify(images, 4)[0, 1], second)


@pytest.mark.parametrize(
    "bad, message",
    [
        (torch.randn(2, 8, 8), r"shape \(B, C, H, W\), got \(2, 8, 8\)"),
        (torch.zeros(1, 1, 8, 8, dtype=torch.long), "must hold floats"),
        (torch.randn(1, 1, 8, 6), "multiples of the patch size 4, got 8 x 6"),
    ],
)
def test_patchify_names_what_it_expected(bad, message):
    with pytest.raises(ValueError, match=message):
        vit.patchify(bad, 4)


def _hf_from_ours(ours: vit.VisionTransformer):
    cfg = ours.config
    hf_cfg = transformers.ViTConfig(
        image_size=ours.image_size, patch_size=ours.patch_size, num_channels=ours.patches.channels,
        hidden_size=cfg.d_model, num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.d_ff, num_labels=ours.head.out_features, hidden_act="gelu", layer_norm_eps=cfg.eps,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    theirs = transformers.ViTForImageClassification(hf_cfg).eval()
    sd = {
        "vit.embeddings.cls_token": ours.cls_token,
        "vit.embeddings.position_embeddings": ours.position,
        "vit.embeddings.patch_embeddings.projection.weight": ours.patches.projection.weight,
        "vit.embeddings.patch_embeddings.projection.bias": ours.patches.projection.bias,
        "vit.layernorm.weight": ours.encoder.norm.weight,
        "vit.layernorm.bias": ours.encoder.norm.bias,
        "classifier.weight": ours.head.weight,
        "classifier.bias": ours.head.bias,
    }
    names = {"attention.q_proj": "self_attn.q_proj", "attention.k_proj": "self_attn.k_proj",
             "attention.v_proj": "self_attn.v_proj", "attention.o_proj": "self_attn.out_proj",
             "layernorm_before": "norm1", "layernorm_after": "norm2",
             "mlp.fc1": "feed_forward.linear1", "mlp.fc2": "feed_forward.linear2"}  # fmt: skip
    ours_sd = ours.state_dict()
    for i in range(cfg.num_layers):
        for theirs_name, our_name in names.items():
            for kind in ("weight", "bias"):
                sd[f"vit.layers.{i}.{theirs_name}.{kind}"] = ours_sd[f"encoder.layers.{i}.{our_name}.{kind}"]
    missing, unexpected = theirs.load_state_dict({k: v.detach() for k, v in sd.items()}, strict=False)
    assert not unexpected and not [k for k in missing if "pooler" not in k], (missing, unexpected)
    return theirs


@pytest.mark.parametrize("seed, size, patch, channels, layers", [(0, 8, 2, 1, 2), (1, 8, 4, 3, 1), (2, 12, 3, 1, 3)])
def test_our_vit_gives_transformers_logits_with_the_same_weights(seed, size, patch, channels, layers):
    torch.manual_seed(seed)
    cfg = vit.vit_config(vocab_size=1, d_model=16, num_heads=4, num_layers=layers, d_ff=32, max_len=64)
    ours = vit.VisionTransformer(cfg, image_size=size, patch_size=patch, num_classes=10, channels=channels).eval()
    with torch.no_grad():
        for p in ours.parameters():  # every weight off its start, the class token, norms and biases too
            p.add_(torch.randn(p.shape) * 0.1)
    theirs = _hf_from_ours(ours)
    images = torch.randn(4, channels, size, size)
    with torch.no_grad():
        torch.testing.assert_close(ours(images), theirs(pixel_values=images).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed, size, patch, channels, layers", [(0, 8, 2, 1, 2), (1, 12, 4, 3, 1)])
def test_tl_hf_converts_both_ways_with_the_same_logits_and_weights_back(seed, size, patch, channels, layers):
    from transformer_lib import hf

    torch.manual_seed(seed)
    max_len = (size // patch) ** 2 + 1
    cfg = vit.vit_config(vocab_size=1, d_model=16, num_heads=4, num_layers=layers, d_ff=32, max_len=max_len)
    ours = vit.VisionTransformer(cfg, image_size=size, patch_size=patch, num_classes=7, channels=channels).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(torch.randn(p.shape) * 0.1)
    theirs = hf.to_hf(ours)
    assert type(theirs).__name__ == "ViTForImageClassification"
    images = torch.randn(3, channels, size, size)
    with torch.no_grad():
        torch.testing.assert_close(ours(images), theirs(pixel_values=images).logits, atol=1e-5, rtol=1e-5)
    back = hf.from_hf(theirs)
    for (name, a), b in zip(ours.state_dict().items(), back.state_dict().values()):
        assert torch.equal(a, b), name


def test_to_hf_refuses_a_mean_pooled_vit():
    from transformer_lib import hf

    cfg = vit.vit_config(vocab_size=1, d_model=16, num_heads=4, num_layers=1, d_ff=32, max_len=17)
    model = vit.VisionTransformer(cfg, image_size=8, patch_size=2, num_classes=3, pool="mean")
    with pytest.raises(ValueError, match="reads the class token; this model pools by 'mean'"):
        hf.to_hf(model)


def test_unpatchify_undoes_patchify_and_shuffled_patches_are_the_same_patches_elsewhere():
    images = torch.randn(5, 3, 8, 12)
    torch.testing.assert_close(vit.unpatchify(vit.patchify(images, 4), 4, 8, 12), images, atol=0, rtol=0)
    shuffled = vit.shuffle_patches(images, 2, torch.Generator().manual_seed(0))
    before, after = vit.patchify(images, 2), vit.patchify(shuffled, 2)  # (5, 24, 12) each
    moved = 0
    for b in range(5):
        key = lambda rows: sorted(map(tuple, rows.tolist()))  # noqa: E731 (the patches as a multiset)
        assert key(before[b]) == key(after[b]), f"image {b} lost or gained a patch"
        moved += int((before[b] != after[b]).any(-1).sum())
    assert moved > 5 * 24 * 0.8, "shuffling left most patches where they were"
    with pytest.raises(ValueError, match="do not tile a 8 x 8 image"):
        vit.unpatchify(torch.randn(1, 5, 4), 2, 8, 8)


def test_without_positions_the_model_cannot_see_where_a_patch_was():
    torch.manual_seed(0)
    cfg = vit.vit_config(d_model=16, num_heads=4, num_layers=2, d_ff=32, max_len=17)
    for positions, pool in [(False, "cls"), (False, "mean"), (True, "cls")]:
        model = vit.VisionTransformer(cfg, image_size=8, patch_size=2, num_classes=10, pool=pool, positions=positions)
        images = torch.rand(6, 1, 8, 8)
        shuffled = vit.shuffle_patches(images, 2, torch.Generator().manual_seed(1))
        with torch.no_grad():
            same = torch.allclose(model(images), model(shuffled), atol=1e-5)
        assert same == (not positions), (positions, pool)
        assert (model.position.requires_grad, bool(model.position.abs().sum() > 0)) == (positions, positions)


def test_the_class_tokens_attention_is_a_share_of_each_image_over_its_patches():
    torch.manual_seed(0)
    cfg = vit.vit_config(d_model=16, num_heads=4, num_layers=2, d_ff=32, max_len=17)
    model = vit.VisionTransformer(cfg, image_size=8, patch_size=2, num_classes=10).eval()
    shares = vit.cls_attention(model, torch.rand(3, 1, 8, 8), layer=0)
    assert shares.shape == (3, 4, 4)
    assert bool((shares > 0).all()) and bool((shares.sum((1, 2)) < 1).all())  # the rest is on the class token
    mean_pooled = vit.VisionTransformer(cfg, image_size=8, patch_size=2, num_classes=10, pool="mean")
    with pytest.raises(ValueError, match="needs a model with a class token"):
        vit.cls_attention(mean_pooled, torch.rand(1, 1, 8, 8))


def test_the_digits_split_is_fixed_stratified_and_disjoint():
    train_x, train_y, test_x, test_y = vit.digits_data()
    assert train_x.shape == (1200, 1, 8, 8) and test_x.shape == (vit.DIGITS_TEST, 1, 8, 8)
    assert float(train_x.min()) == 0.0 and float(train_x.max()) == 1.0
    assert torch.bincount(test_y, minlength=10).min() >= 57  # each digit about a tenth of the 597
    flat = {tuple(row.tolist()) for row in train_x.flatten(1)}
    assert sum(tuple(row.tolist()) in flat for row in test_x.flatten(1)) < 5  # (a few digits are drawn alike)
    again = vit.digits_data()
    assert torch.equal(again[3], test_y)
    with pytest.raises(ValueError, match="the same length"):
        vit.image_accuracy(torch.nn.Linear(1, 1), test_x, test_y[:3])


def test_the_digits_are_scikit_learns_load_digits_and_train_test_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16  # (1797, 1, 8, 8)
    labels = torch.tensor(digits.target, dtype=torch.long)  # (1797,)
    train, test = train_test_split(
        torch.arange(len(labels)).numpy(), test_size=vit.DIGITS_TEST, stratify=labels.numpy(), random_state=0
    )
    theirs = (images[train], labels[train], images[test], labels[test])
    ours = vit.digits_data()
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(ours, theirs))


def test_logistic_regression_lands_on_scikit_learns_optimum():
    from sklearn.linear_model import LogisticRegression

    train_x, train_y, test_x, test_y = vit.digits_data()
    for c in (1.0, 0.05):
        ours = vit.logistic_regression(train_x, train_y, c=c)
        theirs = LogisticRegression(C=c, tol=1e-10, max_iter=100_000).fit(train_x.flatten(1).double().numpy(), train_y)
        weight, bias = ours[1].weight.double(), ours[1].bias.double()
        assert (weight - torch.from_numpy(theirs.coef_)).abs().max() < 1e-3, c
        centred = torch.from_numpy(theirs.intercept_)  # the softmax ignores a constant added to every intercept
        assert ((bias - bias.mean()) - (centred - centred.mean())).abs().max() < 1e-2, c
        probabilities = torch.from_numpy(theirs.predict_proba(test_x.flatten(1).double().numpy()))  # (597, 10)
        assert (ours(test_x).softmax(-1).double() - probabilities).abs().max() < 1e-3, c
        assert torch.equal(ours(test_x).argmax(-1), torch.from_numpy(theirs.predict(test_x.flatten(1).numpy())))
    with pytest.raises(ValueError, match="the same length"):
        vit.logistic_regression(train_x, train_y[:3])
    with pytest.raises(ValueError, match="must be positive, got 0"):
        vit.logistic_regression(train_x, train_y, c=0)


def test_the_shipped_vit_and_its_comparisons_hold_what_the_chapter_says():
    from transformer_lib import recipes
    from transformer_lib.checkpoints import load_checkpoint

    model, meta = load_checkpoint("digits_vit")
    _, _, test_x, test_y = vit.digits_data()
    accuracy = vit.image_accuracy(model, test_x, test_y)
    assert abs(accuracy - meta["evals"][-1]["test accuracy"]) < 1e-9 and accuracy > 0.96
    runs = recipes.load_vit_runs()
    assert sorted(runs["runs"]) == sorted(recipes.VIT_VARIANTS)
    assert all(len(records) == len(recipes.SEEDS) for records in runs["runs"].values())
    for record in runs["runs"]["no positions"]:  # a bag of patches: shuffling changes nothing
        assert abs(record["test_accuracy"] - record["shuffled_accuracy"]) < 0.005
    for record in runs["runs"]["class token"]:  # with positions: shuffled digits are mostly misread
        assert record["shuffled_accuracy"] < 0.5 < 0.95 < record["test_accuracy"]
    assert 0.95 < runs["logistic regression"] < 0.99
    for records in runs["runs"].values():  # the images each run got right are the accuracies it records
        for r in records:
            for right, accuracy in (("right", "test_accuracy"), ("shifted_right", "shifted_accuracy")):
                assert len(r[right]) == vit.DIGITS_TEST and set(r[right]) <= {"0", "1"}
                assert r[right].count("1") / vit.DIGITS_TEST == pytest.approx(r[accuracy], abs=1e-12)
    by_seed = zip(runs["runs"]["convolutional network"], runs["runs"]["class token"])
    for cnn, vit_run in by_seed:  # the bias the chapter measures: a moved digit hurts the CNN less, at every seed
        assert cnn["shifted_accuracy"] > vit_run["shifted_accuracy"] + 0.15
    for name in ("class token, shifted in training", "convolutional network, shifted in training"):
        assert all(r["shifted_accuracy"] > 0.85 for r in runs["runs"][name])


@pytest.mark.slow
def test_one_shipped_comparison_is_what_its_run_gives_here():
    from transformer_lib import recipes

    record = recipes.load_vit_runs()["runs"]["mean pooling"][1]
    model = recipes.digits_vit(1, **recipes.VIT_VARIANTS["mean pooling"])
    history = recipes.train_digits_vit(model, recipes.VIT_STEPS, 1)
    # the same steps on another CPU's kernels: a few of the 597 images may go the other way
    assert abs(history.evals[-1]["test accuracy"] - record["test_accuracy"]) <= 4 / vit.DIGITS_TEST


def test_mean_attention_distance_against_a_hand_computation_on_a_two_by_two_grid():
    eye = torch.eye(4).expand(2, 3, 4, 4)  # (B, h, T, T): every patch attends only to itself
    torch.testing.assert_close(vit.mean_attention_distance(eye, 2, 3), torch.zeros(3))
    # uniform over a 2 x 2 grid: from any patch the distances are 0, 1, 1 and sqrt(2) patches, times 3 pixels
    uniform = torch.full((1, 1, 4, 4), 0.25)
    expected = 3 * (0 + 1 + 1 + 2**0.5) / 4
    torch.testing.assert_close(vit.mean_attention_distance(uniform, 2, 3), torch.tensor([expected]))
    # one head on itself, one uniform: per head, per image
    both = torch.cat([torch.eye(4)[None, None], uniform], dim=1)  # (1, 2, 4, 4)
    torch.testing.assert_close(
        vit.mean_attention_distance(both, (2, 2), 3, per_image=True), torch.tensor([[0, expected]])
    )
    # a class token in front is left out and each patch's row renormalised: half on the class token changes nothing
    with_cls = torch.zeros(1, 1, 5, 5)
    with_cls[..., 0] = 0.5  # every query gives half to the class token
    with_cls[..., 1:, 1:] = 0.125  # and the other half evenly to the four patches
    torch.testing.assert_close(vit.mean_attention_distance(with_cls, 2, 3), torch.tensor([expected]))
    # a 1 x 3 strip, every patch attending to its right-hand neighbour (the last to the first): 1, 1 and 2 patches
    shift = torch.tensor([[0.0, 1, 0], [0, 0, 1], [1, 0, 0]])[None, None]
    torch.testing.assert_close(vit.mean_attention_distance(shift, (1, 3), 2), torch.tensor([2 * 4 / 3]))


@pytest.mark.parametrize(
    "weights, grid, message",
    [
        (torch.rand(2, 4, 4), 2, r"shape \(B, h, T, T\), got \(2, 4, 4\)"),
        (torch.rand(1, 2, 4, 5), 2, r"shape \(B, h, T, T\), got \(1, 2, 4, 5\)"),
        (torch.rand(1, 2, 7, 7), 2, "a 2 x 2 grid has 4 patches, so T must be 4 or 5"),
        (torch.rand(1, 2, 4, 4), 0, "must be positive"),
    ],
)
def test_mean_attention_distance_names_what_it_expected(weights, grid, message):
    with pytest.raises(ValueError, match=message):
        vit.mean_attention_distance(weights, grid, 2)


def test_mean_attention_distance_reads_weights_captured_from_a_vit():
    from transformer_lib import capture_attention

    torch.manual_seed(0)
    cfg = vit.vit_config(d_model=16, num_heads=4, num_layers=2, d_ff=32, max_len=17)
    model = vit.VisionTransformer(cfg, image_size=8, patch_size=2, num_classes=10).eval()
    with torch.no_grad(), capture_attention(model) as seen:
        model(torch.rand(3, 1, 8, 8))
    per_image = vit.mean_attention_distance(seen["encoder.layers.0.self_attn"], 4, 2, per_image=True)
    assert per_image.shape == (3, 4)
    torch.testing.assert_close(per_image.mean(0), vit.mean_attention_distance(seen["encoder.layers.0.self_attn"], 4, 2))
    largest = 2 * (3**2 + 3**2) ** 0.5  # corner to corner of a 4 x 4 grid of 2-pixel patches
    assert bool((per_image > 0).all()) and bool((per_image < largest).all())


def test_attention_rollout_against_a_hand_computation_in_layer_order():
    first = torch.tensor([[1.0, 0.0], [0.5, 0.5]])  # token 1 reads half of token 0
    second = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # each token reads only the other
    # heads averaged: layer 1's second head attends to itself, so the mean is [[1, 0], [0.25, 0.75]]
    layer1 = torch.stack([first, torch.eye(2)])[None]  # (1, 2, 2, 2)
    layer2 = second[None, None]  # (1, 1, 2, 2)
    mixed1 = 0.5 * torch.tensor([[1.0, 0.0], [0.25, 0.75]]) + 0.5 * torch.eye(2)  # rows already sum to 1
    mixed2 = 0.5 * second + 0.5 * torch.eye(2)  # [[0.5, 0.5], [0.5, 0.5]]
    rolled = vit.attention_rollout([layer1, layer2])
    torch.testing.assert_close(rolled[0], mixed2 @ mixed1)  # the later layer on the left
    torch.testing.assert_close(rolled[0], torch.tensor([[0.5625, 0.4375], [0.5625, 0.4375]]))
    assert not torch.allclose(rolled[0], mixed1 @ mixed2)  # the order matters here
    torch.testing.assert_close(vit.attention_rollout([layer1])[0], mixed1)
    # attention that only looks at itself leaves every token itself
    torch.testing.assert_close(
        vit.attention_rollout([torch.eye(5).expand(3, 2, 5, 5)] * 4), torch.eye(5).expand(3, 5, 5)
    )


def test_attention_rollout_rows_are_shares_on_a_trained_vits_weights():
    from transformer_lib import capture_attention
    from transformer_lib.checkpoints import load_checkpoint

    model, _ = load_checkpoint("digits_vit")
    _, _, test_x, _ = vit.digits_data()
    with torch.no_grad(), capture_attention(model) as seen:
        model(test_x[:20])
    layers = [seen[f"encoder.layers.{i}.self_attn"] for i in range(2)]  # (20, 4, 17, 17) each, layer 0 first
    rolled = vit.attention_rollout(layers)  # (20, 17, 17)
    assert rolled.shape == (20, 17, 17) and (rolled >= 0).all()
    torch.testing.assert_close(rolled.sum(-1), torch.ones(20, 17))


@pytest.mark.parametrize(
    "weights, message",
    [
        ([], "non-empty list"),
        (torch.rand(1, 2, 3, 3), "non-empty list"),
        ([torch.rand(2, 3, 3)], r"layer 0's weights must be self-attention of shape \(B, h, T, T\), got \(2, 3, 3\)"),
        ([torch.rand(1, 2, 3, 3), torch.rand(1, 2, 4, 4)], "layer 1 is"),
    ],
)
def test_attention_rollout_names_what_it_expected(weights, message):
    with pytest.raises(ValueError, match=message):
        vit.attention_rollout(weights)


@pytest.mark.parametrize("down", [-1, 0, 1, 2])
@pytest.mark.parametrize("right", [-2, 0, 1])
def test_shift_images_moves_every_pixel_and_fills_with_zeros(down, right):
    torch.manual_seed(0)
    images = torch.rand(3, 2, 5, 6) + 1  # no zeros of its own, so a zero can only be moved in
    moved = vit.shift_images(images, torch.tensor([[down, right]] * 3))
    for r in range(5):
        for c in range(6):
            source = (r - down, c - right)
            if 0 <= source[0] < 5 and 0 <= source[1] < 6:
                assert torch.equal(moved[:, :, r, c], images[:, :, source[0], source[1]])
            else:
                assert (moved[:, :, r, c] == 0).all()


def test_shift_images_moves_each_image_its_own_way():
    images = torch.arange(2 * 16.0).reshape(2, 1, 4, 4)
    moved = vit.shift_images(images, torch.tensor([[0, 0], [-1, 0]]))
    assert torch.equal(moved[0], images[0])  # (0, 0) leaves an image as it was
    assert torch.equal(moved[1, 0, :3], images[1, 0, 1:]) and (moved[1, 0, 3] == 0).all()


@pytest.mark.parametrize(
    "shifts, message",
    [
        (torch.zeros(3, 2, dtype=torch.long), r"shape \(2, 2\), got \(3, 2\)"),
        (torch.zeros(2, 2), "whole numbers"),
        ([[0, 1], [1, 0]], "whole numbers"),
    ],
)
def test_shift_images_names_what_it_expected(shifts, message):
    with pytest.raises(ValueError, match=message):
        vit.shift_images(torch.rand(2, 1, 4, 4), shifts)


def test_random_shifts_are_uniform_over_the_moves_and_still_only_when_asked():
    generator = torch.Generator().manual_seed(0)
    for largest, still, moves in [(1, False, 8), (1, True, 9), (2, False, 24)]:
        n = 4_000 * moves
        drawn = vit.random_shifts(n, largest, generator, still=still)  # (n, 2)
        assert drawn.dtype == torch.long and drawn.abs().max() == largest
        kinds, counts = torch.unique(drawn, dim=0, return_counts=True)
        assert len(kinds) == moves
        assert still == bool(((kinds == 0).all(-1)).any())
        expected = n / moves  # each count is binomial: 5 standard deviations either side
        assert (counts - expected).abs().max() < 5 * (expected * (1 - 1 / moves)) ** 0.5
    with pytest.raises(ValueError, match="largest at least 1"):
        vit.random_shifts(4, 0)


def test_the_cnn_baseline_sees_a_moved_stroke_a_pixel_away():
    torch.manual_seed(0)
    model = vit.DigitsCNN(width=4)
    assert model(torch.rand(5, 1, 8, 8)).shape == (5, 10)
    first = model.features[0]  # the first convolution: the same filter at every place
    image = torch.zeros(1, 1, 8, 8)
    image[0, 0, 3:5, 2:4] = 1.0  # a small stroke well inside the image
    moved = vit.shift_images(image, torch.tensor([[1, 1]]))
    torch.testing.assert_close(first(moved)[..., 1:, 1:], first(image)[..., :-1, :-1])
    assert sum(p.numel() for p in vit.DigitsCNN().parameters()) == 56_394  # the docstring's "about 56,000"
    with pytest.raises(ValueError, match=r"\(B, 1, H, W\)"):
        model(torch.rand(5, 3, 8, 8))


def test_digits_variant_builds_what_its_name_says():
    from transformer_lib import recipes

    cnn, train = recipes.digits_variant("convolutional network, shifted in training", 0)
    assert isinstance(cnn, vit.DigitsCNN) and train == {"shift": 1}
    model, train = recipes.digits_variant("no positions", 2)
    assert isinstance(model, vit.VisionTransformer) and train == {"shift": 0}
    assert not model.position.requires_grad
    again, _ = recipes.digits_variant("no positions", 2)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    with pytest.raises(ValueError, match="no variant called 'cnn'"):
        recipes.digits_variant("cnn", 0)
    with pytest.raises(ValueError, match="shift must be 0"):
        recipes.train_digits_vit(model, 1, shift=-1)
