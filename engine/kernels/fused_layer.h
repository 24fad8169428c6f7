/* A Llama / Qwen2 decoder layer in two calls around the attention, for short forwards (a decode step, a
 * verify), included by the bf16 kernel builds (bf16_kernels.c, bf16_kernels_avx2.c) and the quantized one
 * (qgemm.c), each of which supplies
 *   par_gemv(M, N, K, x, scratch, w, b, y)   y[M,N] = x[M,K]·Ŵ[N,K]ᵀ (+ b) inside an OpenMP parallel region,
 *                                             every row computed as that build's own product computes it (and
 *                                             the bias added as its Python side adds it), then a barrier;
 *                                             w is the build's weight handle (a bf16 [N,K] array; for qgemm a
 *                                             struct qweight of up to three packed row segments)
 * Per layer, x [M, D] the layer's input, in paper-free notation (transformers' LlamaDecoderLayer):
 *   speclab_layer_in:   xn = rms(x)·w₁;  [q|k|v] = xn·W_qkvᵀ + b;  q, k ← rope(q, k; cos, sin)   (rotate-half form)
 *   (the caller appends k, v to its cache and runs speclab_attn: a = attn(q, K, V))
 *   speclab_layer_out:  h = x + a·W_oᵀ;  y = rms(h)·w₂;  [g|u] = y·W_guᵀ;  out = h + (silu(g)⊙u)·W_downᵀ
 *   rms(x) = bf16(x / sqrt(mean(x²) + ε)),  every product and sum rounded to bf16 where transformers rounds it.
 *
 * Why: on a small model the ~25 torch ops and 5 kernel calls of a layer, each waking the second thread, cost
 * more than its weight reads (SmolLM2-135M on a 2-core Zen 1: 43 ms a token against a 10.7 ms roofline,
 * docs/log/2026-12-06-fused-layer-and-peers-on-avx2.md). Here a layer is two parallel regions and three calls.
 *
 * Bits: batch-invariant — every row (norm, products, rope, activation) is computed alone in a fixed order,
 * so a k-row verify gives the same bits as k one-row steps (lossless greedy speculation on the dense path).
 * Not bit-identical to the transformers layer: the norm's mean is summed in row order here, in torch's
 * vectorised order there (float32 sums differ in the last bits, sometimes one bf16 step after rounding).
 * Rope, residual adds and silu·u round as torch does; silu's exp is libm's expf.
 */
#ifndef SPECLAB_FUSED_LAYER_H
#define SPECLAB_FUSED_LAYER_H
#include <math.h>
#include <stdlib.h>
#include "bf16.h"

/* One row: out = bf16(w · bf16(x · 1/sqrt(mean(x²) + eps))), transformers' LlamaRMSNorm / Qwen2RMSNorm. */
static void fl_rms_row(int D, const uint16_t *x, const uint16_t *w, float eps, uint16_t *out) {
    float ss = 0.f;
    for (int i = 0; i < D; i++) {
        const float v = bf16_to_f32(x[i]);
        ss += v * v;
    }
    const float inv = 1.f / sqrtf(ss / (float)D + eps);
    for (int i = 0; i < D; i++)
        out[i] = f32_to_bf16(bf16_to_f32(w[i]) * bf16_to_f32(f32_to_bf16(bf16_to_f32(x[i]) * inv)));
}

/* Rotate-half rope on one head row in place: x·cos + cat(−x₂, x₁)·sin, each product and the sum rounded. */
static void fl_rope_row(int hd, uint16_t *x, const uint16_t *cs, const uint16_t *sn) {
    float tmp[512];
    const int half = hd / 2;
    for (int i = 0; i < hd; i++) {
        const float r = i < half ? -bf16_to_f32(x[i + half]) : bf16_to_f32(x[i - half]);
        const float a = bf16_to_f32(f32_to_bf16(bf16_to_f32(x[i]) * bf16_to_f32(cs[i])));
        const float b = bf16_to_f32(f32_to_bf16(r * bf16_to_f32(sn[i])));
        tmp[i] = a + b;
    }
    for (int i = 0; i < hd; i++) x[i] = f32_to_bf16(tmp[i]);
}

