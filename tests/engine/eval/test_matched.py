"""The matched take: a right video with other blinks and head sway fits it closely, a wrong mouth
or a blurred frame does not."""

from __future__ import annotations

import dataclasses
import shutil

import cv2
import numpy as np
import pytest

from engine.eval import metrics
from engine.eval.matched import MOUTH, matched_states, matched_take
from engine.eval.material import make_clip
from engine.puppet import FaceState, Identity, face_track_from_audio, reference_image, render_video
from engine.train.frame_readers import HELD_OUT_SEED

SR, FPS, SIZE = 16000, 25, 256
pytestmark = [pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed"),
              pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def clip() -> tuple[Identity, np.ndarray, list[FaceState], np.ndarray]:
    """A held-out identity, its ground-truth track of 5 s of held-out speech and that take's frames."""
    pcm = make_clip(1, SR).pcm[: 5 * SR]
    identity = Identity.sample(np.random.default_rng(HELD_OUT_SEED + 3), name="matched")
    states = face_track_from_audio(pcm, SR, FPS, seed=1)
    return identity, pcm, states, render_video(identity, states, SIZE)


def test_matched_states_take_the_mouth_from_the_truth_and_the_rest_from_the_read() -> None:
    read = FaceState(openness=0.9, closed=0.0, open=1.0, blink=0.7, yaw=0.1, gaze_x=0.4, brow=0.3)
    truth = FaceState(openness=0.2, closed=0.2, open=0.3, rounded=0.5, blink=0.0, yaw=-0.1)
    (m,) = matched_states([read], [truth])
    assert [getattr(m, k) for k in MOUTH] == [getattr(truth, k) for k in MOUTH]
    assert (m.blink, m.yaw, m.gaze_x, m.brow) == (0.7, 0.1, 0.4, 0.3)


def test_another_take_fits_its_matched_take_far_better_than_the_truth(clip) -> None:
    """Another seed's blinks, gaze and sway: against the fixed take the renderer scores itself
    poorly (measured 22-24 dB); against the take matched to its own motion, closely."""
    identity, pcm, states, truth = clip
    other = render_video(identity, face_track_from_audio(pcm, SR, FPS, seed=99), SIZE)
    ref = reference_image(identity, SIZE)
    against_take = metrics.psnr(other, truth)
    against_matched = metrics.psnr(other, matched_take(other, states, identity, ref))
    assert against_matched >= 28.0 and against_matched > against_take + 4.0, (against_take, against_matched)


def test_a_wrong_mouth_or_a_blur_scores_lower_than_the_right_sharp_video(clip) -> None:
    identity, _, states, truth = clip
    ref = reference_image(identity, SIZE)
    matched = matched_take(truth, states, identity, ref)
    right, right_ssim = metrics.psnr(truth, matched), metrics.ssim(truth, matched)
    # The same motion with the mouth of another moment of the speech (a second late).
    late = [dataclasses.replace(s, **{k: getattr(states[max(i - FPS, 0)], k) for k in MOUTH})
            for i, s in enumerate(states)]
    wrong_mouth = render_video(identity, late, SIZE)
    blurred = np.stack([cv2.GaussianBlur(f, (0, 0), 2.5) for f in truth])
    wrong = metrics.psnr(wrong_mouth, matched_take(wrong_mouth, states, identity, ref))
    soft = metrics.ssim(blurred, matched_take(blurred, states, identity, ref))
    assert wrong < right - 1.5, (right, wrong)
    # A blur about the autoencoder's (sigma 2.5 px) falls below the 0.95 a sharp video clears.
    assert soft < min(right_ssim - 0.03, 0.95) < right_ssim, (right_ssim, soft)
    assert len(matched_take(truth[:10], states, identity, ref)) == 10
