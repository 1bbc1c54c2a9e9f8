#!/usr/bin/env python3
"""Flower comparison: the same round run by Flower and by flotilla-coordinator, interleaved in
one invocation, plain FedAvg or with secure aggregation (Flower's SecAgg+ workflow).

    .venv/bin/python tests/bench/coordinator/flower_round.py --build BUILD_DIR
        [--n 100[,N...]] [--d 10000[,D...]] [--secagg 0|1] [--reps 5] [--flotilla-rounds 3]
        [--concurrency 16] [--json]

The round: N clients, no DP, each client returns a fixed random vector of d float32 (no
training), FedAvg with every client selected. With --secagg 1 both sides run SecAgg+ with
the same graph: flotilla-coordinator picks k neighbours and threshold t for N (reported by
bench_coord_round), and Flower's SecAggPlusWorkflow gets num_shares = k + 1 (a client keeps
one share of its own) and reconstruction_threshold = t, with secaggplus_mod on the clients.

One Flower simulation per (N, d) (flwr.simulation.run_simulation, Ray backend, one actor per
core, ServerApp with DefaultWorkflow, in-memory SuperLink): a warm-up round (plain FedAvg;
it starts the Ray actors) and then --reps measured rounds. Before each measured Flower round,
with Flower idle between rounds, the script runs bench_coord_round (--flotilla-rounds rounds,
on a fresh coordinator) twice: with --concurrency C connections and with one request at a
time. So every Flower round has a Flotilla sample taken right before it, on the same load.

Figures. Flower's round time is taken inside its strategy, from configure_fit (round start)
to the end of aggregate_fit; with SecAgg+ that spans the four stages, the clients' work in
the actors included. Flotilla's round wall time is bench_coord_round's, from the first
check-in to the round's completion (HTTP on loopback, selection, aggregation, SQLite commit),
its stand-in devices' secagg compute included (run in one thread); coordinator_s leaves that
compute out. The headline ratio is median Flower round / median Flotilla round wall time
(medians over the reps; rounds per second is the inverse), with the median of the per-pair
ratios beside it. Memory: Flotilla's coordinator peak RSS (VmHWM) against Flower's driver
process (ServerApp, SuperLink state and simulation engine: the server side) peak RSS, and
Flower's whole process tree (Ray and its actors; sampled every 50 ms, the Flotilla samples
excluded).

Needs flwr 1.42 with Ray in /work/main/.venv (scripts/pydeps.sh installs it); without it the
script says so and exits 3 (run_all.sh records that). Talks only to 127.0.0.1; Flower's
telemetry is turned off.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
VENV_PY = os.path.join(ROOT, ".venv", "bin", "python")
FLOTILLA_COMMS = ("bench_coord_rou", "flotilla-coordi")  # /proc comm, 15 characters


def size_list(text):
    """'100,1e4' -> [100, 10000]; a clear error for anything else."""
    out = []
    for part in text.split(","):
        try:
            v = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError("not a number: %r" % part)
        if v < 1 or v != int(v):
            raise argparse.ArgumentTypeError("want a positive integer, got %r" % part)
        out.append(int(v))
    return out


# ---- memory ----

def tree_rss_kb(root):
    """RSS (kB) summed over root and its descendants, from /proc, leaving out the Flotilla
    samples (bench_coord_round and its coordinator) that this script starts."""
    parent, rss, comm = {}, {}, {}
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % e) as f:
                st = f.read()
            with open("/proc/%s/statm" % e) as f:
                pages = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        pid = int(e)
        comm[pid] = st[st.find("(") + 1:st.rfind(")")]
        parent[pid] = int(st.rsplit(")", 1)[1].split()[1])
        rss[pid] = pages * page_kb
    total, todo, seen = 0, [root], set()
    while todo:
        p = todo.pop()
        if p in seen or comm.get(p) in FLOTILLA_COMMS:
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


# ---- Flotilla ----

def flotilla_sample(build, n, d, secagg, rounds, conc):
    exe = os.path.join(build, "tests", "bench", "coordinator", "bench_coord_round")
    out = subprocess.check_output([exe, "--n", str(n), "--d", str(d), "--secagg",
                                   "1" if secagg else "0", "--rounds", str(rounds),
                                   "--concurrency", str(conc), "--json"], text=True)
    return json.loads(out.strip().splitlines()[-1])


# ---- Flower (one simulation per worker process) ----

def worker(a, result_path):
    """Runs one Flower simulation of a.n[0] clients and a.d[0] floats, with the Flotilla
    samples between its rounds, and writes the figures as JSON to result_path."""
    os.environ["FLWR_TELEMETRY_ENABLED"] = "0"
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    import logging
    import numpy as np
    import flwr as fl
    from flwr.client import ClientApp, NumPyClient
    from flwr.client.mod import secaggplus_mod
    from flwr.common import ndarrays_to_parameters
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
    from flwr.server import LegacyContext, ServerApp, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    logging.getLogger("flwr").setLevel(logging.WARNING)
    n, d, secagg = a.n[0], a.d[0], bool(a.secagg)
    samples = {"conc": [], "seq": []}
    flower_times = []  # (seconds, results, failures, measured)
    phase = {"measured": False}

    # Flotilla's own choice of the SecAgg+ graph for N (one short run), given to Flower.
    k = t = 0
    if secagg:
        probe = flotilla_sample(a.build, n, min(d, 1000), True, 1, 1)
        k, t = probe["secagg_k"], probe["secagg_t"]

    class Fixed(NumPyClient):
        def __init__(self, cid):
            rng = np.random.default_rng(int(cid))
            self.vec = rng.standard_normal(d).astype(np.float32)

        def get_parameters(self, config):
            return [self.vec]

        def fit(self, parameters, config):
            return [self.vec], 1, {}

    def client_fn(context):
        return Fixed(context.node_config["partition-id"]).to_client()

    def secagg_when_asked(msg, ctxt, call_next):
        # The warm-up round is plain FedAvg: only SecAgg+ messages go through the mod.
        if RECORD_KEY_CONFIGS in msg.content.config_records:
            return secaggplus_mod(msg, ctxt, call_next)
        return call_next(msg, ctxt)

    client_app = ClientApp(client_fn=client_fn, mods=[secagg_when_asked] if secagg else [])

    class Timed(FedAvg):
        def configure_fit(self, server_round, parameters, client_manager):
            if phase["measured"]:
                # Flower is idle here (no round in flight): take Flotilla's samples now.
                samples["conc"].append(flotilla_sample(a.build, n, d, secagg,
                                                       a.flotilla_rounds, a.concurrency))
                samples["seq"].append(flotilla_sample(a.build, n, d, secagg,
                                                      a.flotilla_rounds, 1))
            self._t0 = time.perf_counter()
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            res = super().aggregate_fit(server_round, results, failures)
            flower_times.append((time.perf_counter() - self._t0, len(results), len(failures),
                                 phase["measured"]))
            return res

    init = ndarrays_to_parameters([np.zeros(d, np.float32)])
    server_app = ServerApp()

    @server_app.main()
    def _main(grid, context):
        def strategy():
            return Timed(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=n,
                         min_evaluate_clients=0, min_available_clients=n,
                         initial_parameters=init)

        DefaultWorkflow()(grid, LegacyContext(context=context, strategy=strategy(),
                                              config=ServerConfig(num_rounds=1)))
        phase["measured"] = True
        fit = SecAggPlusWorkflow(num_shares=k + 1, reconstruction_threshold=t) if secagg \
            else None
        DefaultWorkflow(fit_workflow=fit)(grid, LegacyContext(
            context=context, strategy=strategy(), config=ServerConfig(num_rounds=a.reps)))

    stop, mem = threading.Event(), {}
    th = threading.Thread(target=tree_rss_sampler, args=(stop, mem), daemon=True)
    th.start()
    t0 = time.perf_counter()
    fl.simulation.run_simulation(
        server_app=server_app, client_app=client_app, num_supernodes=n,
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                        "init_args": {"include_dashboard": False, "num_cpus": os.cpu_count(),
                                      "log_to_driver": False}})
    total = time.perf_counter() - t0
    stop.set()
    th.join()
    measured = [x for x in flower_times if x[3]]
    bad = [x for x in measured if x[1] != n or x[2] != 0]
    if len(measured) != a.reps or bad:
        raise SystemExit("flower: %d of %d measured rounds aggregated all %d clients: %r"
                         % (len(measured) - len(bad), a.reps, n, flower_times))
    res = {"n": n, "d": d, "secagg": secagg, "secagg_k": k, "secagg_t": t, "reps": a.reps,
           "flower": {"round_times_s": [x[0] for x in measured],
                      "warmup_round_s": [x[0] for x in flower_times if not x[3]],
                      "total_with_startup_s": total,
                      "driver_peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      "tree_peak_rss_kb": mem.get("tree_peak_kb", 0),
                      "flwr_version": fl.__version__},
           "flotilla": samples}
    with open(result_path, "w") as f:
        json.dump(res, f)


# ---- summary ----

def summarise(r, conc):
    fw = r["flower"]["round_times_s"]
    out = {"n": r["n"], "d": r["d"], "secagg": r["secagg"], "reps": r["reps"],
           "secagg_k": r["secagg_k"], "secagg_t": r["secagg_t"],
           "flower_version": r["flower"]["flwr_version"],
           "flower_round_s_median": statistics.median(fw), "flower_round_s": fw,
           "flower_warmup_round_s": r["flower"]["warmup_round_s"],
           "flower_driver_peak_rss_kb": r["flower"]["driver_peak_rss_kb"],
           "flower_tree_peak_rss_kb": r["flower"]["tree_peak_rss_kb"],
           "flotilla_concurrency": conc}
    for key, samples in (("conc", r["flotilla"]["conc"]), ("seq", r["flotilla"]["seq"])):
        wall = [s["median_round_wall_s"] for s in samples]
        coord = [s["median_coordinator_s"] for s in samples]
        pairs = [f / w for f, w in zip(fw, wall)]
        out["flotilla_%s" % key] = {
            "round_wall_s_median": statistics.median(wall), "round_wall_s": wall,
            "coordinator_s_median": statistics.median(coord),
            "coordinator_cpu_s_median": statistics.median(
                [statistics.median(s["coordinator_cpu_times_s"]) for s in samples]),
            "device_compute_s_median": statistics.median(
                [s["device_compute_s"] for s in samples]),
            "peak_rss_kb": max(s["coordinator_peak_rss_kb"] for s in samples),
            "speedup": statistics.median(fw) / statistics.median(wall),
            "speedup_pairs_median": statistics.median(pairs),
            "speedup_pairs_min": min(pairs),
            "speedup_coordinator_only": statistics.median(fw) / statistics.median(coord),
            "memory_ratio_driver": r["flower"]["driver_peak_rss_kb"] /
                max(1, max(s["coordinator_peak_rss_kb"] for s in samples)),
            "memory_ratio_tree": r["flower"]["tree_peak_rss_kb"] /
                max(1, max(s["coordinator_peak_rss_kb"] for s in samples))}
    return out


def print_table(rows, a):
    print("Flower %s (run_simulation, Ray, %d actors) vs flotilla-coordinator, same round, "
          "interleaved; medians of %d rounds each" % (rows[0]["flower_version"],
                                                     os.cpu_count(), a.reps))
    print("%5s %7s %6s %6s | %9s %9s %9s | %8s %7s %7s %7s | %7s %8s %8s"
          % ("n", "d", "secagg", "k/t", "flower_s", "flot_s", "flot1_s", "x_median",
             "x_pairs", "x_min", "x_seq", "flotMB", "flwDrvMB", "flwTreeMB"))
    for r in rows:
        c, s = r["flotilla_conc"], r["flotilla_seq"]
        print("%5d %7d %6s %6s | %9.3f %9.3f %9.3f | %7.1fx %6.1fx %6.1fx %6.1fx | %7.1f "
              "%8.1f %9.1f" % (
                  r["n"], r["d"], "on" if r["secagg"] else "off",
                  "%d/%d" % (r["secagg_k"], r["secagg_t"]) if r["secagg"] else "-",
                  r["flower_round_s_median"], c["round_wall_s_median"],
                  s["round_wall_s_median"], c["speedup"], c["speedup_pairs_median"],
                  c["speedup_pairs_min"], s["speedup"], c["peak_rss_kb"] / 1024,
                  r["flower_driver_peak_rss_kb"] / 1024, r["flower_tree_peak_rss_kb"] / 1024))
    print("flot_s: flotilla round wall time with %d connections (flot1_s: one request at a "
          "time), stand-in devices' secagg compute included; x_*: Flower round time / "
          "flotilla's (median, median of pairs, worst pair, sequential flotilla)"
          % a.concurrency)
    for r in rows:
        c = r["flotilla_conc"]
        print("  n=%d d=%d secagg=%s: flotilla coordinator-only %.3f s (CPU %.3f s, device "
              "compute %.3f s); Flower rounds %s s, warm-up %s s; memory %.0fx less than "
              "Flower's driver, %.0fx less than its process tree" % (
                  r["n"], r["d"], "on" if r["secagg"] else "off", c["coordinator_s_median"],
                  c["coordinator_cpu_s_median"], c["device_compute_s_median"],
                  ",".join("%.3f" % x for x in r["flower_round_s"]),
                  ",".join("%.2f" % x for x in r["flower_warmup_round_s"]),
                  c["memory_ratio_driver"], c["memory_ratio_tree"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="build dir with bench_coord_round")
    ap.add_argument("--n", type=size_list, default=[100], help="clients, comma-separated")
    ap.add_argument("--d", type=size_list, default=[10000], help="floats, comma-separated")
    ap.add_argument("--secagg", type=int, choices=(0, 1), default=0)
    ap.add_argument("--reps", type=int, default=5, help="measured rounds per size (>= 1)")
    ap.add_argument("--flotilla-rounds", type=int, default=3,
                    help="rounds per Flotilla sample (median taken)")
    ap.add_argument("--concurrency", type=int, default=16,
                    help="connections of Flotilla's stand-in devices")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # internal: result file of one size
    a = ap.parse_args()
    if a.reps < 1 or a.flotilla_rounds < 1 or a.concurrency < 1:
        ap.error("--reps, --flotilla-rounds and --concurrency must be >= 1")
    exe = os.path.join(a.build, "tests", "bench", "coordinator", "bench_coord_round")
    if not os.access(exe, os.X_OK):
        ap.error("no %s: build the bench_coord_round target" % exe)
    if a.worker:
        worker(a, a.worker)
        return
    py = VENV_PY if os.path.exists(VENV_PY) else sys.executable
    check = subprocess.run([py, "-c", "import flwr, ray"], capture_output=True)
    if check.returncode != 0:
        print("flower_round.py: flwr[simulation] is not installed in %s (run "
              "scripts/pydeps.sh)" % py, file=sys.stderr)
        sys.exit(3)
    rows = []
    for n in a.n:
        for d in a.d:
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
                path = tf.name
            cmd = [py, os.path.abspath(__file__), "--build", a.build, "--n", str(n), "--d",
                   str(d), "--secagg", str(a.secagg), "--reps", str(a.reps),
                   "--flotilla-rounds", str(a.flotilla_rounds), "--concurrency",
                   str(a.concurrency), "--worker", path]
            # Flower's and Ray's own logging goes to a file, shown only when the run fails.
            with tempfile.TemporaryFile(mode="w+") as log:
                rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
                if rc != 0:
                    log.seek(0)
                    sys.stderr.write("".join(log.readlines()[-40:]))
            try:
                if rc != 0:
                    raise SystemExit("flower_round.py: the run for n=%d d=%d failed (exit %d)"
                                     % (n, d, rc))
                with open(path) as f:
                    rows.append(summarise(json.load(f), a.concurrency))
            finally:
                os.unlink(path)
            if not a.json:
                print_table(rows[-1:], a)
                sys.stdout.flush()
    if a.json:
        print(json.dumps({"bench": "coordinator_vs_flower", "rows": rows}))
    elif len(rows) > 1:
        print("\nall sizes:")
        print_table(rows, a)


if __name__ == "__main__":
    main()
