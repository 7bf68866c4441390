#!/usr/bin/python3
"""Make tests/optim/sgd_adagrad_reference.bin: SGD and Adagrad trajectories
computed by PyTorch's torch.optim.SGD / torch.optim.Adagrad (single-tensor
path, foreach=False), the reference test_optim_reference.c checks zinc's CPU
optimizer kernels against.

    /usr/bin/python3 tests/optim/make_sgd_adagrad_reference.py [out.bin]

Made with torch 1.13 (Debian's python3-torch). Adagrad runs with lr_decay 0
and initial_accumulator_value 0, the only values zinc accepts.
Layout (little-endian):
    header: char magic[8] = "ZOPTREF1"; uint32 version = 1, ncases, n, steps
    per case:
        int32 kind (0 SGD, 1 Adagrad), int32 nesterov
        float64 lr, momentum, dampening, weight_decay, eps
        float32 param0[n]                 initial parameters
        float32 grad[steps][n]            the gradient of each step
        float32 param[steps][n]           parameters after each step
        float32 state[n]                  after the last step: SGD's momentum
                                          buffer (zeros without momentum),
                                          Adagrad's sum of squared gradients
"""
import os
import struct
import sys

import torch

N = 517    # odd, not a multiple of any vector width
STEPS = 5  # SGD's momentum buffer starts as the gradient: several later steps
SGD, ADAGRAD = 0, 1
CASES = [
    # kind,  lr,   momentum, dampening, weight_decay, nesterov, eps
    (SGD, 0.1, 0.0, 0.0, 0.0, 0, 0.0),        # plain SGD
    (SGD, 0.05, 0.0, 0.0, 0.05, 0, 0.0),      # momentum 0 with L2 decay
    (SGD, 0.05, 0.9, 0.0, 0.01, 0, 0.0),      # heavy ball with decay
    (SGD, 0.05, 0.9, 0.0, 0.01, 1, 0.0),      # Nesterov with decay
    (SGD, 0.02, 0.8, 0.3, 0.0, 0, 0.0),       # dampening
    (ADAGRAD, 0.01, 0, 0, 0.0, 0, 1e-10),     # torch's defaults
    (ADAGRAD, 0.05, 0, 0, 0.01, 0, 1e-6),     # L2 decay in the gradient
    (ADAGRAD, 0.1, 0, 0, 0.1, 0, 1e-3),       # large eps and decay
]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "sgd_adagrad_reference.bin")
    torch.manual_seed(4321)
    with open(out, "wb") as f:
        f.write(b"ZOPTREF1")
        f.write(struct.pack("<4I", 1, len(CASES), N, STEPS))
        for kind, lr, momentum, dampening, wd, nesterov, eps in CASES:
            p = (torch.randn(N, dtype=torch.float32) * 0.5).requires_grad_(True)
            p0 = p.detach().clone()
            if kind == SGD:
                opt = torch.optim.SGD([p], lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=wd, nesterov=bool(nesterov), foreach=False)
            else:
                opt = torch.optim.Adagrad([p], lr=lr, lr_decay=0, weight_decay=wd,
                                          initial_accumulator_value=0, eps=eps, foreach=False)
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
            if kind == SGD:
                buf = st.get("momentum_buffer")
                state = buf if buf is not None else torch.zeros(N)
            else:
                state = st["sum"]
            f.write(struct.pack("<2i5d", kind, nesterov, lr, momentum, dampening, wd, eps))
            for t in [p0] + grads + params + [state]:
                f.write(t.detach().numpy().astype("<f4").tobytes())
    print(f"wrote {out}: {len(CASES)} cases, {N} elements, {STEPS} steps (torch {torch.__version__})")


if __name__ == "__main__":
    main()
