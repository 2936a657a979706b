"""The fleet cap: agents, verifications and builds reserve a place before they make a
sandbox; a full fleet makes them wait and wakes them when a sandbox ends."""

from __future__ import annotations

import pytest

from sandbox import fleet as fleet_module
from sandbox.fleet import CountedProvider, Fleet, fleet_key
from sandbox.provider import Sandbox


class Provider:
    name = "fake"

    def __init__(self) -> None:
        self.made = 0

    async def create(self, spec, labels):
        self.made += 1
        return Sandbox(id=f"sb-{self.made}", provider="fake", labels=dict(labels))

    async def destroy(self, sb):
        pass


def test_keys_name_what_a_sandbox_is_for():
    assert fleet_key({"hangar.run": "run-1", "hangar.role": "agent"}) == "run-1:agent"
    assert fleet_key({"hangar.run": "run-1", "hangar.role": "verify"}) == "run-1:verify"
    assert fleet_key({"hangar.build": "bld-1", "hangar.role": "build"}) == "bld-1:build"
    assert fleet_key({"hangar.run": "run-1", "hangar.role": "publish"}) is None


async def test_a_full_fleet_makes_them_wait_and_an_end_wakes_them():
    woken: list[list[str]] = []
    fleet = Fleet(2, freed=woken.append)
    provider = CountedProvider(Provider(), fleet)
    assert fleet.reserve("run-1:agent", waiter="run-1")
    assert fleet.reserve("run-1:agent", waiter="run-1")  # the same place, asked again
    assert fleet.reserve("bld-1:build", waiter="bld-1")
    assert not fleet.reserve("run-2:verify", waiter="run-2")  # two places, both taken
    agent = await provider.create(None, {"hangar.run": "run-1", "hangar.role": "agent"})
    assert fleet.in_use() == 2  # the reservation became the sandbox
    # A push of held commits is counted but never waits.
    await provider.create(None, {"hangar.run": "run-3", "hangar.role": "publish"})
    assert fleet.in_use() == 3 and woken == []
    await provider.destroy(agent)
    assert woken == [["run-2"]]
    assert not fleet.reserve("run-4:verify", waiter="run-4")  # still 2: build and publish
    assert provider.name == "fake"  # everything else is the provider's


async def test_a_reservation_never_used_lapses(monkeypatch):
    fleet = Fleet(1)
    assert fleet.reserve("run-1:agent", waiter="run-1")
    assert not fleet.reserve("run-2:agent", waiter="run-2")
    monkeypatch.setattr(fleet_module, "RESERVATION_S", 0.0)
    assert fleet.reserve("run-2:agent", waiter="run-2")


def test_sandboxes_from_before_a_restart_count():
    fleet = Fleet(1)
    fleet.already([Sandbox(id="sb-9", provider="local",
                           labels={"hangar.run": "run-9", "hangar.role": "agent"})])
    assert not fleet.reserve("run-1:agent", waiter="run-1")
    assert fleet.reserve("run-9:agent", waiter="run-9")  # its own, already made


@pytest.mark.parametrize("cap", [1, 3])
def test_the_cap_is_the_settings(cap, tmp_path):
    from app.settings import Settings

    assert Settings(max_sandboxes=cap, data_dir=tmp_path).max_sandboxes == cap
    assert Settings(data_dir=tmp_path).max_sandboxes == 50


async def test_closing_the_providers_closes_each_even_when_one_fails():
    """A provider whose close fails does not keep the next from ending what it started."""
    from sandbox.fleet import Providers

    closed: list[str] = []

    class Closing(Provider):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        async def close(self) -> None:
            closed.append(self.name)
            if self.name == "docker":
                raise RuntimeError("the engine went away")

    providers = Providers(Closing, Fleet(4))
    for name in ("docker", "local"):
        providers[name].name  # noqa: B018 (a provider is made when first asked for)
    with pytest.raises(RuntimeError, match="engine went away"):
        await providers.close()
    assert closed == ["docker", "local"]
