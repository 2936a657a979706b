"""Real git on fakehub's bare repositories: plumbing only, never a work tree.

Merges use `git merge-tree --write-tree` (git 2.38+), so the server never checks out
files; conflicts are what git itself reports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    # http-backend refuses pushes unless enabled; fakehub does its own auth first. Written
    # at the end of the new repository's config, as `git config` would, without three
    # more git processes.
    with open(path / "config", "a") as config:
        config.write("[http]\n\treceivepack = true\n"
                     "[uploadpack]\n\tallowAnySHA1InWant = true\n"
                     "[receive]\n\tadvertisePushOptions = true\n")


def resolve(repo: Path, rev: str) -> str | None:
    """The commit `rev` names, or None. A commit's id, once found, is kept: it names that
    commit for as long as the repository is the same one."""
    known = _known_commits.get(_identity(repo), ())
    if rev in known:
        return rev
    named = _name_to_ref(repo, rev)
    if named in known:  # a branch or tag, read from its file, at a commit seen before
        return named
    proc = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    sha = proc.stdout.decode().strip() or None if proc.returncode == 0 else None
    if sha is not None and sha in (rev, named):  # the id itself, or a ref's, is a commit
        _known_commits.setdefault(_identity(repo), set()).add(sha)
    return sha


def ref_sha(repo: Path, ref: str) -> str | None:
    """What a ref points to (a branch name means refs/heads/), or None.

    Read from the files git keeps refs in, as git reads them (the loose file, then
    packed-refs): a poll asks this several times a second, and a git process costs a
    millisecond of CPU. git itself answers for a name that is not a plain ref, a
    symbolic ref, or a file it would have to judge."""
    full = ref if ref.startswith("refs/") else f"refs/heads/{ref}"
    found = _from_files(repo, full)
    if found is not _ASK_GIT:
        return found
    proc = git(repo, "rev-parse", "--verify", "--quiet", full, check=False)
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


# A repository is the same one while its directory is: one deleted and made again at the
# same path (a repository renamed, then one made with its old name) is another.
def _identity(repo: Path) -> tuple[str, int]:
    try:
        return str(repo), os.stat(repo).st_ino
    except OSError:
        return str(repo), -1


# Commit ids seen to name a commit in a repository: no answer of resolve() is kept for
# anything else (a ref moves; an object not there yet may arrive in the next push).
_known_commits: dict[tuple[str, int], set[str]] = {}

_ASK_GIT: Any = object()
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# git check-ref-format's rules, narrowed to names that are safe to open as a path below
# the repository: anything else (a "..", a part starting with ".", a ".lock", a character
# git would refuse) is git's to judge.
_PLAIN_REF = re.compile(r"refs/[A-Za-z0-9_+=%,-][A-Za-z0-9._+=%,-]*"
                        r"(/[A-Za-z0-9_+=%,-][A-Za-z0-9._+=%,-]*)*")


def _plain_ref(ref: str) -> bool:
    return (_PLAIN_REF.fullmatch(ref) is not None and ".." not in ref
            and not any(part.endswith((".lock", ".")) for part in ref.split("/")))


def _from_files(repo: Path, ref: str) -> str | None:
    """A full ref's id read from git's files, None when there is no such ref, or _ASK_GIT."""
    return _read_ref(repo, ref) if _plain_ref(ref) else _ASK_GIT


def _read_ref(repo: Path, ref: str) -> str | None:
    """The object id a ref's file holds, None when git has no such ref, or _ASK_GIT."""
    if (repo / "reftable").exists():
        return _ASK_GIT  # another ref store: git reads it
    try:
        text = (repo / ref).read_text()
    except (FileNotFoundError, NotADirectoryError):
        return _packed_refs(repo).get(ref)
    except (OSError, UnicodeDecodeError):
        return _ASK_GIT  # a directory (refs/heads), say: git says what that means
    text = text.strip()
    return text if _OBJECT_ID.fullmatch(text) else _ASK_GIT  # "ref: ..." and the rest


def _name_to_ref(repo: Path, name: str) -> str | None:
    """The id a short name's ref points to, found where git looks for it first
    ($GIT_DIR/name, refs/name, refs/tags/name, refs/heads/name, refs/remotes/...), or
    None: then git itself is asked (an id's prefix, `main~2`, a name it reads otherwise)."""
    if _OBJECT_ID.fullmatch(name) or not _plain_ref(f"refs/{name}"):
        return None
    for candidate in (name, f"refs/{name}", f"refs/tags/{name}", f"refs/heads/{name}",
                      f"refs/remotes/{name}", f"refs/remotes/{name}/HEAD"):
        if candidate == name and not (repo / name).exists():
            continue
        found = _read_ref(repo, candidate)
        if found is _ASK_GIT:
            return None
        if found is not None:
            return found
    return None


_packed: dict[str, tuple[tuple[int, int, int], dict[str, str]]] = {}


