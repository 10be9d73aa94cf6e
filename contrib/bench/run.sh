#!/bin/bash
# Every peer on this host, the same workloads, in interleaved rounds: each
# round runs every workload of every peer once, so that the ratios compare
# figures taken under the same conditions. Writes one Markdown table of the
# medians over the rounds, each with its ratio to ote_perftest's median of
# the same run, and the exact commands (docs/performance.md, "All peers,
# one command"). Nothing here is a test.
#
# Usage: contrib/bench/run.sh [--rounds N] [--quick] [--only nixl|python] [--out FILE]
#                             [--plot DIR] [--build DIR] [--wheels DIR]
#   --rounds N    rounds (default 3)
#   --quick       short measurements (a smoke run; figures are rough)
#   --only nixl   only the rows NIXL's goals compare, in minutes: orbitte.nixl
#                 (on lo alone, as ote_perftest --loopback, and on all
#                 interfaces), NIXL's wheel, ote_perftest tcp (8 B latency and the shapes
#                 with 1 thread), the tcp ping-pong and tcp stream without a
#                 library, and the 15,000-descriptor posts; the goals block
#                 has their lines only (NIXL's, and tcp's small end against
#                 the bare ping-pong and stream)
#   --only python the rows the Python goals compare: ote_perftest tcp's
#                 bandwidth (depth 2, its default, and depth 1: one batch in
#                 flight, as a sync call has) and orbitte.mooncake's
#                 batch_transfer_sync_write/read and its async calls two in
#                 flight (--depth 2), 1 thread
#   --out FILE    also write the table to FILE
#   --plot DIR    also draw the pictures of the table into DIR
#                 (contrib/bench/plot.py, which needs matplotlib:
#                 bandwidth-tcp.png, bandwidth-host.png, latency.png) and
#                 keep there what they and the table are drawn from
#                 (results.tsv, commands.tsv, notes.tsv, caption.txt,
#                 table.md)
#   --build DIR   the configured and built tree (default build)
#   --wheels DIR  where pip installs Mooncake's and NIXL's wheels (default
#                 ${XDG_CACHE_HOME:-~/.cache}/orbitte-bench/wheels); a peer
#                 that cannot be installed or run gets a row that says why
# Run from anywhere; paths are taken from the repository root.
set -u

rounds=3 quick=0 only= out= plot= build=build
wheels=${XDG_CACHE_HOME:-$HOME/.cache}/orbitte-bench/wheels
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift ;;
    --quick) quick=1 ;;
    --only)
        only=$2
        shift
        case $only in nixl | python) ;; *) echo "run.sh: --only takes nixl or python, not $only" >&2; exit 2 ;; esac
        ;;
    --out) out=$2; shift ;;
    --plot) plot=$2; shift ;;
    --build) build=$2; shift ;;
    --wheels) wheels=$2; shift ;;
    -h | --help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1 ;; # the build directory, as a plain argument
    esac
    shift
