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
 *   speclab_layer:      all of it in one call and one parallel region, the cache append (k, v rows written
 *                       into the caller's buffer) and the attention included (attn_row.h; on the AVX-512
 *                       builds attn_split.h, split by keys and reading each kv head's rows once for its group)
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
 * Rope, residual adds and silu·u round as torch does; silu's exp is attn_row.h's fl_exp8 (≤ 1.2e-7 from expf,
 * eight at a time, where libm's expf took one call per element).
 */
#ifndef SPECLAB_FUSED_LAYER_H
#define SPECLAB_FUSED_LAYER_H
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include "attn_row.h"
#ifdef __AVX512F__
#include "attn_split.h"
#endif
#include "bf16.h"

/* par_gemv's scratch, in floats, for an [M, K] input: 10·M·K bytes and a margin (the quantized build keeps its int8
 * activations, their scales, its Q5_0 / Q8_0 lanes, Q4_K's and Q5R's orders of the activations, Q6_K's offsets and
 * the AMX build's two tile layouts of the activations there, ≤ 9.5·M·K + 190·M + 254 bytes). */
#define FL_SCRATCH_FLOATS(M, K) ((size_t)(M) * (K) * 5 / 2 + 64 * (size_t)(M) + 64)

/* One row: out = bf16(w · bf16(x · 1/sqrt(mean(x²) + eps))), transformers' LlamaRMSNorm / Qwen2RMSNorm. The sum of
 * squares runs in row order (one chain: the bits fixed whatever the build); the scaling eight at a time, each lane
 * the scalar expression's operations (D % 8 == 0). */
static void fl_rms_row(int D, const uint16_t *x, const uint16_t *w, float eps, uint16_t *out) {
    float ss = 0.f;
    for (int i = 0; i < D; i++) {
        const float v = bf16_to_f32(x[i]);
        ss += v * v;
    }
    const float inv = 1.f / sqrtf(ss / (float)D + eps);
    const __m256 iv = _mm256_set1_ps(inv);
    for (int i = 0; i < D; i += 8)
        bf16_store8(out + i, _mm256_mul_ps(fl_load8(w + i), bf16_rt8(_mm256_mul_ps(fl_load8(x + i), iv))));
}

/* Rotate-half rope on one head row in place: x·cos + cat(−x₂, x₁)·sin, each product and the sum rounded; eight
 * lanes at a time (hd % 16 == 0, so each half is whole steps), every lane the scalar expression's operations. */
static void fl_rope_row(int hd, uint16_t *x, const uint16_t *cs, const uint16_t *sn) {
    float tmp[512];
    const int half = hd / 2;
    const __m256 neg = _mm256_set1_ps(-0.f);
    for (int i = 0; i < hd; i += 8) {
        const __m256 r = i < half ? _mm256_xor_ps(fl_load8(x + i + half), neg) : fl_load8(x + i - half);
        const __m256 a = bf16_rt8(_mm256_mul_ps(fl_load8(x + i), fl_load8(cs + i)));
        const __m256 b = bf16_rt8(_mm256_mul_ps(r, fl_load8(sn + i)));
        _mm256_storeu_ps(tmp + i, _mm256_add_ps(a, b));
    }
    for (int i = 0; i < hd; i += 8) bf16_store8(x + i, _mm256_loadu_ps(tmp + i));
}

/* o[i] = bf16(a[i] + b[i]) for eight i (o may be a or b). */
static inline void fl_add8(uint16_t *o, const uint16_t *a, const uint16_t *b) {
    bf16_store8(o, _mm256_add_ps(fl_load8(a), fl_load8(b)));
}

/* The layers' two halves inside an OpenMP parallel region (every thread calls them; each ends on a barrier),
 * shared by the calls below. fl_in: xn = rms(x), qkv = xn·Wᵀ + b, rope on q and k. */
static void fl_in(int M, int D, const uint16_t *x, const uint16_t *nw, float eps, int N, const void *w,
                  const uint16_t *b, int nq, int nkv, int hd, const uint16_t *cs, const uint16_t *sn, uint16_t *xn,
                  float *scratch, uint16_t *qkv) {
#pragma omp for schedule(static)
    for (int m = 0; m < M; m++) fl_rms_row(D, x + (size_t)m * D, nw, eps, xn + (size_t)m * D);
    par_gemv(M, N, D, xn, scratch, w, b, qkv);
#pragma omp for schedule(static)
    for (int t = 0; t < M * (nq + nkv); t++) {
        const int m = t / (nq + nkv), hh = t % (nq + nkv);
        fl_rope_row(hd, qkv + (size_t)m * N + (size_t)hh * hd, cs + (size_t)m * hd, sn + (size_t)m * hd);
    }
}

/* fl_out: h = x + a·W_oᵀ, y = rms(h), [g|u] = y·W_guᵀ, act = silu(g)⊙u, out = h + act·W_downᵀ
 * (h, y [M, D]; gu [M, 2I]; act [M, I]: the caller's buffers). */
static void fl_out(int M, int D, const uint16_t *x, const uint16_t *a, int Da, const void *wo, const uint16_t *bo,
                   const uint16_t *nw, float eps, int I, const void *wgu, const uint16_t *bgu, const void *wdown,
                   const uint16_t *bdown, float *scratch, uint16_t *h, uint16_t *y, uint16_t *gu, uint16_t *act,
                   uint16_t *out) {
    par_gemv(M, D, Da, a, scratch, wo, bo, h); /* h ← a·W_oᵀ, then the residual below */
#pragma omp for schedule(static)
    for (int m = 0; m < M; m++) {
        uint16_t *hr = h + (size_t)m * D;
        for (int i = 0; i < D; i += 8) fl_add8(hr + i, x + (size_t)m * D + i, hr + i);
        fl_rms_row(D, hr, nw, eps, y + (size_t)m * D);
    }
    par_gemv(M, 2 * I, D, y, scratch, wgu, bgu, gu);
#pragma omp for schedule(static)
    for (int t8 = 0; t8 < M * I / 8; t8++) {  /* eight at a time (I % 32 == 0): fl_exp8, not libm's expf */
        const int m = t8 * 8 / I, i = t8 * 8 % I;
        const __m256 g = fl_load8(gu + (size_t)m * 2 * I + i);
        const __m256 sg = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), fl_exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
        bf16_store8(act + (size_t)t8 * 8, _mm256_mul_ps(bf16_rt8(sg), fl_load8(gu + (size_t)m * 2 * I + I + i)));
    }
    par_gemv(M, D, I, act, scratch, wdown, bdown, out);
#pragma omp for schedule(static)
    for (int t8 = 0; t8 < M * D / 8; t8++) fl_add8(out + (size_t)t8 * 8, h + (size_t)t8 * 8, out + (size_t)t8 * 8);
}

/* 0 on success; 1 for a shape it does not take; 2 out of memory. qkv: [M, N] out, N = (nq + 2·nkv)·hd;
 * cos, sin: [M, hd]. */
int speclab_layer_in(int M, int D, const uint16_t *x, const uint16_t *nw, float eps, int N, const void *w,
                     const uint16_t *b, int nq, int nkv, int hd, const uint16_t *cs, const uint16_t *sn,
                     uint16_t *qkv, int threads) {
    if (M < 1 || D % 32 || hd % 16 || hd > 512 || N != (nq + 2 * nkv) * hd) return 1;
    uint16_t *xn = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)M * D);
    float *scratch = (float *)malloc(sizeof(float) * FL_SCRATCH_FLOATS(M, D));
    if (!xn || !scratch) {
        free(xn);
        free(scratch);
        return 2;
    }
