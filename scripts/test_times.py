"""Where a test run's minutes went: a table of test -> seconds for every lane, from JUnit XML.

    python3 scripts/test_times.py [--top N] [--total-only] REPORT.xml ...      # make test-times

Each report is one lane (its name is the file's stem: ``host.xml``, ``vm.xml``,
``vm-host-side.xml``, as ``make test`` and ``make vm-test`` write them to
``test-reports/``). Prints, per lane, the wall time pytest recorded and the
number of tests passed, failed and skipped; then one table, slowest first, of
every test that took at least 1 s in some lane, with its seconds in each lane
(``--top N``: instead, each lane's N slowest tests)
(a test's time includes its fixtures' set-up, so the first test of a module
with a shared fabric carries the bring-up); then a closing line
``total: N passed, N failed, N skipped`` over all lanes. Standard library only.
Exits 2 when no report can be read.
"""
from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def read_report(path: Path) -> dict:
    """One JUnit XML report -> ``{"wall_s", "tests": {test id: {"s", "outcome", "figures"}}}``.

    A test id is ``tests/dir/file.py::name[params]`` (``::Class::name`` in a class); outcome is
    passed, failed, error or skipped; figures are the test case's numeric JUnit properties (what
    the ``figure`` fixture records), name -> value.

    Raises:
        OSError, xml.etree.ElementTree.ParseError: the file cannot be read or is not XML.
    """
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    tests, wall = {}, 0.0
    for suite in suites:
        wall += float(suite.get("time") or 0)
        for case in suite.iter("testcase"):
            cls = (case.get("classname") or "").split(".")
            # a test in a class: tests.integration.test_x.TestY -> tests/integration/test_x.py::TestY
            inner = [cls.pop()] if len(cls) > 1 and cls[-1][:1].isupper() else []
            mod = "/".join(cls) + ".py" if cls and cls[0] else "?"
            if inner:
                mod += "::" + inner[0]
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    outcome = {"failure": "failed"}.get(tag, tag)
                    break
            figures = {}
            for prop in case.iter("property"):
                try:
                    figures[prop.get("name")] = float(prop.get("value"))
                except (TypeError, ValueError):
                    continue
            tests[f"{mod}::{case.get('name')}"] = {"s": float(case.get("time") or 0), "outcome": outcome,
                                                   "figures": figures}
    return {"wall_s": wall, "tests": tests}


def counts(tests: dict) -> dict:
    """Outcome -> number of tests."""
    out = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for t in tests.values():
        out[t["outcome"]] += 1
    return out


def main(argv=None) -> int:
    """CLI entry point; see the module docstring."""
    ap = argparse.ArgumentParser(description="table of test -> seconds per lane from JUnit XML reports")
    ap.add_argument("reports", nargs="*", type=Path)
    ap.add_argument("--top", type=int, default=0,
                    help="instead of the whole table, each lane's N slowest tests (0: every test of 1 s or more)")
    ap.add_argument("--total-only", action="store_true", help="print only the closing total line")
    args = ap.parse_args(argv)
    lanes = {}
    for p in args.reports:
        try:
            lanes[p.stem] = read_report(p)
        except (OSError, ET.ParseError) as e:
            print(f"test-times: cannot read {p}: {e}", file=sys.stderr)
    if not lanes:
        print("test-times: no JUnit report to read (run sudo make test or sudo make vm-test first)", file=sys.stderr)
        return 2
    total = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for lane in lanes.values():
        for k, v in counts(lane["tests"]).items():
            total[k] += v
    if not args.total_only:
        for name, lane in lanes.items():
            c = counts(lane["tests"])
            print(f"lane {name}: {lane['wall_s']:.0f} s ({lane['wall_s'] / 60:.1f} min); {c['passed']} passed, "
                  f"{c['failed'] + c['error']} failed, {c['skipped']} skipped")
        if args.top:
            for name, lane in lanes.items():
                print(f"\nlane {name}: the {args.top} slowest tests")
                for t, x in sorted(lane["tests"].items(), key=lambda kv: -kv[1]["s"])[:args.top]:
                    print(f"{x['s']:>10.1f} s  {x['outcome']:<7}  {t}")
            print()
            print(f"total: {total['passed']} passed, {total['failed'] + total['error']} failed, "
                  f"{total['skipped']} skipped")
            return 0
        ids = sorted({t for lane in lanes.values() for t in lane["tests"]},
                     key=lambda t: -max(lane["tests"].get(t, {"s": 0})["s"] for lane in lanes.values()))
        ids = [t for t in ids if max(lane["tests"].get(t, {"s": 0})["s"] for lane in lanes.values()) >= 1.0]
        names = list(lanes)
        print()
        print("seconds per test and lane, slowest first (tests of 1 s or more); after the seconds: S skipped, "
              "F failed, E error; - not in that lane's report")
        print("  ".join(f"{n[:12]:>12}" for n in names) + "  test")
        for t in ids:
            cells = []
            for n in names:
                x = lanes[n]["tests"].get(t)
                if x is None:
                    cells.append(f"{'-':>12}")
                else:
                    mark = {"passed": "", "skipped": " S", "failed": " F", "error": " E"}[x["outcome"]]
                    cells.append(f"{x['s']:>10.1f}{mark:2}")
            print("  ".join(cells) + "  " + t)
        print()
    print(f"total: {total['passed']} passed, {total['failed'] + total['error']} failed, {total['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
