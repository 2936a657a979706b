import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy import pktline
from proxy.pktline import Packet, PacketKind, PktLineError, PktLineReader, RefCommand

OLD = "a" * 40
NEW = "b" * 40
ZERO = "0" * 40
CAPS = "report-status side-band-64k quiet object-format=sha1 agent=git/2.39.5"


def command_body(*lines: str, caps: str = CAPS, pack: bytes = b"PACK\x00\x00\x00\x02") -> bytes:
    out = bytearray()
    for i, line in enumerate(lines):
        out += pktline.encode(f"{line}\0{caps}" if i == 0 else line)
    return bytes(out) + b"0000" + pack


@pytest.mark.parametrize(
    ("data", "packets"),
    [
        (b"0000", [Packet(PacketKind.FLUSH)]),
        (b"0001", [Packet(PacketKind.DELIM)]),
        (b"0002", [Packet(PacketKind.RESPONSE_END)]),
        (b"0004", [Packet(PacketKind.DATA, b"")]),
        (b"0006a\n", [Packet(PacketKind.DATA, b"a\n")]),
        (b"0009done\n0000", [Packet(PacketKind.DATA, b"done\n"), Packet(PacketKind.FLUSH)]),
        (b"000Ahello\n", [Packet(PacketKind.DATA, b"hello\n")]),
    ],
)
def test_parse_all(data, packets):
    assert pktline.parse_all(data) == packets


@pytest.mark.parametrize(
    "data",
    [b"0003", b"zzzz", b"fff1" + b"x" * 65517, b"\xff\xff\xff\xff", b"0009done", b"00"],
)
def test_parse_all_refuses_bad_framing(data):
    with pytest.raises(PktLineError):
        pktline.parse_all(data)


def test_reader_is_incremental_byte_by_byte():
    data = pktline.encode("one\n") + b"0000" + pktline.encode("two\n") + b"0001"
    reader = PktLineReader()
    got = []
    for byte in data:
        reader.feed(bytes([byte]))
        got += reader.packets()
    assert got == [
        Packet(PacketKind.DATA, b"one\n"),
        Packet(PacketKind.FLUSH),
        Packet(PacketKind.DATA, b"two\n"),
        Packet(PacketKind.DELIM),
    ]
    assert reader.consumed == len(data)


def test_encode_refuses_oversize_and_accepts_maximum():
    assert len(pktline.encode(b"x" * 65516)) == 65520
    with pytest.raises(PktLineError):
        pktline.encode(b"x" * 65517)


@pytest.mark.parametrize(
    ("body", "refs", "caps"),
    [
        (command_body(f"{OLD} {NEW} refs/heads/x"), ("refs/heads/x",), set(CAPS.split())),
        (
            command_body(f"{OLD} {NEW} refs/heads/x", f"{OLD} {NEW} refs/heads/y\n"),
            ("refs/heads/x", "refs/heads/y"),
            set(CAPS.split()),
        ),
        (
            command_body(f"{OLD} {NEW} refs/heads/x", f"{ZERO} {NEW} refs/tags/v1"),
            ("refs/heads/x", "refs/tags/v1"),
            set(CAPS.split()),
        ),
        (command_body(f"{OLD} {NEW} refs/heads/x", caps=""), ("refs/heads/x",), set()),
        (
            pktline.encode(f"shallow {OLD}") + command_body(f"{OLD} {NEW} refs/heads/x"),
            ("refs/heads/x",),
            set(CAPS.split()),
        ),
        (
            command_body(f"{'c' * 64} {'d' * 64} refs/heads/x"),
            ("refs/heads/x",),
            set(CAPS.split()),
        ),
    ],
)
def test_parse_commands(body, refs, caps):
    parsed = pktline.parse_commands(body)
    assert parsed is not None
    assert parsed.refs == refs
    assert parsed.capabilities == caps
    assert body[parsed.length :].startswith(b"PACK")


def test_parse_commands_probe():
    parsed = pktline.parse_commands(b"0000")
    assert parsed is not None and parsed.is_probe and parsed.commands == ()


def test_parse_commands_flags_create_and_delete():
    parsed = pktline.parse_commands(
        command_body(f"{ZERO} {NEW} refs/heads/a", f"{OLD} {ZERO} refs/heads/b")
    )
    assert parsed is not None
    assert parsed.commands == (
        RefCommand(ZERO, NEW, "refs/heads/a"),
        RefCommand(OLD, ZERO, "refs/heads/b"),
    )
    assert parsed.commands[0].is_create and not parsed.commands[0].is_delete
    assert parsed.commands[1].is_delete and not parsed.commands[1].is_create


@pytest.mark.parametrize("cut", [0, 1, 3, 4, 10, 50, 100])
def test_parse_commands_waits_for_the_flush(cut):
    body = command_body(f"{OLD} {NEW} refs/heads/x", f"{OLD} {NEW} refs/heads/y")
    flush_at = body.index(b"0000PACK")
    assert pktline.parse_commands(body[: min(cut, flush_at)]) is None


