"""What jobs and runs hear: the buttons on hangar's own check runs ("Verify again", "Fix
with hangar", "Retry"), "Re-run" on one, and "Re-run all checks" on hangar's suite. Each
press is an intent, taken like the command it stands for."""

from gidgethub import routing, sansio

from app import commands
from app.intake.payloads import CheckRunEvent, CheckSuiteEvent, parts_as

router = routing.Router()


@router.register("check_run", action="requested_action")
@router.register("check_run", action="rerequested")
async def pressed_button(event: sansio.Event, *, engine, parts=None, **_) -> None:
    commands.record_check_action(engine, parts_as(CheckRunEvent, event.data, parts))
    engine.wake()


@router.register("check_suite", action="rerequested")
async def rerun_all_checks(event: sansio.Event, *, engine, parts=None, **_) -> None:
    # "Re-run all checks" on hangar's suite (GitHub sends it to the suite's App only).
    commands.record_suite_rerun(engine, parts_as(CheckSuiteEvent, event.data, parts))
    engine.wake()
