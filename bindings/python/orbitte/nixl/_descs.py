"""Descriptor ranges: the registered regions a list must lie in (_Regions),
a list prepared for transfers (_Prepped, numpy columns), and the merging
of descriptors contiguous on both sides."""

import numpy as np


class _Regions:
    """Address ranges (sorted) answering "is [a, a+n) inside one of them"."""

    __slots__ = ("starts", "maxend", "rows")

    def __init__(self, rows):
        # rows: (addr, len, dev, mem) tuples
        self.rows = list(rows)
        if self.rows:
            arr = np.array([(r[0], r[1]) for r in self.rows], dtype=np.uint64)
            order = np.argsort(arr[:, 0], kind="stable")
            self.starts = arr[order, 0]
            self.maxend = np.maximum.accumulate(arr[order, 0] + arr[order, 1])
        else:
            self.starts = self.maxend = np.zeros(0, dtype=np.uint64)

    def covers(self, addrs, lens):
        """Boolean array: each [addr, addr+len) lies inside one region."""
        if len(addrs) == 0:
            return np.zeros(0, dtype=bool)
        if len(self.starts) == 0:
            return np.zeros(len(addrs), dtype=bool)
        idx = np.searchsorted(self.starts, addrs, side="right").astype(np.int64) - 1
        ok = idx >= 0
        idx[~ok] = 0
        return ok & (self.maxend[idx] >= addrs + lens)

class _Prepped:
    __slots__ = ("agent", "addr", "len", "dev", "mem", "count")

    def __init__(self, agent, rows, mem):
        self.agent = agent            # None: local side; else the agent name
        self.addr = np.ascontiguousarray(rows[:, 0])
        self.len = np.ascontiguousarray(rows[:, 1])
        self.dev = rows[:, 2]
        self.mem = mem
        self.count = len(rows)


def merge(la, ra, ln, local, remote):
    """Runs of descriptors contiguous on both sides as one descriptor each
    (each merged range still inside one registration on its side: local and
    remote are _Regions); the arrays as given when nothing merges."""
    brk = (la[1:] != la[:-1] + ln[:-1]) | (ra[1:] != ra[:-1] + ln[:-1])
    if bool(brk.all()):
        return la, ra, ln
    starts = np.concatenate([[0], np.nonzero(brk)[0] + 1])
    mla, mra = la[starts], ra[starts]
    mln = np.add.reduceat(ln, starts).astype(np.uint64)
    if bool(local.covers(mla, mln).all()) and bool(remote.covers(mra, mln).all()):
        return mla, mra, mln
    return la, ra, ln
