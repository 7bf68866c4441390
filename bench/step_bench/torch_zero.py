#!/usr/bin/env python3
"""PyTorch's ZeroRedundancyOptimizer (gloo, one thread per rank) on the same
parameter count: the peer of zinc's stage-1 iteration in step_bench.

One iteration = all-reduce of the gradients (what DDP does before the step)
+ ZeroRedundancyOptimizer.step() (Adam on the rank's shard, then the updated
parameters broadcast from their owners). Prints one line per rank-0 result:
  torch_zero params=<n> ranks=<r> allreduce_s=<t> step_s=<t> iteration_s=<t>
Run: /usr/bin/python3 torch_zero.py --params 67108864 --ranks 2 --iters 3
"""
import argparse
import os
import sys
import time


def worker(rank, args):
    import torch
    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    n_tensors = 16
    per = args.params // n_tensors
    params = [torch.nn.Parameter(torch.full((per,), 0.01)) for _ in range(n_tensors)]
    opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, lr=1e-3)
    for p in params:
        p.grad = torch.full((per,), 1e-3 * (rank + 1))
    times = []
    for it in range(args.iters + 1):
        dist.barrier()
        t0 = time.perf_counter()
        for p in params:
            dist.all_reduce(p.grad)
        t1 = time.perf_counter()
        opt.step()
        dist.barrier()
        t2 = time.perf_counter()
        if it > 0:  # the first iteration allocates Adam's state
            times.append((t1 - t0, t2 - t1))
    if rank == 0:
        ar = min(t[0] for t in times)
        st = min(t[1] for t in times)
        print(f"torch_zero params={per * n_tensors} ranks={args.ranks} allreduce_s={ar:.4f} "
              f"step_s={st:.4f} iteration_s={ar + st:.4f}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    args = ap.parse_args()
    if args.port == 0:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.port = s.getsockname()[1]
    try:
        import torch.multiprocessing as mp
    except ImportError:
        print("torch_zero SKIPPED: torch is not installed for", sys.executable)
        return 0
    mp.spawn(worker, args=(args,), nprocs=args.ranks, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
