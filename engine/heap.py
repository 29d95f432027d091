"""What start-up leaves alive stays out of the garbage collector's way.

A full collection walks every object the collector tracks: once torch, the model and the
libraries are loaded that is some 200,000 objects and 100-230 ms of one core here, a stall that
comes back every few seconds of steady work and makes a burst of frames late (the playout then
raises its delay for many seconds). Start-up's objects live as long as the process, so once it is
over they are moved to the collector's permanent generation; what sessions make later is
collected as before.
"""

from __future__ import annotations

import gc


def freeze_heap() -> int:
    """Collect what start-up left over, then exempt every object alive now from later collections;
    how many objects that is."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
