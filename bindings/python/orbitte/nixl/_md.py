"""Wire formats of orbitte.nixl: agent metadata blobs and notification frames.

Metadata blob (getLocalMD), all integers little-endian::

    "OTNXMD" u16 version(2) u8 flags (1: partial, 2: connection info)
    u16 len, agent name (UTF-8) | u16 len, engine name ("host:port", may be empty)
    u32 len, OrbitTE's descriptor of the engine (Engine.desc_export(): the
    engine's signed record, ote_engine_desc_export; empty without connection info)
    u32 count | count x (u64 addr, u64 len, u64 devId, u8 mem type)
    32-byte tag: HMAC-SHA256(key, "OTNX-MD-1" | everything before) with the
    cluster key of OrbitTE (OTE_AUTH_KEY, or the first line of
    OTE_AUTH_KEY_FILE); without a key SHA-256 of the same bytes.

A blob with a wrong tag (altered, or signed with another key), truncated,
or with lengths or counts that do not add up is refused (MDError); so is
version 1 (which named the engine only). The descriptor inside is opened
with Engine.open_desc() when the blob is loaded: OrbitTE checks it with the
decoder of a fetched descriptor and, under OTE_AUTH_KEY, its own HMAC (a
tampered descriptor is refused even inside a blob re-signed with the key);
the agent then checks that each region of the blob is published by that
descriptor.

Notification frame (every OrbitTE notification this layer sends)::

    "\\xffOTN" u8 kind | u16 len, sender agent name | payload

kind N: a user notification; M: metadata pushed; Q: metadata requested
(payload: the requester's engine name); I: the sender's metadata is
invalid; G: the sender removed the receiver; F: a fragment of a longer
message: u64 message id, u32 index, u32 count, u8 kind, then the bytes.
An OrbitTE notification holds NOTIFY_MAX bytes; longer messages go as
fragments of one message id, sent in order (OrbitTE delivers one sender's
notifications in order), and are delivered once the last one arrived.
"""

import hashlib
import hmac
import os
import struct

import numpy as np

import orbitte

MD_MAGIC = b"OTNXMD"
MD_VERSION = 2
MAX_DESC = 16 << 20           # largest engine descriptor a blob may carry
_F_PARTIAL = 1
_F_CONN = 2
_TAG = 32

FRAME_MAGIC = b"\xffOTN"
KIND_NOTIF = ord("N")
KIND_MD = ord("M")
KIND_FETCH = ord("Q")
KIND_INVALIDATE = ord("I")
KIND_GONE = ord("G")
KIND_FRAG = ord("F")
_KINDS = {KIND_NOTIF, KIND_MD, KIND_FETCH, KIND_INVALIDATE, KIND_GONE, KIND_FRAG}

MAX_MESSAGE = 64 << 20          # largest message reassembled from fragments
MAX_PARTIAL = 256               # messages being reassembled at once, all senders
MAX_PENDING = 128 << 20         # bytes held by messages being reassembled, all senders

_REGION = np.dtype([("addr", "<u8"), ("len", "<u8"), ("dev", "<u8"), ("mem", "u1")])


class MDError(ValueError):
    """Malformed or wrongly signed metadata."""


def _key():
    key = os.environ.get("OTE_AUTH_KEY", "")
    if not key:
        path = os.environ.get("OTE_AUTH_KEY_FILE", "")
        if path:
            try:
                with open(path, "rb") as f:
                    key = f.readline().rstrip(b"\r\n")
            except OSError:
                key = b""
    return key.encode() if isinstance(key, str) else key


def _tag(body):
    key = _key()
    if key:
        return hmac.new(key, b"OTNX-MD-1" + body, hashlib.sha256).digest()
    return hashlib.sha256(b"OTNX-MD-1" + body).digest()


def _str16(s):
    b = s.encode()
    if len(b) > 0xFFFF:
        raise MDError("name longer than 65535 bytes")
    return struct.pack("<H", len(b)) + b


def encode_md(agent, engine, rows, partial, desc=b""):
    """The blob of an agent: rows are (addr, len, devId, mem type); desc is the
    engine's descriptor (Engine.desc_export()), given with connection info."""
    flags = (_F_PARTIAL if partial else 0) | (_F_CONN if engine else 0)
    if len(desc) > MAX_DESC:
        raise MDError(f"engine descriptor of {len(desc)} bytes, at most {MAX_DESC}")
    arr = np.zeros(len(rows), dtype=_REGION)
    if rows:
        src = np.array(rows, dtype=np.uint64).reshape(len(rows), 4)
        arr["addr"], arr["len"], arr["dev"] = src[:, 0], src[:, 1], src[:, 2]
        arr["mem"] = src[:, 3].astype(np.uint8)
    body = b"".join([MD_MAGIC, struct.pack("<HB", MD_VERSION, flags), _str16(agent),
                     _str16(engine), struct.pack("<I", len(desc)), bytes(desc),
                     struct.pack("<I", len(rows)), arr.tobytes()])
    return body + _tag(body)


def decode_md(blob):
    """(agent, engine, rows, partial) of a blob, or MDError."""
    agent, engine, _, rows, partial = decode_md_desc(blob)
    return agent, engine, rows, partial


