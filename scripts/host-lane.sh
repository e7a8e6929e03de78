#!/usr/bin/env bash
# The host lane (make test): the live tier (integration tests: real Mininet, OVS, controller,
# packets; one fabric at a time) and, beside it, the unit tier (pure logic, no fabric, no
# root) at the lowest CPU priority (nice 19). The live tier leaves most of a core idle (one
# ovs-vswitchd thread forwards the fabric; agents mostly wait), and the unit tier takes only
# those idle cycles: nice 19 weighs 15 against nice 0's 1024, so under contention the live
# tier's processes get ~98% of the CPU; the live tier's bounds were measured beside a
# nice-0 busy loop, a harsher neighbour. The unit tier's output is printed when both end;
# the lane fails if either fails. Ctrl-C stops both (the unit tier by its recorded pid).
#   scripts/host-lane.sh PYTHON REPORTS_DIR [pytest args...]
set -uo pipefail
PY=$1
REPORTS=$2
shift 2
mkdir -p "$REPORTS"
nice -n 19 "$PY" -m pytest tests/unit -p no:cacheprovider --junitxml="$REPORTS/host-unit.xml" "$@" \
    > "$REPORTS/host-unit.log" 2>&1 &
UNIT=$!
trap 'kill "$UNIT" 2>/dev/null; wait "$UNIT" 2>/dev/null; exit 130' INT TERM
"$PY" -m pytest tests --ignore=tests/unit --durations=25 --junitxml="$REPORTS/host.xml" "$@"
live=$?
wait "$UNIT"
unit=$?
trap - INT TERM
echo "================ fabriclab host lane: the unit tier (ran beside the live tier at nice 19) ================"
cat "$REPORTS/host-unit.log"
echo "fabriclab host lane: live tier exit $live, unit tier exit $unit"
[ "$live" -eq 0 ] && [ "$unit" -eq 0 ]
