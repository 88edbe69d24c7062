"""C++ source of the fused CPU MoE kernel (AVX-512 VNNI / BF16), compiled at first use.

Kept as a string so the package needs no data files: `cpu_kernel.py` hands it to
`torch.utils.cpp_extension.load_inline` only when offloading is used.

Why this shape: at decode the op is memory-bound (each expert weight byte is read once per
step), so the layout is chosen for streaming, not for FLOPs. Weights are repacked in tiles of
16 output rows whose bytes interleave the rows (`[N/16][K/c][16][c]`): one 64-byte load feeds
one VNNI/BF16 dot instruction that advances all 16 rows at once, each lane holding one row, so
no horizontal sums are needed and every block/group scale is a plain vector multiply. The
gate/up tiles of one expert are stored pairwise (gate rows, then the same up rows), so the
clamped SwiGLU runs as soon as a pair is done and only the activation (I floats) meets the
down projection. The down phase gives each thread whole output tiles over all chosen experts,
so it accumulates without atomics; it walks each expert's tiles of a chunk in a row, so every
read is a run of DOWN_CHUNK tiles instead of one (same summation order: experts ascending).
Weight streams are prefetched in software a few KB ahead. Activations are quantised per 32
(int8, the llama.cpp Q8 idea) for the integer forms, rounded to bf16 for the float forms.

Forms (codes shared with cpu_kernel.py):
  0 int8:  w [N/16][K/4][16][4] u8 holding w + 128 (VNNI's unsigned operand), scale [N] f32
  1 int4:  w [N/16][K/8][16][4] u8 (low nibble k+j, high nibble k+4+j), scale/min
           [N/16][K/G][16] bf16 per group of G (w = scale * q + min, q in 0..15)
  2 mxfp8: w [N/16][K/2][16][2] e4m3 bytes, scale [N/16][K/32][16] e8m0 bytes
  3 bf16:  w [N/16][K/2][16][2] bf16
"""

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <atomic>
#include <immintrin.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int TILE = 16;
constexpr int QB = 32;      // activation quantisation block
constexpr int MAXT = 8;     // tokens per expert handled in registers at once
// Software prefetch distance in bytes ahead of the weight stream (measured on the 2-core
// machine under SCHED_FIFO: int4 85% -> 100% of the bandwidth check at batch 1, mxfp8 57% ->
// 92% at batch 8). The hardware streamer alone stops at every 4 KB page.
constexpr int PF_INT = 2048, PF_FLOAT = 1024;
constexpr int DOWN_CHUNK = 8;  // output tiles per work item of the down phase

// Activations of up to MAXT tokens in the shape the dot loops want.
struct Acts {
  const int8_t* q;          // [T][K] int8 (integer forms)
  const float* qs;          // [T][K/32] scale per block
  const float* qsum;        // [T][K/32] scale * sum(q) of the block (for the int4 min term)
  const uint16_t* b;        // [T][K] bf16 (float forms)
  int K;
};

