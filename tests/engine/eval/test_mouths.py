"""The mouth checks on every test portrait, and that they catch a mouth that looks wrong."""

import dataclasses

import numpy as np
import pytest

from engine.eval.mouths import COLUMNS, PORTRAITS_DIR, mouth_checks, portraits, sheet
from engine.photo.avatar import photo_avatar


@pytest.fixture(scope="module")
def photos():
    return [(name, photo_avatar(image)) for name, image in portraits()]


def test_the_portraits_are_shipped_with_their_sources(photos):
    names = [n for n, _ in photos]
    assert len(names) >= 5 and names[0] == "astronaut"
    sources = (PORTRAITS_DIR / "SOURCES.md").read_text()
    for name in names[1:]:
        assert f"{name}.jpg" in sources


def test_every_portrait_passes_the_mouth_checks(photos):
    smiling = 0
    for name, photo in photos:
        checks = mouth_checks(photo)
        assert all(checks.verdicts().values()), (name, checks)
        smiling += checks.smile_eases is not None
    assert smiling >= 2  # the smiles were checked, not skipped


def test_the_checks_catch_a_black_void_and_glowing_teeth(photos):
    from engine.face import rig as rig_module

    name, photo = photos[1]
    real = rig_module.mouth_palette

    def wrong(image, landmarks):
        p = real(image, landmarks)
        black = np.zeros(3, np.float32)
        return dataclasses.replace(p, cavity_deep=black, cavity_wall=black, tongue=black,
                                   enamel=np.full(3, 255, np.float32))

    rig_module.mouth_palette = wrong
    try:
        checks = mouth_checks(photo)
    finally:
        rig_module.mouth_palette = real
    verdicts = checks.verdicts()
    assert not verdicts["no_void"] and not verdicts["brightness"], checks


def test_the_contact_sheet_has_a_row_per_portrait_and_a_column_per_mouth(photos, tmp_path):
    from PIL import Image

    out = tmp_path / "mouths.png"
    sheet(out, photos[:2], width=120)
    img = np.asarray(Image.open(out))
    assert img.shape[1] == 120 * len(COLUMNS)
    tile_h = round(120 * 1.6 / 2.0)  # the lower face: 1.6 by 2 interocular distances
    assert img.shape[0] == 30 + 2 * (26 + tile_h)
    for row in range(2):
        y = 30 + 26 + row * (26 + tile_h)
        rest, wide = img[y : y + tile_h, :120].astype(float), img[y : y + tile_h, 240:360].astype(float)
        assert np.abs(rest - wide).mean() > 5, "the wide-open mouth is drawn in every row"
