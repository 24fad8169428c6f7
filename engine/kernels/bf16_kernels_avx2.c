/* The dense path's bf16 kernels for CPUs with AVX2 + FMA but no AVX-512 BF16 (older EPYCs, Intel before
 * Cooper Lake): the same two entry points as bf16_kernels.c, so engine/kernels/dense_kernel.py loads either.
 *   speclab_bgemv  y[M,N] = x[M,K] · W[N,K]ᵀ (+ b[N])
 *   speclab_attn   causal attention of a few query rows against a KV cache (grouped heads), row by row
 *
 * Why: a decode step reads every weight once, so its time is bytes ÷ bandwidth. Without a bf16 dot-product
 * instruction torch's bf16 GEMV on AVX2 runs at ~2 GB/s (measured: 1.9 GB/s against 7.3 GB/s for its fp32
 * GEMV on the same 8960×1536 weight, one thread, EPYC with AVX2 only), so bf16 weights were slower than fp32
 * ones although they are half the bytes. Here a weight row is widened in registers (a bf16 is the top half of
 * a float32: interleaved below with zeros — exact) and multiplied by float32 FMAs: the weight stays bf16 in
 * memory, so a step reads 2 bytes a weight.
 *
 * Batch-invariant like the AVX-512 file: every y[m,n] accumulates its own 8 float32 lanes over k in order with
 * one FMA each, the lanes are reduced in a fixed order, the bias is added in float32 and the result rounded to
 * bf16 once, whatever M is. So a k-token verify gives bit-identical logits to k one-token steps. The activations
 * are widened to float32 once per call (exact), not once per weight row.
 */
#include <immintrin.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "bf16.h"
#include "attn_row.h"
#ifndef MCHUNK
#define MCHUNK 4 /* activation rows per pass over a block of weight rows */
#endif
/* RB: weight rows per block for one activation row (3 accumulators + 6 widened weight vectors + 2 activations) */
#ifndef RB
#define RB 3
#endif
/* PF: software prefetch this many weights ahead in each row (one line per 32 weights). Measured M = 1 on a
 * 2-core AVX2 EPYC (~20 GB/s): 0 → 256 lifts the K = 1536 shapes from ~14 to ~15 GB/s (128–320 alike, 512 and
 * 1024 no better than none); K = 8960 rows already stream at ~20 GB/s. RB ∈ {2, 3, 4, 6} × MCHUNK ∈ {1, 2, 4}:
 * RB = 3, MCHUNK = 4 best or level at M = 1 and best at M = 4 (measured with the earlier widening). */
#ifndef PF
#define PF 256
#endif
/* PFBLOCK: a block of short rows (R·K ≤ PFBLOCK weights) prefetches the same offsets of the next block instead,
 * so the prefetches run one block ahead in memory order rather than into the rows being read now. Measured
 * M = 1, 2 threads, a 2-core Zen 1 EPYC, from memory (hand harness over the library, medians of 5, interleaved):
 * 49152×576 (SmolLM2's head) 12.9–13.6 → 15.0–15.5 GB/s, 8960×1536 15.9–16.0 → 18.4–19.0, 151936×1536 17.6–17.8 →
 * 18.9–19.6; K = 8960 rows unchanged (~21 GB/s); two or three blocks ahead no better than one. */
#ifndef PFBLOCK
#define PFBLOCK 5000
#endif
/* SHORTK: a weight with rows of at most this many elements takes the short-row product (`short_rows`) instead
 * of the blocks above; PFS: its prefetch distance in weights. Why: three short rows read side by side are three
 * streams a few hundred bytes long, which the hardware prefetchers follow badly — a plain read in that order ran
 * 19.4 GB/s against 23.6 for the same bytes in order (49152×576, 2 threads, a 2-core Zen 1 EPYC, from memory) —
 * so short rows are read one after another, in memory order, with four FMA chains a row to hide the FMA latency
 * that one chain of one row would expose. Measured M = 1 (hand harness over both builds, best of 7, interleaved):
 * K = 576 16.5–17.4 → 20.7–20.9 GB/s (SmolLM2's shapes and head), K = 896 17.8–18.6 → 20.1–21.2 (the 0.5B
 * draft's); at K = 1536 and 8960 the blocks win (21.4 vs 20.4, 24.6 vs 20.5), so they keep them. PFS 256 → 512
 * lifts K = 576 from 19.9 to 20.7 GB/s; 1024 and 2048 alike. */
