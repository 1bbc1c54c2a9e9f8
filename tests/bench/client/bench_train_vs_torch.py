#!/usr/bin/env python3
"""Client SDK trainer vs PyTorch, one thread each, same run.

Runs bench_train (the SDK's built-in trainer through libflotilla-client-sdk.so) and the same
network in PyTorch: MLP 784-H-10, ReLU, softmax cross-entropy (mean), SGD with momentum, the
same batch size, learning rate and data (Fashion-MNIST from --data-dir, else synthetic data of
the same shape), reshuffled every epoch, on one thread (OPENBLAS_NUM_THREADS=1 for the SDK,
torch.set_num_threads(1) and OMP/MKL_NUM_THREADS=1 for PyTorch). The two are interleaved
--repeat times and the best of each is kept, so both see the same machine load. Prints
samples/s for both, by wall time and by process CPU time (shared machines stretch wall time),
and the ratio flotilla / torch (goal >= 1.0). Installs torch from PyPI into the interpreter's
environment when it is missing (--no-install to skip; without torch only the SDK's figure is
printed).

usage: bench_train_vs_torch.py [--bench-train PATH] [--batch 32] [--hidden 128] [--epochs 1]
                               [--samples N] [--lr 0.02] [--momentum 0.9] [--repeat 3]
                               [--synthetic] [--data-dir DIR] [--json] [--no-install]
"""

import argparse
import glob
import gzip
import json
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
for _v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_v] = "1"  # before numpy/torch load their BLAS


def find_bench_train():
    c = glob.glob(os.path.join(ROOT, "build*", "tests", "bench", "client", "bench_train"))
    c += glob.glob(os.path.join(ROOT, "build", "*", "tests", "bench", "client", "bench_train"))
    c = [p for p in c if os.access(p, os.X_OK)]
    if not c:
        sys.exit("bench_train not found: build it (cmake --build <dir> --target bench_train) "
                 "or pass --bench-train")
    return max(c, key=os.path.getmtime)


def ensure_torch(install):
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        pass
    if not install:
        return False
    print("bench_train_vs_torch: installing torch from PyPI into %s (large download)"
          % sys.prefix, file=sys.stderr)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "torch"])
    if r.returncode != 0:
        print("bench_train_vs_torch: pip install torch failed", file=sys.stderr)
        return False
    import importlib
    importlib.invalidate_caches()
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def load_idx(d, img, lab):
    import numpy as np
    try:
        with gzip.open(os.path.join(d, img)) as f:
            ib = f.read()
        with gzip.open(os.path.join(d, lab)) as f:
            lb = f.read()
    except OSError:
        return None
    n = int.from_bytes(ib[4:8], "big")
    x = np.frombuffer(ib, dtype=np.uint8, offset=16).reshape(n, 784).astype(np.float32) / 255
    y = np.frombuffer(lb, dtype=np.uint8, offset=8).astype(np.int64)
    return x, y


