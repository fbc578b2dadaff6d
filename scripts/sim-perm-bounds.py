#!/usr/bin/env python3
"""Where a permutation's slowest flow stands against what spraying over hashed
ECMP can give on the same fabric (issue 4's 1.15 x ideal target).

Runs metaroce-sim on PRESET for each seed and prints, per variant, the slowest
flow and the median flow as multiples of the ideal:
  metaroce          the engine as shipped (16 paths)
  metaroce-32       the engine with 32 paths
  lossless-spray-N  spraying with per-path congestion control off, no
                    connection cap, a 2-BDP window and switch ports that
                    neither drop (100 MB) nor mark: what random placement of
                    packets over N hashed paths costs with no loss at all
With --lone CONFIG, also one flow alone on the fabric (the floor that headers
and a round trip put under every ratio).

usage: scripts/sim-perm-bounds.py [--sim PATH] [--preset P] [--seeds 1,2,3]
                                  [--lone CONFIG] [--json]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys

LOSSLESS = [
    "--set", "queue.buffer_bytes=100000000",
    "--set", "queue.ecn_kmin=90000000",
    "--set", "queue.ecn_kmax=95000000",
    "--set", "inflight_cap_bdp=0",
    "--set", "initial_window_bdp=2",
]

VARIANTS = {
    "metaroce": ["--transport", "metaroce"],
    "metaroce-32": ["--transport", "metaroce", "--paths", "32"],
    "lossless-spray-16": ["--transport", "spray-nocc", "--paths", "16"] + LOSSLESS,
    "lossless-spray-32": ["--transport", "spray-nocc", "--paths", "32"] + LOSSLESS,
}


def seed_list(text):
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be whole numbers separated by commas, not {text!r}")
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"seeds must be non-negative, not {text!r}")
    return seeds


def run(sim, scenario, args):
    cmd = [str(sim)] + scenario + args + ["--json", "-q", "--no-timing"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    # Exit status 1 is a run whose flows did not all finish: its report is
    # still a result, but not a bound, so it is refused below.
    if done.returncode not in (0, 1) or not done.stdout.strip():
        sys.exit(f"sim-perm-bounds: {' '.join(cmd)} failed (exit status {done.returncode}): "
                 f"{done.stderr.strip()}")
    report = json.loads(done.stdout)
    if done.returncode == 1:
        sys.exit(f"sim-perm-bounds: {' '.join(cmd)} left flows unfinished; raise --time-limit-ms")
    return {
        "slowest_x_ideal": report["completion_us"] / report["ideal_us"],
        "p50_x_ideal": report["fct_p50_us"] / report["ideal_us"],
        "drops": report["drops"],
        "retransmissions": report["retransmissions"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sim", default=None, help="metaroce-sim binary (default build/tools/sim/metaroce-sim)")
    parser.add_argument("--preset", default="fattree1024-perm2mb")
    parser.add_argument("--seeds", type=seed_list, default=[1, 2, 3], help="comma-separated seeds (default 1,2,3)")
    parser.add_argument("--lone", default=None, help="a config file with one flow alone (docs/sim/examples/fattree1024-lone2mb.toml)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    opts = parser.parse_args()

    root = pathlib.Path(__file__).resolve().parent.parent
    sim = pathlib.Path(opts.sim) if opts.sim else root / "build/tools/sim/metaroce-sim"
    if not sim.is_file():
        if opts.sim:
            sys.exit(f"sim-perm-bounds: --sim {opts.sim}: no such file")
        sys.exit(f"sim-perm-bounds: {sim} not built (cmake --build build --target metaroce-sim)")
    if opts.lone and not pathlib.Path(opts.lone).is_file():
        sys.exit(f"sim-perm-bounds: --lone {opts.lone}: no such file")

    rows = []
    if opts.lone:
        lone = run(sim, ["--config", opts.lone], ["--transport", "metaroce"])
        rows.append({"variant": "lone-flow", "seed": 1, **lone})
    for name, args in VARIANTS.items():
        for seed in opts.seeds:
            print(f"sim-perm-bounds: {opts.preset} {name} seed {seed}", file=sys.stderr)
            result = run(sim, ["--preset", opts.preset], args + ["--seed", str(seed)])
            rows.append({"variant": name, "seed": seed, **result})

    if opts.json:
        print(json.dumps({"preset": opts.preset, "seeds": opts.seeds, "runs": rows}, indent=1))
        return
    print(f"{opts.preset}, seeds {','.join(map(str, opts.seeds))}: slowest flow and median flow / ideal")
    print(f"{'variant':<18} {'seed':>4} {'slowest':>8} {'p50':>7} {'drops':>7} {'resent':>7}")
    for row in rows:
        print(f"{row['variant']:<18} {row['seed']:>4} {row['slowest_x_ideal']:>8.4f} "
              f"{row['p50_x_ideal']:>7.4f} {row['drops']:>7} {row['retransmissions']:>7}")
    print("mean of the seeds:")
    for name in VARIANTS:
        mine = [r for r in rows if r["variant"] == name]
        print(f"{name:<18} slowest {statistics.mean(r['slowest_x_ideal'] for r in mine):.4f}"
              f"  p50 {statistics.mean(r['p50_x_ideal'] for r in mine):.4f}")


if __name__ == "__main__":
    main()
