#!/bin/bash
# The soak (docs/reliability.md): PEERS processes (test/soak/ote_soak) send
# one another READs, WRITEs and notifications for MINUTES while a chaos
# driver kills and restarts peers (kill -9 and clean exit), takes links
# down and up, kills and restarts the metadata store, and makes receivers
# slow so that senders fill their notification backlogs. Then every peer
# is stopped, and contrib/soak_check.py checks the invariants over the
# logs and prints the counts; the exit status is 1 when one is violated.
#
# As root with `ip netns`: peers alternate between two network namespaces
# joined by two veth rails (rail0, rail1: the data rails, OTE_NET_DEVICES)
# and a third veth (ctl: control plane and the store, never taken down).
# Otherwise everything runs on loopback and no link is taken down (said so).
#
# Usage: contrib/soak.sh --minutes M --build BUILD_DIR [--peers N (>= 4)]
#        [--store redis|etcd] [--out DIR] [--loopback] [--tolerate KIND,...]
# --tolerate: violations of these kinds (as the check prints them, e.g.
# "open fds grew,unreachable") are reported but do not fail the run.
set -u
minutes=2
build=
peers=4
store=redis
out=
force_lo=0
tolerate=
while [ $# -gt 0 ]; do
    case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --store) store=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --loopback) force_lo=1; shift ;;
    --tolerate) tolerate=$2; shift 2 ;;
    *) echo "usage: $0 --minutes M --build BUILD_DIR [--peers N] [--store redis|etcd] [--out DIR] [--loopback] [--tolerate KIND,...]" >&2
       exit 2 ;;
    esac
done
top=$(cd "$(dirname "$0")/.." && pwd)
[ -n "$build" ] || { echo "soak: --build BUILD_DIR is required" >&2; exit 2; }
build=$(cd "$build" && pwd)
prog=$build/test/soak/ote_soak
if [ ! -x "$prog" ]; then
    make -C "$build/test" soak/ote_soak > /dev/null || { echo "soak: cannot build $prog" >&2; exit 2; }
