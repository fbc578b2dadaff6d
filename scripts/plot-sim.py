#!/usr/bin/env python3
"""Plots metaroce-sim --csv output (python3 + matplotlib + numpy only).

usage: plot-sim.py [-o OUTDIR] [--title T] [--dpi N] DIR [DIR ...]

Each DIR is one run's --csv folder (throughput.csv, queues.csv, paths.csv,
fcts.csv, each required, and report.json); runs are labelled by the transport in report.json
(else the folder name; runs of one transport add the shortest end of their
folder's path that tells them apart). Every file is checked before any figure
is drawn: one missing, empty, cut, without a column a figure reads or with a
cell that is not a number, or a report.json that is not the report's object,
exits 2 naming it (FILE:LINE where a line is at fault).
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
import math
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


class BadInput(Exception):
    """A --csv folder the figures cannot be drawn from; its text names the
    file and line."""


# What a figure reads of each file of a --csv folder, as metaroce-sim writes
# it: the columns and what their cells hold, and whether the file has a row
# (every workload has a flow, and the sampler always writes a last row;
# paths.csv has none for --csv-flows 0). An empty or cut file (a killed run),
# a renamed column or a stray cell drew empty figures with exit 0, or
# stopped on a traceback after the first PNGs were written.
NUMBER, NUMBER_OR_EMPTY, INTEGER = "a number", "a number or empty", "a whole number"
CSV_COLUMNS = {
    "fcts.csv": ([("flow", INTEGER), ("fct_us", NUMBER_OR_EMPTY)], True),
    "throughput.csv": ([("time_us", NUMBER), ("goodput_gbps", NUMBER)], True),
    "queues.csv": ([("time_us", NUMBER), ("max_queue_bytes", NUMBER),
                    ("mean_queue_bytes", NUMBER)], True),
    "paths.csv": ([("time_us", NUMBER), ("flow", INTEGER), ("src", INTEGER), ("dst", INTEGER),
                   ("path", INTEGER), ("cwnd_bytes", NUMBER_OR_EMPTY)], False),
}
CSV_FILES = tuple(CSV_COLUMNS)


def cell_ok(v, kind):
    if v == "":
        return kind == NUMBER_OR_EMPTY
    if kind == INTEGER:
        return v.isascii() and v.isdigit()
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


def read_csv(path):
    """Columns of one of CSV_COLUMNS' files as a dict of lists of strings,
    every row as long as the header and every cell a figure reads of its
    kind; raises BadInput naming the file and line."""
    name = os.path.basename(path)
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise BadInput(f"{path}: cannot be read: {e}") from None
    if not rows:
        raise BadInput(f"{path}: empty, not even a header (a run cut off?)")
    head, body = rows[0], rows[1:]
    columns, needs_rows = CSV_COLUMNS[name]
    for col, _ in columns:
        if col not in head:
            raise BadInput(f"{path}:1: no column {col} in the header")
    checks = [(head.index(col), col, kind) for col, kind in columns]
    if needs_rows and not body:
        raise BadInput(f"{path}: a header and no row (a run cut off?)")
    for line, r in enumerate(body, start=2):
        if len(r) != len(head):
            raise BadInput(f"{path}:{line}: {len(r)} fields, the header has {len(head)}")
        for i, col, kind in checks:
            v = r[i]
            if not cell_ok(v, kind):
                raise BadInput(f"{path}:{line}: {col} '{v}' is not {kind}")
    return {h: [r[i] for r in body] for i, h in enumerate(head)}


def floats(col):
    return np.array([float(v) if v != "" else np.nan for v in col])


def label_of(d):
    """The run's label and report: report.json is optional (labels), but one
    that is there must be the simulator's object (a list ended in a
    traceback; a cut one was taken as absent)."""
    path = os.path.join(d, "report.json")
    name = os.path.basename(os.path.normpath(d))
    if not os.path.exists(path):
        return name, {}
    try:
        with open(path) as f:
            rep = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise BadInput(f"{path}: not a JSON report: {e}") from None
    if not isinstance(rep, dict):
        raise BadInput(f"{path}: a JSON {type(rep).__name__}, not the report's object")
    for key in ("transport", "preset"):
        if not isinstance(rep.get(key, ""), str):
            raise BadInput(f"{path}: {key} is not a string")
    bound = rep.get("fct_p99_us")
    if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))):
        raise BadInput(f"{path}: fct_p99_us is not a number")
    return rep.get("transport", name), rep


def unique_labels(labels, dirs):
    """A label shared by several runs (two metaroce runs of different
    settings) gets after it the shortest end of its folder's path that the
    others sharing it lack: the legends told them apart by colour only, and
    sim-figures.sh's OUTDIR/TRANSPORT folders of two sweeps share their last
    name (base/metaroce, trim/metaroce)."""
    parts = [os.path.normpath(d).split(os.sep) for d in dirs]
    out = []
    for i, label in enumerate(labels):
        same = [parts[j] for j, other in enumerate(labels) if other == label]
        if len(same) > 1:
            k = 1
            while k < len(parts[i]) and sum(p[-k:] == parts[i][-k:] for p in same) > 1:
                k += 1
            label = f"{label} ({'/'.join(parts[i][-k:])})"
        out.append(label)
    return out


def save(fig, out, name, dpi):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    print(path)


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
    for label, tables, rep in runs:
        col = tables["fcts.csv"]["fct_us"]
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
    for i, (label, tables, _) in enumerate(runs):
        data = tables[fname]
        t = floats(data["time_us"])
        for j, (col, name) in enumerate(ycols):
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
    for label, tables, _ in runs:
        data = tables["paths.csv"]
        cw = {v for v in data["cwnd_bytes"] if v != ""}
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


def positive_int(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number above 0")
    return n


def main(argv):
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", metavar="DIR", help="metaroce-sim --csv folders")
    ap.add_argument("-o", "--out", help="folder for the PNGs (default: the first DIR)")
    ap.add_argument("--title", help="plot title prefix (default: the preset)")
    ap.add_argument("--dpi", type=positive_int, default=80, help="PNG resolution (default 80)")
    a = ap.parse_args(argv)
    runs = []
    for d in a.dirs:
        # Every file a figure reads, read and checked before any is drawn: a
        # folder without throughput.csv, or with a bad one, drew fct_cdf.png
        # and then stopped on a traceback.
        for f in CSV_FILES:
            if not os.path.isfile(os.path.join(d, f)):
                ap.error(f"{d}: no {f} (not a --csv folder?)")
        try:
            tables = {f: read_csv(os.path.join(d, f)) for f in CSV_FILES}
            label, rep = label_of(d)
        except BadInput as e:
            ap.error(str(e))
        runs.append((label, tables, rep))
    for i, label in enumerate(unique_labels([r[0] for r in runs], a.dirs)):
        runs[i] = (label,) + runs[i][1:]
    out = a.out or a.dirs[0]
    if os.path.exists(out) and not os.path.isdir(out):
        ap.error(f"-o {out}: not a folder")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        ap.error(f"-o {out}: {e.strerror}")
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
