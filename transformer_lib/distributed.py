"""Data-parallel training: the same `fit`, run by several processes under PyTorch's DistributedDataParallel.

    torchrun --standalone --nproc_per_node=2 -m transformer_lib.distributed --steps 20

Every process builds the same model and draws the same global batches; each one trains on its own
slice of every batch. DistributedDataParallel (PyTorch's, not ours) averages the gradients across
the processes during backward, so every process takes the step that one process would take on
the whole batch. With `--save-grads FILE`, rank 0 saves the averaged gradients after one backward
pass instead of training (the tests compare them with one process on the full batch).

torchrun's part is small: it starts one process per rank and tells each, in environment variables
(RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), who it is and where to meet the others.
Setting those by hand and starting the processes yourself works the same way.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .models import DecoderOnlyLM
from .tasks import char_corpus, lm_batches
from .tokenization import CharTokenizer
from .training import fit, lm_loss
from .utils import set_seed

__all__ = ["demo_model_and_batches", "shard", "train_worker", "main"]


def demo_model_and_batches(
    seed: int = 0, batch_size: int = 16, block_size: int = 32
) -> tuple[DecoderOnlyLM, Iterator[tuple[torch.Tensor, torch.Tensor]]]:
    """The small character LM and the endless global batches that every process (or one alone) uses."""
    text = char_corpus(400, seed=seed)
    tok = CharTokenizer.from_texts([text])
    ids = torch.tensor(tok.encode(text))  # (N,)
    rng = set_seed(seed)  # the same weights and the same batches in every process
    model = DecoderOnlyLM(
        vocab_size=tok.vocab_size,
        d_model=64,
        num_heads=4,
        num_layers=2,
        d_ff=128,
        dropout=0.0,
        max_len=block_size,
        norm_first=True,
    )
    return model, lm_batches(ids, block_size, batch_size, rng=rng)


def shard(batch: tuple[torch.Tensor, ...], rank: int, world_size: int) -> tuple[torch.Tensor, ...]:
    """This process's rows of a global batch: (B, ...) -> (B / world_size, ...), consecutive slices by rank."""
    rows = batch[0].shape[0]
    if rows % world_size:
        raise ValueError(f"a global batch of {rows} rows does not split evenly over {world_size} processes")
    size = rows // world_size
    return tuple(t[rank * size : (rank + 1) * size] for t in batch)


def train_worker(steps: int = 20, batch_size: int = 16, backend: str = "gloo", save_grads: str | None = None):
    """One process's part: join the group, train its slice of every batch under DDP, leave the group.

    Reads RANK, WORLD_SIZE and the rendezvous address from the environment, as torchrun sets
    them. Returns the training loss per step, averaged over the processes (or None with
    save_grads, after saving rank 0's averaged gradients).
    """
    torch.set_num_threads(1)  # one thread per process: the processes share the machine's cores
    dist.init_process_group(backend)
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}") if backend == "nccl" else torch.device("cpu")
        model, batches = demo_model_and_batches(batch_size=batch_size)
        ddp = DistributedDataParallel(model.to(device))
        mine = (shard(batch, rank, world) for batch in batches)
        if save_grads:
            loss = lm_loss(ddp, tuple(t.to(device) for t in next(mine)))
            loss.backward()  # DDP all-reduces (averages) the gradients here
            if rank == 0:
                torch.save({name: p.grad.cpu() for name, p in model.named_parameters()}, save_grads)
            return None
        history = fit(ddp, lm_loss, mine, steps=steps, lr=3e-3, warmup=5, progress=False, device=device)
        losses = torch.tensor(history.losses)  # (steps,) this process's loss: the mean over its own slice
        dist.all_reduce(losses)  # summed over the processes
        return (losses / world).tolist()
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Train the demo LM with DistributedDataParallel, under torchrun.")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16, help="global batch: all processes together")
    parser.add_argument("--backend", default="gloo", help="gloo (CPU, any machine) or nccl (one GPU per process)")
    parser.add_argument(
        "--save-grads", default=None, help="save rank 0's averaged gradients after one backward pass, then stop"
    )
    args = parser.parse_args(argv)
    if "RANK" not in os.environ:
        parser.error("run me under torchrun: torchrun --standalone --nproc_per_node=2 -m transformer_lib.distributed")
    losses = train_worker(args.steps, args.batch_size, args.backend, args.save_grads)
    if losses is not None and int(os.environ["RANK"]) == 0:
        print(f"{os.environ['WORLD_SIZE']} processes ({args.backend}), {args.steps} steps: final loss {losses[-1]:.4f}")
        print("losses:", " ".join(f"{loss:.6f}" for loss in losses))
    # A worker has nothing left to clean up: skip Python's teardown of torch's modules (about 0.8 s,
    # most of it torch._dynamo's, which DDP imports), which every caller would otherwise wait for.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
