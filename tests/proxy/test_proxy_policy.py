import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from proxy import Grant, decide, pktline, sensitive_paths
from proxy.pktline import RefCommand

OLD = "a" * 40
NEW = "b" * 40
ZERO = "0" * 40
BRANCH = "hangar/12-ab3f"
OWN = f"refs/heads/{BRANCH}"
GRANT = Grant("sb-1", "octo/widgets", BRANCH, 7)
NO_FORCE = Grant("sb-1", "octo/widgets", BRANCH, 7, allow_force=False)
LEASED = Grant("sb-1", "octo/widgets", BRANCH, 7, allow_force=False, lease=OLD)
ONLY = f"hangar: this sandbox may push only to {BRANCH}"
FETCH_ONLY = Grant("sb-2", "octo/widgets", "", 7)
NO_PUSH = "hangar: this sandbox may fetch but not push (it builds the repository's environment)"


def body(*commands: str, caps: str = "report-status side-band-64k") -> bytes:
    out = bytearray()
    for i, command in enumerate(commands):
        out += pktline.encode(f"{command}\0{caps}" if i == 0 else command)
    return bytes(out) + b"0000PACK"


@pytest.mark.parametrize(
    ("name", "commands", "grant", "tip", "allowed", "reason"),
    [
        ("own branch update", [f"{OLD} {NEW} {OWN}"], GRANT, None, True, None),
        ("own branch create", [f"{ZERO} {NEW} {OWN}"], GRANT, None, True, None),
        ("force allowed by default", [f"{OLD} {NEW} {OWN}"], GRANT, "c" * 40, True, None),
        ("main", [f"{OLD} {NEW} refs/heads/main"], GRANT, None, False, ONLY),
        ("other branch", [f"{ZERO} {NEW} refs/heads/hangar/13-zz"], GRANT, None, False, ONLY),
        ("prefix of own", [f"{ZERO} {NEW} refs/heads/hangar/12-ab3"], GRANT, None, False, ONLY),
        ("own as prefix", [f"{ZERO} {NEW} {OWN}/x"], GRANT, None, False, ONLY),
        ("own with suffix", [f"{ZERO} {NEW} {OWN}x"], GRANT, None, False, ONLY),
        ("short ref", [f"{ZERO} {NEW} {BRANCH}"], GRANT, None, False, ONLY),
        ("remote ref", [f"{ZERO} {NEW} refs/remotes/origin/{BRANCH}"], GRANT, None, False, ONLY),
        ("notes", [f"{ZERO} {NEW} refs/notes/commits"], GRANT, None, False, ONLY),
        ("pull ref", [f"{ZERO} {NEW} refs/pull/1/head"], GRANT, None, False, ONLY),
        ("HEAD", [f"{ZERO} {NEW} HEAD"], GRANT, None, False, ONLY),
        ("fetch-only: any branch", [f"{ZERO} {NEW} {OWN}"], FETCH_ONLY, None, False, NO_PUSH),
        ("fetch-only: no ref name", [f"{ZERO} {NEW} refs/heads/"], FETCH_ONLY, None, False,
         NO_PUSH),
        (
            "tag",
            [f"{ZERO} {NEW} refs/tags/v1"],
            GRANT,
            None,
            False,
            f"hangar: this sandbox may not push tags; this sandbox may push only to {BRANCH}",
        ),
        (
            "delete own",
            [f"{OLD} {ZERO} {OWN}"],
            GRANT,
            None,
            False,
            f"hangar: this sandbox may not delete {BRANCH}",
        ),
        (
            "own twice",
            [f"{OLD} {NEW} {OWN}", f"{OLD} {NEW} {OWN}"],
            GRANT,
            None,
            False,
            f"hangar: push one branch per push; this sandbox may push only to {BRANCH}",
        ),
        (
            "own and main",
            [f"{OLD} {NEW} {OWN}", f"{OLD} {NEW} refs/heads/main"],
            GRANT,
            None,
            False,
            f"hangar: push one branch per push; this sandbox may push only to {BRANCH}",
        ),
        ("no force, tip matches", [f"{OLD} {NEW} {OWN}"], NO_FORCE, OLD, True, None),
        ("no force, create", [f"{ZERO} {NEW} {OWN}"], NO_FORCE, ZERO, True, None),
        (
            "no force, tip moved",
            [f"{OLD} {NEW} {OWN}"],
            NO_FORCE,
            "c" * 40,
            False,
            f"hangar: force-push is off for this sandbox and {BRANCH} is at cccccccccccc "
            "upstream; fetch, rebase onto it and push again",
        ),
        (
            "no force, branch gone",
            [f"{OLD} {NEW} {OWN}"],
            NO_FORCE,
            ZERO,
            False,
            f"hangar: force-push is off for this sandbox and {BRANCH} does not exist upstream; "
            "fetch, rebase onto it and push again",
        ),
        ("lease: replaces exactly the leased tip", [f"{OLD} {NEW} {OWN}"], LEASED, OLD, True,
         None),
        (
            "lease: another old id",
            [f"{'c' * 40} {NEW} {OWN}"],
            LEASED,
            "c" * 40,
            False,
            f"hangar: this sandbox may only replace {BRANCH} at aaaaaaaaaaaa, and it has moved "
            "to cccccccccccc upstream",
        ),
        (
            "lease: the branch moved upstream",
            [f"{OLD} {NEW} {OWN}"],
            LEASED,
            "c" * 40,
            False,
            f"hangar: this sandbox may only replace {BRANCH} at aaaaaaaaaaaa, and it has moved "
            "to cccccccccccc upstream",
        ),
        (
            "lease: a create is no replacement of the lease",
            [f"{ZERO} {NEW} {OWN}"],
            LEASED,
            OLD,
            False,
            f"hangar: this sandbox may only replace {BRANCH} at aaaaaaaaaaaa (push with "
            "--force-with-lease on that commit)",
        ),
        (
            "lease: tip unknown",
            [f"{OLD} {NEW} {OWN}"],
            LEASED,
            None,
            False,
            f"hangar: this sandbox may only replace {BRANCH} at aaaaaaaaaaaa (push with "
            "--force-with-lease on that commit)",
        ),
        ("lease: main stays refused", [f"{OLD} {NEW} refs/heads/main"], LEASED, OLD, False, ONLY),
        (
            "lease: no delete either",
            [f"{OLD} {ZERO} {OWN}"],
            LEASED,
            OLD,
            False,
            f"hangar: this sandbox may not delete {BRANCH}",
        ),
        (
            "no force, tip unknown",
            [f"{OLD} {NEW} {OWN}"],
            NO_FORCE,
            None,
            False,
            f"hangar: could not read the tip of {BRANCH} to rule out a force push; push again",
        ),
    ],
)
def test_decide(name, commands, grant, tip, allowed, reason):
    raw = body(*commands)
    parsed = pktline.parse_commands(raw)
    for given_commands in (raw, parsed, parsed.commands):
        decision = decide(given_commands, grant, current_tip=tip)
        assert decision.allowed is allowed, name
        assert decision.reason == reason, name
        assert decision.refs == tuple(c.split(" ")[2] for c in commands)


