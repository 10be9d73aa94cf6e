#!/bin/sh
# A real Prometheus scrapes two engines in two processes (OTE_METRICS_ADDR,
# port 0 each): after one process wrote to and read from the other,
# sum(ote_transfer_bytes_total) queried from Prometheus's HTTP API equals
# the bytes moved, and both targets are up. Skipped (exit 77, with a
# message) where the prometheus package is not installed.
set -eu
if ! command -v prometheus >/dev/null 2>&1; then
    echo "SKIP: prometheus not installed (apt-get install prometheus; contrib/install-deps.sh)"
    exit 77
fi
. "$(dirname "$0")/metrics_skip.sh"
peer="${ORBITTE_TEST_BUILDDIR:-$(dirname "$0")/..}/mp/metrics_peer"
d=$(mktemp -d)
pids=""
cleanup() {
    exec 3>&- 4>&- 2>/dev/null || true
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    for p in $pids; do wait "$p" 2>/dev/null || true; done
    rm -rf "$d"
}
trap cleanup EXIT INT TERM

# The value after KEY in FILE, waited for up to 60 s.
field() {
    i=0
    while ! grep -q "^$2 " "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -le 600 ] || { echo "FAIL: no '$2' from $1"; cat "$1" "$1.err" 2>/dev/null; exit 1; }
        sleep 0.1
    done
    sed -n "s/^$2 //p" "$1" | head -n 1
}

export OTE_METRICS_ADDR=127.0.0.1:0 OTE_TLS=tcp OTE_LOG_LEVEL=warn
mkfifo "$d/in1" "$d/in2"
"$peer" <"$d/in1" >"$d/p1" 2>"$d/p1.err" &
pids="$pids $!"
exec 3>"$d/in1"
name1=$(field "$d/p1" name)
region1=$(field "$d/p1" region)
metrics1=$(field "$d/p1" metrics)
"$peer" "$name1" "$region1" <"$d/in2" >"$d/p2" 2>"$d/p2.err" &
pids="$pids $!"
exec 4>"$d/in2"
metrics2=$(field "$d/p2" metrics)
moved=$(field "$d/p2" moved)
echo "engines: $name1 (metrics $metrics1), second process (metrics $metrics2); moved $moved bytes"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$d/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: orbitte
    static_configs:
      - targets: ['$metrics1', '$metrics2']
YML
prometheus --config.file="$d/prometheus.yml" --storage.tsdb.path="$d/data" \
    --web.listen-address="127.0.0.1:$port" --log.level=warn >"$d/prom.log" 2>&1 &
pids="$pids $!"

query() {
    curl -s --max-time 5 "http://127.0.0.1:$port/api/v1/query" --data-urlencode "query=$1" |
        python3 -c 'import json, sys
r = json.load(sys.stdin)
v = r["data"]["result"] if r.get("status") == "success" else []
print(v[0]["value"][1] if v else "none")' 2>/dev/null || echo none
}

i=0
while :; do
    up=$(query 'count(up{job="orbitte"} == 1)')
    sum=$(query 'sum(ote_transfer_bytes_total{job="orbitte"})')
    engines=$(query 'count(count by (engine) (ote_build_info{job="orbitte"}))')
    if [ "$up" = 2 ] && [ "$engines" = 2 ] && [ "$sum" = "$moved" ]; then
        break
    fi
    i=$((i + 1))
    if [ $i -gt 120 ]; then
        echo "FAIL: Prometheus says up=$up engines=$engines sum(ote_transfer_bytes_total)=$sum; moved $moved"
        cat "$d/prom.log"
        exit 1
    fi
    sleep 0.5
done
echo "Prometheus on 127.0.0.1:$port: 2 targets up, 2 engines, sum(ote_transfer_bytes_total) = $sum = bytes moved"
echo "1 passed, 0 failed"
