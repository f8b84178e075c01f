"""`fit` keeps AdamW's state itself (transformer_lib._adamw.LeanAdamW) so that it never imports torch._dynamo.

It must stay, bit for bit, the loop the training chapter writes by hand with torch.optim.AdamW
and LambdaLR, on any parameter layout; and it must not import torch._dynamo, which costs
about 1.2 s in a fresh kernel on this machine (benchmarks/optimizer.py).
"""

import subprocess
import sys

import pytest
import torch
from torch import nn

import transformer_lib as tl
from transformer_lib import training
from transformer_lib._adamw import LeanAdamW


def _lm_with_an_unused_parameter() -> nn.Module:
    tl.set_seed(0)
    model = tl.DecoderOnlyLM(vocab_size=11, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0, max_len=16)
    model.unused = nn.Parameter(torch.ones(3))  # never gets a gradient: AdamW skips it and so must fit
    return model


def _batches():
    return tl.lm_batches(
        torch.randint(0, 11, (400,), generator=torch.Generator().manual_seed(1)),
        8,
        4,
        rng=torch.Generator().manual_seed(2),
    )


def test_fit_is_torch_adamw_with_lambdalr_bit_for_bit():
    ours, theirs = _lm_with_an_unused_parameter(), _lm_with_an_unused_parameter()
    steps, lr, warmup = 12, 3e-3, 4
    history = training.fit(ours, tl.lm_loss, _batches(), steps=steps, lr=lr, warmup=warmup, progress=False)

    optimizer = torch.optim.AdamW(theirs.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98), fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: training.warmup_cosine(s, warmup, steps))
    losses, batches = [], _batches()
    theirs.train()
    for _ in range(steps):
        loss = tl.lm_loss(theirs, next(batches))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    assert history.losses == losses
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        assert torch.equal(a, b), name
    assert torch.equal(ours.unused, torch.ones(3))


@pytest.mark.parametrize("fused", [True, False])
def test_the_state_it_keeps_gives_adamws_steps_fused_or_not(fused):
    a, b = nn.Linear(5, 4), nn.Linear(5, 4)
    b.load_state_dict(a.state_dict())
    ours = LeanAdamW(a.parameters(), betas=(0.9, 0.98), weight_decay=0.1, fused=fused)
    theirs = torch.optim.AdamW(b.parameters(), lr=0.01, betas=(0.9, 0.98), weight_decay=0.1, fused=fused)
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        ours.zero_grad()
        theirs.zero_grad()
        a(x).square().sum().backward()
        b(x).square().sum().backward()
        ours.step(0.01)
        theirs.step()
        assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)


@pytest.mark.slow  # over a second: make test runs it, make check does not
def test_fit_does_not_import_torch_dynamo():
    code = (
        "import sys, torch, transformer_lib as tl\n"
        "m = tl.DecoderOnlyLM(vocab_size=7, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=8)\n"
        "tl.fit(m, tl.lm_loss, tl.lm_batches(torch.randint(0, 7, (100,)), 4, 2), steps=2, warmup=1, progress=False)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False", "fit imported torch._dynamo (about 1.2 s in a fresh kernel): back to torch.optim?"
