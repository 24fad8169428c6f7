/* One query row's causal attention on a bf16 KV cache, AVX2 + FMA, shared by bf16_kernels_avx2.c (speclab_attn)
 * and fused_layer.h (speclab_layer, in every build):
 *   out = softmax(scale · q Kᵀ[:n]) · V[:n],   q, K, V rows of D bf16 (D a multiple of 8, ≤ 512)
 * Each product is widened exactly to float32 and accumulated in D / 8 FMA steps of 8 lanes, the lanes reduced
 * in a fixed order, the softmax in float32 with libm's expf, the output rounded to bf16 once: the same
 * operations whatever the number of rows or threads, so the attention is batch-invariant. */
#ifndef SPECLAB_ATTN_ROW_H
#define SPECLAB_ATTN_ROW_H
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include "bf16.h"

static inline __m256 fl_load8(const uint16_t *p) {  /* 8 bf16 → 8 float32, exactly */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static inline float fl_hsum8(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
    return _mm_cvtss_f32(b);
}

/* kh, vh: this head's keys / values, row j at kh + j·D; s: n floats of scratch. */
static void fl_attn_row(int D, int n, const uint16_t *qr, const uint16_t *kh, const uint16_t *vh, float scale,
                        float *s, uint16_t *orow) {
    const int steps = D / 8;
    float qf[512] __attribute__((aligned(32)));
    for (int c = 0; c < steps; c++) _mm256_store_ps(qf + 8 * c, fl_load8(qr + 8 * c));
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) {
        const uint16_t *kr = kh + (size_t)j * D;
        __m256 acc = _mm256_setzero_ps();
        for (int c = 0; c < steps; c++) acc = _mm256_fmadd_ps(fl_load8(kr + 8 * c), _mm256_load_ps(qf + 8 * c), acc);
        const float v = fl_hsum8(acc) * scale;
        s[j] = v;
        if (v > mx) mx = v;
    }
    float sum = 0.f;
    for (int j = 0; j < n; j++) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    const float inv = 1.f / sum;
    __m256 o[64]; /* D / 8 float32 lanes */
    for (int c = 0; c < steps; c++) o[c] = _mm256_setzero_ps();
    for (int j = 0; j < n; j++) {
        const __m256 p = _mm256_set1_ps(s[j] * inv);
        const uint16_t *vr = vh + (size_t)j * D;
        for (int c = 0; c < steps; c++) o[c] = _mm256_fmadd_ps(p, fl_load8(vr + 8 * c), o[c]);
    }
    for (int c = 0; c < steps; c++) {
        float buf[8];
        _mm256_storeu_ps(buf, o[c]);
        for (int e = 0; e < 8; e++) orow[8 * c + e] = f32_to_bf16(buf[e]);
    }
}
#endif
