"""Mixture of experts: the routed block by hand, Mixtral's logits and auxiliary loss in transformers, training."""

from __future__ import annotations

import pytest
import torch
import transformers  # the test extra installs it; the package itself does not need it

import transformer_lib as tl
from transformer_lib import moe
from transformer_lib.hf import from_hf, to_hf


def test_each_token_gets_the_renormalised_gate_weighted_sum_of_its_top_k_experts():
    torch.manual_seed(0)
    block = moe.MoEFeedForward(d_model=8, d_ff=12, num_experts=4, top_k=2, activation="swiglu", bias=False).eval()
    x = torch.randn(3, 5, 8)
    with torch.no_grad():
        got = block(x)
        want = torch.zeros_like(x)
        for b in range(3):
            for t in range(5):
                probs = block.router(x[b, t]).softmax(-1)  # (4,)
                top, chosen = probs.topk(2)
                for p, e in zip(top / top.sum(), chosen.tolist()):  # renormalised to sum to 1
                    want[b, t] += p * block.experts[e](x[b, t])
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="1 <= top_k <= num_experts"):
        moe.MoEFeedForward(8, 12, num_experts=4, top_k=5)


def test_load_balancing_loss_is_top_k_when_balanced_and_num_experts_when_collapsed():
    E, k, N = 4, 2, 400
    balanced = torch.zeros(N, E)  # uniform probabilities; top-k ties broken evenly by small offsets
    balanced[torch.arange(N), torch.arange(N) % E] = 1e-4
    balanced[torch.arange(N), (torch.arange(N) + 1) % E] = 1e-4
    assert abs(moe.load_balancing_loss([balanced], k).item() - k) < 1e-3
    collapsed = torch.full((N, E), -30.0)
    collapsed[:, 0] = 30.0
    collapsed[:, 1] = 0.0  # the second choice is always expert 1, with almost no probability
    assert abs(moe.load_balancing_loss([collapsed], k).item() - E * 1.0) < 1e-3  # f = (1, 1, 0, 0), P = (1, 0, 0, 0)
    shares = moe.expert_shares(collapsed, k)
    assert shares.tolist() == [0.5, 0.5, 0.0, 0.0]


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.MixtralConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
        rope_theta=1e6,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    folder = tmp_path_factory.mktemp("mixtral")
    model = transformers.MixtralForCausalLM(config)
    with torch.no_grad():  # routers far from uniform, so that routing mistakes show in the logits
        for layer in model.model.layers:
            layer.mlp.gate.weight.mul_(20.0)
    model.save_pretrained(folder)
    return transformers.MixtralForCausalLM.from_pretrained(folder).eval()


def test_mixtral_logits_aux_loss_generation_and_weights_round_trip(mixtral):
    ours = from_hf(mixtral)
    cfg = ours.config
    assert (cfg.num_experts, cfg.experts_per_token, cfg.rope_base, cfg.num_kv_heads) == (4, 2, 1e6, 2)
    assert isinstance(ours.decoder.layers[0].feed_forward, moe.MoEFeedForward)
    x = torch.randint(0, 50, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), moe.router_logits(ours) as logits:
        out = ours(x)
        theirs = mixtral(x, output_router_logits=True)
    torch.testing.assert_close(out, theirs.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        moe.load_balancing_loss(logits, cfg.experts_per_token), theirs.aux_loss, atol=1e-6, rtol=0
    )
    chosen = [layer.topk(2, dim=-1).indices for layer in logits]  # the same experts chosen, layer by layer
    assert all(torch.equal(a, b.topk(2, dim=-1).indices) for a, b in zip(chosen, theirs.router_logits))
    prompt = x[:1, :6]
    generated = mixtral.generate(prompt, max_new_tokens=20, do_sample=False)
    assert torch.equal(ours.generate(prompt, max_new_tokens=20, temperature=0.0), generated)
    back = to_hf(ours)
    assert type(back).__name__ == "MixtralForCausalLM"
    for name, tensor in back.state_dict().items():
        assert torch.equal(tensor, mixtral.state_dict()[name]), name


def test_training_with_the_balancing_loss_spreads_the_tokens_and_its_gradient_reaches_the_router():
    torch.manual_seed(0)
    lm = tl.DecoderOnlyLM(
        vocab_size=20,
        d_model=16,
        num_heads=2,
        num_layers=1,
        d_ff=16,
        dropout=0.0,
        norm_first=True,
        num_experts=4,
        experts_per_token=1,
        activation="swiglu",
        bias=False,
    )
    x = torch.randint(1, 20, (4, 9))
    loss = moe.moe_lm_loss(0.5)(lm, (x[:, :-1], x[:, 1:]))
    loss.backward()
    router = lm.decoder.layers[0].feed_forward.router.weight
    assert router.grad is not None and router.grad.abs().sum() > 0
    with torch.no_grad(), moe.router_logits(lm) as logits:
        lm(x)
    assert len(logits) == 1 and logits[0].shape == (4 * 9, 4)
    with pytest.raises(TypeError, match="no MoEFeedForward layer"):
        with moe.router_logits(tl.DecoderOnlyLM(vocab_size=20, d_model=16, num_heads=2, num_layers=1)):
            pass


def test_expert_use_counts_every_slot_per_layer_in_eval_mode_and_leaves_the_mode_as_it_was():
    torch.manual_seed(1)
    lm = tl.DecoderOnlyLM(
        vocab_size=20, d_model=16, num_heads=2, num_layers=3, d_ff=8, dropout=0.3, num_experts=5, experts_per_token=2
    ).train()
    x = torch.randint(0, 20, (3, 11))
    use = moe.expert_use(lm, x)
    assert lm.training and use.shape == (3, 5)
    torch.testing.assert_close(use.sum(-1), torch.ones(3))
    lm.eval()
    with torch.no_grad(), moe.router_logits(lm) as logits:
        lm(x)
    for layer, row in zip(logits, use):
        chosen = layer.topk(2, dim=-1).indices  # (33, 2)
        assert row.tolist() == pytest.approx([(chosen == e).sum().item() / chosen.numel() for e in range(5)], abs=1e-7)
    assert torch.equal(moe.expert_use(lm.train(), x), use)  # dropout off while measuring: the same twice


def test_config_refuses_one_expert_and_more_choices_than_experts():
    with pytest.raises(ValueError, match="num_experts must be 0"):
        tl.TransformerConfig(num_experts=1)
    with pytest.raises(ValueError, match="experts_per_token must be between 1 and num_experts = 4"):
        tl.TransformerConfig(num_experts=4, experts_per_token=5)
