#!/bin/sh
# contrib/bench/plot.py, the pictures of contrib/bench/run.sh --plot, on a
# small results file of three rounds made up here: it draws its three PNGs
# (valid PNG, a real size, under 200 KB), every point it draws is the
# median of the rounds that have a figure, each is the median that
# table.py prints for the same workload and peer from the same file, a
# workload no round measured is left out, and a file without figures is an
# error. Skipped (with the reason) where no Python has matplotlib.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
    "$p" -c 'import matplotlib' 2>/dev/null && { py=$p; break; }
done
if [ -z "$py" ]; then
    echo "SKIP: no Python with matplotlib (python3-matplotlib, contrib/install-deps.sh): plot.py not tested"
    exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/tally.sh"

# Three rounds of every workload of every peer the table knows; a value
# derived from the round, workload and peer, some rounds "-", the Mooncake
# wheel's KV with two threads never measured, NIXL's wheel with no figure at all.
"$py" - "$top/contrib/bench" "$dir/results.tsv" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import table
keys = ["lat write", "lat read"] + [f"{s} {op} T{t}" for s in table.SHAPES
                                    for op in ("write", "read") for t in (1, 2)]
with open(sys.argv[2], "w") as f:
    for r in (1, 2, 3):
        for pi, peer in enumerate(table.PEERS):
            if peer == "NIXL wheel, UCX tcp":
                continue
            for ki, key in enumerate(keys):
                if peer == "Mooncake wheel tcp" and key.startswith("kv") and key.endswith("T2"):
                    v = p99 = "-"
                elif (r + pi + ki) % 7 == 0:
                    v = p99 = "-"  # a failed measurement
                else:
                    v = round(0.5 + pi * 1.7 + ki * 0.31 + r * r * 0.13, 3)
                    p99 = round(v * 2.5, 3) if key.startswith("lat") else "-"
                f.write(f"{r}\t{key}\t{peer}\t{v}\t{p99}\n")
PY
: >"$dir/commands.tsv"
: >"$dir/notes.tsv"

"$py" "$top/contrib/bench/plot.py" --caption "made-up figures, 3 rounds" --points "$dir/points.tsv" \
    "$dir/results.tsv" "$dir/png" >"$dir/plot.out" 2>&1
rc=$?
"$py" "$top/contrib/bench/table.py" "$dir/results.tsv" "$dir/commands.tsv" "$dir/notes.tsv" \
    "2026-01-01 00:00 UTC" test 2 "0 0 0" "0 0 0" 3 0 "THP -" >"$dir/table.md" 2>&1
trc=$?
if [ $rc -ne 0 ] || [ $trc -ne 0 ]; then
    bad "plot.py exit status $rc, table.py $trc"; cat "$dir/plot.out" "$dir/table.md"
else
    ok
    for png in bandwidth-tcp bandwidth-host latency; do
        if ! "$py" - "$dir/png/$png.png" <<'PY'; then
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", "not a PNG"
w, h = struct.unpack(">II", data[16:24])
assert w >= 600 and h >= 300, f"{w} x {h} pixels"
assert len(data) < 200 * 1024, f"{len(data)} bytes"
PY
            bad "$png.png is not a readable picture of a real size"
        else
            ok
        fi
    done
    if ! "$py" - "$dir/results.tsv" "$dir/points.tsv" "$dir/table.md" "$top/contrib/bench" <<'PY'; then
import statistics, sys
sys.path.insert(0, sys.argv[4])
import table
# The medians, from the made-up rounds themselves
rounds = {}
for line in open(sys.argv[1]):
    r, key, peer, v, p99 = line.rstrip("\n").split("\t")
    if v != "-":
        rounds.setdefault((key, peer), []).append((float(v), float(p99) if p99 != "-" else None))
want = {k: (statistics.median(v for v, _ in vals),
            statistics.median(p for _, p in vals) if vals[0][1] is not None else None)
        for k, vals in rounds.items()}
drawn = {}
for line in open(sys.argv[2]):
    pic, key, peer, med, p99_or_low, high = line.rstrip("\n").split("\t")
    assert (key, peer) not in drawn, f"{key} of {peer} drawn twice"
    drawn[(key, peer)] = (pic, float(med), p99_or_low, high)
assert set(drawn) == set(want), (sorted(set(want) - set(drawn)), sorted(set(drawn) - set(want)))
for (key, peer), (pic, med, a, b) in drawn.items():
    v, p99 = want[(key, peer)]
    assert abs(med - v) < 1e-9, (key, peer, med, v)
    lat = key.startswith("lat")
    assert pic == "latency" if lat else pic.startswith("bandwidth"), (key, peer, pic)
    if lat:
        assert abs(float(a) - p99) < 1e-9, (key, peer, a, p99)
    else:
        got = [x for x, _ in rounds[(key, peer)]]
        assert (float(a), float(b)) == (min(got), max(got)), (key, peer, a, b, got)
        tcp = table.PEERS[peer] == "ote_perftest tcp"
        assert pic == ("bandwidth-tcp" if tcp else "bandwidth-host"), (peer, pic)
assert not any(p == "NIXL wheel, UCX tcp" for _, p in drawn)
assert ("kv write T2", "Mooncake wheel tcp") not in drawn
# The table's median column from the same file: the same figure for every row
label = {}
for s, name in table.SHAPES.items():
    for op in ("write", "read"):
        for t in (1, 2):
            label[f"{name}, {op.upper()}, {t} thr., GB/s"] = f"{s} {op} T{t}"
for op in ("write", "read"):
    label[f"8 B latency, {op.upper()}, p50 / p99 µs"] = f"lat {op}"
rows = 0
for line in open(sys.argv[3]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) != 6 or cells[0] not in label:
        continue
    key, peer, med = label[cells[0]], cells[1], cells[2]
    if med in ("-", "- / -"):
        assert (key, peer) not in drawn, (key, peer)
        continue
    rows += 1
    v, p99 = want[(key, peer)]
    lat = key.startswith("lat")
    shown = f"{table.fmt(drawn[(key, peer)][1], True)} / {table.fmt(p99, True)}" if lat \
        else table.fmt(drawn[(key, peer)][1], False)
    assert shown == med, (key, peer, "table", med, "plot", shown)
assert rows == len(drawn), (rows, len(drawn))
print(f"{len(drawn)} points, each the table's median")
PY
        bad "the points drawn are not the medians of the rounds, or not the table's"
    else
        ok
    fi
fi

# A file without figures: an error that says so, no picture
: >"$dir/empty.tsv"
if "$py" "$top/contrib/bench/plot.py" "$dir/empty.tsv" "$dir/none" >"$dir/empty.out" 2>&1; then
    bad "plot.py drew an empty results file"
elif ! grep -q "no figures" "$dir/empty.out" || [ -e "$dir/none/latency.png" ]; then
    bad "plot.py on an empty file: $(cat "$dir/empty.out")"
else
    ok
fi
tally_end
