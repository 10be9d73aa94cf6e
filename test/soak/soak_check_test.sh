#!/bin/sh
# contrib/soak_check.py, the soak's judge, on logs made here: a clean run
# passes, and each kind of loss, duplicate, corruption, hang or growth
# written into it fails the check with that violation named.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
check="$top/contrib/soak_check.py"
command -v python3 > /dev/null || { echo "soak_check_test: skipped: no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Two peers alive throughout; p0 sends p1 a notification and a WRITE batch.
base() {
    rm -rf "$tmp/run"
    mkdir -p "$tmp/run"
    cat > "$tmp/run/chaos.log" << 'EOF'
00:00:00 MODE made by soak_check_test
00:00:09 END p0.0 final rc=0
00:00:09 END p1.0 final rc=0
EOF
    for p in 0 1; do
        {
            echo "1000 START $p 0 100$p all bound_ms=7300"
            for s in 1 2 3 4 5 6 7 8 9; do echo "${s}000000 MEM rss_kb=30000 fds=40"; done
        } > "$tmp/run/p$p.0.log"
    done
    cat >> "$tmp/run/p0.0.log" << 'EOF'
2000 NS 1 0 1 N 0 1 1900 -
2100 NS 1 0 2 W 0 1 2050 3:100:7
9000001 CNT read_ok=4 read_bad=0 wdest_ok=0 wdest_bad=0 recv=0 hung=0 reopen=0 max_batch_ms=1 task:W:COMPLETED:0=1
9500000 END clean
EOF
    cat >> "$tmp/run/p1.0.log" << 'EOF'
2500 NR 0 0 1 N
2600 NR 0 0 2 W
3000 HB 2900
9000000 HB 8999999
9000001 CNT read_ok=0 read_bad=0 wdest_ok=1 wdest_bad=0 recv=2 hung=0 reopen=0 max_batch_ms=0
9500000 END clean
EOF
}

fails=0
# expect NAME WANT: the check's verdict on the logs as they are now.
expect() {
    python3 "$check" "$tmp/run" > "$tmp/out" 2>&1
    rc=$?
    if [ "$2" = pass ]; then
        [ $rc = 0 ] && { echo "ok: $1"; return; }
    elif [ $rc = 1 ] && grep -q "^  $2: 1$" "$tmp/out"; then
        echo "ok: $1 ($2)"
        return
    fi
    echo "FAIL: $1: wanted $2, got rc=$rc:"
    cat "$tmp/out"
    fails=$((fails + 1))
}

base
expect "a clean run" pass
base
sed -i '/NR 0 0 1 N/d' "$tmp/run/p1.0.log"
expect "an OK notification missing" "OK notification not delivered"
base
echo "2700 NR 0 0 1 N" >> "$tmp/run/p1.0.log"
expect "a notification taken twice" "notification delivered twice"
base
sed -i 's/ NS 1 0 2 W 0 1 / NS 1 0 2 W 0 0 /' "$tmp/run/p0.0.log"
expect "a notification for a batch that failed" "notification for a failed batch or BUSY"
base
sed -i 's/ NS 1 0 1 N 0 1 / NS 1 0 1 N -11 1 /' "$tmp/run/p0.0.log"
expect "a notification that was refused BUSY" "notification for a failed batch or BUSY"
base
echo "2650 WBAD 0 0 2 3 7 -1 0 7" >> "$tmp/run/p1.0.log"
expect "a WRITE block wrong at the destination" "WRITE completed but destination bytes differ"
base
echo "2650 WBAD 0 0 2 3 7 1 0 9" >> "$tmp/run/p1.0.log"
expect "a WRITE block overwritten by a later one" pass
base
# A writer whose only transport is uct_tcp: its wrong blocks are counted apart (a known open case).
sed -i 's/ START 0 0 1000 all / START 0 0 1000 uct_tcp /' "$tmp/run/p0.0.log"
echo "2650 WBAD 0 0 2 3 7 -1 0 7" >> "$tmp/run/p1.0.log"
expect "a WRITE block wrong, written by a uct_tcp-only instance" "write_bad uct_tcp"
if python3 "$check" "$tmp/run" "write_bad uct_tcp" > "$tmp/out" 2>&1; then
    echo "ok: tolerated when named"
else
    echo "FAIL: tolerating write_bad uct_tcp did not pass the run:"
    cat "$tmp/out"
    fails=$((fails + 1))
fi
base
sed -i 's/ START 0 0 1000 all / START 0 0 1000 uct_tcp /' "$tmp/run/p0.0.log"
echo "5000 VIOL READ_BAD p1 block 3 (task COMPLETED, bytes differ)" >> "$tmp/run/p0.0.log"
expect "a READ block wrong, read by a uct_tcp-only instance" "read_bad uct_tcp"
base
# Bytes of a uct_tcp-only instance (p1.1, header writer 1, incarnation 1) read by an instance of all.
echo "1000 START 1 1 1002 uct_tcp bound_ms=7300" > "$tmp/run/p1.1.log"
echo "9500000 END clean" >> "$tmp/run/p1.1.log"
echo "5000 VIOL READ_BAD p1 block 3 of a READ of 4 (task COMPLETED, bytes differ: header 4f54455f534f414b 0000000100000001 0, 0 leading zero bytes)" >> "$tmp/run/p0.0.log"
expect "a READ block wrong, the bytes of a uct_tcp-only instance" "read_bad uct_tcp"
base
echo "1000 START 1 1 1002 tcp bound_ms=7300" > "$tmp/run/p1.1.log"
echo "9500000 END clean" >> "$tmp/run/p1.1.log"
echo "5000 VIOL READ_BAD p1 block 3 of a READ of 4 (task COMPLETED, bytes differ: header 4f54455f534f414b 0000000100000001 0, 0 leading zero bytes)" >> "$tmp/run/p0.0.log"
expect "a READ block wrong, the bytes of a tcp instance" read_bad
# A block with its own header but other payload, in the batch of such a
# block: the same late PUT (tolerated with it); in another batch it is not.
base
echo "1000 START 1 1 1002 uct_tcp bound_ms=7300" > "$tmp/run/p1.1.log"
echo "9500000 END clean" >> "$tmp/run/p1.1.log"
echo "5000 VIOL READ_BAD p1 block 5 of a READ of 1 (task COMPLETED, bytes differ: header 4f54455f534f414b 0000000100000000 5, 0 leading zero bytes) batch 7" >> "$tmp/run/p0.0.log"
echo "5001 VIOL READ_BAD p1 block 7 of a READ of 1 (task COMPLETED, bytes differ: header 4f54455f534f414b 0000000100000001 4, 0 leading zero bytes) batch 7" >> "$tmp/run/p0.0.log"
if python3 "$check" "$tmp/run" "read_bad uct_tcp" > "$tmp/out" 2>&1 &&
    grep -q "^  read_bad uct_tcp: 2$" "$tmp/out"; then
    echo "ok: an own-header block in a batch with a uct_tcp-only instance's bytes"
else
    echo "FAIL: an own-header block beside a uct_tcp-only instance's bytes was not tolerated:"
    cat "$tmp/out"
    fails=$((fails + 1))
fi
sed -i 's/ 5, 0 leading zero bytes) batch 7$/ 5, 0 leading zero bytes) batch 8/' "$tmp/run/p0.0.log"
expect "an own-header block wrong in another batch" read_bad
base
echo "5000 VIOL TASK_HUNG batch of 2 still pending after 7300 ms" >> "$tmp/run/p0.0.log"
expect "a batch that did not end" task_hung
base
echo "5000 VIOL READ_BAD p1 block 3 (task COMPLETED, bytes differ)" >> "$tmp/run/p0.0.log"
expect "a READ block wrong at the initiator" read_bad
base
echo "5000 VIOL UNREACHABLE task WRITE to p1 (every pair here shares a transport)" >> "$tmp/run/p0.0.log"
expect "an UNREACHABLE status" unreachable
base
sed -i 's/^\(9000000\) MEM rss_kb=30000/\1 MEM rss_kb=90000/' "$tmp/run/p1.0.log"
expect "RSS that grew" "RSS grew"
base
sed -i 's/^\(9000000\) MEM rss_kb=30000 fds=40/\1 MEM rss_kb=30000 fds=60/' "$tmp/run/p0.0.log"
expect "descriptors that grew" "open fds grew"
base
# With the socket counts ote_soak logs now, the growth says how much of it is sockets in no table.
sed -i 's/ MEM rss_kb=30000 fds=40$/ MEM rss_kb=30000 fds=40 socks=20 closed_socks=0/' "$tmp/run/p0.0.log"
sed -i 's/^\(9000000\) MEM rss_kb=30000 fds=40 socks=20 closed_socks=0/\1 MEM rss_kb=30000 fds=60 socks=40 closed_socks=20/' "$tmp/run/p0.0.log"
expect "descriptors that grew, sockets in no table" "open fds grew"
if grep -q "first third max 40, last third max 60 (sockets in no table 0 -> 20)" "$tmp/out"; then
    echo "ok: the growth names the sockets in no table"
else
    echo "FAIL: the growth does not name the sockets in no table:"
    cat "$tmp/out"
    fails=$((fails + 1))
fi
base
echo "00:00:05 VIOL DIED p1.0 rc=139 (not killed by the soak)" >> "$tmp/run/chaos.log"
expect "a peer that died by itself" "process died"
base
sed -i 's/END p1.0 final rc=0/END p1.0 final rc=1/' "$tmp/run/chaos.log"
expect "a peer that exited non-zero" "process exit"
[ $fails = 0 ] || { echo "soak_check_test: $fails cases failed"; exit 1; }
echo "soak_check_test: all cases as expected"
