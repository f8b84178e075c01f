"""The fixed reference workload that every notebook time is divided by. Not a test.

    python benchmarks/reference.py

`torch.nn.Transformer` (d_model 64, 4 heads, 2 + 2 layers, d_ff 256, no dropout) with an
embedding in front and a linear layer behind, trained for 100 Adam steps on batches of 64
reversal pairs of length 12. Nothing in it comes from transformer_lib, so a change to the
package cannot change the yardstick. A machine twice as slow takes twice as long for this and
for the notebooks alike, so the ratio of a notebook's time to this one stays put.
"""

from __future__ import annotations

import time

import torch
from torch import nn

D_MODEL, HEADS, LAYERS, D_FF = 64, 4, 2, 256
STEPS, BATCH, LENGTH, VOCAB = 100, 64, 12, 16


def _batches(rng: torch.Generator) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """STEPS batches of (source (B, L), target (B, L + 1) = <bos> + reversed source)."""
    out = []
    for _ in range(STEPS):
        src = torch.randint(1, VOCAB, (BATCH, LENGTH), generator=rng)  # (B, L), id 0 is <bos>
        tgt = torch.cat([torch.zeros(BATCH, 1, dtype=torch.long), src.flip(1)], dim=1)  # (B, L + 1)
        out.append((src, tgt))
    return out


def reference_seconds(device: str = "cpu") -> float:
    """Wall-clock seconds for the reference workload on `device` (data made before the clock starts)."""
    rng = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():  # seeded weights; the caller's global generator is left as it was
        torch.manual_seed(0)
        embed = nn.Embedding(VOCAB, D_MODEL).to(device)
        core = nn.Transformer(D_MODEL, HEADS, LAYERS, LAYERS, D_FF, dropout=0.0, batch_first=True).to(device)
        head = nn.Linear(D_MODEL, VOCAB).to(device)
    params = [*embed.parameters(), *core.parameters(), *head.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-3)
    causal = nn.Transformer.generate_square_subsequent_mask(LENGTH, device=device)  # (L, L), float -inf above
    batches = [(s.to(device), t.to(device)) for s, t in _batches(rng)]
    start = time.perf_counter()
    for src, tgt in batches:
        logits = head(core(embed(src), embed(tgt[:, :-1]), tgt_mask=causal, tgt_is_causal=True))  # (B, L, V)
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if device != "cpu" and torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


if __name__ == "__main__":
    print(f"reference workload: {reference_seconds():.2f} s")