@pytest.mark.parametrize(
    "body",
    [
        pktline.encode(f"{OLD} {NEW}") + b"0000",
        pktline.encode(f"{OLD} {NEW} refs/heads/x extra") + b"0000",
        pktline.encode(f"{OLD[:-1]}g {NEW} refs/heads/x") + b"0000",
        pktline.encode(f"{OLD.upper()} {NEW} refs/heads/x") + b"0000",
        pktline.encode(f"{OLD} {'d' * 64} refs/heads/x") + b"0000",
        pktline.encode(f"{OLD} {NEW} ") + b"0000",
        # receive-pack drops a newline only at the end of the packet, not before the NUL.
        command_body(f"{OLD} {NEW} refs/heads/x\n"),
        pktline.encode(f"{OLD} {NEW} refs/heads/a\x01b") + b"0000",
        command_body(f"{OLD} {NEW} refs/heads/x", f"{OLD} {NEW} refs/heads/y\0caps"),
        pktline.encode(f"push-cert\0{CAPS}") + b"0000",
        b"0001" + command_body(f"{OLD} {NEW} refs/heads/x"),
        b"PACK" + b"\x00" * 20,
        pktline.encode(b"\xff" * 90) + b"0000",
    ],
)
def test_parse_commands_refuses_malformed(body):
    with pytest.raises(PktLineError):
        pktline.parse_commands(body)


def test_advertised_refs():
    adv = (
        pktline.encode("# service=git-receive-pack\n")
        + b"0000"
        + pktline.encode(f"{OLD} refs/heads/main\0report-status side-band-64k\n")
        + pktline.encode(f"{NEW} refs/heads/hangar/1-ab\n")
        + b"0000"
    )
    assert pktline.advertised_refs(adv) == {"refs/heads/main": OLD, "refs/heads/hangar/1-ab": NEW}
    empty = pktline.encode(f"{ZERO} capabilities^{{}}\0report-status\n") + b"0000"
    assert pktline.advertised_refs(empty) == {}


def unband(data: bytes) -> dict[int, bytes]:
    bands: dict[int, bytes] = {}
    for packet in pktline.parse_all(data):
        if packet.kind is PacketKind.DATA:
            bands[packet.payload[0]] = bands.get(packet.payload[0], b"") + packet.payload[1:]
    return bands


def test_refusal_without_sideband():
    out = pktline.report_status_refusal(["refs/heads/main"], "hangar: no", use_sideband=False)
    assert out == b"000eunpack ok\n" + pktline.encode("ng refs/heads/main hangar: no\n") + b"0000"


def test_refusal_with_sideband_puts_report_in_band_1_and_messages_in_band_2():
    out = pktline.report_status_refusal(
        ["refs/heads/main", "refs/tags/v1"],
        "hangar: this sandbox may push only to hangar/12-ab3f",
        use_sideband=True,
        messages=["see the docs"],
    )
    assert out.endswith(b"0000")
    bands = unband(out)
    assert bands[2] == b"see the docs\n"
    report = pktline.parse_all(bands[1])
    assert [p.payload for p in report if p.kind is PacketKind.DATA] == [
        b"unpack ok\n",
        b"ng refs/heads/main hangar: this sandbox may push only to hangar/12-ab3f\n",
        b"ng refs/tags/v1 hangar: this sandbox may push only to hangar/12-ab3f\n",
    ]
    assert report[-1].kind is PacketKind.FLUSH


def test_refusal_reason_stays_on_one_line():
    out = pktline.report_status_refusal(["refs/heads/x"], "a\nb\r\nc", use_sideband=False)
    assert b"ng refs/heads/x a b c\n" in out


def test_sideband_splits_long_data():
    data = b"x" * 200_000
    out = pktline.sideband(2, data)
    assert unband(out)[2] == data


# ---- fuzzing ---------------------------------------------------------------------


@given(st.binary(max_size=400))
def test_random_bytes_parse_or_raise_pktline_error(data):
    try:
        pktline.parse_commands(data)
    except PktLineError:
        pass
    reader = PktLineReader()
    reader.feed(data)
    try:
        reader.packets()
    except PktLineError:
        pass


@given(st.binary(max_size=300), st.data())
def test_incremental_and_whole_parsing_agree(data, draw):
    cuts = sorted(draw.draw(st.lists(st.integers(0, len(data)), max_size=5)))
    whole = PktLineReader()
    whole.feed(data)
    try:
        expected = whole.packets()
    except PktLineError:
        return
    pieces = PktLineReader()
    got = []
    last = 0
    for cut in [*cuts, len(data)]:
        pieces.feed(data[last:cut])
        got += pieces.packets()
        last = cut
    assert got == expected
