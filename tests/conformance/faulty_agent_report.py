#!/usr/bin/env python3
"""Checks a metaroce-conform --json report (tests/conformance/cli_test.sh;
conformance/README.md, the JSON report): where the run stopped, "stopped"
names the check interrupted; "checks" lists each check
of the run with one result (passed, failed, skipped, interrupted, not run),
the interrupted one where the run stopped and only "not run" after it; the
counts at the top count those results. Prints "report ok", or why not.

  faulty_agent_report.py REPORT.json
"""
import collections
import json
import sys


def main():
    try:
        j = json.load(open(sys.argv[1], encoding="utf-8"))
        checks = j["checks"]
        results = [c["result"] for c in checks]
        assert all("passed" not in c and "skipped" not in c for c in checks), "a check has passed/skipped"
        counts = collections.Counter(results)
        for key, result in (("passed", "passed"), ("failed", "failed"), ("skipped", "skipped"),
                            ("interrupted", "interrupted"), ("not_run", "not run")):
            assert j[key] == counts[result], f"{key} {j[key]}, {counts[result]} checks {result}"
        assert set(counts) <= {"passed", "failed", "skipped", "interrupted", "not run"}, counts
        if "stopped" not in j:  # a run to its end
            assert not {"interrupted", "not run"} & set(counts), counts
            print("report ok")
            return
        stopped = j["stopped"]
        at = results.index("interrupted")
        assert checks[at]["rule"] == stopped["check"], f"interrupted {checks[at]['rule']}"
        assert checks[at]["detail"] == stopped["reason"], "the interrupted check's detail"
        assert stopped["checks_done"] == at, f"checks_done {stopped['checks_done']}, {at} before"
        assert all(r == "not run" for r in results[at + 1:]), results
        assert "not run" not in results[:at], results
        print("report ok")
    except Exception as e:  # any flaw of the report, said in one line
        print(f"report: {type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