#pragma omp parallel num_threads(threads)
    fl_in(M, D, x, nw, eps, N, w, b, nq, nkv, hd, cs, sn, xn, scratch, qkv);
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
    const size_t big = FL_SCRATCH_FLOATS(M, widest);
    uint16_t *h = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)M * D * 2);
    uint16_t *gu = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)M * I * 2);
    uint16_t *act = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)M * I);
    float *scratch = (float *)malloc(sizeof(float) * big);
    if (!h || !gu || !act || !scratch) {
        free(h), free(gu), free(act), free(scratch);
        return 2;
    }
#pragma omp parallel num_threads(threads)
    fl_out(M, D, x, a, Da, wo, bo, nw, eps, I, wgu, bgu, wdown, bdown, scratch, h, h + (size_t)M * D, gu, act, out);
    free(h), free(gu), free(act), free(scratch);
    return 0;
}

/* A layer's constant part for speclab_layer, built once per layer by the caller (engine/kernels/fused.py). */
struct fl_layer {
    int D, nq, nkv, hd, I;
    float eps1, eps2, scale;
    const uint16_t *n1, *n2;                  /* the two norms' weights [D] */
    const void *wqkv, *wo, *wgu, *wdown;      /* the build's weight handles */
    const uint16_t *bqkv, *bo, *bgu, *bdown;  /* biases or NULL */
};

