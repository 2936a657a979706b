"""Real git on fakehub's bare repositories: plumbing only, never a work tree.

Merges use `git merge-tree --write-tree` (git 2.38+), so the server never checks out
files; conflicts are what git itself reports.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ZERO_SHA = "0" * 40


class GitError(RuntimeError):
    pass


@dataclass(frozen=True)
class Signature:
    name: str
    email: str


def _env(author: Signature | None = None, committer: Signature | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    if author:
        env.update({"GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email})
    who = committer or author
    if who:
        env.update({"GIT_COMMITTER_NAME": who.name, "GIT_COMMITTER_EMAIL": who.email})
    return env


def git(
    repo: Path,
    *args: str,
    input: bytes | None = None,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=input,
        capture_output=True,
        env=env or _env(),
        check=False,
    )
    if check and proc.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace').strip()}")
    return proc


def out(repo: Path, *args: str, **kw) -> str:
    return git(repo, *args, **kw).stdout.decode().strip()


def init_bare(path: Path, default_branch: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["git", "init", "--quiet", "--bare", f"--initial-branch={default_branch}", str(path)],
        check=True,
        env=_env(),
    )
    # http-backend refuses pushes unless enabled; fakehub does its own auth first.
    git(path, "config", "http.receivepack", "true")
    git(path, "config", "uploadpack.allowAnySHA1InWant", "true")
    git(path, "config", "receive.advertisePushOptions", "true")


def resolve(repo: Path, rev: str) -> str | None:
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def ref_sha(repo: Path, ref: str) -> str | None:
    full = ref if ref.startswith("refs/") else f"refs/heads/{ref}"
    proc = git(repo, "rev-parse", "--verify", "--quiet", full, check=False)
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def list_refs(repo: Path, prefix: str = "refs/") -> dict[str, str]:
    text = out(repo, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
    return dict(line.split(" ", 1) for line in text.splitlines() if line)


def update_ref(repo: Path, ref: str, new: str, old: str | None = None) -> bool:
    """Compare-and-swap a ref; False when it moved under us."""
    args = ["update-ref", ref, new] + ([old] if old else [])
    return git(repo, *args, check=False).returncode == 0


def delete_ref(repo: Path, ref: str) -> None:
    git(repo, "update-ref", "-d", ref)


def _kept_by_commit_ids(compute):
    """`compute(repo, a, b)`, kept for two full commit ids: its answer depends on them
    alone (a PR's shape asks for the same few several times a second while a test polls
    it). An error is not kept: an object may arrive later."""
    kept = functools.lru_cache(maxsize=4096)(lambda repo, a, b: compute(Path(repo), a, b))

    @functools.wraps(compute)
    def answer(repo: Path, a: str, b: str):
        if _SHA.fullmatch(a) and _SHA.fullmatch(b):
            return kept(str(repo), a, b)
        return compute(repo, a, b)

    return answer


def is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    try:
        return _is_ancestor(repo, ancestor, descendant)
    except GitError:
        return False


@_kept_by_commit_ids
def _is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    proc = git(repo, "merge-base", "--is-ancestor", ancestor, descendant, check=False)
    if proc.returncode not in (0, 1):
        raise GitError(proc.stderr.decode(errors="replace"))
    return proc.returncode == 0


def merge_base(repo: Path, a: str, b: str) -> str | None:
    try:
        return _merge_base(repo, a, b)
    except GitError:
        return None


@_kept_by_commit_ids
def _merge_base(repo: Path, a: str, b: str) -> str | None:
    proc = git(repo, "merge-base", a, b, check=False)
    if proc.returncode not in (0, 1):  # 1: no common ancestor
        raise GitError(proc.stderr.decode(errors="replace"))
    return proc.stdout.decode().strip() or None


@_kept_by_commit_ids
def merge_tree(repo: Path, ours: str, theirs: str) -> tuple[str | None, bool]:
    """(tree, clean): the tree of merging `theirs` into `ours`; tree None on conflict."""
    proc = git(repo, "merge-tree", "--write-tree", "--no-messages", ours, theirs, check=False)
    if proc.returncode == 0:
        return proc.stdout.decode().split()[0], True
    if proc.returncode == 1:
        return None, False
    raise GitError(proc.stderr.decode(errors="replace"))


def commit_tree(
    repo: Path,
    tree: str,
    parents: list[str],
    message: str,
    author: Signature,
    committer: Signature | None = None,
    author_date: str | None = None,
) -> str:
    env = _env(author, committer)
    if author_date:
        env["GIT_AUTHOR_DATE"] = author_date
    args = ["commit-tree", tree]
    for parent in parents:
        args += ["-p", parent]
    return out(repo, *args, input=message.encode(), env=env)


def commit_files(
    repo: Path,
    parent: str | None,
    files: dict[str, str | bytes | None],
    message: str,
    author: Signature,
    executable: set[str] | None = None,
) -> str:
    """A commit on top of `parent` with `files` written (None deletes a path).

    Paths in `executable`, and `*.sh`, get mode 100755.
    """
    with tempfile.TemporaryDirectory(prefix="fakehub-index-") as tmp:
        env = _env(author)
        env["GIT_INDEX_FILE"] = str(Path(tmp) / "index")
        if parent:
            git(repo, "read-tree", parent, env=env)
        for name, content in files.items():
            if content is None:
                # mode 0 removes the entry; --force-remove would want a work tree
                git(repo, "update-index", "-z", "--index-info",
                    input=f"0 {ZERO_SHA}\t{name}\0".encode(), env=env)
                continue
            data = content.encode() if isinstance(content, str) else content
            blob = out(repo, "hash-object", "-w", "--stdin", input=data, env=env)
            mode = "100755" if name.endswith(".sh") or name in (executable or ()) else "100644"
            git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{blob},{name}", env=env)
        tree = out(repo, "write-tree", env=env)
    return commit_tree(repo, tree, [parent] if parent else [], message, author)


def executables_in_dir(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and os.access(p, os.X_OK) and ".git" not in p.relative_to(root).parts
    }


def files_from_dir(root: Path) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and ".git" not in path.relative_to(root).parts:
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


def read_blob(repo: Path, rev: str, path: str) -> tuple[bytes, str] | None:
    """(content, blob sha) of a file at a revision, or None."""
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}:{path}", check=False)
    if proc.returncode != 0:
        return None
    oid = proc.stdout.decode().strip()
    if out(repo, "cat-file", "-t", oid) != "blob":
        return None
    return git(repo, "cat-file", "blob", oid).stdout, oid


def list_tree(repo: Path, rev: str, path: str) -> list[tuple[str, str, str, int]] | None:
    """Entries (type, name, sha, size) of a directory at a revision, or None."""
    spec = f"{rev}:{path}" if path else f"{rev}^{{tree}}"
    proc = git(repo, "ls-tree", "-l", spec, check=False)
    if proc.returncode != 0:
        return None
    entries = []
    for line in proc.stdout.decode().splitlines():
        meta, name = line.split("\t", 1)
        _, kind, oid, size = meta.split()
        entries.append((kind, name, oid, int(size) if size != "-" else 0))
    return entries


@dataclass
class CommitInfo:
    sha: str
    tree: str
    parents: list[str]
    author_name: str
    author_email: str
    author_date: str
    committer_name: str
    committer_email: str
    committer_date: str
    message: str


_FORMAT = "%H%x00%T%x00%P%x00%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%B%x1e"


def _parse_commits(text: str) -> list[CommitInfo]:
    commits = []
    for record in text.split("\x1e"):
        record = record.lstrip("\n")
        if not record:
            continue
        f = record.split("\x00")
        commits.append(
            CommitInfo(
                sha=f[0],
                tree=f[1],
                parents=f[2].split(),
                author_name=f[3],
                author_email=f[4],
                author_date=_utc(f[5]),
                committer_name=f[6],
                committer_email=f[7],
                committer_date=_utc(f[8]),
                message=f[9].rstrip("\n"),
            )
        )
    return commits


def _utc(stamp: str) -> str:
    from datetime import UTC, datetime

    return datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def commit_info(repo: Path, sha: str) -> CommitInfo:
    return _parse_commits(out(repo, "log", "-1", f"--format={_FORMAT}", sha))[0]


def commits_between(repo: Path, base: str | None, head: str, limit: int = 250) -> list[CommitInfo]:
    """Commits reachable from head but not base, oldest first."""
    spec = [head, f"^{base}"] if base else [head]
    text = out(repo, "log", "--reverse", f"--format={_FORMAT}", f"--max-count={limit}", *spec)
    return _parse_commits(text)


@_kept_by_commit_ids
def count_commits(repo: Path, base: str, head: str) -> int:
    return int(out(repo, "rev-list", "--count", head, f"^{base}"))


@dataclass
class FileChange:
    filename: str
    status: str  # added, removed, modified, renamed
    additions: int
    deletions: int
    sha: str | None
    previous_filename: str | None = None
    patch: str | None = None

    @property
    def changes(self) -> int:
        return self.additions + self.deletions


_STATUS = {"A": "added", "D": "removed", "M": "modified", "R": "renamed", "T": "changed"}


def diff_files(repo: Path, base: str, head: str) -> list[FileChange]:
    """The files changed from base to head, with their blob ids and patches.

    Three git processes whatever the size of the change (a PR of thousands of files is
    listed page by page, step after step); the answer for two commit ids never changes,
    so it is kept.
    """
    if _SHA.fullmatch(base) and _SHA.fullmatch(head):
        return list(_diff_files_cached(str(repo), base, head))
    return _diff_files(repo, base, head)


_SHA = re.compile(r"[0-9a-f]{40}")


@functools.lru_cache(maxsize=256)
def _diff_files_cached(repo: str, base: str, head: str) -> tuple[FileChange, ...]:
    return tuple(_diff_files(Path(repo), base, head))


def _diff_files(repo: Path, base: str, head: str) -> list[FileChange]:
    raw = out(repo, "diff", "--raw", "--no-abbrev", "-M", "-z", base, head).split("\x00")
    numstat = out(repo, "diff", "--numstat", "-M", "-z", base, head).split("\x00")
    counts = _parse_numstat(numstat)
    patches = _patches(repo, base, head)
    changes: list[FileChange] = []
    i = 0
    while i < len(raw) and raw[i]:
        # ":100644 100644 <old blob> <new blob> M" then the path(s), NUL-separated
        _, _, _, blob, status = raw[i].lstrip(":").split(" ")
        code = status[0]
        if code in "RC":
            old, new = raw[i + 1], raw[i + 2]
            i += 3
        else:
            old, new = None, raw[i + 1]
            i += 2
        adds, dels = counts.get(new, (0, 0))
        sha = None if code == "D" else blob
        patch = patches[new] if new in patches else file_patch(repo, base, head, new)
        changes.append(FileChange(new, _STATUS.get(code, "modified"), adds, dels, sha,
                                  old if code == "R" else None, patch))
    return changes


def _patches(repo: Path, base: str, head: str) -> dict[str, str]:
    """Each file's patch from one `git diff`, from its first hunk header as GitHub shows
    it. A path git had to quote is left out (file_patch asks for it alone)."""
    text = git(repo, "-c", "core.quotepath=off", "diff", "-M", "--no-color", "--no-ext-diff",
               base, head).stdout.decode(errors="replace")
    patches: dict[str, str] = {}
    for chunk in re.split(r"^(?=diff --git )", text, flags=re.M):
        path = None
        for line in chunk.split("\n"):
            if line.startswith("@@"):
                break
            if line.startswith("+++ b/"):
                path = line[6:]
            elif line.startswith("--- a/") and path is None:
                path = line[6:]
            elif line.startswith("rename to "):
                path = line[10:]
        if path is None or path.startswith('"'):
            continue
        start = chunk.find("\n@@")
        patches[path] = chunk[start + 1:].rstrip("\n") if start >= 0 else ""
    return patches


def _parse_numstat(parts: list[str]) -> dict[str, tuple[int, int]]:
    counts: dict[str, tuple[int, int]] = {}
    i = 0
    while i < len(parts) and parts[i]:
        fields = parts[i].split("\t")
        adds, dels = (int(x) if x != "-" else 0 for x in fields[:2])
        if fields[2]:
            counts[fields[2]] = (adds, dels)
            i += 1
        else:  # a rename: the old and new names follow as separate fields
            counts[parts[i + 2]] = (adds, dels)
            i += 3
    return counts


def file_patch(repo: Path, base: str, head: str, path: str) -> str:
    text = git(repo, "diff", "-M", base, head, "--", path).stdout.decode(errors="replace")
    # GitHub's patch starts at the first hunk header.
    start = text.find("@@")
    return text[start:].rstrip("\n") if start >= 0 else ""


def rebase_commits(
    repo: Path, onto: str, commits: list[CommitInfo], committer: Signature
) -> str | None:
    """Replay commits onto `onto` (a rebase merge); None on conflict."""
    tip = onto
    for commit in commits:
        parent = commit.parents[0] if commit.parents else None
        if parent is None:
            return None
        tree = _three_way(repo, parent, tip, commit.sha)
        if tree is None:
            return None
        tip = commit_tree(
            repo,
            tree,
            [tip],
            commit.message + "\n",
            Signature(commit.author_name, commit.author_email),
            committer,
            author_date=commit.author_date,
        )
    return tip


def _three_way(repo: Path, base: str, ours: str, theirs: str) -> str | None:
    """Tree of applying base..theirs on ours, using a temporary index."""
    with tempfile.TemporaryDirectory(prefix="fakehub-index-") as tmp:
        env = _env()
        env["GIT_INDEX_FILE"] = str(Path(tmp) / "index")
        args = ("read-tree", "-i", "-m", "--aggressive", base, ours, theirs)
        proc = git(repo, *args, env=env, check=False)
        if proc.returncode != 0:
            return None
        proc = git(repo, "write-tree", env=env, check=False)
        if proc.returncode != 0:  # unmerged entries remain: a real conflict
            return None
        return proc.stdout.decode().strip()
