"""hangar's copy of the host's /etc for local sandboxes (sandbox/providers/_etc.py), on
its own: what is copied, what never is, and how it follows the host."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from sandbox.providers._etc import SharedEtc


def _host(tmp_path):
    host = tmp_path / "host-etc"
    (host / "certs").mkdir(parents=True)
    (host / "hosts").write_text("127.0.0.1 one\n")
    (host / "shadow").write_text("root:secret\n")
    (host / "shadow").chmod(0o640)
    (host / "certs" / "a.pem").write_text("a\n")
    (host / "certs" / "owner-only.key").write_text("key\n")
    (host / "certs" / "owner-only.key").chmod(0o600)
    (host / "certs" / "a.0").symlink_to("a.pem")
    return host


def test_copies_world_readable_files_links_as_links_and_its_own_files(tmp_path):
    host = _host(tmp_path)
    etc = SharedEtc(tmp_path / "copy", ("hosts", "shadow", "certs", "absent"),
                    {"passwd": "hangar:x:1000:1000::/workspace/home:/bin/sh\n"},
                    host_etc=host)  # fmt: skip
    etc.refresh()
    copy = tmp_path / "copy"
    assert sorted(os.listdir(copy)) == ["certs", "hosts", "passwd"]
    assert sorted(os.listdir(copy / "certs")) == ["a.0", "a.pem"]
    assert os.readlink(copy / "certs" / "a.0") == "a.pem"
    assert (copy / "passwd").read_text().startswith("hangar:x:1000")


def test_follows_the_host_files_at_once_directories_at_the_next_look(tmp_path):
    host = _host(tmp_path)
    etc = SharedEtc(tmp_path / "copy", ("hosts", "certs"), {}, host_etc=host)
    etc.refresh()
    (host / "hosts").write_text("127.0.0.1 two\n")
    (host / "certs" / "b.pem").write_text("b\n")
    (host / "certs" / "a.pem").unlink()
    etc.refresh()
    assert (tmp_path / "copy" / "hosts").read_text() == "127.0.0.1 two\n"
    etc._directories_checked -= 60  # as if a minute went by
    etc.refresh()
    assert sorted(os.listdir(tmp_path / "copy" / "certs")) == ["a.0", "b.pem"]
    (host / "hosts").unlink()
    etc.refresh()
    assert not (tmp_path / "copy" / "hosts").exists()


def test_two_hangars_on_one_root_refresh_at_once_without_failing(tmp_path):
    host = _host(tmp_path)
    for n in range(30):
        (host / "certs" / f"c{n}.pem").write_text(f"{n}\n")
    copies = [SharedEtc(tmp_path / "copy", ("hosts", "certs"), {}, host_etc=host)
              for _ in range(2)]  # fmt: skip
    failures: list[BaseException] = []

    def churn(etc: SharedEtc) -> None:
        try:
            for round_ in range(8):
                (host / "certs" / f"c{round_}.pem").write_text(f"changed {round_}\n")
                etc._directories_checked -= 60
                etc.refresh()
        except BaseException as exc:  # the test reports any
            failures.append(exc)

    threads = [threading.Thread(target=churn, args=(etc,)) for etc in copies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    copies[0]._directories_checked -= 60
    copies[0]._seen.clear()
    copies[0].refresh()
    expected = sorted(set(os.listdir(host / "certs")) - {"owner-only.key"})
    assert sorted(os.listdir(tmp_path / "copy" / "certs")) == expected
    assert (tmp_path / "copy" / "certs" / "c7.pem").read_text() == "changed 7\n"


def _tree(root) -> dict[str, tuple]:
    """Every path below root: a link's text, a file's mode and bytes, a directory's mode."""
    found: dict[str, tuple] = {}
    for directory, names, files in os.walk(root):
        for name in names + files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode & 0o777
            if os.path.islink(path):
                found[os.path.relpath(path, root)] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                found[os.path.relpath(path, root)] = ("dir", mode)
            else:
                with open(path, "rb") as f:
                    found[os.path.relpath(path, root)] = ("file", mode, f.read())
    return found


@pytest.mark.parametrize("where", ["same file system", "another file system"])
def test_a_directory_is_copied_as_copytree_copied_it_links_by_name_where_they_can_be(
        tmp_path, where):
    if where == "another file system":
        if not os.path.isdir("/dev/shm") or os.stat("/dev/shm").st_dev == os.stat(
                tmp_path).st_dev:
            pytest.skip("no second file system here")
        base = Path(tempfile.mkdtemp(dir="/dev/shm"))
    else:
        base = tmp_path
    try:
        host = _host(base)
        (host / "certs" / "java").mkdir()
        (host / "certs" / "java" / "cacerts").write_text("j\n")
        (host / "certs" / "java" / "store").symlink_to("../a.pem")
        (host / "certs" / "dangling.0").symlink_to("nowhere.pem")
        (host / "certs" / "sealed").mkdir(mode=0o700)
        (host / "certs" / "sealed" / "readable.pem").write_text("s\n")
        etc = SharedEtc(tmp_path / "copy", ("certs",), {}, host_etc=host)
        etc.refresh()
        copy = tmp_path / "copy" / "certs"
        expected = {path: entry for path, entry in _tree(host / "certs").items()
                    if "owner-only" not in path and not path.startswith("sealed")}
        expected = {path: ("dir", 0o755) if entry[0] == "dir" else
                    ("file", 0o644, entry[2]) if entry[0] == "file" else entry
                    for path, entry in expected.items()}
        assert _tree(copy) == expected
        # On one file system a link is a new name for the host's link; across two, a new
        # link with the same text.
        shared = os.lstat(copy / "a.0").st_ino == os.lstat(host / "certs" / "a.0").st_ino
        assert shared is (where == "same file system")
        # A file is a copy whatever the file system: writing it never reaches the host.
        assert os.lstat(copy / "a.pem").st_ino != os.lstat(host / "certs" / "a.pem").st_ino
    finally:
        if base != tmp_path:
            shutil.rmtree(base)