fi
[ "$peers" -ge 4 ] && [ "$peers" -le 8 ] || { echo "soak: --peers must be 4..8" >&2; exit 2; }
case $store in
redis) command -v redis-server > /dev/null || { echo "soak: redis-server not installed" >&2; exit 2; } ;;
etcd) command -v etcd > /dev/null || { echo "soak: etcd not installed" >&2; exit 2; } ;;
*) echo "soak: --store redis or etcd" >&2; exit 2 ;;
esac
out=${out:-$(mktemp -d /tmp/ote-soak.XXXXXX)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# A previous run's logs in the same folder would be read as this one's.
rm -rf "$out"/p*.log "$out"/p*.err "$out/store" "$out/store.log"
# Restarts run this copy: a rebuild during a long run changes nothing.
cp "$prog" "$out/ote_soak"
prog=$out/ote_soak
chaos=$out/chaos.log
: > "$chaos"
note() { echo "$(date -u +%H:%M:%S) $*" >> "$chaos"; }

# Short timeouts so that failures end tasks quickly; a small backlog so that
# slow receivers fill it. The peer waits for each batch at most
# OTE_XFER_TIMEOUT_MS + OTE_NOTIFY_TIMEOUT_MS + SOAK_SLACK_MS.
export OTE_XFER_TIMEOUT_MS=2000 OTE_NOTIFY_TIMEOUT_MS=300 OTE_CONNECT_TIMEOUT_MS=1000
export OTE_MAX_NOTIF_BACKLOG=64 OTE_METADATA_TTL_S=3 OTE_METADATA_TIMEOUT_MS=1000
export SOAK_SLACK_MS=5000
# Transports: p0 and p1 live through the run with all four; every other
# peer (killed and restarted) talks to those two only, with one set per
# incarnation in turn. Each set has a network transport, so every pair
# shares one (OTE_ERR_UNREACHABLE is never right here); uct_tcp alone makes
# its pairs use it.
tls_all='tcp,\shm,cma,uct_tcp'
tls_sets=('uct_tcp' 'tcp,\shm' 'tcp,cma' 'tcp')

ns_a=ote_soak_a$$
ns_b=ote_soak_b$$
netns=0
if [ "$force_lo" = 0 ] && [ "$(id -u)" = 0 ] && ip netns add "$ns_a" 2> /dev/null; then
    netns=1
fi
declare -a pid inc
store_pid=
cleanup() {
    for i in "${!pid[@]}"; do
        [ -n "${pid[$i]}" ] && kill -9 "${pid[$i]}" 2> /dev/null
    done
    [ -n "$store_pid" ] && kill -9 "$store_pid" 2> /dev/null
    wait 2> /dev/null
    if [ "$netns" = 1 ]; then
        ip netns del "$ns_a" 2> /dev/null
        ip netns del "$ns_b" 2> /dev/null
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ "$netns" = 1 ]; then
    ip netns add "$ns_b"
    for link in rail0:0 rail1:1 ctl:9; do
        name=${link%%:*} net=${link##*:}
        ip link add "os$$a$net" type veth peer name "os$$b$net"
        ip link set "os$$a$net" netns "$ns_a"
        ip link set "os$$b$net" netns "$ns_b"
        ip -n "$ns_a" link set "os$$a$net" name "$name"
        ip -n "$ns_b" link set "os$$b$net" name "$name"
        ip -n "$ns_a" addr add "10.86.$net.1/24" dev "$name"
        ip -n "$ns_b" addr add "10.86.$net.2/24" dev "$name"
        ip -n "$ns_a" link set "$name" up
        ip -n "$ns_b" link set "$name" up
    done
    ip -n "$ns_a" link set lo up
    ip -n "$ns_b" link set lo up
    # Engines listen on 0.0.0.0 (a listen address names the one device that
    # transports bind) and advertise the default route's address: ctl's.
    ip -n "$ns_a" route add default via 10.86.9.2
    ip -n "$ns_b" route add default via 10.86.9.1
    export OTE_NET_DEVICES=rail0,rail1
    store_host=10.86.9.1
    store_port=23790
    mode="network namespaces $ns_a and $ns_b, two veth rails (rail0, rail1) and a control link"
else
    store_host=127.0.0.1
    store_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mode="loopback (needs root and ip netns for namespaces): links are not taken down"
fi
# Where peer i runs: a command prefix and its control address.
in_ns() {
    if [ "$netns" = 1 ]; then
        if [ $(($1 % 2)) = 0 ]; then echo "ip netns exec $ns_a"; else echo "ip netns exec $ns_b"; fi
    fi
}
ctl_addr() {
    if [ "$netns" = 1 ]; then echo "0.0.0.0:0"; else echo "127.0.0.1:0"; fi
}
echo "soak: $mode; $peers peers, $store metadata, $minutes minutes, logs in $out"
note "MODE $mode"
# The shell's own reports (a job killed by the chaos driver) go to a log.
exec 2>> "$out/driver.err"

store_up() {
    local ns=
    [ "$netns" = 1 ] && ns="ip netns exec $ns_a"
    mkdir -p "$out/store"
    if [ "$store" = redis ]; then
        $ns redis-server --port "$store_port" --bind "$store_host" --dir "$out/store" \
            --save '' --appendonly no --protected-mode no >> "$out/store.log" 2>&1 &
        export OTE_METADATA="redis://$store_host:$store_port"
    else
        local c="http://$store_host:$store_port" p="http://$store_host:$((store_port + 1))"
        $ns etcd --name soak --data-dir "$out/store/etcd" --listen-client-urls "$c" \
            --advertise-client-urls "$c" --listen-peer-urls "$p" \
            --initial-advertise-peer-urls "$p" --initial-cluster "soak=$p" \
            --log-level warn >> "$out/store.log" 2>&1 &
        export OTE_METADATA="etcd://$store_host:$store_port"
    fi
    store_pid=$!
    for _ in $(seq 100); do
        $ns bash -c "exec 3<>/dev/tcp/$store_host/$store_port" 2> /dev/null && return 0
        sleep 0.1
    done
    echo "soak: the $store server did not start (see $out/store.log)"
    exit 2
}
store_down() {
    kill -9 "$store_pid" 2> /dev/null
    wait "$store_pid" 2> /dev/null
    store_pid=
}

start_peer() {
    local i=$1 tls
    inc[$i]=$((${inc[$i]:--1} + 1))
    if [ "$i" -lt 2 ]; then tls=$tls_all; else tls=${tls_sets[$(((i - 2 + inc[i]) % 4))]}; fi
    $(in_ns "$i") env OTE_TLS="$tls" "$prog" --id "$i" --peers "$peers" --inc "${inc[$i]}" \
        --out "$out" --listen "$(ctl_addr "$i")" > "$out/p$i.${inc[$i]}.err" 2>&1 &
    pid[$i]=$!
    note "START p$i.${inc[$i]} pid=${pid[$i]} OTE_TLS=$tls"
}
# Signal peer i once it has its handlers (its log says START): $2 (-USR1...).
signal_peer() {
    local i=$1 n=0
    while ! grep -q START "$out/p$i.${inc[$i]}.log" 2> /dev/null && [ $n -lt 100 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    kill "$2" "${pid[$i]}" 2> /dev/null
}
# Wait for peer i to exit, up to $2 seconds; then record how it ended ($3).
reap_peer() {
    local i=$1 n=0 rc
    while kill -0 "${pid[$i]}" 2> /dev/null && [ $n -lt $(($2 * 10)) ]; do
        sleep 0.1
        n=$((n + 1))
    done
    if kill -0 "${pid[$i]}" 2> /dev/null; then
        note "VIOL EXIT_HUNG p$i.${inc[$i]} still running $2 s after SIGTERM"
        kill -9 "${pid[$i]}"
    fi
    wait "${pid[$i]}" 2> /dev/null
    rc=$?
    note "END p$i.${inc[$i]} $3 rc=$rc"
    pid[$i]=
}

store_up
note "STORE up $OTE_METADATA"
for i in $(seq 0 $((peers - 1))); do start_peer "$i"; done

end=$((SECONDS + minutes * 60))
n_chaos=0
while [ $SECONDS -lt $end ]; do
    sleep "$((2 + RANDOM % 3)).$((RANDOM % 10))"
    # A peer that died by itself is a violation; it is started again.
    for i in "${!pid[@]}"; do
        if [ -n "${pid[$i]}" ] && ! kill -0 "${pid[$i]}" 2> /dev/null; then
            wait "${pid[$i]}" 2> /dev/null
            note "VIOL DIED p$i.${inc[$i]} rc=$? (not killed by the soak)"
            start_peer "$i"
        fi
    done
    victim=$((2 + RANDOM % (peers - 2)))
    n_chaos=$((n_chaos + 1))
    case $((RANDOM % 6)) in
    0)
        note "CHAOS kill9 p$victim.${inc[$victim]}"
        kill -9 "${pid[$victim]}"
        reap_peer "$victim" 5 killed
        sleep "0.$((RANDOM % 10))"
        start_peer "$victim"
        ;;
    1)
        note "CHAOS term p$victim.${inc[$victim]}"
        signal_peer "$victim" -TERM
        reap_peer "$victim" 20 term
        start_peer "$victim"
        ;;
    2 | 3)
        if [ "$netns" = 1 ]; then
            ns=$ns_a
            [ $((RANDOM % 2)) = 1 ] && ns=$ns_b
            rails=rail$((RANDOM % 2))
            [ "$((RANDOM % 4))" = 0 ] && rails="rail0 rail1"
            note "CHAOS linkdown $ns $rails"
            for r in $rails; do ip -n "$ns" link set "$r" down; done
            sleep "$((1 + RANDOM % 3))"
            for r in $rails; do ip -n "$ns" link set "$r" up; done
            note "CHAOS linkup $ns $rails"
        else
            note "CHAOS skipped linkdown (loopback)"
        fi
        ;;
    4)
        note "CHAOS store kill9"
        store_down
        sleep "$((1 + RANDOM % 3))"
        store_up
        note "CHAOS store up"
        ;;
    5)
        slow=$((RANDOM % peers))
        note "CHAOS slow p$slow.${inc[$slow]}"
        signal_peer "$slow" -USR2
        ;;
    esac
done

# Stop: every peer stops sending, then drains what it received and exits.
note "STOP"
for i in "${!pid[@]}"; do signal_peer "$i" -USR1; done
for i in "${!pid[@]}"; do
    n=0
    while ! grep -q QUIESCED "$out/p$i.${inc[$i]}.log" 2> /dev/null && [ $n -lt 300 ]; do
        sleep 0.1
        n=$((n + 1))
    done
    grep -q QUIESCED "$out/p$i.${inc[$i]}.log" ||
        note "VIOL QUIESCE_HUNG p$i.${inc[$i]} still sending 30 s after SIGUSR1"
done
sleep 1
for i in "${!pid[@]}"; do signal_peer "$i" -TERM; done
for i in "${!pid[@]}"; do reap_peer "$i" 20 final; done
store_down
note "DONE chaos_actions=$n_chaos"
python3 "$top/contrib/soak_check.py" "$out" "$tolerate"
