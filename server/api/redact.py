"""Secrets out of every log line: session and server tokens are replaced by ``[redacted]``.

A token in a log (the access log writes every request line, ``?token=`` included) lets anyone
who reads the logs take over the session. Redaction happens when a record is created, through
the log-record factory, so it covers every logger and handler in the process (uvicorn's access
and error logs, the server's own, pytest's capture) without knowing how logging was set up.
"""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "[redacted]"
_TRACEBACKS = logging.Formatter()
SECRET_PATTERNS = (
    re.compile(r"(?i)(token=)[^&\s\"'#]+"),  # query strings and fragments: ?token=, &token=, #token=
    re.compile(r"(?i)(bearer\s+)[^\s\"',]+"),  # an Authorization header value
    re.compile(r"(avatar\.token\.)[^\s\"',]+"),  # the control socket's subprotocol
)


def redact(text: str) -> str:
    """``text`` with every token value replaced by ``[redacted]``."""
    for pattern in SECRET_PATTERNS:
        text = pattern.sub(r"\1" + REDACTED, text)
    return text


def _redact_value(value: Any) -> Any:
    """A string redacted; an object whose text holds a token (httpx logs URL objects) as that
    text redacted; anything else (numbers above all) untouched."""
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, int | float):
        return value
    text = str(value)
    cleaned = redact(text)
    return value if cleaned == text else cleaned


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """Redact a record's message, string arguments and traceback in place. Other arguments keep
    their type: uvicorn's access formatter unpacks its five and formats the status as an int."""
    if isinstance(record.msg, str):
        record.msg = redact(record.msg)
    if isinstance(record.args, tuple):
        record.args = tuple(_redact_value(a) for a in record.args)
    elif isinstance(record.args, dict):
        record.args = {k: _redact_value(v) for k, v in record.args.items()}
    if record.exc_info and not record.exc_text:  # formatters reuse exc_text once it is set
        record.exc_text = redact(_TRACEBACKS.formatException(record.exc_info))
    return record


def install_redaction() -> None:
    """Redact every log record this process creates from now on (idempotent)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "redacts_secrets", False):
        return

    def redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(factory(*args, **kwargs))

    redacting_factory.redacts_secrets = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacting_factory)