def data(args):
    import numpy as np
    if not args.synthetic:
        tr = load_idx(args.data_dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
        te = load_idx(args.data_dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
        if tr and te:
            x, y = tr
            if args.samples:
                x, y = x[: args.samples], y[: args.samples]
            return "fashion-mnist", x, y, te[0], te[1]
    n = args.samples or 60000
    rng = np.random.default_rng(42)
    tmpl = rng.random((10, 784), dtype=np.float32)
    y = rng.integers(0, 10, n)
    x = 0.5 * tmpl[y] + 0.5 * rng.random((n, 784), dtype=np.float32)
    return "synthetic", x.astype(np.float32), y.astype(np.int64), None, None


def run_flotilla(args, path):
    cmd = [path, "--batch", str(args.batch), "--hidden", str(args.hidden), "--epochs",
           str(args.epochs), "--lr", str(args.lr), "--momentum", str(args.momentum), "--json",
           "--data-dir", args.data_dir]
    if args.samples:
        cmd += ["--samples", str(args.samples)]
    if args.synthetic:
        cmd.append("--synthetic")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1")).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_torch(args, x, y, xte, yte):
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(1)
    X = torch.from_numpy(x)
    Y = torch.from_numpy(y)
    model = torch.nn.Sequential(torch.nn.Linear(784, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    crit = torch.nn.CrossEntropyLoss()
    n = X.shape[0]
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(args.epochs):
        perm = torch.randperm(n)
        total, batches = 0.0, 0
        for i in range(0, n, args.batch):
            idx = perm[i: i + args.batch]
            opt.zero_grad(set_to_none=True)
            loss = crit(model(X[idx]), Y[idx])
            loss.backward()
            opt.step()
            total += loss.item()
            batches += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    res = {"impl": "torch", "version": torch.__version__, "seconds": wall, "cpu_seconds": cpu,
           "samples_per_s": args.epochs * n / wall, "cpu_samples_per_s": args.epochs * n / cpu,
           "final_loss": total / batches, "threads": torch.get_num_threads()}
    if xte is not None:
        with torch.no_grad():
            pred = model(torch.from_numpy(xte)).argmax(1).numpy()
        res["test_accuracy"] = float((pred == yte).mean())
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench-train")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--samples", type=int, default=0)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("--data-dir", default=os.environ.get("FL_FMNIST_DIR",
                                                         "/usr/share/datasets/fashion-mnist"))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-install", action="store_true")
    args = ap.parse_args()
    path = args.bench_train or find_bench_train()
    have_torch = ensure_torch(not args.no_install)
    if have_torch:
        kind, x, y, xte, yte = data(args)
    fl_runs, th_runs = [], []
    for _ in range(args.repeat):
        fl_runs.append(run_flotilla(args, path))
        if have_torch:
            th_runs.append(run_torch(args, x, y, xte, yte))
    fl = max(fl_runs, key=lambda r: r["samples_per_s"])
    fl["cpu_samples_per_s"] = max(r["cpu_samples_per_s"] for r in fl_runs)
    out = {"bench": "client_train_vs_torch", "data": fl["data"], "samples": fl["samples"],
           "epochs": args.epochs, "batch": args.batch, "hidden": args.hidden, "lr": args.lr,
           "momentum": args.momentum, "repeat": args.repeat, "flotilla": fl, "torch": None,
           "ratio": None, "ratio_cpu": None}
    if have_torch:
        th = max(th_runs, key=lambda r: r["samples_per_s"])
        th["cpu_samples_per_s"] = max(r["cpu_samples_per_s"] for r in th_runs)
        out["torch"] = th
        out["ratio"] = fl["samples_per_s"] / th["samples_per_s"]
        out["ratio_cpu"] = fl["cpu_samples_per_s"] / th["cpu_samples_per_s"]
    if args.json:
        print(json.dumps(out))
        return
    print("MLP 784-%d-10, %s, %d samples x %d epochs, batch %d, SGD lr %g momentum %g, "
          "1 thread, best of %d" % (args.hidden, out["data"], out["samples"], args.epochs,
                                     args.batch, args.lr, args.momentum, args.repeat))
    for name, r in (("flotilla", fl), ("torch", out["torch"])):
        if r is None:
            print("  torch: not available (pip install torch failed or --no-install)")
            continue
        acc = " test acc %.4f" % r["test_accuracy"] if "test_accuracy" in r else ""
        print("  %-9s %9.0f samples/s wall, %9.0f samples/s CPU, loss %.4f%s"
              % (name, r["samples_per_s"], r["cpu_samples_per_s"], r["final_loss"], acc))
    if out["ratio"] is not None:
        print("  ratio flotilla/torch: %.2fx (wall), %.2fx (CPU); goal >= 1.0x"
              % (out["ratio"], out["ratio_cpu"]))


if __name__ == "__main__":
    main()
