#!/usr/bin/env python3
"""PyTorch reference for the datacenter GPU check (run by datacenter/scripts/gpu-check.sh).

Replays the steps gpu_check dumped (same initial weights, same batches, AdamW with the same
hyper-parameters, mean cross-entropy) in PyTorch FP32 on the GPU and compares the final
weights with Flotilla's, then times an eager PyTorch training step of the same model and
batch sizes as gpu_check's timings.

usage: torch_ref.py DIR    (DIR holds init.bin final.bin x.bin y.bin meta.txt)
"""
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def load(d):
    meta = {}
    for line in open(f"{d}/meta.txt"):
        k, *v = line.split()
        meta[k] = [float(x) for x in v] if len(v) > 1 else float(v[0])
    sizes = [int(s) for s in meta["sizes"]]
    return meta, sizes


def unflatten(flat, sizes, dev):
    out, off = [], 0
    for i in range(len(sizes) - 1):
        o, n = sizes[i + 1], sizes[i]
        w = flat[off:off + o * n].reshape(o, n)
        off += o * n
        b = flat[off:off + o]
        off += o
        out += [torch.tensor(w, device=dev), torch.tensor(b, device=dev)]
    return out


def model(sizes, dev):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(dev)


def replay(d):
    dev = "cuda"
    meta, sizes = load(d)
    B, K = int(meta["batch"]), int(meta["steps"])
    init = np.fromfile(f"{d}/init.bin", dtype=np.float32)
    final = np.fromfile(f"{d}/final.bin", dtype=np.float32)
    x = torch.tensor(np.fromfile(f"{d}/x.bin", dtype=np.float32).reshape(K * B, sizes[0]),
                     device=dev)
    y = torch.tensor(np.fromfile(f"{d}/y.bin", dtype=np.int32).astype(np.int64), device=dev)
    net = model(sizes, dev)
    params = [p for p in net.parameters()]
    with torch.no_grad():
        for p, v in zip(params, unflatten(init, sizes, dev)):
            p.copy_(v)
    opt = torch.optim.AdamW(params, lr=meta["lr"], betas=(meta["beta1"], meta["beta2"]),
                            eps=meta["eps"], weight_decay=meta["wd"])
    for k in range(K):
        opt.zero_grad()
        loss = F.cross_entropy(net(x[k * B:(k + 1) * B]), y[k * B:(k + 1) * B])
        loss.backward()
        opt.step()
    worst_l2 = worst_max = 0.0
    for p, v in zip(params, unflatten(final, sizes, dev)):
        d_ = (p.detach().double() - v.double())
        r = p.detach().double()
        worst_l2 = max(worst_l2, (d_.norm() / r.norm()).item())
        worst_max = max(worst_max, (d_.abs().max() / r.abs().max()).item())
    ok = worst_l2 <= 1e-5 and worst_max <= 1e-4
    print(f"CHECK {'flotilla cuda vs pytorch, %d AdamW steps' % K:44s} "
          f"{'PASS' if ok else 'FAIL'}  L2 {worst_l2:.2e}  max {worst_max:.2e}")
    return ok


def time_eager(hidden, batch, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    dev = "cuda"
    sizes = [784, hidden, 10]
    net = model(sizes, dev)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    x = torch.rand(batch, 784, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        opt.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        step()
    torch.cuda.synchronize()
    ms = (time.perf_counter() - t0) * 1e3 / 200
    print(f"TIME pytorch eager  784-{hidden}-10 B={batch:<5d} {'tf32' if tf32 else 'fp32':4s} "
          f"{ms:8.3f} ms/step {batch / ms * 1e3:10.0f} samples/s (batch already on the GPU)")
    torch.backends.cuda.matmul.allow_tf32 = False


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    ok = replay(sys.argv[1])
    for hidden, batch in [(128, 256), (128, 4096), (1024, 4096)]:
        for tf32 in (False, True):
            time_eager(hidden, batch, tf32)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
