#!/usr/bin/env python3
"""The pictures of contrib/bench/run.sh, from the figures table.py reads.

    plot.py [--caption TEXT] [--points FILE] RESULTS DIR

RESULTS: run.sh's results (round, workload, peer, value, p99; "-" when the
measurement failed). Draws into DIR:

  bandwidth-tcp.png   GB/s by block size, the peers whose table ratio is
                      taken against ote_perftest tcp (iperf3, ucx_perftest,
                      the bare tcp stream, the Python peers);
  bandwidth-host.png  the same for the intra-host peers (ote_perftest cma
                      and shm, ucx_perftest over cma, memcpy);
  latency.png         the 8-byte WRITE and READ latency of every peer that
                      measures one, p50 and p99.

Each point is the median over the rounds that table.py prints for the same
workload and peer (table.median), so the pictures and the table agree; the
bars on a bandwidth point span the lowest and highest round. OrbitTE's own
rows are solid lines, the references dashed. --points FILE writes every
drawn figure as a tab-separated line (picture, workload, peer, median, p99
or lowest, highest), which test/tools/bench_plot.sh compares with the table.
Needs matplotlib (Debian's python3-matplotlib, contrib/install-deps.sh).
"""
import argparse
import itertools
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import table  # noqa: E402  (the table's peers, shapes and medians)

# The workloads by block size: x position (bytes of a block) and tick label
BLOCKS = [("4k", 4096, "4 KiB\n× 128"), ("kv", 16384, "16 KiB\n× 2,048, KV\n(scattered)"),
          ("64k", 65536, "64 KiB\n× 32"), ("1m", 1048576, "1 MiB\n× 8")]
OURS = ("ote_perftest ", "orbitte.")
COLOURS = {
    "ote_perftest tcp": "#1f5fbf", "ote_perftest cma": "#1a9641", "ote_perftest shm": "#7b3fb0",
    "orbitte.mooncake tcp": "#17becf", "tcp stream, no library": "#000000",
    "tcp ping-pong, no library": "#000000", "iperf3": "#8c8c8c", "memcpy": "#000000",
    "ucx_perftest tcp": "#ff7f0e", "ucx_perftest cma": "#ff7f0e",
    "ucx_perftest cma, 8 MiB": "#d62728", "Mooncake wheel tcp": "#8c564b",
    "NIXL wheel, UCX tcp": "#e377c2",
}
SPARE = ["#bcbd22", "#9edae5", "#c5b0d5", "#c49c94", "#f7b6d2"]
LEGEND = {"ucx_perftest cma, 8 MiB": "ucx_perftest cma, 8 MiB messages (1 MiB × 8's footprint)"}


def us(x):
    """Microseconds as read on a label: 1.05, 11.2, 204, 12,700."""
    return f"{x:.3g}" if x < 100 else f"{x:,.0f}"


def ours(peer):
    return peer.startswith(OURS)


def colour(peer, spare=itertools.cycle(SPARE)):
    if peer not in COLOURS:
        COLOURS[peer] = next(spare)
    return COLOURS[peer]


