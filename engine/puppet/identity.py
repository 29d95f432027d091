"""Avatar identities: the parameters that make one procedural face look unlike another.

An ``Identity`` is pure data (frozen, hashable, no arrays) so it can name a training
sample, be logged, and be rebuilt exactly from a seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

RGB = tuple[float, float, float]
HairStyle = Literal["short", "long", "bun", "bald", "fringe"]
Accessory = Literal["none", "glasses", "earrings"]

HAIR_STYLES: tuple[HairStyle, ...] = ("short", "long", "bun", "bald", "fringe")
ACCESSORIES: tuple[Accessory, ...] = ("none", "glasses", "earrings")


def hex_rgb(code: str) -> RGB:
    """``"#rrggbb"`` -> floats in [0, 1]; palettes read better as hex."""
    code = code.lstrip("#")
    return (int(code[0:2], 16) / 255.0, int(code[2:4], 16) / 255.0, int(code[4:6], 16) / 255.0)


SKIN_TONES: tuple[RGB, ...] = tuple(
    hex_rgb(c) for c in ("#f6d7c3", "#eac4a6", "#e0ac85", "#c68a62", "#a66d4a", "#7d4e34", "#5a3826")
)
HAIR_COLOURS: tuple[RGB, ...] = tuple(
    hex_rgb(c) for c in ("#1c1412", "#3b2418", "#6a4226", "#a66a3a", "#d9b36c", "#b8b3ad", "#8f2f1f")
)
DYED_HAIR: tuple[RGB, ...] = tuple(hex_rgb(c) for c in ("#3f6fd8", "#c2407a", "#3aa37a", "#7b4bc4"))
EYE_COLOURS: tuple[RGB, ...] = tuple(
    hex_rgb(c) for c in ("#3b2416", "#6b4a2b", "#4f7a3a", "#3f6fa3", "#7a8a94", "#2a1a10")
)


@dataclass(frozen=True)
class Identity:
    """Shape and colour parameters of one stylised avatar.

    Lengths are fractions of the image size (so one identity renders at any size);
    colours are RGB floats in [0, 1].
    """

    name: str
    face_width: float  # half-width of the face ellipse, ~0.19..0.24
    face_height: float  # half-height, ~0.25..0.30
    jaw_taper: float  # 0 round jaw .. 0.45 pointed chin
    jaw_square: float  # 0 elliptic .. 1 squarer cheeks (superellipse exponent)
    skin: RGB
    hair: RGB
    hair_style: HairStyle
    eye_colour: RGB
    eye_size: float  # ~0.8..1.25 relative scale
    eye_spacing: float  # eye centre offset as a fraction of face half-width, ~0.36..0.48
    brow_thickness: float  # ~0.7..1.4 relative scale
    brow_tilt: float  # radians-ish slope, negative = angry-looking, positive = worried
    brow_arch: float  # 0 straight .. 1 strongly arched
    lip: RGB
    mouth_width: float  # relative scale ~0.8..1.2
    nose_size: float  # relative scale ~0.8..1.3
    blush: float  # 0..1 cheek colour
    accessory: Accessory
    accessory_colour: RGB
    shirt: RGB
    background_top: RGB
    background_bottom: RGB

    @property
    def brow_colour(self) -> RGB:
        """Brows follow the hair; bald heads get a dark brow that reads against any skin."""
        if self.hair_style == "bald":
            return _mix(self.skin, (0.12, 0.08, 0.06), 0.7)
        return _mix(self.hair, (0.0, 0.0, 0.0), 0.25)

    @classmethod
    def sample(cls, rng: np.random.Generator, name: str = "sampled") -> Identity:
        """A random identity; every attribute varies so sampled faces differ visibly."""
        skin = _jitter(rng, SKIN_TONES[int(rng.integers(len(SKIN_TONES)))], 0.03)
        palette = DYED_HAIR if rng.random() < 0.12 else HAIR_COLOURS
        hair = _jitter(rng, palette[int(rng.integers(len(palette)))], 0.04)
        style = HAIR_STYLES[int(rng.integers(len(HAIR_STYLES)))]
        lipstick = rng.random() < 0.25
        lip = _jitter(rng, hex_rgb("#b0303f"), 0.06) if lipstick else _mix(skin, (0.62, 0.22, 0.24), 0.45)
        accessory = ACCESSORIES[int(rng.choice(3, p=[0.5, 0.3, 0.2]))]
        acc = (
            _jitter(rng, (0.1, 0.1, 0.12), 0.08)
            if accessory == "glasses" and rng.random() < 0.6
            else _rgb(rng.uniform(0.1, 0.95, 3))
        )
        bg_top = _rgb(rng.uniform(0.15, 0.9, 3))
        gradient = rng.random() < 0.6
        bg_bottom = _mix(bg_top, _rgb(rng.uniform(0.0, 1.0, 3)), 0.5) if gradient else bg_top
        return cls(
            name=name,
            face_width=float(rng.uniform(0.19, 0.24)),
            face_height=float(rng.uniform(0.25, 0.30)),
            jaw_taper=float(rng.uniform(0.0, 0.4)),
            jaw_square=float(rng.uniform(0.0, 1.0)),
            skin=skin,
            hair=hair,
            hair_style=style,
            eye_colour=EYE_COLOURS[int(rng.integers(len(EYE_COLOURS)))],
            eye_size=float(rng.uniform(0.8, 1.25)),
            eye_spacing=float(rng.uniform(0.36, 0.47)),
            brow_thickness=float(rng.uniform(0.7, 1.4)),
            brow_tilt=float(rng.uniform(-0.15, 0.15)),
            brow_arch=float(rng.uniform(0.0, 1.0)),
            lip=lip,
            mouth_width=float(rng.uniform(0.8, 1.2)),
            nose_size=float(rng.uniform(0.8, 1.3)),
            blush=float(rng.uniform(0.0, 0.6)),
            accessory=accessory,
            accessory_colour=acc,
            shirt=_rgb(rng.uniform(0.05, 0.95, 3)),
            background_top=bg_top,
            background_bottom=bg_bottom,
        )


def _mix(a: RGB, b: RGB, t: float) -> RGB:
    return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t)


def _rgb(v: np.ndarray) -> RGB:
    return (float(v[0]), float(v[1]), float(v[2]))


def _jitter(rng: np.random.Generator, c: RGB, amount: float) -> RGB:
    return _rgb(np.clip(np.asarray(c, dtype=np.float64) + rng.normal(0.0, amount, 3), 0.0, 1.0))


def _bundled() -> dict[str, Identity]:
    """Hand-picked identities that differ in every salient attribute (skin, hair, style, extras)."""
    h = hex_rgb
    return {
        "ada": Identity(
            name="ada",
            face_width=0.20,
            face_height=0.265,
            jaw_taper=0.3,
            jaw_square=0.1,
            skin=h("#f1d0b8"),
            hair=h("#8f2f1f"),
            hair_style="long",
            eye_colour=h("#4f7a3a"),
            eye_size=1.15,
            eye_spacing=0.42,
            brow_thickness=0.8,
            brow_tilt=0.05,
            brow_arch=0.8,
            lip=h("#b0303f"),
            mouth_width=0.95,
            nose_size=0.85,
            blush=0.45,
            accessory="earrings",
            accessory_colour=h("#e0b030"),
            shirt=h("#2d4a7a"),
            background_top=h("#cfe3f0"),
            background_bottom=h("#8fb3cf"),
        ),
        "ben": Identity(
            name="ben",
            face_width=0.235,
            face_height=0.285,
            jaw_taper=0.05,
            jaw_square=0.9,
            skin=h("#a66d4a"),
            hair=h("#1c1412"),
            hair_style="short",
            eye_colour=h("#3b2416"),
            eye_size=0.9,
            eye_spacing=0.40,
            brow_thickness=1.35,
            brow_tilt=-0.08,
            brow_arch=0.2,
            lip=h("#7a3e34"),
            mouth_width=1.1,
            nose_size=1.25,
            blush=0.0,
            accessory="glasses",
            accessory_colour=h("#1a1a1e"),
            shirt=h("#c8553d"),
            background_top=h("#f2e6c9"),
            background_bottom=h("#f2e6c9"),
        ),
        "cleo": Identity(
            name="cleo",
            face_width=0.21,
            face_height=0.26,
            jaw_taper=0.2,
            jaw_square=0.3,
            skin=h("#5a3826"),
            hair=h("#2a1c16"),
            hair_style="bun",
            eye_colour=h("#6b4a2b"),
            eye_size=1.2,
            eye_spacing=0.44,
            brow_thickness=1.0,
            brow_tilt=0.0,
            brow_arch=0.9,
            lip=h("#6e2c36"),
            mouth_width=1.05,
            nose_size=1.0,
            blush=0.2,
            accessory="earrings",
            accessory_colour=h("#d8d8e0"),
            shirt=h("#e8c547"),
            background_top=h("#5b4b8a"),
            background_bottom=h("#2e2550"),
        ),
        "dev": Identity(
            name="dev",
            face_width=0.225,
            face_height=0.295,
            jaw_taper=0.15,
            jaw_square=0.6,
            skin=h("#c68a62"),
            hair=h("#1c1412"),
            hair_style="bald",
            eye_colour=h("#2a1a10"),
            eye_size=0.95,
            eye_spacing=0.38,
            brow_thickness=1.2,
            brow_tilt=0.1,
            brow_arch=0.4,
            lip=h("#8a4a3e"),
            mouth_width=1.0,
            nose_size=1.2,
            blush=0.0,
            accessory="none",
            accessory_colour=h("#000000"),
            shirt=h("#3a7d5c"),
            background_top=h("#e9ecef"),
            background_bottom=h("#adb5bd"),
        ),
        "eli": Identity(
            name="eli",
            face_width=0.215,
            face_height=0.275,
            jaw_taper=0.25,
            jaw_square=0.2,
            skin=h("#e0ac85"),
            hair=h("#d9b36c"),
            hair_style="fringe",
            eye_colour=h("#3f6fa3"),
            eye_size=1.05,
            eye_spacing=0.43,
            brow_thickness=0.9,
            brow_tilt=0.12,
            brow_arch=0.5,
            lip=h("#b86a62"),
            mouth_width=0.9,
            nose_size=0.9,
            blush=0.35,
            accessory="glasses",
            accessory_colour=h("#b03a2e"),
            shirt=h("#f5f5f0"),
            background_top=h("#2f6f73"),
            background_bottom=h("#17393c"),
        ),
        "fay": Identity(
            name="fay",
            face_width=0.195,
            face_height=0.255,
            jaw_taper=0.35,
            jaw_square=0.0,
            skin=h("#f6d7c3"),
            hair=h("#3f6fd8"),
            hair_style="short",
            eye_colour=h("#7a8a94"),
            eye_size=1.1,
            eye_spacing=0.45,
            brow_thickness=0.75,
            brow_tilt=-0.05,
            brow_arch=0.7,
            lip=h("#c2407a"),
            mouth_width=0.85,
            nose_size=0.8,
            blush=0.5,
            accessory="none",
            accessory_colour=h("#000000"),
            shirt=h("#222222"),
            background_top=h("#fbd3c4"),
            background_bottom=h("#f39a7a"),
        ),
    }


IDENTITIES: dict[str, Identity] = _bundled()


def identity_names() -> list[str]:
    """Names of the bundled identities, in a stable order."""
    return sorted(IDENTITIES)


def get_identity(name: str) -> Identity:
    """The bundled identity called ``name``; unknown names fail with the list of valid ones."""
    try:
        return IDENTITIES[name]
    except KeyError:
        known = ", ".join(identity_names())
        raise KeyError(f"unknown avatar identity {name!r}; bundled identities: {known}") from None
