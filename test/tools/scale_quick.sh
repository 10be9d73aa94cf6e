#!/bin/sh
# contrib/bench/scale.sh --quick, the smoke test of the scale curves
# (docs/performance.md, "Scale"): two rounds of every curve on loopback
# (the peers curve also between two network namespaces, as root), then
# every round's rows are checked against each other: every point of
# every curve is there in both rounds and in scale.csv (the medians), the
# counts are what was asked (requests, regions seen, segments,
# notifications received), bytes moved are requests x size, each time is
# positive and a completion takes at least its submit, a rate is the
# inverse of its time, the descriptor grows with the regions. Nothing is
# asserted on how fast. The Python curve is checked where an interpreter
# has numpy (else scale.sh must say why it skipped it), the pictures where
# one has matplotlib.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$ORBITTE_TEST_BUILDDIR/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
    "$p" -c 'import csv' 2>/dev/null && { py=$p; break; }
done
[ -n "$py" ] || { echo "SKIP: no Python to read the CSV"; exit 77; }
numpy=0 mpl=0
for p in ${PYTHON:-} python3 /usr/bin/python3; do
    "$p" -c 'import numpy' 2>/dev/null && numpy=1
    "$p" -c 'import matplotlib' 2>/dev/null && mpl=1
done
if ldd "$build/src/.libs/libote.so" 2>/dev/null | grep -q 'libasan\|libtsan'; then
    numpy=0 # scale.sh skips the Python curve in a sanitizer build, and says so
fi

if ! "$top/contrib/bench/scale.sh" --quick --rounds 2 --build "$build" --out "$dir/out" \
    >"$dir/log" 2>&1; then
    cat "$dir/log"
    echo "FAIL: scale.sh --quick exit status not 0"
    exit 1
fi
"$py" - "$dir/out" "$numpy" "$mpl" <<'PY'
import csv, os, struct, sys

out, numpy, mpl = sys.argv[1], sys.argv[2] == "1", sys.argv[3] == "1"
fails = []


def fail(msg):
    fails.append(msg)


skipped = open(os.path.join(out, "skipped.txt")).read().strip().splitlines()
for line in skipped:
    if not (line.startswith("python:") and not numpy) and not line.startswith("peers netns:"):
        fail(f"scale.sh skipped or failed: {line}")
if not numpy and not any(l.startswith("python:") for l in skipped):
    fail("no numpy, yet skipped.txt does not say why the Python curve is missing")

raw = {}
for rec in csv.DictReader(open(os.path.join(out, "raw.csv"))):
    key = (rec["round"], rec["curve"], rec["series"], int(rec["x"]))
    raw.setdefault(key, {})[rec["metric"]] = float(rec["value"])
med = {}
for rec in csv.DictReader(open(os.path.join(out, "scale.csv"))):
    med[(rec["curve"], rec["series"], int(rec["x"]), rec["metric"])] = rec


def near(a, b, rel=0.01):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def point(curve, series, x, metrics):
    """Both rounds' rows of one point, every metric present and in scale.csv."""
    rows = []
    for r in ("1", "2"):
        m = raw.get((r, curve, series, x))
        if m is None:
            fail(f"{curve} {series} x={x}: no rows in round {r}")
            continue
        missing = [k for k in metrics if k not in m]
        if missing:
            fail(f"{curve} {series} x={x} round {r}: no {missing}")
            continue
        rows.append(m)
    for k in metrics:
        rec = med.get((curve, series, x, k))
        if rec is None or rec["rounds"] != "2":
            fail(f"scale.csv: {curve} {series} x={x} {k}: not the median of 2 rounds ({rec})")
        elif not float(rec["min"]) <= float(rec["median"]) <= float(rec["max"]):
            fail(f"scale.csv: {curve} {series} x={x} {k}: median outside [min, max]")
    return rows


def check(cond, what):
    if not cond:
        fail(what)


def transfers(curve, series, x, size, m, requests):
    tag = f"{curve} {series} x={x}"
    check(m["requests"] == requests, f"{tag}: {m['requests']} requests, asked {requests}")
    check(m["completed"] == requests, f"{tag}: {m['completed']} of {requests} completed")
    check(m["bytes"] == requests * size, f"{tag}: {m['bytes']} bytes, not {requests} x {size}")


# requests per batch, and the same through Python
REQ = ["requests", "completed", "bytes", "submit_ns_per_req", "complete_ns_per_req",
       "req_per_s", "peak_bytes_per_req"]
curves = [("requests", "write {}B", (1, 16, 256, 4096))]
if numpy:
    curves += [("python", "submit_arrays {}B", (1, 256, 4096)),
               ("python", "mooncake async {}B", (1, 256, 4096))]
for curve, fmt, counts in curves:
    for size in (64, 4096):
        for x in counts:
            for m in point(curve, fmt.format(size), x, REQ):
                tag = f"{curve} {fmt.format(size)} x={x}"
                transfers(curve, fmt.format(size), x, size, m, x)
                check(0 < m["submit_ns_per_req"] <= m["complete_ns_per_req"],
                      f"{tag}: submit {m['submit_ns_per_req']} ns, completion "
                      f"{m['complete_ns_per_req']} ns per request")
                check(near(m["req_per_s"], 1e9 / m["complete_ns_per_req"]),
                      f"{tag}: {m['req_per_s']} requests/s is not 1 / completion time")
                check(m["peak_bytes_per_req"] >= 0, f"{tag}: negative peak memory")

