#!/usr/bin/env python3
"""Compare Flotilla's exact discrete Gaussian sampler with NumPy and OpenDP.

For each sigma, in the same run and interleaved so that machine noise hits all three alike:
  * flotilla: the bench_sampler binary (exact CKS20 sampler, ChaCha20 or OS randomness);
  * numpy:    Generator.normal(0, sigma, count) -- continuous, floating point, not DP-safe;
  * opendp:   make_gaussian on vector_domain(atom_domain(T="i64")) with l2_distance, which
              samples the exact discrete Gaussian (arbitrary-precision arithmetic).
Each figure is the best of --repeat runs (samples per second of wall-clock time; "cpu" columns
are per CPU-second, process time, steadier on a shared machine). Targets from the issue:
flotilla >= 10x OpenDP and >= 0.5x NumPy (within 2x). --baseline BIN times a second
bench_sampler binary (e.g. an older build) in the same interleaved loop, for before/after.

OpenDP is installed into the running interpreter's environment (the project venv
/work/main/.venv when run from there) if it is missing, unless --no-install is given.

  .venv/bin/python tests/bench/dp/bench_sampler.py --bin build-rel/tests/bench/dp/bench_sampler
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def find_binary(explicit):
    if explicit:
        return explicit
    cands = []
    for d in sorted(os.listdir(ROOT)):
        p = os.path.join(ROOT, d, "tests", "bench", "dp", "bench_sampler")
        if d.startswith("build") and os.access(p, os.X_OK):
            cands.append(p)
        if d == "build":
            for sub in sorted(os.listdir(os.path.join(ROOT, d))):
                q = os.path.join(ROOT, d, sub, "tests", "bench", "dp", "bench_sampler")
                if os.access(q, os.X_OK):
                    cands.append(q)
    if not cands:
        sys.exit("bench_sampler.py: build bench_sampler first or pass --bin")
    return max(cands, key=os.path.getmtime)


def ensure_opendp(install):
    try:
        return importlib.import_module("opendp.prelude")
    except ImportError:
        if not install:
            return None
    print("bench_sampler.py: installing opendp into", sys.prefix, file=sys.stderr)
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "opendp"])
    importlib.invalidate_caches()
    return importlib.import_module("opendp.prelude")


def run_ours(binary, sigma, count, rng):
    out = subprocess.check_output(
        [binary, "--sigma", repr(sigma), "--count", str(count), "--rng", rng, "--json"], text=True)
    r = json.loads(out.strip().splitlines()[-1])
    return r["samples_per_s"], r.get("samples_per_cpu_s", 0.0)


def run_numpy(np, gen, sigma, count):
    t, c = time.perf_counter(), time.process_time()
    gen.normal(0.0, sigma, count)
    return count / (time.perf_counter() - t), count / max(time.process_time() - c, 1e-9)


def run_opendp(meas, count):
    zeros = [0] * count
    t = time.perf_counter()
    meas(zeros)
    return count / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", help="path to bench_sampler (default: newest build*/ one)")
    ap.add_argument("--sigmas", default="1,100,10000")
    ap.add_argument("--count", type=int, default=2_000_000, help="samples per flotilla/numpy run")
    ap.add_argument("--opendp-count", type=int, default=20_000, help="samples per OpenDP run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rng", default="chacha20", choices=["chacha20", "os"])
    ap.add_argument("--no-install", action="store_true", help="do not pip install opendp")
    ap.add_argument("--baseline", help="a second bench_sampler to time alongside (before/after)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import numpy as np

    binary = find_binary(a.bin)
    dp = ensure_opendp(not a.no_install)
    if dp is not None:
        dp.enable_features("contrib")
    gen = np.random.default_rng(12345)
    rows = []
    for sigma in [float(s) for s in a.sigmas.split(",")]:
        meas = None
        if dp is not None:
            meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T="i64")),
                                      dp.l2_distance(T="i64"), scale=sigma)
        best = {"flotilla": 0.0, "numpy": 0.0, "opendp": 0.0, "base": 0.0,
                "flotilla_cpu": 0.0, "numpy_cpu": 0.0, "base_cpu": 0.0}
        for _ in range(a.repeat):
            w, c = run_ours(binary, sigma, a.count, a.rng)
            best["flotilla"], best["flotilla_cpu"] = max(best["flotilla"], w), max(best["flotilla_cpu"], c)
            if a.baseline:
                w, c = run_ours(a.baseline, sigma, a.count, a.rng)
                best["base"], best["base_cpu"] = max(best["base"], w), max(best["base_cpu"], c)
            w, c = run_numpy(np, gen, sigma, a.count)
            best["numpy"], best["numpy_cpu"] = max(best["numpy"], w), max(best["numpy_cpu"], c)
            if meas is not None:
                best["opendp"] = max(best["opendp"], run_opendp(meas, a.opendp_count))
        row = {"sigma": sigma, "rng": a.rng,
               "flotilla_per_s": best["flotilla"], "numpy_per_s": best["numpy"],
               "opendp_per_s": best["opendp"] or None,
               "flotilla_per_cpu_s": best["flotilla_cpu"], "numpy_per_cpu_s": best["numpy_cpu"],
               "vs_numpy": best["flotilla"] / best["numpy"],
               "vs_numpy_cpu": best["flotilla_cpu"] / best["numpy_cpu"],
               "vs_opendp": best["flotilla"] / best["opendp"] if best["opendp"] else None}
        if a.baseline:
            row.update({"baseline_per_s": best["base"], "baseline_per_cpu_s": best["base_cpu"],
                        "baseline_vs_numpy": best["base"] / best["numpy"],
                        "baseline_vs_opendp": best["base"] / best["opendp"] if best["opendp"]
                        else None})
        rows.append(row)
    if a.json:
        print(json.dumps({"binary": binary, "count": a.count, "opendp_count": a.opendp_count,
                          "repeat": a.repeat, "results": rows}, indent=2))
        return
    print(f"bench_sampler: {binary} (rng {a.rng}, best of {a.repeat}; numpy/opendp in-process)")
    print(f"{'sigma':>8} {'flotilla M/s':>13} {'numpy M/s':>10} {'opendp M/s':>11} "
          f"{'x numpy':>8} {'x opendp':>9} {'cpu: ours':>10} {'numpy':>7} {'x':>5}"
          f"   targets: x numpy >= 0.5, x opendp >= 10")
    for r in rows:
        od = f"{r['opendp_per_s'] / 1e6:11.4f}" if r["opendp_per_s"] else f"{'n/a':>11}"
        vo = f"{r['vs_opendp']:9.1f}" if r["vs_opendp"] else f"{'n/a':>9}"
        print(f"{r['sigma']:8g} {r['flotilla_per_s'] / 1e6:13.2f} {r['numpy_per_s'] / 1e6:10.2f} "
              f"{od} {r['vs_numpy']:8.2f} {vo} {r['flotilla_per_cpu_s'] / 1e6:10.1f} "
              f"{r['numpy_per_cpu_s'] / 1e6:7.1f} {r['vs_numpy_cpu']:5.2f}")
    if a.baseline:
        print(f"baseline {a.baseline}, same runs:")
        for r in rows:
            vo = f"{r['baseline_vs_opendp']:9.1f}" if r["baseline_vs_opendp"] else f"{'n/a':>9}"
            print(f"{r['sigma']:8g} {r['baseline_per_s'] / 1e6:13.2f} {'':>10} {'':>11} "
                  f"{r['baseline_vs_numpy']:8.2f} {vo} {r['baseline_per_cpu_s'] / 1e6:10.1f}")

if __name__ == "__main__":
    main()
