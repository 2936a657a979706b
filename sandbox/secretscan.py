"""Build secrets stay in install's environment: a checkout that holds one is never kept.

An environment build keeps what install left in the repository, `.git` included, and
every later sandbox of the repository starts from it. Before a build is kept, hangar
reads the very bytes it would keep (a directory copy, or the archive a Docker or
Kubernetes build is made from) and looks for each build secret in every encoding a
program would leave it in (app.redact.encodings: raw, base64 and base64url at each
offset, hex, URL-encoded): in every file's contents, in every file's name and in every
link's target, and inside git's compressed objects (loose objects and packs are
inflated), so a secret committed or stashed by install is found too. A hit names the
file and the secret's variable, never its value.
"""

from __future__ import annotations

import mmap
import os
import stat
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from app.redact import encodings, redact

CHUNK = 1 << 20
# An inflated git object is read this far (a secret in a bigger one would be found in its
# first part only: a build's objects are its lockfiles' and sources').
MAX_INFLATED = 64 << 20
OFS_DELTA, REF_DELTA = 6, 7


@dataclass(frozen=True)
class Hit:
    path: str  # relative to the checkout, as shown to people (masked of the secrets)
    secret: str  # the variable's name, never its value


class Needles:
    """Every encoding of every build secret, as bytes, by the secret's name."""

    def __init__(self, secrets: dict[str, str]):
        self.forms: list[tuple[bytes, str]] = sorted(
            {(form.encode(), name) for name, value in secrets.items() if value
             for form in encodings(value)}, key=lambda pair: -len(pair[0]))
        self.longest = max((len(form) for form, _ in self.forms), default=0)

    def __bool__(self) -> bool:
        return bool(self.forms)

    def find(self, data: bytes | memoryview | mmap.mmap) -> str | None:
        """The name of a secret found in `data`, or None."""
        for form, name in self.forms:
            if data.find(form) >= 0:
                return name
        return None

    def in_stream(self, chunks: Iterable[bytes]) -> str | None:
        """Like `find`, over a stream: chunks overlap by the longest form."""
        tail = b""
        for chunk in chunks:
            data = tail + chunk
            if found := self.find(data):
                return found
            tail = data[-self.longest:] if self.longest > 1 else b""
        return None


def scan_tree(root: Path, secrets: dict[str, str]) -> list[Hit]:
    """Every file under `root` (links never followed) that holds a build secret."""
    needles = Needles(secrets)
    if not needles:
        return []
    hits = []
    for path in _walk(root):
        shown = str(PurePosixPath(*path.relative_to(root).parts))
        name = needles.find(shown.encode())
        if name is None:
            name = _scan_entry(path, shown, needles)
        if name is not None:
            hits.append(Hit(redact(shown, secrets.values()), name))  # a name may hold it
    return hits


def _walk(root: Path) -> Iterator[Path]:
    stack = [root]
    while stack:
        directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                path = Path(entry.path)
                yield path
                if entry.is_dir(follow_symlinks=False):
                    stack.append(path)


def _scan_entry(path: Path, shown: str, needles: Needles) -> str | None:
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return needles.find(os.fsencode(os.readlink(path)))
    if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            return needles.find(data) or _in_git_object(shown, data, needles)
    finally:
        os.close(fd)


def scan_tar(archive: Path, secrets: dict[str, str], *, strip: str = "") -> list[Hit]:
    """Every member of a tar archive (a checkout exported by Docker or Kubernetes) that
    holds a build secret; `strip` is the leading directory its names carry."""
    needles = Needles(secrets)
    if not needles:
        return []
    hits = []
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            shown = member.name.removeprefix(strip).lstrip("/") or member.name
            name = needles.find(member.name.encode()) or needles.find(
                member.linkname.encode())
            if name is None and member.isreg() and member.size:
                handle = tar.extractfile(member)
                assert handle is not None
                if _git_object(shown):
                    name = _in_git_object(shown, handle.read(), needles, raw=True)
                else:
                    name = needles.in_stream(_chunks(handle))
            if name is not None:
                hits.append(Hit(redact(shown, secrets.values()), name))
    return hits


def _chunks(handle: Any) -> Iterator[bytes]:
    while chunk := handle.read(CHUNK):
        yield chunk


def _git_object(shown: str) -> bool:
    """A loose object (`objects/ab/cdef…`) or a pack (`objects/pack/pack-….pack`)."""
    parts = PurePosixPath(shown).parts
    if len(parts) < 3 or "objects" not in parts[:-2]:
        return False
    if parts[-2] == "pack":
        return parts[-1].endswith(".pack")
    return len(parts[-2]) == 2 and len(parts[-1]) >= 38


def _in_git_object(shown: str, data: bytes | mmap.mmap, needles: Needles, *,
                   raw: bool = False) -> str | None:
    """A secret inside git's compressed objects: a loose object inflated, a pack's
    objects inflated one by one (a delta's inserted bytes hold new text whole)."""
    if raw and (found := needles.find(data)):
        return found
    if not _git_object(shown):
        return None
    if shown.endswith(".pack"):
        for inflated in _pack_objects(data):
            if found := needles.find(inflated):
                return found
        return None
    return needles.find(_inflate(data, 0)[0])


def _inflate(data: bytes | mmap.mmap, pos: int) -> tuple[bytes, int]:
    """The zlib stream at `pos`, inflated (at most MAX_INFLATED), and where it ends."""
    stream = zlib.decompressobj()
    out = bytearray()
    try:
        while not stream.eof and pos < len(data):
            chunk = data[pos:pos + CHUNK]
            out += stream.decompress(chunk, MAX_INFLATED - len(out) + 1)
            used = len(chunk) - len(stream.unused_data)
            if stream.unconsumed_tail or len(out) > MAX_INFLATED:
                return bytes(out[:MAX_INFLATED]), len(data)  # too big: read no further
            pos += used
    except zlib.error:
        return bytes(out), len(data)
    return bytes(out), pos


def _pack_objects(data: bytes | mmap.mmap) -> Iterator[bytes]:
    """Each object of a git pack (version 2 or 3), inflated; deltas as their delta data."""
    if len(data) < 12 or data[:4] != b"PACK":
        return
    count = int.from_bytes(data[8:12], "big")
    pos = 12
    for _ in range(count):
        if pos >= len(data):
            return
        byte = data[pos]
        kind = (byte >> 4) & 7
        pos += 1
        while byte & 0x80 and pos < len(data):
            byte = data[pos]
            pos += 1
        if kind == OFS_DELTA:
            byte = 0x80
            while byte & 0x80 and pos < len(data):
                byte = data[pos]
                pos += 1
        elif kind == REF_DELTA:
            pos += 20
        inflated, pos = _inflate(data, pos)
        yield inflated


def describe(hits: list[Hit], limit: int = 10) -> str:
    """Where the secrets were found, for the build's error: names only, never values."""
    shown = [f"{hit.secret} in {hit.path}" for hit in hits[:limit]]
    more = f" and {len(hits) - limit} more file(s)" if len(hits) > limit else ""
    return ", ".join(shown) + more
