#!/usr/bin/env python3
"""Flower comparison: the same round run by Flower and by flotilla-coordinator, interleaved in
one invocation, plain FedAvg and/or with secure aggregation (Flower's SecAgg+ workflow).

    .venv/bin/python tests/bench/coordinator/flower_round.py --build BUILD_DIR
        [--n 100[,N...]] [--d 10000[,D...]] [--secagg 0|1|0,1] [--reps 5]
        [--flotilla-rounds 3] [--concurrency 16] [--json]

The round: N clients, no DP, each client returns a fixed random vector of d float32 (no
training), FedAvg with every client selected. With secagg both sides run SecAgg+ with the
same graph: flotilla-coordinator picks k neighbours and threshold t for N (reported by
bench_coord_round), and Flower's SecAggPlusWorkflow gets num_shares = k + 1 (a client keeps
one share of its own) and reconstruction_threshold = t, with secaggplus_mod on the clients.

One Flower simulation per N (flwr.simulation.run_simulation, Ray backend, one actor per
core, ServerApp with DefaultWorkflow, in-memory SuperLink), so Ray starts once per N. For
each d (ascending) and mode: one warm-up round (not measured; the first one also starts the
Ray actors), then --reps measured rounds. Before each measured Flower round, with Flower idle
between rounds, the script runs bench_coord_round (--flotilla-rounds rounds on a fresh
coordinator, median taken) twice: with --concurrency C connections and with one request at a
time. So every Flower round has Flotilla samples taken right before it, on the same load.

Figures. Flower's round time is taken inside its strategy, from configure_fit (round start)
to the end of aggregate_fit; with SecAgg+ that spans the four stages, the clients' work in
the actors included. Flotilla's round wall time is bench_coord_round's, from the first
check-in to the round's completion (HTTP on loopback, selection, aggregation, SQLite commit),
its stand-in devices' secagg compute included (run in its one thread); coordinator_s leaves
that compute out. The headline ratio is median Flower round / median Flotilla round wall time
(medians over the reps; rounds per second is the inverse), with the median and the worst of
the per-pair ratios beside it. Memory: Flotilla's coordinator peak RSS (VmHWM) against the
peak RSS of Flower's driver process (ServerApp, SuperLink state, simulation engine: the
server side) and of its whole process tree (Ray and its actors), both sampled every 50 ms
during the size's measured rounds, the Flotilla samples left out. Sizes run in ascending
order, so what an earlier size left in Flower's memory is at most a smaller size's.

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
POLL_S = 0.2  # the most Flower's simulation runtime can wait per message exchange


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

def rss_kb(root):
    """(RSS of root, RSS summed over root and its descendants) in kB, from /proc, leaving
    out the Flotilla samples (bench_coord_round and its coordinator) this script starts."""
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
    return rss.get(root, 0), total


def rss_sampler(stop, cur, peaks):
    """Every 50 ms: the driver's and the process tree's RSS, kept as peaks per group
    (cur["label"], the (d, secagg) whose rounds are running)."""
    me = os.getpid()
    while not stop.is_set():
        own, tree = rss_kb(me)
        lab = cur["label"]
        if lab is not None:
            old = peaks.get(lab, (0, 0))
            peaks[lab] = (max(old[0], own), max(old[1], tree))
        time.sleep(0.05)


# ---- Flotilla ----

def flotilla_sample(build, n, d, secagg, rounds, conc):
    exe = os.path.join(build, "tests", "bench", "coordinator", "bench_coord_round")
    out = subprocess.check_output([exe, "--n", str(n), "--d", str(d), "--secagg",
                                   "1" if secagg else "0", "--rounds", str(rounds),
                                   "--concurrency", str(conc), "--json"], text=True)
    return json.loads(out.strip().splitlines()[-1])


# ---- Flower (one simulation per worker process) ----

def worker(a, result_path):
    """Runs one Flower simulation of a.n[0] clients: for each d (ascending) and each mode in
    a.secagg, a warm-up round (unmeasured; the first also starts the Ray actors) and then
    a.reps measured rounds, each after its Flotilla samples. Writes the figures as JSON."""
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
    n = a.n[0]
    groups = [(d, sa) for d in sorted(a.d) for sa in sorted(set(a.secagg))]
    samples = {g: {"conc": [], "seq": []} for g in groups}
    flower_times = {g: [] for g in groups}  # (seconds, results, failures, measured)
    cur = {"label": None, "measured": False}

    # Flotilla's own choice of the SecAgg+ graph for N (one short run), given to Flower.
    k = t = 0
    if 1 in a.secagg:
        probe = flotilla_sample(a.build, n, 1000, True, 1, 1)
        k, t = probe["secagg_k"], probe["secagg_t"]

    class Fixed(NumPyClient):
        # Each client's fixed update per d, made once per actor process (as Flotilla's
        # stand-in devices encode theirs before the clock).
        vecs = {}

        def __init__(self, cid):
            self.cid = int(cid)

        def vec(self, d):
            key = (self.cid, d)
            if key not in Fixed.vecs:
                Fixed.vecs[key] = np.random.default_rng(self.cid).random(d, dtype=np.float32)
            return Fixed.vecs[key]

        def get_parameters(self, config):
            return [self.vec(int(config.get("bench_d", 1)))]

        def fit(self, parameters, config):
            return [self.vec(int(config["bench_d"]))], 1, {}

    def client_fn(context):
        return Fixed(context.node_config["partition-id"]).to_client()

    def secagg_when_asked(msg, ctxt, call_next):
        # Plain rounds pass by; only SecAgg+ messages go through the mod.
        if RECORD_KEY_CONFIGS in msg.content.config_records:
            return secaggplus_mod(msg, ctxt, call_next)
        return call_next(msg, ctxt)

    client_app = ClientApp(client_fn=client_fn, mods=[secagg_when_asked])

    class Timed(FedAvg):
        def __init__(self, d, sa, **kw):
            super().__init__(on_fit_config_fn=lambda rnd: {"bench_d": d}, **kw)
            self.group = (d, sa)

        def configure_fit(self, server_round, parameters, client_manager):
            d, sa = self.group
            if cur["measured"]:
                # Flower is idle here (no round in flight): take Flotilla's samples now.
                s = samples[self.group]
                s["conc"].append(flotilla_sample(a.build, n, d, sa, a.flotilla_rounds,
                                                 a.concurrency))
                s["seq"].append(flotilla_sample(a.build, n, d, sa, a.flotilla_rounds, 1))
            self._t0 = time.perf_counter()
            return super().configure_fit(server_round, parameters, client_manager)

        def aggregate_fit(self, server_round, results, failures):
            res = super().aggregate_fit(server_round, results, failures)
            flower_times[self.group].append((time.perf_counter() - self._t0, len(results),
                                             len(failures), cur["measured"]))
            return res

    server_app = ServerApp()

    @server_app.main()
    def _main(grid, context):
        for d, sa in groups:
            def run(rounds):
                strategy = Timed(d, sa, fraction_fit=1.0, fraction_evaluate=0.0,
                                 min_fit_clients=n, min_evaluate_clients=0,
                                 min_available_clients=n, initial_parameters=
                                 ndarrays_to_parameters([np.zeros(d, np.float32)]))
                fit = SecAggPlusWorkflow(num_shares=k + 1, reconstruction_threshold=t) \
                    if sa else None
                DefaultWorkflow(fit_workflow=fit)(grid, LegacyContext(
                    context=context, strategy=strategy, config=ServerConfig(num_rounds=rounds)))
            cur["label"], cur["measured"] = None, False
            run(1)
            cur["label"], cur["measured"] = (d, sa), True
            run(a.reps)
            cur["label"] = None

    stop, peaks = threading.Event(), {}
    th = threading.Thread(target=rss_sampler, args=(stop, cur, peaks), daemon=True)
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
    rows = []
    for g in groups:
        measured = [x for x in flower_times[g] if x[3]]
        bad = [x for x in measured if x[1] != n or x[2] != 0]
        if len(measured) != a.reps or bad:
            raise SystemExit("flower: n=%d d=%d secagg=%d: %d of %d measured rounds "
                             "aggregated all clients: %r" % (n, g[0], g[1], len(measured) -
                                                             len(bad), a.reps, flower_times[g]))
        rows.append({"n": n, "d": g[0], "secagg": bool(g[1]), "secagg_k": k if g[1] else 0,
                     "secagg_t": t if g[1] else 0, "reps": a.reps,
                     "flower": {"round_times_s": [x[0] for x in measured],
                                "warmup_round_s": [x[0] for x in flower_times[g]
                                                   if not x[3]],
                                "simulation_total_s": total,
                                "driver_peak_rss_kb": peaks.get(g, (0, 0))[0],
                                "tree_peak_rss_kb": peaks.get(g, (0, 0))[1],
                                "driver_maxrss_kb":
                                    resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                                "flwr_version": fl.__version__},
                     "flotilla": samples[g]})
    with open(result_path, "w") as f:
        json.dump(rows, f)


# ---- summary ----

def summarise(r, conc):
    fw = r["flower"]["round_times_s"]
    out = {"n": r["n"], "d": r["d"], "secagg": r["secagg"], "reps": r["reps"],
           "secagg_k": r["secagg_k"], "secagg_t": r["secagg_t"],
           "flower_version": r["flower"]["flwr_version"],
           "flower_round_s_median": statistics.median(fw), "flower_round_s": fw,
           "flower_warmup_round_s": r["flower"]["warmup_round_s"],
           "flower_driver_peak_rss_kb": r["flower"]["driver_peak_rss_kb"],
           "flower_simulation_total_s": r["flower"]["simulation_total_s"],
           "flower_tree_peak_rss_kb": r["flower"]["tree_peak_rss_kb"],
           "flotilla_concurrency": conc}
    # Flower's simulation runtime polls its in-memory link every 0.1 s on both sides (the
    # ServerApp's grid and the engine that feeds the actors): at most 0.2 s of waiting per
    # message exchange, one in a plain round, four (the SecAgg+ stages) with secagg.
    poll = POLL_S * (4 if r["secagg"] else 1)
    out["flower_polling_bound_s"] = poll
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
            "speedup_without_flower_polling": max(0.0, statistics.median(fw) - poll) /
                statistics.median(wall),
            "memory_ratio_driver": r["flower"]["driver_peak_rss_kb"] /
                max(1, max(s["coordinator_peak_rss_kb"] for s in samples)),
            "memory_ratio_tree": r["flower"]["tree_peak_rss_kb"] /
                max(1, max(s["coordinator_peak_rss_kb"] for s in samples))}
    return out


def print_header(a, version):
    print("Flower %s (run_simulation, Ray, %d actors) vs flotilla-coordinator, same round, "
          "interleaved; medians of %d rounds each" % (version, os.cpu_count(), a.reps))
    print("%5s %7s %6s %6s | %9s %9s %9s | %8s %7s %7s %7s %7s | %7s %8s %8s"
          % ("n", "d", "secagg", "k/t", "flower_s", "flot_s", "flot1_s", "x_median",
             "x_pairs", "x_min", "x_seq", "x_nopoll", "flotMB", "flwDrvMB", "flwTreeMB"))


def print_rows(rows):
    for r in rows:
        c, s = r["flotilla_conc"], r["flotilla_seq"]
        print("%5d %7d %6s %6s | %9.3f %9.3f %9.3f | %7.1fx %6.1fx %6.1fx %6.1fx %7.1fx | "
              "%7.1f %8.1f %9.1f" % (
                  r["n"], r["d"], "on" if r["secagg"] else "off",
                  "%d/%d" % (r["secagg_k"], r["secagg_t"]) if r["secagg"] else "-",
                  r["flower_round_s_median"], c["round_wall_s_median"],
                  s["round_wall_s_median"], c["speedup"], c["speedup_pairs_median"],
                  c["speedup_pairs_min"], s["speedup"], c["speedup_without_flower_polling"],
                  c["peak_rss_kb"] / 1024,
                  r["flower_driver_peak_rss_kb"] / 1024, r["flower_tree_peak_rss_kb"] / 1024))


def print_footer(rows, a):
    print("flot_s: flotilla round wall time with %d connections (flot1_s: one request at a "
          "time), stand-in devices' secagg compute included; x_*: Flower round time / "
          "flotilla's (median, median of pairs, worst pair, sequential flotilla, and with "
          "Flower's polling bound, 0.2 s per exchange, taken off its time)" % a.concurrency)
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


def mode_list(text):
    """'0', '1' or '0,1' -> [0], [1], [0, 1]."""
    try:
        out = sorted({int(x) for x in text.split(",")})
    except ValueError:
        out = []
    if not out or any(x not in (0, 1) for x in out):
        raise argparse.ArgumentTypeError("want 0, 1 or 0,1, got %r" % text)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="build dir with bench_coord_round")
    ap.add_argument("--n", type=size_list, default=[100], help="clients, comma-separated")
    ap.add_argument("--d", type=size_list, default=[10000], help="floats, comma-separated")
    ap.add_argument("--secagg", type=mode_list, default=[0],
                    help="0 (plain FedAvg), 1 (SecAgg+) or 0,1 (both)")
    ap.add_argument("--reps", type=int, default=5, help="measured rounds per size (>= 1)")
    ap.add_argument("--flotilla-rounds", type=int, default=3,
                    help="rounds per Flotilla sample (median taken)")
    ap.add_argument("--concurrency", type=int, default=16,
                    help="connections of Flotilla's stand-in devices")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # internal: result file of one n
    a = ap.parse_args()
    if a.reps < 1 or a.flotilla_rounds < 1 or a.concurrency < 1:
        ap.error("--reps, --flotilla-rounds and --concurrency must be >= 1")
    if a.worker and len(a.n) != 1:
        ap.error("--worker takes one --n")
    exe = os.path.join(a.build, "tests", "bench", "coordinator", "bench_coord_round")
    if not os.access(exe, os.X_OK):
        ap.error("no %s: build the bench_coord_round target" % exe)
    if a.worker:
        worker(a, a.worker)
        return
    py = VENV_PY if os.path.exists(VENV_PY) else sys.executable
    check = subprocess.run([py, "-c", "import flwr, ray; print(flwr.__version__)"],
                           capture_output=True, text=True)
    if check.returncode != 0:
        print("flower_round.py: flwr[simulation] is not installed in %s (run "
              "scripts/pydeps.sh)" % py, file=sys.stderr)
        sys.exit(3)
    rows = []
    if not a.json:
        print_header(a, check.stdout.strip())
        sys.stdout.flush()
    for n in a.n:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tf:
            path = tf.name
        cmd = [py, os.path.abspath(__file__), "--build", a.build, "--n", str(n), "--d",
               ",".join(str(d) for d in a.d), "--secagg", ",".join(str(m) for m in a.secagg),
               "--reps", str(a.reps), "--flotilla-rounds", str(a.flotilla_rounds),
               "--concurrency", str(a.concurrency), "--worker", path]
        # Flower's and Ray's own logging goes to a file, shown only when the run fails.
        with tempfile.TemporaryFile(mode="w+") as log:
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
            if rc != 0:
                log.seek(0)
                sys.stderr.write("".join(log.readlines()[-40:]))
        try:
            if rc != 0:
                raise SystemExit("flower_round.py: the run for n=%d failed (exit %d)" % (n, rc))
            with open(path) as f:
                new = [summarise(r, a.concurrency) for r in json.load(f)]
        finally:
            os.unlink(path)
        rows.extend(new)
        if not a.json:
            print_rows(new)  # as each N finishes
            sys.stdout.flush()
    if a.json:
        print(json.dumps({"bench": "coordinator_vs_flower", "rows": rows}))
    else:
        print_footer(rows, a)


if __name__ == "__main__":
    main()
