"""Reading a file an agent can touch, without trusting it.

Everything under /workspace belongs to the agent: any path there may be a FIFO (opening
it blocks), a socket, a device, a symlink leading out (in any component, swapped at any
moment), or a 256 MiB sparse file. hangar reads such a path only through this module:

- `read_beneath(root, rel, max_bytes)` on the host: each component is opened relative to
  the one before with O_NOFOLLOW (no symlink anywhere, no race between check and open),
  the file with O_NONBLOCK (a FIFO never blocks), fstat must say regular file, and only
  the last `max_bytes` bytes are read.
- `SAFE_TAIL_SH` inside a container or pod (docker, kubernetes): the same refusals in
  POSIX shell with coreutils (`realpath`, `tail -c`, `timeout`), the output bounded by
  `tail -c`. The caller bounds the exec's time too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

LOG_TAIL_BYTES = 1024 * 1024  # agent.log and anything copy_out returns by default
EXIT_FILE_BYTES = 64  # an exit code is a few digits
# Exit codes of SAFE_TAIL_SH.
MISSING_CODE = 44
REFUSED_CODE = 45
# Seconds a read inside a container may take before hangar gives up on it.
EXEC_READ_TIMEOUT_S = 30

# argv: sh -c SAFE_TAIL_SH <name> <absolute normalised path> <max bytes>
SAFE_TAIL_SH = (
    'f="$1"; n="$2"; '
    f'[ -e "$f" ] || [ -L "$f" ] || exit {MISSING_CODE}; '
    # Any symlink on the way makes the real path differ from the path asked for.
    f'[ "$(realpath -e -- "$f" 2>/dev/null)" = "$f" ] || exit {REFUSED_CODE}; '
    f'[ -f "$f" ] || exit {REFUSED_CODE}; '
    't=""; command -v timeout >/dev/null 2>&1 && t="timeout -s KILL 10"; '
    'exec $t tail -c "$n" -- "$f" 2>/dev/null'
)


class NotARegularFile(OSError):
    """The path is a FIFO, socket, device, directory or leads through a symlink."""


def refusal(path: str) -> NotARegularFile:
    return NotARegularFile(
        f"{path}: not a regular file inside /workspace (a FIFO, socket, device, directory "
        "or a symlink); hangar reads only regular files the agent left there"
    )


def read_beneath(root: Path, rel: str, max_bytes: int = LOG_TAIL_BYTES) -> bytes:
    """The last `max_bytes` bytes of the regular file `root/rel`, never following a link.

    FileNotFoundError when it is absent; NotARegularFile for anything else than a regular
    file reached without symlinks.
    """
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"{rel!r}: not a path of a file beneath {root}")
    shown = "/workspace/" + "/".join(parts)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ENOTDIR and _is_link(part, fd):
                    raise refusal(shown) from None
                raise _translate(exc, shown) from None
            os.close(fd)
            fd = nxt
        try:
            # Look before opening: a device is never opened at all.
            if not stat.S_ISREG(os.stat(parts[-1], dir_fd=fd, follow_symlinks=False).st_mode):
                raise refusal(shown)
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
            file_fd = os.open(parts[-1], flags, dir_fd=fd)
        except NotARegularFile:
            raise
        except OSError as exc:
            raise _translate(exc, shown) from None
    finally:
        os.close(fd)
    try:
        info = os.fstat(file_fd)  # swapped between the look and the open?
        if not stat.S_ISREG(info.st_mode):
            raise refusal(shown)
        if info.st_size > max_bytes:
            os.lseek(file_fd, info.st_size - max_bytes, os.SEEK_SET)
        chunks, left = [], max_bytes
        while left > 0 and (chunk := os.read(file_fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(file_fd)


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _translate(exc: OSError, shown: str) -> OSError:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return FileNotFoundError(errno.ENOENT, "no such file", shown)
    if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
        return refusal(shown)
    return exc
