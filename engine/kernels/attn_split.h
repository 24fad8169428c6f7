/* The decoder layer's attention split by keys (flash-decoding), AVX-512F: the AVX-512 builds of fused_layer.h (the
 * AVX2 builds keep attn_row.h). Query row i sees n = past + i + 1 keys, cut into chunks of FA_KC; query head h reads
 * kv head g = h / group. Two shares of work, a barrier between them:
 *   (1) units (i, g, chunk c), every query head of g at once, keys j ∈ c:
 *         s_j = scale · q[i,h] · K[g,j];  m_c = max_j s_j;  e_j = exp(s_j − m_c);  l_c = Σ_j e_j;
 *         o_c[d] = Σ_j e_j · V[g,j,d]
 *   (2) units (i, h): m = max_c m_c;  w_c = exp(m_c − m);  out[i,h,d] = bf16((Σ_c w_c · o_c[d]) · 1 / Σ_c w_c · l_c)
 * = softmax(scale · q Kᵀ) V. Every element's operations are fixed by (q, K, V, n) alone — a key's product is one FMA
 * chain over hd / 32 steps of two (K and q widened exactly to float32 in fa_load32's order) and the 16 lanes reduced
 * in fa_hsum16's order; sums over keys in 16 lanes in key order, then fa_hsum16; o_c and the combine in key and chunk
 * order — so the attention is the same whatever M, the number of threads or the order the units run in
 * (batch-invariant, as the rest of the layer), though not attn_row.h's bits.
 * Why (SmolLM2-135M, 9 query heads on 3 kv heads, hd 64, a 2-core Zen 4, hand harness, all layers' weights in
 * cache, 1,500 cached tokens): attn_row.h took 2.3 ms of a 4.7 ms decoder step — 8-lane rows, one head at a time,
 * its key-order sums a chain of scalar adds, 9 heads shared 5 : 4 between two threads. Here a key's row is read
 * and widened once for its whole group, the work divides evenly by keys, and K and V are read from memory once
 * (34.6 MB a step at that length, an eighth of the weights): ~1.0–1.2 ms, that read's own time at the probe
 * (docs/log/2026-12-06-split-attention-and-q4k.md).
 */
#ifndef SPECLAB_ATTN_SPLIT_H
#define SPECLAB_ATTN_SPLIT_H
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include "attn_row.h"
#include "bf16.h"

#define FA_KC 256   /* keys per share of (1): ~6 shares a kv head at 1,500 keys, enough to balance two threads */
#define FA_GMAX 8   /* query heads of one kv head taken together: 16 value accumulators + V's two vectors fit 32 */
#ifndef FA_PF
#define FA_PF 8      /* keys' rows the score pass prefetches ahead */
#endif
#define FA_MAXKEYS 65536  /* the longest cache it takes (fl_bad refuses longer): the combine's weights on the stack */

/* 32 bf16 → two vectors of 16 float32, exactly: `lo` elements 0–3, 8–11, 16–19, 24–27, `hi` the others
 * (unpacking works within each 128-bit lane); both operands of a product are widened alike. */
static inline void fa_load32(const uint16_t *p, __m512 *lo, __m512 *hi) {
    const __m512i v = _mm512_loadu_si512((const void *)p), z = _mm512_setzero_si512();
    *lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, v));
    *hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, v));
}

/* A fixed-order reduction of 16 lanes. */
static inline float fa_hsum16(__m512 v) {
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
    return _mm_cvtss_f32(b);
}

/* (1) keys j0 … j1−1 of one kv head (row j at kh + j·hd) against G ≤ FA_GMAX of its query heads (q: G rows,
 * stride hd): s[g·ss + j]. hd a multiple of 32, ≤ 512; `steps` = hd / 32, a constant after inlining (fa_scores). */
