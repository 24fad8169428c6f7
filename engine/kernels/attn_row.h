/* One query row's causal attention on a bf16 KV cache, AVX2 + FMA, shared by bf16_kernels_avx2.c (speclab_attn)
 * and fused_layer.h (speclab_layer, in every build):
 *   out = softmax(scale · q Kᵀ[:n]) · V[:n],   q, K, V rows of D bf16 (D a multiple of 16, ≤ 512)
 * Each product is widened exactly to float32 (fl_load16's lane order) and accumulated in D / 16 steps of two FMAs
 * on 8 lanes, the lanes reduced in a fixed order; the softmax in float32 with fl_exp8; the output rounded to bf16
 * once: the same operations whatever the number of rows or threads, so the attention is batch-invariant.
 * Why this shape (a 2-core Zen 1, D = 64, n = 1000 cached rows, one thread): four keys' dot products side by side
 * (each its own chain, so the same bits as one at a time), the two-unpack widening and fl_exp8 in place of
 * vpmovzxwd + vpslld and libm's expf take a row from 23.4 to 13.2 µs (D = 128: 44 → 24 µs). On SmolLM2-135M
 * (30 layers × 9 heads) at 1,000 cached tokens that was ~3 ms of a step's attention. */
#ifndef SPECLAB_ATTN_ROW_H
#define SPECLAB_ATTN_ROW_H
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include "bf16.h"

static inline __m256 fl_load8(const uint16_t *p) {  /* 8 bf16 → 8 float32, exactly */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

/* Eight floats rounded to bf16 as f32_to_bf16 rounds them (nearest even; a NaN stays a NaN), as eight 32-bit lanes
 * holding the bf16 in their low half. */
static inline __m256i bf16_round8(__m256 f) {
    const __m256i u = _mm256_castps_si256(f);
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                                                         _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
}

/* Eight floats to bf16 (bf16_round8), stored at o. */
static inline void bf16_store8(uint16_t *o, __m256 f) {
    const __m256i v = bf16_round8(f);
    _mm_storeu_si128((__m128i *)o, _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

/* bf16_to_f32(f32_to_bf16(f)) on eight lanes: the value a float takes once rounded to bf16. */
static inline __m256 bf16_rt8(__m256 f) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_round8(f), 16));
}

/* 16 bf16 → two vectors of 8 float32, exactly, by interleaving zeros below each bf16: `lo` holds elements
 * 0–3 and 8–11, `hi` 4–7 and 12–15 (unpacking works within each 128-bit half); whatever it is multiplied with
 * is widened the same way, so each product pairs the right elements. Why: on a Zen 1, vpmovzxwd + vpslld (fl_load8)
 * are four 128-bit uops per 8 elements, two unpacks per 16 here: the one-row bf16 GEMV went from compute-bound
 * at ~13 GB/s a core in cache to ~22 (K = 1536, one thread, 2.0 GHz). */
static inline void fl_load16(const uint16_t *p, __m256 *lo, __m256 *hi) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)p), z = _mm256_setzero_si256();
    *lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v));
    *hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v));
}

/* e^x on 8 lanes: x = n·ln2 + r (|r| ≤ ln2 / 2, ln2 in two parts so r is exact to float32), e^r by a degree-6
 * polynomial (Cephes' expf coefficients), 2ⁿ put into the exponent. Relative error ≤ 1.2e-7 against libm's expf
 * over [−87, 88] (measured, step 0.0137); x is clamped to ±88.376 (above it the result is 2.4e38, not inf;
 * below about −87.7, and for −inf, it is 0 where libm gives a denormal); NaN stays NaN (min/max return their second
 * operand on NaN). */
