#!/usr/bin/env python3
"""zinc's config loader beside DeepSpeed's own, file by file.

DeepSpeed (0.14.4) decides with deepspeed.runtime.config.DeepSpeedConfig on
the CPU after a one-rank gloo process group. The property held: every file
DeepSpeed accepts loads in zinc. Files DeepSpeed rejects only because they
carry "auto" (meant for the Hugging Face Trainer to fill in) are listed
with zinc's verdict, and so are the rest.

Not part of the test suite (it needs torch and DeepSpeed): run it by hand,
    python3 -m venv --system-site-packages /tmp/dsv   # on Debian's python3-torch
    DS_BUILD_OPS=0 /tmp/dsv/bin/pip install deepspeed==0.14.4 hjson 'pydantic<3' \
        py-cpuinfo packaging psutil tqdm ninja
    /tmp/dsv/bin/python tests/config/ds_oracle.py build/cpu/tests/config/config_check FILES...
Exit 1 when a file DeepSpeed accepts is rejected by zinc, unless the file is
one of the deliberate differences below, each documented in docs/config.md:
DeepSpeedConfig does not build the optimizer or the scheduler, so errors
DeepSpeed raises only at their construction pass its config class.
"""
import os
import subprocess
import sys


# file name -> why zinc rejects what DeepSpeedConfig accepts (docs/config.md).
# Only what cannot run: an optimizer class zinc does not have, a 1-bit
# optimizer under ZeRO, keys a constructor would refuse. The other way
# round, zinc loads on purpose what DeepSpeed's engine refuses at start-up
# though its config class accepts it: Lamb's optimizer.params.max_grad_norm
# (valid/lamb_max_grad_norm*.json, valid/*bert_lamb*.json), which
# DeepSpeed's _configure_basic_optimizer refuses and zinc runs as FusedLamb
# clips (docs/config.md, "Lamb's max_grad_norm"). "auto" on a key no
# trainer fills reads as the key's default, as DeepSpeed's pydantic models
# read it (valid/auto_deepspeed_defaults.json).
DELIBERATE = {
    "lr_range_test_step_size_zero.json": "scheduler: DeepSpeed divides by it at construction",
    "scheduler_onecycle_warmup_key.json": "scheduler: a key of another scheduler, ignored by "
                                          "DeepSpeed's OneCycle; an error in zinc",
    "max_consecutive_skips_negative.json": "zinc's own key (zinc.max_consecutive_skips)",
    "optimizer_type_auto.json": "optimizer: DeepSpeed's engine asserts a type it has at start-up",
    "scheduler_type_auto.json": "scheduler: DeepSpeed's engine asserts a schedule it has at "
                                "start-up",
    "optimizer_param_auto.json": "optimizer: \"auto\" on a constructor key no trainer fills; "
                                 "DeepSpeed hands the string to the constructor",
    "sgd_nesterov_without_momentum.json": "optimizer: torch refuses it at construction",
    "sgd_zero_without_untested_flag.json": "optimizer: DeepSpeed refuses it at engine creation",
    "csv_monitor_job_name_number.json": "a number where a string is expected (Strings)",
    "comms_logger_verbose_string.json": "a string where a boolean is expected (Booleans)",
    "adagrad_betas.json": "optimizer: a key the type's constructor does not take (DeepSpeed: "
                          "a TypeError at start-up)",
    "lion_eps.json": "optimizer: a key the type's constructor does not take (DeepSpeed: a "
                     "TypeError at start-up)",
    "sgd_eps.json": "optimizer: a key the type's constructor does not take (DeepSpeed: a "
                    "TypeError at start-up)",
    "eps_zero_in_fp32.json": "optimizer: eps 0 in fp32, where zinc adds it (0/0: cannot train)",
    "gradient_predivide_factor_huge.json": "every gradient zeroed in fp32 (cannot train)",
    "lamb_max_coeff_zero.json": "optimizer: a trust ratio of 0, no step moves a parameter "
                                "(cannot train)",
    "onebit_lamb_factor_min_above_max.json": "optimizer: an empty clamp range for the "
                                             "factor (cannot train as written)",
    "onebit_lamb_freeze_step_zero.json": "optimizer: no warm-up step, the state turns NaN "
                                         "at the first step (cannot train)",
    "aio_block_size_4096.json": "aio: beyond what zinc's I/O engine runs (refused at load, "
                                "not at build)",
    "aio_intra_op_above_engine.json": "aio: beyond what zinc's I/O engine runs",
    "aio_queue_depth_above_engine.json": "aio: beyond what zinc's I/O engine runs",
    "comm_timeout_tiny.json": "zinc's own key (zinc.comm_timeout_s)",
    "batch_too_big.json": "an integer beyond int64 (Integers)",
}


def deepspeed_verdicts(paths):
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    from deepspeed.runtime.config import DeepSpeedConfig
    out = {}
    for p in paths:
        try:
            DeepSpeedConfig(p)
            out[p] = None
        except Exception as e:  # DeepSpeed's verdict, whatever raised it
            out[p] = "%s: %s" % (type(e).__name__, str(e).replace("\n", " ")[:160])
    return out


def mentions_auto(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return '"auto"' in text or "'auto'" in text or ": auto" in text


def main():
    check, paths = sys.argv[1], sys.argv[2:]
    ds = deepspeed_verdicts(paths)
    zinc = {}
    for line in subprocess.run([check] + paths, capture_output=True, text=True).stdout.splitlines():
        verdict, rest = line.split(" ", 1)
        path, _, msg = rest.partition(": ")
        zinc[path if verdict == "REJECT" else rest] = None if verdict == "OK" else msg
    groups = {"ds accepts": [0, 0], "ds rejects, auto": [0, 0], "ds rejects": [0, 0]}
    bad = 0
    for p in paths:
        d, z = ds[p], zinc.get(p, "no verdict")
        g = "ds accepts" if d is None else "ds rejects, auto" if mentions_auto(p) else "ds rejects"
        groups[g][0] += 1
        groups[g][1] += z is None
        if d is None and z is not None and os.path.basename(p) in DELIBERATE:
            print("DIFFERS  %s: DeepSpeed accepts it; zinc on purpose (%s): %s"
                  % (p, DELIBERATE[os.path.basename(p)], z[:120]))
        elif d is None and z is not None:
            bad += 1
            print("MISSED %s: DeepSpeed accepts it; zinc: %s" % (p, z))
        elif d is not None:
            print("%-8s %s: DeepSpeed: %s%s" % ("LOADS" if z is None else "REJECTS", p, d,
                                                 "" if z is None else "; zinc: " + z[:160]))
    for g, (n, ok) in groups.items():
        print("%-18s %3d files, zinc loads %3d" % (g, n, ok))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
