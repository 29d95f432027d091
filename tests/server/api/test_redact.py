"""Token redaction in log records: the patterns, argument types kept, tracebacks, every logger."""

from __future__ import annotations

import logging

import pytest

from server.api.redact import REDACTED, install_redaction, redact, redact_record

SECRET = "Zk3-q_9XyT0aBcDeFgHiJkLmNoPqRsTu"


@pytest.mark.parametrize(
    "text",
    [
        f"GET /v1/sessions/s_1/control?token={SECRET}&role=observer HTTP/1.1",
        f'127.0.0.1:5 - "WebSocket /v1/sessions/s_1/control?TOKEN={SECRET}" [accepted]',
        f"http://127.0.0.1:8080/#session=s_1&token={SECRET}",
        f"Authorization: Bearer {SECRET}",
        f"subprotocols avatar.v1, avatar.token.{SECRET}",
    ],
)
def test_every_form_of_a_token_is_redacted(text):
    out = redact(text)
    assert SECRET not in out and REDACTED in out


def test_redaction_keeps_the_rest_of_the_line():
    line = f"GET /v1/sessions/s_1/control?token={SECRET}&role=observer HTTP/1.1"
    assert redact(line) == "GET /v1/sessions/s_1/control?token=[redacted]&role=observer HTTP/1.1"
    assert redact("POST /v1/sessions HTTP/1.1 201") == "POST /v1/sessions HTTP/1.1 201"


def test_records_keep_argument_types_and_lose_tokens_in_tracebacks():
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:1", "GET", f"/?token={SECRET}", "1.1", 200), None)
    redact_record(record)
    assert record.args[-1] == 200 and SECRET not in record.getMessage()
    try:
        raise ValueError(f"could not open ws://h/control?token={SECRET}")
    except ValueError:
        import sys

        failed = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    text = logging.Formatter().format(redact_record(failed))
    assert "ValueError" in text and SECRET not in text


def test_objects_whose_text_holds_a_token_are_redacted_and_numbers_kept():
    class Url:
        def __str__(self) -> str:
            return f"http://h/?session=s_1&token={SECRET}"

    record = logging.LogRecord("httpx", logging.INFO, __file__, 1, "GET %s %d %.1f", (Url(), 200, 0.5), None)
    assert redact_record(record).getMessage() == "GET http://h/?session=s_1&token=[redacted] 200 0.5"


def test_installed_redaction_covers_any_logger(caplog):
    install_redaction()
    install_redaction()  # idempotent: one wrapper, not two
    with caplog.at_level(logging.INFO):
        logging.getLogger("some.library").info("connecting to %s", f"/control?token={SECRET}")
        logging.getLogger("uvicorn.error").warning(f"Bearer {SECRET} refused")
    assert SECRET not in caplog.text and caplog.text.count(REDACTED) == 2
