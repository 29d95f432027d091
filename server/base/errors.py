"""Errors with a stable code, raised anywhere and rendered once: HTTP JSON body or control ``error`` event."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after  # seconds, sent as Retry-After (429, 503)


class ControlError(Exception):
    """A control message that cannot be honoured; the socket stays open and gets an ``error`` event."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