/* speclab_layer's buffers for M rows of a layer shaped like ly, carved from one allocation. */
struct fl_bufs {
    float *scratch, *scores;  /* product scratch (FL_SCRATCH_FLOATS(M, widest)); attention scores [threads, L] */
    float *split;             /* attn_split.h's partial sums (AVX-512 builds) */
    uint16_t *xn, *qkv, *a, *h, *y, *gu, *act;
};

static char *fl_alloc(const struct fl_layer *ly, int M, int L, int threads, struct fl_bufs *b) {
    const int N = (ly->nq + 2 * ly->nkv) * ly->hd, Da = ly->nq * ly->hd, D = ly->D, I = ly->I;
    int widest = D > Da ? D : Da;
    if (I > widest) widest = I;
    const size_t n16 = (size_t)M * (D + N + Da + 2 * D + 2 * I + I);  /* xn, qkv, a, h|y, gu, act */
#ifdef __AVX512F__
    const size_t split = fa_part_floats(M, ly->nq, ly->hd, L);  /* attn_split.h's partial sums */
#else
    const size_t split = 0;
#endif
    const size_t n32 = FL_SCRATCH_FLOATS(M, widest) + (size_t)threads * L + split;
    char *mem = (char *)malloc(n32 * sizeof(float) + n16 * sizeof(uint16_t));
    if (!mem) return NULL;
    b->scratch = (float *)mem;
    b->scores = b->scratch + FL_SCRATCH_FLOATS(M, widest);
    b->split = b->scores + (size_t)threads * L;
    b->xn = (uint16_t *)(b->split + split);
    b->qkv = b->xn + (size_t)M * D;
    b->a = b->qkv + (size_t)M * N;
    b->h = b->a + (size_t)M * Da;
    b->y = b->h + (size_t)M * D;
    b->gu = b->y + (size_t)M * D;
    b->act = b->gu + (size_t)M * 2 * I;
    return mem;
}

static int fl_bad(const struct fl_layer *ly, int M, int past) {
    const int Da = ly->nq * ly->hd;
#ifdef __AVX512F__
    if (past + M > FA_MAXKEYS) return 1;
#endif
    return M < 1 || past < 0 || ly->D % 32 || Da % 32 || ly->I % 32 || ly->hd % 32 || ly->hd > 512 || ly->nkv < 1
           || ly->nq % ly->nkv;
}

/* The layer's work inside an OpenMP parallel region (every thread calls it; it ends on a barrier). */
static void fl_layer_body(const struct fl_layer *ly, const struct fl_bufs *b, int M, const uint16_t *x,
                          const uint16_t *cs, const uint16_t *sn, uint16_t *kc, uint16_t *vc, long long hs, int past,
                          uint16_t *out) {
    const int D = ly->D, nq = ly->nq, nkv = ly->nkv, hd = ly->hd, I = ly->I;
    const int N = (nq + 2 * nkv) * hd, Da = nq * hd, L = past + M, group = nq / nkv;
    uint16_t *qkv = b->qkv, *a = b->a;
    float *s = b->scores + (size_t)omp_get_thread_num() * L;
    fl_in(M, D, x, ly->n1, ly->eps1, N, ly->wqkv, ly->bqkv, nq, nkv, hd, cs, sn, b->xn, b->scratch, qkv);
#pragma omp for schedule(static)
    for (int t = 0; t < M * nkv; t++) {  /* the cache append */
        const int m = t / nkv, hh = t % nkv;
        const uint16_t *row = qkv + (size_t)m * N + (size_t)(nq + hh) * hd;
        memcpy(kc + (size_t)hh * hs + (size_t)(past + m) * hd, row, sizeof(uint16_t) * hd);
        memcpy(vc + (size_t)hh * hs + (size_t)(past + m) * hd, row + (size_t)nkv * hd, sizeof(uint16_t) * hd);
    }
#ifdef __AVX512F__
    (void)s, (void)group;
    fa_attention(M, nq, nkv, hd, past, qkv, N, kc, vc, hs, ly->scale, b->split, a);
#else
#pragma omp for schedule(static)
    for (int t = 0; t < M * nq; t++) {
        const int i = t / nq, hh = t % nq;
        fl_attn_row(hd, past + i + 1, qkv + (size_t)i * N + (size_t)hh * hd, kc + (size_t)(hh / group) * hs,
                    vc + (size_t)(hh / group) * hs, ly->scale, s, a + ((size_t)i * nq + hh) * hd);
    }
#endif
    fl_out(M, D, x, a, Da, ly->wo, ly->bo, ly->n2, ly->eps2, I, ly->wgu, ly->bgu, ly->wdown, ly->bdown, b->scratch,
           b->h, b->y, b->gu, b->act, out);
}

