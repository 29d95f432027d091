"""``avatar render`` end to end (the real console script, default config), audio file
formats, and every bad input: one clear line on stderr, non-zero exit, no output file."""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess
import sys
import wave
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from engine.bench import speech_like
from engine.cli import main
from engine.media.audio_io import MediaError, load_audio

pytestmark = pytest.mark.usefixtures("one_thread")

AVATAR = Path(sys.executable).parent / "avatar"
FPS, SR = 25, 16000


def write_wav(path: Path, pcm: np.ndarray, rate: int) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(pcm, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def write_tone(path: Path, codec: str, rate: int, channels: int, seconds: float, freq: float = 440.0) -> None:
    """A tone at amplitude 0.3 in every channel, encoded with PyAV."""
    n = round(seconds * rate)
    tone = (0.3 * np.sin(2 * np.pi * freq * np.arange(n) / rate)).astype(np.float32)
    layout = "stereo" if channels == 2 else "mono"
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=rate)
        stream.layout = layout
        if codec == "vorbis":
            stream.codec_context.options = {"strict": "experimental"}
        frame = av.AudioFrame.from_ndarray(np.tile(tone, (channels, 1)), format="fltp", layout=layout)
        frame.sample_rate, frame.pts = rate, 0
        resampler = av.AudioResampler(format=stream.format.name, layout=layout, rate=rate)
        for part in resampler.resample(frame):
            container.mux(stream.encode(part))
        container.mux(stream.encode(None))


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 2 s of speech: espeak-ng when installed, else the synthetic speech-like signal."""
    path = tmp_path_factory.mktemp("speech") / "speech.wav"
    if shutil.which("espeak-ng"):
        subprocess.run(["espeak-ng", "-w", str(path), "Hello, this is the avatar speaking."], check=True)
    else:
        write_wav(path, speech_like(2.1, 22050, seed=3), 22050)
    with wave.open(str(path)) as w:
        assert 1.5 < w.getnframes() / w.getframerate() < 3.0
    return path


def wav_seconds(path: Path) -> float:
    with wave.open(str(path)) as w:
        return w.getnframes() / w.getframerate()


# --- the happy path ---------------------------------------------------------------------------


def test_render_writes_a_playable_h264_aac_mp4(speech_wav: Path, tmp_path: Path) -> None:
    out = tmp_path / "talk.mp4"
    run = subprocess.run([str(AVATAR), "render", "--audio", str(speech_wav), "--out", str(out), "--threads", "1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    seconds_in = wav_seconds(speech_wav)
    frames_expected = math.ceil(load_audio(speech_wav, SR).size / (SR // FPS))
    assert abs(frames_expected / FPS - seconds_in) < 1 / FPS
    assert f"{frames_expected} frames" in run.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["talk.mp4"]  # no .partial left behind

    with av.open(str(out)) as container:
        assert container.format.name.startswith("mov,mp4")
        video, audio = container.streams.video[0], container.streams.audio[0]
        assert video.codec_context.name == "h264" and audio.codec_context.name == "aac"
        assert video.average_rate == FPS
        assert (video.codec_context.width, video.codec_context.height) == (256, 256)
        # durations as players see them (the muxer trims AAC priming and end padding)
        video_s = float(video.duration * video.time_base)
        audio_s = float(audio.duration * audio.time_base)
        pictures = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    with av.open(str(out)) as container:
        rate = container.streams.audio[0].codec_context.sample_rate
        sound = np.concatenate([f.to_ndarray().mean(axis=0) for f in container.decode(audio=0)])
    assert len(pictures) == frames_expected and abs(video_s - len(pictures) / FPS) < 1e-6
    # decoding gives whole AAC frames: the trimmed duration plus less than one frame of padding
    assert audio_s * rate <= sound.size < audio_s * rate + 1024
    assert all(p.shape == (256, 256, 3) for p in pictures)
    assert abs(video_s - audio_s) <= 1 / FPS, (video_s, audio_s)
    assert abs(video_s - seconds_in) <= 1 / FPS and abs(audio_s - seconds_in) <= 1 / FPS
    # a picture, not a flat fill (the weights may still be random: no claim about motion here)
    assert min(np.std(p) for p in pictures) > 1
    # the audio track is the input, on the same timeline (best lag 0, within 1 ms)
    source = load_audio(speech_wav, rate)
    n = min(source.size, sound.size) - 400
    lags = range(-16, 17)
    corr = [np.corrcoef(source[200:200 + n], sound[200 + lag:200 + lag + n])[0, 1] for lag in lags]
    assert max(corr) > 0.9 and abs(lags[int(np.argmax(corr))]) <= 16


def test_a_drawn_render_is_the_avatar_drawn_sharp_at_the_generated_motion(speech_wav: Path, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    """``--drawn``: the same speech, seed and avatar; each frame is the renderer's drawing of the
    avatar (measured: 24% more edge detail than the decoder's frames), its head at the generated
    motion and its mouth at the phones heard in the speech."""
    from engine.puppet import reference_image

    def pictures(*extra: str) -> np.ndarray:
        out = tmp_path / f"talk{len(extra)}.mp4"
        code, _, err = run_cli(capsys, "--audio", str(speech_wav), "--out", str(out), "--avatar", "ada", *extra)
        assert code == 0, err
        with av.open(str(out)) as container:
            return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])

    decoded, drawn = pictures(), pictures("--drawn")
    assert decoded.shape == drawn.shape and drawn.shape[1:] == (256, 256, 3)

    def edges(frames: np.ndarray) -> float:
        grey = frames.astype(np.float32).mean(-1)
        return float(np.abs(np.diff(grey, axis=1)).mean() + np.abs(np.diff(grey, axis=2)).mean())

    assert edges(drawn) > 1.12 * edges(decoded), (edges(drawn), edges(decoded))
    rest = reference_image("ada", 256).astype(np.float32)
    mouth = (slice(None), slice(150, 215), slice(88, 168))

    def motion(frames: np.ndarray) -> np.ndarray:
        return np.abs(frames.astype(np.float32) - rest)[mouth].mean(axis=(1, 2, 3))

    from engine.media.audio_io import load_audio
    from engine.stages.redraw import HeardMouth

    heard = HeardMouth.of(16000, 25).hear(load_audio(speech_wav, 16000), final=True)[:, 0]
    n = min(len(heard), len(drawn))
    follows_heard = np.corrcoef(motion(drawn)[:n], heard[:n])[0, 1]
    follows_generated = np.corrcoef(motion(drawn), motion(decoded))[0, 1]
    print(f"drawn mouth vs heard phones r {follows_heard:.2f}, vs the decoded mouth r {follows_generated:.2f}")
    assert follows_heard > 0.8, "the mouth says the phones heard in the speech"
    assert follows_heard > follows_generated + 0.1, "not the DiT's mouth"


def test_a_bundled_portrait_renders_as_that_person(speech_wav: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    from engine.portraits import portrait_avatar

    out = tmp_path / "hopper.mp4"
    code, _, err = run_cli(capsys, "--audio", str(speech_wav), "--out", str(out), "--avatar", "grace_hopper")
    assert code == 0, err
    with av.open(str(out)) as container:
        frames = np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
    crop = portrait_avatar("grace_hopper").image.astype(np.float32)
    assert frames.shape[1:] == crop.shape
    upper = slice(0, crop.shape[0] // 2)  # eyes, glasses and cap: the photo's own pixels
    assert np.abs(frames[:, upper].astype(np.float32) - crop[upper]).mean() < 6.0


# --- audio input formats --------------------------------------------------------------------------

FORMATS = [
    ("wav", "pcm_s16le", 44100, 2), ("wav", "pcm_s16le", 8000, 1),
    ("flac", "flac", 44100, 2), ("flac", "flac", 8000, 1),
    ("mp3", "libmp3lame", 44100, 2), ("mp3", "libmp3lame", 8000, 1),
    ("ogg", "vorbis", 44100, 2), ("ogg", "libopus", 8000, 1),
]


@pytest.mark.parametrize("ext,codec,rate,channels", FORMATS, ids=[f"{f[0]}-{f[2]}-{f[3]}ch" for f in FORMATS])
def test_audio_formats_load_as_mono_16k(tmp_path: Path, ext: str, codec: str, rate: int, channels: int) -> None:
    path = tmp_path / f"tone.{ext}"
    write_tone(path, codec, rate, channels, seconds=1.7)
    pcm = load_audio(path, SR)
    assert pcm.dtype == np.float32 and pcm.ndim == 1
    assert abs(pcm.size / SR - 1.7) < 0.01, pcm.size / SR
    # a 440 Hz tone at 0.3 in every channel is a 440 Hz tone at 0.3 in mono (no +3 dB down-mix)
    middle = pcm[SR // 4:-SR // 4]
    spectrum = np.abs(np.fft.rfft(middle * np.hanning(middle.size)))
    assert abs(np.argmax(spectrum) * SR / middle.size - 440) < 3
    assert 0.27 < np.abs(middle).max() < 0.33
    assert 0.27 < np.sqrt(2) * middle.std() < 0.33


def test_load_audio_keeps_the_duration_of_odd_rates(tmp_path: Path) -> None:
    for rate in (11025, 22050, 48000):
        path = write_wav(tmp_path / f"r{rate}.wav", speech_like(1.234, rate, seed=rate), rate)
        assert abs(load_audio(path, SR).size / SR - 1.234) < 0.005, rate


# --- bad inputs ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory: pytest.TempPathFactory, speech_wav: Path, astronaut: np.ndarray) -> dict[str, Path]:
    from engine.eval.variants import make_variants
    from engine.face.checks import find_face
    from engine.face.landmarks import LIPS_OUTER_LOWER

    folder = tmp_path_factory.mktemp("bad")
    text = folder / "notes.txt"
    text.write_text("this is not audio\n" * 20)
    empty = folder / "empty.wav"
    write_wav(empty, np.zeros(0, np.float32), 16000)
    assert empty.stat().st_size == 44  # a header and nothing else
    faceless = folder / "wall.png"
    Image.fromarray(np.full((300, 300, 3), 120, np.uint8)).save(faceless)
    tight = folder / "tight.png"
    lips = find_face(astronaut).points(LIPS_OUTER_LOWER)[:, 1].max()
    Image.fromarray(astronaut[: int(lips) + 2]).save(tight)
    covered = folder / "covered.png"
    Image.fromarray(make_variants(astronaut, ["hand"])["hand"]).save(covered)
    return {"speech": speech_wav, "text": text, "empty": empty, "missing": folder / "nope.wav", "faceless": faceless,
            "covered": covered, "tight": tight}


def run_cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(["render", "--threads", "1", "--quiet", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def leftovers(out: Path) -> list[str]:
    if not out.parent.is_dir():
        return []
    return [p.name for p in out.parent.iterdir() if p.name in (out.name, f".{out.name}.partial")]


CASES = {
    "missing audio file": (["--audio", "{missing}"], "not found"),
    "text file as audio": (["--audio", "{text}"], "not a readable audio file"),
    "zero-length wav": (["--audio", "{empty}"], "empty"),
    "unreadable image": (["--audio", "{speech}", "--image", "{text}"], "not a PNG, JPEG, WebP or GIF image"),
    "missing image": (["--audio", "{speech}", "--image", "{missing}"], "not found"),
    "image without a face": (["--audio", "{speech}", "--image", "{faceless}"], "wall.png: no face found"),
    "mouth covered": (["--audio", "{speech}", "--image", "{covered}"], "covered.png: the mouth is covered"),
    "photo cut through the mouth": (["--audio", "{speech}", "--image", "{tight}"],
                                    "tight.png: the photo is cropped too tightly"),
    "output folder missing": (["--audio", "{speech}", "--out", "{out_dir}/no/such/dir/x.mp4"], "does not exist"),
    "output is a folder": (["--audio", "{speech}", "--out", "{out_dir}"], "directory"),
    "unknown avatar": (["--audio", "{speech}", "--avatar", "nobody-here"], "unknown avatar"),
    "drawn photo": (["--audio", "{speech}", "--image", "{faceless}", "--drawn"], "always its own pixels"),
    "drawn puppet": (["--audio", "{speech}", "--config", "puppet", "--drawn"], "draws with the renderer already"),
    "steps 0": (["--audio", "{speech}", "--steps", "0"], "--steps"),
    "steps 9": (["--audio", "{speech}", "--steps", "9"], "--steps"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_with_one_clear_line(case: str, bad_inputs: dict[str, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    args, message = CASES[case]
    out = tmp_path / "out.mp4"
    names = {k: str(v) for k, v in bad_inputs.items()} | {"out_dir": str(tmp_path)}
    argv = [a.format(**names) for a in args]
    if "--out" not in argv:
        argv += ["--out", str(out)]
    target = Path(argv[argv.index("--out") + 1])
    code, stdout, stderr = run_cli(capsys, *argv)
    assert code != 0
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and lines[0].startswith("avatar render: error: ")
    assert message in lines[0], lines[0]
    assert stdout == ""
    if target.is_dir():
        target = target / "out.mp4"
    assert leftovers(target) == [] and not (tmp_path / "out.mp4").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


def drop_root_override() -> None:
    """In the child, before exec: give up root's right to ignore file permissions
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a read-only folder is read-only."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_read_only_output_folder(speech_wav: Path, tmp_path: Path) -> None:
    """The real console script, with root's permission override dropped when run as root."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    out = locked / "out.mp4"
    try:
        run = subprocess.run([str(AVATAR), "render", "--audio", str(speech_wav), "--out", str(out),
                              "--threads", "1", "--config", "micro"], capture_output=True, text=True,
                             timeout=300, preexec_fn=drop_root_override if os.geteuid() == 0 else None)
    finally:
        locked.chmod(0o755)
    assert run.returncode != 0
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert "Traceback" not in run.stderr and "not writable" in lines[0]
    assert list(locked.iterdir()) == []


def test_interrupted_render_leaves_no_file(speech_wav: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.frames

    drain = engine.frames.drain
    written: list[int] = []

    def interrupted(session: object) -> Iterator:
        for i, frame in enumerate(drain(session)):
            if i == 10:
                assert (tmp_path / ".out.mp4.partial").exists()  # it really was writing
                raise KeyboardInterrupt
            written.append(frame.index)
            yield frame

    monkeypatch.setattr(engine.frames, "drain", interrupted)
    code, _, stderr = run_cli(capsys, "--audio", str(speech_wav), "--out", str(tmp_path / "out.mp4"),
                              "--config", "micro")
    assert code == 130 and written == list(range(10))
    assert stderr.splitlines() == ["avatar render: interrupted"]
    assert list(tmp_path.iterdir()) == []


def test_load_audio_errors_are_media_errors(bad_inputs: dict[str, Path], tmp_path: Path) -> None:
    for key in ("missing", "text", "empty"):
        with pytest.raises(MediaError):
            load_audio(bad_inputs[key], SR)
    with pytest.raises(MediaError):
        load_audio(tmp_path, SR)
