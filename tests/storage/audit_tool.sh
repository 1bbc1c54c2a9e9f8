#!/bin/sh
# flotilla-audit end to end: demo bundle -> verify (its client revocation and reinstatement
# entries checked) -> show -> export (JSON Lines and CSV, re-imported and checked) -> report;
# then a tampered bundle and a wrong key are refused.
# usage: audit_tool.sh FLOTILLA_AUDIT WORKDIR
set -eu
tool=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
fail() { echo "audit_tool.sh: FAIL: $*" >&2; exit 1; }

"$tool" demo bundle.jsonl --rounds 25 > demo.out || fail "demo"
vkey=$(sed -n 's/^verifier key: //p' demo.out)
[ -n "$vkey" ] || fail "demo printed no verifier key"

"$tool" verify bundle.jsonl --key "$vkey" > verify.out || fail "verify of a good bundle"
grep -q '^VERIFIED' verify.out || fail "no VERIFIED verdict"

# The demo revokes one client of keyboard-eu through the store and later reinstates it:
# one client_revoked and one later client_reinstated entry under the same pseudonym, in a
# bundle that verified above, with entry times never going back.
python3 - bundle.jsonl <<'PY' || fail "demo revocation entries"
import json, sys
lines = open(sys.argv[1], 'rb').read().split(b'\n')[:-1]
n = json.loads(lines[0])['entries']
entries = [json.loads(l) for l in lines[1:n + 1]]
rev = [e for e in entries if e['type'] == 'client_revoked']
rei = [e for e in entries if e['type'] == 'client_reinstated']
assert len(rev) == 1 and len(rei) == 1, (len(rev), len(rei))
r, i = rev[0], rei[0]
assert r['client'] == i['client'] and len(r['client']) == 64, (r, i)
assert r['population'] == i['population'] == 'keyboard-eu', (r, i)
assert r['seq'] < i['seq'] and 0 < r['revoked_at'] <= r['time'] <= i['time'], (r, i)
assert all(a['time'] <= b['time'] for a, b in zip(entries, entries[1:])), 'time goes back'
PY
"$tool" show bundle.jsonl --key "$vkey" > show_all.out || fail "show of the whole log"
grep -q 'client_revoked  population "keyboard-eu"' show_all.out || fail "show lacks the revocation"
grep -q 'revoked (excluded from rounds) at' show_all.out || fail "show lacks the revocation time"
grep -q 'client_reinstated  population "keyboard-eu"' show_all.out \
    || fail "show lacks the reinstatement"

"$tool" show bundle.jsonl --round 2 --population keyboard-eu --key "$vkey" > show.out \
    || fail "show"
grep -q 'round 2 (id' show.out || fail "show lacks round 2"
grep -q 'epsilon spent' show.out || fail "show lacks the privacy line"

# JSON Lines export is the entries byte for byte: the same lines as in the bundle.
"$tool" export bundle.jsonl --format jsonl -o entries.jsonl --key "$vkey" || fail "export jsonl"
n=$(wc -l < entries.jsonl)
sed -n "2,$((n + 1))p" bundle.jsonl > expected.jsonl
cmp -s entries.jsonl expected.jsonl || fail "JSON Lines export differs from the bundle entries"
python3 - entries.jsonl bundle.jsonl <<'PY' || fail "re-imported entries do not give the signed root"
import base64, hashlib, json, sys
entries = open(sys.argv[1], 'rb').read().split(b'\n')[:-1]
lines = open(sys.argv[2], 'rb').read().split(b'\n')[:-1]
header = json.loads(lines[0])
note = json.loads(lines[-1])['checkpoint'].split('\n')
size, root = int(note[1]), base64.b64decode(note[2])
def mth(h):
    if len(h) == 1:
        return h[0]
    k = 1
    while k * 2 < len(h):
        k *= 2
    return hashlib.sha256(b'\x01' + mth(h[:k]) + mth(h[k:])).digest()
leaves = [hashlib.sha256(b'\x00' + e).digest() for e in entries]
assert size == len(entries) == header['entries'], (size, len(entries))
assert mth(leaves) == root, 'root mismatch'
for e in entries:  # canonical: sorted keys, no spaces, ASCII
    assert json.dumps(json.loads(e), sort_keys=True, separators=(',', ':')).encode() == e
PY

"$tool" export bundle.jsonl --format csv -o entries.csv --key "$vkey" || fail "export csv"
python3 - entries.csv "$n" <<'PY' || fail "CSV export is not one row per entry"
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline='')))
assert rows[0][0] == 'seq' and len(rows) == int(sys.argv[2]) + 1, len(rows)
assert all(len(r) == len(rows[0]) for r in rows)
assert sum(1 for r in rows[1:] if r[2] == 'round') >= 10
assert [r[2] for r in rows[1:]].count('client_revoked') == 1
assert [r[2] for r in rows[1:]].count('client_reinstated') == 1
# the demo's rounds are semi-honest secure aggregation rounds
mode = rows[0].index('secagg_mode')
assert rows[0][mode - 1] == 'secagg_t'
assert all(r[mode] == 'semi-honest' for r in rows[1:] if r[2] == 'round' and r[10]), rows
assert all(r[mode] == '' for r in rows[1:] if r[2] != 'round')
PY

"$tool" report bundle.jsonl -o report.html --key "$vkey" || fail "report"
grep -q 'class="verdict ok"' report.html || fail "report lacks the OK verdict"
grep -q '<td class="l">semi-honest</td>' report.html || fail "report lacks the secagg mode"
grep -q 'secagg mode: semi-honest' show_all.out || fail "show lacks the secagg mode"

# One changed byte in the middle of an entry: verify fails and names the entry.
python3 - bundle.jsonl tampered.jsonl <<'PY'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
i = b.index(b'"completed":', len(b) // 3) + len('"completed":')
b[i] = ord('9') if b[i] != ord('9') else ord('8')
open(sys.argv[2], 'wb').write(bytes(b))
PY
if "$tool" verify tampered.jsonl --key "$vkey" > tampered.out; then fail "tampered bundle verified"; fi
grep -q '^FAILED' tampered.out || fail "no FAILED verdict"
grep -qE 'first offending (entry|checkpoint)' tampered.out || fail "no offending entry named"
if "$tool" report tampered.jsonl -o bad.html 2> /dev/null; then fail "report on a tampered bundle exited 0"; fi
grep -q 'class="verdict bad"' bad.html || fail "report lacks the FAILED verdict"

# Another key: refused.
other=$(echo "$vkey" | sed 's/+[0-9a-f]\{8\}+.*/+00000000+AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA/')
if "$tool" verify bundle.jsonl --key "$other" > /dev/null; then fail "wrong key accepted"; fi
echo "audit_tool.sh: OK"
