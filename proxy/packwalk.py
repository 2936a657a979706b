"""Tell a fast-forward from a force push by reading the commits of a pushed pack. Pure.

A push names `<old> <new> <ref>`; only the commits tell whether `new` contains `old`.
`PackCommits` reads a pack as it streams past (never holding more than one small object)
and keeps each commit's parents, keyed by the object id it computes itself from the
commit's bytes — so a client cannot claim parents a commit does not have. A push is a
proven fast-forward when a chain of parents leads from `new` to `old` through the
pushed commits. Anything it cannot read (a commit stored as a delta against an object
the server already has, say) only makes the proof fail, never succeed.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections import deque

from . import pktline

COMMIT, TREE, BLOB, TAG, OFS_DELTA, REF_DELTA = 1, 2, 3, 4, 6, 7
# Commits (and deltas that produce them) above this size are not kept.
MAX_KEPT_OBJECT = 1 << 20


class PackError(ValueError):
    """The bytes are not a pack this reader understands."""


class PackCommits:
    """Incremental pack reader that collects commit parents.

    `feed` the bytes after the command list (push options, if the client sent them,
    are skipped), then `finish()`.
    """

    def __init__(self, *, push_options: bool = False, hash_len: int = 20):
        self.commits: dict[str, tuple[str, ...]] = {}
        self.hash_len = hash_len
        self._buffer = bytearray()
        self._offset = 0  # pack offset of the start of `_buffer`
        self._options = pktline.PktLineReader() if push_options else None
        self._count: int | None = None
        self._seen = 0
        self._types: dict[int, int] = {}  # pack offset -> resolved type (0 unknown)
        self._bodies: dict[int, bytes] = {}  # pack offset -> commit bytes
        self._by_id: dict[str, bytes] = {}  # commit id -> commit bytes
        self._object: _Object | None = None
        self.done = False

    def feed(self, data: bytes) -> None:
        if self.done:
            return
        if self._options is not None:
            self._options.feed(data)
            while (packet := self._options.next_packet()) is not None:
                if packet.kind is pktline.PacketKind.FLUSH:
                    data = self._options.pending
                    self._options = None
                    break
            else:
                return
        self._buffer += data
        self._advance()

    def finish(self) -> None:
        if not self.done:
            raise PackError("the pack ended early")

    def _advance(self) -> None:
        while not self.done:
            if self._count is None:
                if len(self._buffer) < 12:
                    return
                magic, version, count = struct.unpack(">4sII", self._buffer[:12])
                if magic != b"PACK" or version not in (2, 3):
                    raise PackError("not a version 2 or 3 pack")
                self._count = count
                self._consume(12)
                continue
            if self._seen == self._count:
                self.done = True
                return
            if self._object is None:
                header = _read_header(self._buffer, self.hash_len)
                if header is None:
                    return
                kind, size, base, used = header
                if kind == OFS_DELTA:
                    assert isinstance(base, int)
                    base = self._offset - base
                self._object = _Object(self._offset, kind, size, base)
                self._consume(used)
            if not self._inflate():
                return

    def _consume(self, n: int) -> None:
        del self._buffer[:n]
        self._offset += n

    def _inflate(self) -> bool:
        """Feed the current object's zlib stream; True when the object is complete."""
        obj = self._object
        assert obj is not None
        data = bytes(self._buffer)
        self._offset += len(data)
        self._buffer.clear()
        try:
            out = obj.inflater.decompress(data)
        except zlib.error as exc:
            raise PackError(f"object at {obj.start} is not valid zlib data ({exc})") from None
        if obj.keep is None:
            obj.keep = self._wants(obj)
        if obj.keep:
            obj.data += out
            if len(obj.data) > MAX_KEPT_OBJECT:
                obj.keep = False
                obj.data = bytearray()
        if not obj.inflater.eof:
            return False
        rest = obj.inflater.unused_data
        self._buffer += rest
        self._offset -= len(rest)
        self._complete(obj)
        self._object = None
        self._seen += 1
        return True

    def _wants(self, obj: _Object) -> bool:
        if obj.kind == COMMIT:
            return obj.size <= MAX_KEPT_OBJECT
        if obj.kind == OFS_DELTA:
            return self._types.get(obj.base, 0) == COMMIT and obj.base in self._bodies
        if obj.kind == REF_DELTA:
            return obj.base in self._by_id
        return False

    def _complete(self, obj: _Object) -> None:
        kind = obj.kind
        if kind == OFS_DELTA:
            kind = self._types.get(obj.base, 0)
        elif kind == REF_DELTA:
            kind = COMMIT if obj.base in self._by_id else 0
        self._types[obj.start] = kind
        if kind != COMMIT or not obj.keep:
            return
        body = bytes(obj.data)
        if obj.kind == OFS_DELTA:
            body = _apply_delta(self._bodies[obj.base], body)
        elif obj.kind == REF_DELTA:
            body = _apply_delta(self._by_id[obj.base], body)
        if body is None:
            return
        digest = hashlib.sha256 if self.hash_len == 32 else hashlib.sha1
        oid = digest(b"commit %d\0" % len(body) + body).hexdigest()
        self._bodies[obj.start] = body
        self._by_id[oid] = body
        self.commits[oid] = _parents(body)


