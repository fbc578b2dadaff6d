#!/usr/bin/env python3
"""Plots metaroce-sim --csv output (python3 + matplotlib + numpy only).

usage: plot-sim.py [-o OUTDIR] [--title T] [--dpi N] DIR [DIR ...]

Each DIR is one run's --csv folder (throughput.csv, queues.csv, paths.csv,
fcts.csv, each required, and report.json); runs are labelled by the transport in report.json
(else the folder name; runs of one transport add their folder's name).
Writes into OUTDIR (default: the first DIR):

  fct_cdf.png      FCT CDF, every run on one plot (of all flows: unfinished
                   ones keep it below 1; the legend's p99 is the report's,
                   ">= X" where its rank is an unfinished flow's; a run
                   with no finished flow: "0/N finished", no curve)
  throughput.png   delivered goodput over time (Gbit/s, all flows)
  queues.png       max and mean switch-port queue over time
  cwnd.png         per-path cwnd over time of the first sampled connection
                   of each run whose windows move (MetaRoCE with CC; one
                   panel a run)

Example:
  metaroce-sim --preset fattree128-perm2mb --transport metaroce --csv out/metaroce
  metaroce-sim --preset fattree128-perm2mb --transport irn --csv out/irn
  scripts/plot-sim.py -o out out/metaroce out/irn

A python3 without matplotlib or numpy (pyenv's, first on PATH) runs the
script again with /usr/bin/python3, where scripts/setup-deps.sh installs
them (python3-matplotlib, python3-numpy); if that lacks them too, it exits
2 naming the fix.
"""
import argparse
import csv
import json
import os
import sys

# scripts/setup-deps.sh installs matplotlib and numpy for the distribution's
# python (python3-matplotlib, python3-numpy); a python3 earlier on PATH
# (pyenv, a venv) that the shebang finds may lack them.
SYSTEM_PYTHON = "/usr/bin/python3"
# Set on the re-run under SYSTEM_PYTHON, so that it cannot run itself again.
NO_RERUN = "METAROCE_PLOT_SIM_NO_RERUN"


def missing_plot_modules(err):
    """Without matplotlib or numpy: run again under the distribution's
    python once, or stop (exit 2) naming the fix instead of a traceback."""
    if not os.environ.get(NO_RERUN) and os.access(SYSTEM_PYTHON, os.X_OK):
        print(f"plot-sim.py: {err} for {sys.executable}; running with {SYSTEM_PYTHON}",
              file=sys.stderr)
        sys.stderr.flush()
        os.environ[NO_RERUN] = "1"
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    print(f"plot-sim.py: {err} for {sys.executable}: the figures need matplotlib and numpy; "
          f"on Debian or Ubuntu run scripts/setup-deps.sh (python3-matplotlib, python3-numpy) "
          f"and run this script with {SYSTEM_PYTHON}, or install them for this python "
          f"(python -m pip install matplotlib numpy)", file=sys.stderr)
    sys.exit(2)


try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
except ImportError as e:
    if __name__ != "__main__":  # imported (tests/sim/figures_test.sh): the caller's problem
        raise
    missing_plot_modules(e)


