#!/usr/bin/env bash
# Check-ins per second on loopback with wrk: starts flotilla-coordinator on a temporary
# database, creates a plain population through the admin API, enrolls one client and
# replays its check-in (the idempotent "selected" path: auth cache, JSON parse, selection).
# usage: checkin_wrk.sh BUILD_DIR [SECONDS] [CONNECTIONS]
set -euo pipefail
BUILD=${1:?build dir}; SECS=${2:-5}; CONNS=${3:-64}
BIN=$BUILD/coordinator/tools/flotilla-coordinator
PORT=${FL_BENCH_PORT:-18931}
DIR=$(mktemp -d /tmp/fl-coord-bench-XXXXXX)
TOK=fla_benchbenchbenchbenchbench1234
H=$(printf %s $TOK | "$BIN" hash-token | awk '{print $NF}')
cat > "$DIR/c.json" <<JSON
{"database":"$DIR/coord.db","port":$PORT,"threads":2,"admin_token_sha256":"$H",
 "log_level":"warn","limits":{"per_ip_connections":0}}
JSON
"$BIN" serve --config "$DIR/c.json" 2> "$DIR/serve.log" & PID=$!
trap 'kill $PID 2>/dev/null; rm -rf "$DIR"' EXIT
sleep 1
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
wrk -t2 -c"$CONNS" -d"${SECS}s" -s "$DIR/post.lua" "http://127.0.0.1:$PORT/v1/checkin"
