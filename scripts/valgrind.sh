#!/usr/bin/env bash
# Runs the dev-build ctest suite (no sanitizers) under Valgrind memcheck and reports every
# memory error and definite leak, per test.
#
#   scripts/valgrind.sh [-b BUILD_DIR] [-j JOBS] [-R REGEX] [-E REGEX] [-s SCALE] [-o DIR]
#                       [--no-build]
#     -b  build directory (default build-vg; configured here as RelWithDebInfo, gcc)
#     -j  tests run at once (default 2)
#     -R / -E  include / exclude tests by name (like ctest); slow-labelled tests are
#         always excluded
#     -s  time scale (default 20, valgrind's usual slowdown): exported as
#         FL_TEST_TIME_SCALE, which multiplies the waits of the tests and their fixtures
#         (curl timeouts, waits for the coordinator's port, poll deadlines; see
#         tests/common/fl_test_time.h); flotilla-sim's --timeout-s, --deadline-s,
#         --masked-s and --forming-s (given or default) are multiplied by it too
#     -o  where the logs go (default BUILD_DIR/valgrind; emptied first), so that two runs
#         can share one build
#
# How each test runs (from `ctest --show-only=json-v1`, with its working directory and
# environment):
#   * a test whose command is a program of the build tree runs as
#     valgrind --trace-children=yes <command>, so the programs it starts (the coordinator
#     executable in the kill and HTTP tests, say) are checked too;
#   * a test whose command is a shell script runs the shell under valgrind with
#     --trace-children=yes, so the build-tree programs the script starts are checked;
#   * system programs (under /usr, /bin), Python and MPI launchers are never traced
#     (--trace-children-skip): tests run through python, mpiexec or cmake are run natively
#     and listed as "not checked"; so are the programs a test starts through a script run
#     by /usr/bin/bash (scripts/demo.sh in demo_e2e);
#   * a process forked without exec (the power-loss writers of test_rel_powerloss) is
#     checked too (--child-silent-after-fork=no), in its own log.
# Errors: any memcheck error (invalid read/write, use of uninitialised values, bad free,
# overlap) and "definitely lost" leaks, counted from the per-process logs in
# the -o directory. Exit status 1 if any test has errors or fails.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=build-vg
jobs=2
include=""
exclude=""
do_build=1
out=""
scale=${FL_TEST_TIME_SCALE:-20}
while [ $# -gt 0 ]; do
    case $1 in
        -b) build=$2; shift 2 ;;
        -j) jobs=$2; shift 2 ;;
        -R) include=$2; shift 2 ;;
        -E) exclude=$2; shift 2 ;;
        -s) scale=$2; shift 2 ;;
        -o) out=$2; shift 2 ;;
        --no-build) do_build=0; shift ;;
        *) sed -n '2,34p' "$0"; exit 2 ;;
    esac
