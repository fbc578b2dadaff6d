#!/usr/bin/env python3
"""scripts/sim-perm-bounds.py on a small preset: every variant runs, the
lossless variants lose nothing (else they are no bound), and bad input is
refused with a message rather than a traceback."""
import json
import pathlib
import subprocess
import sys

sim = sys.argv[1]
script = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "sim-perm-bounds.py"


def bounds(*args):
    return subprocess.run([sys.executable, str(script), "--sim", sim, *args], capture_output=True, text=True)


done = bounds("--preset", "fattree16-perm", "--seeds", "1,2", "--json")
assert done.returncode == 0, done.stderr
report = json.loads(done.stdout)
variants = {r["variant"] for r in report["runs"]}
assert variants == {"metaroce", "metaroce-32", "lossless-spray-16", "lossless-spray-32"}, variants
assert len(report["runs"]) == 8, report["runs"]
for run in report["runs"]:
    assert 1.0 < run["p50_x_ideal"] <= run["slowest_x_ideal"], run
    if run["variant"].startswith("lossless"):
        assert run["drops"] == 0, run
# Seeds change the fabric's hashing, so two seeds must not give one answer.
spray = [r["slowest_x_ideal"] for r in report["runs"] if r["variant"] == "lossless-spray-16"]
assert spray[0] != spray[1], spray

for args, expected in [(["--seeds", "1,x"], "whole numbers"),
                       (["--preset", "no-such-preset", "--seeds", "1"], "unknown preset"),
                       (["--lone", "/no/such/file.toml"], "no such file")]:
    done = bounds(*args)
    assert done.returncode != 0 and expected in done.stderr, (args, done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
print("perm-bounds: ok")
