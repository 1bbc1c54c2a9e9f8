#!/bin/sh
# flotilla-audit edges the other CLI tests leave out: show --from without --to, an empty
# number, a report whose population has a single round (one point on each chart).
# usage: audit_tool_edges.sh FLOTILLA_AUDIT WORKDIR
set -eu
tool=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
fail() { echo "audit_tool_edges.sh: FAIL: $*" >&2; exit 1; }

"$tool" demo six.jsonl --rounds 6 > demo.out || fail "demo"
# Rounds of keyboard-eu are 1..4 (rounds 3 and 6 of the demo go to health-ru).
"$tool" show six.jsonl --from 3 --population keyboard-eu > from.out || fail "show --from"
grep -q 'round 3 (id' from.out || fail "show --from 3 lacks round 3"
grep -q 'round 4 (id' from.out || fail "show --from 3 lacks round 4"
if grep -q 'round [12] (id' from.out; then fail "show --from 3 lists an earlier round"; fi
grep -q '^2 of 12 entries shown; bundle VERIFIED$' from.out || fail "show --from 3 count"

set +e
"$tool" show six.jsonl --round "" > empty.out 2> empty.err
rc=$?
set -e
[ "$rc" = 2 ] || fail "--round '' exit $rc, want 2"
grep -q 'is not a number' empty.err || fail "--round '' message"

# One round in all: keyboard-eu's charts have a single point, health-ru's none.
"$tool" demo one.jsonl --rounds 1 > demo1.out || fail "demo --rounds 1"
"$tool" report one.jsonl -o one.html > report.out || fail "report of one round"
[ "$(grep -c 'class="epsdot"' one.html)" = 1 ] || fail "want one epsilon point"
# A single point sits in the middle of the plot: x = 64 + (760 - 64 - 16) / 2 = 404.
grep -q '<circle cx="404.0"' one.html || fail "single point not centred"
grep -q 'No rounds with region counts' one.html || fail "health-ru has no rounds"
echo "audit_tool_edges.sh: ok"
