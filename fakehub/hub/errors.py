"""The one error the hub raises: what GitHub would answer instead."""

from typing import Any


class HubError(Exception):
    """An operation GitHub would refuse: an HTTP status and GitHub's message."""

    def __init__(self, status: int, message: str,
                 errors: list[dict[str, Any] | str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors
