"""The photo avatar's evaluation (``avatar eval --image``, engine/eval/photo.py) on the astronaut.

Guards below the eval's targets (lip sync r >= 0.7, upper-face SSIM >= 0.9) on a short render
of held-out speech; flat rolling state over a long photo session; the CLI's refusals.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from engine.eval import metrics
from engine.eval.cli import main as eval_main
from engine.eval.material import make_clip
from engine.eval.photo import UpperFace, render_photo, score_frames, seam_band, seam_scores
from engine.face.rig import FaceMotion, PhotoRig
from engine.media.audio_io import save_png
from engine.photo.avatar import PhotoAvatar, photo_avatar
from engine.pipeline import Pipeline
from engine.puppet import openness_series

SR = 16000
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def photo(astronaut: np.ndarray) -> PhotoAvatar:
    return photo_avatar(astronaut)


@pytest.fixture(scope="module")
def rendered(photo: PhotoAvatar) -> dict[str, np.ndarray]:
    """8 s of held-out speech (two sentences of clip 2, cut) through a tiny ``fast`` photo session."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    pcm = make_clip(2, SR).pcm[: 8 * SR]
    with torch_threads(1):
        pipe = Pipeline.from_config("tiny").preset("fast")
        frames, _ = render_photo(pipe, photo, pcm)
        opens, ssims = score_frames(frames, photo)
    return {"frames": frames, "openness": opens, "ssim": ssims[:, 0],
            "truth": openness_series(pcm, SR, pipe.fps)}


@needs_espeak
def test_lip_gap_follows_the_speech(rendered: dict[str, np.ndarray]) -> None:
    n = min(len(rendered["openness"]), len(rendered["truth"]))
    assert n >= 190
    sync = metrics.lip_sync_series(rendered["openness"][:n], rendered["truth"][:n], max_lag=1)
    print(f"\nphoto lip sync: r={sync['pearson_r']:.3f} at lag 0, {sync['r_at_best_lag']:.3f} at lag "
          f"{sync['best_lag']:+d} (target 0.7)")
    assert sync["r_at_best_lag"] >= 0.5


@needs_espeak
def test_upper_face_keeps_the_photo(rendered: dict[str, np.ndarray]) -> None:
    ssim = rendered["ssim"]
    print(f"\nupper-face SSIM: mean {ssim.mean():.3f}, min {ssim.min():.3f} (target 0.9)")
    assert ssim.mean() >= 0.85


@needs_espeak
def test_composite_boundary_has_no_seam(rendered: dict[str, np.ndarray], photo: PhotoAvatar) -> None:
    rig = PhotoRig.from_photo(photo.image, photo.face)
    band = seam_band(rig, photo.face)
    seams = seam_scores(rendered["frames"], rendered["openness"], photo, band)
    print(f"\nseams: {seams}")
    assert seams["open_over_closed"] <= 1.2
    assert seams["mouth_jitter"] < 1.7  # below independent flicker
    # A tear: the open frame's warped pixels 4 px lower than the photo's around them.
    torn = rendered["frames"].copy()
    k = int(np.argmax(rendered["openness"]))
    torn[k][rig.motion_region] = np.roll(torn[k], 4, axis=0)[rig.motion_region]
    assert seam_scores(torn, rendered["openness"], photo, band)["open_over_closed"] > 1.2


def test_upper_face_measure_tells_changes_apart(photo: PhotoAvatar) -> None:
    """The photo scores ~1; a blink, a blur, a mirrored face and another picture score lower."""
    from engine.eval.photo import MeshReader

    upper, read, rig = UpperFace(photo), MeshReader(photo.face.box), PhotoRig.from_photo(photo.image, photo.face)

    def score(img: np.ndarray) -> float:
        return upper(img, read(img))[0]

    itself = score(photo.image)
    assert itself >= 0.97
    assert score(rig.render(FaceMotion(blink=1.0))) < itself - 0.1
    assert score(cv2.GaussianBlur(photo.image, (0, 0), 2.0)) < itself - 0.05
    assert score(np.ascontiguousarray(photo.image[:, ::-1])) < 0.7


@pytest.fixture
def small_photo(photo: PhotoAvatar) -> PhotoAvatar:
    """The astronaut's avatar at 128 px: the same rig code, a sixteenth of the pixels to warp."""
    s = 128
    k = s / photo.image.shape[0]
    image = cv2.resize(photo.image, (s, s), interpolation=cv2.INTER_AREA)
    return PhotoAvatar(image, photo.face.translated(0.5 * k - 0.5, 0.5 * k - 0.5, k))


def test_photo_session_memory_is_flat(micro_weights: Path, small_photo: PhotoAvatar, speech, one_thread) -> None:
    """``session.nbytes()`` of a micro photo session at chunk 400 is within 2% of chunk 20's; the
    audio held stays within what the next chunks need plus one fed piece (as in
    tests/engine/test_engine_memory.py)."""
    pipe = Pipeline.from_config("micro", steps=1, weights=micro_weights)
    cfg = pipe.config
    piece = cfg.schedule.chunk * cfg.vae.temporal_down * cfg.samples_per_frame
    source = speech(20.0, seed=3)
    session = pipe.open_session(photo=small_photo, seed=1)
    assert session.frame_size == (128, 128)
    marks: dict[int, int] = {}
    audio_max: list[int] = []
    fed = 0
    while session.state.counters.chunks < 400:
        if not session.ready():
            start = (fed // piece * 7919) % (source.size - piece)
            session.feed(source[start : start + piece])
            fed += piece
            continue
        out = session.step()
        assert all(f.rgb.shape == (128, 128, 3) for f in out)
        audio_max.append(session.audio.nbytes())
        done = session.state.counters.chunks
        if done in (20, 400):
            assert session.last_chunk.startswith("N")
            marks[done] = session.nbytes()
    assert abs(marks[400] - marks[20]) <= 0.02 * marks[20], marks
    span = pipe.context_gen.audio_span(pipe.schedule.n_chunk(5).span).samples
    bound = (span[1] - span[0] + 2 * piece) * 4
    assert max(audio_max) <= bound, (max(audio_max), bound)
    assert max(audio_max[200:]) == max(audio_max[20:200])


def test_cli_refuses_an_image_without_a_face(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "grey.png"
    save_png(path, np.full((300, 300, 3), 128, np.uint8))
    assert eval_main(["--image", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"avatar eval: error: {path}: no face found"]


@pytest.mark.parametrize("content", [b"not an image at all", None])
def test_cli_refuses_an_unreadable_image(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         content: bytes | None) -> None:
    path = tmp_path / "photo.png"
    if content is not None:
        path.write_bytes(content)
    assert eval_main(["--image", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("avatar eval: error: ")
    assert ("not a PNG" in err[0]) if content is not None else ("not found" in err[0])