class _Object:
    def __init__(self, start: int, kind: int, size: int, base: int | str | None):
        self.start = start
        self.kind = kind
        self.size = size
        self.base = base
        self.inflater = zlib.decompressobj()
        self.keep: bool | None = None
        self.data = bytearray()


def _read_header(buf: bytearray, hash_len: int) -> tuple[int, int, int | str | None, int] | None:
    """(type, size, delta base, bytes used) of the object header at the start of `buf`."""
    if not buf:
        return None
    byte = buf[0]
    kind = (byte >> 4) & 7
    size = byte & 15
    shift = 4
    i = 1
    while byte & 0x80:
        if i >= len(buf):
            return None
        if i > 10:
            raise PackError("object size header is too long")
        byte = buf[i]
        size |= (byte & 0x7F) << shift
        shift += 7
        i += 1
    if kind in (0, 5):
        raise PackError(f"object type {kind} is not valid")
    base: int | str | None = None
    if kind == OFS_DELTA:
        if i >= len(buf):
            return None
        byte = buf[i]
        i += 1
        distance = byte & 0x7F
        while byte & 0x80:
            if i >= len(buf):
                return None
            if i > 20:
                raise PackError("delta offset is too long")
            byte = buf[i]
            i += 1
            distance = ((distance + 1) << 7) | (byte & 0x7F)
        base = distance  # back from the object's start
    elif kind == REF_DELTA:
        if len(buf) < i + hash_len:
            return None
        base = bytes(buf[i : i + hash_len]).hex()
        i += hash_len
    return kind, size, base, i


def _apply_delta(base: bytes, delta: bytes) -> bytes | None:
    """git's delta format: source size, target size, then copy/insert instructions."""
    try:
        pos, source_size = _varint(delta, 0)
        pos, target_size = _varint(delta, pos)
        if source_size != len(base):
            return None
        out = bytearray()
        while pos < len(delta):
            op = delta[pos]
            pos += 1
            if op & 0x80:
                offset = size = 0
                for bit in range(4):
                    if op & (1 << bit):
                        offset |= delta[pos] << (8 * bit)
                        pos += 1
                for bit in range(3):
                    if op & (1 << (4 + bit)):
                        size |= delta[pos] << (8 * bit)
                        pos += 1
                size = size or 0x10000
                if offset + size > len(base):
                    return None
                out += base[offset : offset + size]
            elif op:
                out += delta[pos : pos + op]
                pos += op
            else:
                return None
        return bytes(out) if len(out) == target_size else None
    except IndexError:
        return None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return pos, value


def _parents(body: bytes) -> tuple[str, ...]:
    parents = []
    for line in body.split(b"\n"):
        if not line:
            break  # end of the header
        if line.startswith(b"parent "):
            parents.append(line[7:].decode("ascii", "replace"))
    return tuple(parents)


def proves_fast_forward(commits: dict[str, tuple[str, ...]], old: str, new: str) -> bool:
    """True when a chain of parents through `commits` leads from `new` to `old`."""
    if old == new:
        return True
    seen = {new}
    queue = deque([new])
    while queue:
        for parent in commits.get(queue.popleft(), ()):
            if parent == old:
                return True
            if parent not in seen:
                seen.add(parent)
                queue.append(parent)
    return False
