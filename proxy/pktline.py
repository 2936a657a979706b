"""git's pkt-line framing and the receive-pack command list, without I/O.

A pkt-line is 4 hex digits giving its total length (the 4 included, at most 65520),
then that many bytes less 4. `0000` is a flush, `0001` a delimiter, `0002` a
response end. A receive-pack request starts with optional `shallow <id>` lines, then
`<old> <new> <ref>\\0<capabilities>`, more `<old> <new> <ref>` lines and a flush; the
pack (if any) follows.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

MAX_PKT_LEN = 65520
MAX_PKT_PAYLOAD = MAX_PKT_LEN - 4
# Side-band packets carry one band byte in front of the data.
MAX_SIDEBAND_DATA = MAX_PKT_PAYLOAD - 1
FLUSH = b"0000"
DELIM = b"0001"
RESPONSE_END = b"0002"

_OBJECT_ID = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")


class PktLineError(ValueError):
    """The bytes are not valid pkt-line framing or not a valid receive-pack request."""


class PacketKind(Enum):
    DATA = "data"
    FLUSH = "flush"
    DELIM = "delim"
    RESPONSE_END = "response-end"


@dataclass(frozen=True)
class Packet:
    kind: PacketKind
    payload: bytes = b""


_SPECIAL = {0: PacketKind.FLUSH, 1: PacketKind.DELIM, 2: PacketKind.RESPONSE_END}


class PktLineReader:
    """Incremental pkt-line parser: `feed` bytes as they arrive, take `packets()` out.

    `consumed` counts the bytes of the packets returned so far, so a caller can tell
    where the framed part ends and unframed data (a pack) begins.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.consumed = 0

    def feed(self, data: bytes) -> None:
        self._buffer += data

    @property
    def pending(self) -> bytes:
        """Bytes fed but not yet returned as a packet."""
        return bytes(self._buffer)

    def next_packet(self) -> Packet | None:
        """The next whole packet, or None until more bytes are fed."""
        if len(self._buffer) < 4:
            return None
        length = _parse_length(bytes(self._buffer[:4]))
        if length in _SPECIAL:
            del self._buffer[:4]
            self.consumed += 4
            return Packet(_SPECIAL[length])
        if length < 4:
            raise PktLineError(f"pkt-line length {length} is reserved")
        if len(self._buffer) < length:
            return None
        payload = bytes(self._buffer[4:length])
        del self._buffer[:length]
        self.consumed += length
        return Packet(PacketKind.DATA, payload)

    def packets(self) -> list[Packet]:
        """Every whole packet available now."""
        out = []
        while (packet := self.next_packet()) is not None:
            out.append(packet)
        return out


def _parse_length(head: bytes) -> int:
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise PktLineError(f"pkt-line length {head!r} is not hex") from None
    if not re.fullmatch(r"[0-9a-fA-F]{4}", text):
        raise PktLineError(f"pkt-line length {head!r} is not hex")
    length = int(text, 16)
    if length > MAX_PKT_LEN:
        raise PktLineError(f"pkt-line length {length} is over the maximum {MAX_PKT_LEN}")
    return length


def encode(payload: bytes | str) -> bytes:
    """One data pkt-line."""
    data = payload.encode() if isinstance(payload, str) else payload
    if len(data) > MAX_PKT_PAYLOAD:
        raise PktLineError(f"pkt-line payload of {len(data)} bytes is over {MAX_PKT_PAYLOAD}")
    return b"%04x" % (len(data) + 4) + data


def parse_all(data: bytes) -> list[Packet]:
    """All packets of a complete framed body; raises on trailing partial bytes."""
    reader = PktLineReader()
    reader.feed(data)
    packets = reader.packets()
    if reader.pending:
        raise PktLineError(f"{len(reader.pending)} bytes after the last whole pkt-line")
    return packets


# ---- receive-pack requests -------------------------------------------------------


@dataclass(frozen=True)
class RefCommand:
    """One `<old> <new> <ref>` update request."""

    old: str
    new: str
    ref: str

    @property
    def is_create(self) -> bool:
        return set(self.old) == {"0"}

    @property
    def is_delete(self) -> bool:
        return set(self.new) == {"0"}


@dataclass(frozen=True)
class CommandList:
    """The head of a receive-pack request."""

    commands: tuple[RefCommand, ...]
    capabilities: frozenset[str]
    # Bytes from the start of the body through the flush that ends the commands.
    length: int

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(c.ref for c in self.commands)

    @property
    def sideband(self) -> bool:
        return "side-band-64k" in self.capabilities or "side-band" in self.capabilities

    @property
    def is_probe(self) -> bool:
        """git's `0000` body, sent before a large push to check the connection."""
        return not self.commands and self.length == 4


