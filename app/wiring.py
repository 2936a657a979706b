"""The composition root: the one module that knows every part and joins them.

It builds hangar's aiohttp application (`create_app(settings)`), its shared things under
the typed keys of app/web/keys.py, and the engine with the row kinds, chores and after-step
hooks each concern declares; what a concern hears is its router's (handlers/). Nothing
else imports the concerns for the engine: the engine knows them only through what is
registered here.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator

import aiohttp
import yaml
from aiohttp import web

from app import (
    autofix,
    commands,
    envbuilds,
    fanout,
    landing,
    notify,
    repositories,
    review_threads,
    reviewers,
    runs,
)
from app.engine import (
    NEVER,
    REBUILD_RETRY_S,
    Chore,
    CommandAction,
    Engine,
    RowKind,
    give_up_intent,
    give_up_job,
)
from app.github.client import AppAuth, RetryPolicy
from app.intake import redelivery
from app.intake.deliveries import DeliveryWriter
from app.intake.dispatch import Dispatcher
from app.metrics import Metrics
from app.models import Intent, Job, Run
from app.redact import remember, remember_pem, remember_url
from app.settings import Settings
from app.store import Store
from app.web import api, fleet, jobpage, mcp, signin, upstream, webhook
from app.web.keys import (
    AUTH,
    DISPATCHER,
    EGRESS,
    ENGINE,
    MAX_WEBHOOK_BYTES,
    METRICS,
    MODELS,
    SESSION,
    SETTINGS,
    STORE,
    TOKENS,
    WRITER,
)
from app.web.registration import REGISTRATION_FILE
from app.web.sandbox_gate import serve_gate
from app.web.setup import mount_configured
from handlers import router

log = logging.getLogger(__name__)

# How often the serving store copies its WAL back into the database, off every commit.
CHECKPOINT_EVERY_S = 0.5

# How often handled deliveries past their retention are deleted.
DELIVERY_RETENTION_EVERY_S = 3600.0


def create_app(settings: Settings) -> web.Application:
    """Build hangar's application; everything it holds starts and stops with it."""
    settings.check_for_serving()
    remember_settings_secrets(settings)
    app = web.Application(client_max_size=MAX_WEBHOOK_BYTES)
    app[SETTINGS] = settings
    app[METRICS] = Metrics()
    app.cleanup_ctx.append(_store)
    app.cleanup_ctx.append(_session)
    app.cleanup_ctx.append(serve_gate)  # what sandboxes reach: app/web/sandbox_gate.py
    app.cleanup_ctx.append(_engine_and_dispatcher)
    webhook.setup(app)
    upstream.mount_sandbox_state(app)
    mount_configured(app, settings.app_id)
    api.setup(app)
    mcp.mount(app)
    signin.setup(app)  # people signed in with GitHub, on the pages below
    fleet.setup(app)
    jobpage.setup(app)
    return app


def build_engine(app: web.Application) -> Engine:
    engine = Engine(
        settings=app[SETTINGS], store=app[STORE], auth=app[AUTH], metrics=app[METRICS],
        tokens=app[TOKENS], models=app.get(MODELS), egress=app.get(EGRESS),
    )
    register_concerns(engine)
    remember_environment_secrets(engine)
    return engine


def remember_settings_secrets(settings: Settings) -> None:
    """What hangar's settings hold that must never leave it (app.redact): the App's key,
    the webhook secret, the API token, the model endpoints' credentials and keys."""
    remember(settings.secret(),
             settings.api_token.get_secret_value() if settings.api_token else None)
    remember_pem(settings.private_key())
    registration = settings.data_dir / REGISTRATION_FILE  # `hangar setup`'s, for people
    if registration.is_file():
        saved = yaml.safe_load(registration.read_text()) or {}
        remember(str(saved.get("client_secret") or "") if isinstance(saved, dict) else None)
    for credential, endpoint in settings.model_endpoints.items():
        remember(os.environ.get(credential))
        remember_url(endpoint.get("base_url"))


def remember_environment_secrets(engine: Engine) -> None:
    """The secrets the environments name from hangar's own environment: each model
    credential and each build secret an operator mapped."""
    for spec in engine.envs.values():
        for name in (spec.model_credential_env, *spec.build_secrets):
            if name:
                remember(os.environ.get(name))


