#!/bin/sh
# File segments against fio's io_uring engine: N interleaved rounds of
# 4 KiB random (queue depth 32) and 1 MiB sequential (queue depth 8) READs
# and WRITEs with O_DIRECT, each case run by fio and then by
# test/bench/bench_file with the same block size, queue depth and O_DIRECT
# setting, one job and one ring each. One line per case and round, MB/s
# (10^6 bytes per second); the medians at the end.
#   contrib/bench/file_rounds.sh BUILD FILE [N] [SECONDS]
# FILE: an existing file (e.g. 1 GiB, fallocate'd and filled) on the disk
# to measure; it is overwritten.
set -eu
build=$1 file=$2 rounds=${3:-3} secs=${4:-5}
size=$(stat -c %s "$file")
bench="$build/test/bench/bench_file"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fio_mbs() { # rw bs qd
    fio --name=file --filename="$file" --ioengine=io_uring --rw="$1" --bs="$2" \
        --iodepth="$3" --direct=1 --time_based --runtime="$secs" --size="$size" \
        --numjobs=1 --output-format=json 2>/dev/null |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]
print("%.1f" % ((j["read"]["bw_bytes"] + j["write"]["bw_bytes"]) / 1e6))'
}
ote_mbs() { # op pattern bs qd
    "$bench" --file "$file" "--$1" "--$2" --bs "$3" --qd "$4" --direct y --seconds "$secs" \
        2>/dev/null | sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p'
}
for r in $(seq 1 "$rounds"); do
    for c in "randread 4k 32 read rand" "randwrite 4k 32 write rand" \
             "read 1m 8 read seq" "write 1m 8 write seq"; do
        set -- $c
        f=$(fio_mbs "$1" "$2" "$3")
        o=$(ote_mbs "$4" "$5" "$2" "$3")
        echo "round $r $1 bs=$2 qd=$3: fio $f MB/s, OrbitTE $o MB/s" | tee -a "$out"
    done
done
echo "medians:"
for c in randread randwrite read write; do
    grep " $c bs=" "$out" | python3 -c 'import sys, statistics as s
rows=[l.split() for l in sys.stdin]
f=[float(r[6]) for r in rows]; o=[float(r[9]) for r in rows]
print("%s %s %s fio %.1f MB/s, OrbitTE %.1f MB/s (%.2f)" % (rows[0][2], rows[0][3], rows[0][4].rstrip(":"), s.median(f), s.median(o), s.median(o)/s.median(f)))'
done
