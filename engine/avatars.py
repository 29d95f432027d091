"""Bundled avatar identities (drawn by the procedural renderer) and reference images."""

from __future__ import annotations

import numpy as np

DEFAULT_AVATAR = "ada"


def avatar_names() -> list[str]:
    from engine.puppet import identity_names

    return list(identity_names())


def avatar_image(name: str | None, size: tuple[int, int]) -> np.ndarray:
    """The neutral reference image of a bundled avatar, square, at least ``size``."""
    from engine.puppet import reference_image

    name = name or DEFAULT_AVATAR
    if name not in avatar_names():
        raise KeyError(f"unknown avatar {name!r}; choose one of: {', '.join(avatar_names())}")
    return reference_image(name, max(size))