done

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
case $build in /*) ;; *) build=$top/$build ;; esac
case $out in '' | /*) ;; *) out=$OLDPWD/$out ;; esac
case $plot in '' | /*) ;; *) plot=$OLDPWD/$plot ;; esac
pt=$build/src/tools/ote_perftest
[ -x "$pt" ] || { echo "run.sh: no $pt: configure and make first (README.md)" >&2; exit 1; }
export OTE_LOG_LEVEL=error
plot_py=
if [ -n "$plot" ]; then # before the run, not after it: an interpreter with matplotlib
    for py in ${PYTHON:-} python3 /usr/bin/python3; do
        "$py" -c 'import matplotlib' 2>/dev/null && { plot_py=$py; break; }
    done
    [ -n "$plot_py" ] || {
        echo "run.sh: --plot needs matplotlib: apt-get install python3-matplotlib" \
            "(contrib/install-deps.sh) or pip install matplotlib" >&2
        exit 1
    }
    mkdir -p "$plot" || exit 1
fi

tmp=$(mktemp -d)
servers=
killtree() { # PID: its descendants, then itself
    for c in $(pgrep -P "$1"); do killtree "$c"; done
    kill "$1" 2>/dev/null
}
cleanup() {
    trap - EXIT INT TERM HUP
    for p in $servers; do kill "$p" 2>/dev/null; done
    for c in $(pgrep -P $$); do killtree "$c"; done # what is left of this script's work
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Threads of the bandwidth rows (orbitte.nixl's and the wheel's rows have one)
threads="1 2"
[ "$only" = nixl ] && threads=1
[ "$only" = python ] && threads=1
# Budgets: bytes moved per bandwidth measurement, iterations per latency one
if [ $quick = 1 ]; then
    budget=$((16 << 20)) lat_n=200 secs=0.2 tlim=30
else
    budget=$((128 << 20)) lat_n=5000 secs=0.5 tlim=60
fi
# Peers that move GB/s over tcp (ote_perftest, ucx_perftest's put_bw,
# orbitte.mooncake) move eight times the bytes, so that a measurement lasts
# a few hundred ms as iperf3's and memcpy's do, and a first request's costs
# weigh little; the slow ones (ucp_get, Mooncake's wheel) keep budget,
# which already lasts seconds for them.
if [ $quick = 1 ]; then
    tcp_budget=$budget
else
    tcp_budget=$((8 * budget))
fi
# Intra-host copies run ten times faster: eight times the bytes, so that a
# measurement lasts about as long and first touches of the pages weigh little.
if [ $quick = 1 ]; then
    host_budget=$budget
else
    host_budget=$((8 * budget))
fi
results=$tmp/results.tsv cmds=$tmp/commands.tsv notes=$tmp/notes.tsv
: >"$results"; : >"$cmds"; : >"$notes"
round=0

# rec KEY PEER VALUE [P99]: one figure of this round ("-" when it failed)
rec() { printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$1" "$2" "${3:--}" "${4:--}" >>"$results"; }
# cmd KEY PEER COMMAND...: the command, kept from the first round
cmd() {
    [ "$round" = 1 ] || return 0
    k=$1 p=$2
    shift 2
    printf '%s\t%s\t%s\n' "$k" "$p" "$*" >>"$cmds"
}
# note PEER TEXT: why a peer has no figures, or what its figures are
note() { grep -q "^$1	" "$notes" 2>/dev/null || printf '%s\t%s\n' "$1" "$2" >>"$notes"; }
tmo() { timeout -k 5 "$tlim" "$@"; }
lastline() { grep -v '^\s*$' "$1" 2>/dev/null | tail -n 1 | cut -c1-160 | tr '\t|' '  '; }
why() { # RC ERRFILE: why a command gave no figure
    case $1 in
    124 | 137) echo "timed out after $tlim s" ;;
    *) grep -E 'rror|ERROR|failed|ault|assert' "$2" | tail -n 1 | cut -c1-160 | tr '\t|' '  ' ;;
    esac
}

# The workloads: KEY SIZE BATCH (KEY: shape, then op and threads added)
# (1 MiB x 8 between 4 KiB x 128 and KV: ote_bw runs the rows that a goal
# compares one after the other)
shapes="4k:4096:128 1m:1048576:8 kv:16384:2048 64k:65536:32"

# --- ote_perftest ------------------------------------------------------------
ote_run() { # PEER TLS KEY args...: one ote_perftest --loopback, its JSON read
    peer=$1 tls=$2 key=$3
    shift 3
    # shellcheck disable=SC2086 # ote_extra: options of the peer, split
    set -- ${ote_extra:-} "$@"
    cmd "$key" "$peer" "ote_perftest --loopback -q -x $tls $*"
    rm -f "$tmp/ote.json"
    if tmo "$pt" --loopback -q -x "$tls" "$@" --json "$tmp/ote.json" >/dev/null 2>"$tmp/err"; then
        # The first figures' record (docs/performance.md, "ote_perftest --json")
        python3 -c 'import json,sys
rs=[r for r in map(json.loads, open(sys.argv[1])) if r.get("type") in ("result","kv_result")]
if not rs or rs[0]["schema"] != 1:
    sys.exit("run.sh: ote_perftest --json: %s" % ("schema %s, not 1" % rs[0]["schema"] if rs else "no figures"))
r=rs[0]
print(r["lat_p50_us"], r["lat_p99_us"]) if sys.argv[2]=="lat" else print(r["gbps"])' \
            "$tmp/ote.json" "${key%% *}" || echo "- -"
    else
        echo "- -"
    fi
}
ote_lat() { # PEER TLS [OPTIONS]: the 8-byte WRITE and READ round trips
    local ote_extra=${3:-}
    peer=$1 tls=$2
    for op in write read; do
        set -- $(ote_run "$peer" "$tls" "lat $op" -t ${op}_lat -s 8 -n $lat_n)
        rec "lat $op" "$peer" "${1:-}" "${2:-}"
    done
}
ote_bw() { # PEER TLS BUDGET [OPTIONS]: OPTIONS go to every ote_perftest of the peer
    local budget=$3 ote_extra=${4:-}
    peer=$1 tls=$2
    for op in write read; do
        for T in $threads; do # outside the shapes: 4 KiB, 1 MiB and KV of one T in a row
            for sh in $shapes; do
                IFS=: read -r name size batch <<<"$sh"
                key="$name $op T$T"
                if [ "$name" = kv ]; then
                    n=$((budget / (size * batch) / 2 + 1))
                    v=$(ote_run "$peer" "$tls" "$key" -t kv_$op --kv 32:64 -s 16k --region 64m -T $T -n $n)
                else
                    n=$((budget / (size * batch) / T + 1))
                    v=$(ote_run "$peer" "$tls" "$key" -t ${op}_bw -s $size -b $batch -T $T -n $n)
                fi
                rec "$key" "$peer" "${v%% *}"
            done
        done
    done
}

# --- ucx_perftest ------------------------------------------------------------
ucx_port=14100
ucx_one() { # ENV ARGS N PORT: one client against a fresh server, "Final" fields to ucx.N
    env $1 ucx_perftest -p $4 >/dev/null 2>&1 &
    s=$!
    servers="$servers $s"
    sleep 0.5
    tmo env $1 ucx_perftest 127.0.0.1 -p $4 $2 2>"$tmp/err.$3" | awk '/^Final/ {print $3, $6, $7}' >"$tmp/ucx.$3"
    kill $s 2>/dev/null
    wait $s 2>/dev/null
}
ucx_bw() { # KEY PEER ENV ARGS THREADS: MB/s summed over THREADS client/server pairs
    key=$1 peer=$2 e=$3 a=$4 T=$5
    cmd "$key" "$peer" "${e:+$e }ucx_perftest -p PORT & ${e:+$e }ucx_perftest 127.0.0.1 -p PORT $a$([ "$T" = 2 ] && echo ' (two pairs at once, summed)')"
    ucx_port=$((ucx_port + 2))
    for i in $(seq "$T"); do ucx_one "$e" "$a" "$i" $((ucx_port + i)) & done
    wait
    v=$(cat "$tmp"/ucx.[0-9] 2>/dev/null | awk 'NF {n++; s += $2 * 1.048576 / 1000} END {if (n == '"$T"') printf "%.3f", s}')
    rm -f "$tmp"/ucx.[0-9]
    rec "$key" "$peer" "$v"
}
ucx_lat() { # KEY PEER ENV ARGS FACTOR: p50 and p99 (-R 99), times FACTOR
    key=$1 peer=$2 e=$3 a=$4 f=$5
    cmd "$key" "$peer" "${e:+$e }ucx_perftest 127.0.0.1 -p PORT $a [-R 99]"
    ucx_port=$((ucx_port + 2))
    ucx_one "$e" "$a" 1 $ucx_port; p50=$(awk '{printf "%.2f", $1 * '"$f"'}' "$tmp/ucx.1")
    ucx_one "$e" "$a -R 99" 1 $((ucx_port + 1)); p99=$(awk '{printf "%.2f", $1 * '"$f"'}' "$tmp/ucx.1")
    rm -f "$tmp"/ucx.[0-9]
    rec "$key" "$peer" "$p50" "$p99"
}
tcp="-d lo -x tcp" cma="-d memory -x cma" ucp="UCX_TLS=tcp,self"
ucx_lat_tcp() {
    ucx_lat "lat write" "ucx_perftest tcp" "" "-t am_lat $tcp -s 8 -n $lat_n" 2
    ucx_lat "lat read" "ucx_perftest tcp" "$ucp" "-t ucp_get -s 8 -n $((lat_n / 8))" 1
}
ucx_lat_cma() {
    ucx_lat "lat write" "ucx_perftest cma" "" "-t put_lat $cma -D zcopy -s 8 -n $lat_n" 2
    ucx_lat "lat read" "ucx_perftest cma" "" "-t get $cma -D zcopy -s 8 -n $lat_n" 1
}
ucx_bw_tcp() {
    for sh in $shapes; do
        IFS=: read -r name size batch <<<"$sh"
        for T in 1 2; do
            n=$((tcp_budget / size / T + 1)) slow=$((budget / 16 / size / T + 1))
            ucx_bw "$name write T$T" "ucx_perftest tcp" "" "-t put_bw $tcp -D zcopy -s $size -n $n" $T
            ucx_bw "$name read T$T" "ucx_perftest tcp" "$ucp" "-t ucp_get -s $size -n $slow" $T
        done
    done
}
ucx_bw_cma() {
    for sh in $shapes; do
        IFS=: read -r name size batch <<<"$sh"
        for T in 1 2; do
            hn=$((host_budget / size / T + 1))
            ucx_bw "$name write T$T" "ucx_perftest cma" "" "-t put_bw $cma -D zcopy -s $size -n $hn" $T
            ucx_bw "$name read T$T" "ucx_perftest cma" "" "-t get $cma -D zcopy -s $size -n $hn" $T
        done
    done
    # The 1 MiB x 8 footprint in single messages: 8 MiB each
    hn=$((host_budget / (8 << 20) + 1))
    ucx_bw "1m write T1" "ucx_perftest cma, 8 MiB" "" "-t put_bw $cma -D zcopy -s 8388608 -n $hn" 1
    ucx_bw "1m read T1" "ucx_perftest cma, 8 MiB" "" "-t get $cma -D zcopy -s 8388608 -n $hn" 1
}

# --- iperf3, the bare tcp stream and memcpy ----------------------------------
sock_all() { # the host's own tcp stream between the same block layouts (2 connections a pool, as ote's)
    local peer="tcp stream, no library" one="tcp stream, one connection"
    for T in $threads; do
        for op in write read; do
            for sh in $shapes; do
                IFS=: read -r name size batch <<<"$sh"
                sc=$([ "$name" = kv ] && echo 1 || echo 0)
                cmd "$name $op T$T" "$peer" "sock_blocks $size $batch $T $sc $secs 2"
                rec "$name $op T$T" "$peer" "$(tmo "$tmp/sock_blocks" $size $batch $T $sc $secs 2 2>"$tmp/err")"
            done
        done
    done
    # One sending and one receiving thread: each connection of the rows
    # above has its own thread at either end, where ote's one worker (or
    # the caller progressing it) sends on both of its connections
    for op in write read; do
        cmd "1m $op T1" "$one" "sock_blocks 1048576 8 1 0 $secs 1"
        rec "1m $op T1" "$one" "$(tmo "$tmp/sock_blocks" 1048576 8 1 0 $secs 1 2>"$tmp/err")"
    done
}
iperf_all() {
    port=5301
    for sh in $shapes; do
        IFS=: read -r name size batch <<<"$sh"
        for T in 1 2; do
            t=$([ $quick = 1 ] && echo 1 || echo 2)
            cmd "$name write T$T" iperf3 "iperf3 -s -p PORT -1 & iperf3 -c 127.0.0.1 -p PORT -l $size -P $T -t $t"
            port=$((port + 1))
            iperf3 -s -p $port -1 >/dev/null 2>&1 &
            s=$!
            servers="$servers $s"
            sleep 0.5
            v=$(tmo iperf3 -c 127.0.0.1 -p $port -l "$size" -P $T -t "$t" -f g 2>"$tmp/err" |
                awk '/receiver/ && ($0 ~ /SUM/ || '"$T"' == 1) {printf "%.3f", $(NF - 2) / 8}')
            kill $s 2>/dev/null
            wait $s 2>/dev/null
            rec "$name write T$T" iperf3 "$v"
        done
    done
}
pingpong_all() { # the host's own round trip: WRITE's message sizes, then READ's
    local spec o sent back
    for spec in write:40:32 read:32:40; do
        IFS=: read -r o sent back <<<"$spec"
        cmd "lat $o" "tcp ping-pong, no library" "pingpong $lat_n $sent $back tcp"
        set -- $(tmo "$tmp/pingpong" $lat_n $sent $back tcp 2>"$tmp/err")
        rec "lat $o" "tcp ping-pong, no library" "${1:-}" "${2:-}"
    done
}
memcpy_all() {
    for sh in $shapes; do
        IFS=: read -r name size batch <<<"$sh"
        sc=$([ "$name" = kv ] && echo 1 || echo 0)
        for T in 1 2; do
            for op in write read; do
                cmd "$name $op T$T" memcpy "memcpy_blocks $size $batch $T $sc $secs"
                rec "$name $op T$T" memcpy "$(tmo "$tmp/memcpy_blocks" $size $batch $T $sc $secs 2>"$tmp/err")"
            done
        done
    done
}

# --- Python peers: Mooncake's wheel, orbitte.mooncake, NIXL's wheel ----------
mc_all() { # PEER IMPL PYTHONPATH LABEL BUDGET [MORE ARGS] (LABEL: the PYTHONPATH as the commands show it)
    peer=$1 impl=$2 pp=$3 ppl=$4
    local budget=$5 more=${6:-}
    mc=bindings/python/bench/mc_batch_write.py
    for op in write read; do
        a="--impl $impl --op $op --count 1 --size 8 --iters $((lat_n / 4)) --warmup 20$more"
        cmd "lat $op" "$peer" "PYTHONPATH=$ppl python3 $mc $a"
        set -- $(PYTHONPATH=$pp tmo python3 $mc $a 2>"$tmp/err" |
            python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print(r["p50_us"], r["p99_us"])' 2>/dev/null)
        rec "lat $op" "$peer" "${1:-}" "${2:-}"
        for sh in $shapes; do
            IFS=: read -r name size batch <<<"$sh"
            sc=$([ "$name" = kv ] && echo " --scatter")
            for T in $threads; do
                if [ "$name" = kv ]; then
                    it=$((budget / (size * batch) / T / 2 + 2)) wu=""
                else
                    # ote_perftest's -n for the shape and its warm-up (n/10, 1 to
                    # 100): the same calls timed after the same untimed ones
                    it=$((budget / (size * batch) / T + 1)) wu=$((it / 10))
                    wu=" --warmup $((wu < 1 ? 1 : wu > 100 ? 100 : wu))"
                fi
                a="--impl $impl --op $op --count $batch --size $size --threads $T --iters $it$wu$sc$more"
                cmd "$name $op T$T" "$peer" "PYTHONPATH=$ppl python3 $mc $a"
                PYTHONPATH=$pp tmo python3 $mc $a >"$tmp/mc.out" 2>"$tmp/err"
                rc=$?
                v=$(python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["aggregate_GBps"])' \
                    <"$tmp/mc.out" 2>/dev/null)
                [ -n "$v" ] || note "$peer $name $op T$T" "$(why $rc "$tmp/err")"
                rec "$name $op T$T" "$peer" "$v"
            done
        done
    done
}
nixl_all() { # PEER ENV PYTHONPATH LABEL (LABEL: the PYTHONPATH as the commands show it)
    peer=$1 envs=$2 pp=$3 ppl=$4
    specs="write:8:1 read:8:1"
    for sh in $shapes; do
        IFS=: read -r name size batch <<<"$sh"
        for op in write read; do
            # ote_perftest's shapes: two transfers in flight (its -D for *_bw,
            # nixl_xfer.py's --depth), KV as --kv 32:64 (32 layers of 64 blocks)
            specs="$specs $op:$size:$batch$([ "$name" = kv ] && echo :scatter:32)"
        done
    done
    cmd "all" "$peer" "$envs PYTHONPATH=$ppl python3 contrib/bench/nixl_xfer.py $specs --seconds $secs"
    tmo env $envs PYTHONPATH=$pp python3 contrib/bench/nixl_xfer.py $specs --seconds $secs \
        >"$tmp/nixl.out" 2>"$tmp/err"
    rc=$?
    [ $rc = 0 ] || note "$peer" "round $round: exit status $rc after $(grep -c '^{' "$tmp/nixl.out") of its $(echo $specs | wc -w) figures: $(why $rc "$tmp/err")"
    python3 - "$tmp/nixl.out" "$round" "$peer" >>"$results" <<'EOF'
import json, sys
names = {4096: "4k", 65536: "64k", 1048576: "1m", 16384: "kv"}
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    op, size, count = r["spec"].split(":")[:3]
    key = f"lat {op}" if size == "8" else f"{names[int(size)]} {op} T1"
    val = (r["p50_us"], r["p99_us"]) if size == "8" else (r["gbps"], "-")
    print(sys.argv[2], key, sys.argv[3], *val, sep="\t")
EOF
}

# The post of one 15,000-descriptor transfer (64-byte blocks, scattered), ms:
# make_prepped_xfer + transfer through NIXL's API (contrib/bench/nixl_post.py),
# and libote's own ote_batch_submit of as many requests (contrib/bench/batch_post.c)
post_all() { # PEER ENV PYTHONPATH LABEL REPS
    peer=$1 envs=$2 pp=$3 ppl=$4 reps=$5
    a="--descs 15000 --size 64 --reps $reps"
    cmd "post 15000" "$peer" "$envs PYTHONPATH=$ppl python3 contrib/bench/nixl_post.py $a"
    # (NIXL's log lines share stdout: the figures are the JSON line)
    v=$(tmo env $envs PYTHONPATH=$pp python3 contrib/bench/nixl_post.py $a 2>"$tmp/err" | grep '^{' |
        python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print(r["post_ms_p50"], r["post_ms_p90"])' 2>/dev/null)
    [ -n "$v" ] || note "$peer post 15000" "$(why $? "$tmp/err")"
    rec "post 15000" "$peer" $v
}
post_c() {
    cmd "post 15000" "ote_batch_submit tcp" "OTE_TLS=tcp batch_post 15000 64 50"
    v=$(OTE_TLS=tcp LD_LIBRARY_PATH=$build/src/.libs tmo "$tmp/batch_post" 15000 64 50 2>"$tmp/err" |
        python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); print(r["post_ms_p50"], r["post_ms_p90"])' 2>/dev/null)
    [ -n "$v" ] || note "ote_batch_submit tcp post 15000" "$(why $? "$tmp/err")"
    rec "post 15000" "ote_batch_submit tcp" $v
}

# --- set-up ------------------------------------------------------------------
cc -O2 -pthread -o "$tmp/memcpy_blocks" contrib/bench/memcpy_blocks.c || exit 1
cc -O2 -Iinclude -o "$tmp/batch_post" contrib/bench/batch_post.c -L"$build/src/.libs" -lote || exit 1
cc -O2 -o "$tmp/pingpong" contrib/bench/pingpong.c || exit 1
cc -O2 -pthread -o "$tmp/sock_blocks" contrib/bench/sock_blocks.c || exit 1
have_ucx=1 have_iperf=1 have_mc=1 have_nixl=1 have_omc=1
command -v ucx_perftest >/dev/null || { have_ucx=0; note "ucx_perftest tcp" "ucx_perftest not installed"; note "ucx_perftest cma" "ucx_perftest not installed"; note "ucx_perftest cma, 8 MiB" "ucx_perftest not installed"; }
command -v iperf3 >/dev/null || { have_iperf=0; note iperf3 "iperf3 not installed"; }

mkdir -p "$tmp/py"
cp -r bindings/python/orbitte "$tmp/py/"
(cd bindings/python && ORBITTE_BUILD_DIR=$build python3 setup.py -q build_ext \
    --build-lib "$tmp/py" --build-temp "$tmp/pybuild") >"$tmp/err" 2>&1 ||
    { have_omc=0; note "orbitte.mooncake tcp" "the extension did not build: $(lastline "$tmp/err")"; }

if ! PYTHONPATH=$wheels python3 -c 'import mooncake.engine, nixl._api' 2>/dev/null; then
    mkdir -p "$wheels"
    echo "run.sh: pip install --target $wheels mooncake-transfer-engine-non-cuda nixl" >&2
    python3 -m pip install -q --target "$wheels" mooncake-transfer-engine-non-cuda nixl >"$tmp/pip" 2>&1 ||
        echo "run.sh: pip: $(lastline "$tmp/pip")" >&2
fi
PYTHONPATH=$wheels python3 -c 'import mooncake.engine' 2>"$tmp/err" ||
    { have_mc=0; note "Mooncake wheel tcp" "cannot import mooncake.engine from $wheels: $(lastline "$tmp/err")"; }
PYTHONPATH=$wheels python3 -c 'from nixl._api import nixl_agent' 2>"$tmp/err" ||
    { have_nixl=0; note "NIXL wheel, UCX tcp" "cannot import nixl._api from $wheels: $(lastline "$tmp/err")"; }
# orbitte.nixl runs the same script through the import shim (numpy from the wheels' directory).
# Its row compared with ote_perftest uses what ote_perftest --loopback uses: both
# processes on the loopback interface alone (ote_perftest's listen on 127.0.0.1,
# one tcp interface, one connection). A NIXL agent's engine listens on every
# interface (0.0.0.0): on this host lo and eth0, and libote sprays a peer's
# slices over both rails, two connections to the same host; that row
# ("all interfaces") is shown beside it, without a goal.
onixl_env="OTE_TLS=tcp OTE_NET_DEVICES=lo"
onixl_all="orbitte.nixl tcp, all interfaces"
have_onixl=$have_omc
[ $have_onixl = 1 ] && { PYTHONPATH=$tmp/py:$wheels python3 -m orbitte.nixl.shim "$tmp/shim" >/dev/null 2>"$tmp/err" &&
    PYTHONPATH=$tmp/shim:$tmp/py:$wheels python3 -c 'import numpy, nixl; assert nixl.__orbitte__' >/dev/null 2>"$tmp/err"; } ||
    { have_onixl=0; note "orbitte.nixl tcp" "the shim does not import: $(lastline "$tmp/err")"; }

load0=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date -u '+%Y-%m-%d %H:%M UTC')
# The host's huge-page policies: ote_mem_alloc's memory (shmem) gets huge pages only where shmem_enabled allows
thp_choice() { sed -n 's/.*\[\([a-z_]*\)\].*/\1/p' "/sys/kernel/mm/transparent_hugepage/$1" 2>/dev/null || true; }
thp="THP enabled=$(thp_choice enabled), shmem_enabled=$(thp_choice shmem_enabled)"

