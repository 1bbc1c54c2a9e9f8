#!/usr/bin/env bash
# Check-ins per second on loopback with wrk: starts flotilla-coordinator on a temporary
# database, creates a plain population through the admin API, enrolls one client and
# replays its check-in (the idempotent "selected" path: auth cache, JSON parse, selection).
# usage: checkin_wrk.sh BUILD_DIR [--seconds S] [--connections C] [--server-threads T] [--json]
#        checkin_wrk.sh BUILD_DIR [SECONDS] [CONNECTIONS]      (the older positional form)
# Defaults: 5 s, 64 connections, 2 server threads; wrk uses 2 threads. --json prints one
# JSON object (requests/s, mean latency) after wrk's own report.
set -euo pipefail
BUILD=${1:?usage: checkin_wrk.sh BUILD_DIR [--seconds S] [--connections C] [--server-threads T]}
shift
SECS=5 CONNS=64 SRV_THREADS=2 JSON=0 pos=0
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) SECS=${2:?--seconds needs a value}; shift 2 ;;
        --connections) CONNS=${2:?--connections needs a value}; shift 2 ;;
        --server-threads) SRV_THREADS=${2:?--server-threads needs a value}; shift 2 ;;
        --json) JSON=1; shift ;;
        [0-9]*) if [ $pos = 0 ]; then SECS=$1; else CONNS=$1; fi; pos=$((pos + 1)); shift ;;
        *) echo "checkin_wrk.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
for v in "$SECS" "$CONNS" "$SRV_THREADS"; do
    case "$v" in
        '' | *[!0-9]* | 0)
            echo "checkin_wrk.sh: sizes must be positive integers, got '$v'" >&2
            exit 2 ;;
    esac
done
if ! command -v wrk >/dev/null; then
    echo "checkin_wrk.sh: wrk is not installed (Debian package wrk)" >&2
    exit 3
fi
BIN=$BUILD/coordinator/tools/flotilla-coordinator
PORT=${FL_BENCH_PORT:-18931}
DIR=$(mktemp -d /tmp/fl-coord-bench-XXXXXX)
TOK=fla_benchbenchbenchbenchbench1234
H=$(printf %s $TOK | "$BIN" hash-token | awk '{print $NF}')
cat > "$DIR/c.json" <<JSON
{"database":"$DIR/coord.db","port":$PORT,"threads":$SRV_THREADS,"admin_token_sha256":"$H",
 "log_level":"warn","limits":{"per_ip_connections":0}}
JSON
"$BIN" serve --config "$DIR/c.json" 2> "$DIR/serve.log" & PID=$!
trap 'kill $PID 2>/dev/null; rm -rf "$DIR"' EXIT
# Up within 30 s (a loaded machine starts it slowly), or its log says why not.
for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
    kill -0 $PID 2>/dev/null || { cat "$DIR/serve.log" >&2; exit 1; }
    sleep 0.1
done
python3 - "$PORT" "$TOK" "$DIR/token" <<'PY'
import json, struct, sys, urllib.request
base, tok, out = "http://127.0.0.1:" + sys.argv[1], sys.argv[2], sys.argv[3]
def req(m, p, body=None, auth=tok, ct="application/json"):
    h = {"Authorization": "Bearer " + auth}
    if body is not None:
        h["Content-Type"] = ct
    r = urllib.request.Request(base + p, data=body, method=m, headers=h)
    return json.loads(urllib.request.urlopen(r).read() or b"{}")
pop = {"name": "b", "allowed_regions": ["*"], "secagg": {"enabled": False},
       "selection": {"target": 100000, "require": [], "forming_s": 3600},
       "update": {"tensors": ["w"]}}
et = req("POST", "/v1/admin/populations", json.dumps(pop).encode())["enrollment_token"]
hdr = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
req("POST", "/v1/admin/populations/b/models", struct.pack("<Q", len(hdr)) + hdr + b"\0" * 16,
    ct="application/octet-stream")
req("POST", "/v1/admin/populations/b/start", b"")
r = req("POST", "/v1/enroll", json.dumps({"population": "b", "region": "EU"}).encode(), auth=et)
open(out, "w").write(r["client_token"])
PY
cat > "$DIR/post.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"region":"EU","eligibility":{"charging":true,"unmetered":true,"idle":true}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $(cat "$DIR/token")"
LUA
wrk -t2 -c"$CONNS" -d"${SECS}s" -s "$DIR/post.lua" "http://127.0.0.1:$PORT/v1/checkin" |
    tee "$DIR/wrk.txt"
if [ $JSON = 1 ]; then
    awk -v s="$SECS" -v c="$CONNS" -v t="$SRV_THREADS" '
        /^Requests\/sec:/ { rps = $2 }
        /^ *Latency/ { lat = $2 }
        END { printf "{\"bench\":\"coordinator_checkin\",\"seconds\":%s,\"connections\":%s," \
              "\"server_threads\":%s,\"requests_per_s\":%s,\"latency_mean\":\"%s\"}\n", s, c, t,
              rps == "" ? "null" : rps, lat }' "$DIR/wrk.txt"
fi