inline __m512 bf16x16_to_f32(const uint16_t* p) {
  __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

// One tile of 16 rows against nt token rows (token i reads activation row rows[i]):
// out[i*16 + r] = sum_k W[r, k] * x[rows[i], k].
// NT is a template argument so the accumulators live in registers (a runtime count would
// leave them on the stack); dispatch() picks the instance.
template <int NT>
void tile_int8(const uint8_t* w, const float* scale, const Acts& a, const int* rows, float* out) {
  constexpr int nt = NT;
  const int8_t* xp[NT];
  for (int i = 0; i < nt; ++i) xp[i] = a.q + (size_t)rows[i] * a.K;
  __m512 facc[MAXT];
  for (int i = 0; i < nt; ++i) facc[i] = _mm512_setzero_ps();
  const int nb = a.K / QB;
  for (int kb = 0; kb < nb; ++kb) {
    __m512i acc[MAXT];
    for (int i = 0; i < nt; ++i) acc[i] = _mm512_setzero_si512();
    for (int s = 0; s < QB / 4; ++s) {
      // stored as w + 128 (vpdpbusd wants u8 x s8); corrected by 128 * sum(x) below
      __m512i wu = _mm512_loadu_si512((const void*)w);
      _mm_prefetch((const char*)w + PF_INT, _MM_HINT_T0);
      w += 64;
      for (int i = 0; i < nt; ++i) {
        int32_t xv;
        std::memcpy(&xv, xp[i] + kb * QB + 4 * s, 4);
        acc[i] = _mm512_dpbusd_epi32(acc[i], wu, _mm512_set1_epi32(xv));
      }
    }
    for (int i = 0; i < nt; ++i) {
      const size_t o = (size_t)rows[i] * nb + kb;
      // qsum holds scale*sum(q); 128*sum(q) in integer form is 128*qsum/scale
      __m512 v = _mm512_cvtepi32_ps(acc[i]);
      v = _mm512_mul_ps(v, _mm512_set1_ps(a.qs[o]));
      facc[i] = _mm512_add_ps(facc[i], _mm512_sub_ps(v, _mm512_set1_ps(128.0f * a.qsum[o])));
    }
  }
  __m512 sc = _mm512_loadu_ps(scale);
  for (int i = 0; i < nt; ++i) _mm512_storeu_ps(out + i * TILE, _mm512_mul_ps(facc[i], sc));
}

template <int NT>
void tile_int4(const uint8_t* w, const uint16_t* scale, const uint16_t* mins, int group,
               const Acts& a, const int* rows, float* out) {
  constexpr int nt = NT;
  const int8_t* xp[NT];
  for (int i = 0; i < nt; ++i) xp[i] = a.q + (size_t)rows[i] * a.K;
  __m512 facc[MAXT], gacc[MAXT];
  float gsum[MAXT];
  for (int i = 0; i < nt; ++i) facc[i] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0F);
  const int nb = a.K / QB, bpg = group / QB;
  for (int g = 0; g < a.K / group; ++g) {
    for (int i = 0; i < nt; ++i) { gacc[i] = _mm512_setzero_ps(); gsum[i] = 0.f; }
    for (int kb = g * bpg; kb < (g + 1) * bpg; ++kb) {
      __m512i acc[MAXT], acch[MAXT];
      for (int i = 0; i < nt; ++i) acc[i] = acch[i] = _mm512_setzero_si512();
      for (int s = 0; s < QB / 8; ++s) {
        __m512i v = _mm512_loadu_si512((const void*)w);
        _mm_prefetch((const char*)w + PF_INT, _MM_HINT_T0);
        w += 64;
        __m512i lo = _mm512_and_si512(v, low);
        __m512i hi = _mm512_andnot_si512(low, v);  // 16 * high nibble: no shift per load
        for (int i = 0; i < nt; ++i) {
          const int8_t* x = xp[i] + kb * QB + 8 * s;
          int32_t x0, x1;
          std::memcpy(&x0, x, 4);
          std::memcpy(&x1, x + 4, 4);
          acc[i] = _mm512_dpbusd_epi32(acc[i], lo, _mm512_set1_epi32(x0));
          acch[i] = _mm512_dpbusd_epi32(acch[i], hi, _mm512_set1_epi32(x1));
        }
      }
      for (int i = 0; i < nt; ++i) {
        const size_t o = (size_t)rows[i] * nb + kb;
        acc[i] = _mm512_add_epi32(acc[i], _mm512_srai_epi32(acch[i], 4));  // exact: x16 multiples
        gacc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i]), _mm512_set1_ps(a.qs[o]), gacc[i]);
        gsum[i] += a.qsum[o];
      }
    }
    // sum_k (s q + m) x = s * sum(q x) + m * sum(x)
    __m512 sc = bf16x16_to_f32(scale + (size_t)g * TILE);
    __m512 mn = bf16x16_to_f32(mins + (size_t)g * TILE);
    for (int i = 0; i < nt; ++i) {
      facc[i] = _mm512_fmadd_ps(gacc[i], sc, facc[i]);
      facc[i] = _mm512_fmadd_ps(mn, _mm512_set1_ps(gsum[i]), facc[i]);
    }
  }
  for (int i = 0; i < nt; ++i) _mm512_storeu_ps(out + i * TILE, facc[i]);
}

