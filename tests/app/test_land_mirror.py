"""hangar's mirror against fakehub's real git over HTTP: which files conflict is git's own
merge (not the files both sides changed), what conflicts once another PR lands, and
whether a head is exactly a clean update of another."""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.landing import mirror, overlaps

CALC = "def add(a, b):\n    return a - b\n"
TEST = "import unittest\n\nfrom calc import add\n"


@dataclass
class Token:
    token: str


class GitHub:
    def __init__(self, hub, installation_id: int):
        self.hub, self.installation_id = hub, installation_id
        self.asked: list[tuple] = []

    async def installation_token(self, installation_id, *, repository=None, permissions=None):
        self.asked.append((installation_id, repository, permissions))
        return Token(self.hub.installation_token(installation_id))


class Settings:
    def __init__(self, data_dir: Path):
        self.data_dir = data_dir


class Engine:
    """What the mirror uses of the engine: the data directory, a lock, the App's tokens
    (through its GitHub reads)."""

    def __init__(self, hub, installation_id: int, data_dir: Path):
        self.settings = Settings(data_dir)
        self.github = GitHub(hub, installation_id)
        self._locks: dict[str, asyncio.Lock] = {}

    def lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())


@pytest.fixture
def repo(fakehub, tmp_path):
    app = fakehub.create_app(name="hangar")
    fakehub.create_user("acme")
    fakehub.create_repo("acme", "widgets", {"calc.py": CALC, "test_calc.py": TEST},
                        private=True)
    installation = fakehub.install(app.id, "acme", ["acme/widgets"])
    return fakehub, Engine(fakehub, installation, tmp_path / "data"), installation


def push(hub, branch: str, files: dict, base: str | None = None) -> str:
    return hub.push_files("acme/widgets", branch, files, f"on {branch}", as_user="acme",
                          base=base, bypass_rules=True)


async def fetched(engine, hub, installation, *refs):
    return await mirror.fetched(engine, repo="acme/widgets", clone_url=hub.git_url(
        "acme/widgets"), installation_id=installation, refs=list(refs))


async def test_the_conflicting_files_are_gits_not_the_files_both_sides_changed(repo):
    """The issue's case: both sides change calc.py's line differently and add the same
    line to test_calc.py. Both files changed on both sides; only calc.py conflicts."""
    hub, engine, installation = repo
    head = push(hub, "hangar/1-ab", {"calc.py": CALC.replace("a - b", "a + b"),
                                     "test_calc.py": TEST + "# adds\n"})
    push(hub, "main", {"calc.py": CALC.replace("a - b", "sum((a, b))"),
                       "test_calc.py": TEST + "# adds\n"})
    path = await fetched(engine, hub, installation, "main", "hangar/1-ab")
    merged = await mirror.merge(path, head, "refs/heads/main")
    assert (merged.clean, merged.conflicts) == (False, ("calc.py",))
    # the mirror asked for a token that reads this one repository, and nothing more
    assert engine.github.asked == [(installation, "acme/widgets", {"contents": "read"})]
    # a clean merge says so, with git's tree
    other = push(hub, "hangar/2-cd", {"README.md": "# widgets\n"})
    path = await fetched(engine, hub, installation, "main", "hangar/2-cd")
    clean = await mirror.merge(path, other, "refs/heads/main")
    assert clean.clean and clean.conflicts == () and len(clean.tree or "") == 40


async def test_a_prediction_is_the_second_brought_up_to_date_after_the_first_lands(repo):
    hub, engine, installation = repo
    longer = CALC + "".join(f"\n\ndef f{i}():\n    return {i}\n" for i in range(5))
    push(hub, "main", {"calc.py": longer})
    plus = push(hub, "hangar/3-plus", {"calc.py": longer.replace("a - b", "a + b")})
    total = push(hub, "hangar/4-sum", {"calc.py": longer.replace("a - b", "sum((a, b))")})
    below = push(hub, "hangar/5-doc", {"calc.py": longer.replace("return 4", "return 40")})
    path = await fetched(engine, hub, installation, "main", "hangar/3-plus", "hangar/4-sum",
                         "hangar/5-doc")
    assert await overlaps.conflicts_after(path, "main", first=plus, then=total) == ["calc.py"]
    assert await overlaps.conflicts_after(path, "main", first=total, then=plus) == ["calc.py"]
    # the same file, other lines: git merges them
    assert await overlaps.conflicts_after(path, "main", first=plus, then=below) == []


def merges_of(hub, old: str, tmp_path: Path) -> tuple[str, str]:
    """GitHub's clean merge of main into `old`, and a person's merge that also slips in a
    change of its own, pushed as hangar/6-clean and hangar/6-evil."""
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(hub.repo_path("acme/widgets")), str(work)],
                   check=True)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=p", "-c", "user.email=p@x", *args],
                              cwd=work, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("checkout", "-q", "-b", "evil", old)
    git("merge", "-q", "--no-edit", "origin/main")
    clean = git("rev-parse", "HEAD")
    (work / "calc.py").write_text("import os\n" + CALC.replace("a - b", "a + b"))
    git("commit", "-q", "-a", "--amend", "--no-edit")
    evil = git("rev-parse", "HEAD")
    git("push", "-q", "origin", f"{clean}:refs/heads/hangar/6-clean",
        f"{evil}:refs/heads/hangar/6-evil")
    return clean, evil


async def test_a_clean_update_is_githubs_merge_of_the_base_and_nothing_else(repo, tmp_path):
    hub, engine, installation = repo
    old = push(hub, "hangar/6-up", {"calc.py": CALC.replace("a - b", "a + b")})
    push(hub, "main", {"README.md": "# widgets\n"})
    clean, evil = await asyncio.to_thread(merges_of, hub, old, tmp_path)
    path = await fetched(engine, hub, installation, "main", "hangar/6-clean", "hangar/6-evil")
    assert await mirror.clean_update_of(path, clean, old, "refs/heads/main")
    assert not await mirror.clean_update_of(path, evil, old, "refs/heads/main")
    assert not await mirror.clean_update_of(path, clean, evil, "refs/heads/main")
