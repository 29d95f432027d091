"""FSDP2 for a DiT larger than one device: every block's weights sharded over the ranks.

Each block is its own ``fully_shard`` unit: before it runs its shards are all-gathered,
afterwards the gathered weights are freed again (reshard after forward), and while block i
runs the all-gather of block i+1 is already under way (forward prefetch). The DiT itself is
the root unit, so that prefetching is ordered by one root; its own small layers (patch and
time embeddings, the output layer) stay whole on every rank. Every rank runs the same
forward on the same tokens (with sequence parallelism, on its share of them), so the result
is the one-device result.
"""

from __future__ import annotations

import itertools

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

from engine.modules.dit import A2VDiT


def ranks_mesh(device: str | torch.device) -> DeviceMesh:
    """All ranks of the process group, as one mesh dimension."""
    return init_device_mesh(torch.device(device).type, (dist.get_world_size(),))


def shard_dit(dit: A2VDiT, device: str | torch.device, prefetch: bool = True) -> A2VDiT:
    """Shard ``dit``'s blocks over every rank (in place)."""
    mesh = ranks_mesh(device)
    blocks = list(dit.blocks)
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    own = {p for name, p in dit.named_parameters() if not name.startswith("blocks.")}
    fully_shard(dit, mesh=mesh, reshard_after_forward=True, ignored_params=own)
    register_fsdp_forward_method(dit, "encode_reference")  # the root's other way into the blocks
    if prefetch:
        for block, following in itertools.pairwise(blocks):
            block.set_modules_to_forward_prefetch([following])
    return dit


def local_numel(module: nn.Module) -> int:
    """Elements of ``module``'s parameters held by this rank (a sharded one: its shard only)."""
    return sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in module.parameters())
