"""Frame slots, in shared memory or in this process's: both sides see the same bytes, and nothing is left behind."""

from __future__ import annotations

import os

import numpy as np
import pytest

from engine.service.slots import SHM_DIR, FrameSlots


def test_a_frame_written_by_one_mapping_is_read_by_another():
    owner = FrameSlots.create(3, (8, 6), 4)
    try:
        worker = FrameSlots.attach(owner.path, 3, (8, 6), 4)
        rgb = np.arange(8 * 6 * 3, dtype=np.uint8).reshape(8, 6, 3)
        audio = np.array([0.5, -0.25, 0.125, 1.0], np.float32)
        worker.write(2, rgb, audio)
        got_rgb, got_audio = owner.read(2)
        np.testing.assert_array_equal(got_rgb, rgb)
        np.testing.assert_array_equal(got_audio, audio)
        worker.write(2, rgb * 0, audio * 0)  # the copies read before do not change
        assert got_rgb.sum() == rgb.sum()
        assert owner.read(0)[0].sum() == 0
        worker.close()
    finally:
        owner.unlink()
    assert not owner.path.exists()


def test_attach_refuses_a_file_of_another_shape():
    owner = FrameSlots.create(2, (4, 4), 2)
    try:
        with pytest.raises(ValueError, match="not a slot file"):
            FrameSlots.attach(owner.path, 3, (4, 4), 2)
        with pytest.raises(IndexError):
            owner.read(2)
    finally:
        owner.unlink()


def test_slot_files_are_private_to_the_user():
    owner = FrameSlots.create(1, (2, 2), 1)
    try:
        assert owner.path.parent == SHM_DIR
        assert os.stat(owner.path).st_mode & 0o077 == 0
    finally:
        owner.unlink()


def test_in_process_slots_are_shared_by_handle_and_need_no_file():
    owner = FrameSlots.in_memory(2, (4, 3), 2)
    worker = owner.share()
    rgb = np.full((4, 3, 3), 7, np.uint8)
    worker.write(1, rgb, np.array([0.5, -1.0], np.float32))
    got_rgb, got_audio = owner.read(1)
    np.testing.assert_array_equal(got_rgb, rgb)
    np.testing.assert_array_equal(got_audio, [0.5, -1.0])
    worker.close()  # the worker's handle goes; the owner still reads
    assert owner.read(1)[0].sum() == rgb.sum() and owner.path is None
    owner.unlink()
    file = FrameSlots.create(1, (2, 2), 1)
    try:
        with pytest.raises(ValueError, match="in-process"):
            file.share()
    finally:
        file.unlink()