def _packed_refs(repo: Path) -> dict[str, str]:
    """packed-refs as {ref: id}, read again only when the file changed (git replaces it
    whole, by a rename, so a new file is a new inode)."""
    path = repo / "packed-refs"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {}
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    kept = _packed.get(str(path))
    if kept is not None and kept[0] == stamp:
        return kept[1]
    refs: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line and line[0] not in "#^":
            sha, _, name = line.partition(" ")
            refs[name] = sha
    _packed[str(path)] = (stamp, refs)
    return refs


def list_refs(repo: Path, prefix: str = "refs/") -> dict[str, str]:
    text = out(repo, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
    return dict(line.split(" ", 1) for line in text.splitlines() if line)


def exact_ref(repo: Path, ref: str) -> str | None:
    """The id the ref named exactly so points to (as for-each-ref lists it), or None."""
    found = _from_files(repo, ref)
    return list_refs(repo, ref).get(ref) if found is _ASK_GIT else found


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
        if _OBJECT_ID.fullmatch(a) and _OBJECT_ID.fullmatch(b):
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
        # Every blob in one hash-object and every entry in one update-index, whatever the
        # number of files: a git process costs a millisecond of CPU.
        contents = {name: content.encode() if isinstance(content, str) else content
                    for name, content in files.items() if content is not None}
        written = list(contents)
        for i, data in enumerate(contents.values()):
            Path(tmp, f"blob-{i}").write_bytes(data)
        blobs = out(repo, "hash-object", "-w", "--stdin-paths", "--no-filters",
                    input="".join(f"{tmp}/blob-{i}\n" for i in range(len(written))).encode(),
                    env=env).split() if written else []
        blob_of = dict(zip(written, blobs, strict=True))
        entries = []
        for name, content in files.items():
            if content is None:
                # mode 0 removes the entry; --force-remove would want a work tree
                entries.append(f"0 {ZERO_SHA}\t{name}\0")
                continue
            mode = "100755" if name.endswith(".sh") or name in (executable or ()) else "100644"
            entries.append(f"{mode} {blob_of[name]}\t{name}\0")
        if entries:
            proc = git(repo, "update-index", "--add", "-z", "--index-info",
                       input="".join(entries).encode(), env=env)
            if proc.stderr:  # --index-info skips a path git refuses ("Ignoring path ...")
                raise GitError(f"git update-index: {proc.stderr.decode(errors='replace').strip()}")
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
    """(content, blob sha) of a file at a revision, or None.

    At a commit's id the answer never changes (a missing file stays missing), so it is
    kept for small files: each job's start asks for the same config and CODEOWNERS files.
    """
    if not _OBJECT_ID.fullmatch(rev):
        return _read_blob(repo, rev, path)
    key = (_identity(repo), rev, path)
    if key in _blobs:
        return _blobs[key]
    found = _read_blob(repo, rev, path)
    # A file missing at an id that names no commit yet may be there after a push.
    if (found is None and resolve(repo, rev) == rev) or (
            found is not None and len(found[0]) <= _KEPT_BLOB_BYTES):
        if len(_blobs) >= _KEPT_BLOBS:
            with contextlib.suppress(StopIteration, KeyError):  # another thread's at once
                del _blobs[next(iter(_blobs))]
        _blobs[key] = found
    return found


_KEPT_BLOBS, _KEPT_BLOB_BYTES = 1024, 64 * 1024
_blobs: dict[tuple[tuple[str, int], str, str], tuple[bytes, str] | None] = {}


def _read_blob(repo: Path, rev: str, path: str) -> tuple[bytes, str] | None:
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
    if _OBJECT_ID.fullmatch(sha):  # a commit's id: its fields never change
        kept = _commit_info(_identity(repo), sha)
        return dataclasses.replace(kept, parents=list(kept.parents))  # the caller's own
    return _parse_commits(out(repo, "log", "-1", f"--format={_FORMAT}", sha))[0]


@functools.lru_cache(maxsize=4096)
def _commit_info(repo: tuple[str, int], sha: str) -> CommitInfo:
    return _parse_commits(out(Path(repo[0]), "log", "-1", f"--format={_FORMAT}", sha))[0]


def commits_between(repo: Path, base: str | None, head: str, limit: int = 250) -> list[CommitInfo]:
    """Commits reachable from head but not base, oldest first; kept for commit ids."""
    if _OBJECT_ID.fullmatch(head) and (base is None or _OBJECT_ID.fullmatch(base)):
        kept = _commits_between(_identity(repo), base, head, limit)
        return [dataclasses.replace(c, parents=list(c.parents)) for c in kept]
    return _log_between(repo, base, head, limit)


@functools.lru_cache(maxsize=1024)
def _commits_between(repo: tuple[str, int], base: str | None, head: str,
                     limit: int) -> tuple[CommitInfo, ...]:
    return tuple(_log_between(Path(repo[0]), base, head, limit))


def _log_between(repo: Path, base: str | None, head: str, limit: int) -> list[CommitInfo]:
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
    if _OBJECT_ID.fullmatch(base) and _OBJECT_ID.fullmatch(head):
        return list(_diff_files_cached(str(repo), base, head))
    return _diff_files(repo, base, head)




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