#ifndef SHORTK
#define SHORTK 1024
#endif
#ifndef PFS
#define PFS 1024
#endif

/* (fl_hsum8, attn_row.h: a fixed-order reduction of 8 lanes, the same for every row, so results do not depend on M) */

/* x[M, K] bf16 → float32 in fl_load16's order: per 16 elements, 0–3, 8–11, 4–7, 12–15. */
static void widen_x(const uint16_t *x, size_t n, float *xf) {
    for (size_t i = 0; i < n; i += 16) {
        __m256 lo, hi;
        fl_load16(x + i, &lo, &hi);
        _mm256_storeu_ps(xf + i, lo);
        _mm256_storeu_ps(xf + i + 8, hi);
    }
}

/* Weight rows n0 … n0+R-1 against activation rows m0 … m0+MC-1 (R, MC compile-time after inlining). Each
 * y[m,n] is the same chain of FMAs whatever R and MC are: R only sets how many rows share a pass. */
static inline __attribute__((always_inline)) void block(const int R, const int MC, int n0, int m0, int K,
        const float *xf, const uint16_t *w, const uint16_t *b, uint16_t *y, int N) {
    __m256 acc[MCHUNK][RB];
#pragma GCC unroll 8
    for (int m = 0; m < MC; m++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[m][r] = _mm256_setzero_ps();
    const uint16_t *wr = w + (size_t)n0 * K;
    const float *xr = xf + (size_t)m0 * K;
#if PF
    const size_t pfo = (size_t)R * K <= PFBLOCK ? (size_t)R * K : PF;
#endif
    for (int k = 0; k < K; k += 16) {
        __m256 wl[RB], wh[RB];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
#if PF
            if ((k & 31) == 0) _mm_prefetch((const char *)(wr + (size_t)r * K + k + pfo), _MM_HINT_T0);
#endif
            fl_load16(wr + (size_t)r * K + k, &wl[r], &wh[r]);
        }
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) {
            const __m256 x0 = _mm256_loadu_ps(xr + (size_t)m * K + k), x1 = _mm256_loadu_ps(xr + (size_t)m * K + k + 8);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[m][r] = _mm256_fmadd_ps(wh[r], x1, _mm256_fmadd_ps(wl[r], x0, acc[m][r]));
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MC; m++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            float v = fl_hsum8(acc[m][r]);
            if (b) v += bf16_to_f32(b[n0 + r]);
            y[(size_t)(m0 + m) * N + n0 + r] = f32_to_bf16(v);
        }
}

/* R weight rows from n0 against every activation row: one row of activations RB = 3 weight rows at a time;
 * several (a verify) two weight rows at a time, then one, so the accumulators and widened weights fit AVX2's
 * 16 registers (measured: R = 3 at MC = 4 spills and runs ~6 % slower than R = 2). */
static void rows_block(int R, int n0, int M, int K, const float *xf, const uint16_t *w, const uint16_t *b,
                       uint16_t *y, int N) {
    for (int m0 = 0; m0 < M; m0 += MCHUNK) {
        int mc = M - m0 < MCHUNK ? M - m0 : MCHUNK;
        /* two rows (a verify of one draft) take the whole block too: 6 accumulators + 6 weight vectors + 2 fit;
         * as two rows and then one alone they ran 1.6–1.7× a one-row pass (8960×1536 2.12 against 1.34 ms, the
         * 151936×1536 head 33.9 against 21.0 ms, M = 2, 2 threads, a 2-core Zen 1; bits unchanged) */
        if (mc == 2 && R == RB) {
            block(RB, 2, n0, m0, K, xf, w, b, y, N);
            continue;
        }
        if (mc == 1) {
            if (R == RB) block(RB, 1, n0, m0, K, xf, w, b, y, N);
            else for (int r = 0; r < R; r++) block(1, 1, n0 + r, m0, K, xf, w, b, y, N);
            continue;
        }
        int r = 0;
#define CASE(MM) if (mc == MM) { for (; r + 2 <= R; r += 2) block(2, MM, n0 + r, m0, K, xf, w, b, y, N); \
                                 if (r < R) { block(1, MM, n0 + r, m0, K, xf, w, b, y, N); } continue; }
        CASE(2) CASE(3) CASE(4)
#undef CASE
    }
}

