"""Build secrets in a checkout are found wherever install may leave them, in any encoding:
files and their names, link targets, `.git`'s config, and git's compressed objects,
loose and packed. Real git writes the objects; the scan reads the directory hangar would
keep and the archive a Docker or Kubernetes build is made from."""

from __future__ import annotations

import base64
import os
import subprocess
import tarfile
from pathlib import Path
from urllib.parse import quote

import pytest

from sandbox import secretscan

SECRET = "npm_Bu1ld-S3cret-0123456789"
SECRETS = {"NPM_TOKEN": SECRET}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True)


def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "README.md").write_text("# widgets\n")
    (repo / "node_modules").mkdir()
    (repo / "node_modules" / "left-pad.js").write_text("module.exports = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "start")
    return repo


def leave(repo: Path, how: str) -> str:
    """What install did with the secret; the path the scan must name."""
    blob = b"x" + SECRET.encode() + b"\n"
    if how == "raw file":
        (repo / "node_modules" / ".npmrc").write_text(f"//registry/:_authToken={SECRET}\n")
        return "node_modules/.npmrc"
    if how == "base64 in .git":
        (repo / ".git" / "leak").write_text(base64.b64encode(blob).decode())
        return ".git/leak"
    if how == "base64url at offset 2":
        (repo / "cache.json").write_text(base64.urlsafe_b64encode(b"ab" + blob).decode())
        return "cache.json"
    if how == "hex":
        (repo / "build.log").write_text(blob.hex().upper())
        return "build.log"
    if how == "url-encoded in .git/config":
        git(repo, "config", "remote.origin.url",
            f"https://ci:{quote(SECRET, safe='')}@example.com/x.git")
        return ".git/config"
    if how == "a link's target":
        os.symlink(f"/tmp/{SECRET}", repo / "link")
        return "link"
    if how == "a file's name":
        (repo / f"{SECRET}.txt").write_text("x")
        return "[redacted].txt"  # named, but not spelled out
    if how in ("committed", "committed and packed"):
        (repo / "token.txt").write_text(SECRET)
        git(repo, "add", "token.txt")
        git(repo, "commit", "-qm", "keep it")
        (repo / "token.txt").unlink()  # gone from the tree; still in .git's objects
        git(repo, "commit", "-qam", "hide it")
        if how == "committed":
            return ".git/objects/"
        git(repo, "gc", "-q", "--aggressive", "--prune=now")
        return ".git/objects/pack/"
    raise AssertionError(how)


HOW = ["raw file", "base64 in .git", "base64url at offset 2", "hex",
       "url-encoded in .git/config", "a link's target", "a file's name", "committed",
       "committed and packed"]


@pytest.mark.parametrize("how", HOW)
def test_a_secret_is_found_where_install_left_it(tmp_path, how):
    repo = checkout(tmp_path)
    where = leave(repo, how)
    hits = secretscan.scan_tree(repo, SECRETS)
    assert hits and all(hit.secret == "NPM_TOKEN" for hit in hits), hits
    assert any(hit.path.startswith(where) for hit in hits), hits
    archive = tmp_path / "checkout.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(repo, arcname="repo")
    in_tar = secretscan.scan_tar(archive, SECRETS, strip="repo/")
    assert any(hit.path.startswith(where) for hit in in_tar), in_tar
    said = secretscan.describe(hits)
    assert "NPM_TOKEN in " in said and SECRET not in said


def test_a_clean_checkout_and_no_secrets_find_nothing(tmp_path):
    repo = checkout(tmp_path)
    git(repo, "gc", "-q")
    assert secretscan.scan_tree(repo, SECRETS) == []
    assert secretscan.scan_tree(repo, {}) == []
    (repo / "x").write_text(SECRET)
    assert secretscan.scan_tree(repo, {"EMPTY": ""}) == []


def test_a_fifo_in_the_checkout_is_never_opened(tmp_path):
    repo = checkout(tmp_path)
    os.mkfifo(repo / "pipe")
    assert secretscan.scan_tree(repo, SECRETS) == []  # returns: nothing blocked on it
