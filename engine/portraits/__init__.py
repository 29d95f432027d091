"""Real people as bundled photo avatars: licensed portraits shipped with the engine.

Each is a 512² head-and-shoulders JPEG in this folder, with its source and licence in
``SOURCES.md``; a session that names one is a photo session of that portrait. They are also the
test portraits the photo avatars' mouths are judged on (``engine.eval.mouths``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np

from engine.photo.avatar import PhotoAvatar, photo_avatar

FOLDER = Path(__file__).parent


@dataclass(frozen=True)
class Portrait:
    """One bundled portrait: its avatar name, who it shows, and the licence it is shipped under."""

    name: str
    label: str
    shows: str
    licence: str
    attribution: str

    @property
    def path(self) -> Path:
        return FOLDER / f"{self.name}.jpg"


_CC_BY_SA = "CC BY-SA 3.0"
PORTRAITS: tuple[Portrait, ...] = (
    Portrait("astronaut", "Eileen Collins", "smiling on her teeth", "public domain",
             "Eileen Collins, NASA (public domain), via scikit-image's sample data"),
    Portrait("christophe_henner", "Christophe Henner", "glasses, a closed-lip smile", _CC_BY_SA,
             '"Christophe Henner - June 2016" by Ruby Mizrahi / Wikimedia Foundation, CC BY-SA 3.0; '
             "cropped and resized"),
    Portrait("filippo_giunchedi", "Filippo Giunchedi", "a full beard", _CC_BY_SA,
             '"Giunchedi, Filippo January 2015 01" by Myleen Hollero / Wikimedia Foundation, CC BY-SA 3.0; '
             "cropped and resized"),
    Portrait("grace_hopper", "Grace Hopper", "about 77, glasses", "public domain",
             "Grace M. Hopper, official US Navy photograph (public domain), via Matplotlib's sample data"),
    Portrait("katherine_maher", "Katherine Maher", "a broad smile", _CC_BY_SA,
             '"Katherine Maher" by Victor Grigas, CC BY-SA 3.0; cropped and resized'),
)


def portrait_names() -> list[str]:
    return [p.name for p in PORTRAITS]


def portrait(name: str) -> Portrait:
    """The bundled portrait ``name``; ``KeyError`` naming the choices if there is none."""
    for p in PORTRAITS:
        if p.name == name:
            return p
    raise KeyError(f"unknown portrait {name!r}; choose one of: {', '.join(portrait_names())}")


@lru_cache(maxsize=len(PORTRAITS))
def portrait_image(name: str) -> np.ndarray:
    """The (512, 512, 3) RGB uint8 portrait ``name`` (read once)."""
    image = cv2.imread(str(portrait(name).path), cv2.IMREAD_COLOR)
    if image is None:
        raise FileNotFoundError(portrait(name).path)
    image = np.ascontiguousarray(image[..., ::-1])
    image.setflags(write=False)
    return image


@lru_cache(maxsize=len(PORTRAITS))
def portrait_avatar(name: str) -> PhotoAvatar:
    """The photo avatar of the bundled portrait ``name`` (its face found and framed once)."""
    return photo_avatar(np.array(portrait_image(name)))
