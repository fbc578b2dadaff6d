#!/usr/bin/env python3
"""bench/fabric's arithmetic, checked by hand on made-up progress intervals
(no fabric, no root): recovery() and what the table and the progress lines
print for it.

usage: fabric_units_test.py
"""
import importlib.machinery
import importlib.util
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in bench/

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
loader = importlib.machinery.SourceFileLoader("bench_fabric", os.path.join(ROOT, "bench", "fabric"))
spec = importlib.util.spec_from_loader("bench_fabric", loader)
fabric = importlib.util.module_from_spec(spec)
loader.exec_module(fabric)

bad = []


def check(what, got, want):
    if got != want:
        bad.append(f"{what}: {got!r}, want {want!r}")


# 0.2 s intervals, keyed by their end, a 4 s run; the fault at 1.3 s, in the
# middle of the interval 1.2-1.4, which holds pre-fault traffic and so never
# counts as recovered. Before it 2.0 Gb/s; after it 0.5, then 1.25 from 1.4,
# then 1.6 from 1.6 on. Capacity left 1.5 Gb/s: the absolute threshold is
# 0.85 x 1.5 = 1.275, first met (3 intervals in a row) by the one starting
# at 1.6: 0.3 s after the fault. The relative one is 0.8 x 0.75 x 2.0 = 1.2
# (pre-fault median, intervals ending in 0.5..1.3), met from 1.4: 0.1 s.
ends = [round(0.2 * k, 1) for k in range(1, 21)]
gbps = {1.4: 0.5, 1.6: 1.25}
intervals = [(t, 2.0 if t <= 1.2 else gbps.get(t, 1.6)) for t in ends]
rec, rel, pre, steady = fabric.recovery(intervals, 1.3, 4.0, 1.5)
check("recovery_s", round(rec, 3), 0.3)
check("recovery_rel_s", round(rel, 3), 0.1)
check("gbps_before_fault", pre, 2.0)
check("gbps_after_fault", steady, 1.6)

# Never back to 1.275: recovery_s None, and people read "never".
flat = [(t, 2.0 if t <= 1.2 else 1.25) for t in ends]
rec, rel, _, _ = fabric.recovery(flat, 1.3, 4.0, 1.5)
check("recovery_s, never", rec, None)
check("recovery_rel_s, 1.25 >= 1.2 from 1.4", round(rel, 3), 0.1)
check("text, never", fabric.recovery_text({"recovery_s": None}), "never")
check("text, 0.3 s", fabric.recovery_text({"recovery_s": 0.3}), "0.3")
check("text, no fault", fabric.recovery_text({}), "-")
check("text, failed", fabric.recovery_text({"recovery_s": None, "failed": True}), "-")

if bad:
    sys.exit("FAIL: " + "; ".join(bad))
print("PASS: bench/fabric recovery figures")
