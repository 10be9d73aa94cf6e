#!/bin/sh
# The same ote_perftest workloads through two builds of the library, in
# interleaved rounds (each round runs every workload through both builds,
# alternating which goes first), then the median of each and the ratio
# AFTER/BEFORE. Used to show that a change that should not change speed
# (a refactor) did not. Usage:
#   contrib/bench/compare-builds.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [ROUNDS [PATTERN]]
# PATTERN (an extended regular expression) keeps the workloads whose name
# matches it, e.g. 'tcp_write' or '_d1$'.
# Bandwidth rows are GB/s (10^9 bytes per second, higher is better),
# latency rows the p50 (or p99) of 8-byte round trips in microseconds
# (lower is better). Nothing here is a test.
set -u
before=${1:?usage: compare-builds.sh BEFORE_BUILD AFTER_BUILD [ROUNDS [PATTERN]]}
after=${2:?usage: compare-builds.sh BEFORE_BUILD AFTER_BUILD [ROUNDS [PATTERN]]}
rounds=${3:-5}
pattern=${4:-.}
for b in "$before" "$after"; do
    [ -x "$b/src/tools/ote_perftest" ] || { echo "no ote_perftest under $b/src/tools" >&2; exit 1; }
done
export OTE_LOG_LEVEL=error
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# workload name | ote_perftest arguments | column of -q output (3: GB/s, 5: p50 us)
workloads='tcp_write_1m_x8|-x tcp -t write_bw -s 1m -b 8|3
tcp_read_1m_x8|-x tcp -t read_bw -s 1m -b 8|3
tcp_write_64k_x32|-x tcp -t write_bw -s 64k -b 32|3
tcp_write_1m_x8_d1|-x tcp -t write_bw -s 1m -b 8 -D 1|3
tcp_write_64k_x32_d1|-x tcp -t write_bw -s 64k -b 32 -D 1|3
tcp_read_1m_x8_d1|-x tcp -t read_bw -s 1m -b 8 -D 1|3
tcp_write_4k_x128|-x tcp -t write_bw -s 4k -b 128|3
tcp_read_4k_x128|-x tcp -t read_bw -s 4k -b 128|3
cma_write_1m_x8|-x cma -t write_bw -s 1m -b 8|3
cma_read_1m_x8|-x cma -t read_bw -s 1m -b 8|3
cma_write_64k_x32|-x cma -t write_bw -s 64k -b 32|3
cma_kv_write|-x cma -t kv_write --kv 32:64 -s 16k --region 64m|3
shm_write_1m_x8|-x shm -t write_bw -s 1m -b 8|3
shm_kv_write|-x shm -t kv_write --kv 32:64 -s 16k --region 64m|3
tcp_kv_write|-x tcp -t kv_write --kv 32:64 -s 16k --region 64m|3
tcp_kv_read|-x tcp -t kv_read --kv 32:64 -s 16k --region 64m|3
tcp_write_lat_8b_p50_us|-x tcp -t write_lat -s 8|5
tcp_read_lat_8b_p50_us|-x tcp -t read_lat -s 8|5
cma_write_lat_8b_p50_us|-x cma -t write_lat -s 8|5
shm_write_lat_8b_p50_us|-x shm -t write_lat -s 8|5
tcp_write_lat_8b_p99_us|-x tcp -t write_lat -s 8|6'
workloads=$(echo "$workloads" | awk -F'|' -v p="$pattern" '$1 ~ p')
[ -n "$workloads" ] || { echo "no workload name matches $pattern" >&2; exit 1; }

run() { # build args column
    # shellcheck disable=SC2086
    "$1/src/tools/ote_perftest" --loopback -q $2 2>/dev/null |
        awk -v c="$3" '!/^#/ && NF >= 6 {print $c; exit}'
}

r=1
while [ "$r" -le "$rounds" ]; do
    echo "$workloads" | while IFS='|' read -r name args col; do
        if [ $((r % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
        for which in $order; do
            if [ "$which" = before ]; then b=$before; else b=$after; fi
            v=$(run "$b" "$args" "$col")
            echo "$name $which ${v:-fail}" >>"$out"
        done
    done
    echo "round $r done" >&2
    r=$((r + 1))
done

printf '| workload | before (median) | after (median) | after/before | rounds before | rounds after |\n'
printf '|---|---|---|---|---|---|\n'
echo "$workloads" | while IFS='|' read -r name args col; do
    awk -v n="$name" '
        function median(a, k,   i, j, t) {
            for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
        }
        $1 == n && $3 != "fail" { if ($2 == "before") { b[++nb] = $3; sb = sb (sb ? ", " : "") $3 }
                                  else { a[++na] = $3; sa = sa (sa ? ", " : "") $3 } }
        END {
            mb = nb ? median(b, nb) : "fail"; ma = na ? median(a, na) : "fail"
            ratio = (nb && na && mb > 0) ? sprintf("%.2f", ma / mb) : "-"
            printf "| %s | %s | %s | %s | %s | %s |\n", n, mb, ma, ratio, sb, sa
        }' "$out"
done