def decode_md_desc(blob):
    """(agent, engine, descriptor bytes, rows, partial) of a blob, or MDError."""
    if len(blob) < len(MD_MAGIC) + 3 + _TAG or not blob.startswith(MD_MAGIC):
        raise MDError("not orbitte.nixl agent metadata")
    body, tag = blob[:-_TAG], blob[-_TAG:]
    if not hmac.compare_digest(tag, _tag(body)):
        raise MDError("metadata signature does not match (altered, or signed with another "
                      "OTE_AUTH_KEY)")
    off = len(MD_MAGIC)
    version, flags = struct.unpack_from("<HB", body, off)
    off += 3
    if version != MD_VERSION:
        raise MDError(f"metadata version {version}, this reads {MD_VERSION}")
    names = []
    for _ in range(2):
        if off + 2 > len(body):
            raise MDError("truncated metadata")
        (n,) = struct.unpack_from("<H", body, off)
        off += 2
        if off + n > len(body):
            raise MDError("truncated metadata")
        try:
            names.append(body[off:off + n].decode())
        except UnicodeDecodeError:
            raise MDError("agent or engine name is not UTF-8") from None
        off += n
    if off + 4 > len(body):
        raise MDError("truncated metadata")
    (dlen,) = struct.unpack_from("<I", body, off)
    off += 4
    if dlen > MAX_DESC or off + dlen > len(body):
        raise MDError("truncated metadata (engine descriptor)")
    desc = body[off:off + dlen]
    off += dlen
    if off + 4 > len(body):
        raise MDError("truncated metadata")
    (count,) = struct.unpack_from("<I", body, off)
    off += 4
    if len(body) - off != count * _REGION.itemsize:
        raise MDError(f"metadata holds {len(body) - off} bytes for {count} regions")
    arr = np.frombuffer(body, dtype=_REGION, count=count, offset=off)
    rows = [(int(r["addr"]), int(r["len"]), int(r["dev"]), int(r["mem"])) for r in arr]
    agent, engine = names
    if not agent:
        raise MDError("metadata without an agent name")
    if bool(flags & _F_CONN) != bool(engine):
        raise MDError("connection flag and engine name disagree")
    if bool(engine) != bool(desc):
        raise MDError("connection info without the engine's descriptor" if engine else
                      "an engine descriptor without connection info")
    return agent, engine, desc, rows, bool(flags & _F_PARTIAL)


def frames(agent, kind, payload, msgid):
    """The OrbitTE notifications carrying one message."""
    head = FRAME_MAGIC + bytes([kind]) + _str16(agent)
    if len(head) + len(payload) <= orbitte.NOTIFY_MAX:
        return [head + payload]
    fhead = FRAME_MAGIC + bytes([KIND_FRAG]) + _str16(agent)
    room = orbitte.NOTIFY_MAX - len(fhead) - 17
    if room < 256:
        raise MDError("agent name too long for a notification")
    if len(payload) > MAX_MESSAGE:
        raise MDError(f"a message holds at most {MAX_MESSAGE} bytes")
    count = (len(payload) + room - 1) // room
    return [fhead + struct.pack("<QIIB", msgid, i, count, kind) + payload[i * room:(i + 1) * room]
            for i in range(count)]


def parse_frame(data):
    """(agent, kind, payload) of a frame, None for any other notification."""
    if len(data) < 7 or not data.startswith(FRAME_MAGIC) or data[4] not in _KINDS:
        return None
    (n,) = struct.unpack_from("<H", data, 5)
    if 7 + n > len(data):
        return None
    try:
        agent = data[7:7 + n].decode()
    except UnicodeDecodeError:
        return None
    return agent, data[4], data[7 + n:]


class Reassembly:
    """Fragments by (sender, message id) until each message is whole."""

    def __init__(self):
        self.parts = {}       # (agent, id) -> [count, kind, {index: bytes}, size]
        self.held = 0         # bytes of all of them

    def _drop(self, key):
        ent = self.parts.pop(key, None)
        if ent is not None:
            self.held -= ent[3]

    def add(self, agent, payload):
        """(kind, message) once the message is complete, else None."""
        if len(payload) < 17:
            return None
        msgid, idx, count, kind = struct.unpack_from("<QIIB", payload, 0)
        chunk = payload[17:]
        if (count == 0 or idx >= count or count > MAX_MESSAGE // 256 + 1
                or kind not in _KINDS or kind == KIND_FRAG):
            return None
        key = (agent, msgid)
        ent = self.parts.get(key)
        if ent is None:
            ent = self.parts[key] = [count, kind, {}, 0]
        if ent[0] != count or ent[1] != kind:
            self._drop(key)
            return None
        if idx not in ent[2]:
            ent[2][idx] = chunk
            ent[3] += len(chunk)
            self.held += len(chunk)
        if ent[3] > MAX_MESSAGE:
            self._drop(key)
            return None
        # the oldest unfinished messages (a transfer that failed before its last
        # fragment, or a peer that never sent it) make room
        while len(self.parts) > MAX_PARTIAL or self.held > MAX_PENDING:
            old = next(iter(self.parts))
            self._drop(old)
            if old == key:
                return None
        if len(ent[2]) < count:
            return None
        self._drop(key)
        return kind, b"".join(ent[2][i] for i in range(count))