static inline __m256 fl_exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), _mm256_max_ps(_mm256_set1_ps(-88.3762626647949f), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline float fl_hsum8(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
    return _mm_cvtss_f32(b);
}

/* s[0 … n) ← fl_exp8(s − mx), eight at a time (the tail padded: every lane's own operations, whatever n is). */
static inline void fl_exp_shifted(int n, float *s, float mx) {
    const __m256 mv = _mm256_set1_ps(mx);
    int j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, fl_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv)));
    if (j < n) {
        float t[8] = {0};
        for (int e = 0; j + e < n; e++) t[e] = s[j + e];
        _mm256_storeu_ps(t, fl_exp8(_mm256_sub_ps(_mm256_loadu_ps(t), mv)));
        for (int e = 0; j + e < n; e++) s[j + e] = t[e];
    }
}

/* kh, vh: this head's keys / values, row j at kh + j·D; s: n floats of scratch. */
static void fl_attn_row(int D, int n, const uint16_t *qr, const uint16_t *kh, const uint16_t *vh, float scale,
                        float *s, uint16_t *orow) {
    const int steps = D / 16;
    __m256 ql[32], qh[32];
    for (int c = 0; c < steps; c++) fl_load16(qr + 16 * c, &ql[c], &qh[c]);
    float mx = -INFINITY;
    int j = 0;
    for (; j + 4 <= n; j += 4) {  /* four keys side by side: four independent chains, each key's own order */
        const uint16_t *kr = kh + (size_t)j * D;
        __m256 a[4];
        for (int t = 0; t < 4; t++) a[t] = _mm256_setzero_ps();
        for (int c = 0; c < steps; c++) {
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                __m256 l, h;
                fl_load16(kr + (size_t)t * D + 16 * c, &l, &h);
                a[t] = _mm256_fmadd_ps(h, qh[c], _mm256_fmadd_ps(l, ql[c], a[t]));
            }
        }
        for (int t = 0; t < 4; t++) {
            s[j + t] = fl_hsum8(a[t]) * scale;
            if (s[j + t] > mx) mx = s[j + t];
        }
    }
    for (; j < n; j++) {
        const uint16_t *kr = kh + (size_t)j * D;
        __m256 acc = _mm256_setzero_ps();
        for (int c = 0; c < steps; c++) {
            __m256 l, h;
            fl_load16(kr + 16 * c, &l, &h);
            acc = _mm256_fmadd_ps(h, qh[c], _mm256_fmadd_ps(l, ql[c], acc));
        }
        s[j] = fl_hsum8(acc) * scale;
        if (s[j] > mx) mx = s[j];
    }
    fl_exp_shifted(n, s, mx);
    float sum = 0.f;
    for (j = 0; j < n; j++) sum += s[j];
    const float inv = 1.f / sum;
    __m256 ol[32], oh[32]; /* D / 16 pairs of float32 lanes, in fl_load16's order */
    for (int c = 0; c < steps; c++) ol[c] = oh[c] = _mm256_setzero_ps();
    for (j = 0; j < n; j++) {
        const __m256 p = _mm256_set1_ps(s[j] * inv);
        const uint16_t *vr = vh + (size_t)j * D;
        for (int c = 0; c < steps; c++) {
            __m256 l, h;
            fl_load16(vr + 16 * c, &l, &h);
            ol[c] = _mm256_fmadd_ps(p, l, ol[c]);
            oh[c] = _mm256_fmadd_ps(p, h, oh[c]);
        }
    }
    for (int c = 0; c < steps; c++) {  /* back to element order: lo = 0–3, 8–11; hi = 4–7, 12–15 */
        float a[8], b[8];
        _mm256_storeu_ps(a, ol[c]);
        _mm256_storeu_ps(b, oh[c]);
        uint16_t *o = orow + 16 * c;
        for (int e = 0; e < 4; e++) {
            o[e] = f32_to_bf16(a[e]);
            o[8 + e] = f32_to_bf16(a[4 + e]);
            o[4 + e] = f32_to_bf16(b[e]);
            o[12 + e] = f32_to_bf16(b[4 + e]);
        }
    }
}
#endif
