#!/usr/bin/env python3
"""bench/fabric's arithmetic, checked by hand on made-up progress intervals
(no fabric, no root): recovery() and what the table and the progress lines
print for it; fault_timer on a stand-in client's clock; the rows of runs
that could not happen; the cases the options select.

usage: fabric_units_test.py
"""
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import types

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


def grid(step, t_end, gbps_at):
    """Intervals [(start, end, gbps)] of `step` seconds up to t_end, each at
    gbps_at(start)."""
    n = int(round(t_end / step))
    return [(round(k * step, 6), round((k + 1) * step, 6), gbps_at(round(k * step, 6))) for k in range(n)]


# 0.2 s intervals (as long as the window: the resolution is 0.2 s), a 4 s
# run; the fault at 1.3 s, in the middle of the interval 1.2-1.4, which
# holds pre-fault traffic and so never counts as recovered. Before it 2.0
# Gb/s; after it 0.5, then 1.25 from 1.4, then 1.6 from 1.6 on. Capacity
# left 1.5 Gb/s: the absolute threshold is 0.85 x 1.5 = 1.275, first met
# (3 windows in a row) from 1.6: 0.3 s after the fault. The relative one is
# 0.8 x 3/4 x 2.0 = 1.2 (the pre-fault mean, 0.6..1.2), met from 1.4, the
# first start after the fault: that reads the resolution, 0.2 s.
rates = {1.2: 0.5, 1.4: 1.25}
intervals = grid(0.2, 4.0, lambda s: 2.0 if s < 1.2 else rates.get(s, 1.6))
rec, rel, pre, steady = fabric.recovery(intervals, 1.3, 4.0, 1.5, 0.2)
check("recovery_s", round(rec, 3), 0.3)
check("recovery_rel_s", round(rel, 3), 0.2)
check("gbps_before_fault", round(pre, 3), 2.0)
check("gbps_after_fault", round(steady, 3), 1.6)

# Never back to 1.275: recovery_s None, and people read "never".
flat = grid(0.2, 4.0, lambda s: 2.0 if s < 1.2 else 1.25)
rec, rel, _, _ = fabric.recovery(flat, 1.3, 4.0, 1.5, 0.2)
check("recovery_s, never", rec, None)
check("recovery_rel_s, 1.25 >= 1.2 from 1.4", round(rel, 3), 0.2)
check("text, never", fabric.recovery_text({"recovery_s": None}), "never")
check("text, 0.3 s", fabric.recovery_text({"recovery_s": 0.3, "recovery_resolution_s": 0.02}), "0.30")
check("text, no fault", fabric.recovery_text({}), "-")
check("text, failed", fabric.recovery_text({"recovery_s": None, "failed": True}), "-")

# The figure is the transport's, not the fault's phase in the interval grid
# (stop 52's review: with 0.2 s intervals a transport back at once read
# 0.1 s less fab's time for a fault at 2.7 s and 0.05 s for one at 2.75).
# metaroce-perf's 0.02 s intervals, a 9 s run, 2.0 Gb/s before and 1.5
# after, whenever the fault falls: within the first interval, read alike,
# as the resolution.
res = fabric.METAROCE_INTERVAL_S
for t_fault in (2.7, 2.71, 2.75, 2.759):
    at_once = grid(res, 9.0, lambda s, t=t_fault: 2.0 if s < t - res else 1.5)
    rec, _, pre, steady = fabric.recovery(at_once, t_fault, 9.0, 1.5, res)
    check(f"back at once, fault at {t_fault}: recovery_s", round(rec, 3), res)
    check(f"back at once, fault at {t_fault}: text",
          fabric.recovery_text({"recovery_s": round(rec, 2), "recovery_resolution_s": res}), "<=0.02")
    check(f"back at once, fault at {t_fault}: after", round(steady, 3), 1.5)

# A stall of 160 ms after the fault (nothing moves 2.7..2.86, then 1.5): a
# window with more than 0.2 x (1 - 1.275 / 1.5) = 0.03 s of it is below the
# threshold, so recovery reads 0.14 s (the first start from 2.83 on), where
# 0.2 s intervals read 0.3 s, and a stall shorter than the first of them
# "at once".
stall = grid(res, 9.0, lambda s: 2.0 if s < 2.7 else 0.0 if s < 2.86 - res / 2 else 1.5)
rec, _, _, _ = fabric.recovery(stall, 2.7, 9.0, 1.5, res)
check("160 ms stall: recovery_s", round(rec, 3), 0.14)

