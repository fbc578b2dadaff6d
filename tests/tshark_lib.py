"""What the tests that read captures with tshark share: their list of failed
checks, tshark itself, and metaroce-sim's captures.

Used by tests/wireshark/dissector_test.py and tests/sim/baseline_pcap_test.py,
each of which puts tests/ on sys.path first.
"""
import shutil
import subprocess

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL: " + what)
    return ok


def have_tshark():
    if shutil.which("tshark") is None:
        print("FAIL: tshark not found (scripts/setup-deps.sh installs it)")
        return False
    return True


def tshark(args, lua=None):
    """tshark's stdout, with the Lua script `lua` loaded if given. A failed
    run fails a check, and so does a Lua error in its output (it would hide
    every later field)."""
    cmd = ["tshark"] + (["-X", "lua_script:" + lua] if lua else []) + args
    run = subprocess.run(cmd, capture_output=True, text=True)
    output = run.stdout + run.stderr
    check(run.returncode == 0, f"tshark exit {run.returncode}: {' '.join(cmd)}\n{run.stderr}")
    check("lua error" not in output.lower() and "lua: error" not in output.lower(),
          "Lua error in tshark output:\n" + "\n".join(
              l for l in output.splitlines() if "lua" in l.lower())[:2000])
    return run.stdout


def decode(pcap, fields, lua=None, options=()):
    """One dict per frame of `pcap`: field -> list of its values (strings)."""
    args = list(options) + ["-r", pcap, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a",
                            "-E", "aggregator=|"]
    for f in fields:
        args += ["-e", f]
    rows = []
    for line in tshark(args, lua).splitlines():
        cols = line.split("\t")
        rows.append({f: [v for v in c.split("|") if v != ""] for f, c in zip(fields, cols)})
    return rows


def sim_capture(sim, pcap, args):
    """Runs metaroce-sim `sim` with `args` (they name what --pcap captures),
    writing the capture to `pcap`. False, a failed check, if it fails."""
    cmd = [sim] + args + ["--pcap-file", pcap, "--quiet", "--no-timing"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    return check(run.returncode == 0, f"{' '.join(cmd)} exited {run.returncode}:\n{run.stderr}")


def summary():
    """The exit status of a test after its checks (1 if any failed)."""
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0