#ifdef __AVX512F__
/* attn_split.h's attention on its own (engine/kernels/fused.py's attention, for tests): q [M, nq·hd], kc / vc
 * kv head g's rows at + g·hs (past + M of them), out [M, nq·hd]. 0 on success, 1 a shape it does not take, 2 no
 * memory. */
int speclab_attn_split(int M, int nq, int nkv, int hd, int past, const uint16_t *q, const uint16_t *kc,
                       const uint16_t *vc, long long hs, float scale, uint16_t *out, int threads) {
    if (M < 1 || past < 0 || past + M > FA_MAXKEYS || hd % 32 || hd > 512 || nkv < 1 || nq % nkv) return 1;
    float *part = (float *)malloc(sizeof(float) * fa_part_floats(M, nq, hd, past + M));
    if (!part) return 2;
#pragma omp parallel num_threads(threads < 1 ? 1 : threads)
    fa_attention(M, nq, nkv, hd, past, q, nq * hd, kc, vc, hs, scale, part, out);
    free(part);
    return 0;
}
#endif

/* The whole layer for M rows after `past` cached ones: out [M, D]. kc, vc: the layer's key and value buffers
 * [nkv, cap, hd] (head stride hs elements, cap ≥ past + M): rows past … past + M − 1 of each head are written
 * here, then every query row attends to its own prefix. 0 on success, 1 a shape it does not take, 2 no memory.
 * The same operations, in the same order, as speclab_layer_in, the cache append, the attention and
 * speclab_layer_out called one after another; one parallel region instead of three, one call instead of
 * a dozen Python steps (the AVX2 bf16 build's speclab_attn runs the same attn_row.h, so there the bits equal
 * the three-call layer's; on the AVX-512 builds the layer's attention is attn_split.h's, speclab_attn's another). */
int speclab_layer(const struct fl_layer *ly, int M, const uint16_t *x, const uint16_t *cs, const uint16_t *sn,
                  uint16_t *kc, uint16_t *vc, long long hs, int past, uint16_t *out, int threads) {
    if (fl_bad(ly, M, past)) return 1;
    if (threads < 1) threads = 1;
    struct fl_bufs b;
    char *mem = fl_alloc(ly, M, past + M, threads, &b);
    if (!mem) return 2;
#pragma omp parallel num_threads(threads)
    fl_layer_body(ly, &b, M, x, cs, sn, kc, vc, hs, past, out);
    free(mem);
    return 0;
}

/* What follows the last layer in speclab_decoder_head: the decoder's final norm (weight nw [D], eps) and the output
 * embedding's product, W [V, D] a weight handle of this build, no bias (engine/kernels/fused.py's Tail). */
struct fl_tail {
    const uint16_t *nw;
    float eps;
    int V;
    const void *w;
};

