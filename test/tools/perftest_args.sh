#!/bin/sh
# ote_perftest's options as a user mistypes them: each bad value is refused
# with a line naming the option and the value, and exit status 1, before
# anything runs (before, -b 0, -n abc, -D -1 or -T 2x ran with a default,
# and -b 1.5 with 1); ote_info takes --help and refuses what it does not
# know. And the percentiles of a few samples: p99 is at least the median
# and the average (the nearest rank; it was the minimum of two).
set -u
tools="${ORBITTE_TEST_BUILDDIR:?run under make check}/../src/tools"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/tally.sh"

# arguments | what the message must name
refused="-b 0|-b (requests per batch)
-b 1.5|'1.5'
-n 0|-n (batches)
-n abc|'abc'
-D -1|-D (batches in flight)
-T 2x|-T (threads)
-T 65|from 1 to 64
--kv 4:8x -t kv_write|--kv wants
-t foo|write_bw, read_bw
-s ,|no size
--loopback 127.0.0.1:1|no PEER"

echo "$refused" | while IFS='|' read -r args want; do
    # shellcheck disable=SC2086 # args: options, split
    timeout -k 5 30 "$tools/ote_perftest" --loopback $args >"$dir/out" 2>&1
    rc=$?
    if [ $rc -ne 1 ]; then
        echo "FAIL: ote_perftest $args: exit status $rc, want 1"; sed 's/^/  /' "$dir/out"
    elif ! grep -qF -- "$want" "$dir/out"; then
        echo "FAIL: ote_perftest $args: no '$want' in: $(cat "$dir/out")"
    else
        echo "ok"
    fi
done >"$dir/verdicts"
while read -r line; do
    case $line in
    ok) ok ;;
    *) bad "${line#FAIL: }" ;;
    esac
done <"$dir/verdicts"

"$tools/ote_info" --help >"$dir/help" 2>&1 && grep -q "^usage: ote_info" "$dir/help" && ok ||
    bad "ote_info --help: $(cat "$dir/help")"
"$tools/ote_info" -v extra >"$dir/extra" 2>&1
[ $? -eq 2 ] && grep -q "unexpected argument 'extra'" "$dir/extra" && ok ||
    bad "ote_info -v extra: $(cat "$dir/extra")"
"$tools/ote_info" --nonzero >"$dir/nz" 2>&1
[ $? -eq 2 ] && grep -q "goes with --stats" "$dir/nz" && ok || bad "ote_info --nonzero: $(cat "$dir/nz")"

# Three batches, three KV requests: few samples.
timeout -k 5 60 "$tools/ote_perftest" --loopback -q -x tcp -s 64k -b 2 -n 3 --region 8m \
    --json "$dir/bw.json" >"$dir/bw.out" 2>&1 || bad "bw run: $(tail -n 5 "$dir/bw.out")"
timeout -k 5 60 "$tools/ote_perftest" --loopback -q -x tcp -t kv_read --kv 4:8 -s 4k -n 3 \
    --region 8m --json "$dir/kv.json" >"$dir/kv.out" 2>&1 || bad "kv run: $(tail -n 5 "$dir/kv.out")"
if python3 - "$dir/bw.json" "$dir/kv.json" >"$dir/pct" 2>&1 <<'PY'
import json, sys

bad = []
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        if r["type"] == "result":
            if not (r["lat_p99_us"] >= r["lat_p50_us"] and r["lat_p99_us"] >= r["lat_avg_us"]):
                bad.append(f"result p50 {r['lat_p50_us']} avg {r['lat_avg_us']} p99 {r['lat_p99_us']}")
        elif r["type"] == "kv_result":
            if r["lat_p99_us"] < r["lat_avg_us"] or r["post_p99_us"] < r["post_avg_us"]:
                bad.append(f"kv_result {r}")
sys.exit("\n".join(bad) if bad else 0)
PY
then ok; else bad "percentiles of few samples: $(cat "$dir/pct")"; fi
tally_end
