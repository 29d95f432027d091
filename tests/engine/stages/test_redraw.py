"""Redraw: driver frames in, each session's drawer's frames out at the driver's motion (a photo's own
pixels, or a bundled avatar drawn by its renderer)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.avatars import avatar_image
from engine.face.detect import detect_faces
from engine.face.landmarks import face_landmarks
from engine.face.rig import HEARD_JAW, READ_JAW, FaceMotion, PhotoRig, photo_motion
from engine.frames import PublishedFrame
from engine.photo.avatar import photo_avatar
from engine.puppet import FaceState, get_identity, reference_image, render
from engine.puppet.mouth import MouthTrack, MouthTracker
from engine.puppet.rig import PuppetRig
from engine.puppet.visemes import REST_OPENNESS
from engine.stages.redraw import (
    HEARD_CLOSE_EASE,
    HEARD_EASE,
    HEARD_LOOKAHEAD_FRAMES,
    HeardMouth,
    Redraw,
    RedrawState,
    ease_mouths,
    heard_mouths,
    smooth_pose,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_read_state_moves_the_photo_mouth_and_lids_as_read() -> None:
    state = FaceState(openness=0.7, wide=0.6, rounded=0.1, blink=1.2, yaw=0.2, tx=0.02)
    closed = READ_JAW.closed_below
    assert photo_motion(state) == FaceMotion(jaw_open=pytest.approx((0.7 - closed) / (1 - closed)),
                                             mouth_width=pytest.approx(0.5), blink=1.0, yaw=0.2, tx=0.02)
    assert photo_motion(FaceState(openness=0.08)).jaw_open == 0.0, "a mouth read nearly closed is closed"
    assert photo_motion(FaceState(openness=1.0)).jaw_open == 1.0


def test_a_heard_opening_parts_the_photo_lips_and_a_heard_closure_presses_them() -> None:
    """A heard mouth is 0 where the lips meet: a small heard opening starts the jaw where the rig's
    lips show a gap, where read off a driver face the same openness is a closed mouth."""
    small = FaceState(openness=0.08)
    assert photo_motion(small, 1.0, HEARD_JAW).jaw_open >= HEARD_JAW.lips_part > 0
    assert photo_motion(small, 1.0, READ_JAW).jaw_open == 0.0
    jaws = [photo_motion(FaceState(openness=o), 1.0, HEARD_JAW).jaw_open for o in np.linspace(0.06, 1.0, 20)]
    assert np.all(np.diff(jaws) > 0) and jaws[-1] == 1.0
    shut = photo_motion(FaceState(openness=0.0), 1.0, HEARD_JAW)
    assert shut.jaw_open == 0.0 and shut.press == 1.0
    assert photo_motion(FaceState(openness=0.0), 0.0, HEARD_JAW).press == 0.0, "silent lips rest, not pressed"


def test_the_head_pose_is_smoothed_and_the_mouth_and_lids_are_not() -> None:
    first = FaceState(openness=0.7, blink=1.0, yaw=0.2, tx=0.02)
    assert smooth_pose(first, None) == first
    then = smooth_pose(FaceState(openness=0.05, yaw=0.0), first, smoothing=0.5)
    assert then.openness == 0.05 and then.blink == 0.0
    assert then.yaw == pytest.approx(0.1) and then.tx == pytest.approx(0.01)


def test_a_small_heard_opening_shows_between_the_photo_lips(astronaut, micro_pipe, monkeypatch) -> None:
    """Drawn for a heard mouth, a small opening (a real mouth's gap mid-word) shows a gap the face
    mesh reads; read off a driver face the same openness is a closed mouth. A photo session that
    hears its audio gets the heard map, one that does not the read one."""
    photo = photo_avatar(astronaut)
    assert micro_pipe.open_session(photo=photo).redraw.drawer.jaw == HEARD_JAW
    deaf = micro_pipe.preset("quality")  # may be micro_pipe itself, which other tests share
    monkeypatch.setattr(deaf, "heard_mouth", False)
    assert deaf.open_session(photo=photo).redraw.drawer.jaw == READ_JAW

    def gap(jaw, openness: float) -> float:
        frame = PhotoRig.from_photo(photo.image, photo.face, jaw=jaw).draw(FaceState(openness=openness), 1.0)
        return face_landmarks(frame, detect_faces(frame)[0]).lip_gap() / photo.face.mouth_width

    rest = gap(HEARD_JAW, 0.0)
    assert abs(gap(READ_JAW, 0.0) - rest) < 0.01 and abs(gap(READ_JAW, 0.1) - rest) < 0.01, "read: closed"
    heard = [gap(HEARD_JAW, o) - rest for o in (0.1, 0.2, 0.3)]
    assert heard[0] > 0.03 and heard[0] < heard[1] < heard[2], heard


def test_driver_frames_become_the_photo_moving_with_them(astronaut) -> None:
    photo = photo_avatar(astronaut)
    rig = PhotoRig.from_photo(photo.image, photo.face)
    driver = "ada"
    states = [FaceState(), FaceState(openness=0.9, closed=0.0, open=1.0), FaceState()]
    frames = [PublishedFrame(i, 25, render(get_identity(driver), s, 256), np.full(640, i, np.float32), 16000, "N0")
              for i, s in enumerate(states)]
    made, (after,) = Redraw()([frames], [RedrawState(rig, avatar_image(driver, (256, 256)))])
    out = made[0]
    assert [f.index for f in out] == [0, 1, 2] and [float(f.audio[0]) for f in out] == [0.0, 1.0, 2.0]
    assert all(f.rgb.shape == (512, 512, 3) for f in out)
    still = ~rig.motion_region
    for f in out:
        assert np.array_equal(f.rgb[still], photo.image[still]), "outside the face the photo's own pixels"
    gaps = [face_landmarks(f.rgb, detect_faces(f.rgb)[0]).lip_gap() for f in out]
    rested = rig.render(FaceMotion())  # the astronaut smiles on her teeth: at rest her lips meet
    rest = face_landmarks(rested, detect_faces(rested)[0]).lip_gap()
    assert gaps[1] > rest + 0.2 * photo.face.mouth_width, (gaps, rest)
    assert max(abs(gaps[0] - rest), abs(gaps[2] - rest)) < 0.1 * photo.face.mouth_width, (gaps, rest)
    assert after.last is not None and photo_motion(after.last).jaw_open < 0.3


def test_a_bundled_avatar_is_drawn_sharp_at_the_motion_of_its_soft_driver_frames() -> None:
    """Blurred driver frames (what the decoder gives) come back as the renderer's own frames at
    the motion read off them: an open mouth opens, a closed one closes, and the pixels are the
    renderer's (sharper than the driver: more gradient energy), in the session's order."""
    import cv2

    ada = get_identity("ada")
    states = [FaceState(), FaceState(openness=0.8, closed=0.0, open=1.0), FaceState(blink=1.0)]
    sharp = [render(ada, s, 256) for s in states]
    soft = [cv2.GaussianBlur(f, (0, 0), 1.5) for f in sharp]
    frames = [PublishedFrame(i, 25, f, np.zeros(640, np.float32), 16000, "N0") for i, f in enumerate(soft)]
    rig = PuppetRig(ada, 256)
    made, (after,) = Redraw()([frames], [RedrawState(rig, reference_image(ada, 256))])
    out = [f.rgb for f in made[0]]

    def energy(f: np.ndarray) -> float:
        return float(np.abs(cv2.Laplacian(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY), cv2.CV_32F)).mean())

    assert all(energy(o) > 1.3 * energy(s) for o, s in zip(out, soft, strict=True))

    def mae(x: np.ndarray, y: np.ndarray) -> float:
        return float(np.abs(x.astype(np.int16) - y).mean())

    for k, o in enumerate(out):
        to_truth = [mae(o, t) for t in sharp]
        assert int(np.argmin(to_truth)) == k, ("nearest the renderer's frame of its own state", k, to_truth)
        assert to_truth[k] < 0.5 * mae(soft[k], sharp[k]), "nearer the renderer's frame than its blurred driver"
    assert np.array_equal(out[2], rig.draw(after.last)), "the frame is the renderer's, at the motion carried on"
    assert after.last is not None and after.last.blink > 0.3


def test_the_talking_envelope_rises_with_speech_and_falls_in_silence():
    from engine.stages.redraw import talking_envelope

    talking = 0.0
    for _ in range(6):
        talking = talking_envelope(talking, FaceState(openness=0.6))
    assert talking > 0.75  # within a quarter second of speech
    for _ in range(5):  # a short pause between words keeps most of it
        talking = talking_envelope(talking, FaceState(openness=0.0))
    assert talking > 0.6
    for _ in range(75):  # three seconds of silence
        talking = talking_envelope(talking, FaceState(openness=0.0))
    assert talking < 0.15


def test_motion_read_from_latents_chunk_by_chunk_is_the_motion_read_all_at_once() -> None:
    """Each call keeps the last latents it read, so a session read one latent per chunk gets the
    same motion as one read of the whole run; ``frames`` picks slots of each latent's frames."""
    import torch

    from engine.photo.latent_reader import LatentMotionReader

    torch.manual_seed(0)
    reader = LatentMotionReader(channels=8, frames=4)
    reader(torch.zeros(1, 32, 8, 8))
    stage = Redraw(latent_reader=reader.eval())
    state = RedrawState(PuppetRig(get_identity("ada"), 64), reference_image(get_identity("ada"), 64),
                        latent_reference=torch.randn(8, 8, 8))
    latents = torch.randn(5, 8, 8, 8)
    shown = [0, *range(4, 20)]  # the stream's first latent shows its first frame only
    whole, _ = stage.read_latents([latents], [shown], [state])
    pieces, st = [], state
    for g in range(5):
        (motions,), (st,) = stage.read_latents([latents[g:g + 1]], [[0] if g == 0 else range(4)], [st])
        pieces += motions
    def values(states: list[FaceState]) -> np.ndarray:
        return np.array([[s.openness, s.blink, s.yaw, s.gaze_x] for s in states])

    assert np.allclose(values(pieces), values(whole[0]), atol=1e-5)
    assert torch.equal(st.latents_before, latents[-2:])
    (picked,), _ = stage.read_latents([latents], [[0, 4, 5]], [state])
    assert np.allclose(values(picked), values(whole[0][:3]), atol=1e-5)
    assert len({m.openness for m in whole[0]}) == len(shown), "every frame of a latent has its own motion"
    with pytest.raises(ValueError, match="reference's latent"):
        stage.read_latents([latents], [range(20)], [RedrawState(state.drawer, state.driver_reference)])


def test_drawing_read_motion_keeps_the_talking_envelope_and_the_last_pose() -> None:
    ada = get_identity("ada")
    state = RedrawState(PuppetRig(ada, 64), reference_image(ada, 64))
    talking = [FaceState(openness=0.8, yaw=0.2)] * 6
    (images,), (after,) = Redraw().draw([talking], [state])
    assert len(images) == 6 and images[0].shape == (64, 64, 3)
    assert after.talking > 0.8 and after.last is not None and after.last.yaw == pytest.approx(0.2, abs=0.01)
    assert not np.array_equal(images[0], render(ada, FaceState(), 64)), "drawn at the read motion"


def real_voice(seconds: float = 4.0) -> np.ndarray:
    """A real speaker's voice (a clip of the evaluation set), 16 kHz mono float."""
    from engine.eval.real import REAL_DIR
    from engine.media.audio_io import load_audio

    return load_audio(REAL_DIR / "retalk1.mp4", SR)[: int(seconds * SR)]


SR, FPS = 16000, 25
SPF = SR // FPS


def test_a_session_that_hears_takes_its_mouth_from_the_phones_and_keeps_the_dit_head() -> None:
    """Chunk by chunk (each through its frames' lookahead), a hearing session's mouths are those of
    the phones heard in the whole voice, whatever mouth the DiT read, eased so they do not chatter;
    its head and lids stay the DiT's."""
    voice = real_voice()
    frames = len(voice) // SPF
    dit = FaceState(openness=0.8, wide=0.6, closed=0.0, open=1.0, yaw=0.2, blink=0.3)
    heard = HeardMouth.of(SR, FPS)
    assert heard.lookahead == HEARD_LOOKAHEAD_FRAMES * SPF
    mouths: list[FaceState] = []
    for start in range(0, frames, 4):
        end = (start + 4) * SPF + heard.lookahead
        final = end >= len(voice)  # the voice ends within the lookahead: the rest is heard at once
        count = frames - start if final else 4
        mouths += heard_mouths([dit] * count, heard, voice[heard.heard:end], final=final)
        if final:
            break
    whole = HeardMouth.of(SR, FPS).hear(voice, final=True)
    assert len(mouths) == frames and len(whole) == -(-len(voice) // SPF)
    np.testing.assert_allclose([[h.openness, h.closed, h.open, h.rounded, h.wide] for h in mouths], whole[:frames],
                               atol=1e-6)
    assert all(h.yaw == 0.2 and h.blink == 0.3 for h in mouths), "the head and the lids stay the DiT's"
    openness = np.array([h.openness for h in mouths])
    assert openness.max() > 0.5 and (openness < 0.2).mean() > 0.15, "it opens on vowels and closes between"
    tracker = MouthTracker(SR, FPS)
    raw = MouthTrack.concat([tracker.push(voice), tracker.close()], FPS).openness[:frames]
    assert np.corrcoef(openness, raw)[0, 1] > 0.9, "eased, not changed"

    def chatter(x: np.ndarray) -> float:
        return float(np.abs(np.diff(x, n=2)).mean() / np.abs(np.diff(x)).mean())

    assert chatter(openness) < min(1.45, chatter(raw)), (chatter(openness), chatter(raw))


def test_a_heard_mouth_opens_eased_and_closes_at_once() -> None:
    """Lips meet in a frame or two on a p, b or m: a heard closure is drawn closed in the frame it
    is heard, where an opening (and every shape weight) moves part of the way a frame."""
    heard = np.array([[0.0, 1, 0, 0, 0], [0.6, 0, 1, 0, 0], [0.6, 0, 1, 0, 0], [0.0, 1, 0, 0, 0]])
    out = ease_mouths(heard, None)
    assert out[1, 0] == pytest.approx(HEARD_EASE * 0.6) and out[2, 0] > out[1, 0]
    assert out[1, 2] == pytest.approx(HEARD_EASE) and out[3, 2] == pytest.approx(out[2, 2] * (1 - HEARD_EASE))
    assert HEARD_CLOSE_EASE == 1.0 and out[3, 0] == 0.0
    np.testing.assert_allclose(ease_mouths(heard[2:], out[1]), out[2:])  # continues from the frame before


def test_the_heard_mouth_keeps_time_with_the_phones_said() -> None:
    """On speech whose phones are known (a held-out evaluation sentence), the heard mouth follows
    the mouth those phones make at lag 0 (waiting for the settled phones: with no lookahead it
    runs 1.5-2 frames late)."""
    from engine.eval.material import make_clip

    clip = make_clip(0, SR, 0)
    truth = clip.truth(FPS).openness
    heard = HeardMouth.of(SR, FPS).hear(clip.pcm, final=True)[:, 0]
    n = min(len(truth), len(heard))

    def r(lag: int) -> float:
        return float(np.corrcoef(heard[lag:n], truth[:n - lag])[0, 1])

    assert r(0) > 0.5 and r(0) > r(1) > r(2), (r(0), r(1), r(2))


def test_a_hearing_session_rests_its_mouth_in_silence_though_the_dit_reads_it_open() -> None:
    ada = get_identity("ada")
    state = RedrawState(PuppetRig(ada, 64), reference_image(ada, 64), heard=HeardMouth.of(SR, FPS))
    wide_open = [FaceState(openness=0.9, open=1.0, closed=0.0)] * 8
    silence = np.zeros((8 + HEARD_LOOKAHEAD_FRAMES) * SPF, np.float32)
    (images,), (after,) = Redraw().draw([wide_open], [state], [(silence, False)])
    assert after.last is not None and after.last.openness == pytest.approx(REST_OPENNESS, abs=0.02)
    (deaf,), _ = Redraw().draw([wide_open], [RedrawState(PuppetRig(ada, 64), reference_image(ada, 64))])
    assert not np.array_equal(images[-1], deaf[-1]), "without hearing the DiT's open mouth is drawn"


def test_a_hearing_session_draws_its_first_frame_once_its_mouths_lookahead_is_in() -> None:
    """A drawn session's first frame waits for the heard mouth's lookahead past it (what the server feeds
    before the clock starts), a decoded one only for the DiT's lookahead."""
    from engine.pipeline import Pipeline

    pipe = Pipeline.from_config("tiny").preset("fast")
    drawn, decoded = pipe.open_session(drawn=True), pipe.open_session()
    assert decoded.first_chunk_samples == pipe.first_chunk_samples
    assert drawn.first_chunk_samples == max(pipe.first_chunk_samples, SPF + HEARD_LOOKAHEAD_FRAMES * SPF)
    for session in (drawn, decoded):
        session.feed(np.zeros(session.first_chunk_samples - 1, np.float32))
        assert not steps_until_idle(session), "no frame before its audio is in"
        session.feed(np.zeros(1, np.float32))
        assert [f.index for f in steps_until_idle(session)] == [0]


def steps_until_idle(session) -> list[PublishedFrame]:
    """Every frame a session can publish with the audio it has."""
    out: list[PublishedFrame] = []
    while session.ready():
        out += session.step()
    return out


def test_a_hearing_drawn_session_draws_each_frame_as_soon_as_its_mouth_is_heard() -> None:
    """Frames come one by one, each as soon as its audio and the heard mouth's lookahead are in, not
    a chunk at a time (the live preset's chunks); what streams is what an offline render makes,
    frames and audio alike."""
    from engine.pipeline import Pipeline

    pipe = Pipeline.from_config("tiny").preset("fast")
    pcm = real_voice(3.0)
    lookahead = HEARD_LOOKAHEAD_FRAMES * SPF
    session = pipe.open_session(drawn=True)
    streamed: list[PublishedFrame] = []
    for end in range(SPF, len(pcm) + 1, SPF):
        session.feed(pcm[end - SPF:end])
        got = steps_until_idle(session)
        streamed += got
        heard_through = (end - lookahead) // SPF  # frames whose mouths are heard
        assert len(streamed) == max(0, heard_through), (end, len(streamed))
    session.close_input()
    while not session.finished:
        streamed += session.step()
    offline = list(pipe.render(pcm, drawn=True))
    assert [f.index for f in streamed] == list(range(len(offline)))
    assert all(np.array_equal(a.rgb, b.rgb) for a, b in zip(streamed, offline, strict=True))
    assert np.array_equal(np.concatenate([f.audio for f in streamed]), np.concatenate([f.audio for f in offline]))
    assert np.array_equal(np.concatenate([f.audio for f in streamed])[: len(pcm)], pcm)


def test_a_hearing_drawn_session_runs_each_dit_chunk_only_once_its_motion_is_a_chunk_from_needed() -> None:
    """Fed live, the DiT chunk (the longest work of a drawn session) waits until the motion held
    ahead of drawing is down to one chunk, rather than running as soon as its audio is in: run
    between two frames' draws it delays one frame, not the heavy draw that reads a new block of
    the heard mouth, and the frames' lateness that the playout delay covers stays small."""
    from engine.pipeline import Pipeline

    pipe = Pipeline.from_config("tiny").preset("fast")
    session = pipe.open_session(drawn=True)
    pcm = real_voice(3.0)
    chunk = pipe.frames_per_chunk
    held_at_chunk = []
    for end in range(SPF, len(pcm) + 1, SPF):
        session.feed(pcm[end - SPF:end])
        while session.ready():
            if session.next_work().plan is not None:
                held_at_chunk.append(session.backlog.ahead())
            session.step()
    assert len(held_at_chunk) >= len(pcm) // SPF // chunk - 2, "every chunk still runs"
    assert max(held_at_chunk) <= chunk, held_at_chunk
    assert sorted(set(held_at_chunk[2:])) == [chunk], "each waits until the motion held is one chunk"


def test_without_a_pose_lag_a_drawn_session_draws_each_chunk_whole() -> None:
    from engine.pipeline import Pipeline

    pipe = Pipeline.from_config("tiny").preset("fast")
    pipe.pose_lag = None
    session = pipe.open_session(drawn=True)
    assert session.backlog is None
    session.feed(real_voice(2.0))
    sizes = []
    while session.ready():
        sizes.append(len(session.step()))
    assert max(sizes) == pipe.frames_per_chunk, sizes