/* One weight row n (K ≤ SHORTK) against activation rows m0 … m0+MC-1, in four FMA chains per y[m,n]: chain j
 * takes the lanes of fl_load16's lo/hi halves of the 16-weight groups at k ≡ 0 or 16 (mod 32), and the result is
 * hsum(((c0 + c1) + (c2 + c3))), the same operations whatever MC is (so batch-invariant, as the blocks). */
static inline __attribute__((always_inline)) void short_row(const int MC, int n, int m0, int K, const float *xf,
        const uint16_t *w, const uint16_t *b, uint16_t *y, int N) {
    __m256 acc[3][4];
#pragma GCC unroll 4
    for (int m = 0; m < MC; m++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) acc[m][j] = _mm256_setzero_ps();
    const uint16_t *wr = w + (size_t)n * K;
    const float *xr = xf + (size_t)m0 * K;
    for (int k = 0; k < K; k += 32) {
        /* one line of weights per 32; past the row's end this is the next rows, which come next in memory */
        _mm_prefetch((const char *)(wr + k + PFS), _MM_HINT_T0);
        __m256 l0, h0, l1, h1;
        fl_load16(wr + k, &l0, &h0);
        fl_load16(wr + k + 16, &l1, &h1);
#pragma GCC unroll 4
        for (int m = 0; m < MC; m++) {
            const float *xm = xr + (size_t)m * K + k;
            acc[m][0] = _mm256_fmadd_ps(l0, _mm256_loadu_ps(xm), acc[m][0]);
            acc[m][1] = _mm256_fmadd_ps(h0, _mm256_loadu_ps(xm + 8), acc[m][1]);
            acc[m][2] = _mm256_fmadd_ps(l1, _mm256_loadu_ps(xm + 16), acc[m][2]);
            acc[m][3] = _mm256_fmadd_ps(h1, _mm256_loadu_ps(xm + 24), acc[m][3]);
        }
    }
#pragma GCC unroll 4
    for (int m = 0; m < MC; m++) {
        float v = fl_hsum8(_mm256_add_ps(_mm256_add_ps(acc[m][0], acc[m][1]), _mm256_add_ps(acc[m][2], acc[m][3])));
        if (b) v += bf16_to_f32(b[n]);
        y[(size_t)(m0 + m) * N + n] = f32_to_bf16(v);
    }
}

/* Row n against every activation row, three or two at a time: measured on K = 576 (3072 rows, 2 threads, Zen 1)
 * M = 3 as one pass of 3 (0.26 ms; 0.29 as 2 + 1, 0.34 on the blocks), M = 4 as 2 + 2 (0.34; 0.36 as 3 + 1,
 * 0.38 on the blocks), M = 5 as 3 + 2 (0.41; 0.38 on the blocks). */
static void short_rows(int n, int M, int K, const float *xf, const uint16_t *w, const uint16_t *b, uint16_t *y,
                       int N) {
    int m0 = 0;
    for (; M - m0 > 4 || M - m0 == 3; m0 += 3) short_row(3, n, m0, K, xf, w, b, y, N);
    for (; M - m0 >= 2; m0 += 2) short_row(2, n, m0, K, xf, w, b, y, N);
    if (M - m0 == 1) short_row(1, n, m0, K, xf, w, b, y, N);
}

