"""What one sandbox token allows."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Grant:
    """A sandbox may fetch `repo` and push `refs/heads/<branch>` of it, nothing else."""

    sandbox_id: str
    repo: str  # "owner/name"
    branch: str  # without refs/heads/; empty: fetch only
    installation_id: int | None = None
    allow_force: bool = True
    # The one tip a non-fast-forward push may replace (a rebase's `--force-with-lease`):
    # with it, the push's old id must be exactly this, and be the branch's tip upstream.
    lease: str | None = None

    @property
    def ref(self) -> str:
        return f"refs/heads/{self.branch}"
