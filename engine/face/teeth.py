"""Teeth, a tongue and a mouth cavity drawn as pictures in mouth coordinates.

Everything is laid out in millimetres of an average adult mouth (``MOUTH_MM`` corner to
corner) and drawn once per face, supersampled, into RGBA textures: the upper arch (teeth and
gum, rigid with the skull), the lower arch with the tongue behind it (rigid with the jaw) and
the cavity. ``engine.face.mouth`` moves those textures with the head and the jaw every frame,
so the same teeth are in every frame.

Each arch is a row of crowns on a circular arc seen from the front: a crown's width on screen
shrinks as the arc turns away (so the canines and premolars crowd towards the corners) and
it darkens with depth. A crown has rounded incisal corners (a point on the canines), a
scalloped gum line with papillae between the teeth, a translucent incisal edge, a cervical
tint and a rounded, lit front; thin gaps between crowns show what lies behind them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MOUTH_MM = 50.0  # a mouth's width in millimetres: mouth units are this many millimetres


@dataclass(frozen=True)
class Crown:
    """One tooth's crown as seen from the front (millimetres)."""

    width: float  # along the arch
    height: float  # incisal edge to gum line
    shorter: float  # its edge lies this far short of the arch's incisal line
    point: float  # 0: a flat edge .. 1: a canine's cusp
    rounding: float  # incisal corner radius, as a fraction of the half-width


# From the midline outwards: central and lateral incisors, canine, two premolars (the molars lie in
# the corners' shadow, where the cavity shows instead).
UPPER_CROWNS = (Crown(8.6, 10.5, 0.0, 0.0, 0.2), Crown(6.6, 9.0, 0.7, 0.0, 0.4), Crown(7.6, 10.0, 0.3, 1.0, 0.3),
                Crown(7.0, 8.5, 0.9, 0.5, 0.35), Crown(6.5, 8.0, 1.2, 0.5, 0.35))
LOWER_CROWNS = (Crown(5.4, 9.0, 0.0, 0.0, 0.12), Crown(5.9, 9.0, 0.2, 0.0, 0.2), Crown(6.9, 10.0, 0.1, 0.8, 0.3),
                Crown(7.0, 8.0, 0.8, 0.5, 0.35), Crown(7.0, 8.0, 1.0, 0.5, 0.35))
UPPER_RADIUS, LOWER_RADIUS = 27.0, 24.0  # the arches' radius of curvature, millimetres
GAP = 0.32  # millimetres between neighbouring crowns
PAPILLA = 2.6  # how far the gum reaches down between two crowns, millimetres
DEPTH_FALLOFF = 15.0  # millimetres of depth that darken a crown by 1/e
# No two real teeth are alike: each crown's edge and brightness differ a little from its
# neighbours' (fixed per crown, so the same teeth every frame).
EDGE_JITTER = 0.35  # millimetres
SHADE_JITTER = 0.05
AMBIENT = 0.25  # how much of the mouth's own light the deepest crowns take on


@dataclass(frozen=True)
class Arch:
    """One arch: its crowns from the midline out, its radius, and which way the crowns grow
    from the incisal line on screen (-1: up, the upper arch; +1: down, the lower)."""

    crowns: tuple[Crown, ...]
    radius: float
    grows: int


UPPER = Arch(UPPER_CROWNS, UPPER_RADIUS, -1)
LOWER = Arch(LOWER_CROWNS, LOWER_RADIUS, +1)


def _smoothstep(x: np.ndarray) -> np.ndarray:
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3 - 2 * x)


