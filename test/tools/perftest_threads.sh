#!/bin/sh
# ote_perftest --loopback with several submitting threads, its KV-cache
# pattern, and --malloc (heap memory over cma): every run ends 0,
# verifies every byte (--check) and reports a row of measured numbers per
# size; piped into tail it returns (its target does not hold the pipe); a
# SIGTERM or SIGKILL of the initiator takes its target along; no target is
# ever left running (--json: perftest_json.sh).
set -u
perftest="${ORBITTE_TEST_BUILDDIR:?run under make check}/../src/tools/ote_perftest"
# A region size of our own (page multiple) names this script's targets.
region=$(((1024 + $$ % 4096) * 4096))
. "$(dirname "$0")/tally.sh"
# Output goes to a file: an orphaned target holding a pipe must not hang us.
out_file=$(mktemp)
trap 'rm -f "$out_file"' EXIT

# Pids of targets of this script still running ("... -M host --region N [--malloc]").
targets() { pgrep -f -- "-M host --region $region( --malloc)?\$"; }

# No target of this script may be left once its initiator has returned.
no_targets_left() { # WHAT
    left=$(targets)
    if [ -n "$left" ]; then
        bad "$1: target(s) left running: $left"
        kill -s KILL $left
    fi
}

# Every size of the run has a row: size, batch, then positive GB/s,
# latencies and msg/s.
rows_ok() { # OUTPUT SIZES BATCH
    for s in $2; do
        echo "$1" | awk -v s="$s" -v b="$3" '
            $1 == s && $2 == b && NF == 7 && $3 > 0 && $4 > 0 && $5 > 0 && $6 > 0 && $7 > 0 { n++ }
            END { exit n == 1 ? 0 : 1 }' || return 1
    done
}

for test in write_bw read_bw; do
    for threads in 2 4; do
        for rep in 1 2 3; do
            timeout -k 5 30 "$perftest" --loopback --check -q -t $test -T $threads \
                -s 16k,64k,256k -b 4 -n 100 --region $region >"$out_file" 2>&1
            rc=$?
            out=$(cat "$out_file")
            what="$test -T $threads run $rep"
            if [ $rc -ne 0 ]; then
                bad "$what: exit status $rc"; echo "$out" | tail -n 20
            elif ! rows_ok "$out" "16384 65536 262144" 4; then
                bad "$what: no row of measured numbers for every size"; echo "$out"
            else
                ok
            fi
            no_targets_left "$what"
        done
    done
done

# Piped: tail sees end of file once the initiator is done.
for test in write_bw read_bw; do
    timeout -k 5 20 sh -c "{ '$perftest' --loopback -t $test -T 2 -s 64k -b 4 -n 200 \
        --region $region 2>&1; echo \"rc=\$?\"; } | tail -n 30" >"$out_file" 2>&1
    rc=$?
    out=$(cat "$out_file")
    if [ $rc -ne 0 ]; then
        bad "$test piped into tail: did not return (status $rc)"
    elif ! echo "$out" | grep -qx 'rc=0'; then
        bad "$test piped into tail: perftest failed"; echo "$out"
    elif ! rows_ok "$out" 65536 4; then
        bad "$test piped into tail: no row of measured numbers"; echo "$out"
    else
        ok
    fi
    no_targets_left "$test piped into tail"
done

# The KV-cache pattern: scattered blocks, a batch per layer, every byte
# checked (WRITE read back, READ against the target's pattern); one row of
# block size, blocks per layer, then positive GB/s and latencies.
for test in kv_write kv_read; do
    timeout -k 5 30 "$perftest" --loopback --check -q -t $test --kv 4:16 -s 4k -n 5 \
        --region $region >"$out_file" 2>&1
    rc=$?
    out=$(cat "$out_file")
    if [ $rc -ne 0 ]; then
        bad "$test: exit status $rc"; echo "$out" | tail -n 20
    elif ! echo "$out" | awk '$1 == 4096 && $2 == 16 && NF == 8 && $3 > 0 && $4 > 0 && $5 > 0 { n++ }
                              END { exit n == 1 ? 0 : 1 }'; then
        bad "$test: no row of measured numbers"; echo "$out"
    else
        ok
    fi
    no_targets_left "$test"
done

# --malloc: both sides' memory from the heap, registered; over cma, which
# takes such memory, every byte checked; the target of the longest run is
# seen to have been given the option too.
for test in write_bw read_bw kv_write kv_read; do
    case $test in
    kv_*) args="--kv 4:16 -s 4k -n 5" ;;
    read_bw) args="-s 64k,1m -b 4 -n 20" ;;
    *) args="-s 64k,1m -b 4 -n 200" ;; # long enough to see its target
    esac
    # shellcheck disable=SC2086
    timeout -k 5 30 "$perftest" --loopback --check --malloc -x cma -q -t $test $args \
        --region $region >"$out_file" 2>&1 &
    pid=$!
    i=0
    while [ -z "$(pgrep -f -- "-M host --region $region --malloc\$")" ] &&
        kill -0 $pid 2>/dev/null && [ $i -lt 500 ]; do
        sleep 0.02; i=$((i + 1))
    done
    malloc_target=$(pgrep -f -- "-M host --region $region --malloc\$" | head -n 1)
    wait $pid
    rc=$?
    out=$(cat "$out_file")
    if [ $rc -ne 0 ]; then
        bad "--malloc $test: exit status $rc"; echo "$out" | tail -n 20
    elif ! echo "$out" | awk 'NF >= 7 && $3 > 0 { n++ } END { exit n >= 1 ? 0 : 1 }'; then
        bad "--malloc $test: no row of measured numbers"; echo "$out"
    elif [ $test = write_bw ] && [ -z "$malloc_target" ]; then
        bad "--malloc $test: no target seen with the option"
    else
        ok
    fi
    no_targets_left "--malloc $test"
done

# The initiator killed mid-run: its target goes with it.
for sig in TERM KILL; do
    "$perftest" --loopback -q -T 2 -s 64k -b 4 -n 100000000 --region $region >/dev/null 2>&1 &
    pid=$!
    i=0
    while [ -z "$(targets)" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    sleep 0.3
    kill -s $sig $pid
    i=0
    while kill -0 $pid 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    if kill -0 $pid 2>/dev/null; then
        bad "SIG$sig: the initiator did not end"
        kill -s KILL $pid
    fi
    wait $pid
    i=0
    while [ -n "$(targets)" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    if [ -n "$(targets)" ]; then
        bad "SIG$sig: the target outlived its initiator"
        kill -s KILL $(targets)
    else
        ok
    fi
done

tally_end