def command_actions() -> dict[str, CommandAction]:
    """Every command's action, by the concern that owns it."""
    return {
        **commands.ACTIONS,
        **runs.ACTIONS,
        **fanout.ACTIONS,
        "land": landing.handle_command,
        "land_cancel": landing.handle_command,
        "resolve": landing.resolve,
        "autofix": autofix.handle_command,
        "autofix_button": autofix.handle_command,
        "review_turn": autofix.handle_command,
    }


def register_concerns(engine: Engine) -> None:
    """What each concern asks of the engine, in the order the engine looks at them."""
    engine.on_command(command_actions())
    engine.add_chore(Chore("rebuild", repositories.run_pending_rebuild,
                           every=lambda _engine: REBUILD_RETRY_S,
                           wanted=lambda engine: engine.rebuilding))
    engine.register(
        RowKind("intent", "intent", Intent, commands.process_intent,
                next_at=lambda row: row.retry_at, give_up=give_up_intent,
                waits_for_rebuild=True),
        RowKind("run", "run", Run, runs.advance_run, next_at=lambda row: row.retry_at,
                counts_failures=runs.note_failure),
        # A job waits for its runs (a finished run wakes it) and its folded status edit.
        RowKind("job", "job", Job, runs.advance_job,
                next_at=lambda row: row.status_due_at or NEVER, give_up=give_up_job),
        RowKind("land", "land", landing.LandRequest, landing.advance_land,
                next_at=lambda row: row.due_at, give_up=landing.give_up),
        # A base's open hangar PRs that change the same files: woken by a turn's end, a
        # push, a close.
        RowKind("land_overlap", "land_overlap", landing.Overlaps, landing.advance_overlaps,
                next_at=lambda row: row.due_at),
        # A merge group waits for its verification run (a finished run step wakes it).
        RowKind("merge_group", "merge_group", landing.MergeGroup, landing.advance_group,
                next_at=lambda row: row.due_at if row.state == "new" else NEVER),
        # A fan-out's ranking waits for CI on its attempts' heads: CI's events wake it,
        # else its deadline.
        RowKind("fanout_grading", fanout.GRADING, fanout.Grading, fanout.advance_grading,
                next_at=lambda row: row.due_at),
        RowKind("autofix", "autofix", autofix.AutofixRow, autofix.advance_autofix,
                next_at=lambda row: row.due_at, give_up=autofix.give_up),
        # A verified PR's review request waits only for the wake of its verified head.
        RowKind("review_ask", reviewers.TABLE, reviewers.ReviewAsk, reviewers.advance_ask),
        # A review thread's reply is active only while it has a reply to make: due at
        # once, and again after a failed try's backoff (a lost answer, GitHub down).
        RowKind("thread_reply", review_threads.TABLE, review_threads.ThreadReply,
                review_threads.advance_reply, next_at=lambda row: 0.0),
        # An operator's notification is due at its next attempt (backoff after a failure).
        RowKind("notification", notify.TABLE, notify.NotificationDelivery,
                notify.advance_delivery, next_at=lambda row: row.next_at),
        # A build waits for a slot: a queued build, and the end of one, wake the queued.
        RowKind("envbuild", envbuilds.BUILD, envbuilds.EnvBuildRow,
                envbuilds.advance_build, next_at=lambda _row: NEVER),
    )
    engine.add_chore(Chore("redelivery", redelivery.catch_up,
                           every=lambda engine: engine.settings.redelivery_interval_seconds))
    engine.add_chore(Chore("forget deliveries", redelivery.forget_old_deliveries,
                           every=lambda _engine: DELIVERY_RETENTION_EVERY_S))
    engine.at_start("reaping orphan sandboxes", runs.reap_orphans)
    engine.at_start("ending sandboxes whose hangar is gone", end_abandoned_sandboxes)
    # What the reaper kept (a run still going) counts against HANGAR_MAX_SANDBOXES.
    engine.at_start("counting the sandboxes this hangar holds", count_held_sandboxes)
    engine.at_start("queueing stale environment builds", envbuilds.rebuild_stale)
    # A finished run step may free what a waiting command asked for.
    engine.after_step("run", commands.wake_waiting)
    # The end of a verified turn is when auto-fix looks at the head's CI.
    engine.after_step("run", autofix.after_run_step)
    # A verified head waits for a person: hangar asks its reviewers.
    engine.after_step("run", reviewers.after_run_step)
    # A finished turn asked in review threads answers in each of them.
    engine.after_step("run", review_threads.after_run_step)
    engine.after_step("job", review_threads.after_job_step)
    # A finished run may be its job's last: the job looks at its runs.
    engine.after_step("run", runs.wake_job)
    # Once every attempt of `/hangar try N` has finished, fan-out ranks them.
    engine.when_runs_end(fanout.rank_attempts)
    # A merge group verifying with a run looks again once the run's step ends.
    engine.after_step("run", landing.wake_group)
    # A finished turn's files are known (overlaps), its verified head may land (auto-land).
    engine.after_step("run", landing.after_run_step)
    # What each concern says about a job's PRs in its status comment, in this order.
    engine.status_notes(landing.status_notes)
    engine.status_notes(autofix.status_notes)
    engine.status_notes(reviewers.status_notes)
    # What operators are told outside GitHub: noticed on each concern's rows after its steps.
    engine.after_step("review_ask", notify.after_review_ask)
    engine.after_step("land", notify.after_land)
    engine.after_step("run", notify.after_run)
    engine.after_step("envbuild", notify.after_build)


