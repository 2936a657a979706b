"""Check runs and suites: CI results for landing and auto-fix, and hangar's buttons."""

from gidgethub import routing, sansio

from app.payloads import CheckRunEvent, CheckSuiteEvent, parts_as

router = routing.Router()


@router.register("check_run", action="completed")
async def finished_check(event: sansio.Event, *, engine, parts=None, **_) -> None:
    check = parts_as(CheckRunEvent, event.data, parts)
    ours = (check.check_run.app or {}).get("id") == engine.settings.app_id
    await engine.record_ci(check.repository.full_name, check.check_run.head_sha,
                           check=check.check_run.name, ours=ours)


@router.register("check_run", action="requested_action")
async def pressed_button(event: sansio.Event, *, engine, parts=None, **_) -> None:
    await engine.record_check_action(parts_as(CheckRunEvent, event.data, parts))


@router.register("check_run", action="rerequested")
async def rerun_requested(event: sansio.Event, *, engine, parts=None, **_) -> None:
    await engine.record_check_action(parts_as(CheckRunEvent, event.data, parts))


@router.register("check_suite", action="completed")
async def finished_suite(event: sansio.Event, *, engine, parts=None, **_) -> None:
    suite = parts_as(CheckSuiteEvent, event.data, parts)
    head_sha = suite.check_suite.get("head_sha")
    ours = (suite.check_suite.get("app") or {}).get("id") == engine.settings.app_id
    if head_sha:
        await engine.record_ci(suite.repository.full_name, head_sha, ours=ours)


@router.register("check_suite", action="rerequested")
async def rerun_all_checks(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # "Re-run all checks" on hangar's suite (GitHub sends it to the suite's App only).
    await engine.record_event("check_suite_rerequested",
                              parts_as(CheckSuiteEvent, event.data, parts))