static inline __attribute__((always_inline)) void fa_scores_k(const int steps, int hd, int G, const uint16_t *q,
        const uint16_t *kh, const uint16_t *vh, int j0, int j1, float scale, float *s, long long ss) {
    float qw[FA_GMAX * 512] __attribute__((aligned(64)));  /* the heads' q, widened in fa_load32's order */
    for (int g = 0; g < G; g++)
        for (int c = 0; c < steps; c++) {
            __m512 l, h;
            fa_load32(q + (size_t)g * hd + 32 * c, &l, &h);
            _mm512_store_ps(qw + (size_t)g * hd + 32 * c, l);
            _mm512_store_ps(qw + (size_t)g * hd + 32 * c + 16, h);
        }
    for (int j = j0; j < j1; j++) {
        const uint16_t *kr = kh + (size_t)j * hd;
        /* the keys FA_PF rows on, and this key's values (the value pass reads them next): a chunk's rows are
         * a few KB, too short a stream for the hardware prefetchers to reach full speed */
        for (int c = 0; c < steps; c++) {
            _mm_prefetch((const char *)(kr + (size_t)FA_PF * hd + 32 * c), _MM_HINT_T0);
            _mm_prefetch((const char *)(vh + (size_t)j * hd + 32 * c), _MM_HINT_T1);
        }
        __m512 kl[16], kh2[16];
        for (int c = 0; c < steps; c++) fa_load32(kr + 32 * c, &kl[c], &kh2[c]);
        for (int g = 0; g < G; g++) {
            const float *qg = qw + (size_t)g * hd;
            __m512 a = _mm512_setzero_ps();
            for (int c = 0; c < steps; c++)
                a = _mm512_fmadd_ps(kh2[c], _mm512_load_ps(qg + 32 * c + 16),
                                    _mm512_fmadd_ps(kl[c], _mm512_load_ps(qg + 32 * c), a));
            s[(size_t)g * ss + j] = fa_hsum16(a) * scale;
        }
    }
}

static void fa_scores(int hd, int G, const uint16_t *q, const uint16_t *kh, const uint16_t *vh, int j0, int j1,
                      float scale, float *s, long long ss) {
    if (hd == 64) fa_scores_k(2, hd, G, q, kh, vh, j0, j1, scale, s, ss);          /* SmolLM2, the Qwen 0.5B */
    else if (hd == 128) fa_scores_k(4, hd, G, q, kh, vh, j0, j1, scale, s, ss);    /* the Qwen 1.5B */
    else fa_scores_k(hd / 32, hd, G, q, kh, vh, j0, j1, scale, s, ss);
}

/* e^x on 16 lanes: attn_row.h's fl_exp8, the same operations lane by lane. */
static inline __m512 fa_exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_set1_ps(88.3762626647949f), _mm512_max_ps(_mm512_set1_ps(-88.3762626647949f), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* e_j = exp(s_j − max) in place for n scores; *m ← the max, returns Σ e_j (16 lanes, key j in lane j mod 16, keys in
 * order, then fa_hsum16). */
static float fa_exp_sum(int n, float *s, float *m) {
    const int full = n / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (n - full)) - 1);
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < full; j += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(s + j));
    mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), tail, s + full));
    *m = _mm512_reduce_max_ps(mv);  /* a max is exact in any order */
    const __m512 mb = _mm512_set1_ps(*m);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < full; j += 16) {
        const __m512 e = fa_exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), mb));
        _mm512_storeu_ps(s + j, e);
        sum = _mm512_add_ps(sum, e);
    }
    if (tail) {
        const __m512 e = fa_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + full), mb));
        _mm512_mask_storeu_ps(s + full, tail, e);
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(tail, e));
    }
    return fa_hsum16(sum);
}

/* o[g·os + d] = Σ_j e[g·ss + j] · V[j, d] for keys j0 … j1−1 (row j at vh + j·hd), dims d0 … d0+31, GN heads (a
 * constant after inlining, so the 2·GN accumulators live in registers); o in fa_load32's lane order. */
static inline __attribute__((always_inline)) void fa_values_k(const int GN, int hd, int j0, int j1, const float *e,
        long long ss, const uint16_t *vh, int d0, float *o, long long os) {
    __m512 al[FA_GMAX], ah[FA_GMAX];
#pragma GCC unroll 8
    for (int g = 0; g < GN; g++) al[g] = ah[g] = _mm512_setzero_ps();
    for (int j = j0; j < j1; j++) {
        __m512 l, h;
        fa_load32(vh + (size_t)j * hd + d0, &l, &h);
#pragma GCC unroll 8
        for (int g = 0; g < GN; g++) {
            const __m512 p = _mm512_set1_ps(e[(size_t)g * ss + j]);
            al[g] = _mm512_fmadd_ps(p, l, al[g]);
            ah[g] = _mm512_fmadd_ps(p, h, ah[g]);
        }
    }
#pragma GCC unroll 8
    for (int g = 0; g < GN; g++) {
        _mm512_storeu_ps(o + (size_t)g * os + d0, al[g]);
        _mm512_storeu_ps(o + (size_t)g * os + d0 + 16, ah[g]);
    }
}

/* fa_values_k for G ≤ FA_GMAX heads, every 32 dims (after the first block the chunk's values come from cache). */
static void fa_values(int hd, int G, int j0, int j1, const float *e, long long ss, const uint16_t *vh, float *o,
                      long long os) {
    for (int d0 = 0; d0 < hd; d0 += 32) {
        switch (G) {
#define FA_CASE(k) case k: fa_values_k(k, hd, j0, j1, e, ss, vh, d0, o, os); break;
            FA_CASE(1) FA_CASE(2) FA_CASE(3) FA_CASE(4) FA_CASE(5) FA_CASE(6) FA_CASE(7) FA_CASE(8)
#undef FA_CASE
        }
    }
}

