#!/usr/bin/env python3
"""Flower comparison: the same FedAvg round as bench_coord_round, run by Flower and by
flotilla-coordinator in one invocation, with the ratio printed.

    python3 tests/bench/coordinator/flower_round.py --build BUILD_DIR [--n 100] [--d 10000]
        [--rounds 3] [--json]

The round: N clients, no secure aggregation, no DP, each client returns a fixed random
vector of d float32 (no training), FedAvg with every client selected. Flower runs it with its
simulation engine (Ray backend, clients as NumPyClient in actors); its round time is taken
inside the strategy, from configure_fit (round start) to the end of aggregate_fit, averaged
over the rounds after the first (the first also warms up the Ray actors; it is reported in
round_times_s), so Ray start-up is excluded. Flotilla's figure is bench_coord_round's coordinator-side time for the
same N and d (HTTP on loopback, selection, aggregation and the SQLite commit; device
compute is none here). Memory: Flower's driver (server) peak RSS and the peak RSS summed over
its process tree (Ray workers included, sampled every 50 ms); flotilla's coordinator peak
RSS (VmHWM of the server process).

Flower is installed into /work/main/.venv (flwr[simulation]) when missing. The script only
talks to 127.0.0.1.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
VENV = os.path.join(ROOT, ".venv")
FLWR_SPEC = "flwr[simulation]==1.42.0"


def ensure_flower():
    py = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.executable) != os.path.realpath(py):
        if not os.path.exists(py):
            subprocess.check_call([sys.executable, "-m", "venv", VENV])
        os.execv(py, [py] + sys.argv)
    try:
        import flwr  # noqa: F401
    except ImportError:
        subprocess.check_call([py, "-m", "pip", "install", "-q", FLWR_SPEC])
        os.execv(py, [py] + sys.argv)


def tree_rss_kb(root):
    """RSS (kB) summed over root and its descendants, from /proc."""
    parent, rss = {}, {}
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % e) as f:
                st = f.read().rsplit(")", 1)[1].split()
            with open("/proc/%s/statm" % e) as f:
                pages = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parent[int(e)] = int(st[1])
        rss[int(e)] = pages * os.sysconf("SC_PAGE_SIZE") // 1024
    total, todo, seen = 0, [root], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += rss.get(p, 0)
        todo.extend(c for c, pp in parent.items() if pp == p)
    return total


def tree_rss_sampler(stop, out):
    peak, me = 0, os.getpid()
    while not stop.is_set():
        peak = max(peak, tree_rss_kb(me))
        time.sleep(0.05)
    out["tree_peak_kb"] = peak


def run_flower(n, d, rounds):
    import numpy as np
    import flwr as fl
    from flwr.common import ndarrays_to_parameters

    class Fixed(fl.client.NumPyClient):
        def __init__(self, cid):
            rng = np.random.default_rng(int(cid))
            self.vec = rng.standard_normal(d).astype(np.float32)

        def get_parameters(self, config):
            return [self.vec]

        def fit(self, parameters, config):
            return [self.vec], 1, {}

    def client_fn(context):
        cid = context.node_config.get("partition-id", 0) if hasattr(context, "node_config") \
            else context
        return Fixed(cid).to_client()

    times = []

    class Timed(fl.server.strategy.FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            self._t0 = time.perf_counter()
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            res = super().aggregate_fit(server_round, results, failures)
            times.append((time.perf_counter() - self._t0, len(results), len(failures)))
            return res

    strategy = Timed(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n,
                     min_evaluate_clients=0, min_available_clients=n,
                     initial_parameters=ndarrays_to_parameters([np.zeros(d, np.float32)]))
    stop, mem = threading.Event(), {}
    th = threading.Thread(target=tree_rss_sampler, args=(stop, mem), daemon=True)
    th.start()
    t0 = time.perf_counter()
    fl.simulation.start_simulation(
        client_fn=client_fn, num_clients=n,
        config=fl.server.ServerConfig(num_rounds=rounds), strategy=strategy,
        client_resources={"num_cpus": 1, "num_gpus": 0.0},
        ray_init_args={"include_dashboard": False, "num_cpus": os.cpu_count(),
                       "log_to_driver": False})
    total = time.perf_counter() - t0
    stop.set()
    th.join()
    ok = [t for t in times if t[1] == n and t[2] == 0]
    if not ok:
        raise SystemExit("flower: no round aggregated all %d clients: %r" % (n, times))
    # The first round also starts the Ray actors (warm-up): average the later ones.
    warm = ok[1:] if len(ok) > 1 else ok
    per_round = sum(t[0] for t in warm) / len(warm)
    return {"round_s": per_round, "rounds_per_s": 1.0 / per_round, "rounds": len(ok),
            "round_times_s": [t[0] for t in times], "total_with_startup_s": total,
            "driver_peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "tree_peak_rss_kb": mem.get("tree_peak_kb", 0), "flwr_version": fl.__version__}


def run_flotilla(build, n, d, rounds):
    exe = os.path.join(build, "tests", "bench", "coordinator", "bench_coord_round")
    out = subprocess.check_output([exe, "--n", str(n), "--d", str(d), "--secagg", "0",
                                   "--rounds", str(rounds), "--json"], text=True)
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="build dir with bench_coord_round")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--d", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ensure_flower()
    ours = run_flotilla(a.build, a.n, a.d, a.rounds)
    flower = run_flower(a.n, a.d, a.rounds)
    ratio = ours["rounds_per_s"] / flower["rounds_per_s"]
    res = {"n": a.n, "d": a.d, "secagg": False, "flotilla": ours, "flower": flower,
           "speedup_rounds_per_s": ratio,
           "memory_ratio_flower_tree_over_flotilla":
               flower["tree_peak_rss_kb"] / max(1, ours["coordinator_peak_rss_kb"])}
    if a.json:
        print(json.dumps(res))
    else:
        print("n=%d d=%d FedAvg, no secagg" % (a.n, a.d))
        print("  flotilla: %.3f s/round (%.2f rounds/s), coordinator peak RSS %d kB"
              % (ours["coordinator_s"], ours["rounds_per_s"], ours["coordinator_peak_rss_kb"]))
        print("  flower %s: %.3f s/round (%.2f rounds/s), driver peak RSS %d kB, process "
              "tree peak %d kB" % (flower["flwr_version"], flower["round_s"],
                                   flower["rounds_per_s"], flower["driver_peak_rss_kb"],
                                   flower["tree_peak_rss_kb"]))
        print("  flotilla / flower rounds/s: %.2fx" % ratio)


if __name__ == "__main__":
    main()