def bandwidth(plt, by_round, peers, title, caption, path, points, name):
    """2 x 2 panels (WRITE, READ by 1 and 2 threads), a line per peer."""
    from matplotlib import ticker

    fig, axes = plt.subplots(2, 2, figsize=(11, 8.6), sharex=True, sharey=True)
    drawn, lo, hi = [], math.inf, 0.0
    for row, op in enumerate(("write", "read")):
        for col, t in enumerate((1, 2)):
            ax = axes[row][col]
            for peer in peers:
                xs, ys, low, high = [], [], [], []
                for shape, x, _ in BLOCKS:
                    key = f"{shape} {op} T{t}"
                    v, _, vals = table.median(by_round, key, peer)
                    if v is None:  # a gap in the line, not a line across it
                        if xs:
                            xs.append(x)
                            ys.append(math.nan)
                            low.append(0)
                            high.append(0)
                        continue
                    got = [a for a, _ in vals if a is not None]
                    xs.append(x)
                    ys.append(v)
                    low.append(v - min(got))
                    high.append(max(got) - v)
                    lo, hi = min(lo, min(got)), max(hi, max(got))
                    points.append((name, key, peer, v, min(got), max(got)))
                if all(math.isnan(y) for y in ys):
                    continue
                own = ours(peer)
                ax.errorbar(xs, ys, yerr=[low, high], color=colour(peer),
                            linestyle="-" if own else "--", linewidth=2.4 if own else 1.4,
                            marker="o" if own else "s", markersize=6 if own else 4.5,
                            capsize=3, elinewidth=0.8, alpha=1 if own else 0.85,
                            label=LEGEND.get(peer, peer), zorder=3 if own else 2)
                if peer not in drawn:
                    drawn.append(peer)
            ax.set_title(f"{op.upper()}, {t} thread{'s' if t > 1 else ''}", fontsize=11)
            ax.grid(True, which="major", alpha=0.35)
            ax.grid(True, which="minor", axis="y", alpha=0.12)
            if col == 0:
                ax.set_ylabel("GB/s (10⁹ bytes/s)")
            if row == 1:
                ax.set_xlabel("block size × blocks per batch")
    ax = axes[0][0]
    ax.set_xscale("log", base=2)
    ax.set_xticks([x for _, x, _ in BLOCKS])
    ax.set_xticklabels([lab for _, _, lab in BLOCKS], fontsize=8.5)
    ax.set_xlim(BLOCKS[0][1] / 1.6, BLOCKS[-1][1] * 1.6)
    # Log GB/s where the figures span more than a decade and a half
    if hi > 0 and lo < math.inf and hi / max(lo, 1e-9) > 30:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        for a in axes[:, 0]:
            a.set_ylabel("GB/s (10⁹ bytes/s), log scale")
    else:
        ax.set_ylim(bottom=0)
    handles, labels = [], []
    for a in axes.flat:
        for h, lab in zip(*a.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, 0.005))
    fig.suptitle(title, fontsize=13)
    fig.text(0.5, 0.935, caption, ha="center", fontsize=8.5, wrap=True)
    rows = (len(labels) + 2) // 3
    fig.tight_layout(rect=(0, 0.01 + 0.027 * rows, 1, 0.93))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return drawn


