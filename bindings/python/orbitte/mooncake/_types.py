"""Mooncake's opcodes and notifications, and the frame a notification
travels in over OrbitTE."""

import struct

# Mooncake frames TransferNotify as (name, msg); OrbitTE notifications carry
# bytes and the sender's segment name, so the pair travels in one frame:
# magic, name length (u16 little endian), name, msg.
_NOTIFY_MAGIC = b"\x00MCN"
_NOTIFY_HEAD = struct.Struct("<4sH")
_NOTIFY_MAX = 4096


class TransferOpcode(int):
    """READ (0): remote -> local; WRITE (1): local -> remote.

    ``TransferOpcode.Read``/``TransferOpcode.Write`` (and the module-level
    ``Read``/``Write``) as in Mooncake; they compare equal to 0 and 1.
    """

    __slots__ = ()
    _names = {0: "Read", 1: "Write"}

    def __new__(cls, value):
        value = int(value)
        if value not in cls._names:
            raise ValueError(f"TransferOpcode: {value} is neither Read (0) nor Write (1)")
        return super().__new__(cls, value)

    @property
    def name(self):
        return self._names[int(self)]

    @property
    def value(self):
        return int(self)

    def __repr__(self):
        return f"<TransferOpcode.{self.name}: {int(self)}>"

    __str__ = __repr__


TransferOpcode.Read = TransferOpcode(0)
TransferOpcode.Write = TransferOpcode(1)
Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification: ``name`` and ``msg`` (str), sent after a transfer
    with transfer_sync(..., notify=...) or batch_transfer_sync(..., notify=...)
    and received whole by the peer's get_notifies()."""

    __slots__ = ("name", "msg")

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def __eq__(self, other):
        return (isinstance(other, TransferNotify) and self.name == other.name
                and self.msg == other.msg)

    def __repr__(self):
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"


def _as_bytes(s):
    if isinstance(s, (bytes, bytearray, memoryview)):
        return bytes(s)
    return str(s).encode("utf-8", "surrogateescape")


def _as_str(b):
    return b.decode("utf-8", "surrogateescape")


def _encode_notify(notify):
    name = _as_bytes(notify.name)
    msg = _as_bytes(notify.msg)
    if len(name) > 0xFFFF:
        raise ValueError("notification name longer than 65535 bytes")
    frame = _NOTIFY_HEAD.pack(_NOTIFY_MAGIC, len(name)) + name + msg
    if len(frame) > _NOTIFY_MAX:
        raise ValueError(f"notification of {len(frame)} bytes framed; at most {_NOTIFY_MAX}")
    return frame


def _decode_notify(n):
    data = n.data
    if len(data) >= _NOTIFY_HEAD.size and data[:4] == _NOTIFY_MAGIC:
        _, nlen = _NOTIFY_HEAD.unpack_from(data)
        if _NOTIFY_HEAD.size + nlen <= len(data):
            start = _NOTIFY_HEAD.size
            return TransferNotify(_as_str(data[start:start + nlen]),
                                  _as_str(data[start + nlen:]))
    # a plain OrbitTE notification: the sender's segment name and the bytes
    return TransferNotify(n.sender, _as_str(data))
