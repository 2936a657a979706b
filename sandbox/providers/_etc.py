"""The /etc a local sandbox sees: one directory hangar keeps, bound read-only at /etc.

bubblewrap pays for every mount it makes (a bind, a read-only remount, a read of the
mount table), and binding each allowed /etc path on its own was most of a sandbox's
start. Instead hangar copies the allowed paths into a directory of its own and keeps
the copies current: a file is copied again when its host original changes (a stat per
file before every command); a directory (certificates, alternatives: hundreds of
entries) is looked at again at most once a second and mirrored again when it, a
directory or a file in it changed. Links are copied as links, so they lead where they
lead on the host. Only world-readable files are copied: when hangar runs as root the
sandbox's uid maps to host root, and nothing owner-only of the host may reach it.
passwd and group, the same for every sandbox, live here too.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import stat
import time
from pathlib import Path

log = logging.getLogger(__name__)

HOST_ETC = Path("/etc")
DIRECTORY_RECHECK_S = 1.0

Signature = tuple[int, int, int, int, int]


def _signature(st: os.stat_result) -> Signature:
    return (st.st_mode, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _tree_signature(root: Path) -> tuple[tuple[str, Signature], ...]:
    """The stat of root, of every directory and of every file below it. Links are not
    looked at one by one: a link is replaced, never changed, and a replacement changes
    its directory's stat (dpkg, update-alternatives and update-ca-certificates all
    rename into place)."""
    found = [(str(root), _signature(os.stat(root)))]
    todo = [root]
    while todo:
        directory = todo.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_symlink():
                    continue
                found.append((entry.path, _signature(entry.stat(follow_symlinks=False))))
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
    return tuple(sorted(found))


class SharedEtc:
    """`directory`: copies of the allowed paths of the host's /etc, kept current by
    `refresh`, plus the sandbox's own passwd and group."""

    def __init__(
        self,
        directory: Path,
        allowed: tuple[str, ...],
        own: dict[str, str],
        *,
        host_etc: Path = HOST_ETC,
    ) -> None:
        self.directory = directory
        self.host_etc = host_etc
        self._allowed = allowed
        self._own = own
        self._seen: dict[str, object] = {}
        self._directories_checked = -DIRECTORY_RECHECK_S
        self._made = False

    def refresh(self) -> None:
        """Bring the copies up to date with the host."""
        if not self._made:
            self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
            os.chmod(self.directory, 0o755)
            for name, text in self._own.items():
                _replace_bytes(self.directory / name, text.encode())
            self._made = True
        now = time.monotonic()
        look_into_directories = now - self._directories_checked >= DIRECTORY_RECHECK_S
        if look_into_directories:
            self._directories_checked = now
        for name in self._allowed:
            host = self.host_etc / name
            try:
                st = os.stat(host)
            except OSError:
                st = None
            if st is not None and stat.S_ISDIR(st.st_mode):
                if not look_into_directories and name in self._seen:
                    continue
                try:
                    signature: object = ("dir", _tree_signature(host))
                except OSError:
                    signature = None
            elif st is not None and stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IROTH:
                signature = ("file", _signature(st))
            else:
                signature = None
            if name in self._seen and self._seen[name] == signature:
                continue
            try:
                self._copy(host, self.directory / name, signature)
            except OSError as exc:
                # Another hangar on the same root copying at once, a file gone meanwhile:
                # the copy there stays, and the next command tries again.
                log.warning("could not copy %s for sandboxes: %s", host, exc)
                continue
            self._seen[name] = signature

    @staticmethod
    def _copy(host: Path, copy: Path, signature: object) -> None:
        """Replace copy with the host's path: a file whole (a running sandbox reads the old
        or the new), a directory by two renames."""
        copy.parent.mkdir(parents=True, exist_ok=True)
        fresh = _beside(copy, "new")
        try:
            SharedEtc._swap_in(host, copy, fresh, signature)
        finally:
            _remove(fresh)  # left only when the swap failed half way

    @staticmethod
    def _swap_in(host: Path, copy: Path, fresh: Path, signature: object) -> None:
        if signature is None:
            _remove(copy)
            return
        if isinstance(signature, tuple) and signature[0] == "file":
            shutil.copyfile(host, fresh)
            os.chmod(fresh, 0o644)
        else:
            _mirror(host, fresh)
        if copy.is_dir() and not copy.is_symlink():
            # Nothing can be renamed over a directory that holds entries.
            old = _beside(copy, "old")
            os.rename(copy, old)
            os.replace(fresh, copy)
            _remove(old)
        else:
            os.replace(fresh, copy)


def _beside(path: Path, kind: str) -> Path:
    """A name next to path that no other copy in progress uses, this process's or not."""
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.{kind}")


def _mirror(source: Path, destination: Path) -> None:
    """A directory's tree as `shutil.copytree(symlinks=True)` made it, in a sixth of the
    time (hangar's first copy of /etc took 80-140 ms, most of a sandbox provider's start):
    a link becomes a new name for the host's link (one call, where making a link again is
    two; a new link with its text where that cannot be, across file systems or where the
    kernel keeps others' files from being linked), a world-readable file is copied, and
    no times or attributes are carried over. A directory others may not list and enter
    is left out, as a file others may not read is."""
    linking = [True]
    searchable = stat.S_IROTH | stat.S_IXOTH

    def walk(source: str, destination: str) -> None:
        os.mkdir(destination)
        os.chmod(destination, 0o755)
        with os.scandir(source) as entries:
            for entry in entries:
                target = os.path.join(destination, entry.name)
                if entry.is_symlink():
                    _copy_link(entry.path, target, linking)
                elif entry.is_dir(follow_symlinks=False):
                    if entry.stat(follow_symlinks=False).st_mode & searchable == searchable:
                        walk(entry.path, target)
                elif entry.is_file(follow_symlinks=False):
                    _copy_readable(entry.path, target)

    walk(str(source), str(destination))


def _copy_link(source: str, destination: str, linking: list[bool]) -> None:
    """A symbolic link copied as itself: a hard link to it while that works (links have
    no contents to write through, and no mode of their own), else a new link."""
    if linking[0]:
        try:
            os.link(source, destination, follow_symlinks=False)
            return
        except OSError:
            linking[0] = False
    os.symlink(os.readlink(source), destination)


def _copy_readable(source: str, destination: str) -> None:
    if os.stat(source).st_mode & stat.S_IROTH:
        shutil.copyfile(source, destination)
        os.chmod(destination, 0o644)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _replace_bytes(path: Path, data: bytes) -> None:
    fresh = _beside(path, "new")
    fresh.write_bytes(data)
    os.chmod(fresh, 0o644)
    os.replace(fresh, path)