/* The product's shares of work, one shape per weight (by row length, never by M, so every row's bits are the same
 * whatever M is): `units` of one short row, or of a block of RB rows; `rest`, the rows after the last block. */
static inline int units(int N, int K) { return K <= SHORTK ? N : N / RB; }

static inline void unit(int i, int M, int N, int K, const float *xf, const uint16_t *w, const uint16_t *b,
                        uint16_t *y) {
    if (K <= SHORTK) short_rows(i, M, K, xf, w, b, y, N);
    else rows_block(RB, i * RB, M, K, xf, w, b, y, N);
}

static inline void rest(int M, int N, int K, const float *xf, const uint16_t *w, const uint16_t *b, uint16_t *y) {
    const int n0 = K <= SHORTK ? N : N / RB * RB;
    if (n0 < N) rows_block(N - n0, n0, M, K, xf, w, b, y, N);
}

/* speclab_bgemv's product inside an OpenMP parallel region (engine/kernels/fused_layer.h): the activations
 * widened once into xf [M, K], the units shared out as speclab_bgemv shares them, then a barrier. */
static void par_gemv(int M, int N, int K, const uint16_t *x, float *xf, const void *wh, const uint16_t *b,
                     uint16_t *y) {
    const uint16_t *w = (const uint16_t *)wh;
#pragma omp single
    widen_x(x, (size_t)M * K, xf);
    const int n = units(N, K);
#pragma omp for schedule(static) nowait
    for (int i = 0; i < n; i++) unit(i, M, N, K, xf, w, b, y);
#pragma omp single nowait
    rest(M, N, K, xf, w, b, y);
#pragma omp barrier
}

#include "fused_layer.h"
#include "read_probe.h"

/* 0 on success; 1 for a shape it does not take (K not a multiple of 32, as the AVX-512 build); 2 out of memory. */
int speclab_bgemv(int M, int N, int K, const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y,
                  int threads) {
    if (K % 32 != 0 || M < 1 || N < 1) return 1;
    float *xf = (float *)malloc(sizeof(float) * (size_t)M * K);
    if (!xf) return 2;
    widen_x(x, (size_t)M * K, xf);
    /* a small weight is not worth waking a second thread (the same rule as the AVX-512 build) */
    if ((long long)N * K * 2 < (1LL << 20)) threads = 1;
    const int n = units(N, K);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < n; i++) unit(i, M, N, K, xf, w, b, y);
    rest(M, N, K, xf, w, b, y);
    free(xf);
    return 0;
}

/* Attention of q query rows against a cache of L keys, each row alone (batch-invariant, like the linears):
 *   row i sees keys 0 … n_i − 1, n_i = L − q + i + 1;  out[i,h] = softmax(scale · Q[i,h] · K[kv(h), :n_i]ᵀ) · V[kv(h), :n_i]
 * with kv(h) = h / (H / Hkv). Same layout and contract as bf16_kernels.c: Q, out [q, H, D] contiguous bf16;
 * K, V bf16 with a stride `hs` between heads and D between positions; D a multiple of 32, at most 512. */
int speclab_attn(int q, int H, int Hkv, int D, int L, const uint16_t *Q, const uint16_t *K, const uint16_t *V,
                 long long hs, float scale, uint16_t *out, int threads) {
    if (D % 32 != 0 || D > 512 || H % Hkv != 0 || q < 1 || q > L) return 1;
    const int group = H / Hkv;
    int failed = 0;
#pragma omp parallel num_threads(threads)
    {
        float *s = (float *)malloc(sizeof(float) * (size_t)L);
        if (!s) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int t = 0; t < q * H; t++) {
            if (!s) continue;
            const int i = t / H, h = t % H, n = L - q + i + 1;
            fl_attn_row(D, n, Q + ((size_t)i * H + h) * D, K + (size_t)(h / group) * hs, V + (size_t)(h / group) * hs,
                        scale, s, out + ((size_t)i * H + h) * D);
        }
        free(s);
    }
    return failed ? 2 : 0;
}
