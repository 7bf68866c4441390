#!/usr/bin/python3
"""Make tests/optim/adam_reference.bin: Adam and AdamW trajectories computed
by PyTorch's torch.optim.Adam / torch.optim.AdamW (single-tensor path), the
reference that test_adam_reference.c checks zinc's CPU Adam against.

    /usr/bin/python3 tests/optim/make_adam_reference.py [out.bin]

Made with torch 1.13. Layout (little-endian):
    header: char magic[8] = "ZADAMREF"; uint32 version = 1, ncases, n, steps
    per case:
        float64 lr, beta1, beta2, eps, weight_decay; int32 adamw, pad
        float32 param0[n]                 initial parameters
        float32 grad[steps][n]            the gradient of each step
        float32 param[steps][n]           parameters after each step
        float32 exp_avg[n], exp_avg_sq[n] optimizer state after the last step
"""
import os
import struct
import sys

import torch

N = 2053   # odd, not a multiple of any vector width
STEPS = 4
CASES = [
    # lr,   beta1, beta2, eps,  weight_decay, adamw
    (1e-3, 0.9, 0.999, 1e-8, 0.01, 0),   # Adam, L2 added to the gradient
    (2e-3, 0.85, 0.995, 1e-6, 0.1, 1),   # AdamW, decoupled decay
    (1e-2, 0.9, 0.99, 1e-8, 0.0, 0),     # Adam without decay, larger steps
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "adam_reference.bin")
    torch.manual_seed(1234)
    with open(out, "wb") as f:
        f.write(b"ZADAMREF")
        f.write(struct.pack("<4I", 1, len(CASES), N, STEPS))
        for lr, beta1, beta2, eps, wd, adamw in CASES:
            p = (torch.randn(N, dtype=torch.float32) * 0.5).requires_grad_(True)
            p0 = p.detach().clone()
            cls = torch.optim.AdamW if adamw else torch.optim.Adam
            opt = cls([p], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd,
                      foreach=False)
            grads, params = [], []
            for _ in range(STEPS):
                # gradients over four decades of magnitude
                scale = torch.pow(10.0, torch.rand(N) * 4.0 - 3.0)
                g = (torch.randn(N) * scale).to(torch.float32)
                p.grad = g.clone()
                opt.step()
                grads.append(g)
                params.append(p.detach().clone())
            st = opt.state[p]
            f.write(struct.pack("<5d2i", lr, beta1, beta2, eps, wd, adamw, 0))
            for t in [p0] + grads + params + [st["exp_avg"], st["exp_avg_sq"]]:
                f.write(t.detach().numpy().astype("<f4").tobytes())
    print(f"wrote {out}: {len(CASES)} cases, {N} elements, {STEPS} steps (torch {torch.__version__})")


if __name__ == "__main__":
    main()
