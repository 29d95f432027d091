"""Audio fed again (``rewrite``): what the engine holds and has not made frames of yet takes the
new audio, mouths and all; what was made or released stays."""

from __future__ import annotations

import numpy as np
import pytest

from engine.frames import drain
from engine.pipeline import Pipeline
from engine.puppet.engine import PuppetPipeline
from engine.state import AudioBuffer

pytestmark = pytest.mark.usefixtures("one_thread")

SR, SPF = 16000, 640


def test_audio_buffer_replaces_held_samples_and_says_from_where() -> None:
    x = np.arange(1, 301, dtype=np.float32)
    buf = AudioBuffer()
    buf.feed(x[:200])
    buf.release_before(50)
    assert buf.take_changed() is None
    assert buf.write(150, -x[:100]) == 50  # only what was fed is replaced; nothing is fed here
    assert buf.total == 200 and buf.take_changed() == 150 and buf.take_changed() is None
    np.testing.assert_array_equal(buf.read(140, 200), np.concatenate([x[140:150], -x[:50]]))
    assert buf.write(0, np.zeros(100, np.float32)) == 50  # the released part stays released
    np.testing.assert_array_equal(buf.read(50, 100), np.zeros(50, np.float32))
    assert buf.take_changed() == 50
    assert buf.silence_from(180) == 20 and buf.take_changed() == 180  # a cut is a change too
    assert buf.write(400, x) == 0 and buf.take_changed() is None


def voice(seconds: float) -> np.ndarray:
    from engine.eval.real import REAL_DIR
    from engine.media.audio_io import load_audio

    pcm = load_audio(REAL_DIR / "retalk3.mp4", SR)
    first = int(np.nonzero(np.abs(pcm) > 0.05)[0][0])
    return pcm[first:first + int(seconds * SR)]


@pytest.mark.parametrize("kind", ["drawn", "puppet"])
def test_a_voice_fed_again_over_silence_reaches_the_frames_not_made_yet(micro_pipe: Pipeline, kind: str) -> None:
    """Silence is fed ahead; a voice arrives and is fed again from ``lookahead_samples`` before
    the end: every frame from there carries it, and its mouth is heard."""
    pipe = micro_pipe if kind == "drawn" else PuppetPipeline.from_config("puppet")
    session = pipe.open_session(seed=1, drawn=True)
    back = session.lookahead_samples
    assert back > 0
    session.feed(np.zeros(SR, np.float32))
    made = []
    while session.ready():
        made += session.step()
    at = SR - back
    assert made and made[-1].sample_index + SPF <= at  # no frame of the voice's place was made
    said = voice(1.0)
    assert session.rewrite(at, said[:back]) == back
    session.feed(said[back:])
    session.close_input()
    made += list(drain(session))
    timeline = np.concatenate([np.zeros(at, np.float32), said])
    assert [f.index for f in made] == list(range(len(made)))
    for f in made:
        np.testing.assert_array_equal(f.audio, timeline[f.sample_index:f.sample_index + SPF][:f.audio.size])
    tracker = session.redraw.heard.tracker if kind == "drawn" else session.tracker.mouth
    reader = tracker.reader  # SR is the reader's rate: it heard the timeline (after its window of silence)
    lead = max(-reader.start, 0)
    heard_as = np.concatenate([np.zeros(lead, np.float32), timeline])[reader.start + lead:]
    n = min(heard_as.size, reader.audio.size)
    assert n > SR // 2 and np.abs(heard_as[:n]).max() > 0.05  # the voice where it was put ...
    np.testing.assert_array_equal(reader.audio[:n], heard_as[:n])  # ... not the silence fed before it