def latency(plt, by_round, peers, caption, path, points):
    """WRITE and READ side by side: a bar per peer, p50 dark, p99 light beyond it."""
    from matplotlib import ticker
    rows = [p for p in peers if any(table.median(by_round, f"lat {op}", p)[0] is not None
                                    for op in ("write", "read"))]
    fig, axes = plt.subplots(1, 2, figsize=(11, 1.6 + 0.48 * max(len(rows), 1)), sharey=True)
    lo, hi = math.inf, 0.0
    for ax, op in zip(axes, ("write", "read")):
        for i, peer in enumerate(rows):
            v, p99, _ = table.median(by_round, f"lat {op}", peer)
            if v is None:
                ax.text(1, i, " not measured", va="center", fontsize=8, color="#666666")
                continue
            points.append(("latency", f"lat {op}", peer, v, p99, p99))
            own = ours(peer)
            c = colour(peer)
            if p99 is not None:
                ax.barh(i, p99, color=c, alpha=0.3, height=0.7,
                        hatch=None if own else "//", edgecolor=c)
                hi = max(hi, p99)
            ax.barh(i, v, color=c, alpha=0.95 if own else 0.75, height=0.7,
                    hatch=None if own else "//", edgecolor="white" if own else c)
            lo, hi = min(lo, v), max(hi, v)
            text = f" {us(v)} / {us(p99)}" if p99 is not None else f" {us(v)}"
            ax.text(p99 if p99 is not None else v, i, text, va="center", fontsize=8)
        # a line between the groups of the table (tcp, cma, shm)
        for i in range(1, len(rows)):
            if table.PEERS.get(rows[i]) != table.PEERS.get(rows[i - 1]):
                ax.axhline(i - 0.5, color="#444444", linewidth=0.8)
        ax.set_title(f"8-byte {op.upper()}: p50 (dark), p99 (light)", fontsize=11)
        ax.set_xscale("log")
        # 1, 2, 5 a decade where they fit, else one tick a decade
        decades = math.log10(hi / lo) if lo < math.inf and hi > 0 else 1
        ax.xaxis.set_major_locator(
            ticker.LogLocator(base=10, subs=(1, 2, 5) if decades <= 2.5 else (1,), numticks=7))
        ax.xaxis.set_major_formatter(
            ticker.FuncFormatter(lambda x, _: f"{x:g}" if x < 1000 else f"{x / 1000:g}k"
                                 if x < 1e6 else f"{x / 1e6:g}M"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.grid(True, axis="x", which="major", alpha=0.35)
        ax.set_xlabel("µs (log scale; k: 10³, M: 10⁶); labels: p50 / p99")
    if lo < math.inf:
        # room right of the longest bar for its label (about a third of the axis)
        a = math.log10(hi * 1.5 / lo)
        for ax in axes:
            ax.set_xlim(lo / 1.5, hi * 10 ** (0.4 * a + 0.05))
    axes[0].set_yticks(range(len(rows)))
    axes[0].set_yticklabels(rows, fontsize=9)
    for lab, peer in zip(axes[0].get_yticklabels(), rows):
        lab.set_fontweight("bold" if ours(peer) else "normal")
    axes[0].invert_yaxis()
    fig.suptitle("8-byte latency by peer (bold: OrbitTE; hatched: references)", fontsize=13)
    fig.text(0.5, 1 - 0.5 / fig.get_figheight(), caption, ha="center", fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.55 / fig.get_figheight()))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results")
    ap.add_argument("dir")
    ap.add_argument("--caption", default="", help="a line under each title (the run: when, commit)")
    ap.add_argument("--points", help="write every drawn figure to this file")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.exit(f"plot.py: needs matplotlib ({e}): apt-get install python3-matplotlib "
                 "(contrib/install-deps.sh) or pip install matplotlib")
    by_round = table.load(a.results)
    if not by_round:
        sys.exit(f"plot.py: no figures in {a.results}")
    os.makedirs(a.dir, exist_ok=True)
    # The peers in the table's order (and any the table does not know, after them)
    peers = list(table.PEERS) + sorted({p for _, p in by_round} - set(table.PEERS))
    tcp = [p for p in peers if table.PEERS.get(p, "ote_perftest tcp") == "ote_perftest tcp"]
    host = [p for p in peers if p not in tcp]
    cap = a.caption + ("; " if a.caption else "") + \
        "bars: lowest and highest round; solid: OrbitTE, dashed: references"
    points = []
    out = {}
    out["bandwidth-tcp.png"] = bandwidth(
        plt, by_round, tcp, "Bandwidth over tcp on loopback, two processes", cap,
        os.path.join(a.dir, "bandwidth-tcp.png"), points, "bandwidth-tcp")
    out["bandwidth-host.png"] = bandwidth(
        plt, by_round, host, "Bandwidth within the host (cma, shared mappings, memcpy)", cap,
        os.path.join(a.dir, "bandwidth-host.png"), points, "bandwidth-host")
    out["latency.png"] = latency(plt, by_round, peers, a.caption or "median of the rounds",
                                 os.path.join(a.dir, "latency.png"), points)
    if a.points:
        with open(a.points, "w") as f:
            for p in points:
                f.write("\t".join(x if isinstance(x, str) else "-" if x is None else repr(x)
                                  for x in p) + "\n")
    for name, drawn in out.items():
        print(f"plot.py: {os.path.join(a.dir, name)}: {', '.join(drawn) or 'no peer'}")


if __name__ == "__main__":
    main()
