"""Secret scanning push protection: a push that adds a secret is refused, in GitHub's words.

Pure: the pre-receive hook sends the patch of the commits a push adds; `find_secrets`
reads it and `refusal` writes GitHub's GH013 answer, with the type of each secret, where
it is, and the URL that allows it. A secret allowed (the repository's bypass) passes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from fakehub.rulesets import RULE_VIOLATION_HEADER

# The token formats GitHub's push protection knows best; its list is much longer.
PATTERNS = (
    ("GitHub Personal Access Token", re.compile(r"\bghp_[A-Za-z0-9]{36}\b")),
    ("GitHub Fine-grained Personal Access Token",
     re.compile(r"\bgithub_pat_[A-Za-z0-9_]{82}\b")),
    ("Amazon AWS Access Key ID", re.compile(r"\bAKIA[0-9A-Z]{16}\b")),
)
DOCS = ("https://docs.github.com/code-security/secret-scanning/working-with-secret-scanning-"
        "and-push-protection/working-with-push-protection-from-the-command-line"
        "#resolving-a-blocked-push")
RULER = "—" * 41


@dataclass(frozen=True)
class Finding:
    kind: str
    secret: str
    commit: str
    path: str
    line: int

    @property
    def key(self) -> str:
        """What the unblock URL names: a digest, never the secret itself."""
        return hashlib.sha256(self.secret.encode()).hexdigest()[:32]


def find_secrets(patch: str) -> list[Finding]:
    """Secrets on the added lines of `git log -p --format='commit %H'` output."""
    found: list[Finding] = []
    commit, path, line = "", "", 0
    for text in patch.splitlines():
        if text.startswith("commit "):
            commit = text.split()[1]
        elif text.startswith("+++ "):
            path = text[4:].removeprefix("b/")
        elif text.startswith("@@"):
            match = re.search(r"\+(\d+)", text)
            line = int(match.group(1)) if match else 0
        elif text.startswith("+"):
            for kind, pattern in PATTERNS:
                found += [Finding(kind, m.group(0), commit, path, line)
                          for m in pattern.finditer(text)]
            line += 1
        elif not text.startswith("-"):
            line += 1
    return found


def refusal(ref: str, findings: list[Finding], unblock_base: str) -> list[str]:
    """GitHub's answer to a push that contains secrets, line by line (git adds `remote:`)."""
    lines = [
        f"error: GH013: {RULE_VIOLATION_HEADER} for {ref}.",
        "",
        "- GITHUB PUSH PROTECTION",
        f"  {RULER}",
        "    Resolve the following violations before pushing again",
        "",
        "    - Push cannot contain secrets",
        "",
        "",
        "     (?) Learn how to resolve a blocked push",
        f"     {DOCS}",
        "",
    ]
    for finding in findings:
        lines += [
            "",
            f"      —— {finding.kind} {'—' * max(4, 50 - len(finding.kind))}",
            "       locations:",
            f"         - commit: {finding.commit}",
            f"           path: {finding.path}:{finding.line}",
            "",
            "       (?) To push, remove secret from commit(s) or follow this URL to allow "
            "the secret.",
            f"       {unblock_base}/{finding.key}",
            "",
        ]
    return [*lines, ""]
