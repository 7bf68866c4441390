#!/usr/bin/env python3
"""tb_read.py — read test_monitor's TensorBoard event files with TensorBoard's
own reader (PyPI tensorboard: EventAccumulator) and compare every scalar
with the expectation file test_monitor wrote (tag, step, float32 value).

Usage: tb_read.py RUN_DIR... (each holding tb/run/ and expect.txt).
Exits 77 (SKIPPED) when the tensorboard package is missing: scripts/setup.sh
installs it in .venv.
"""
import os
import struct
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError as exc:
    print(f"SKIPPED: the tensorboard package is not installed ({exc}); "
          "run scripts/setup.sh to install it in .venv")
    sys.exit(77)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check(run_dir):
    tb_dir = os.path.join(run_dir, "tb", "run")
    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    bad = 0
    want = {}
    with open(os.path.join(run_dir, "expect.txt")) as f:
        for line in f:
            tag, step, value = line.split()
            want.setdefault(tag, {})[int(step)] = f32(float(value))
    for tag, steps in want.items():
        if tag not in tags:
            print(f"{tb_dir}: TensorBoard finds no scalar {tag} (it has {sorted(tags)})")
            bad += 1
            continue
        got = {ev.step: f32(ev.value) for ev in acc.Scalars(tag)}
        if got != steps:
            print(f"{tb_dir}: {tag}: TensorBoard reads {got}, expected {steps}")
            bad += 1
    n = sum(len(v) for v in want.values())
    print(f"{tb_dir}: {'FAILED' if bad else 'ok'}: {n} scalars of {len(want)} tags "
          f"read back by TensorBoard {getattr(sys.modules.get('tensorboard'), '__version__', '')}")
    return bad


if __name__ == "__main__":
    sys.exit(1 if sum(check(d) for d in sys.argv[1:]) else 0)