# --- rounds ------------------------------------------------------------------
for round in $(seq "$rounds"); do
    echo "run.sh: round $round of $rounds" >&2
    if [ "$only" = nixl ]; then
        # NIXL's rows and what their goals compare them to, in the same minutes
        ote_lat "ote_perftest tcp" tcp
        pingpong_all
        ote_bw "ote_perftest tcp" tcp $tcp_budget
        sock_all
        [ $have_onixl = 1 ] && nixl_all "orbitte.nixl tcp" "$onixl_env" "$tmp/shim:$tmp/py:$wheels" SHIM:ORBITTE:WHEELS
        [ $have_onixl = 1 ] && nixl_all "$onixl_all" OTE_TLS=tcp "$tmp/shim:$tmp/py:$wheels" SHIM:ORBITTE:WHEELS
        [ $have_nixl = 1 ] && nixl_all "NIXL wheel, UCX tcp" UCX_TLS=tcp "$wheels" WHEELS
        post_c
        [ $have_onixl = 1 ] && post_all "orbitte.nixl tcp" OTE_TLS=tcp "$tmp/shim:$tmp/py:$wheels" SHIM:ORBITTE:WHEELS 50
        [ $have_nixl = 1 ] && post_all "NIXL wheel, UCX tcp" "UCX_TLS=tcp UCX_MODULES=^ib" "$wheels" WHEELS 5
        continue
    fi
    if [ "$only" = python ]; then
        # orbitte.mooncake's sync batch calls and ote_perftest in the same minutes
        ote_bw "ote_perftest tcp" tcp $tcp_budget
        ote_bw "ote_perftest tcp, depth 1" tcp $tcp_budget "-D 1"
        [ $have_omc = 1 ] && mc_all "orbitte.mooncake tcp" orbitte "$tmp/py" ORBITTE $tcp_budget
        # async calls, two in flight: ote_perftest's default depth
        [ $have_omc = 1 ] && mc_all "orbitte.mooncake tcp, async depth 2" orbitte "$tmp/py" ORBITTE \
            $tcp_budget " --depth 2"
        continue
    fi
    # Latencies first, each ote_perftest figure beside its reference in
    # the same minute (the goals compare them within a round)
    ote_lat "ote_perftest tcp" tcp
    [ $have_ucx = 1 ] && ucx_lat_tcp
    pingpong_all
    ote_lat "ote_perftest cma" cma --malloc
    [ $have_ucx = 1 ] && ucx_lat_cma
    ote_lat "ote_perftest shm" shm
    # Then bandwidth by transport: tcp, cma, the shared mapping, each with its references
    ote_bw "ote_perftest tcp" tcp $tcp_budget
    sock_all
    [ $have_ucx = 1 ] && ucx_bw_tcp
    [ $have_iperf = 1 ] && iperf_all
    # cma is the path for memory the application allocated itself (shm needs ote_mem_alloc's)
    ote_bw "ote_perftest cma" cma $host_budget --malloc
    [ $have_ucx = 1 ] && ucx_bw_cma
    memcpy_all
    ote_bw "ote_perftest shm" shm $host_budget
    [ $have_omc = 1 ] && mc_all "orbitte.mooncake tcp" orbitte "$tmp/py" ORBITTE $tcp_budget
    [ $have_mc = 1 ] && mc_all "Mooncake wheel tcp" mooncake "$wheels" WHEELS $budget
    [ $have_onixl = 1 ] && nixl_all "orbitte.nixl tcp" "$onixl_env" "$tmp/shim:$tmp/py:$wheels" SHIM:ORBITTE:WHEELS
    [ $have_onixl = 1 ] && nixl_all "$onixl_all" OTE_TLS=tcp "$tmp/shim:$tmp/py:$wheels" SHIM:ORBITTE:WHEELS
    [ $have_nixl = 1 ] && nixl_all "NIXL wheel, UCX tcp" UCX_TLS=tcp "$wheels" WHEELS
    post_c
    [ $have_onixl = 1 ] && post_all "orbitte.nixl tcp" OTE_TLS=tcp "$tmp/shim:$tmp/py:$wheels" SHIM:ORBITTE:WHEELS 50
    [ $have_nixl = 1 ] && post_all "NIXL wheel, UCX tcp" "UCX_TLS=tcp UCX_MODULES=^ib" "$wheels" WHEELS 5
done

python3 contrib/bench/table.py "$results" "$cmds" "$notes" \
    "$start" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(nproc)" \
    "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)" "$rounds" "$quick" "$thp" "$only" >"$tmp/table.md" || exit 1
cat "$tmp/table.md"
[ -z "$out" ] || cp "$tmp/table.md" "$out"
if [ -n "$plot" ]; then # the pictures, from the figures the table was made of
    cp "$results" "$cmds" "$notes" "$tmp/table.md" "$plot/" || exit 1
    echo "$start, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)," \
        "$rounds round(s)$([ $quick = 1 ] && echo ', --quick')$([ -n "$only" ] && echo ", --only $only"), load average" \
        "${load0%% *} at the start, $(cut -d' ' -f1 /proc/loadavg) at the end" >"$plot/caption.txt"
    "$plot_py" contrib/bench/plot.py --caption "$(cat "$plot/caption.txt")" "$plot/results.tsv" "$plot" >&2 || exit 1
fi
