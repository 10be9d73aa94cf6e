#!/usr/bin/env python3
"""What the metrics endpoint costs: ote_perftest 8 B write latency and
4 KiB x 128 write bandwidth over tcp on loopback, with OTE_METRICS_ADDR
unset (off), set (on), and set with /metrics fetched every 100 ms
(scraped), in interleaved rounds against one target; prints each round and
the medians as a Markdown table.

usage: contrib/metrics-overhead.py BUILD_DIR [ROUNDS]
"""
import os, re, socket, statistics, subprocess, sys, threading, time, urllib.request

build = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
tool = os.path.join(build, "src/tools/ote_perftest")
env0 = {k: v for k, v in os.environ.items() if not k.startswith("OTE_")}
env0["OTE_TLS"] = "tcp"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


target = subprocess.Popen([tool, "-x", "tcp"], env=env0, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
peer = None
for line in target.stdout:
    m = re.search(r"serving segment (\S+)", line)
    if m:
        peer = m.group(1)
        break
if peer is None:
    sys.exit("the target did not start")

WORKLOADS = {
    "write_lat 8 B p50 (us)": (["-t", "write_lat", "-s", "8", "-n", "20000"], "p50"),
    "write_bw 4 KiB x 128 (GB/s)": (["-t", "write_bw", "-s", "4k", "-b", "128", "-n", "1000"], "gbs"),
}
MODES = ["off", "on", "scraped"]


def run(mode, args, field):
    env = dict(env0)
    stop = threading.Event()
    scraper = None
    if mode != "off":
        addr = "127.0.0.1:%d" % free_port()
        env["OTE_METRICS_ADDR"] = addr
        if mode == "scraped":
            def scrape():
                while not stop.wait(0.1):
                    try:
                        urllib.request.urlopen("http://%s/metrics" % addr, timeout=1).read()
                    except OSError:
                        pass  # before the engine listens, after it stopped
            scraper = threading.Thread(target=scrape)
            scraper.start()
    try:
        out = subprocess.run([tool, "-x", "tcp", "-q"] + args + [peer], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=300).stdout
    finally:
        stop.set()
        if scraper:
            scraper.join()
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 7 and f[0].isdigit():
            # size batch GB/s lat_avg_us lat_p50_us lat_p99_us msg/s
            return float(f[2]) if field == "gbs" else float(f[4])
    raise SystemExit("no result row from ote_perftest:\n" + out)


res = {(w, m): [] for w in WORKLOADS for m in MODES}
try:
    for r in range(rounds):
        order = MODES[r % 3:] + MODES[:r % 3]  # each mode goes first in turn
        for w, (args, field) in WORKLOADS.items():
            for m in order:
                res[(w, m)].append(run(m, args, field))
        print("round %d: " % (r + 1) + "; ".join(
            "%s %s %s" % (w.split()[0], m, res[(w, m)][-1]) for w in WORKLOADS for m in MODES),
            flush=True)
finally:
    target.terminate()
    target.wait()

print()
print("| workload | off | on | scraped every 100 ms | on/off | scraped/off | rounds off; on; scraped |")
print("|---|---|---|---|---|---|---|")
for w in WORKLOADS:
    med = {m: statistics.median(res[(w, m)]) for m in MODES}
    print("| %s | %.3f | %.3f | %.3f | %.2f | %.2f | %s |" % (
        w, med["off"], med["on"], med["scraped"], med["on"] / med["off"],
        med["scraped"] / med["off"],
        "; ".join(", ".join("%g" % v for v in res[(w, m)]) for m in MODES)))
