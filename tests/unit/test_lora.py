"""LoRA: merged equals unmerged, only the adapters train, and peft's LoRA on the same weights agrees."""

from __future__ import annotations

import copy

import pytest
import torch

import transformer_lib as tl
from transformer_lib import lora


def _model():
    torch.manual_seed(0)
    return tl.DecoderOnlyLM(
        vocab_size=30, d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0, norm_first=True
    ).eval()


def _randomise_adapters(model):
    with torch.no_grad():  # B starts at zero; give it values, so that the adapters change the output
        for m in model.modules():
            if isinstance(m, lora.LoRALinear):
                m.lora_B.normal_(0.0, 0.2)


def test_an_adapted_model_starts_as_the_model_and_only_the_adapters_train():
    base = _model()
    x = torch.randint(1, 30, (2, 9))
    with torch.no_grad():
        before = base(x)
    adapted = lora.add_lora(copy.deepcopy(base), targets=("q_proj", "v_proj"), r=4, alpha=8)
    with torch.no_grad():
        torch.testing.assert_close(adapted(x), before)  # B = 0: nothing changes yet
    trainable, total = lora.trainable_parameters(adapted)
    assert trainable == 2 * 2 * (4 * 32 + 32 * 4)  # 2 layers x (q, v) x (A + B)
    assert total == sum(p.numel() for p in base.parameters()) + trainable
    names = {n for n, p in adapted.named_parameters() if p.requires_grad}
    assert names and all("lora_" in n for n in names)
    with pytest.raises(ValueError, match="no linear layer is named"):
        lora.add_lora(copy.deepcopy(base), targets=("query",))
    with pytest.raises(ValueError, match="rank r must be"):
        lora.LoRALinear(torch.nn.Linear(4, 3), r=4)


def test_merged_and_unmerged_give_the_same_outputs():
    adapted = lora.add_lora(_model(), targets=("q_proj", "k_proj", "v_proj", "out_proj", "linear1"), r=3, alpha=6)
    _randomise_adapters(adapted)
    x = torch.randint(1, 30, (3, 11))
    with torch.no_grad():
        unmerged = adapted(x)
        merged_model = lora.merge_lora(copy.deepcopy(adapted))
        assert not any(isinstance(m, lora.LoRALinear) for m in merged_model.modules())
        torch.testing.assert_close(merged_model(x), unmerged, atol=1e-5, rtol=1e-5)
        assert (unmerged - _model()(x)).abs().max() > 1e-2  # the adapters did change the output


def test_peft_lora_on_the_same_weights_gives_the_same_outputs_and_gradients():
    peft = pytest.importorskip("peft")
    ours = lora.add_lora(_model(), targets=("q_proj", "v_proj", "linear2"), r=4, alpha=8)
    _randomise_adapters(ours)
    theirs = peft.get_peft_model(
        _model(), peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj", "linear2"])
    )
    state = theirs.state_dict()
    with torch.no_grad():  # our adapters' numbers into peft's
        for name, m in ours.named_modules():
            if isinstance(m, lora.LoRALinear):
                state[f"base_model.model.{name}.lora_A.default.weight"].copy_(m.lora_A)
                state[f"base_model.model.{name}.lora_B.default.weight"].copy_(m.lora_B)
    x = torch.randint(1, 30, (2, 10))
    y = torch.randint(1, 30, (2, 10))
    ours_out, theirs_out = ours(x), theirs(x)
    torch.testing.assert_close(ours_out, theirs_out, atol=1e-6, rtol=1e-5)
    tl.label_smoothed_cross_entropy(ours_out, y).backward()
    tl.label_smoothed_cross_entropy(theirs_out, y).backward()
    theirs_params = dict(theirs.named_parameters())
    checked = 0
    for name, m in ours.named_modules():
        if isinstance(m, lora.LoRALinear):
            for ab in ("A", "B"):
                got = getattr(m, f"lora_{ab}").grad
                want = theirs_params[f"base_model.model.{name}.lora_{ab}.default.weight"].grad
                torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
                checked += 1
    assert checked == 2 * 3 * 2
    assert sum(p.numel() for p in theirs.parameters() if p.requires_grad) == lora.trainable_parameters(ours)[0]
