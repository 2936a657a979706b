"""Which failed deliveries hangar asks GitHub to deliver again."""

from __future__ import annotations

from app.intake.redelivery import missed


def d(id_: int, guid: str, code: int, at: str = "2026-11-29T10:00:00Z") -> dict:
    return {"id": id_, "guid": guid, "status_code": code, "delivered_at": at,
            "event": "issue_comment"}


NOW_ISH = 1_764_400_000.0  # 2025-11-29: every delivery below is after it


def test_failed_and_never_stored_is_missed():
    assert [x["id"] for x in missed([d(1, "a", 0), d(2, "b", 502)], set(), NOW_ISH)] == [1, 2]


def test_a_later_success_with_the_same_guid_is_not_missed():
    assert missed([d(2, "a", 202), d(1, "a", 0)], set(), NOW_ISH) == []


def test_stored_guids_are_not_missed():
    assert missed([d(1, "a", 500)], {"a"}, NOW_ISH) == []


def test_one_ask_per_guid_using_its_first_attempt():
    found = missed([d(3, "a", 0, "2026-11-29T10:05:00Z"), d(1, "a", 0)], set(), NOW_ISH)
    assert [x["id"] for x in found] == [1]


def test_older_than_the_window_is_left_alone():
    assert missed([d(1, "a", 0, "2020-01-01T00:00:00Z")], set(), NOW_ISH) == []


def test_oldest_first():
    found = missed([d(2, "b", 0, "2026-11-29T11:00:00Z"), d(1, "a", 0)], set(), NOW_ISH)
    assert [x["guid"] for x in found] == ["a", "b"]
