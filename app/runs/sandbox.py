"""What a run's steps share, below both its turn (app.runs.agent, app.runs.verify) and its
push (app.runs.publishing): its sandbox made with the repository checked out, the commands
that must succeed in it, and its check runs on GitHub."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from app import envbuilds
from app.creates import Creating, Plan
from app.envbuilds import default_env_name
from app.github.ops import RepoOps
from app.models import Job, Run
from app.redact import redact, tail
from app.render import pages
from sandbox import envimage
from sandbox.envbuild import (
    ENVIRONMENT_SKILL,
    Fallback,
    StartPlan,
    agent_environment_section,
    agent_environment_skill,
)
from sandbox.harness import SKILL_DIRS

if TYPE_CHECKING:
    from app.runs.context import RunsContext

REPO = "/workspace/repo"
HOME = "/workspace/home"
HARDENED_GIT = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"]
CLONE_TIMEOUT_S = 600
# observe, stop and reading the log: past this a sandbox's call fails its run, not hangar.
PROVIDER_CALL_TIMEOUT_S = 60
STEP_FAILED = "hangar: step failed: "
AGENT_CHECK = "hangar / agent"


async def prepare_sandbox(
    engine: RunsContext, run: Run, job: Job, spec: Any, *, role: str, checkout: list[str]
) -> Any:
    """A sandbox with the repository checked out: from the active environment build when
    there is one (fetched up to date, install's untracked leftovers removed), else cloned
    through the proxy into the environment's own image.
    """
    from proxy import sandbox_git_files
    from sandbox import snapshots

    provider = engine.providers[spec.provider]
    spec = await envimage.ensure(provider, spec)
    labels = {"hangar.instance": engine.instance_id, "hangar.run": run.id,
              "hangar.job": job.id, "hangar.role": role}
    for leftover in await provider.list(labels):
        await provider.destroy(leftover)
        engine.tokens.revoke(leftover.id)
    build = await envbuilds.usable_build(engine, provider, job.thread.repo, spec)
    built = build.image if build is not None else None  # a usable build's image is there
    start_spec = spec if built is None else spec.model_copy(
        update={"image": snapshots.image_for(spec.provider, built, spec.image)})
    sb = await provider.create(start_spec, labels)
    if role == "agent":
        engine.patch_run(run.id, sandbox=sb.model_dump())
    token = engine.tokens.issue(sb.id, repo=job.thread.repo, branch=run.branch,
                                installation_id=job.thread.installation_id)
    files = sandbox_git_files(engine.settings.proxy_base_url, sb.id, token, job.clone_url,
                              home=HOME)
    identity = (b"[user]\n\tname = hangar agent\n\temail = agent@hangar.invalid\n"
                if role == "agent" else b"")
    gitconfig = f"{HOME}/.gitconfig"
    files[gitconfig] = files[gitconfig] + identity
    await provider.copy_in(sb, {gitconfig: files[gitconfig]})
    creds = f"{HOME}/.git-credentials"
    await provider.copy_in(sb, {creds: files[creds]}, mode=0o600)
    try:
        if built is not None:
            # One exec for all of it (each costs ~0.1 s on docker). install's untracked
            # leftovers go, ignored ones stay: the agent's diff is its own.
            unpack = await snapshots.restore(provider, sb, built)
            await must_each(provider, sb, [
                *((argv, "unpacking the environment build") for argv in unpack),
                (["cd", REPO], "entering the environment build's checkout"),
                ([*HARDENED_GIT, "fetch", "-q", "--prune", "origin"],
                 "fetching the branch into the environment build"),
                (checkout, "checking out the branch"),
                ([*HARDENED_GIT, "clean", "-fdq"], "removing files the build left untracked"),
            ])
        else:
            await must_each(provider, sb, [
                (["git", "clone", "-q", job.clone_url, REPO],
                 "cloning the repository through hangar's proxy"),
                (["cd", REPO], "entering the checkout"),
                (checkout, "checking out the branch"),
            ])
        await note_environment(engine, run, job, spec, sb, role=role)
    except BaseException:
        await provider.destroy(sb)
        engine.tokens.revoke(sb.id)
        raise
    return sb


async def note_environment(engine: RunsContext, run: Run, job: Job, spec: Any, sb: Any, *,
                           role: str) -> None:
    """One exec reads the default branch's config and lockfile ids and the checkout's
    lockfile ids; a build that is behind is queued for the next sandbox; the run and the
    agent learn what this sandbox started from."""

    provider = engine.providers[spec.provider]
    if not spec.install:  # no build to look for; the agent is still told what it has
        if role == "agent":
            await tell_agent(provider, sb, spec, StartPlan(None, Fallback.no_install))
        return
    listing = await provider.run(sb, envbuilds.probe_argv(job.base_branch, spec),
                                 cwd=REPO, timeout=120, offline=True)
    probe = envbuilds.parse_probe(listing.output)
    default_spec = envbuilds.spec_from_config(engine, probe.config, fallback=spec,
                                                   default=default_env_name(engine))
    key = await envbuilds.key_for(engine, default_spec, job.thread.repo, probe.default_tree)
    envbuilds.maybe_queue(engine, key, default_spec,
                               installation_id=job.thread.installation_id,
                               clone_url=job.clone_url, default_branch=job.base_branch)
    plan, build = envbuilds.plan_for(engine, job.thread.repo, spec, key,
                                          probe.head_lockfiles(spec))
    current = envbuilds.installed_for(plan, build, spec)
    sb.labels["hangar.env_current"] = "yes" if current else "no"
    if role != "agent":
        return
    engine.patch_run(run.id, env_build=envbuilds.facts(plan, build))
    if plan.fallback is Fallback.build_gone:
        engine.note(job.id, f"{run.id}: the environment build is gone; this sandbox starts "
                            "from the environment's own image, and a rebuild is queued")
    await tell_agent(provider, sb, spec, plan)


async def tell_agent(provider: Any, sb: Any, spec: Any, plan: StartPlan) -> None:
    """The "Your environment (hangar)" section in the harness's instructions file, and the
    same facts as a skill where the harness reads one."""
    section = agent_environment_section(plan, install=spec.install)
    files = {f"{HOME}/{name}": section.encode()
             for name in envbuilds.instruction_files(spec.harness)}
    if spec.harness in SKILL_DIRS:
        files[f"{SKILL_DIRS[spec.harness]}/{ENVIRONMENT_SKILL}/SKILL.md"] = (
            agent_environment_skill(section).encode())
    if files:
        await provider.copy_in(sb, files)


async def must(provider: Any, sb: Any, argv: list[str], what: str, *, cwd: str = "/workspace",
               timeout: float = CLONE_TIMEOUT_S, offline: bool = False) -> str:
    result = await provider.run(sb, argv, cwd=cwd, timeout=timeout, offline=offline)
    if result.exit_code != 0:
        raise RuntimeError(f"{what} failed (exit {result.exit_code}): "
                           f"{redact(tail(result.output, 800))}")
    return result.output


async def must_each(provider: Any, sb: Any, steps: list[tuple[list[str], str]], *,
                    cwd: str = "/workspace", timeout: float = CLONE_TIMEOUT_S) -> str:
    """Run commands in order in one exec, stopping at the first that fails; the error
    names that step as `must` would."""
    lines = [f'{shlex.join(argv)} || {{ rc=$?; echo "{STEP_FAILED}{index}"; exit $rc; }}'
             for index, (argv, _) in enumerate(steps)]
    result = await provider.run(sb, ["sh", "-c", "\n".join(lines)], cwd=cwd, timeout=timeout)
    if result.exit_code != 0:
        output, _, index = result.output.rstrip().rpartition(STEP_FAILED)
        what = steps[int(index)][1] if index.isdigit() and int(index) < len(steps) else (
            "preparing the sandbox")
        raise RuntimeError(f"{what} failed (exit {result.exit_code}): "
                           f"{redact(tail(output or result.output, 800))}")
    return result.output


async def upsert_check(engine: RunsContext, ops: RepoOps, run: Run, name: str, head: str,
                       **fields: Any) -> None:
    """Create or update this run's check run `name` on head, remembering its id. A check
    run is looked for before it is created only when a create may have been sent already
    (app.creates): a new one costs one call, not two."""
    key = f"{name}@{head}"
    fresh = engine.existing_run(run.id)
    known = fresh.check_ids.get(key)
    plan = Plan.LOOK
    if known is None:
        fresh, plan = engine.claim_create(fresh, "posting", key)
        known = fresh.check_ids.get(key)  # another replica's, saved meanwhile
    details = pages.job_link(engine.settings.public_url, run.job_id)
    if details:  # hangar's page of the job, unless the caller links elsewhere
        fields.setdefault("details_url", details)
    check_id = await ops.upsert_check_run(name, head, run.id, known_id=known,
                                          look_first=plan != Plan.CREATE,
                                          create=plan != Plan.LOOK_ONLY, **fields)
    if check_id is None:
        raise Creating.in_flight(f"check run {name}", fresh.posting.get(key))
    if known != check_id or key in fresh.posting:
        fresh = engine.existing_run(run.id)
        engine.patch_run(run.id, check_ids={**fresh.check_ids, key: check_id},
                         posting={k: m for k, m in fresh.posting.items() if k != key})


async def complete_agent_check(engine: RunsContext, ops: RepoOps, run: Run) -> None:
    """`hangar / agent` on the commit the agent started from, in progress since its start,
    completed with how the turn ended (once per ending: a held push that lands later
    ends the turn again)."""
    from app import render
    from app.runs.ending import conclusion

    if not run.ending or not run.start_sha or run.agent_check_shown == run.ending["code"]:
        return
    key = f"{AGENT_CHECK}@{run.start_sha}"
    if key not in run.check_ids and key not in run.posting:
        return  # the turn never started: there is no check run to complete
    await upsert_check(engine, ops, run, AGENT_CHECK, run.start_sha, status="completed",
                       conclusion=conclusion(run.ending["code"]),
                       output=render.agent_check_output(run),
                       # a held later turn keeps the button that pushes its commits again
                       actions=render.held_actions() if run.held and run.pr_number else None)
    engine.patch_run(run.id, agent_check_shown=run.ending["code"])