def read_csv(path):
    """Columns of a CSV file as a dict of lists of strings."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return {}
    head, body = rows[0], rows[1:]
    return {h: [r[i] if i < len(r) else "" for r in body] for i, h in enumerate(head)}


def floats(col):
    return np.array([float(v) if v != "" else np.nan for v in col])


def label_of(d):
    try:
        with open(os.path.join(d, "report.json")) as f:
            rep = json.load(f)
        return rep.get("transport", os.path.basename(os.path.normpath(d))), rep
    except (OSError, ValueError):
        return os.path.basename(os.path.normpath(d)), {}


def unique_labels(labels, dirs):
    """A label shared by several runs (two metaroce runs of different
    settings) gets its folder's name after it: the legends told them apart
    by colour only."""
    out = []
    for label, d in zip(labels, dirs):
        if labels.count(label) > 1:
            label = f"{label} ({os.path.basename(os.path.normpath(d))})"
        out.append(label)
    return out


def save(fig, out, name, dpi):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    print(path)


# What the figures read of a --csv folder (report.json is optional: labels).
CSV_FILES = ("fcts.csv", "throughput.csv", "queues.csv", "paths.csv")


def fct_cdf(col):
    """The finished flows' FCTs, sorted; the share of all flows finished by
    each (an unfinished flow, an empty fct_us, keeps the CDF below 1); and
    the p99 of all flows as the report's fct_p99_us takes it, the nearest
    rank, nan where that rank is an unfinished flow's (the report gives its
    age at the end of the run, a lower bound)."""
    fct = floats(col)
    done = np.sort(fct[~np.isnan(fct)])
    if done.size == 0:
        return done, done, float("nan")
    y = np.arange(1, done.size + 1) / fct.size
    rank = min(max(int(0.99 * fct.size + 0.999999), 1), fct.size)
    return done, y, done[rank - 1] if rank <= done.size else float("nan")


def fct_legend(label, col, rep):
    """A run's FCT CDF legend entry: its p99, or, where no flow finished
    (no curve to draw), how many of how many did (such a run had no entry,
    as if it had not been given)."""
    fct, _, p99 = fct_cdf(col)
    if fct.size == 0:
        return f"{label} (0/{len(col)} finished)"
    if np.isnan(p99):  # an unfinished flow's rank: the report's lower bound
        bound = rep.get("fct_p99_us")
        p99_text = f">= {bound:.0f} us" if bound is not None else "unfinished"
    else:
        p99_text = f"{p99:.0f} us"
    return f"{label} (p99 {p99_text})"


def plot_fct(runs, out, title, dpi):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, d, rep in runs:
        col = read_csv(os.path.join(d, "fcts.csv")).get("fct_us", [])
        fct, y, _ = fct_cdf(col)
        if fct.size == 0:
            ax.plot([], [], label=fct_legend(label, col, rep))  # an entry, no curve
            continue
        ax.step(fct, y, where="post", label=fct_legend(label, col, rep))
    ax.set_xlabel("flow completion time (us)")
    ax.set_ylabel("CDF")
    ax.set_ylim(0, 1.01)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{title}: FCT CDF")
    save(fig, out, "fct_cdf.png", dpi)


def plot_series(runs, out, title, dpi, fname, ycols, ylabel, scale=1.0):
    fig, ax = plt.subplots(figsize=(6, 3.6))
    styles = ["-", "--", ":"]
    for i, (label, d, _) in enumerate(runs):
        data = read_csv(os.path.join(d, fname))
        if not data:
            continue
        t = floats(data["time_us"])
        for j, (col, name) in enumerate(ycols):
            if col not in data:
                continue
            y = floats(data[col]) * scale
            ax.plot(t, y, styles[j % len(styles)], color=f"C{i}", lw=1.2,
                    label=f"{label} {name}".strip())
    ax.set_xlabel("simulated time (us)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig, ax


def plot_cwnd(runs, out, title, dpi):
    mr = []
    for label, d, _ in runs:
        data = read_csv(os.path.join(d, "paths.csv"))
        cw = {v for v in data.get("cwnd_bytes", []) if v != ""} if data else set()
        if len(cw) > 1:  # a window that moves (not the baselines, not spray-nocc)
            mr.append((label, data))
    if not mr:
        return
    fig, axes = plt.subplots(len(mr), 1, figsize=(6, 2.4 * len(mr) + 0.6), squeeze=False)
    for ax, (label, data) in zip(axes[:, 0], mr):
        flows = data["flow"]
        first = flows[0]
        sel = [i for i, f in enumerate(flows) if f == first]
        t = floats([data["time_us"][i] for i in sel])
        path = np.array([int(data["path"][i]) for i in sel])
        cwnd = floats([data["cwnd_bytes"][i] for i in sel]) / 1024.0
        for p in np.unique(path):
            m = path == p
            ax.plot(t[m], cwnd[m], lw=1, label=f"path {p}")
        src, dst = data["src"][sel[0]], data["dst"][sel[0]]
        ax.set_title(f"{label}: flow {first} ({src} -> {dst}) per-path cwnd", fontsize=9)
        ax.set_ylabel("cwnd (KiB)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=4)
    axes[-1, 0].set_xlabel("simulated time (us)")
    save(fig, out, "cwnd.png", dpi)


def main(argv):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", metavar="DIR", help="metaroce-sim --csv folders")
    ap.add_argument("-o", "--out", help="folder for the PNGs (default: the first DIR)")
    ap.add_argument("--title", help="plot title prefix (default: the preset)")
    ap.add_argument("--dpi", type=int, default=80)
    a = ap.parse_args(argv)
    runs = []
    for d in a.dirs:
        # Every file a figure reads, before any is drawn: a folder without
        # throughput.csv drew fct_cdf.png and then stopped on a traceback.
        for f in CSV_FILES:
            if not os.path.isfile(os.path.join(d, f)):
                ap.error(f"{d}: no {f} (not a --csv folder?)")
        label, rep = label_of(d)
        runs.append((label, d, rep))
    for i, label in enumerate(unique_labels([r[0] for r in runs], a.dirs)):
        runs[i] = (label,) + runs[i][1:]
    out = a.out or a.dirs[0]
    os.makedirs(out, exist_ok=True)
    title = a.title or runs[0][2].get("preset", "metaroce-sim")

    plot_fct(runs, out, title, a.dpi)
    fig, ax = plot_series(runs, out, title, a.dpi, "throughput.csv",
                          [("goodput_gbps", "")], "goodput (Gbit/s)")
    ax.set_title(f"{title}: delivered goodput")
    save(fig, out, "throughput.png", a.dpi)
    fig, ax = plot_series(runs, out, title, a.dpi, "queues.csv",
                          [("max_queue_bytes", "max"), ("mean_queue_bytes", "mean")],
                          "switch port queue (KB)", scale=1e-3)
    ax.set_title(f"{title}: switch queues (max, mean over ports)")
    save(fig, out, "queues.png", a.dpi)
    plot_cwnd(runs, out, title, a.dpi)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