def parse_commands(data: bytes) -> CommandList | None:
    """Parse the command list at the head of a receive-pack body.

    Returns None while `data` ends before the flush that closes the list (feed more),
    raises PktLineError for anything that is not a well-formed command list.
    """
    reader = PktLineReader()
    reader.feed(data)
    commands: list[RefCommand] = []
    capabilities: frozenset[str] = frozenset()
    seen_shallow_only = True
    while True:
        packet = reader.next_packet()
        if packet is None:
            return None
        if packet.kind is PacketKind.FLUSH:
            return CommandList(tuple(commands), capabilities, reader.consumed)
        if packet.kind is not PacketKind.DATA:
            raise PktLineError(f"unexpected {packet.kind.value} packet in the command list")
        # Like receive-pack: one newline at the end of the packet is dropped, nothing else.
        line = packet.payload.removesuffix(b"\n")
        if not commands and seen_shallow_only and line.startswith(b"shallow "):
            _object_id(line[len(b"shallow ") :])
            continue
        seen_shallow_only = False
        if line.startswith(b"push-cert"):
            raise PktLineError("signed pushes (push-cert) are not supported")
        if not commands:
            line, sep, caps = line.partition(b"\0")
            if sep:
                capabilities = _parse_capabilities(caps)
        elif b"\0" in line:
            raise PktLineError("only the first command may carry capabilities")
        commands.append(_parse_command(line))


def _parse_capabilities(raw: bytes) -> frozenset[str]:
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise PktLineError("capabilities are not ASCII") from None
    return frozenset(text.split())


def _parse_command(line: bytes) -> RefCommand:
    parts = line.split(b" ")
    if len(parts) != 3:
        raise PktLineError(f"a command is `<old> <new> <ref>`, got {line[:120]!r}")
    old, new = _object_id(parts[0]), _object_id(parts[1])
    if len(old) != len(new):
        raise PktLineError("old and new object ids differ in length")
    try:
        ref = parts[2].decode("utf-8")
    except UnicodeDecodeError:
        raise PktLineError("ref name is not UTF-8") from None
    if not ref or any(ord(ch) < 0x20 or ch == "\x7f" for ch in ref):
        raise PktLineError(f"ref name {ref!r} is not valid")
    return RefCommand(old, new, ref)


def _object_id(raw: bytes) -> str:
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise PktLineError("object id is not hex") from None
    if not _OBJECT_ID.match(text):
        raise PktLineError(f"object id {text[:70]!r} is not 40 or 64 lowercase hex digits")
    return text


# ---- ref advertisements ----------------------------------------------------------


def advertised_refs(data: bytes) -> dict[str, str]:
    """ref → object id from a smart-HTTP `info/refs` advertisement (v0/v1)."""
    refs: dict[str, str] = {}
    for packet in parse_all(data):
        if packet.kind is not PacketKind.DATA:
            continue
        line = packet.payload.split(b"\0", 1)[0].rstrip(b"\n")
        if line.startswith(b"#") or line.startswith(b"version "):
            continue
        oid, _, name = line.partition(b" ")
        if not name or name == b"capabilities^{}":
            continue
        try:
            refs[name.decode("utf-8")] = _object_id(oid)
        except (PktLineError, UnicodeDecodeError):
            continue
    return refs


# ---- responses -------------------------------------------------------------------


def sideband(band: int, data: bytes) -> bytes:
    """`data` as side-band packets on `band` (1 data, 2 progress, 3 fatal error)."""
    out = bytearray()
    for start in range(0, max(len(data), 1), MAX_SIDEBAND_DATA):
        chunk = data[start : start + MAX_SIDEBAND_DATA]
        if chunk:
            out += encode(bytes([band]) + chunk)
    return bytes(out)


def report_status_refusal(
    refs: Iterable[str],
    reason: str,
    *,
    use_sideband: bool,
    messages: Sequence[str] = (),
) -> bytes:
    """A receive-pack response that refuses every ref with `reason`.

    git prints each as `! [remote rejected] <src> -> <dst> (<reason>)`; `messages` go
    out on band 2 first and git prints them as `remote: <message>` (side-band only).
    """
    reason = _one_line(reason)
    report = bytearray(encode("unpack ok\n"))
    for ref in refs:
        report += encode(f"ng {_one_line(ref)} {reason}\n")
    report += FLUSH
    if not use_sideband:
        return bytes(report)
    out = bytearray()
    for message in messages:
        out += sideband(2, (_one_line(message) + "\n").encode())
    out += sideband(1, bytes(report))
    out += FLUSH
    return bytes(out)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:1000]