@pytest.mark.parametrize(
    ("raw", "reason_start"),
    [
        (b"", "hangar: the push request ended inside its command list"),
        (pktline.encode(f"{OLD} {NEW} {OWN}"), "hangar: the push request ended inside"),
        (pktline.encode(f"{OLD} {NEW} {OWN}")[:-3], "hangar: the push request ended inside"),
        (b"0000", "hangar: the push names no branch"),
        (b"zzzz", "hangar: the push request is malformed (pkt-line length b'zzzz' is not hex)"),
        (pktline.encode(f"{OLD} {NEW}") + b"0000", "hangar: the push request is malformed"),
    ],
)
def test_decide_refuses_truncated_and_malformed(raw, reason_start):
    decision = decide(raw, GRANT)
    assert not decision.allowed
    assert decision.reason.startswith(reason_start)


def test_decide_accepts_plain_command_sequences():
    assert decide([RefCommand(OLD, NEW, OWN)], GRANT).allowed
    assert not decide([], GRANT).allowed


@pytest.mark.parametrize(
    ("paths", "sensitive"),
    [
        ([".github/workflows/ci.yml"], [".github/workflows/ci.yml"]),
        ([".github/workflows/nested/x.yaml"], [".github/workflows/nested/x.yaml"]),
        (["/.github/workflows/ci.yml"], ["/.github/workflows/ci.yml"]),
        ([".github/dependabot.yml", "src/.github/workflows/x.yml", "README.md"], []),
        ([".github/workflowsx/a.yml", ".github/workflows"], []),
    ],
)
def test_sensitive_paths(paths, sensitive):
    assert sensitive_paths(paths) == sensitive


