"""Print how fast our attention and KV-cache generation are next to PyTorch's. Not a test.

    python benchmarks/attention.py [--repeats 30] [--device cpu]

Attention: batch 32, length 64, d_model 128, 4 heads, forward + backward, median of repeats.
Decoding: 256 new tokens from a decoder-only LM, and 128 from an encoder-decoder, with and without caches.
The reference is the least a multi-head layer needs around PyTorch's fused kernel: the same four
linear projections and one call of F.scaled_dot_product_attention, with no checks.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import transformer_lib as tl


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _medians_ms(cases: dict, repeats: int, device: torch.device) -> dict[str, float]:
    """Median wall time of each case in ms; cases run round-robin so drift hits all of them alike."""
    for fn in cases.values():
        for _ in range(3):  # warm-up
            fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append((time.perf_counter() - start) * 1000)
    return {name: statistics.median(t) for name, t in times.items()}


def attention_table(repeats: int, device: torch.device, B=32, T=64, d_model=128, h=4) -> None:
    torch.manual_seed(0)
    ours = tl.MultiHeadAttention(d_model, h).to(device)
    theirs = tl.to_torch(ours).to(device)
    x = torch.randn(B, T, d_model, device=device, requires_grad=True)
    d_k = d_model // h

    def reference():
        q = ours.q_proj(x).view(B, T, h, d_k).transpose(1, 2)  # (B, h, T, d_k)
        k = ours.k_proj(x).view(B, T, h, d_k).transpose(1, 2)
        v = ours.v_proj(x).view(B, T, h, d_k).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, k, v)  # (B, h, T, d_k)
        ours.out_proj(out.transpose(1, 2).reshape(B, T, d_model)).sum().backward()

    cases = {
        "reference: projections + F.scaled_dot_product_attention": reference,
        "ours, fused path (need_weights=False)": lambda: ours(x, x, x)[0].sum().backward(),
        "ours, weights path (need_weights=True)": lambda: ours(x, x, x, need_weights=True)[0].sum().backward(),
        "nn.MultiheadAttention (batch_first)": lambda: theirs(x, x, x, need_weights=False)[0].sum().backward(),
    }
    timings = _medians_ms(cases, repeats, device)
    base = timings["reference: projections + F.scaled_dot_product_attention"]
    print(f"Attention, forward + backward, B={B} T={T} d_model={d_model} heads={h}, median of {repeats}")
    print(f"{'':58s} {'ms':>8s} {'ratio':>7s}")
    for name, ms in timings.items():
        print(f"{name:58s} {ms:8.3f} {ms / base:7.2f}x")


def kv_cache_table(device: torch.device, new_tokens=256, d_model=128, h=4, layers=4, repeats=3) -> None:
    torch.manual_seed(0)
    lm = (
        tl.DecoderOnlyLM(
            vocab_size=64, d_model=d_model, num_heads=h, num_layers=layers, d_ff=4 * d_model, dropout=0.0, max_len=512
        )
        .to(device)
        .eval()
    )
    prompt = torch.randint(0, 64, (1, 16), device=device)

    def run(use_cache):
        return lambda: lm.generate(prompt, new_tokens, temperature=0.0, use_cache=use_cache)

    timings = _medians_ms({"with": run(True), "without": run(False)}, repeats, device)
    with_cache, without = timings["with"], timings["without"]
    same = torch.equal(run(True)(), run(False)())
    print(f"\nGreedy generation of {new_tokens} new tokens, d_model={d_model}, {layers} layers, median of {repeats}")
    print(f"without KV cache {without:9.1f} ms  ({new_tokens / without * 1000:7.1f} tokens/s)")
    print(f"with KV cache    {with_cache:9.1f} ms  ({new_tokens / with_cache * 1000:7.1f} tokens/s)")
    print(f"speed-up {without / with_cache:.2f}x; identical tokens: {same}")


def encoder_decoder_table(
    device: torch.device, new_tokens=128, src_len=32, d_model=128, h=4, layers=4, batch=1, repeats=3
) -> None:
    """Transformer.greedy_decode with and without its caches; eos_id=-1 is never produced, so every step runs."""
    torch.manual_seed(0)
    model = (
        tl.Transformer(
            vocab_size=64, d_model=d_model, num_heads=h, num_layers=layers, d_ff=4 * d_model, dropout=0.0, max_len=512
        )
        .to(device)
        .eval()
    )
    src = torch.randint(1, 64, (batch, src_len), device=device)

    def decode(use_cache):
        return lambda: model.greedy_decode(src, bos_id=1, eos_id=-1, max_new_tokens=new_tokens, use_cache=use_cache)

    def modules(cross: bool):  # greedy_decode's cached loop through model.decode: every module called as a module
        @torch.inference_mode()
        def loop():
            memory, caches = model.encode(src), model.new_cache(capacity=new_tokens)
            cross_caches = model.new_cross_cache() if cross else None
            out = torch.ones(batch, 1, dtype=torch.long, device=device)  # (B, 1): BOS
            for _ in range(new_tokens):
                logits = model.decode(out[:, -1:], memory, None, caches=caches, cross_caches=cross_caches)
                out = torch.cat([out, logits[:, -1].argmax(-1)[:, None]], dim=1)  # (B, t + 1)
            return out

        return loop

    cases = {
        "without caches": decode(False),
        "self-attention cache only, modules": modules(cross=False),
        "both caches, modules": modules(cross=True),
        "both caches, plain step (greedy_decode)": decode(True),
    }
    timings = _medians_ms(cases, repeats, device)
    outputs = [fn() for fn in cases.values()]
    same = all(torch.equal(outputs[0], out) for out in outputs[1:]) and outputs[0].shape[1] == new_tokens + 1
    base = timings["without caches"]
    print(
        f"\nEncoder-decoder greedy decoding of {new_tokens} new tokens from {src_len}-token sources, "
        f"d_model={d_model}, {layers}+{layers} layers, batch {batch}, median of {repeats}"
    )
    for name, ms in timings.items():
        print(f"{name:42s} {ms:9.1f} ms  speed-up {base / ms:5.2f}x")
    print(f"identical tokens: {same}")
    cached = base / timings["both caches, plain step (greedy_decode)"]
    goal = " (the goal at batch 1: at least 3x)" if batch == 1 else ""
    print(f"greedy_decode with its caches: {cached:.2f}x as fast as without{goal}")
    print(
        "   modules: each step through model.decode, every layer called as an nn.Module; plain step: the\n"
        "   same operations as plain functions over the weights (Transformer.plain_step), greedy_decode's cached path"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    device = tl.get_device(args.device)
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}\n")
    attention_table(args.repeats, device)
    kv_cache_table(device)
    encoder_decoder_table(device, batch=1, repeats=9)  # 0.1-0.5 s a decode: a median of 3 moved by 30% between runs
    encoder_decoder_table(device, batch=16)


if __name__ == "__main__":
    main()