# Progress intervals whose times jitter by a few ms (a loaded client prints
# late) still make windows: back at once reads the resolution.
jitter = [(s + (0.003 if k % 3 else 0), e + (0.003 if (k + 1) % 3 else 0), g)
          for k, (s, e, g) in enumerate(grid(res, 9.0, lambda s: 2.0 if s < 2.7 else 1.5))]
rec, _, _, _ = fabric.recovery(jitter, 2.7, 9.0, 1.5, res)
check("jittered intervals: recovery_s", None if rec is None else round(rec, 3), res)

# The client's clocks, as fault_timer reads them.
check("metaroce stamp", fabric.metaroce_stamp("[  0.02s]    1.234 Gb/s  100 msg/s  retx 0"), 0.02)
check("metaroce stamp, other line", fabric.metaroce_stamp("metaroce-perf client: error"), None)
check("iperf3 stamp", fabric.iperf_stamp("[  5]   0.00-0.10   sec  1.2 MBytes  100 Mbits/sec"), 0.1)
check("iperf3 stamp, SUM", fabric.iperf_stamp("[SUM]   0.10-0.20   sec  1.2 MBytes  100 Mbits/sec"), 0.2)
check("iperf3 stamp, header", fabric.iperf_stamp("[ ID] Interval           Transfer     Bitrate"), None)


def bench(**kw):
    a = types.SimpleNamespace(links=4, rate=500, parallel=1, keep=None, qd=16, paths=16, mtu=8192,
                              explore_ms=None, queue_kb=400)
    vars(a).update(kw)
    return fabric.Bench(a)


# fault_timer puts the fault on the client's clock, also for iperf3, whose
# clock starts after its connects (on the spawn's clock, as before stop 52,
# the fault fell early by the client's start-up and recovery_s read short
# by as much). A stand-in client whose server prints its first interval
# (0.00-0.10) 0.4 s after the spawn: its clock started at 0.3 s, so a 1 s
# run's fault (at 0.3 s) is due 0.3 s after that, 0.2 s after the line.
b = bench()
log = os.path.join(b.tmp, "server.log")
open(log, "w").close()
faults = []
b.fault_at = lambda case: faults.append(time.time())
client = subprocess.Popen(["sh", "-c", 'sleep 0.4; echo "[  5]   0.00-0.10   sec  1 MBytes  1 Gbits/sec" >> "$0"; '
                           "exec sleep 5", log])
t_fault = b.fault_timer(dict(loss=0.0, links_down=0, blackholed=1), 1.0, time.monotonic(), client, log,
                        fabric.iperf_stamp)
client.kill()
client.wait()
if not faults:
    bad.append(f"fault_timer, iperf3 clock: no fault put in (returned {t_fault!r})")
else:
    after_line = faults[0] - os.stat(log).st_mtime
    if not 0.15 <= after_line <= 0.35:
        bad.append(f"fault_timer, iperf3 clock: fault {after_line:.3f} s after the first interval line, want 0.2")
    if t_fault is None or not 0.3 <= t_fault <= 0.45:
        bad.append(f"fault_timer, iperf3 clock: fault_at_s {t_fault!r}, want 0.3 (the client's clock)")
shutil.rmtree(b.tmp)

# A row whose MPTCP could not be set up is a failed run, as every other
# run that could not happen (it lacked "failed" and read as a valid row).
b = bench()
b.mptcp_setup = lambda: (None, "neither mptcpize nor a C compiler for the MPTCP shim")
row = b.run_iperf("mptcp", dict(loss=0.0, links_down=0, blackholed=0), 1, 5999)
check("mptcp setup failed: failed", row.get("failed"), True)
check("mptcp setup failed: error", "mptcpize" in str(row.get("error")), True)
shutil.rmtree(b.tmp)

# The cases --quick and --cases select; none is an error the caller makes.
check("quick cases", [fabric.case_name(c) for c in fabric.selected_cases(True, None)], fabric.QUICK_CASES)
check("quick and loss5", fabric.selected_cases(True, "loss5"), [])
check("cases", [fabric.case_name(c) for c in fabric.selected_cases(False, "loss5,down")], ["loss5", "down"])

if bad:
    sys.exit("FAIL: " + "; ".join(bad))
print("PASS: bench/fabric recovery figures")
