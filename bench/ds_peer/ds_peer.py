#!/usr/bin/env python3
"""DeepSpeed itself beside zinc, on the cpu device, same model, same JSON config.

The model: 16 linear modules of 1024 x 1024 + bias (16.8 M parameters),
batch 16 per rank, mean squared error against a fixed target, AdamW (lr 1e-5,
betas 0.9/0.999, eps 1e-8, weight decay 0.01 on every parameter, as torch
applies it to model.parameters()), gradient clipping 1.0. Both sides
compute the same initial values, inputs and targets (a hash of the index,
ds_peer_zinc.c's hash_uniform) and print the loss before the first update,
so a mismatch of model or data shows up as different loss0 values.

Each cell of the table (stage 0-3; offload none, or cpu: offload_optimizer
at stages 1-3 and offload_param too at stage 3; fp32 or bf16) writes one
JSON config that both sides read: zinc's trainer (ds_peer_zinc, under
mpirun) and DeepSpeed (this file's --worker mode, under torch's launcher,
DS_ACCELERATOR=cpu, gloo). The two run one after the other for each cell,
cell after cell, repetition after repetition (A/B interleaved, the order
flipped every repetition), so a busy minute on the machine hits both; each
figure is the median over the repetitions of each run's median step.

What is timed, per step, on rank 0, after a barrier, the first step not
counted (the same boundaries on both sides):
  forward  — zinc: fetch, product, release per module, and the loss;
             DeepSpeed: engine(x) (its stage-3 gathers inside) and the loss
  backward — zinc: every module's gradients, grads_ready, release, then
             zinc_backward_end; DeepSpeed: engine.backward(loss) (its
             reductions and, at stages 0-1, the all-reduce at the boundary)
  step     — zinc: zinc_step; DeepSpeed: engine.step()
  iter     — the three together
Peak RSS is each rank's ru_maxrss at the end, the largest over the ranks
(the launchers, mpirun and torch's agent, are not counted). Matrix products:
zinc's trainer calls OpenBLAS's cblas_sgemm; torch uses the BLAS its build
has (printed below: the PyPI wheel's is MKL on x86-64). Both sides get the
same threads per rank (--threads; OMP/MKL/OpenBLAS and zinc's pool), and
neither launcher binds ranks to cores.

DeepSpeed and torch are an optional bench dependency in a venv
(bench/ds_peer/install.sh; --venv or ZINC_DS_VENV, default bench/.dsvenv):
without them this prints SKIPPED and exits with --skip-code (0).

  python3 bench/ds_peer/ds_peer.py [--zinc build/cpu/bench/ds_peer/ds_peer_zinc]
      [--venv DIR] [--reps 3] [--steps 8] [--threads 1] [--ranks 2]
      [--stages 0,1,2,3] [--offload none,cpu] [--dtypes f32,bf16] [--quick]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KEYS = ("iter_s", "fwd_s", "bwd_s", "step_s", "rss_mb", "loss0", "loss")


# ----------------------------------------------------------------- the config

def ds_config(stage, offload, dtype, batch):
    """The one JSON both sides read."""
    zero = {"stage": stage}
    if offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu"}
        if stage == 3:
            zero["offload_param"] = {"device": "cpu"}
    return {
        "train_micro_batch_size_per_gpu": batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "betas": [0.9, 0.999],
                                                  "eps": 1e-8, "weight_decay": 0.01}},
        "bf16": {"enabled": dtype == "bf16"},
        "zero_optimization": zero,
        "steps_per_print": 1000000,
        "wall_clock_breakdown": False,
    }


# ----------------------------------------------------------------- DeepSpeed side

def hash_uniform(torch, seed, n):
    """ds_peer_zinc.c's hash_uniform for indices 0..n-1 (int64 arithmetic
    that never overflows for the seeds and sizes used here)."""
    i = torch.arange(n, dtype=torch.int64)
    h = ((seed * 1000003 + i) * 2654435761 + 12345) & 0xFFFFFFFF
    return (h.double() / 4294967296.0 - 0.5).float()


def worker(args):
    import logging
    import resource
    import time

    import torch
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    import deepspeed
    deepspeed.utils.logger.setLevel(logging.WARNING)

    deepspeed.init_distributed(dist_backend="gloo")
    rank = dist.get_rank()
    W, L = args.width, args.layers
    with open(args.config) as f:
        batch = json.load(f)["train_micro_batch_size_per_gpu"]
    model = torch.nn.Sequential(*[torch.nn.Linear(W, W) for _ in range(L)])
    scale = 2.0 / W ** 0.5  # torch's default Linear init range, 1/sqrt(in)
    with torch.no_grad():
        for l, lin in enumerate(model):
            lin.weight.copy_(scale * hash_uniform(torch, 2 * l, W * W).view(W, W))
            lin.bias.copy_(scale * hash_uniform(torch, 2 * l + 1, W))
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=args.config)
    x = 2.0 * hash_uniform(torch, 1000 + rank, batch * W).view(batch, W)
    target = 2.0 * hash_uniform(torch, 2000 + rank, batch * W).view(batch, W)
    if args.dtype == "bf16":
        x = x.bfloat16()
    times, loss0, loss_v = [], 0.0, 0.0
    for s in range(args.steps + 1):
        dist.barrier()
        t0 = time.perf_counter()
        y = engine(x)
        loss = ((y.float() - target) ** 2).mean()
        loss_v = loss.item()
        t1 = time.perf_counter()
        engine.backward(loss)
        t2 = time.perf_counter()
        engine.step()
        t3 = time.perf_counter()
        if s == 0:
            loss0 = loss_v
        else:  # the first step is a warm-up
            times.append((t3 - t0, t1 - t0, t2 - t1, t3 - t2))
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0],
                       dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        med = [statistics.median(t[k] for t in times) for k in range(4)]
        print("deepspeed iter_s=%.4f fwd_s=%.4f bwd_s=%.4f step_s=%.4f rss_mb=%.0f "
              "loss0=%.6f loss=%.6f ranks=%d" % (*med, rss.item(), loss0, loss_v,
                                                   dist.get_world_size()), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------- the driver

def parse_line(out, prefix):
    for line in out.splitlines():
        if line.startswith(prefix + " ") and "iter_s=" in line:
            fields = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
            return {k: float(fields[k]) for k in KEYS}
    return None


def run(cmd, env, timeout):
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=timeout)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + "\n(timed out after %d s)" % timeout


def last_lines(out, n=4):
    lines = [l for l in out.splitlines() if l.strip()]
    return "\n".join("      " + l[:200] for l in lines[-n:])


def probe_venv(python, env):
    """(torch version, deepspeed version, torch's BLAS) or None."""
    code = ("import torch, deepspeed, re; c = torch.__config__.show();"
            "m = re.search(r'BLAS_INFO=(\\w+)', c);"
            "print('PROBE', torch.__version__, deepspeed.__version__, m.group(1) if m else '?')")
    if not os.access(python, os.X_OK):
        return None
    rc, out = run([python, "-c", code], env, 300)
    for line in out.splitlines():
        if line.startswith("PROBE "):
            return line.split()[1:4]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="f32", help=argparse.SUPPRESS)
    ap.add_argument("--zinc", default=os.path.join(ROOT, "build/cpu/bench/ds_peer/ds_peer_zinc"))
    ap.add_argument("--venv", default=os.environ.get("ZINC_DS_VENV",
                                                     os.path.join(ROOT, "bench/.dsvenv")))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8, help="timed steps per run (after 1 warm-up)")
    ap.add_argument("--threads", type=int, default=1, help="compute threads per rank, both sides")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--stages", default="0,1,2,3")
    ap.add_argument("--offload", default="none,cpu")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--quick", action="store_true",
                    help="stage 0 and 3, fp32, 1 repetition of 2 steps (the ctest smoke run)")
    ap.add_argument("--skip-code", type=int, default=0,
                    help="exit status when DeepSpeed or OpenBLAS is missing (ctest: 77)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per run")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.quick:
        args.stages, args.offload, args.dtypes, args.reps, args.steps = "0,3", "none", "f32", 1, 2

    env = dict(os.environ)
    threads = str(args.threads)
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads,
               DS_ACCELERATOR="cpu", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", PYTHONUNBUFFERED="1")
    python = os.path.join(args.venv, "bin", "python3")
    probe = probe_venv(python, env)
    if not probe:
        print("ds_peer SKIPPED: torch and DeepSpeed are not importable from %s "
              "(install them with bench/ds_peer/install.sh, see docs/benchmarks.md)" % python)
        return args.skip_code
    if not os.access(args.zinc, os.X_OK):
        print("ds_peer: no zinc trainer at %s: build the tree first (cmake --build build/cpu)"
              % args.zinc, file=sys.stderr)
        return 1
    torch_v, ds_v, blas = probe
    print("ds_peer: %d linear modules %dx%d + bias, batch %d per rank, %d ranks, %d thread(s) "
          "per rank; medians of %d interleaved repetitions x %d steps; DeepSpeed %s, torch %s "
          "(BLAS %s), zinc's trainer on OpenBLAS" % (args.layers, args.width, args.width,
                                                     args.batch, args.ranks, args.threads,
                                                     args.reps, args.steps, ds_v, torch_v, blas),
          flush=True)

    cells = []
    for dtype in args.dtypes.split(","):
        for off in args.offload.split(","):
            for stage in (int(s) for s in args.stages.split(",")):
                if off == "cpu" and stage == 0:
                    continue  # offload is ZeRO's: stages 1-3
                cells.append((stage, off, dtype))
    work = tempfile.mkdtemp(prefix="zinc_ds_peer.")
    model_args = ["--layers", str(args.layers), "--width", str(args.width),
                  "--steps", str(args.steps), "--threads", threads]
    results = {c: {"zinc": [], "deepspeed": []} for c in cells}
    failures = {}
    for rep in range(args.reps):
        for cell in cells:
            stage, off, dtype = cell
            path = os.path.join(work, "s%d_%s_%s.json" % cell)
            with open(path, "w") as f:
                json.dump(ds_config(stage, off, dtype, args.batch), f, indent=1)
            sides = {
                "zinc": ["mpirun", "-n", str(args.ranks), "--oversubscribe", "--bind-to", "none",
                         args.zinc, "--config", path, "--dtype", dtype] + model_args,
                "deepspeed": [python, "-m", "torch.distributed.run", "--standalone",
                              "--nproc_per_node", str(args.ranks), os.path.abspath(__file__),
                              "--worker", "--config", path, "--dtype", dtype] + model_args,
            }
            order = ["zinc", "deepspeed"] if rep % 2 == 0 else ["deepspeed", "zinc"]
            for side in order:
                rc, out = run(sides[side], env, args.timeout)
                if side == "zinc" and "SKIPPED" in out:
                    print(out.strip())
                    return args.skip_code
                r = parse_line(out, side) if rc == 0 else None
                if r is None:
                    failures[(cell, side)] = "exit %d\n%s" % (rc, last_lines(out))
                    print("  rep %d stage %d offload %-4s %-4s %-9s FAILED (exit %d)"
                          % (rep + 1, stage, off, dtype, side, rc), flush=True)
                    continue
                results[cell][side].append(r)
                print("  rep %d stage %d offload %-4s %-4s %-9s iter %.4f s fwd %.4f bwd %.4f "
                      "step %.4f rss %.0f MB loss %.6f -> %.6f"
                      % (rep + 1, stage, off, dtype, side, r["iter_s"], r["fwd_s"], r["bwd_s"],
                         r["step_s"], r["rss_mb"], r["loss0"], r["loss"]), flush=True)

    def med(rows, k):
        return statistics.median(r[k] for r in rows)

    print("\nper iteration, seconds (median of %d repetitions); rss: peak RSS per rank, MB"
          % args.reps)
    hdr = ("stage", "offload", "dtype", "zinc iter", "fwd", "bwd", "step", "rss",
           "DS iter", "fwd", "bwd", "step", "rss", "DS/zinc", "rss DS/zinc")
    print("%-5s %-7s %-5s | %9s %7s %7s %7s %5s | %9s %7s %7s %7s %5s | %7s %11s" % hdr)
    mismatch = []
    for cell in cells:
        stage, off, dtype = cell
        z, d = results[cell]["zinc"], results[cell]["deepspeed"]
        row = "%-5d %-7s %-5s |" % cell
        for rows in (z, d):
            if rows:
                row += " %9.4f %7.4f %7.4f %7.4f %5.0f |" % tuple(
                    med(rows, k) for k in ("iter_s", "fwd_s", "bwd_s", "step_s", "rss_mb"))
            else:
                row += " %9s %7s %7s %7s %5s |" % ("failed", "", "", "", "")
        if z and d:
            row += " %6.2fx %10.2fx" % (med(d, "iter_s") / med(z, "iter_s"),
                                        med(d, "rss_mb") / med(z, "rss_mb"))
            l0z, l0d = z[0]["loss0"], d[0]["loss0"]
            tol = 1e-4 if dtype == "f32" else 2e-2
            if abs(l0z - l0d) > tol * max(abs(l0d), 1e-12):
                mismatch.append("stage %d offload %s %s: loss0 zinc %.6f vs DeepSpeed %.6f"
                                % (stage, off, dtype, l0z, l0d))
        print(row)
    print("\nloss before the first update -> at the last step (%d updates later), rank 0, "
          "first repetition:" % args.steps)
    for cell in cells:
        z, d = results[cell]["zinc"], results[cell]["deepspeed"]
        if z and d:
            print("  stage %d offload %-4s %-4s zinc %.6f -> %.6f  DeepSpeed %.6f -> %.6f"
                  % (*cell, z[0]["loss0"], z[0]["loss"], d[0]["loss0"], d[0]["loss"]))
    for (cell, side), why in sorted(failures.items()):
        print("\nstage %d offload %s %s: %s failed: %s" % (*cell, side, why))
    if mismatch:
        print("\nthe two sides did not start from the same loss (model or data differ):")
        print("\n".join("  " + m for m in mismatch))
    ok = all(results[c]["zinc"] and results[c]["deepspeed"] for c in cells) and not mismatch
    print("\nds_peer: %s" % ("every cell measured on both sides, same initial loss" if ok
                             else "some cells failed or differ (above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
