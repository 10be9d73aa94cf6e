#!/bin/sh
# contrib/grafana/orbitte.json is valid JSON, a dashboard with panels whose
# every query names only series the metrics endpoint serves (a running
# engine's /metrics, its # TYPE families with their _bucket/_sum/_count
# samples), and it covers every family the endpoint serves. ote_info --stats
# prints what /metrics serves.
set -eu
dash="$(dirname "$0")/../../contrib/grafana/orbitte.json"
peer="${ORBITTE_TEST_BUILDDIR:-$(dirname "$0")/..}/mp/metrics_peer"
. "$(dirname "$0")/metrics_skip.sh"
d=$(mktemp -d)
pid=""
cleanup() {
    exec 3>&- 2>/dev/null || true
    [ -z "$pid" ] || { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
    rm -rf "$d"
}
trap cleanup EXIT INT TERM
mkfifo "$d/in"
OTE_METRICS_ADDR=127.0.0.1:0 OTE_TLS=tcp OTE_LOG_LEVEL=warn "$peer" <"$d/in" >"$d/out" 2>"$d/err" &
pid=$!
exec 3>"$d/in"
i=0
while ! grep -q '^metrics ' "$d/out" 2>/dev/null; do
    i=$((i + 1))
    [ $i -le 600 ] || { echo "FAIL: metrics_peer did not start"; cat "$d/err"; exit 1; }
    sleep 0.1
done
addr=$(sed -n 's/^metrics //p' "$d/out")
curl -s --max-time 10 "http://$addr/metrics" >"$d/metrics"
# ote_info --stats prints the same samples (the engine is idle), --nonzero only those not 0.
info="${ORBITTE_TEST_BUILDDIR:-$(dirname "$0")/..}/../src/tools/ote_info"
"$info" --stats "$addr" >"$d/stats"
grep -v '^#' "$d/metrics" >"$d/samples"
grep -v '^#' "$d/stats" | cmp -s - "$d/samples" ||
    { echo "FAIL: ote_info --stats $addr differs from /metrics"; diff "$d/stats" "$d/samples"; exit 1; }
"$info" --stats "$addr" --nonzero >"$d/nonzero"
grep -q '^ote_build_info{' "$d/nonzero" && ! grep -q ' 0$' "$d/nonzero" ||
    { echo "FAIL: ote_info --stats --nonzero"; cat "$d/nonzero"; exit 1; }
python3 - "$dash" "$d/metrics" <<'PY'
import json, re, sys
dash = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
families = {}
for line in text.splitlines():
    m = re.match(r"# TYPE (\S+) (\S+)$", line)
    if m:
        families[m.group(1)] = m.group(2)
served = set()
for name, kind in families.items():
    served.add(name)
    if kind == "histogram":
        served.update(name + s for s in ("_bucket", "_sum", "_count"))
samples = {re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)", l).group(1)
           for l in text.splitlines() if l and not l.startswith("#")}
bad = []
assert dash.get("panels"), "no panels"
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
assert exprs, "no queries"
used = set()
for e in exprs:
    for name in re.findall(r"\b(ote_[a-z_]+)", e):
        used.add(name)
        if name not in served or name not in samples:
            bad.append(name)
for v in dash.get("templating", {}).get("list", []):
    for name in re.findall(r"\b(ote_[a-z_]+)", json.dumps(v.get("query", ""))):
        if name not in served:
            bad.append(name)
if bad:
    print("FAIL: the dashboard names series the endpoint does not serve:", sorted(set(bad)))
    sys.exit(1)
base = {re.sub(r"_(bucket|sum|count)$", "", n) if re.sub(r"_(bucket|sum|count)$", "", n) in families else n
        for n in used}
missing = sorted(set(families) - base)
if missing:
    print("FAIL: families the endpoint serves that no panel shows:", missing)
    sys.exit(1)
print("dashboard: %d panels, %d queries, all %d families the endpoint serves" %
      (len(dash["panels"]), len(exprs), len(families)))
PY
echo "1 passed, 0 failed"