def _layout(arch: Arch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each crown's screen span from the midline (x0, x1, millimetres) and its depth."""
    s = np.concatenate([[0.0], np.cumsum([c.width for c in arch.crowns])])
    theta = s / arch.radius
    x = arch.radius * np.sin(np.minimum(theta, np.pi / 2))
    mid = (theta[:-1] + theta[1:]) / 2
    return x[:-1], x[1:], arch.radius * (1 - np.cos(mid))


def draw_arch(x: np.ndarray, v: np.ndarray, edge: np.ndarray, arch: Arch, enamel: np.ndarray, gum: np.ndarray,
              pixel: float, ambient: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """An arch drawn at points (x, v) in millimetres (x across, from the midline; v down the
    face), with its incisal line at ``edge`` (millimetres, per point) and one sample
    ``pixel`` millimetres wide; the crowns deeper in the mouth take on its ``ambient`` light (the
    cavity's red) as they darken, as teeth in a mouth's shade do, rather than going grey.
    -> (colour (..., 3) float32, coverage (...)) with the gum
    filling everything beyond the gum line."""
    ax = np.abs(x)
    x0, x1, depth = _layout(arch)
    k = np.clip(np.searchsorted(x1, ax), 0, len(arch.crowns) - 1)
    width = np.array([c.width for c in arch.crowns])[k]
    half = np.maximum((x1 - x0)[k] / 2, 1e-3)
    q = (ax - (x0[k] + half)) / half  # -1 .. 1 across the crown on screen
    aq = np.abs(q)
    g = arch.grows
    shorter = np.array([c.shorter for c in arch.crowns])[k]
    point = np.array([c.point for c in arch.crowns])[k]
    rounding = np.array([c.rounding for c in arch.crowns])[k]
    height = np.array([c.height for c in arch.crowns])[k]
    r = np.maximum(rounding * half, 1e-3)
    corner = np.clip((aq - (1 - rounding)) / np.maximum(rounding, 1e-3), 0, 1)
    n = len(arch.crowns)
    rng = np.random.default_rng(7 + arch.grows)
    crown = np.where(x < 0, k, k + n)  # each side's crowns differ too
    edge_jitter, shade_jitter = rng.uniform(-1, 1, (2, 2 * n))
    lift = (shorter + point * 1.6 * aq + r * (1 - np.sqrt(1 - corner**2))
            + EDGE_JITTER * (edge_jitter[crown] * 0.5 + 0.5))
    e = edge + g * lift  # this crown's incisal edge
    gum_line = edge + g * (height - PAPILLA * q**2)
    along = g * (v - e)  # millimetres from the edge into the crown
    to_gum = g * (gum_line - v)
    foreshortened = half / np.maximum(width / 2, 1e-3)  # < 1 where the arch turns away
    side_gap = GAP / 2 * foreshortened
    cover = (np.clip(((1 - aq) * half - side_gap) / pixel + 0.5, 0, 1) * np.clip(along / pixel + 0.5, 0, 1)
             * np.clip(to_gum / pixel + 0.5, 0, 1) * (ax < x1[-1]))
    front = 0.8 + 0.2 * np.sqrt(np.clip(np.cos(q * np.pi / 2), 0, 1))
    shade = front * np.exp(-depth[k] / DEPTH_FALLOFF) * (1 + SHADE_JITTER * shade_jitter[crown])
    incisal = _smoothstep(along / 1.3)
    cervical = _smoothstep(to_gum / 2.2)
    col = enamel[None, :] * shade[..., None]
    if ambient is not None:
        col = col + AMBIENT * ambient[None, :] * (1 - np.exp(-depth[k] / DEPTH_FALLOFF))[..., None]
    edge_tint = np.array([0.86, 0.87, 0.88], np.float32)  # the thin edge lets the dark behind through
    col = col * (edge_tint + (1 - edge_tint) * incisal[..., None])
    neck_tint = np.array([0.94, 0.88, 0.76], np.float32)
    col = col * (neck_tint + (1 - neck_tint) * cervical[..., None])
    sheen = 0.07 * np.exp(-(((q + 0.35) / 0.22) ** 2)) * (k < 2) * incisal * cervical
    col = col * (1 + sheen[..., None])
    beyond = g * (v - gum_line)  # millimetres past the gum line
    gum_here = np.clip(beyond / pixel + 0.5, 0, 1) * (ax < x1[-1] + 2.0)
    gum_col = gum[None, :] * (np.exp(-np.clip(beyond, 0, None) / 9.0) * 0.35 + 0.6)[..., None]
    gum_col = gum_col * np.exp(-depth[k] / DEPTH_FALLOFF)[..., None]
    colour = col * cover[..., None] + gum_col * (gum_here * (1 - cover))[..., None]
    alpha = cover + gum_here * (1 - cover)
    return colour.astype(np.float32), alpha.astype(np.float32)


def draw_tongue(x: np.ndarray, v: np.ndarray, tip: np.ndarray, tongue: np.ndarray,
                pixel: float) -> tuple[np.ndarray, np.ndarray]:
    """The tongue's back seen over the lower teeth: a dome whose top lies ``tip`` (millimetres,
    per point) at the midline, falling away to the sides, lit near the teeth, shadowed where it
    recedes, with its median groove. -> (colour, coverage)."""
    top = tip + 8.0 * (x / 19.0) ** 2
    below = v - top
    cover = np.clip(below / pixel + 0.5, 0, 1) * (np.abs(x) < 21.0)
    shade = (0.5 + 0.5 * np.exp(-((x / 12.0) ** 2))) * (0.55 + 0.45 * _smoothstep(below / 5.0))
    groove = 1 - 0.3 * np.exp(-((x / 0.9) ** 2)) * np.exp(-np.clip(below, 0, None) / 6.0)
    col = tongue[None, :] * (shade * groove)[..., None]
    wet = 0.14 * np.exp(-((x / 5.0) ** 2) - ((below - 3.0) / 1.6) ** 2)
    col = col + (255.0 - col) * wet[..., None] * 0.5
    return col.astype(np.float32), cover.astype(np.float32)


def draw_cavity(x: np.ndarray, v: np.ndarray, centre: float, wall: np.ndarray, deep: np.ndarray) -> np.ndarray:
    """The inside of the mouth behind the teeth: darkest at the throat (``centre`` millimetres
    down the midline), the colour of the cheeks' inner walls towards the corners."""
    r = np.sqrt((x / 30.0) ** 2 + ((v - centre) / 16.0) ** 2)
    t = (_smoothstep(r) ** 2)[..., None]
    return (deep[None, :] * (1 - t) + wall[None, :] * t).astype(np.float32)
