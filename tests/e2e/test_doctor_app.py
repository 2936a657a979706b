"""`hangar doctor` checks the App's own permissions against hangar's App manifest."""

from __future__ import annotations

from tests.e2e.test_landing import doctor, doctor_lines


def test_doctor_names_the_permissions_the_app_lacks(world):
    narrow = world.hub.create_app(name="narrow", permissions={
        "metadata": "read", "contents": "read", "pull_requests": "write", "issues": "write",
        "checks": "write", "statuses": "read", "actions": "read", "administration": "read"})
    world.hub.install(narrow.id, "acme", [world.repo])
    world.app = narrow
    result = doctor(world)
    assert result.returncode == 1
    missing = [t for t, v in doctor_lines(result.stdout).items() if v == "missing"]
    app_lines = [m for m in missing if m.startswith("the App lacks")]
    assert app_lines == [app_lines[0]] and "contents: write" in app_lines[0]
    assert "manifests/github-app.json" in app_lines[0]


def test_doctor_finds_the_app_as_registered_from_the_manifest_complete(world):
    lines = doctor_lines(doctor(world).stdout)
    assert any(text.startswith("the App's permissions cover hangar's manifest") and ok == "ok"
               for text, ok in lines.items())