# regions of a target
REG = ["regions_seen", "register_per_s", "register_ns_per_region", "desc_bytes",
       "desc_bytes_per_region", "open_ms", "refresh_ms", "lookup_ns", "lookup_found",
       "check_requests", "check_completed", "check_bytes", "check_submit_ns_per_req"]
for r in ("1", "2"):
    desc = []
    for x in (1, 100, 1000):
        m = raw.get((r, "regions", "4KiB regions", x), {})
        if all(k in m for k in REG):
            desc.append(m["desc_bytes"])
    check(len(desc) < 3 or desc[0] < desc[1] < desc[2],
          f"regions round {r}: descriptor bytes {desc} do not grow with the regions")
for x in (1, 100, 1000):
    for m in point("regions", "4KiB regions", x, REG):
        tag = f"regions x={x}"
        check(m["regions_seen"] == x, f"{tag}: the segment lists {m['regions_seen']} regions")
        check(m["check_requests"] == 256 and m["check_completed"] == 256 and
              m["check_bytes"] == 256 * 64, f"{tag}: range-check batch {m}")
        check(near(m["register_per_s"] * m["register_ns_per_region"], 1e9),
              f"{tag}: registration rate is not 1 / time per region")
        check(m["desc_bytes_per_region"] > 0 and
              x * m["desc_bytes_per_region"] < m["desc_bytes"],
              f"{tag}: {m['desc_bytes_per_region']} bytes per region of {m['desc_bytes']}")
        check(m["lookup_found"] == 1, f"{tag}: ote_mem_register of a registered range "
              "did not return its handle")
        for k in ("open_ms", "refresh_ms", "lookup_ns", "check_submit_ns_per_req",
                  "register_ns_per_region"):
            check(m[k] > 0, f"{tag}: {k} {m[k]}")

# peers of an initiator
PEER = ["segments", "open_ms_per_seg", "open_ms_p50", "requests", "completed", "bytes",
        "write_ms", "write_gbps", "init_rss_kib_per_seg", "init_fds_per_seg",
        "target_rss_kib_per_seg", "target_fds_per_seg", "idle_s", "init_idle_cpu_pct",
        "target_idle_cpu_pct_per_seg", "init_idle_wakeups_per_s",
        "target_idle_wakeups_per_s_per_seg", "init_rss_kib_per_seg_idle",
        "target_rss_kib_per_seg_idle"]
# between two namespaces too, as root (else scale.sh says why not)
netns = any(k[1] == "peers" and k[2] == "tcp netns" for k in raw)
if not netns and not any(l.startswith("peers netns:") for l in skipped):
    fail("no peers rows between namespaces, yet skipped.txt does not say why")
for x, series in [(x, s) for x in (1, 4) for s in ["tcp"] + (["tcp netns"] if netns else [])]:
    for m in point("peers", series, x, PEER):
        tag = f"peers {series} x={x}"
        check(m["segments"] == x, f"{tag}: {m['segments']} segments")
        transfers("peers", series, x, 4096, m, 4 * x)
        check(m["open_ms_per_seg"] > 0 and m["open_ms_p50"] > 0 and m["write_ms"] > 0,
              f"{tag}: times {m}")
        check(near(m["write_gbps"], m["bytes"] / m["write_ms"] / 1e6),
              f"{tag}: GB/s is not bytes / time")
        # an open segment in use holds at least a socket on each side
        check(m["init_fds_per_seg"] >= 1 and m["target_fds_per_seg"] >= 1,
              f"{tag}: fds per segment {m['init_fds_per_seg']}, {m['target_fds_per_seg']}")
        check(m["idle_s"] >= 0.2 and m["init_idle_cpu_pct"] >= 0 and
              m["target_idle_cpu_pct_per_seg"] >= 0, f"{tag}: idle reading {m}")
        # the measuring thread sleeps once in its window: at least one wake-up
        check(m["init_idle_wakeups_per_s"] * m["idle_s"] >= 1 and
              m["target_idle_wakeups_per_s_per_seg"] >= 0, f"{tag}: wake-ups {m}")

# notifications
NOTE = ["senders", "sent", "send_failures", "received", "notif_per_s", "delay_p50_us",
        "delay_p99_us"]
for x in (1, 8):
    for m in point("notify", "to one receiver", x, NOTE):
        tag = f"notify x={x}"
        check(m["senders"] == x, f"{tag}: {m['senders']} senders")
        check(m["sent"] == 400 // x * x and m["send_failures"] == 0,
              f"{tag}: sent {m['sent']}, failed {m['send_failures']}")
        check(m["received"] == m["sent"], f"{tag}: received {m['received']} of {m['sent']}")
        check(m["notif_per_s"] > 0 and 0 < m["delay_p50_us"] <= m["delay_p99_us"],
              f"{tag}: rate and delays {m}")

# the pictures
if mpl:
    for name in ("requests", "regions", "peers", "notify") + (("python",) if numpy else ()):
        path = os.path.join(out, f"{name}.png")
        try:
            data = open(path, "rb").read()
        except OSError:
            fail(f"no {name}.png")
            continue
        w, h = struct.unpack(">II", data[16:24])
        check(data[:8] == b"\x89PNG\r\n\x1a\n" and w >= 600 and h >= 300,
              f"{name}.png is not a picture of a real size")

for f in fails:
    print("FAIL:", f)
print(f"{len(raw)} points of 2 rounds checked, {len(fails)} failures")
sys.exit(1 if fails else 0)
PY
