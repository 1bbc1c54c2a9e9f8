"""Flower baseline for the quality runs: the same FedAvg setting as run_quality.sh's
"fedavg" configuration, with flwr's simulation engine and a PyTorch client.

    .venv/bin/python tests/bench/quality/flower_fedavg.py [--rounds 150] [--out FILE.log]
        [--seed 1] [--epochs 5] [--lr 0.05] [--local-momentum 0.9] [--batch 16]
        [--clip 50] [--weighting examples|uniform]

Same data and split: Fashion-MNIST, 1,000 clients, Dirichlet(0.5) per class, drawn with a
port of flotilla-sim's own generator (splitmix64, Marsaglia-Tsang gamma; --seed), so each
client holds exactly the examples it holds in flotilla-sim. Same training, with flotilla-sim's
flags and the defaults of run_quality.sh's no-DP rows: MLP 784-128-10 (ReLU), local SGD
(--lr, --local-momentum), --batch, --epochs; the update (trained - global) clipped to L2 norm
--clip over all tensors (the SDK always clips, SecAgg needs bounded values; flotilla-sim's
no-DP bound is 50, far above any update norm); 130 clients per round (flotilla's 100 target
x over-selection 1.3, all of which finish); each update weighted by its example count
(--weighting examples, flotilla-sim's no-DP default; uniform is the DP one); server lr 1.
Not the same: the initial weights (PyTorch's init vs the SDK's), the shuffles and client
sampling, and SecAgg's quantization.
Prints one "round N ... test accuracy A" line per round, in flotilla-sim's format so
plot_quality.py reads it."""
import argparse
import gzip
import math
import os
import sys
import time

import numpy as np

M64 = (1 << 64) - 1