static inline uint16_t fl_add(uint16_t a, uint16_t b) { return f32_to_bf16(bf16_to_f32(a) + bf16_to_f32(b)); }

/* 0 on success; 1 for a shape it does not take; 2 out of memory. qkv: [M, N] out, N = (nq + 2·nkv)·hd;
 * cos, sin: [M, hd]. */
int speclab_layer_in(int M, int D, const uint16_t *x, const uint16_t *nw, float eps, int N, const void *w,
                     const uint16_t *b, int nq, int nkv, int hd, const uint16_t *cs, const uint16_t *sn,
                     uint16_t *qkv, int threads) {
    if (M < 1 || D % 32 || hd % 2 || hd > 512 || N != (nq + 2 * nkv) * hd) return 1;
    uint16_t *xn = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)M * D);
    float *scratch = (float *)malloc(sizeof(float) * (size_t)M * D);
    if (!xn || !scratch) {
        free(xn);
        free(scratch);
        return 2;
    }
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (int m = 0; m < M; m++) fl_rms_row(D, x + (size_t)m * D, nw, eps, xn + (size_t)m * D);
        par_gemv(M, N, D, xn, scratch, w, b, qkv);
#pragma omp for schedule(static)
        for (int t = 0; t < M * (nq + nkv); t++) {
            const int m = t / (nq + nkv), h = t % (nq + nkv);
            fl_rope_row(hd, qkv + (size_t)m * N + (size_t)h * hd, cs + (size_t)m * hd, sn + (size_t)m * hd);
        }
    }
    free(xn);
    free(scratch);
    return 0;
}

/* out [M, D] = the layer's output; a [M, Da] the attention's output (heads concatenated). The MLP's I is
 * the intermediate size: wgu [2I, D] (gate rows, then up rows), wdown [D, I]. Biases may be NULL. */
int speclab_layer_out(int M, int D, const uint16_t *x, const uint16_t *a, int Da, const void *wo,
                      const uint16_t *bo, const uint16_t *nw, float eps, int I, const void *wgu,
                      const uint16_t *bgu, const void *wdown, const uint16_t *bdown, uint16_t *out, int threads) {
    if (M < 1 || D % 32 || Da % 32 || I % 32) return 1;
    const int widest = Da > D ? (Da > I ? Da : I) : (D > I ? D : I); /* the widest product input: its scratch */
    const size_t big = (size_t)M * widest;
    uint16_t *h = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)M * D * 2);
    uint16_t *gu = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)M * I * 2);
    uint16_t *act = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)M * I);
    float *scratch = (float *)malloc(sizeof(float) * big);
    if (!h || !gu || !act || !scratch) {
        free(h), free(gu), free(act), free(scratch);
        return 2;
    }
    uint16_t *y = h + (size_t)M * D; /* the second norm's output */
#pragma omp parallel num_threads(threads)
    {
        par_gemv(M, D, Da, a, scratch, wo, bo, h); /* h ← a·W_oᵀ, then the residual below */
#pragma omp for schedule(static)
        for (int m = 0; m < M; m++) {
            uint16_t *hr = h + (size_t)m * D;
            for (int i = 0; i < D; i++) hr[i] = fl_add(x[(size_t)m * D + i], hr[i]);
            fl_rms_row(D, hr, nw, eps, y + (size_t)m * D);
        }
        par_gemv(M, 2 * I, D, y, scratch, wgu, bgu, gu);
#pragma omp for schedule(static)
        for (int t = 0; t < M * I; t++) {
            const int m = t / I, i = t % I;
            const float g = bf16_to_f32(gu[(size_t)m * 2 * I + i]);
            const float s = bf16_to_f32(f32_to_bf16(g / (1.f + expf(-g))));
            act[t] = f32_to_bf16(s * bf16_to_f32(gu[(size_t)m * 2 * I + I + i]));
        }
        par_gemv(M, D, I, act, scratch, wdown, bdown, out);
#pragma omp for schedule(static)
        for (int t = 0; t < M * D; t++) out[t] = fl_add(h[t], out[t]);
    }
    free(h), free(gu), free(act), free(scratch);
    return 0;
}
#endif
