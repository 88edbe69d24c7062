"""Expert forms on the host: quantisation, and the tile layout the CPU kernel streams.

Every form stores one projection [N, K] as tiles of 16 output rows whose bytes interleave the
rows (`[N/16, K/c, 16, c]`, c = 4 bytes' worth of k), so one 64-byte load feeds a VNNI/BF16 dot
for 16 rows at once (see cpu_kernel_src.py). The gate and up projections are stored as one
matrix whose tiles alternate (16 gate rows, the same 16 up rows, ...), so the activation can
run as soon as a pair of tiles is done.

- int8:  symmetric per output row, fp32 scale (4 bytes per 6144 weights: free), stored as
         unsigned q + 128.
- int4:  asymmetric per group of 128 along k (w = scale * q + min, q in 0..15), bf16 scale and
         min: 4.25 bits a weight, 220 GB for M3's routed experts. Chosen by measurement
         (docs/offload.md): at the same bytes it beats symmetric groups of 64 on Gaussian and
         heavy-tailed weights, and groups of 64 (4.5 bits, Q4_K's size) remain selectable.
- mxfp8: the released checkpoint's e4m3 values and e8m0 scales per 1x32, only re-tiled.
- bf16:  plain bf16.

`unpack()` is the exact inverse of the tiling and `dequantize()` gives the fp32 weights the
torch reference multiplies by; both work on any device (the GPU's streamed prefill uses them).
"""

from __future__ import annotations

import torch

from ..native.loaders.fp8 import dequantize_mxfp8, mxfp8_exponents, quantize_mxfp8

TILE = 16
MX_BLOCK = 32
INT4_GROUP = 128
CHUNK = {"int8": 4, "int4": 8, "mxfp8": 2, "bf16": 2}  # k per lane of a 32-bit word


def check_shape(n: int, k: int, form: str, group: int = INT4_GROUP) -> None:
    if n % TILE or k % MX_BLOCK:
        raise ValueError(f"{form} experts need rows % {TILE} == 0 and k % 32 == 0, got {n}x{k}")
    if form == "int4" and (group % MX_BLOCK or k % group):
        raise ValueError(f"int4 group {group} must be a multiple of 32 dividing k={k}")


