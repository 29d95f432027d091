"""Control messages validate by type."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from pydantic import ValidationError

from server.base.protocol import AudioAppend, Speak, client_message


def test_client_messages_validate_by_type():
    msg = client_message.validate_python({"type": "speak", "text": "hi"})
    assert isinstance(msg, Speak)
    pcm = np.arange(4, dtype="<i2").tobytes()
    msg = client_message.validate_python({"type": "audio.append", "sample_rate": 8000,
                                          "audio": base64.b64encode(pcm).decode()})
    assert isinstance(msg, AudioAppend) and msg.pcm() == pcm
    for bad in ({"type": "nope"}, {"type": "speak"}, {"type": "speak", "text": ""},
                {"type": "audio.append", "sample_rate": 100}, {"type": "audio.append", "sample_rate": 16000,
                                                                "audio": "not base64!"},
                {"type": "ping", "extra": 1}, {"type": "speak", "text": "x", "voice": "--help"}):
        with pytest.raises(ValidationError):
            client_message.validate_python(bad)
