"""A mouth's colours, read off the photo it belongs to.

A mouth interior drawn in fixed colours looks pasted on: near-white teeth glow on a dim
portrait, a black cavity reads as a hole. Everything here is taken from the face itself:

* enamel from the photo's own teeth where it shows them, else from its eye whites (the
  brightest near-neutral pixels between the lids), a little warmer and never brighter;
* lips, gums, tongue and cavity from the lips' own colour (the inside of a mouth is the same
  tissue, darker the deeper it lies), the cavity kept above black by the skin's brightness.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from engine.face.landmarks import (
    CHEEKBONES,
    LEFT_EYE_LOWER,
    LEFT_EYE_UPPER,
    LIPS_INNER_LOWER,
    LIPS_INNER_UPPER,
    LIPS_OUTER_LOWER,
    LIPS_OUTER_UPPER,
    RIGHT_EYE_LOWER,
    RIGHT_EYE_UPPER,
)

ENAMEL_TINT = np.array([1.0, 0.96, 0.86], np.float32)  # enamel against the eye whites: warmer
ENAMEL_OF_SCLERA = 0.96  # painted enamel's brightness against the eye whites'
MIN_SCLERA_PIXELS = 6
# A photo shows its teeth when the brightest part of its lip gap is this much brighter than its lips.
TEETH_OVER_LIPS = 25.0


@dataclass(frozen=True)
class MouthPalette:
    """RGB float32 colours (0..255) of one face's mouth."""

    enamel: np.ndarray  # the teeth, fully lit
    sclera: np.ndarray  # the eye whites: no tooth is brighter
    lip: np.ndarray  # the lips' median
    skin: np.ndarray  # the cheeks' median
    gum: np.ndarray
    tongue: np.ndarray
    cavity_wall: np.ndarray  # the inside of the cheeks, near the lips
    cavity_deep: np.ndarray  # the back of the mouth: dark, never black
    shows_teeth: bool  # the photo's lips are apart on its teeth at rest

    @property
    def brightest_enamel(self) -> float:
        """The most luminance any drawn tooth pixel may have."""
        return float(max(luminance(self.sclera), luminance(self.enamel)))


def luminance(rgb: np.ndarray) -> np.ndarray | float:
    """Rec. 601 luma of (..., 3) RGB."""
    rgb = np.asarray(rgb, np.float32)
    return rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114


def _polygon_mask(shape: tuple[int, int], *polygons: np.ndarray) -> np.ndarray:
    mask = np.zeros(shape, np.uint8)
    for polygon in polygons:
        cv2.fillPoly(mask, [np.round(polygon).astype(np.int32)], 1)
    return mask > 0


def _ring(xy: np.ndarray, upper: tuple[int, ...], lower: tuple[int, ...]) -> np.ndarray:
    return np.concatenate([xy[list(upper)], xy[list(lower)][::-1]])


def _sclera(img: np.ndarray, xy: np.ndarray, skin: np.ndarray) -> np.ndarray:
    """The eye whites: the colour of the brightest, least coloured tenth of the pixels between the
    lids (sclera, past the iris, lashes and the lid skin the lid contour also holds) at the
    brightness of the brightest twentieth (the eye white in the light, not in the lid's shade)."""
    eyes = _polygon_mask(img.shape[:2], _ring(xy, RIGHT_EYE_UPPER, RIGHT_EYE_LOWER),
                         _ring(xy, LEFT_EYE_UPPER, LEFT_EYE_LOWER))
    px = img[eyes]
    if len(px) >= MIN_SCLERA_PIXELS:
        lum = luminance(px)
        score = lum - (px.max(1) - px.min(1))
        colour = px[score >= np.percentile(score, 90)].mean(0)
        return (colour * float(np.percentile(lum, 95)) / max(float(luminance(colour)), 1.0)).astype(np.float32)
    # Eyes too small to read: a neutral as bright as the skin.
    return np.full(3, min(float(luminance(skin)), 235.0), np.float32)


def mouth_palette(image: np.ndarray, landmarks: np.ndarray) -> MouthPalette:
    """The palette of the face whose (468, >=2) ``landmarks`` lie on the (S, S, 3) uint8 RGB ``image``."""
    img = image.astype(np.float32)
    xy = np.asarray(landmarks, np.float64)[:, :2]
    shape = img.shape[:2]
    io = float(np.linalg.norm(xy[RIGHT_EYE_UPPER[0]] - xy[LEFT_EYE_UPPER[0]]))
    skin_mask = np.zeros(shape, bool)
    r = max(2, round(0.06 * io))
    for x, y in np.round(xy[list(CHEEKBONES)]).astype(int):
        skin_mask[max(y - r, 0) : y + r + 1, max(x - r, 0) : x + r + 1] = True
    skin = np.median(img[skin_mask], 0) if skin_mask.any() else np.array([180, 140, 120], np.float32)

    inner = _ring(xy, LIPS_INNER_UPPER, LIPS_INNER_LOWER)
    lips = _polygon_mask(shape, _ring(xy, LIPS_OUTER_UPPER, LIPS_OUTER_LOWER)) & ~_polygon_mask(shape, inner)
    lip = np.median(img[lips], 0) if lips.sum() > 10 else skin * np.array([0.85, 0.6, 0.6], np.float32)
    sclera = _sclera(img, xy, skin)

    # Enamel is less coloured than an eye white seen through lids and lashes: half-way to its grey.
    enamel = (0.5 * sclera + 0.5 * float(luminance(sclera))) * ENAMEL_OF_SCLERA * ENAMEL_TINT
    gap = img[_polygon_mask(shape, inner)]
    shows = False
    if len(gap) > 20:
        lum = luminance(gap)
        bright = gap[lum >= np.percentile(lum, 70)]
        shows = bool(luminance(bright.mean(0)) > luminance(lip) + TEETH_OVER_LIPS)
        if shows:
            enamel = np.median(bright, 0)

    # Inside, the same tissue as the lips: redder where it is wet, darker where it lies deeper.
    pink = np.array([1.0, 0.55, 0.6], np.float32) * float(luminance(lip)) * 1.25
    gum = 0.6 * lip + 0.4 * pink
    tongue = (0.5 * lip + 0.5 * pink) * np.array([1.0, 0.8, 0.8], np.float32)
    wall = lip * np.array([0.46, 0.22, 0.22], np.float32)
    floor = max(0.18 * float(luminance(skin)), 34.0)  # a cavity stays this bright at least: dark red, not black
    deep = lip * np.array([0.24, 0.1, 0.1], np.float32)
    deep = 0.65 * deep + 0.35 * float(luminance(deep))  # the throat's shadow: red gone brown
    deep = deep * max(1.0, floor / max(float(luminance(deep)), 1e-3))
    return MouthPalette(enamel=enamel.astype(np.float32), sclera=sclera.astype(np.float32),
                        lip=lip.astype(np.float32), skin=skin.astype(np.float32), gum=gum.astype(np.float32),
                        tongue=tongue.astype(np.float32), cavity_wall=wall.astype(np.float32),
                        cavity_deep=deep.astype(np.float32), shows_teeth=shows)
