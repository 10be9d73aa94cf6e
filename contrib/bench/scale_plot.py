#!/usr/bin/env python3
"""The medians and pictures of contrib/bench/scale.sh.

    scale_plot.py RAW OUT [--png DIR]

RAW: every round's rows (round,curve,series,x,metric,value). OUT gets one
row per point and metric: curve,series,x,metric,median,min,max,rounds (the
median, lowest and highest over the rounds that measured it, and how many
did). --png DIR draws one picture per curve found (requests.png,
regions.png, peers.png, notify.png, python.png): each panel one metric
against the curve's x on log axes, a line per series, bars from the lowest
to the highest round; the python picture draws the C requests curve
dashed beside it. Without matplotlib the CSV is still written and the
pictures are skipped with a message (python3-matplotlib,
contrib/install-deps.sh).
"""
import argparse
import csv
import math
import os
import statistics
import sys

CURVES = ["requests", "regions", "peers", "notify", "python"]
# Per curve: the x axis, then panels of (metrics, title)
PANELS = {
    "requests": ("requests per batch (tcp WRITEs)", [
        (["submit_ns_per_req"], "submit, ns per request"),
        (["complete_ns_per_req"], "submit to completion, ns per request"),
        (["req_per_s"], "requests per second"),
        (["peak_bytes_per_req"], "peak memory, bytes per request in flight")]),
    "regions": ("regions registered on the target (4 KiB each)", [
        (["register_ns_per_region"], "ote_mem_register, ns per region"),
        (["desc_bytes_per_region"], "descriptor bytes per region"),
        (["open_ms", "refresh_ms"], "segment open and refresh, ms"),
        (["check_submit_ns_per_req"], "submit over every region, ns per request"),
        (["lookup_ns"], "ote_mem_register of a registered range, ns")]),
    "peers": ("targets opened by one initiator (tcp)", [
        (["open_ms_per_seg"], "open, ms per segment"),
        (["init_rss_kib_per_seg", "target_rss_kib_per_seg"], "RSS, KiB per open segment"),
        (["init_fds_per_seg", "target_fds_per_seg"], "file descriptors per open segment"),
        (["write_gbps"], "one batch of 4 KiB WRITEs to all, GB/s"),
        (["init_idle_cpu_pct"], "idle CPU of the initiator, % of a core")]),
    "notify": ("senders to one receiver", [
        (["notif_per_s"], "notifications per second"),
        (["delay_p50_us", "delay_p99_us"], "delivery delay, µs")]),
    "python": ("requests per batch (tcp WRITEs) through Python", [
        (["submit_ns_per_req"], "submit, ns per request"),
        (["complete_ns_per_req"], "submit to completion, ns per request"),
        (["req_per_s"], "requests per second"),
        (["peak_bytes_per_req"], "peak memory, bytes per request in flight")]),
}


def read_raw(path):
    vals = {}
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec or rec[0] == "round":
                continue
            if len(rec) != 6:
                sys.exit(f"scale_plot.py: {path}: a row of {len(rec)} fields: {rec}")
            _, curve, series, x, metric, value = rec
            vals.setdefault((curve, series, int(x), metric), []).append(float(value))
    return vals


def order(key):
    curve, series, x, metric = key
    return (CURVES.index(curve) if curve in CURVES else len(CURVES), curve, series, x, metric)


def medians(vals):
    return {k: (statistics.median(v), min(v), max(v), len(v)) for k, v in vals.items()}


def write_csv(med, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["curve", "series", "x", "metric", "median", "min", "max", "rounds"])
        for k in sorted(med, key=order):
            m, lo, hi, n = med[k]
            w.writerow(list(k) + [f"{m:.6g}", f"{lo:.6g}", f"{hi:.6g}", n])


def draw(med, curve, path, plt):
    from matplotlib import ticker

    xlabel, panels = PANELS[curve]
    series = sorted({k[1] for k in med if k[0] == curve})
    rows = math.ceil(len(panels) / 2)
    fig, axes = plt.subplots(rows, 2, figsize=(11, max(4.5, 3.6 * rows)), squeeze=False)
    for i, (metrics, title) in enumerate(panels):
        ax = axes[i // 2][i % 2]
        lines = [(curve, s, m, "-") for s in series for m in metrics]
        if curve == "python":  # OrbitTE from C, for the binding's cost
            lines += [("requests", s, m, "--") for s in sorted(
                {k[1] for k in med if k[0] == "requests"}) for m in metrics]
        positive = True
        for cv, s, m, style in lines:
            pts = sorted((k[2], v) for k, v in med.items() if k[:2] == (cv, s) and k[3] == m)
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ys = [p[1][0] for p in pts]
            err = [[y - p[1][1] for y, p in zip(ys, pts)], [p[1][2] - y for y, p in zip(ys, pts)]]
            positive = positive and all(y > 0 for y in ys)
            label = s if len(metrics) == 1 else f"{s}, {m}"
            if cv != curve:
                label = f"C: {label}"
            ax.errorbar(xs, ys, yerr=err, fmt="o" + style, ms=3, capsize=2, label=label)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        if positive:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.6g}"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    for j in range(len(panels), rows * 2):
        axes[j // 2][j % 2].axis("off")
    fig.suptitle(f"OrbitTE scale: {curve} (medians of rounds; bars: lowest to highest)",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("raw")
    ap.add_argument("out")
    ap.add_argument("--png", metavar="DIR")
    args = ap.parse_args()
    med = medians(read_raw(args.raw))
    if not med:
        sys.exit(f"scale_plot.py: no figures in {args.raw}")
    write_csv(med, args.out)
    if not args.png:
        return 0
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("scale_plot.py: no matplotlib: pictures not drawn (python3-matplotlib)",
              file=sys.stderr)
        return 0
    os.makedirs(args.png, exist_ok=True)
    for curve in CURVES:
        if any(k[0] == curve for k in med):
            draw(med, curve, os.path.join(args.png, f"{curve}.png"), plt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
