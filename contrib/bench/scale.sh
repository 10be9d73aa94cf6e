#!/bin/bash
# The scale curves of docs/performance.md ("Scale"): how OrbitTE's costs
# grow with the requests of a batch, the regions of a target, the peers of
# an initiator, the senders of notifications, and the requests of a batch
# through Python. Each round runs every curve once (interleaved rounds);
# each point of scale.csv is the median over the rounds. Nothing here is a
# test; test/tools/scale_quick.sh runs --quick as a smoke test.
#
# Usage: contrib/bench/scale.sh [--quick] [--rounds N] [--out DIR]
#                               [--build DIR] [--curves LIST] [--no-netns]
#   --quick       every curve, small points, in seconds (a smoke run;
#                 its figures are not results)
#   --rounds N    rounds (default 3; 2 with --quick)
#   --out DIR     where to write (default scale-out): raw.csv (every round),
#                 scale.csv (the medians), commands.txt (the exact commands),
#                 skipped.txt (a curve that could not run, and why) and,
#                 with matplotlib, requests.png, regions.png, peers.png,
#                 notify.png, python.png
#   --build DIR   the configured and built tree (default build)
#   --curves LIST a comma list of requests,regions,peers,notify,python
#                 (default all)
#   --no-netns    the peers curve on loopback only; by default, as root
#                 with `ip netns`, it also runs between two network
#                 namespaces joined by a veth pair (series "tcp netns"),
#                 which this script makes and deletes however it ends
# Exit status 1 when a curve failed in a round (the rest is still written).
# Run from anywhere; paths are taken from the repository root.
set -u

rounds= quick=0 out=scale-out build=build curves=requests,regions,peers,notify,python netns=1
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 ;;
    --no-netns) netns=0 ;;
    --rounds) rounds=$2; shift ;;
    --out) out=$2; shift ;;
    --build) build=$2; shift ;;
    --curves) curves=$2; shift ;;
    -h | --help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "scale.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$rounds" ] || rounds=$((quick ? 2 : 3))
