"""``avatar enroll``, ``avatar avatars list|rm`` and ``avatar render --avatar NAME`` end to end."""

import json
import wave

import av
import numpy as np
import pytest
from personal_helpers import jaw_track, portrait_rig, write_footage

from engine.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("clip") / "me.mp4"
    write_footage(path, portrait_rig("christophe_henner"), jaw_track(11.0))
    return path


def test_enrol_list_render_and_remove(clip, tmp_path, monkeypatch, capsys, speech):
    monkeypatch.setenv("AVATAR_STORE", str(tmp_path / "store"))
    assert main(["enroll", "--video", str(clip), "--name", "me", "--quiet"]) == 0
    assert main(["avatars", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["me"] and rows[0]["entries"] >= 8

    # The same name again: one line, exit 2, the first avatar kept.
    assert main(["enroll", "--video", str(clip), "--name", "me", "--quiet"]) == 2
    assert "exists already" in capsys.readouterr().err

    wav = tmp_path / "speech.wav"
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes((np.clip(speech(2.0), -1, 1) * 32767).astype("<i2").tobytes())
    out = tmp_path / "me.mp4"
    assert main(["render", "--avatar", "me", "--audio", str(wav), "--out", str(out), "--threads", "1",
                 "--quiet"]) == 0
    with av.open(str(out)) as c:
        frames = [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]
    assert frames[0].shape == (512, 512, 3) and len(frames) >= 45
    mouth = np.stack([f[300:380, 200:312].astype(float) for f in frames])
    assert mouth.std(0).mean() > 3, "the mouth moves with the speech"

    assert main(["avatars", "rm", "me"]) == 0
    assert main(["render", "--avatar", "me", "--audio", str(wav), "--out", str(out), "--threads", "1",
                 "--quiet"]) == 2
    assert "unknown avatar 'me'" in capsys.readouterr().err


def test_a_bad_clip_is_one_line_and_stores_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AVATAR_STORE", str(tmp_path / "store"))
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00" * 4096)
    assert main(["enroll", "--video", str(bad), "--name", "me", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a video" in err[0]
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").iterdir())
