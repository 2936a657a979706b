"""What a concern hears is what its router says, and one handler's failure never hides
another's: every handler of a delivery runs, each failure is counted, and the delivery
fails after all have run."""

from __future__ import annotations

import pytest
from gidgethub.routing import Router
from gidgethub.sansio import Event

from app.metrics import Metrics
from handlers import Handlers, HandlersFailed, handler_name, router


async def test_every_handler_of_an_event_runs_though_one_before_it_fails():
    heard = []
    first, second = Router(), Router()

    @first.register("check_run", action="completed")
    async def failing(event, **_):
        raise RuntimeError("landing broke")

    @second.register("check_run", action="completed")
    async def healthy(event, **_):
        heard.append(event.delivery_id)

    metrics = Metrics()
    with pytest.raises(HandlersFailed, match="landing broke") as raised:
        await Handlers(first, second).dispatch(
            Event({"action": "completed"}, event="check_run", delivery_id="d-1"),
            metrics=metrics)
    assert heard == ["d-1"]  # the delivery still fails, after every handler ran
    assert [name for name, _ in raised.value.failures] == ["test_handlers.failing"]
    assert 'hangar_handler_errors_total{handler="test_handlers.failing"} 1' in metrics.render()


def heard_by(event: str, action: str | None = None) -> set[str]:
    data = {"action": action} if action else {}
    return {handler_name(callback) for callback in router.fetch(
        Event(data, event=event, delivery_id="d"))}


@pytest.mark.parametrize(("event", "action", "expected"), [
    # A review: an approval for landing, a change request for auto-fix, `/hangar` in its
    # body for commands; each concern's router says so itself.
    ("pull_request_review", "submitted",
     {"commands.new_review", "landing.new_review", "autofix.new_review"}),
    ("pull_request_review", "dismissed", {"landing.new_review"}),
    ("issue_comment", "created", {"commands.new_comment"}),
    ("issue_comment", "edited", set()),  # a command runs once, when it is written
    ("pull_request", "synchronize", {"landing.pr_changed", "autofix.pr_changed"}),
    ("pull_request", "reopened", {"landing.pr_changed"}),
    # CI finishing: landing waits for it, auto-fix judges it, a fan-out's grading waits
    ("check_run", "completed",
     {"landing.finished_check", "autofix.finished_check", "fanout.finished_check"}),
    ("status", None, {"landing.new_status", "autofix.new_status", "fanout.new_status"}),
    ("check_run", "rerequested", {"runs.pressed_button", "landing.land_rerun"}),
    ("check_run", "requested_action", {"runs.pressed_button", "landing.land_button"}),
    ("check_suite", "rerequested", {"runs.rerun_all_checks", "landing.rerun_all_checks"}),
    ("member", "added", {"access.access_changed"}),
    ("github_app_authorization", "revoked", {"access.authorization_revoked"}),
    ("repository", "renamed", {"repositories.repository_moved"}),
    ("installation_target", "renamed", {"repositories.account_renamed"}),
    ("installation", "new_permissions_accepted",
     {"repositories.installation_changed", "repositories.permissions_accepted"}),
    ("installation", "suspend",
     {"repositories.installation_changed", "repositories.installation_ended"}),
    ("installation", "deleted",
     {"repositories.installation_changed", "repositories.installation_ended"}),
    ("installation_repositories", "added",
     {"repositories.installation_changed", "repositories.repositories_added"}),
    ("installation", "unsuspend",
     {"repositories.installation_changed", "repositories.installation_unsuspended"}),
    ("star", "created", set()),
])
def test_each_concern_hears_what_its_router_registers(event, action, expected):
    assert heard_by(event, action) == expected
