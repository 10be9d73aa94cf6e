"""Engine.stats(): the engine's series (ote_engine_stats) against known transfers."""
import orbitte

KIB = 1024


def series(engine):
    return {(n, tuple(sorted(l.items()))): v for n, l, v in engine.stats()}


def test_stats_count_the_bytes_and_requests(pair):
    a, b = pair
    dst = bytearray(64 * KIB)
    src = bytes(range(256)) * (64 * KIB // 256)
    dmem = b.register(dst)
    smem = a.register(bytearray(src), access=0)
    sizes = [1, 4096, 5000, 64 * KIB]
    with a.open(b.name) as seg:
        for n in sizes:
            with a.batch(1) as bt:
                bt.submit(seg, [(orbitte.WRITE, smem, dmem.addr, n)])
                assert bt.wait(10) == orbitte.COMPLETED
        a.send(seg, b"hello")
        s = series(a)
    assert dst == bytearray(src)
    written = sum(v for (n, l), v in s.items()
                  if n == "ote_transfer_bytes_total" and ("op", "write") in l)
    assert written == sum(sizes)
    assert s[("ote_transfer_latency_seconds_count", (("op", "write"),))] == len(sizes)
    assert s[("ote_transfer_size_bytes_sum", (("op", "write"),))] == sum(sizes)
    assert s[("ote_transfer_size_bytes_bucket", (("le", "4096"), ("op", "write")))] == 2
    assert s[("ote_notifications_sent_total", ())] == 1
    assert s[("ote_inflight_requests", ())] == 0
    info = [l for n, l, v in a.stats() if n == "ote_build_info" and v == 1]
    assert len(info) == 1 and info[0]["version"] == orbitte.__version__
    got = series(b)
    assert got[("ote_notifications_received_total", ())] == 1
    # b only answered: no request of its own
    assert sum(v for (n, _), v in got.items() if n == "ote_transfer_bytes_total") == 0
    a.close()
    try:
        a.stats()
    except orbitte.InvalidParamError:
        pass
    else:
        raise AssertionError("stats() on a closed engine did not raise")
