#!/bin/sh
# ote_perftest --json on loopback: every record of a bandwidth, a latency
# and a KV run is held to the schema table of docs/performance.md
# ("ote_perftest --json: the records"): a known "type", the documented
# "schema", exactly the documented fields, each of its JSON type; the
# figures come first (one "result" per size with the bytes the run was
# asked to move, or one "kv_result"), then a "rail" record per rail whose
# bytes add up to at least those moved.
set -u
perftest="${ORBITTE_TEST_BUILDDIR:?run under make check}/../src/tools/ote_perftest"
doc="$(cd "$(dirname "$0")/../.." && pwd)/docs/performance.md"
# A region size of our own (page multiple) names this script's targets.
region=$(((5120 + $$ % 4096) * 4096))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
. "$(dirname "$0")/tally.sh"

# name | ote_perftest arguments | what the checker expects (kind:sizes:batch:iters)
runs="bw_tcp|-x tcp -t write_bw -s 64k,256k -b 4 -n 50|result:65536,262144:4:50
lat|-t read_lat -s 8 -n 300|result:8:1:300
bw_check|-t read_bw -s 4k -b 16 -n 40 -T 2 --check|result:4096:16:40
kv|-t kv_write --kv 4:16 -s 4k -n 5 --check|kv_result:4096:16:5"

echo "$runs" | while IFS='|' read -r name args expect; do
    # shellcheck disable=SC2086 # args: options, split
    timeout -k 5 60 "$perftest" --loopback -q $args --region $region \
        --json "$dir/$name.json" >"$dir/$name.out" 2>&1
    echo "$name|$args|$expect|$?"
done >"$dir/runs"

while IFS='|' read -r name args expect rc; do
    if [ "$rc" -ne 0 ]; then
        bad "$name ($args): exit status $rc"; tail -n 20 "$dir/$name.out"
    elif ! python3 - "$doc" "$dir/$name.json" "$expect" "$args" >"$dir/$name.check" 2>&1 <<'PY'
import json, re, sys

doc, path, expect, args = sys.argv[1:5]

# The schema: the rows of the table after its marker, up to the first line
# that is not a table row.
lines = open(doc, encoding="utf-8").read().split("\n")
mark = [i for i, l in enumerate(lines) if l.startswith("<!-- ote_perftest --json schema")]
assert len(mark) == 1, f"{doc}: one schema marker expected, found {len(mark)}"
version = int(re.search(r"schema (\d+)", lines[mark[0]]).group(1))
fields = {}  # type -> {field: JSON type}
for l in lines[mark[0] + 3:]:
    if not l.startswith("|"):
        break
    cells = [c.strip() for c in l.strip("|").split("|")]
    kind, field, jtype = cells[0], cells[1].strip("`"), cells[2]
    assert jtype in ("string", "integer", "number", "boolean"), l
    fields.setdefault(kind, {})[field] = jtype
common = fields.pop("all")
assert set(common) == {"type", "schema"}, common
assert set(fields) == {"result", "kv_result", "rail"}, fields


def is_type(v, jtype):
    if jtype == "string":
        return isinstance(v, str)
    if jtype == "boolean":
        return isinstance(v, bool)
    if jtype == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    return isinstance(v, (int, float)) and not isinstance(v, bool)


records = []
for n, line in enumerate(open(path, encoding="utf-8"), 1):
    r = json.loads(line)  # one object a line, nothing else
    assert isinstance(r, dict), f"line {n}: not an object: {line!r}"
    kind = r.get("type")
    assert kind in fields, f"line {n}: type {kind!r} is not one of {sorted(fields)}"
    assert r.get("schema") == version, f"line {n}: schema {r.get('schema')!r}, documented {version}"
    want = dict(common, **fields[kind])
    missing = set(want) - set(r)
    extra = set(r) - set(want)
    assert not missing and not extra, \
        f"line {n} ({kind}): undocumented {sorted(extra)}, missing {sorted(missing)}"
    for f, jtype in want.items():
        assert is_type(r[f], jtype), f"line {n} ({kind}): {f} = {r[f]!r} is not a JSON {jtype}"
    records.append(r)

kind, sizes, batch, iters = expect.split(":")
sizes, batch, iters = [int(s) for s in sizes.split(",")], int(batch), int(iters)
figs = [r for r in records if r["type"] != "rail"]
rails = [r for r in records if r["type"] == "rail"]
assert records[:len(figs)] == figs, "a rail record before the figures"
assert all(r["type"] == kind for r in figs), [r["type"] for r in figs]
checked = "--check" in args
if kind == "result":
    threads = int(re.search(r"-T (\d+)", args).group(1)) if "-T " in args else 1
    assert [r["size"] for r in figs] == sizes, figs
    for r in figs:
        assert r["batch"] == batch and r["threads"] == threads and r["checked"] == checked, r
        # -n batches a thread, measured (the warm-up ones not counted)
        assert r["bytes"] == r["size"] * batch * iters * threads, r
        assert r["gbps"] > 0 and r["seconds"] > 0 and r["msg_per_s"] > 0, r
        assert 0 < r["lat_p50_us"] <= r["lat_p99_us"], r
    moved = sum(r["bytes"] for r in figs)
else:
    assert len(figs) == 1, figs
    r = figs[0]
    assert (r["block_size"], r["batch"], r["layers"], r["requests"]) == (sizes[0], batch, 4, iters), r
    assert r["gbps"] > 0 and r["lat_avg_us"] > 0 and r["checked"] == checked, r
    moved = r["block_size"] * r["batch"] * r["layers"] * r["requests"]
assert rails, "no rail record"
assert [r["rail"] for r in rails] == list(range(len(rails))), rails
assert all(r["state"] in ("active", "cooling", "probing", "closed") for r in rails), rails
if "-x tcp" in args:
    assert all(r["transport"] == "tcp" for r in rails), rails
assert sum(r["bytes"] for r in rails) >= moved, (moved, rails)
print(f"{len(figs)} {kind}, {len(rails)} rail record(s)")
PY
    then
        bad "$name ($args): records do not match the schema"
        cat "$dir/$name.check" "$dir/$name.json"
    else
        ok
    fi
done <"$dir/runs"

left=$(pgrep -f -- "-M host --region $region\$")
if [ -n "$left" ]; then
    bad "target(s) left running: $left"
    kill -s KILL $left
fi
tally_end