// e4m3 byte -> bf16 bits of (value * 2^-120): sign to bit 15, exponent and mantissa shifted
// into bf16's fields (exact for normals; e4m3 subnormals become bf16 subnormals, which the
// BF16 dot instruction reads as zero: below 2^-15 of the block's largest value).
inline __m512i e4m3x32_to_bf16(const uint8_t* p) {
  __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)p));
  __m512i sign = _mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x80)), 8);
  __m512i mag = _mm512_slli_epi16(_mm512_and_si512(b, _mm512_set1_epi16(0x7F)), 4);
  return _mm512_or_si512(sign, mag);
}

template <int NT, bool mx>
void tile_float(const uint8_t* w, const uint8_t* e8, const Acts& a, const int* rows, float* out) {
  constexpr int nt = NT;
  const uint16_t* xp[NT];
  for (int i = 0; i < nt; ++i) xp[i] = a.b + (size_t)rows[i] * a.K;
  __m512 facc[MAXT];
  for (int i = 0; i < nt; ++i) facc[i] = _mm512_setzero_ps();
  const int nb = a.K / QB;
  for (int kb = 0; kb < nb; ++kb) {
    __m512 acc[MAXT];
    for (int i = 0; i < nt; ++i) acc[i] = _mm512_setzero_ps();
    for (int s = 0; s < QB / 2; ++s) {
      __m512i wv;
      if constexpr (mx) { wv = e4m3x32_to_bf16(w); if (s & 1) _mm_prefetch((const char*)w + PF_FLOAT, _MM_HINT_T0); w += 32; }
      else { wv = _mm512_loadu_si512((const void*)w); _mm_prefetch((const char*)w + PF_FLOAT, _MM_HINT_T0); w += 64; }
      for (int i = 0; i < nt; ++i) {
        int32_t xv;
        std::memcpy(&xv, xp[i] + kb * QB + 2 * s, 4);
        acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)wv, (__m512bh)_mm512_set1_epi32(xv));
      }
    }
    if constexpr (mx) {
      // 2^(e - 127) * 2^120 (the shift above), as float bits
      __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(e8 + (size_t)kb * TILE)));
      __m512 sc = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(120)), 23));
      for (int i = 0; i < nt; ++i) facc[i] = _mm512_fmadd_ps(acc[i], sc, facc[i]);
    } else {
      for (int i = 0; i < nt; ++i) facc[i] = _mm512_add_ps(facc[i], acc[i]);
    }
  }
  for (int i = 0; i < nt; ++i) _mm512_storeu_ps(out + i * TILE, facc[i]);
}

// The weights of one projection of one expert, and how to find tile j inside them.
struct Proj {
  int form, group, K;
  const uint8_t* w; const uint8_t* s; const uint8_t* m;
  size_t w_tile, s_tile;    // bytes per tile
  void tile(int j, const Acts& a, const int* rows, int nt, float* out) const {
    const uint8_t* wp = w + (size_t)j * w_tile;
    switch (nt) {
      case 1: run<1>(wp, j, a, rows, out); break;
      case 2: run<2>(wp, j, a, rows, out); break;
      case 3: run<3>(wp, j, a, rows, out); break;
      case 4: run<4>(wp, j, a, rows, out); break;
      case 5: run<5>(wp, j, a, rows, out); break;
      case 6: run<6>(wp, j, a, rows, out); break;
      case 7: run<7>(wp, j, a, rows, out); break;
      default: run<8>(wp, j, a, rows, out); break;
    }
  }
  template <int NT>
  void run(const uint8_t* wp, int j, const Acts& a, const int* rows, float* out) const {
    switch (form) {
      case 0: tile_int8<NT>(wp, (const float*)s + (size_t)j * TILE, a, rows, out); break;
      case 1: tile_int4<NT>(wp, (const uint16_t*)(s + j * s_tile), (const uint16_t*)(m + j * s_tile),
                            group, a, rows, out); break;
      case 2: tile_float<NT, true>(wp, s + j * s_tile, a, rows, out); break;
      default: tile_float<NT, false>(wp, nullptr, a, rows, out); break;
    }
  }
};

