"""BlazeFace short-range face detection (mediapipe's ``face_detection_short_range.tflite``).

The image is letterboxed to a square (zero padding), resized to 128x128 and scaled to
[-1, 1]; the model regresses 896 SSD anchors (box centre/size and 6 keypoints each) and a
score logit. Decoding, the anchors and the weighted non-maximum suppression follow
mediapipe's ``face_detection_short_range`` graph (SsdAnchorsCalculator,
TensorsToDetectionsCalculator, NonMaxSuppressionCalculator WEIGHTED with IoU 0.3).

Faces too small for the model's 128-pixel view of a whole photo are looked for in its
tiles (``detect_in_tiles``).

Keypoints, in this order: the subject's right eye, left eye, nose tip, mouth centre,
right ear tragion, left ear tragion (the subject's right eye is on the image's left).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np

from engine.face.models import DETECTOR_FILE, ensure_face_models

INPUT_SIZE = 128
MIN_SCORE = 0.5
NMS_IOU = 0.3
KEYPOINT_NAMES = ("right_eye", "left_eye", "nose_tip", "mouth", "right_ear", "left_ear")


@dataclass(frozen=True)
class FaceBox:
    """One detected face in image pixels: box (x0, y0, x1, y1), (6, 2) keypoints, score in [0, 1]."""

    box: tuple[float, float, float, float]
    keypoints: np.ndarray
    score: float

    @property
    def width(self) -> float:
        return self.box[2] - self.box[0]

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]

    @property
    def center(self) -> tuple[float, float]:
        return (self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2


def ssd_anchors() -> np.ndarray:
    """(896, 2) anchor centres in [0, 1] for the short-range model (anchor size fixed at 1).

    SsdAnchorsCalculator options: 4 layers, strides 8, 16, 16, 16, aspect ratio 1 plus an
    interpolated scale (2 anchors per layer), layers with the same stride share a grid.
    """
    strides = [8, 16, 16, 16]
    anchors = []
    layer = 0
    while layer < len(strides):
        same = [i for i in range(layer, len(strides)) if strides[i] == strides[layer]]
        per_cell = 2 * len(same)
        side = int(np.ceil(INPUT_SIZE / strides[layer]))
        ys, xs = np.meshgrid((np.arange(side) + 0.5) / side, (np.arange(side) + 0.5) / side, indexing="ij")
        grid = np.stack([xs.ravel(), ys.ravel()], axis=1)
        anchors.append(np.repeat(grid, per_cell, axis=0))
        layer = same[-1] + 1
    return np.concatenate(anchors).astype(np.float32)


def letterbox(image: np.ndarray, size: int) -> tuple[np.ndarray, float, float, float]:
    """Pad ``image`` to a centred square (zeros), resize to ``size``: (square, scale, pad_x, pad_y).

    An input pixel (x, y) lands at ((x + pad_x) * scale, (y + pad_y) * scale).
    """
    h, w = image.shape[:2]
    side = max(h, w)
    pad_x, pad_y = (side - w) / 2, (side - h) / 2
    scale = size / side
    m = np.array([[scale, 0, pad_x * scale], [0, scale, pad_y * scale]], dtype=np.float64)
    out = cv2.warpAffine(image, m, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    return out, scale, pad_x, pad_y


def box_iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection over union of one (4,) box against (N, 4) boxes, each (x0, y0, x1, y1)."""
    box, boxes = np.asarray(box, np.float64), np.asarray(boxes, np.float64).reshape(-1, 4)
    x0, y0 = np.maximum(box[0], boxes[:, 0]), np.maximum(box[1], boxes[:, 1])
    x1, y1 = np.minimum(box[2], boxes[:, 2]), np.minimum(box[3], boxes[:, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    union = (box[2] - box[0]) * (box[3] - box[1]) + (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1]) - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def weighted_nms(boxes: np.ndarray, scores: np.ndarray, keypoints: np.ndarray, iou: float = NMS_IOU):
    """Mediapipe's WEIGHTED suppression: each kept detection is the score-weighted mean of its cluster."""
    order = np.argsort(-scores, kind="stable")
    out = []
    while order.size:
        best = order[0]
        overlap = box_iou(boxes[best], boxes[order])
        members = order[overlap > iou]
        w = scores[members][:, None]
        box = (boxes[members] * w).sum(0) / w.sum()
        kps = (keypoints[members] * w[:, :, None]).sum(0) / w.sum()
        out.append((box, kps, float(scores[best])))
        order = order[overlap <= iou]
    return out


class FaceDetector:
    """The BlazeFace short-range model; ``detect(image)`` -> faces, best first. Thread-safe."""

    def __init__(self, model_dir: Path | None = None, min_score: float = MIN_SCORE):
        from ai_edge_litert.interpreter import Interpreter

        path = ensure_face_models(model_dir) / DETECTOR_FILE
        self._interp = Interpreter(model_path=str(path), num_threads=1)
        self._interp.allocate_tensors()
        self._input = self._interp.get_input_details()[0]["index"]
        outs = {d["name"]: d["index"] for d in self._interp.get_output_details()}
        self._regressors = outs["regressors"]
        self._scores = outs["classificators"]
        self._anchors = ssd_anchors()
        self._lock = threading.Lock()
        self.min_score = min_score

    def raw(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float, float]:
        """Model outputs for an RGB uint8 image: (896, 16) regressors, (896,) logits, letterbox params."""
        square, scale, pad_x, pad_y = letterbox(image, INPUT_SIZE)
        x = (square.astype(np.float32) / 127.5 - 1.0)[None]
        with self._lock:
            self._interp.set_tensor(self._input, x)
            self._interp.invoke()
            reg = self._interp.get_tensor(self._regressors)[0].copy()
            logits = self._interp.get_tensor(self._scores)[0, :, 0].copy()
        return reg, logits, scale, pad_x, pad_y

    def detect(self, image: np.ndarray) -> list[FaceBox]:
        """Faces in an (H, W, 3) RGB uint8 image, in image pixels, highest score first."""
        if image.ndim != 3 or image.shape[2] != 3:
            raise ValueError(f"expected an (H, W, 3) image, got shape {image.shape}")
        reg, logits, scale, pad_x, pad_y = self.raw(image)
        scores = 1.0 / (1.0 + np.exp(-np.clip(logits.astype(np.float64), -100.0, 100.0)))
        keep = scores >= self.min_score
        if not keep.any():
            return []
        reg, scores, anchors = reg[keep], scores[keep], self._anchors[keep]
        # Offsets are in 128-pixel input units, relative to the anchor centre (anchor size 1).
        cx = reg[:, 0] / INPUT_SIZE + anchors[:, 0]
        cy = reg[:, 1] / INPUT_SIZE + anchors[:, 1]
        w = reg[:, 2] / INPUT_SIZE
        h = reg[:, 3] / INPUT_SIZE
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
        kps = reg[:, 4:16].reshape(-1, 6, 2) / INPUT_SIZE + anchors[:, None, :]
        faces = []
        for box, kp, score in weighted_nms(boxes, scores, kps):
            # Letterbox removal: normalised square coords -> input pixels.
            side = INPUT_SIZE / scale
            bx = box.reshape(2, 2) * side - np.array([pad_x, pad_y])
            kp_px = (kp * side - np.array([pad_x, pad_y])).astype(np.float32)
            faces.append(FaceBox(tuple(float(v) for v in bx.ravel()), kp_px, score))
        return faces


def _tile_starts(length: int, side: int) -> list[int]:
    if length <= side:
        return [0]
    starts = list(range(0, length - side, max(side // 2, 1)))
    return starts + [length - side]


def detect_in_tiles(detector: FaceDetector, image: np.ndarray, zoom: int) -> list[FaceBox]:
    """Faces found in square tiles of ``1/zoom`` the image's longer side (overlapping by half),
    each seen by the detector at ``zoom`` times the whole image's scale; in image pixels, one
    box per face, highest score first: where tiles overlap the best-scored box is kept whole
    (``weighted_nms`` would average it with the part of the face a tile's edge cut off)."""
    h, w = image.shape[:2]
    side = max(-(-max(h, w) // zoom), 1)
    found: list[FaceBox] = []
    for y in _tile_starts(h, side):
        for x in _tile_starts(w, side):
            offset = np.array([x, y], np.float32)
            for f in detector.detect(image[y:y + side, x:x + side]):
                b = f.box
                found.append(FaceBox((b[0] + x, b[1] + y, b[2] + x, b[3] + y), f.keypoints + offset, f.score))
    kept: list[FaceBox] = []
    for f in sorted(found, key=lambda f: -f.score):
        if not kept or box_iou(f.box, [k.box for k in kept]).max() <= NMS_IOU:
            kept.append(f)
    return kept


@lru_cache(maxsize=1)
def default_detector() -> FaceDetector:
    """One shared detector on the default model folder."""
    return FaceDetector()


# Zooms a photo is searched at, in order (``engine.face.checks.find_face``): the short-range model
# sees a whole photo at 128 px, so a face under about a tenth of a large photo's side is found
# only in its tiles.
ZOOMS = (1, 2, 4, 8)


def detect_faces(image: np.ndarray, zoom: int = 1) -> list[FaceBox]:
    """Faces in an RGB uint8 image on the shared detector: the whole image (``zoom`` 1) or
    its tiles of ``1/zoom`` its longer side."""
    detector = default_detector()
    return detector.detect(image) if zoom == 1 else detect_in_tiles(detector, image, zoom)