top=$(cd "$(dirname "$0")/../.." && pwd)
case $build in /*) ;; *) build=$PWD/$build ;; esac
case $out in /*) ;; *) out=$PWD/$out ;; esac
scale=$build/src/tools/ote_scale
[ -x "$scale" ] || { echo "scale.sh: no $scale: configure and make first (README.md)" >&2; exit 1; }
mkdir -p "$out" || exit 1
# Interpreters: one with numpy for the Python curve, one with matplotlib for
# the pictures (Debian's has both with contrib/install-deps.sh); PYTHON first.
pick() { # MODULE: the first interpreter that imports it
    for p in ${PYTHON:-} python3 /usr/bin/python3; do
        "$p" -c "import $1" 2>/dev/null && { echo "$p"; return 0; }
    done
    return 1
}
py=$(pick numpy) || py=
plot_py=$(pick matplotlib) || plot_py=${PYTHON:-python3}
export OTE_LOG_LEVEL=${OTE_LOG_LEVEL:-error}

# The points of each curve
if [ $quick = 1 ]; then
    tlim=120
    a_requests="--counts 1,16,256,4096 --sizes 64,4096 --reps 3"
    a_regions="--counts 1,100,1000 --checks 256 --reps 3"
    a_peers="--counts 1,4 --per-peer 4 --idle 0.2"
    a_notify="--counts 1,8 --messages 400"
    a_python="--counts 1,256,4096 --sizes 64,4096 --reps 2"
else
    tlim=3600
    a_requests="--counts 1,16,256,1024,4096,15000,65536,262144,1048576 --sizes 64,4096 --reps 5"
    a_regions="--counts 1,10,100,1000,10000,100000 --checks 4096 --reps 5"
    a_peers="--counts 1,4,16,64,256 --per-peer 16 --idle 5"
    a_notify="--counts 1,8,64 --messages 64000"
    a_python="--counts 1,16,256,1024,4096,15000,65536,262144,1048576 --sizes 64,4096 --reps 3"
fi
a_peers_netns=$a_peers

: >"$out/raw.csv"
: >"$out/skipped.txt"
echo "round,curve,series,x,metric,value" >"$out/raw.csv"
{
    echo "# contrib/bench/scale.sh$([ $quick = 1 ] && echo ' --quick') --rounds $rounds, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "# $(nproc) CPUs, $(uname -r), OTE_TLS=${OTE_TLS:-tcp}"
} >"$out/commands.txt"

# The Python curve needs the orbitte extension of this build and numpy.
pypath=
if [[ ,$curves, == *,python,* ]]; then
    if [ -z "$py" ]; then
        echo "python: no interpreter with numpy (contrib/install-deps.sh installs python3-numpy)" >>"$out/skipped.txt"
    elif ldd "$build/src/.libs/libote.so" 2>/dev/null | grep -q 'libasan\|libtsan'; then
        echo "python: a sanitizer build's libote cannot be loaded into the interpreter" >>"$out/skipped.txt"
    else
        # Built once into the build tree, again only when its sources change.
        pypath=$build/python-scale/lib
        mkdir -p "$build/python-scale"
        if ! (cd "$top/bindings/python" && ORBITTE_BUILD_DIR=$build "$py" setup.py -q build \
            --build-base "$build/python-scale/tmp" --build-lib "$pypath" \
            >"$build/python-scale/build.log" 2>&1); then
            echo "python: the orbitte extension did not build ($build/python-scale/build.log)" >>"$out/skipped.txt"
            pypath=
        fi
    fi
fi

# The peers curve between two namespaces: the initiator in ns_i (10.199.N.1),
# the targets in ns_t (10.199.N.2), a veth pair between them.
ns_i= ns_t=
netns_down() {
    [ -n "$ns_i" ] && ip netns del "$ns_i" 2>/dev/null
    [ -n "$ns_t" ] && ip netns del "$ns_t" 2>/dev/null
    ns_i= ns_t=
}
if [ $netns = 1 ] && [[ ,$curves, == *,peers,* ]]; then
    id=$(($$ % 250 + 1))
    if [ "$(id -u)" != 0 ]; then
        echo "peers netns: needs root to create network namespaces (loopback only)" >>"$out/skipped.txt"
    elif ! ip netns add "osc$$i" 2>/dev/null; then
        echo "peers netns: \`ip netns add\` failed (no ip tool or no permission; loopback only)" >>"$out/skipped.txt"
    else
        ns_i=osc$$i
        trap 'netns_down' EXIT
        trap 'netns_down; exit 130' INT TERM HUP
        ns_t=osc$$t
        if ! { ip netns add "$ns_t" &&
            ip link add "osc$$a" type veth peer name "osc$$b" &&
            ip link set "osc$$a" netns "$ns_i" && ip link set "osc$$b" netns "$ns_t" &&
            ip -n "$ns_i" addr add "10.199.$id.1/24" dev "osc$$a" &&
            ip -n "$ns_t" addr add "10.199.$id.2/24" dev "osc$$b" &&
            ip -n "$ns_i" link set "osc$$a" up && ip -n "$ns_t" link set "osc$$b" up &&
            ip -n "$ns_i" link set lo up && ip -n "$ns_t" link set lo up; } 2>>"$out/skipped.txt"; then
            echo "peers netns: the namespaces could not be set up (loopback only)" >>"$out/skipped.txt"
            netns_down
        else
            # The veth pair up (the kernel marks it running a little later).
            for _ in $(seq 100); do
                ip netns exec "$ns_i" grep -qx up "/sys/class/net/osc$$a/operstate" && break
                sleep 0.05
            done
        fi
    fi
fi

run_curve() { # CURVE ROUND
    local c=$1 r=$2 args rc
    eval "args=\$a_$c"
    if [ "$c" = peers_netns ]; then
        [ -n "$ns_i" ] || return 0
        set -- ip netns exec "$ns_i" "$scale" peers $a_peers --listen "10.199.$id.1" \
            --target-netns "$ns_t" --target-ip "10.199.$id.2"
    elif [ "$c" = python ]; then
        [ -n "$pypath" ] || return 0
        set -- env PYTHONPATH="$pypath" "$py" "$top/contrib/bench/scale_py.py" --scale "$scale" $args
    else
        set -- "$scale" "$c" $args
    fi
    [ "$r" = 1 ] && echo "$*" >>"$out/commands.txt"
    timeout -k 5 "$tlim" "$@" >"$out/$c.round" 2>"$out/$c.err"
    rc=$?
    if [ $rc -ne 0 ]; then
        failed=1
        echo "$c: round $r failed (exit status $rc): $(tail -n 3 "$out/$c.err" | tr '\n' ' ')" >>"$out/skipped.txt"
        echo "scale.sh: $c, round $r failed (exit status $rc); see $out/skipped.txt" >&2
    fi
    sed "s/^/$r,/" "$out/$c.round" >>"$out/raw.csv"
    rm -f "$out/$c.round"
}

failed=0
IFS=, read -r -a list <<<"$curves"
for r in $(seq 1 "$rounds"); do
    for c in "${list[@]}"; do
        case $c in requests | regions | peers | notify | python) ;;
        *) echo "scale.sh: unknown curve $c" >&2; exit 2 ;;
        esac
        echo "scale.sh: round $r/$rounds, $c" >&2
        run_curve "$c" "$r"
        if [ "$c" = peers ] && [ -n "$ns_i" ]; then
            echo "scale.sh: round $r/$rounds, peers between namespaces" >&2
            run_curve peers_netns "$r"
        fi
    done
done
"$plot_py" "$top/contrib/bench/scale_plot.py" "$out/raw.csv" "$out/scale.csv" --png "$out" || exit 1
echo "scale.sh: $out/scale.csv" >&2
# A curve that failed in a round: its points have fewer rounds; say so in the exit status.
[ $failed = 0 ] || { echo "scale.sh: some rounds failed: $out/skipped.txt" >&2; exit 1; }