class SimRng:
    """flotilla-sim's splitmix64 stream and the draws built on it (examples/flotilla-sim)."""

    def __init__(self, state):
        self.s = state & M64

    def rnd(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def unif(self):
        return (self.rnd() >> 11) * (1.0 / 9007199254740992.0)

    def normal(self):
        u, v = self.unif(), self.unif()
        return math.sqrt(-2.0 * math.log(u if u > 0 else 1e-300)) * math.cos(2 * math.pi * v)

    def gamma(self, a):
        if a < 1:
            u = self.unif()
            return self.gamma(a + 1) * math.pow(u if u > 0 else 1e-300, 1.0 / a)
        d = a - 1.0 / 3
        c = 1.0 / math.sqrt(9 * d)
        while True:
            x = self.normal()
            v = 1 + c * x
            if v <= 0:
                continue
            v = v * v * v
            u = self.unif()
            if math.log(u if u > 0 else 1e-300) < 0.5 * x * x + d - d * v + d * math.log(v):
                return d * v


def partition(y, c, alpha, rng):
    """Port of flotilla-sim's partition(): owner[i] = client of example i."""
    n = len(y)
    idx = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.rnd() % (i + 1)
        idx[i], idx[j] = idx[j], idx[i]
    owner = [0] * n
    for k in range(10):
        p = [rng.gamma(alpha) for _ in range(c)]
        tot = 0.0
        for v in p:
            tot += v
        cnt = sum(1 for i in idx if y[i] == k)
        seen, acc, j = 0, 0.0, 0
        for i in idx:
            if y[i] != k:
                continue
            while j < c - 1 and seen >= (acc + p[j]) / tot * cnt:
                acc += p[j]
                j += 1
            owner[i] = j
            seen += 1
    count = [0] * c
    for o in owner:
        count[o] += 1
    for j in range(c):
        if count[j]:
            continue
        big = max(range(c), key=lambda b: (count[b], -b))
        for i in idx:
            if owner[i] == big:
                owner[i] = j
                count[big] -= 1
                count[j] += 1
                break
    return owner


def load(d, img, lab):
    with gzip.open(os.path.join(d, img)) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255
    with gzip.open(os.path.join(d, lab)) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=150)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--per-round", type=int, default=130)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--out", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--local-momentum", type=float, default=0.9)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--clip", type=float, default=50.0)
    ap.add_argument("--weighting", choices=["examples", "uniform"], default="examples")
    a = ap.parse_args()

    import flwr as fl
    import torch
    from torch import nn

    torch.set_num_threads(1)
    xtr, ytr = load(a.data, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
    xte, yte = load(a.data, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    torch.manual_seed(a.seed)
    rng = SimRng(a.seed * 0x2545F4914F6CDD1D + 7)
    t0 = time.time()
    owner = np.array(partition(ytr.tolist(), a.clients, 0.5, rng))
    parts = [np.nonzero(owner == i)[0] for i in range(a.clients)]
    print(f"partition: {time.time() - t0:.1f} s, largest {max(len(p) for p in parts)} examples",
          flush=True)

    def model():
        return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))

    def get(m):
        return [p.detach().numpy().copy() for p in m.state_dict().values()]

    def put(m, w):
        m.load_state_dict({k: torch.tensor(v) for k, v in zip(m.state_dict().keys(), w)})

    class Client(fl.client.NumPyClient):
        def __init__(self, cid):
            self.ix = parts[int(cid)]

        def fit(self, params, config):
            torch.set_num_threads(1)
            m = model()
            put(m, params)
            opt = torch.optim.SGD(m.parameters(), lr=a.lr, momentum=a.local_momentum)
            x, y = torch.tensor(xtr[self.ix]), torch.tensor(ytr[self.ix])
            for _ in range(a.epochs):
                perm = torch.randperm(len(x))
                for b in range(0, len(x), a.batch):
                    j = perm[b:b + a.batch]
                    opt.zero_grad()
                    nn.functional.cross_entropy(m(x[j]), y[j]).backward()
                    opt.step()
            new = get(m)
            delta = [n - p for n, p in zip(new, params)]
            norm = math.sqrt(sum(float((d.astype(np.float64) ** 2).sum()) for d in delta))
            s = min(1.0, a.clip / norm) if norm > 0 else 1.0
            w = len(self.ix) if a.weighting == "examples" else 1
            return [p + s * d for p, d in zip(params, delta)], w, {}

    t_start = time.time()
    log = open(a.out, "w") if a.out else None
    xt, yt = torch.tensor(xte), torch.tensor(yte)

    def evaluate(rnd, params, config):
        m = model()
        put(m, params)
        with torch.no_grad():
            acc = float((m(xt).argmax(1) == yt).float().mean())
        if rnd > 0:
            line = (f"round {rnd:3d} (id {rnd}): participants {a.per_round:3d} of "
                    f"{a.per_round:3d} selected, dropouts   0, test accuracy {acc:.4f}, "
                    f"epsilon 0.000, {time.time() - t_start:.1f} s")
            print(line, flush=True)
            if log:
                log.write(line + "\n")
                log.flush()
        return 0.0, {"accuracy": acc}

    init = fl.common.ndarrays_to_parameters(get(model()))
    strategy = fl.server.strategy.FedAvg(
        fraction_fit=a.per_round / a.clients, min_fit_clients=a.per_round,
        fraction_evaluate=0.0, min_evaluate_clients=0, min_available_clients=a.clients,
        evaluate_fn=evaluate, initial_parameters=init)
    fl.simulation.start_simulation(
        client_fn=lambda cid: Client(cid).to_client(), num_clients=a.clients,
        config=fl.server.ServerConfig(num_rounds=a.rounds), strategy=strategy,
        client_resources={"num_cpus": 1, "num_gpus": 0.0})
    print(f"done: flower {fl.__version__} FedAvg, {a.rounds} rounds (lr {a.lr}, local momentum "
          f"{a.local_momentum}, {a.epochs} epochs, batch {a.batch}, clip {a.clip}, "
          f"{a.weighting} weighting, seed {a.seed}), wall "
          f"{time.time() - t_start:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
