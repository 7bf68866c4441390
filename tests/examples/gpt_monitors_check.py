#!/usr/bin/env python3
"""gpt_monitors_check.py — the GPT example's csv_monitor and tensorboard logs
against its own per-step CSV (--log-csv): Train/Samples/train_loss holds
the same mean loss at step = steps x train_batch_size, Train/Samples/lr the
same lr, in DeepSpeed's csv layout; the TensorBoard event file holds the
same values as float32, read by this script's own TFRecord/protobuf decoder
(crc32c written here) and, when the tensorboard package is installed, by
TensorBoard's EventAccumulator as well.

Usage: gpt_monitors_check.py LOG_CSV CSV_DIR TB_DIR TRAIN_BATCH_SIZE
"""
import csv
import glob
import os
import struct
import sys

log_csv, csv_dir, tb_dir, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
fail = []


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = varint(buf, i)
        elif w == 1:
            v, i = buf[i:i + 8], i + 8
        elif w == 5:
            v, i = buf[i:i + 4], i + 4
        elif w == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"wire type {w}")
        yield f, v


def read_events(path):
    data = open(path, "rb").read()
    out, i = {}, 0
    while i < len(data):
        n = struct.unpack_from("<Q", data, i)[0]
        if struct.unpack_from("<I", data, i + 8)[0] != masked(data[i:i + 8]):
            fail.append(f"{path}: bad length crc at {i}")
        rec = data[i + 12:i + 12 + n]
        if struct.unpack_from("<I", data, i + 12 + n)[0] != masked(rec):
            fail.append(f"{path}: bad data crc at {i}")
        i += 16 + n
        step = 0
        for f, v in fields(rec):
            if f == 2:
                step = v
            if f == 5:
                for f2, val in fields(v):
                    tag = value = None
                    for f3, x in fields(val):
                        if f3 == 1:
                            tag = x.decode()
                        if f3 == 2:
                            value = struct.unpack("<f", x)[0]
                    out.setdefault(tag, {})[step] = value
    return out


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


# the example's own per-step CSV: step,loss,lr,grad_norm,loss_scale,skipped,seconds
rows = list(csv.DictReader(open(log_csv)))
want_loss = {int(r["step"]) * batch: float(r["loss"]) for r in rows}
want_lr = {int(r["step"]) * batch: float(r["lr"]) for r in rows}

for metric, want in (("train_loss", want_loss), ("lr", want_lr)):
    path = os.path.join(csv_dir, f"Train_Samples_{metric}.csv")
    with open(path, newline="") as f:
        text = f.read()
    if not text.startswith(f"step,{metric}\r\n"):
        fail.append(f"{path}: header is {text[:30]!r}")
    got = {int(s): float(v) for s, v in list(csv.reader(text.splitlines()))[1:]}
    if metric == "train_loss" and got != want:
        fail.append(f"{path}: {got} != the example's {want}")
    if metric == "lr" and {k: f32(v) for k, v in got.items()} != {k: f32(v) for k, v in want.items()}:
        fail.append(f"{path}: lr {got} != the example's {want}")

files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
if len(files) != 1:
    fail.append(f"{tb_dir}: {len(files)} event files")
else:
    ev = read_events(files[0])
    got = ev.get("Train/Samples/train_loss", {})
    if got != {k: f32(v) for k, v in want_loss.items()}:
        fail.append(f"tensorboard train_loss {got} != {want_loss}")
    try:
        from tensorboard.backend.event_processing import event_accumulator
        acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={"scalars": 0})
        acc.Reload()
        tb = {e.step: f32(e.value) for e in acc.Scalars("Train/Samples/train_loss")}
        if tb != {k: f32(v) for k, v in want_loss.items()}:
            fail.append(f"TensorBoard reads train_loss {tb}")
        print(f"TensorBoard reads {len(tb)} train_loss points")
    except ImportError:
        print("SKIPPED (part): no tensorboard package; the event file was checked by this "
              "script's own decoder only (scripts/setup.sh installs it in .venv)")

for f in fail:
    print("FAIL:", f)
print(f"monitors: {len(rows)} steps checked" if not fail else "monitors: FAILED")
sys.exit(1 if fail else 0)