/* The attention of M query rows inside an OpenMP parallel region (every thread calls it; it ends on a barrier).
 * qkv: M rows N apart, the q heads first (a layer's [q|k|v]); kc, vc: kv head g's rows at kc + g·hs; part: fa_part_floats(…) floats
 * of scratch; a [M, nq·hd] out. */
static inline size_t fa_part_floats(int M, int nq, int hd, int L) {
    return (size_t)M * nq * ((L + FA_KC - 1) / FA_KC) * (hd + 2);
}

static void fa_attention(int M, int nq, int nkv, int hd, int past, const uint16_t *qkv, int N, const uint16_t *kc,
                         const uint16_t *vc, long long hs, float scale, float *part, uint16_t *a) {
    const int group = nq / nkv, chunks = (past + M + FA_KC - 1) / FA_KC;
    /* unit (i, h, c)'s partial: o_c [hd] (fa_load32's lane order), m_c, l_c */
#define FA_PART(i, h, c) (part + (((size_t)(i) * nq + (h)) * chunks + (c)) * (hd + 2))
#pragma omp for schedule(static)
    for (int t = 0; t < M * nkv * chunks; t++) {
        const int i = t / (nkv * chunks), g = t / chunks % nkv, c = t % chunks, j0 = c * FA_KC, n = past + i + 1;
        if (j0 >= n) continue;
        const int j1 = j0 + FA_KC < n ? j0 + FA_KC : n;
        float s[FA_GMAX * FA_KC] __attribute__((aligned(64)));
        for (int g0 = 0; g0 < group; g0 += FA_GMAX) {  /* query heads FA_GMAX at a time */
            const int gn = group - g0 < FA_GMAX ? group - g0 : FA_GMAX, h0 = g * group + g0;
            fa_scores(hd, gn, qkv + (size_t)i * N + (size_t)h0 * hd, kc + (size_t)g * hs, vc + (size_t)g * hs, j0, j1, scale,
                      s - j0, FA_KC);
            float m[FA_GMAX], l[FA_GMAX];
            for (int h = 0; h < gn; h++) l[h] = fa_exp_sum(j1 - j0, s + (size_t)h * FA_KC, &m[h]);
            fa_values(hd, gn, j0, j1, s - j0, FA_KC, vc + (size_t)g * hs, FA_PART(i, h0, c), (long long)chunks * (hd + 2));
            for (int h = 0; h < gn; h++) FA_PART(i, h0 + h, c)[hd] = m[h], FA_PART(i, h0 + h, c)[hd + 1] = l[h];
        }
    }
#pragma omp for schedule(static)
    for (int t = 0; t < M * nq; t++) {
        const int i = t / nq, h = t % nq, nc = (past + i + FA_KC) / FA_KC;  /* chunks of n = past + i + 1 keys */
        float w[(FA_MAXKEYS + FA_KC - 1) / FA_KC], m = -INFINITY, lsum = 0.f;
        for (int c = 0; c < nc; c++) {
            w[c] = FA_PART(i, h, c)[hd];
            if (w[c] > m) m = w[c];
        }
        fl_exp_shifted(nc, w, m);
        for (int c = 0; c < nc; c++) lsum += w[c] * FA_PART(i, h, c)[hd + 1];
        const __m512 inv = _mm512_set1_ps(1.f / lsum);
        for (int d0 = 0; d0 < hd; d0 += 32) {
            __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
            for (int c = 0; c < nc; c++) {
                const __m512 wc = _mm512_set1_ps(w[c]);
                lo = _mm512_fmadd_ps(wc, _mm512_loadu_ps(FA_PART(i, h, c) + d0), lo);
                hi = _mm512_fmadd_ps(wc, _mm512_loadu_ps(FA_PART(i, h, c) + d0 + 16), hi);
            }
            float x[16], y[16];  /* back to element order: lane 4b + e of lo is element 8b + e, of hi 8b + 4 + e */
            _mm512_storeu_ps(x, _mm512_mul_ps(lo, inv));
            _mm512_storeu_ps(y, _mm512_mul_ps(hi, inv));
            uint16_t *out = a + ((size_t)i * nq + h) * hd + d0;
            for (int blk = 0; blk < 4; blk++)
                for (int e = 0; e < 4; e++) {
                    out[8 * blk + e] = f32_to_bf16(x[4 * blk + e]);
                    out[8 * blk + 4 + e] = f32_to_bf16(y[4 * blk + e]);
                }
        }
    }
#undef FA_PART
}
#endif
