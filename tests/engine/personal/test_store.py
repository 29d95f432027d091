"""The avatar store: a saved avatar loads back whole, survives a new store on the same root,
and bad names, taken names and missing avatars get clear errors with nothing written."""

import numpy as np
import pytest

from engine.face.footage import bank_from_entries
from engine.personal.enroll import EnrollReport
from engine.personal.store import AvatarStore, StoreError, default_root
from engine.photo.avatar import PhotoAvatar


@pytest.fixture(scope="module")
def avatar(astronaut_crop):
    crop, face = astronaut_crop
    rng = np.random.default_rng(0)
    patches = [rng.integers(0, 255, (60, 90, 3), dtype=np.uint8) for _ in range(3)]
    lips = [rng.uniform(0, 60, (20, 2)).astype(np.float32) for _ in range(3)]
    bank = bank_from_entries(patches, lips, [0.05, 0.1, 0.2], [1, 1, 2], 98.0, 0.45)
    return PhotoAvatar(crop, face, bank, sway=1.7)


REPORT = EnrollReport(seconds=12.0, frames_read=150, frames_used=140, entries=3, coverage=0.5, widest_opening=0.2,
                      blinks_per_minute=12.0, sway_degrees=1.5, bank_bytes=100)


def test_saved_avatars_load_back_whole_after_a_restart(avatar, tmp_path):
    meta = AvatarStore(tmp_path, reserved=("ada",)).save("me", avatar, REPORT)
    assert meta["coverage"] == 0.5 and meta["disk_bytes"] > 10_000
    again = AvatarStore(tmp_path)  # a new process: only the folder is shared
    assert [row["name"] for row in again.list()] == ["me"] and "me" in again
    loaded = again.load("me")
    assert np.array_equal(loaded.image, avatar.image)
    assert np.allclose(loaded.face.landmarks, avatar.face.landmarks)
    b, c = loaded.mouths, avatar.mouths
    assert np.array_equal(b.patches, c.patches) and np.allclose(b.lips, c.lips)
    assert np.allclose(b.openings, c.openings) and list(b.widths) == list(c.widths)
    assert b.rest_width == pytest.approx(c.rest_width) and b.coverage == pytest.approx(c.coverage)
    assert loaded.sway == pytest.approx(1.7)
    disk = sum(p.stat().st_size for p in (tmp_path / "me").iterdir())
    assert abs(disk - meta["disk_bytes"]) < 200


@pytest.mark.parametrize("name", ["../escape", "a/b", "", ".hidden", "UPPER", "x" * 41, "me\n", "..", "ada"])
def test_bad_names_are_refused_before_touching_the_disk(avatar, tmp_path, name):
    store = AvatarStore(tmp_path / "store", reserved=("ada",))
    with pytest.raises(StoreError) as err:
        store.save(name, avatar, REPORT)
    assert err.value.status in (400, 409)
    assert not (tmp_path / "store").exists() and not (tmp_path / "escape").exists()


def test_a_taken_name_is_409_and_the_first_avatar_stays(avatar, tmp_path):
    store = AvatarStore(tmp_path)
    store.save("me", avatar, REPORT)
    with pytest.raises(StoreError) as err:
        store.save("me", avatar, REPORT)
    assert err.value.status == 409
    assert np.array_equal(store.load("me").image, avatar.image)
    assert [p.name for p in tmp_path.iterdir()] == ["me"]  # no temporary folder left behind


def test_removed_avatars_are_gone_and_missing_ones_are_404(avatar, tmp_path):
    store = AvatarStore(tmp_path)
    store.save("me", avatar, REPORT)
    store.remove("me")
    assert store.list() == [] and "me" not in store
    for call in (store.load, store.remove, store.info):
        with pytest.raises(StoreError) as err:
            call("me")
        assert err.value.status == 404


def test_the_root_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("AVATAR_STORE", str(tmp_path / "x"))
    assert default_root() == tmp_path / "x"
    monkeypatch.delenv("AVATAR_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_root() == tmp_path / "data" / "avatar" / "avatars"