def interleave_gate_up(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """[I, K] + [I, K] -> [2I, K] with 16-row tiles alternating gate, up."""
    i, k = gate.shape
    t = torch.stack([gate.reshape(i // TILE, TILE, k), up.reshape(i // TILE, TILE, k)], 1)
    return t.reshape(2 * i, k)


def split_gate_up(w: torch.Tensor) -> torch.Tensor:
    """Inverse of interleave_gate_up, as `[all gate rows | all up rows]` ([2I, K])."""
    n, k = w.shape
    t = w.reshape(n // (2 * TILE), 2, TILE, k)
    return torch.cat([t[:, 0].reshape(-1, k), t[:, 1].reshape(-1, k)], 0)


def tile(w: torch.Tensor, c: int) -> torch.Tensor:
    """[N, K] -> [N/16, K/c, 16, c] (contiguous)."""
    n, k = w.shape
    return w.reshape(n // TILE, TILE, k // c, c).permute(0, 2, 1, 3).contiguous()


def untile(t: torch.Tensor) -> torch.Tensor:
    nt, kc, _, c = t.shape
    return t.permute(0, 2, 1, 3).reshape(nt * TILE, kc * c)


def tile_rows(s: torch.Tensor) -> torch.Tensor:
    """Per-(row, group) values [N, G] -> [N/16, G, 16] so a tile's 16 rows load as a vector."""
    n, g = s.shape
    return s.reshape(n // TILE, TILE, g).permute(0, 2, 1).contiguous()


def untile_rows(t: torch.Tensor) -> torch.Tensor:
    nt, g, _ = t.shape
    return t.permute(0, 2, 1).reshape(nt * TILE, g)


# --- quantisers on one [N, K] matrix --------------------------------------------------------


def quantize_rows_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: w [N, K] -> (int8 [N, K], fp32 scale [N])."""
    w = w.float()
    scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


# Rows converted at a time from MXFP8: 256 x 6144 fp32 is 6 MiB, a working set the caches
# hold, where the whole matrix in fp32 (75 MB, ~12 passes) streamed through memory and page
# faults: 3x slower on 2 cores.
_MX_ROWS = 256


def mxfp8_rows_to_int8(
    values: torch.Tensor, e8m0: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A stored MXFP8 matrix (e4m3 [N, K], e8m0 [N, K/32]) -> (uint8 [N, K] holding q + 128,
    fp32 scale [N]): quantize_rows_int8 of its dequantised weights then offset_int8, bit for
    bit, a block of rows at a time and in place."""
    n, k = values.shape
    check_shape(n, k, "int8")
    e = mxfp8_exponents(values, e8m0)
    q = torch.empty(n, k, dtype=torch.uint8)
    scale = torch.empty(n, dtype=torch.float32)
    for r0 in range(0, n, _MX_ROWS):
        r1 = min(n, r0 + _MX_ROWS)
        w = values[r0:r1].float().view(r1 - r0, k // MX_BLOCK, MX_BLOCK)
        w.mul_(torch.exp2(e[r0:r1].float() - 127.0)[..., None])  # exact: powers of two
        w = w.view(r1 - r0, k)
        s = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
        # the same fp32 division and round-half-even as quantize_rows_int8, then + 128
        w.div_(s[:, None]).round_().clamp_(-127, 127).add_(128)
        q[r0:r1] = w  # 1..255: exact in uint8
        scale[r0:r1] = s
    return q, scale


def offset_int8(q: torch.Tensor) -> torch.Tensor:
    """int8 -> uint8 q + 128: VNNI multiplies unsigned by signed bytes, and storing the weights
    unsigned saves the kernel one instruction per 64 bytes (the +128 is corrected per block)."""
    return (q.to(torch.int16) + 128).to(torch.uint8)


def quantize_groups_int4(
    w: torch.Tensor, group: int = INT4_GROUP
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric int4 per group of k: w [N, K] -> (q uint8 0..15, scale bf16, min bf16),
    scale and min [N, K/group]. q is rounded against the bf16-rounded scale and min, so the
    dequantised weight is exactly what the kernel multiplies by."""
    n, k = w.shape
    g = w.float().reshape(n, k // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / 15.0).clamp(min=1e-12).to(torch.bfloat16)
    mn = lo.to(torch.bfloat16)
    q = torch.round((g - mn.float()[..., None]) / scale.float()[..., None]).clamp(0, 15)
    return q.to(torch.uint8).reshape(n, k), scale, mn


def pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """q [N, K] in 0..15 -> [N/16, K/8, 16, 4] bytes: low nibble k = 8b + j, high 8b + 4 + j."""
    n, k = q.shape
    t = q.reshape(n // TILE, TILE, k // 8, 2, 4)
    packed = t[:, :, :, 0] | (t[:, :, :, 1] << 4)  # [N/16, 16, K/8, 4]
    return packed.permute(0, 2, 1, 3).contiguous()


def unpack_nibbles(p: torch.Tensor) -> torch.Tensor:
    nt, kb, _, _ = p.shape
    t = p.permute(0, 2, 1, 3)  # [N/16, 16, K/8, 4]
    q = torch.stack([t & 0x0F, t >> 4], 3)  # [N/16, 16, K/8, 2, 4]
    return q.reshape(nt * TILE, kb * 8)


# --- one projection in a form ---------------------------------------------------------------


def pack(w: torch.Tensor, form: str, group: int = INT4_GROUP) -> dict[str, torch.Tensor]:
    """A float [N, K] projection -> its tensors in `form`: w, and s / m where the form has them."""
    n, k = w.shape
    check_shape(n, k, form, group)
    if form == "int8":
        q, s = quantize_rows_int8(w)
        return {"w": tile(offset_int8(q), 4), "s": s}
    if form == "int4":
        q, s, m = quantize_groups_int4(w, group)
        return {"w": pack_nibbles(q), "s": tile_rows(s), "m": tile_rows(m)}
    if form == "mxfp8":
        return pack_mxfp8(*quantize_mxfp8(w.float()))
    if form == "bf16":
        return {"w": tile(w.to(torch.bfloat16), 2)}
    raise ValueError(f"unknown expert form {form!r}")


def pack_mxfp8(values: torch.Tensor, e8m0: torch.Tensor) -> dict[str, torch.Tensor]:
    """The checkpoint's own MXFP8 tensors (e4m3 [N, K], e8m0 bytes [N, K/32]), re-tiled only."""
    n, k = values.shape
    check_shape(n, k, "mxfp8")
    e = e8m0.view(torch.uint8)
    if int(e.max()) > 134:  # 2^7 and above: no weight is that large; the kernel's bias needs it
        raise ValueError("MXFP8 scale exponent above 2^7")
    return {"w": tile(values.view(torch.uint8), 2), "s": tile_rows(e.contiguous())}


def dequantize(t: dict[str, torch.Tensor], form: str) -> torch.Tensor:
    """The fp32 [N, K] weights a packed projection stands for (the reference's weights)."""
    if form == "int8":
        return (untile(t["w"]).float() - 128.0) * t["s"].float()[:, None]
    if form == "int4":
        q = unpack_nibbles(t["w"]).float()
        n, k = q.shape
        s, m = untile_rows(t["s"]).float(), untile_rows(t["m"]).float()
        g = s.shape[1]
        return (q.reshape(n, g, k // g) * s[..., None] + m[..., None]).reshape(n, k)
    if form == "mxfp8":
        vals = untile(t["w"]).view(torch.float8_e4m3fn)
        return dequantize_mxfp8(vals, untile_rows(t["s"]))
    if form == "bf16":
        return untile(t["w"]).float()
    raise ValueError(f"unknown expert form {form!r}")


def bytes_per_weight(form: str, group: int = INT4_GROUP) -> float:
    """Average stored bytes per weight, scales included (K large; int8's row scale omitted)."""
    return {"int8": 1.0, "int4": 0.5 + 4 / group, "mxfp8": 1 + 1 / MX_BLOCK, "bf16": 2.0}[form]
