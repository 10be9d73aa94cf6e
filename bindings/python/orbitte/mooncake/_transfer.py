"""TransferEngine's transfers: sync and async READ and WRITE batches,
their deadlines, their status, and notifications after them."""

import logging
import threading
import time

from .. import COMPLETED, PENDING, READ, TIMEOUT, WRITE, Error
from ._types import TransferOpcode, _encode_notify

log = logging.getLogger("orbitte.mooncake")


class _AsyncBatch:
    """A batch id's batch. Its lock is held by whoever uses the batch: a
    get_batch_transfer_status() that took the id holds it until it released
    the batch; a transfer_check_status() that finds it held reports the id
    pending, so that no release meets a wait in another thread."""

    __slots__ = ("batch", "tasks", "start", "deadline", "polled", "lock", "released")

    def __init__(self, batch, tasks, start, deadline):
        self.batch = batch
        self.tasks = tasks
        self.start = start
        self.deadline = deadline
        self.polled = 0.0  # when transfer_check_status last found it pending
        self.lock = threading.Lock()
        self.released = False


# A batch polled again within this long (seconds) is waited for in the
# engine instead, for at most _POLL_WAIT: a loop that calls
# transfer_check_status back to back would otherwise hold the GIL and a
# core that the engine's worker thread needs to move its bytes (docs/python.md).
_POLL_AGAIN = 50e-6
_POLL_WAIT = 1e-3