/* The decoder's nl layers one after another in one call and one parallel region: x [M, D] in, out [M, D] the
 * last layer's output (before the final norm). Layer l's constant part lys[l], its cache buffers kc[l], vc[l]
 * (head stride hs[l]); every layer shaped as lys[0] and `past` rows cached in each. Each layer is exactly
 * speclab_layer's work, so the bits are those of nl speclab_layer calls. With a tail, the same region goes on:
 * normed [M, D] = rms(out)·nw (fl_rms_row, speclab_rms's bits) and logits [M, V] = normed·Wᵀ (par_gemv, the
 * bits of this build's own product: speclab_bgemv / speclab_qgemm). Why: after the layers a step left the final
 * norm (~7 torch ops) and the head's call to Python, ~0.3 ms of SmolLM2-135M's ~7 ms quantized step on a 2-core
 * Xeon, most of it cache misses of code and data the weights' stream had just evicted. */
static int fl_decoder(int nl, const struct fl_layer *const *lys, uint16_t *const *kc, uint16_t *const *vc,
                      const long long *hs, int M, const uint16_t *x, const uint16_t *cs, const uint16_t *sn, int past,
                      uint16_t *out, const struct fl_tail *tail, uint16_t *normed, uint16_t *logits, int threads) {
    if (nl < 1) return 1;
    for (int l = 0; l < nl; l++) {
        const struct fl_layer *a = lys[l], *z = lys[0];
        if (fl_bad(a, M, past) || a->D != z->D || a->nq != z->nq || a->nkv != z->nkv || a->hd != z->hd || a->I != z->I)
            return 1;
    }
    if (tail && (tail->V < 1 || !tail->nw || !tail->w || !normed || !logits)) return 1;
    if (threads < 1) threads = 1;
    struct fl_bufs b;
    char *mem = fl_alloc(lys[0], M, past + M, threads, &b);
    uint16_t *ping = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)M * lys[0]->D);
    if (!mem || !ping) {
        free(mem), free(ping);
        return 2;
    }
    /* layer l reads `in` and writes `dst`, alternating so the last layer writes `out` */
    uint16_t *bufs[2] = {ping, out};
    const int D = lys[0]->D;
#pragma omp parallel num_threads(threads)
    {
        for (int l = 0; l < nl; l++) {
            const uint16_t *in = l == 0 ? x : bufs[(nl - l + 1) % 2];
            fl_layer_body(lys[l], &b, M, in, cs, sn, kc[l], vc[l], hs[l], past, bufs[(nl - l) % 2]);
        }
        if (tail) { /* the last layer ended on a barrier: `out` is complete */
#pragma omp for schedule(static)
            for (int m = 0; m < M; m++) fl_rms_row(D, out + (size_t)m * D, tail->nw, tail->eps, normed + (size_t)m * D);
            par_gemv(M, tail->V, D, normed, b.scratch, tail->w, NULL, logits);
        }
    }
    free(mem), free(ping);
    return 0;
}

int speclab_decoder(int nl, const struct fl_layer *const *lys, uint16_t *const *kc, uint16_t *const *vc,
                    const long long *hs, int M, const uint16_t *x, const uint16_t *cs, const uint16_t *sn, int past,
                    uint16_t *out, int threads) {
    return fl_decoder(nl, lys, kc, vc, hs, M, x, cs, sn, past, out, NULL, NULL, NULL, threads);
}

/* speclab_decoder, then the tail above in the same region: normed [M, D] and logits [M, V] out as well. */
int speclab_decoder_head(int nl, const struct fl_layer *const *lys, uint16_t *const *kc, uint16_t *const *vc,
                         const long long *hs, int M, const uint16_t *x, const uint16_t *cs, const uint16_t *sn,
                         int past, uint16_t *out, const struct fl_tail *tail, uint16_t *normed, uint16_t *logits,
                         int threads) {
    if (!tail) return 1;
    return fl_decoder(nl, lys, kc, vc, hs, M, x, cs, sn, past, out, tail, normed, logits, threads);
}

/* The decoder's final norm alone, row by row (the bits of the tail's): out [M, D] = rms(x)·w. 0, or 1 for a D
 * that is not a multiple of 8. */
int speclab_rms(int M, int D, const uint16_t *x, const uint16_t *w, float eps, uint16_t *out) {
    if (M < 0 || D < 8 || D % 8) return 1;
    for (int m = 0; m < M; m++) fl_rms_row(D, x + (size_t)m * D, w, eps, out + (size_t)m * D);
    return 0;
}
#endif