size_t weight_tile_bytes(int form, int K) {
  return form == 0 ? (size_t)TILE * K : form == 1 ? (size_t)TILE * K / 2
       : form == 2 ? (size_t)TILE * K : (size_t)TILE * K * 2;
}

size_t scale_tile_bytes(int form, int K, int group) {
  return form == 0 ? TILE * 4 : form == 1 ? (size_t)TILE * (K / group) * 2
       : form == 2 ? (size_t)TILE * (K / QB) : 0;
}

// Quantise rows of x (f32) for the integer forms, or round them to bf16 for the float forms.
void prepare(bool integer, const float* x, int nrows, int K, int8_t* q, float* qs, float* qsum,
             uint16_t* b) {
  at::parallel_for(0, nrows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * K;
      if (!integer) {
        for (int k = 0; k < K; ++k) {  // round to nearest even
          uint32_t u; std::memcpy(&u, xr + k, 4);
          b[r * K + k] = (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
        }
        continue;
      }
      for (int kb = 0; kb < K / QB; ++kb) {
        float amax = 0.f;
        for (int k = 0; k < QB; ++k) amax = std::max(amax, std::fabs(xr[kb * QB + k]));
        const float s = amax / 127.f, inv = amax > 0.f ? 127.f / amax : 0.f;
        int sum = 0;
        for (int k = 0; k < QB; ++k) {
          int v = (int)std::nearbyint(xr[kb * QB + k] * inv);
          q[r * K + kb * QB + k] = (int8_t)v;
          sum += v;
        }
        qs[r * (K / QB) + kb] = s;
        qsum[r * (K / QB) + kb] = s * (float)sum;
      }
    }
  });
}

// Threads take chunks of work from a shared counter instead of a fixed half each: on a shared
// host a descheduled thread's share is picked up by the others instead of leaving them
// waiting at the barrier. Chunks stay contiguous, so each one is a sequential stream.
template <class F>
void dynamic_for(int64_t n, int64_t chunk, const F& f) {
  std::atomic<int64_t> next{0};
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) {
    for (;;) {
      const int64_t b = next.fetch_add(chunk);
      if (b >= n) break;
      f(b, std::min(n, b + chunk));
    }
  });
}

struct Scratch {
  std::vector<int8_t> q; std::vector<float> qs, qsum; std::vector<uint16_t> b;
  Acts make(bool integer, const float* x, int nrows, int K) {
    if (integer) { q.resize((size_t)nrows * K); qs.resize((size_t)nrows * K / QB); qsum.resize(qs.size()); }
    else b.resize((size_t)nrows * K);
    prepare(integer, x, nrows, K, q.data(), qs.data(), qsum.data(), b.data());
    return Acts{q.data(), qs.data(), qsum.data(), b.data(), K};
  }
};

}  // namespace