def test_sensitive_paths_custom_patterns():
    paths = ["Dockerfile", "ci/build.sh", "ci/deep/x.sh", "docs/a.md", "a/b/Makefile"]
    assert sensitive_paths(paths, ("Dockerfile", "ci/*.sh", "**/Makefile")) == [
        "Dockerfile",
        "ci/build.sh",
        "a/b/Makefile",
    ]


# ---- fuzzing ---------------------------------------------------------------------


def refs_in(raw: bytes) -> list[str] | None:
    """An independent, naive reading of every ref a body's command section names."""
    refs = []
    pos = 0
    while True:
        if len(raw) < pos + 4:
            return None
        length = int(raw[pos : pos + 4], 16)
        if length == 0:
            return refs
        line = raw[pos + 4 : pos + length].split(b"\0")[0].rstrip(b"\n")
        if not line.startswith(b"shallow "):
            refs.append(line.split(b" ", 2)[2].decode())
        pos += length


def assert_safe(raw: bytes, grant: Grant, tip: str | None = None) -> None:
    decision = decide(raw, grant, current_tip=tip)
    if decision.allowed:
        assert refs_in(raw) == [grant.ref]
        parsed = pktline.parse_commands(raw)
        assert parsed is not None and len(parsed.commands) == 1
        assert not parsed.commands[0].is_delete
        if not grant.allow_force:
            assert parsed.commands[0].old == tip
    else:
        assert decision.reason and decision.reason.startswith("hangar: ")


object_ids = st.sampled_from([OLD, NEW, ZERO, "c" * 40, "d" * 64])
ref_names = st.one_of(
    st.sampled_from(
        [OWN, "refs/heads/main", "refs/tags/v1", f"{OWN}/x", f"{OWN}\n", "HEAD", f" {OWN}"]
    ),
    st.text(min_size=1, max_size=30).map(lambda t: "refs/heads/" + t),
)
commands = st.lists(
    st.tuples(object_ids, object_ids, ref_names).map(lambda c: " ".join(c)), max_size=4
)


@given(commands, st.sampled_from([GRANT, NO_FORCE]), st.sampled_from([None, OLD, ZERO]))
def test_generated_command_lists_never_allow_another_ref(cmds, grant, tip):
    assert_safe(body(*cmds), grant, tip)


@given(st.binary(max_size=400), st.sampled_from([GRANT, NO_FORCE]))
def test_random_bodies_are_refused(raw, grant):
    assume(not raw.startswith(pktline.encode(f"{OLD} {NEW} {OWN}")))
    assert_safe(raw, grant, OLD)


@given(
    commands.filter(bool),
    st.lists(st.tuples(st.integers(0, 500), st.binary(max_size=3)), min_size=1, max_size=4),
    st.sampled_from(["splice", "delete", "truncate"]),
)
def test_mutated_bodies_never_allow_another_ref(cmds, edits, how):
    raw = bytearray(body(*cmds))
    for at, data in edits:
        at %= len(raw) + 1
        if how == "splice":
            raw[at : at + len(data)] = data
        elif how == "delete":
            del raw[at : at + len(data) + 1]
        else:
            del raw[at:]
    assert_safe(bytes(raw), GRANT)
    assert_safe(bytes(raw), NO_FORCE, OLD)


@given(st.lists(st.tuples(st.integers(0, 80), st.binary(min_size=1, max_size=2)), max_size=3))
def test_mutations_of_an_allowed_push_stay_on_own_branch(edits):
    raw = bytearray(body(f"{OLD} {NEW} {OWN}"))
    for at, data in edits:
        raw[at : at + len(data)] = data
    assert_safe(bytes(raw), GRANT)
