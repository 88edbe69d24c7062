"""Host expert memory: its size, and page-locking it where it lies (cudaHostRegister) so
the GPU can copy from it asynchronously; undone before the memory is freed."""

from __future__ import annotations

import logging

import torch

from .cpu_experts import HostExpertLayer
from .device_experts import tensor_fields

log = logging.getLogger(__name__)


def host_bytes(layers: dict[int, HostExpertLayer]) -> int:
    return sum(
        v.numel() * v.element_size() for L in layers.values() for v in tensor_fields(L).values()
    )


def pin_in_place(layers: dict[int, HostExpertLayer]) -> list[torch.Tensor]:
    """Page-locks the layers' tensors where they are (asynchronous DMA to the GPU); returns
    what was registered, for `unpin`. A tensor torch already pinned is left alone."""
    try:
        rt = torch.cuda.cudart()
        rt.cudaHostRegister  # noqa: B018 (a build without the binding: stay pageable)
    except (AttributeError, RuntimeError) as e:
        log.warning("host experts stay pageable (no cudaHostRegister: %s): slower prefill", e)
        return []
    done: list[torch.Tensor] = []
    for L in layers.values():
        for t in tensor_fields(L).values():
            if t.is_pinned() or t.numel() == 0:
                continue
            err = rt.cudaHostRegister(t.data_ptr(), t.numel() * t.element_size(), 0)
            if int(err) != 0:
                # e.g. RLIMIT_MEMLOCK: slower prefill streaming, never a failed start
                log.warning(
                    "host experts stay pageable (cudaHostRegister of %d bytes: CUDA error %d): "
                    "slower prefill",
                    t.numel() * t.element_size(),
                    int(err),
                )
                unpin(done)
                return []
            done.append(t)
    return done


def unpin(tensors: list[torch.Tensor]) -> None:
    rt = torch.cuda.cudart()
    for t in tensors:
        rt.cudaHostUnregister(t.data_ptr())
    tensors.clear()
