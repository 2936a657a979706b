"""Which pushes a sandbox may make: exactly its own branch, nothing else. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .grant import Grant
from .pktline import CommandList, PktLineError, RefCommand, parse_commands

WORKFLOW_PATTERNS = (".github/workflows/**",)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str | None = None
    # The refs the push named, so a refusal can answer each of them.
    refs: tuple[str, ...] = ()


def decide(
    commands: CommandList | Sequence[RefCommand] | bytes,
    grant: Grant,
    *,
    current_tip: str | None = None,
) -> Decision:
    """Allow the push only if every command updates exactly `refs/heads/<grant.branch>`.

    `commands` may be the raw head of a receive-pack body; a malformed or truncated one
    is refused. `current_tip` is the branch's object id upstream (all zeros when it does
    not exist); it is needed only when `grant.allow_force` is False, and a push whose
    old id differs from it is then refused. A grant with a `lease` allows one push whose
    old id is the lease and the current tip, fast-forward or not (a rebase), and no other.
    """
    if isinstance(commands, bytes | bytearray):
        try:
            parsed = parse_commands(bytes(commands))
        except PktLineError as exc:
            return Decision(False, f"hangar: the push request is malformed ({exc})")
        if parsed is None:
            return Decision(False, "hangar: the push request ended inside its command list")
        commands = parsed
    if isinstance(commands, CommandList):
        commands = commands.commands
    commands = tuple(commands)
    refs = tuple(c.ref for c in commands)
    only = f"this sandbox may push only to {grant.branch}"

    if not grant.branch:
        return Decision(False, "hangar: this sandbox may fetch but not push "
                               "(it builds the repository's environment)", refs)
    if not commands:
        return Decision(False, "hangar: the push names no branch", refs)
    if len(commands) > 1:
        return Decision(False, f"hangar: push one branch per push; {only}", refs)
    command = commands[0]
    if command.ref.startswith("refs/tags/"):
        return Decision(False, f"hangar: this sandbox may not push tags; {only}", refs)
    if command.ref != grant.ref:
        return Decision(False, f"hangar: {only}", refs)
    if command.is_delete:
        return Decision(False, f"hangar: this sandbox may not delete {grant.branch}", refs)
    if grant.lease is not None:
        # Exactly one replacement of exactly the leased tip, which is the tip upstream.
        if command.old != grant.lease or current_tip != grant.lease:
            return Decision(False, lease_refusal(grant, current_tip), refs)
        return Decision(True, None, refs)
    if not grant.allow_force:
        if current_tip is None:
            return Decision(
                False,
                f"hangar: could not read the tip of {grant.branch} to rule out a force push; "
                "push again",
                refs,
            )
        if command.old != current_tip:
            return Decision(False, force_refusal(grant, current_tip), refs)
    return Decision(True, None, refs)


def force_refusal(grant: Grant, current_tip: str) -> str:
    at = "does not exist" if set(current_tip) == {"0"} else f"is at {current_tip[:12]}"
    return (
        f"hangar: force-push is off for this sandbox and {grant.branch} {at} upstream; "
        "fetch, rebase onto it and push again"
    )


def lease_refusal(grant: Grant, current_tip: str | None) -> str:
    lease = (grant.lease or "")[:12]
    if current_tip is not None and current_tip != grant.lease:
        return (f"hangar: this sandbox may only replace {grant.branch} at {lease}, and it "
                f"has moved to {current_tip[:12]} upstream")
    return (f"hangar: this sandbox may only replace {grant.branch} at {lease} "
            "(push with --force-with-lease on that commit)")


def not_fast_forward_refusal(grant: Grant) -> str:
    return (
        f"hangar: force-push is off for this sandbox; the new tip of {grant.branch} must "
        "contain its current tip (fetch, rebase onto it and push again)"
    )


def sensitive_paths(paths: Iterable[str], patterns: Sequence[str] = WORKFLOW_PATTERNS) -> list[str]:
    """The paths that match any pattern (`**` spans directories, `*` and `?` do not)."""
    compiled = [_glob(p) for p in patterns]
    return [path for path in paths if any(rx.fullmatch(path.lstrip("/")) for rx in compiled)]


@lru_cache(maxsize=64)
def _glob(pattern: str) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)
