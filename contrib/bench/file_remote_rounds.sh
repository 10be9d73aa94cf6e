#!/bin/sh
# A peer's exported file against the same file as a local file segment:
# N interleaved rounds of 1 MiB sequential READ and WRITE (queue depth 8)
# and 4 KiB random READ (queue depth 32), each case run locally (buffered,
# OTE_FILE_DIRECT=n), then through the peer with the bytes inside the
# control messages (OTE_FILE_REMOTE=ctl), then over the tcp data rails
# (OTE_FILE_REMOTE=rails), all by test/bench/bench_file. One line per case
# and round, MB/s (10^6 bytes per second); the medians at the end.
#   contrib/bench/file_remote_rounds.sh BUILD FILE [N] [SECONDS]
# FILE: an existing file (e.g. 1 GiB of random bytes); WRITE overwrites it.
set -eu
build=$1 file=$2 rounds=${3:-3} secs=${4:-5}
bench="$build/test/bench/bench_file"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
mbs() { # op pattern bs qd mode...
    op=$1 pat=$2 bs=$3 qd=$4
    shift 4
    "$bench" --file "$file" "--$op" "--$pat" --bs "$bs" --qd "$qd" --seconds "$secs" "$@" \
        2>/dev/null | sed -n 's/.*: \([0-9.]*\) MB\/s.*/\1/p'
}
for r in $(seq 1 "$rounds"); do
    for c in "read seq 1m 8" "read rand 4k 32" "write seq 1m 8"; do
        set -- $c
        l=$(mbs "$@" --direct n)
        c1=$(mbs "$@" --remote)
        c2=$(mbs "$@" --rails)
        echo "round $r $1-$2 bs=$3 qd=$4: local $l ctl $c1 rails $c2 MB/s" | tee -a "$out"
    done
done
echo "medians (MB/s):"
for c in read-seq read-rand write-seq; do
    grep " $c bs=" "$out" | python3 -c 'import sys, statistics as s
rows=[l.split() for l in sys.stdin]
l=s.median(float(r[6]) for r in rows); c=s.median(float(r[8]) for r in rows)
x=s.median(float(r[10]) for r in rows)
print("%s %s %s local %.1f, ctl %.1f (%.2f), rails %.1f (%.2f)" % (rows[0][2], rows[0][3],
      rows[0][4].rstrip(":"), l, c, c / l, x, x / l))'
done