// x [T, H] f32, ids [T, k] int64, wts [T, k] f32; w13/s13/m13 and w2/s2/m2: [E, ...] uint8
// views of the packed projections (m* only for int4). Returns [T, H] f32.
torch::Tensor moe_forward(int64_t form, int64_t group, torch::Tensor x, torch::Tensor ids,
                          torch::Tensor wts, torch::Tensor w13, torch::Tensor s13,
                          torch::Tensor m13, torch::Tensor w2, torch::Tensor s2,
                          torch::Tensor m2, int64_t inter, double alpha, double limit,
                          double beta) {
  const int T = x.size(0), H = x.size(1), k = ids.size(1), I = (int)inter;
  TORCH_CHECK(T <= MAXT, "at most ", MAXT, " tokens per call");
  const bool integer = form <= 1;
  const int64_t* idp = ids.data_ptr<int64_t>();
  const float* wtp = wts.data_ptr<float>();
  // The distinct experts, and for each the (token, weight) pairs routed to it.
  std::vector<int> experts; std::vector<std::vector<int>> toks; std::vector<std::vector<float>> tw;
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      int e = (int)idp[t * k + j];
      int u = 0;
      while (u < (int)experts.size() && experts[u] != e) ++u;
      if (u == (int)experts.size()) { experts.push_back(e); toks.emplace_back(); tw.emplace_back(); }
      toks[u].push_back(t); tw[u].push_back(wtp[t * k + j]);
    }
  const int U = experts.size();
  auto proj = [&](torch::Tensor w, torch::Tensor s, torch::Tensor m, int e, int K) {
    Proj p{(int)form, (int)group, K, nullptr, nullptr, nullptr, weight_tile_bytes(form, K),
           scale_tile_bytes(form, K, group)};
    p.w = w.data_ptr<uint8_t>() + (size_t)e * w.stride(0);
    if (s.numel()) p.s = s.data_ptr<uint8_t>() + (size_t)e * s.stride(0);
    if (m.numel()) p.m = m.data_ptr<uint8_t>() + (size_t)e * m.stride(0);
    return p;
  };
  Scratch sx, sa;
  Acts ax = sx.make(integer, x.data_ptr<float>(), T, H);
  // Activation rows: one per (expert, routed token), in order.
  std::vector<int> arow0(U + 1, 0);
  for (int u = 0; u < U; ++u) arow0[u + 1] = arow0[u] + (int)toks[u].size();
  std::vector<float> act((size_t)arow0[U] * I);
  const int ntile13 = I / TILE;
  dynamic_for((int64_t)U * ntile13, 4, [&](int64_t b0, int64_t b1) {
    float g[MAXT * TILE], up[MAXT * TILE];
    for (int64_t item = b0; item < b1; ++item) {
      const int u = item / ntile13, j = item % ntile13, nt = toks[u].size();
      Proj p = proj(w13, s13, m13, experts[u], H);
      p.tile(2 * j, ax, toks[u].data(), nt, g);       // gate rows 16j..16j+15
      p.tile(2 * j + 1, ax, toks[u].data(), nt, up);  // up rows, same indices
      for (int i = 0; i < nt; ++i)
        for (int r = 0; r < TILE; ++r) {
          float gv = std::min(g[i * TILE + r], (float)limit);
          float uv = std::min(std::max(up[i * TILE + r], (float)-limit), (float)limit);
          act[(size_t)(arow0[u] + i) * I + j * TILE + r] =
              gv / (1.f + std::exp(-(float)alpha * gv)) * (uv + (float)beta);
        }
    }
  });
  Acts aa = sa.make(integer, act.data(), arow0[U], I);
  auto out = torch::zeros({T, H}, torch::kFloat32);
  float* op = out.data_ptr<float>();
  dynamic_for(H / TILE, DOWN_CHUNK, [&](int64_t j0, int64_t j1) {
    float y[MAXT * TILE];
    int rows[MAXT];
    for (int u = 0; u < U; ++u) {
      const int nt = toks[u].size();
      for (int i = 0; i < nt; ++i) rows[i] = arow0[u] + i;
      const Proj p = proj(w2, s2, m2, experts[u], I);
      for (int64_t j = j0; j < j1; ++j) {
        p.tile(j, aa, rows, nt, y);
        for (int i = 0; i < nt; ++i)
          for (int r = 0; r < TILE; ++r)
            op[(size_t)toks[u][i] * H + j * TILE + r] += tw[u][i] * y[i * TILE + r];
      }
    }
  });
  return out;
}
"""