async def end_abandoned_sandboxes(engine: Engine) -> None:
    """Sandboxes left running by a hangar that is gone for good (a stopped one whose data
    directory was removed, a test's) are ended by the next hangar that starts on the host:
    none of their work can ever be collected."""
    for name in {"local", *(spec.provider for spec in engine.envs.values())}:
        try:
            ended = await engine.provider(name).end_abandoned()
        except Exception as exc:  # a provider that cannot be reached has nothing to end
            log.info("could not look for abandoned %s sandboxes: %s", name, exc)
            continue
        if ended:
            log.warning("ended %d sandbox(es) left running by a hangar that is gone: %s",
                        len(ended), ", ".join(ended[:20]))


async def count_held_sandboxes(engine: Engine) -> None:
    for name in {"local", *(spec.provider for spec in engine.envs.values())}:
        try:
            held = await engine.provider(name).list({"hangar.instance": engine.instance_id})
        except Exception as exc:  # a provider that cannot be reached holds none for us
            log.info("could not count the %s sandboxes: %s", name, exc)
            continue
        engine.fleet.already(held)


async def _store(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # With PostgreSQL, several replicas share the rows: each takes leases in its own name.
    shared = settings.database != settings.db_path
    app[STORE] = Store(settings.database, checkpoint_every=CHECKPOINT_EVERY_S,
                       owner=settings.replica_name if shared else "hangar")
    app[WRITER] = DeliveryWriter(app[STORE])
    yield
    app[WRITER].close()
    app[STORE].close()


async def _session(app: web.Application) -> AsyncIterator[None]:
    app[SESSION] = aiohttp.ClientSession()
    settings = app[SETTINGS]
    app[AUTH] = AppAuth(
        settings.app_id,
        settings.private_key(),
        api_url=settings.github_url,
        session=app[SESSION],
        metrics=app[METRICS],
        retry=RetryPolicy(write_spacing_s=settings.github_write_spacing_seconds),
        # Replicas share each installation's budget through the store; one process keeps
        # it in memory.
        budget=app[STORE] if app[STORE].shared else None,
    )
    yield
    await app[SESSION].close()


async def _engine_and_dispatcher(app: web.Application) -> AsyncIterator[None]:
    engine = build_engine(app)
    app[ENGINE] = engine
    dispatcher = Dispatcher(app[STORE], router, app[METRICS], {"engine": engine}, app[WRITER])
    app[DISPATCHER] = dispatcher
    tasks = [engine.start(), _spawn(dispatcher.run(), "dispatcher")]
    yield
    await dispatcher.stop()
    await engine.stop()
    for task in tasks:
        await _finish(task)


def _spawn(coro, name: str) -> asyncio.Task:
    return asyncio.get_running_loop().create_task(coro, name=name)


async def _finish(task: asyncio.Task) -> None:
    try:
        await asyncio.wait_for(task, timeout=30)
    except (TimeoutError, asyncio.CancelledError):
        task.cancel()
