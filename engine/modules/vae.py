"""Causal video VAE: the reference encoder and the streaming decoder.

Time layout: latent 0 covers video frame 0; latent g >= 1 covers frames
``T*g - T + 1 .. T*g`` (T = temporal compression). The decoder is causal in latent
time, so decoding chunk by chunk with its feature cache equals decoding the whole
sequence at once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import EngineConfig
from engine.modules.base import Module


class ChannelNorm(nn.Module):
    """RMS norm over channels at each pixel.

    Keeps activations well scaled so small models train fast, and, unlike a norm over
    space, gives the same result on a crop as on the whole frame, so the autoencoder can
    train on crops and run on full frames.
    """

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-6) * self.weight[:, None, None]


def norm(ch: int) -> ChannelNorm:
    return ChannelNorm(ch)


class ResBlock(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = norm(ch), nn.Conv2d(ch, ch, 3, padding=1)
        self.norm2, self.conv2 = norm(ch), nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.silu(self.norm2(self.conv1(F.silu(self.norm1(x))))))


class CausalTimeMix(nn.Module):
    """Mixes each latent frame with the one before it (kernel 2 in time, causal)."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.mix = nn.Conv2d(2 * ch, ch, 1)

    def forward(self, x: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, F, C, h, w), prev (B, C, h, w) -> mixed x, the new ``prev``."""
        b, f, c, h, w = x.shape
        shifted = torch.cat([prev[:, None], x[:, :-1]], dim=1)
        pair = torch.cat([x, shifted], dim=2).reshape(b * f, 2 * c, h, w)
        return x + self.mix(pair).reshape(b, f, c, h, w), x[:, -1]


@dataclass(frozen=True)
class DecoderReference:
    """The reference image's share of the decoder's two mixing convolutions, computed once
    per session: appearance detail (hair, background, skin) the latents need not carry, at
    the latent resolution (``low``) and at the decoder's last resolution (``high``).

    A convolution over ``cat([x, ref])`` is the convolution of ``x`` by the first half of
    its weights plus that of ``ref`` by the second half, so the reference half is done here
    and each frame pays only for its own.
    """

    low: torch.Tensor
    high: torch.Tensor
    image: torch.Tensor  # (B, 3, H, W) in [-1, 1]: the pixels the decoder warps

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.low, self.high, self.image))


@dataclass(frozen=True)
class DecoderCache:
    """What the streaming decoder carries between chunks: one frame of features per
    causal layer, whether the stream's first latent has been decoded, and the session's
    (static) reference features."""

    prev: tuple[torch.Tensor, ...]
    started: bool
    reference: DecoderReference

    def nbytes(self) -> int:
        """Bytes carried from chunk to chunk (the reference is counted where it is owned)."""
        return sum(t.numel() * t.element_size() for t in self.prev)

    @staticmethod
    def stack(caches: Sequence[DecoderCache]) -> DecoderCache:
        """Sessions' caches (one row each, all started or none) as one batch along B."""
        first = caches[0]
        if len(caches) == 1:
            return first
        if any(c.started != first.started for c in caches):
            raise ValueError("a started and a fresh decoder cache cannot share a batch")
        prev = tuple(torch.cat(rows) for rows in zip(*(c.prev for c in caches), strict=True))
        ref = DecoderReference(*(torch.cat([getattr(c.reference, f) for c in caches])
                                 for f in ("low", "high", "image")))
        return DecoderCache(prev, first.started, ref)

    def split(self, references: Sequence[DecoderReference]) -> list[DecoderCache]:
        """One cache per row, each with its session's own ``references`` entry instead of a
        slice of the batch's stacked copy, and its own copy of the carried features."""
        if len(references) != self.prev[0].shape[0]:
            raise ValueError(f"{len(references)} references for a cache of {self.prev[0].shape[0]} rows")
        if len(references) == 1:
            return [DecoderCache(self.prev, self.started, references[0])]
        rows = zip(*(p.split(1) for p in self.prev), strict=True)
        return [DecoderCache(tuple(t.clone() for t in row), self.started, ref)
                for row, ref in zip(rows, references, strict=True)]


WARP_MASK_START = -3.0  # a fresh warp head's mask logit: the frame starts as the decoder's own drawing


def latent_count(num_frames: int, temporal_down: int) -> int:
    """Latents needed to cover ``num_frames`` video frames."""
    if num_frames <= 0:
        return 0
    return 1 + math.ceil((num_frames - 1) / temporal_down)


