"""The longer, on-demand fuzzing run (``pytest -m slow tests/test_fuzz_long.py``): every fuzz test
of a parser a client reaches, with ``fuzz_budget.LONG_SCALE`` times the default run's examples,
fresh ones each time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fuzz_budget import LONG_SCALE

TESTS = Path(__file__).resolve().parent
FUZZ_FILES = [
    "server/media/test_sdp.py",  # SDP offers, mutated, at a live peer
    "server/media/test_trickle_fuzz.py",  # trickle ICE fragments
    "server/api/test_control_fuzz.py",  # control and observer socket messages: shapes, sizes, number forms
    "server/voice/test_pcm_fuzz.py",  # pushed PCM
    "engine/media/test_image_fuzz.py",  # image headers and decoding
    "engine/personal/test_enroll_fuzz.py",  # enrolment clips: containers, codecs, sizes, damaged headers
    "server/api/test_http_fuzz.py",  # every HTTP endpoint
]


@pytest.mark.slow
def test_every_client_parser_fuzzed_longer():
    env = {**os.environ, "AVATAR_FUZZ_SCALE": str(LONG_SCALE)}
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *(str(TESTS / f) for f in FUZZ_FILES)]
    done = subprocess.run(args, cwd=TESTS.parent, env=env, timeout=3 * 3600)
    assert done.returncode == 0
