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
# 12 entries + the demo's client_revoked and client_reinstated
grep -q '^2 of 14 entries shown; bundle VERIFIED$' from.out || fail "show --from 3 count"

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
# --to alone, and a number out of range.
"$tool" show six.jsonl --to 1 > to.out || fail "show --to"
grep -q 'round 1 (id' to.out || fail "show --to 1 lacks round 1"
if grep -q 'round 2 (id' to.out; then fail "show --to 1 lists round 2"; fi
set +e
"$tool" show six.jsonl --seq 99999999999999999999 > big.out 2> big.err
rc=$?
set -e
[ "$rc" = 2 ] || fail "--seq out of range: exit $rc, want 2"
grep -q 'is not a number' big.err || fail "--seq out of range message"

# A forged copy (it fails verification; show and report still print it, marked): a
# population without allowed regions, health-ru's budget 0 (it has no rounds: an epsilon
# chart whose scale is 0), a negative epsilon, a round number that is a string, a round
# without its secagg field, an entry that is not an object and one that is not JSON.
sed -e '2s/"allowed_regions"/"allowed_regionz"/' \
    -e '4s/"epsilon_e9":4000000000/"epsilon_e9":0/' \
    -e 's/"epsilon_spent_e9":\([0-9]\)/"epsilon_spent_e9":-\1/' \
    -e 's/"round":1,/"round":"1",/' \
    -e 's/"secagg":/"secagx":/' \
    -e '5s/.*/[5]/' -e '7s/.*/{"a":/' one.jsonl > forged.jsonl
set +e
"$tool" show forged.jsonl > forged.out 2> forged.err
rc_show=$?
"$tool" report forged.jsonl -o forged.html 2> report.err
rc_report=$?
set -e
[ "$rc_show" = 1 ] || fail "show of a forged bundle: exit $rc_show, want 1"
[ "$rc_report" = 1 ] || fail "report of a forged bundle: exit $rc_report, want 1"
grep -q 'bundle NOT VERIFIED$' forged.out || fail "forged show not marked"
grep -q 'allowed regions ?;' forged.out || fail "a missing allowed_regions is not shown as ?"
grep -q 'epsilon spent -0.3,' forged.out || fail "negative epsilon not printed as such"
grep -q '#3  (unreadable entry)' forged.out || fail "a non-object entry is not marked"
grep -q '#5  (unreadable entry)' forged.out || fail "a non-JSON entry is not marked"
grep -q 'secure aggregation: off' forged.out || fail "a round without secagg is not shown as off"
grep -q '<td>off</td>' forged.html || fail "report: a round without secagg is not off"
grep -q 'round 0 (id 1)' forged.out || fail "a string round number is not read as 0"
grep -q 'class="verdict bad"' forged.html || fail "forged report not marked"
grep -q '<td class="l">any</td>' forged.html || fail "missing allowed regions not shown as any"
echo "audit_tool_edges.sh: ok"