def latent_frames(g: int, temporal_down: int) -> tuple[int, int]:
    """Video frame range [start, end) covered by latent ``g``."""
    if g == 0:
        return 0, 1
    return temporal_down * g - temporal_down + 1, temporal_down * g + 1


def add_latent_stats(module: nn.Module, channels: int) -> None:
    """Per-channel latent shift/scale, set after training so latents are ~N(0, 1) for the DiT."""
    module.register_buffer("latent_shift", torch.zeros(channels))
    module.register_buffer("latent_scale", torch.ones(channels))


class VAEEncoder(Module):
    """Video/image -> latents. Used as the reference encoder and to make training targets.

    It sees each frame next to its difference from the avatar's reference image. What
    changes against the reference (mouth, eyes, pose) is what the latents must carry, since
    the decoder has the reference itself; without the difference the encoder learns to
    find a mouth by its darkness against the skin, and loses it on dark skin.
    """

    kind = "vae_encoder"
    INPUTS = 6  # the frame's RGB, then frame minus reference

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        v = config.vae
        if 2 ** len(v.enc_channels) != v.spatial_down:
            raise ValueError("enc_channels needs one entry per 2x downsampling")
        layers: list[nn.Module] = []
        ch = self.INPUTS
        for out in v.enc_channels:
            layers += [nn.Conv2d(ch, out, 3, stride=2, padding=1), norm(out), nn.SiLU(),
                       nn.Conv2d(out, out, 3, padding=1), norm(out), nn.SiLU()]
            ch = out
        self.frames = nn.Sequential(*layers)
        self.to_latent = nn.Conv2d(ch * v.temporal_down, 2 * v.latent_channels, 1)
        add_latent_stats(self, v.latent_channels)
        self._register_load_state_dict_pre_hook(_frame_only_checkpoint)

    def forward(self, video: torch.Tensor, reference: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """video (B, T, 3, H, W) in [-1, 1], T = 1 + k*temporal_down, and the avatar's
        reference (B, 3, H, W) -> mean, logvar (B, L, c, h, w)."""
        b, t, _, hh, ww = video.shape
        td = self.config.vae.temporal_down
        if (t - 1) % td:
            raise ValueError(f"video length must be 1 + k*{td}, got {t}")
        if reference.shape != (b, 3, hh, ww):
            raise ValueError(f"reference must be {(b, 3, hh, ww)}, got {tuple(reference.shape)}")
        video = video.to(self.dtype)
        x = torch.cat([video, video - reference.to(self.dtype)[:, None]], dim=2)
        feats = self.frames(x.reshape(b * t, self.INPUTS, hh, ww))
        feats = feats.reshape(b, t, *feats.shape[1:])
        first = feats[:, :1].expand(b, td, *feats.shape[2:])
        grouped = torch.cat([first, feats[:, 1:]], dim=1)
        n = grouped.shape[1] // td
        grouped = grouped.reshape(b * n, td * feats.shape[2], *feats.shape[3:])
        mean, logvar = self.to_latent(grouped).chunk(2, dim=1)
        mean = (mean - self.latent_shift[:, None, None]) / self.latent_scale[:, None, None]
        logvar = logvar - 2 * self.latent_scale.log()[:, None, None]
        return mean.reshape(b, n, *mean.shape[1:]), logvar.reshape(b, n, *logvar.shape[1:])

    def encode_image(self, image: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) in [-1, 1], the reference itself -> the first-latent encoding (B, c, h, w)."""
        mean, _ = self(image[:, None], image)
        return mean[:, 0]


def _frame_only_checkpoint(state: dict[str, torch.Tensor], prefix: str, *_: object) -> None:
    """An encoder checkpoint from before the reference difference loads with that input off:
    zero weights on the difference channels give exactly the old encoder, and training can
    continue from there."""
    key = prefix + "frames.0.weight"
    w = state.get(key)
    if w is not None and w.shape[1] == 3:
        state[key] = torch.cat([w, torch.zeros_like(w)], dim=1)


class VAEDecoder(Module):
    """Streaming causal decoder: ``frames, cache = decoder.step(latents, cache)``.

    It also sees the session's reference image (through ``init_cache``), so identity
    detail comes from the reference in every frame and cannot drift. And it warps that
    image: at its last resolution it predicts a flow and a mask, and each output pixel is
    the reference's own pixel moved by the flow where the mask says so, a generated one
    elsewhere (the opened mouth, closed eyes). What moves rigidly with the head (hair, eyes,
    skin, background) keeps the reference's sharpness instead of passing through a latent
    of 16x16 for 4 frames.
    """

    kind = "vae_decoder"

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        v = config.vae
        ch = v.dec_channels
        self.ps = v.spatial_down // 2 ** (len(ch) - 1)
        if self.ps < 1 or self.ps * 2 ** (len(ch) - 1) != v.spatial_down:
            raise ValueError("dec_channels does not fit spatial_down")
        self.conv_in = nn.Conv2d(v.latent_channels, ch[0], 3, padding=1)
        self.time1 = CausalTimeMix(ch[0])
        self.res = ResBlock(ch[0])
        self.time2 = CausalTimeMix(ch[0])
        self.to_time = nn.Conv2d(ch[0], v.temporal_down * ch[0], 1)
        self.ups = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in zip(ch[:-1], ch[1:], strict=True))
        self.up_norms = nn.ModuleList(norm(b) for b in ch[1:])
        self.out = nn.Conv2d(ch[-1], 3 * self.ps * self.ps, 3, padding=1)
        ref: list[nn.Module] = [nn.Conv2d(3, ch[-1], 3, padding=1), nn.SiLU()]
        for _ in range(self.ps.bit_length() - 1):
            ref += [nn.Conv2d(ch[-1], ch[-1], 3, stride=2, padding=1), norm(ch[-1]), nn.SiLU()]
        self.ref_high = nn.Sequential(*ref, nn.Conv2d(ch[-1], ch[-1], 3, padding=1))
        self.ref_low = nn.Conv2d(ch[-1], ch[0], 1)
        self.mix_low = nn.Conv2d(2 * ch[0], ch[0], 1)
        self.mix_high = nn.Conv2d(2 * ch[-1], ch[-1], 3, padding=1)
        self.warp = nn.Sequential(nn.Conv2d(ch[-1], ch[-1], 3, padding=1), nn.SiLU(),
                                  nn.Conv2d(ch[-1], 3, 3, padding=1))  # flow x, y (pixels), mask logit
        nn.init.zeros_(self.warp[2].weight)
        with torch.no_grad():
            self.warp[2].bias.copy_(torch.tensor([0.0, 0.0, WARP_MASK_START]))
        # 1: frames mix in the warped reference; 0: the decoder draws every pixel (checkpoints
        # from before the warp load with 0 and decode as they did). Saved as a buffer, read as
        # ``warps``, so a decode on a GPU never waits to read it back.
        self.register_buffer("warp_on", torch.ones(()))
        self.warps = True
        add_latent_stats(self, v.latent_channels)
        self._register_load_state_dict_pre_hook(self._checkpoint_without_warp)
        self.register_load_state_dict_post_hook(lambda module, _: module.set_warp(bool(module.warp_on)))

    def set_warp(self, on: bool) -> None:
        """Mix the warped reference into the frames (``on``), or draw every pixel."""
        self.warp_on.fill_(float(on))
        self.warps = on

    def _checkpoint_without_warp(self, state: dict[str, torch.Tensor], prefix: str, *_: object) -> None:
        if prefix + "warp_on" in state:
            return
        state[prefix + "warp_on"] = torch.zeros(())
        for key, value in self.warp.state_dict().items():
            state.setdefault(f"{prefix}warp.{key}", value.detach().clone())

    def reference(self, image: torch.Tensor) -> DecoderReference:
        """(B, 3, H, W) in [-1, 1] -> the reference features ``step`` mixes into every frame."""
        if 1 << (self.ps.bit_length() - 1) != self.ps:
            raise ValueError("the decoder's last up-sampling factor must be a power of two")
        high = self.ref_high(image.to(self.device, self.dtype))
        low = self.ref_low(F.avg_pool2d(high, self.config.vae.spatial_down // self.ps))
        return DecoderReference(low=_reference_half(self.mix_low, low), high=_reference_half(self.mix_high, high),
                                image=image.to(self.device, self.dtype))

    def init_cache(self, reference: DecoderReference) -> DecoderCache:
        b, _, h, w = reference.low.shape
        zeros = torch.zeros(b, self.config.vae.dec_channels[0], h, w, device=self.device, dtype=self.dtype)
        return DecoderCache(prev=(zeros, zeros.clone()), started=False, reference=reference)

    def step(self, z: torch.Tensor, cache: DecoderCache) -> tuple[torch.Tensor, DecoderCache]:
        """z (B, F, c, h, w) -> frames (B, n, 3, H, W) in [-1, 1] and the new cache."""
        b, f, c, h, w = z.shape
        z = z.to(self.dtype) * self.latent_scale[:, None, None] + self.latent_shift[:, None, None]
        x = self.conv_in(z.reshape(b * f, c, h, w))
        ref = cache.reference
        x = x + (_frame_half(self.mix_low, x).reshape(b, f, -1, h, w) + ref.low[:, None]).reshape(x.shape)
        x = x.reshape(b, f, -1, h, w)
        x, p1 = self.time1(x, cache.prev[0])
        x = self.res(x.reshape(b * f, -1, h, w)).reshape(b, f, -1, h, w)
        x, p2 = self.time2(x, cache.prev[1])
        td = self.config.vae.temporal_down
        x = self.to_time(F.silu(x.reshape(b * f, -1, h, w)))
        x = x.reshape(b, f, td, -1, h, w).reshape(b, f * td, -1, h, w)
        if not cache.started:
            x = x[:, td - 1:]
        # On a CPU the full-resolution layers are bound by memory traffic: a batch of sessions
        # goes through them one session at a time, so the activations stay cache-sized.
        rows = 1 if x.device.type == "cpu" else b
        frames = [self._full_resolution(part, high, image) for part, high, image
                  in zip(x.split(rows), ref.high.split(rows), ref.image.split(rows), strict=True)]
        return torch.cat(frames), DecoderCache(prev=(p1, p2), started=True, reference=ref)

    def _full_resolution(self, x: torch.Tensor, high: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        """Per-frame up-sampling (b, n, C, h, w) -> (b, n, 3, H, W), with the reference's
        ``high`` features (b, ...) mixed in at the last resolution and its ``image`` warped in."""
        b, n, _, h, w = x.shape
        y = x.reshape(b * n, -1, h, w).contiguous(memory_format=torch.channels_last)  # faster CPU up-sampling
        y = F.silu(y)
        for conv, gn in zip(self.ups, self.up_norms, strict=True):
            y = F.silu(gn(conv(F.interpolate(y, scale_factor=2, mode="nearest"))))
        mixed = _frame_half(self.mix_high, y).reshape(b, n, *y.shape[1:]) + high[:, None]
        y = y + F.silu(mixed.reshape(y.shape))
        drawn = F.pixel_shuffle(self.out(y).contiguous(), self.ps)
        if self.warps:
            drawn = self._warped_in(drawn, self.warp(y), image, n)
        drawn = drawn.clamp(-1, 1)
        return drawn.reshape(b, n, *drawn.shape[1:])

    def _warped_in(self, drawn: torch.Tensor, head: torch.Tensor, image: torch.Tensor, n: int) -> torch.Tensor:
        """drawn (b*n, 3, H, W), the warp head's flow (pixels) and mask logit at the last
        resolution (b*n, 3, H/ps, W/ps), the reference image (b, 3, H, W) -> the mixed frames."""
        size = drawn.shape[-2:]
        head = F.interpolate(head.float(), size=size, mode="bilinear", align_corners=False)
        flow, mask = head[:, :2], torch.sigmoid(head[:, 2:])
        scale = torch.tensor([2.0 / size[1], 2.0 / size[0]], device=flow.device)
        grid = _identity_grid(*size, flow.device) + flow.permute(0, 2, 3, 1) * scale
        source = image.float().repeat_interleave(n, dim=0)
        warped = F.grid_sample(source, grid, mode="bilinear", padding_mode="border", align_corners=False)
        return torch.lerp(drawn.float(), warped, mask).to(drawn.dtype)


@functools.lru_cache(maxsize=8)
def _identity_grid(height: int, width: int, device: torch.device) -> torch.Tensor:
    """(1, H, W, 2) sampling grid of ``grid_sample`` (x, y in [-1, 1], pixel centres) that moves
    nothing; made once per size, as an ordinary tensor so that training may use it too."""
    with torch.inference_mode(False):
        ys = (torch.arange(height, device=device, dtype=torch.float32) + 0.5) * (2.0 / height) - 1
        xs = (torch.arange(width, device=device, dtype=torch.float32) + 0.5) * (2.0 / width) - 1
        return torch.stack(torch.meshgrid(xs, ys, indexing="xy"), dim=-1)[None]


def _frame_half(mix: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """``mix`` over ``cat([x, ref])``, the ``x`` half (no bias: that is in the reference half)."""
    return F.conv2d(x, mix.weight[:, : x.shape[1]], None, mix.stride, mix.padding)


def _reference_half(mix: nn.Conv2d, ref: torch.Tensor) -> torch.Tensor:
    """``mix`` over ``cat([x, ref])``, the ``ref`` half and the bias: the same for every frame."""
    return F.conv2d(ref, mix.weight[:, mix.in_channels - ref.shape[1]:], mix.bias, mix.stride, mix.padding)
