"""TransferEngine's memory calls: registration, managed buffers, byte
copies and the first buffer of a segment."""

import ctypes
import logging

from .. import Error
from ._net import _split_host_port
from ._types import _as_bytes

log = logging.getLogger("orbitte.mooncake")

# Addresses below this are never a buffer: NULL and the page the kernel keeps unmapped.
_FIRST_PAGE = 4096


class _MemoryCalls:
    """Part of TransferEngine (_engine.py): its memory calls."""

    # ---- memory ---------------------------------------------------------

    def register_memory(self, buffer_addr, capacity, location="*"):
        """Register [buffer_addr, buffer_addr + capacity) for remote READ and
        WRITE. location "cpu:N", "cuda:N" or "*" (detect). 0 or -1."""
        if not self._ready("register_memory"):
            return -1
        try:
            mem = self._engine.register((int(buffer_addr), int(capacity)),
                                        location=None if location in ("*", "", None)
                                        else location)
        except (Error, ValueError, TypeError, OverflowError) as e:
            log.error("register_memory(%r, %r): %s", buffer_addr, capacity, e)
            return -1
        with self._lock:
            self._regions.setdefault(int(buffer_addr), []).append(mem)
        return 0

    def unregister_memory(self, buffer_addr):
        """Drop the registration that starts at buffer_addr. 0 or -1."""
        with self._lock:
            mems = self._regions.get(int(buffer_addr))
            mem = mems.pop() if mems else None
            if mems == []:
                del self._regions[int(buffer_addr)]
        if mem is None:
            log.error("unregister_memory(0x%x): no registration starts there", int(buffer_addr))
            return -1
        try:
            mem.deregister()
        except Error as e:
            log.error("unregister_memory(0x%x): %s", int(buffer_addr), e)
            return -1
        return 0

    def batch_register_memory(self, buffer_addresses, capacities, location="*"):
        """register_memory() for each pair; all or nothing. 0 or -1."""
        addrs = [int(a) for a in buffer_addresses]
        caps = [int(c) for c in capacities]
        if len(addrs) != len(caps):
            log.error("batch_register_memory: %d addresses and %d capacities",
                      len(addrs), len(caps))
            return -1
        for i, (a, c) in enumerate(zip(addrs, caps)):
            if self.register_memory(a, c, location) != 0:
                for b in reversed(addrs[:i]):
                    self.unregister_memory(b)
                return -1
        return 0

    def batch_unregister_memory(self, buffer_addresses):
        """unregister_memory() for each address. 0, or -1 if any failed."""
        ret = 0
        for a in buffer_addresses:
            if self.unregister_memory(a) != 0:
                ret = -1
        return ret

    def allocate_managed_buffer(self, length):
        """Page-aligned host memory of length bytes, registered for remote
        READ and WRITE: its address, or 0 on failure."""
        if not self._ready("allocate_managed_buffer"):
            return 0
        try:
            mem = self._engine.alloc(int(length))
        except (Error, ValueError, OverflowError) as e:
            log.error("allocate_managed_buffer(%d): %s", int(length), e)
            return 0
        with self._lock:
            self._managed[mem.addr] = mem
            self._regions.setdefault(mem.addr, []).append(mem)
        return mem.addr

    def free_managed_buffer(self, buffer_addr, length):
        """Free what allocate_managed_buffer() returned. 0 or -1."""
        with self._lock:
            mem = self._managed.pop(int(buffer_addr), None)
            if mem is not None:
                mems = self._regions.get(mem.addr, [])
                if mem in mems:
                    mems.remove(mem)
                if not mems:
                    self._regions.pop(mem.addr, None)
        if mem is None:
            log.error("free_managed_buffer(0x%x): not a managed buffer", int(buffer_addr))
            return -1
        if int(length) != mem.length:
            log.warning("free_managed_buffer(0x%x, %d): the buffer has %d bytes",
                        mem.addr, int(length), mem.length)
        try:
            mem.deregister()
        except Error as e:
            log.error("free_managed_buffer(0x%x): %s", mem.addr, e)
            return -1
        return 0

    @staticmethod
    def write_bytes_to_buffer(dest_address, src, length):
        """Copy length bytes of src (bytes, or str as UTF-8) to
        dest_address. 0, or -1 when src is shorter than length or
        dest_address is in the first page (0: what get_first_buffer_address
        returns when there is no buffer). Any other address is written as
        given, as in Mooncake: it must be memory of this process."""
        data = _as_bytes(src) if not isinstance(src, bytes) else src
        length = int(length)
        if length < 0 or length > len(data):
            log.error("write_bytes_to_buffer: %d bytes asked, %d given", length, len(data))
            return -1
        if not _MemoryCalls._valid_address("write_bytes_to_buffer", dest_address, length):
            return -1
        ctypes.memmove(int(dest_address), data, length)
        return 0

    @staticmethod
    def read_bytes_from_buffer(source_address, length):
        """The length bytes at source_address, as bytes; b"" when length is
        not positive or source_address is in the first page (logged), as
        for write_bytes_to_buffer()."""
        length = int(length)
        if length <= 0 or not _MemoryCalls._valid_address("read_bytes_from_buffer",
                                                          source_address, length):
            return b""
        return ctypes.string_at(int(source_address), length)

    @staticmethod
    def _valid_address(what, address, length):
        """address, an int, outside the first page and with length bytes
        before the end of the address space (logged when not)."""
        address = int(address)
        if address < _FIRST_PAGE or address + length > 2**64:
            log.error("%s: address 0x%x with %d bytes is no buffer (get_first_buffer_address "
                      "returns 0 when there is none)", what, address, length)
            return False
        return True

    def get_first_buffer_address(self, segment_name):
        """The start of the buffer the segment's engine registered first
        and still has (Mooncake's registration order, not the lowest
        address; this engine's own when segment_name is its own name), or 0
        when there is none or the segment cannot be opened."""
        if not self._ready("get_first_buffer_address"):
            return 0
        if self._is_self(segment_name):
            with self._lock:
                for addr, mems in self._regions.items():
                    if any(m.registered for m in mems):
                        return addr
            return 0
        seg = self._segment(segment_name, "get_first_buffer_address")
        if seg is None:
            return 0
        try:
            seg.refresh()
            regions = seg.regions()
        except Error as e:
            log.error("get_first_buffer_address(%s): %s", segment_name, e)
            self._drop_segment(segment_name, seg)
            return 0
        return regions[0].addr if regions else 0

    def _is_self(self, name):
        own = self._engine.name
        if name == own:
            return True
        try:
            host, port = _split_host_port(name)
        except ValueError:
            return False
        return port == self.get_rpc_port() and host in (self._host, _split_host_port(own)[0])
