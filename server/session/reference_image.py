"""The ``image`` option of a new session, from base64 to a photo avatar, every failure a 4xx.

The photo's face is found (the largest, when there are several) and cropped here, so an image
without a usable face is refused with the reason ("no face found", too small, turned too far)
before any engine work. Decoding and the face search are the costly steps of creating a
session: they run off the event loop, at most :data:`DECODERS` at a time, each bounded by the
decoded-size limits read from the image's header before it starts (``max_image_side`` and
``max_image_pixels``), so concurrent requests cannot multiply the memory an image may take or
stall the media of running sessions.
"""

from __future__ import annotations

import asyncio
import base64
import binascii

from server.base.engine_port import Engine, ImageBounds, ImageTooLargeError, PhotoAvatar, UnusableImage
from server.base.errors import ApiError
from server.base.protocol import SessionCreate
from server.config import InputLimits

DECODERS = 2
MIN_SIDE = 64  # smaller references carry too little of a face to animate


class ReferenceImages:
    def __init__(self, engine: Engine, limits: InputLimits) -> None:
        self._engine = engine
        self._max_bytes = limits.max_image_bytes
        self._limits = ImageBounds(limits.max_image_side, limits.max_image_pixels, MIN_SIDE)
        self._slots = asyncio.Semaphore(DECODERS)

    async def decode(self, options: SessionCreate) -> PhotoAvatar | None:
        """The ``image`` option made a photo avatar, or None when the session names no image."""
        if options.image is None:
            return None
        if options.avatar is not None:
            raise ApiError(400, "bad_image", "give either avatar or image, not both")
        try:
            data = base64.b64decode(options.image, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "bad_image", "image is not valid base64") from None
        return await self.photo(data)

    async def photo(self, data: bytes) -> PhotoAvatar:
        """A photograph's bytes made a photo avatar (its face found and framed); a 4xx if not."""
        if not self._engine.info.accepts_images:
            raise ApiError(400, "bad_image", f"the {self._engine.info.config} engine draws bundled avatars only")
        if len(data) > self._max_bytes:
            raise ApiError(413, "image_too_large", f"image over {self._max_bytes} bytes")
        try:
            async with self._slots:
                return await asyncio.to_thread(self._engine.photo_avatar, data, self._limits)
        except ImageTooLargeError as exc:
            raise ApiError(413, "image_too_large", str(exc)) from None
        except UnusableImage as exc:
            raise ApiError(400, "bad_image", str(exc)) from None
