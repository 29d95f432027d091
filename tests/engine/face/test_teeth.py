"""The drawn arches: crowns with gaps between them, a gum line, rigid layout."""

import numpy as np

from engine.face.teeth import LOWER, UPPER, draw_arch, draw_cavity, draw_tongue

ENAMEL = np.array([200.0, 190.0, 170.0], np.float32)
GUM = np.array([170.0, 90.0, 95.0], np.float32)


def _grid(pixel: float = 0.1):
    x = np.arange(-25, 25, pixel) + pixel / 2
    v = np.arange(-14, 6, pixel) + pixel / 2
    return np.meshgrid(x, v)


def test_upper_crowns_are_separated_by_gaps_and_hang_from_a_gum_line():
    x, v = _grid()
    col, alpha = draw_arch(x, v, np.zeros_like(x), UPPER, ENAMEL, GUM, 0.1)
    row = np.argmin(np.abs(v[:, 0] - (-2.0)))  # 2 mm above the incisal line: through the crowns
    lum = col[row].mean(1)
    front = np.abs(x[row]) < 15
    # Gaps between neighbouring crowns: several dark dips across the front teeth, not a flat band.
    dark = lum < 0.5 * lum[front].max()
    dips = np.flatnonzero(dark[1:] & ~dark[:-1] & front[1:])
    assert len(dips) >= 4, dips
    # The two central incisors meet at the midline with a gap.
    mid = np.argmin(np.abs(x[row]))
    assert lum[mid] < 0.8 * lum[mid + 30]
    # Below the incisal line nothing is drawn; far above it is gum, redder than the enamel.
    assert alpha[np.argmin(np.abs(v[:, 0] - 1.0)), front].max() < 0.05
    top = col[np.argmin(np.abs(v[:, 0] + 13.0)), front]
    assert (top[:, 0] > 1.3 * top[:, 1]).all()
    # Never brighter than the enamel it is drawn in.
    assert col[..., :].max() <= ENAMEL.max() * 1.08 + 1e-3


def test_crowns_darken_towards_the_corners():
    x, v = _grid()
    col, _ = draw_arch(x, v, np.zeros_like(x), UPPER, ENAMEL, GUM, 0.1)
    row = np.argmin(np.abs(v[:, 0] - (-2.0)))
    lum = col[row].mean(1)
    assert lum[np.abs(x[row]) < 4].max() > 1.5 * lum[np.abs(x[row] - 22) < 1].max()


def test_lower_arch_grows_downwards_and_is_narrower():
    x, v = _grid()
    _, up = draw_arch(x, v, np.zeros_like(x), UPPER, ENAMEL, GUM, 0.1)
    _, lo = draw_arch(x, v, np.zeros_like(x), LOWER, ENAMEL, GUM, 0.1)
    below = v[:, 0] > 1.0
    assert lo[below].mean() > 0.5 and up[below].max() < 0.05
    # More, narrower lower incisors: more gaps across the same 24 mm.
    def gaps(alpha, row):
        a = alpha[row, np.abs(x[row]) < 12]
        return int(((a[1:] < 0.6) & (a[:-1] >= 0.6)).sum())

    assert gaps(lo, np.argmin(np.abs(v[:, 0] - 2.0))) > gaps(up, np.argmin(np.abs(v[:, 0] + 2.0)))


def test_tongue_and_cavity_have_colour_and_shading():
    x, v = _grid()
    tongue = np.array([190.0, 100.0, 100.0], np.float32)
    col, cover = draw_tongue(x, v, np.zeros_like(x), tongue, 0.1)
    assert cover[np.argmin(np.abs(v[:, 0] - 4)), np.argmin(np.abs(x[0]))] == 1.0
    assert cover[np.argmin(np.abs(v[:, 0] + 3)), :].max() == 0.0  # nothing above its top
    row = np.argmin(np.abs(v[:, 0] - 4))
    assert col[row, np.argmin(np.abs(x[0] - 5))].mean() > col[row, np.argmin(np.abs(x[0] - 18))].mean()
    wall, deep = np.array([100.0, 40.0, 40.0]), np.array([50.0, 15.0, 15.0])
    cav = draw_cavity(x, v, 0.0, wall, deep)
    assert (cav[..., 0] >= 49).all() and (cav[..., 0] > cav[..., 1]).all()  # dark red, never black