done
case $build in /*) ;; *) build=$root/$build ;; esac
case $scale in ''|*[!0-9]*|0) echo "valgrind.sh: -s wants a whole number >= 1" >&2; exit 2 ;; esac
export FL_TEST_TIME_SCALE=$scale
# valgrind 3.19 has no AVX-512: OpenBLAS's SkylakeX/Cooperlake kernels (what
# scripts/openblas-coretype.sh picks on this box) die there with SIGILL. AVX2 is emulated.
case ${OPENBLAS_CORETYPE:-} in
    SkylakeX|Cooperlake|SapphireRapids)
        echo "valgrind.sh: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE -> Haswell (no AVX-512 under valgrind)" >&2
        export OPENBLAS_CORETYPE=Haswell ;;
esac
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind not installed" >&2; exit 1; }

if [ "$do_build" = 1 ]; then
    if [ ! -f "$build/CMakeCache.txt" ]; then
        cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFL_WITH_CUDA=OFF \
            -DFL_BUILD_TESTS=ON -DFL_BUILD_BENCH=OFF -DFL_WERROR=ON >/dev/null
    fi
    cmake --build "$build" -j "$jobs"
fi

[ -n "$out" ] || out=$build/valgrind
case $out in /*) ;; *) out=$PWD/$out ;; esac
rm -rf "$out"
mkdir -p "$out"
sel=(-LE slow)
[ -n "$include" ] && sel+=(-R "$include")
[ -n "$exclude" ] && sel+=(-E "$exclude")
ctest --test-dir "$build" --show-only=json-v1 "${sel[@]}" >"$out/tests.json"

python3 - "$out" "$build" "$jobs" "$root/scripts/valgrind.supp" <<'EOF'
import concurrent.futures, glob, json, os, re, subprocess, sys, time
out, build, jobs, supp = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
tests = json.load(open(os.path.join(out, "tests.json")))["tests"]
# flotilla-sim's time options and their defaults (examples/flotilla-sim/main.c).
SIM_TIMES = {"--timeout-s": 3600, "--deadline-s": 10, "--masked-s": 60, "--forming-s": 3}
SKIP = "/usr/*,/bin/*,/sbin/*,*python*,*mpiexec*,*mpirun*,*orted*,*prterun*"

def is_build_elf(p):
    if not p.startswith(build + "/") or not os.path.isfile(p):
        return False
    with open(p, "rb") as f:
        return f.read(4) == b"\x7fELF"

def kind(cmd):
    c0 = cmd[0]
    if is_build_elf(c0):
        return "program"
    base = os.path.basename(c0)
    if base in ("sh", "bash", "dash"):
        # sh -c '...exec "$0"' wrappers around python are python tests
        if any("python" in a for a in cmd[1:]) and "-c" in cmd:
            return None
        return "script"
    return None

def run(t):
    name, cmd = t["name"], t.get("command") or []
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    env = dict(os.environ)
    for kv in props.get("ENVIRONMENT", []):
        k, _, v = kv.partition("=")
        env[k] = v
    cwd = props.get("WORKING_DIRECTORY", build)
    # Valgrind is 20-50x slower; give each test 30x its ctest timeout (at least 20 min).
    limit = max(1200.0, 30.0 * float(props.get("TIMEOUT", 60) or 60))
    k = kind(cmd) if cmd else None
    if k == "program" and os.path.basename(cmd[0]) == "flotilla-sim":
        # flotilla-sim runs its devices against a coordinator on the real clock: its time
        # limit and phase deadlines (given or default) grow with the scale too, or rounds
        # are abandoned because the devices are slow.
        scale = int(env.get("FL_TEST_TIME_SCALE", "1"))
        times = dict(SIM_TIMES)
        args = list(cmd[1:])
        for i in range(len(args) - 1):
            if args[i] in times and args[i + 1].isdigit():
                times[args[i]] = int(args[i + 1])
                args[i + 1] = str(int(args[i + 1]) * scale)
        cmd = [cmd[0]] + args + [x for o, v in times.items() if o not in args
                                 for x in (o, str(v * scale))]
    will_fail = bool(props.get("WILL_FAIL"))
    start = time.time()
    if k is None:
        r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=limit)
        return name, "native", r.returncode, 0, 0, time.time() - start, will_fail
    vg = ["valgrind", "--tool=memcheck", "--error-exitcode=97", "--leak-check=full",
          "--errors-for-leak-kinds=definite", "--show-leak-kinds=definite",
          "--trace-children=yes", "--trace-children-skip=" + SKIP,
          "--child-silent-after-fork=no", "--num-callers=30",
          # A test program's own calloc (test_ed25519_mbedtls_faults fails mbedTLS's
          # allocations through it) stays in place; only libc's are replaced.
          "--soname-synonyms=somalloc=nouserintercepts",
          "--log-file=" + os.path.join(out, name + ".%p.log")]
    if os.path.exists(supp):
        vg.append("--suppressions=" + supp)
    try:
        r = subprocess.run(vg + cmd, cwd=cwd, env=env, stdout=open(os.path.join(out, name + ".out"), "w"),
                           stderr=subprocess.STDOUT, timeout=limit)
        rc = r.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    errors = leaks = 0
    for log in glob.glob(os.path.join(out, name + ".*.log")):
        text = open(log, errors="replace").read()
        m = re.findall(r"ERROR SUMMARY: (\d+) errors", text)
        errors += sum(int(x) for x in m)
        leaks += sum(int(x.replace(",", "")) for x in
                     re.findall(r"definitely lost: ([\d,]+) bytes", text))
    return name, k, rc, errors, leaks, time.time() - start, will_fail

results = []
with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
    futs = [ex.submit(run, t) for t in tests]
    for f in concurrent.futures.as_completed(futs):
        name, k, rc, errors, leaks, secs, will_fail = f.result()
        if will_fail and rc not in (0, "timeout", 97):
            rc = 0  # WILL_FAIL tests pass by failing
        verdict = ("not checked" if k == "native" else
                   "ERRORS" if errors else "clean")
        status = "ok" if rc == 0 else "skipped" if rc == 77 else f"exit {rc}"
        line = (f"{name:<40} {k:<8} {verdict:<12} errors={errors:<4} "
                f"definitely_lost={leaks:<7} {status:<10} {secs:7.1f}s")
        print(line, flush=True)
        results.append((name, k, rc, errors, leaks))
checked = [r for r in results if r[1] != "native"]
bad = [r for r in checked if r[3]]
failed = [r for r in results if r[2] not in (0, 77)]
print(f"\nvalgrind: {len(checked)} tests under memcheck, {len(bad)} with errors; "
      f"{len(results) - len(checked)} run natively (python/mpi/cmake); "
      f"{len(failed)} failed or timed out; logs in {out}")
sys.exit(1 if bad or failed else 0)
EOF
