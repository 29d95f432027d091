"""Errors with a stable code, raised anywhere and rendered once: HTTP JSON body or control ``error`` event."""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class ControlError(Exception):
    """A control message that cannot be honoured; the socket stays open and gets an ``error`` event."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