class _TransferCalls:
    """Part of TransferEngine (_engine.py): its transfer calls."""

    # ---- transfers --------------------------------------------------------

    def _deadline(self, total):
        return time.monotonic() + self.transfer_timeout + total / float(1 << 30)

    def _submit(self, what, target, op, buffers, peers, lengths, notify=None):
        """(segment, batch, tasks, total bytes) or None (logged)."""
        if not self._ready(what):
            return None
        # Lists (the usual call) go to submit_arrays as they are, which
        # converts their ints in C; other iterables become lists here, and
        # items that are not ints (numpy scalars, digit strings) are
        # converted below when submit_arrays refuses them.
        try:
            bufs = buffers if type(buffers) is list else [int(b) for b in buffers]
            peer_addrs = peers if type(peers) is list else [int(p) for p in peers]
            lens = lengths if type(lengths) is list else [int(n) for n in lengths]
            try:
                total = sum(lens)
            except TypeError:
                lens = [int(n) for n in lens]
                total = sum(lens)
        except (TypeError, ValueError) as e:
            log.error("%s: %s", what, e)
            return None
        n = len(bufs)
        if len(peer_addrs) != n or len(lens) != n:
            log.error("%s: buffers, peer_buffer_addresses and lengths have different sizes "
                      "(%d, %d, %d)", what, n, len(peer_addrs), len(lens))
            return None
        frame = None
        if notify is not None:
            try:
                frame = _encode_notify(notify)
            except ValueError as e:
                log.error("%s: %s", what, e)
                return None
        seg = self._segment(target, what)
        if seg is None:
            return None
        if n == 0:
            return seg, None, 0, 0
        batch = self._engine.batch(capacity=n)
        try:
            try:
                batch.submit_arrays(seg, op, bufs, peer_addrs, lens, notify=frame)
            except TypeError:  # items that are not ints: nothing was submitted
                bufs = [int(b) for b in bufs]
                peer_addrs = [int(p) for p in peer_addrs]
                lens = [int(n) for n in lens]
                total = sum(lens)
                batch.submit_arrays(seg, op, bufs, peer_addrs, lens, notify=frame)
        except (Error, TypeError, ValueError, OverflowError) as e:
            batch.release()
            log.error("%s to %s: %s", what, target, e)
            if isinstance(e, ConnectionError):
                self._drop_segment(target, seg)
            return None
        return seg, batch, n, total

    def _finish(self, what, target, seg, batch, tasks, deadline, notify):
        """Wait for the batch until deadline; 0 when every task completed (and
        the notification was delivered), else -1. Never returns while a task
        of the batch can still move bytes."""
        try:
            left = deadline - time.monotonic()
            try:
                batch.wait(timeout=max(0.0, left))
            except Error as e:
                if not isinstance(e, TimeoutError):
                    log.error("%s to %s: %s", what, target, e)
                    self._cancel_and_drain(batch, tasks)
                    return -1
                log.error("%s to %s: not done by its deadline (%.1f s): canceling its "
                          "tasks and waiting until none can still land", what, target,
                          self.transfer_timeout)
                self._cancel_and_drain(batch, tasks)
                return -1
            return self._outcome(what, target, seg, batch, tasks, notify)
        finally:
            batch.release()

    @staticmethod
    def _cancel_and_drain(batch, tasks):
        for t in range(tasks):
            try:
                if batch.status(t).state == PENDING:
                    batch.cancel(t)
            except Error:
                pass
        # ends once every posted slice landed, failed or timed out
        # (OTE_XFER_TIMEOUT_MS bounds that)
        batch.wait()

    def _outcome(self, what, target, seg, batch, tasks, notify):
        if batch.status() == COMPLETED:
            if notify:
                st = batch.notify_status(0)
                if st != 0:
                    log.error("%s to %s: the notification was not delivered (status %d)",
                              what, target, st)
                    return -1
            return 0
        for t in range(tasks):
            ts = batch.status(t)
            if ts.state != COMPLETED:
                log.error("%s to %s: task %d of %d ended in state %d: %s", what, target, t,
                          tasks, ts.state, Error(ts.error))
                if ts.error in (-10, -17):  # REMOTE_DISCONNECT, PEER_RESTARTED
                    self._drop_segment(target, seg)
                break
        return -1

    def _sync(self, what, target, op, buffers, peers, lengths, notify=None):
        sub = self._submit(what, target, op, buffers, peers, lengths, notify)
        if sub is None:
            return -1
        seg, batch, tasks, total = sub
        if batch is None:
            if notify is not None:
                return self._send(what, target, seg, notify)
            return 0
        return self._finish(what, target, seg, batch, tasks, self._deadline(total),
                            notify is not None)

    def _send(self, what, target, seg, notify):
        try:
            self._engine.send(seg, _encode_notify(notify))
        except (Error, ValueError) as e:
            log.error("%s to %s: notification: %s", what, target, e)
            return -1
        return 0

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length,
                            transport_hint=""):
        """Write length bytes at buffer to peer_buffer_address of the segment
        target_hostname, and wait. 0 or -1."""
        return self._sync("transfer_sync_write", target_hostname, WRITE, [buffer],
                          [peer_buffer_address], [length])

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length,
                           transport_hint=""):
        """Read length bytes from peer_buffer_address of the segment into
        buffer, and wait. 0 or -1."""
        return self._sync("transfer_sync_read", target_hostname, READ, [buffer],
                          [peer_buffer_address], [length])

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode,
                      notify=None, transport_hint=""):
        """One READ or WRITE (opcode), then notify (a TransferNotify, or None)
        to the peer once it completed. 0 when it completed and the
        notification was delivered, else -1."""
        return self._sync("transfer_sync", target_hostname, self._op(opcode), [buffer],
                          [peer_buffer_address], [length], notify)

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses,
                                  lengths, transport_hint=""):
        """Write every (buffer, peer address, length) and wait. 0 or -1.

        Unlike Mooncake, a call that reaches its deadline cancels its tasks
        and returns -1 only once none of them can still move bytes, so the
        buffers are free to reuse when it returns.
        """
        return self._sync("batch_transfer_sync_write", target_hostname, WRITE, buffers,
                          peer_buffer_addresses, lengths)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses,
                                 lengths, transport_hint=""):
        """Read every (buffer, peer address, length) and wait. 0 or -1; at
        the deadline as batch_transfer_sync_write()."""
        return self._sync("batch_transfer_sync_read", target_hostname, READ, buffers,
                          peer_buffer_addresses, lengths)

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                            opcode, notify=None, transport_hint=""):
        """batch_transfer_sync_read/_write by opcode, then notify (a
        TransferNotify, or None) once every transfer completed. 0 or -1; at
        the deadline as batch_transfer_sync_write()."""
        return self._sync("batch_transfer_sync", target_hostname, self._op(opcode), buffers,
                          peer_buffer_addresses, lengths, notify)

    @staticmethod
    def _op(opcode):
        return WRITE if int(opcode) == int(TransferOpcode.Write) else READ

    # ---- async ----------------------------------------------------------

    def _async(self, what, target, op, buffers, peers, lengths):
        sub = self._submit(what, target, op, buffers, peers, lengths)
        if sub is None:
            return 0
        _, batch, tasks, total = sub
        now = time.monotonic()
        rec = _AsyncBatch(batch, tasks, now, self._deadline(total))
        with self._lock:
            bid = next(self._batch_ids)
            self._batches[bid] = rec
        return bid

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses,
                                   lengths, transport_hint=""):
        """Submit the writes; a batch id (> 0) for get_batch_transfer_status()
        or transfer_check_status(), or 0 when the call failed and nothing was
        submitted (empty lists: an id that reports completed)."""
        return self._async("batch_transfer_async_write", target_hostname, WRITE, buffers,
                           peer_buffer_addresses, lengths)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses,
                                  lengths, transport_hint=""):
        """Submit the reads; a batch id, or 0 (see batch_transfer_async_write)."""
        return self._async("batch_transfer_async_read", target_hostname, READ, buffers,
                           peer_buffer_addresses, lengths)

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                             opcode, transport_hint=""):
        """batch_transfer_async_read/_write by opcode."""
        return self._async("batch_transfer_async", target_hostname, self._op(opcode),
                           buffers, peer_buffer_addresses, lengths)

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length,
                              transport_hint=""):
        """Submit one write; a batch id for transfer_check_status(), or 0."""
        return self._async("transfer_submit_write", target_hostname, WRITE, [buffer],
                           [peer_buffer_address], [length])

    def _take(self, batch_id):
        with self._lock:
            return self._batches.pop(int(batch_id), None)

    def transfer_check_status(self, batch_id):
        """Poll a batch id without waiting: 0 still in progress, 1 completed,
        -1 failed (or an unknown id), -2 timed out. The id is released once
        it returns anything but 0. An id that another thread is polling or
        waiting for (get_batch_transfer_status) at that moment reports 0;
        get_batch_transfer_status releases an id it took."""
        with self._lock:
            rec = self._batches.get(int(batch_id))
        if rec is None:
            log.error("transfer_check_status: no batch %d", int(batch_id))
            return -1
        if not rec.lock.acquire(blocking=False):
            return 0
        try:
            if rec.released:   # another call took the id meanwhile and released it
                log.error("transfer_check_status: no batch %d", int(batch_id))
                return -1
            if rec.batch is None:
                self._take(batch_id)
                rec.released = True
                return 1
            state = rec.batch.status()
            if state == PENDING:
                now = time.monotonic()
                if now - rec.polled < _POLL_AGAIN:
                    try:
                        state = rec.batch.wait(
                            timeout=min(_POLL_WAIT, max(0.0, rec.deadline - now)))
                    except Error:
                        state = rec.batch.status()
                rec.polled = time.monotonic()
                if state == PENDING:
                    return 0
            timed_out = any(rec.batch.status(t).state == TIMEOUT for t in range(rec.tasks))
            # released here unless a get_batch_transfer_status() took the id meanwhile
            if self._take(batch_id) is rec:
                rec.batch.release()
                rec.released = True
        finally:
            rec.lock.release()
        if state == COMPLETED:
            return 1
        return -2 if timed_out else -1

    def get_batch_transfer_status(self, batch_ids):
        """Wait for every batch id: 0 when all completed, -1 when one failed
        or passed its deadline (MC_TRANSFER_TIMEOUT plus 1 s per GiB after its
        submission). Every id is released. On -1 the tasks still pending are
        canceled and the call returns once none of them can still move
        bytes."""
        recs = []
        ret = 0
        for bid in batch_ids:
            rec = self._take(bid)
            if rec is None:
                log.error("get_batch_transfer_status: no batch %d", int(bid))
                ret = -1
            else:
                recs.append(rec)
        # the ids are taken: no transfer_check_status() releases them now, but
        # one may be polling (waiting) at this moment: its lock says when it is done
        for rec in recs:
            rec.lock.acquire()
        try:
            failed = False
            for rec in recs:
                if rec.batch is None or failed:
                    continue
                try:
                    rec.batch.wait(timeout=max(0.0, rec.deadline - time.monotonic()))
                except Error:
                    log.error("get_batch_transfer_status: a batch of %d tasks passed its "
                              "deadline", rec.tasks)
                    failed = True
                    continue
                if rec.batch.status() != COMPLETED:
                    log.error("get_batch_transfer_status: a batch of %d tasks failed",
                              rec.tasks)
                    failed = True
            for rec in recs:
                if rec.batch is None:
                    continue
                if failed:
                    self._cancel_and_drain(rec.batch, rec.tasks)
                rec.batch.release()
                rec.released = True
        finally:
            for rec in recs:
                rec.lock.release()
        return -1 if failed or ret else 0
