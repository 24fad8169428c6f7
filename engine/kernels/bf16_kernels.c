/* The dense path's bf16 kernels for short forwards on x86 CPUs with AVX-512 BF16:
 *   speclab_bgemv  y[M,N] = x[M,K] · W[N,K]ᵀ (+ b[N])
 *   speclab_attn   causal attention of a few query rows against a KV cache (grouped heads), row by row
 *
 * A decode step (M = 1) or a short verify (M ≤ 32) is bound by reading W once: 3 GB per forward of a
 * 1.5B model. Each weight row is streamed once per chunk of up to MCHUNK activation rows; the products
 * are taken by vdpbf16ps (pairs of bf16 products summed into float32 lanes), so neither operand is
 * converted. W is the model's own row-major bf16 tensor: no packed copy, no extra memory.
 *
 * Every y[m,n] is computed by the same sequence of operations whatever M is: its own 16 float32 lanes
 * accumulate K/32 steps in order (rows of K ≤ SHORTK: in four chains, step s into chain s mod 4, summed in a
 * fixed order), are reduced in a fixed order, the bias is added in float32 and the result rounded to bf16 once. So a k-token verify gives bit-identical logits to k one-token steps
 * (with the row-wise attention of engine/kernels/rowwise_attention.py, the whole forward is batch-invariant).
 * Built by engine/kernels/dense_kernel.py; called through ctypes with raw pointers.
 */
#include <immintrin.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

#define MCHUNK 4 /* activation rows per pass over a block of weight rows: MCHUNK x RB accumulators in registers */
#define RB 6     /* weight rows per block: 24 accumulators + 6 weight vectors + 1 input fit the 32 registers
                   (measured against 2 and 4, with and without software prefetch: 6 without is fastest) */

/* A fixed-order reduction of 16 lanes (the same for every row, so results do not depend on M). */
static inline float hsum512(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_shuffle_ps(b, b, 1));
    return _mm_cvtss_f32(b);
}

/* Weight rows n0 … n0+R-1 against activation rows m0 … m0+MC-1 (R, MC compile-time after inlining). */
static inline __attribute__((always_inline)) void block(const int R, const int MC, int n0, int m0, int K,
        const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y, int N) {
    __m512 acc[MCHUNK][RB];
#pragma GCC unroll 8
    for (int m = 0; m < MC; m++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[m][r] = _mm512_setzero_ps();
    const uint16_t *wr = w + (size_t)n0 * K;
    const uint16_t *xr = x + (size_t)m0 * K;
    for (int k = 0; k < K; k += 32) {
        __m512bh wv[RB];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            wv[r] = (__m512bh)_mm512_loadu_si512((const void *)(wr + (size_t)r * K + k));
        }
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) {
            __m512bh xv = (__m512bh)_mm512_loadu_si512((const void *)(xr + (size_t)m * K + k));
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], wv[r], xv);
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MC; m++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            float v = hsum512(acc[m][r]);
            if (b) v += bf16_to_f32(b[n0 + r]);
            y[(size_t)(m0 + m) * N + n0 + r] = f32_to_bf16(v);
        }
}

static void rows_block(int R, int n0, int M, int K, const uint16_t *x, const uint16_t *w, const uint16_t *b,
                       uint16_t *y, int N) {
    for (int m0 = 0; m0 < M; m0 += MCHUNK) {
        int mc = M - m0 < MCHUNK ? M - m0 : MCHUNK;
#define CASE(RR, MM) if (R == RR && mc == MM) { block(RR, MM, n0, m0, K, x, w, b, y, N); continue; }
        CASE(6, 1) CASE(6, 2) CASE(6, 3) CASE(6, 4)
        CASE(1, 1) CASE(1, 2) CASE(1, 3) CASE(1, 4)
#undef CASE
    }
}

/* SHORTK: a weight with rows of at most this many elements takes the short-row product (`short_rows`) instead
 * of the blocks above; PFS: its prefetch distance in weights. Why: six rows of 576–1536 weights read side by side
 * are six streams of 1–3 KB, which the hardware prefetchers follow badly; read one after another, in memory order
 * and prefetched, they are one stream. Measured M = 1, 2 threads, a 2-core Zen 4 EPYC (~31–35 GB/s read), from
 * memory (hand harness over both builds, best of 5, interleaved, two rounds): 49152×576 (SmolLM2's head)
 * 15.6–20.5 → 27.0–28.1 GB/s, 1536×576 17.3–20.2 → 27.7–28.0, 9728×896 (the 0.5B draft's MLP) 18.5–22.2 →
 * 26.8–28.3, 8960×1536 25.3–27.6 → 27.6–27.8; at M = 4 (a verify of three drafts) 14.8 → 22.7–24.2 (head), 22.2 →
 * 23.9–26.8 (8960×1536). At M = 8 rows of 1536 run slower so (15–16 against 18 GB/s); rows of 4864 and 8960 keep
 * the blocks at every M (they read as fast or faster there).
 * PF_ROWS: the software prefetch runs only for M ≥ PF_ROWS. Why: one sequential stream is what the hardware
 * prefetchers follow best, and the software prefetches then only compete with it; with four and more activation
 * rows a row is read once per chunk of four and the prefetch keeps memory busy under the arithmetic. Measured
 * 2026-12-07 on the same Zen 4 (probe 24–47 GB/s over the runs; hand harness, median of 6 passes interleaved, no
 * prefetch ÷ prefetch): M = 1 1.05–1.29 (1536×1536, 8960×1536, the 1.5B's head, 3072×576, 4864×896, the 0.5B's
 * reduced head 32768×896), M = 2 1.11–1.30, M = 3 0.94–1.40, M = 4 0.86–1.23 (kept), M = 5–8 0.70–1.11 (kept);
 * in the engine's AR loop (six prompts, interleaved in one process) SmolLM2-135M decoded 1.10×, the 0.5B 1.14×
 * and the 1.5B 1.11× as fast without it. Only reads move: the bits are unchanged. */
#ifndef SHORTK
#define SHORTK 2048
#endif
#ifndef PFS
#define PFS 1024
#endif
#ifndef PF_ROWS
#define PF_ROWS 4
#endif

/* One weight row n (K ≤ SHORTK) against activation rows m0 … m0+MC-1, in four dot-product chains per y[m,n]: chain
 * j takes the 32-element steps s ≡ j (mod 4), and the chains are summed in a fixed order at the end. */
static inline __attribute__((always_inline)) void short_row(const int MC, const int PF, int n, int m0, int K,
        const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y, int N) {
    __m512 acc[MCHUNK][4];
#pragma GCC unroll 4
    for (int m = 0; m < MC; m++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) acc[m][j] = _mm512_setzero_ps();
    const uint16_t *wr = w + (size_t)n * K;
    const uint16_t *xr = x + (size_t)m0 * K;
    int k = 0;
    for (; k + 128 <= K; k += 128) {
        /* one line of weights per step; past the row's end this is the next rows, which come next in memory */
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            if (PF) _mm_prefetch((const char *)(wr + k + 32 * j + PFS), _MM_HINT_T0);
            const __m512bh wv = (__m512bh)_mm512_loadu_si512((const void *)(wr + k + 32 * j));
#pragma GCC unroll 4
            for (int m = 0; m < MC; m++)
                acc[m][j] = _mm512_dpbf16_ps(acc[m][j], wv,
                                             (__m512bh)_mm512_loadu_si512((const void *)(xr + (size_t)m * K + k + 32 * j)));
        }
    }
    for (int j = 0; k < K; k += 32, j++) {  /* the last K mod 128: steps to chains 0, 1, 2 in order */
        if (PF) _mm_prefetch((const char *)(wr + k + PFS), _MM_HINT_T0);
        const __m512bh wv = (__m512bh)_mm512_loadu_si512((const void *)(wr + k));
#pragma GCC unroll 4
        for (int m = 0; m < MC; m++)
            acc[m][j] = _mm512_dpbf16_ps(acc[m][j], wv, (__m512bh)_mm512_loadu_si512((const void *)(xr + (size_t)m * K + k)));
    }
#pragma GCC unroll 4
    for (int m = 0; m < MC; m++) {
        float v = hsum512(_mm512_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]), _mm512_add_ps(acc[m][2], acc[m][3])));
        if (b) v += bf16_to_f32(b[n]);
        y[(size_t)(m0 + m) * N + n] = f32_to_bf16(v);
    }
}

static inline __attribute__((always_inline)) void short_rows_pf(const int PF, int n, int M, int K, const uint16_t *x,
        const uint16_t *w, const uint16_t *b, uint16_t *y, int N) {
    int m0 = 0;
    for (; M - m0 >= 4; m0 += 4) short_row(4, PF, n, m0, K, x, w, b, y, N);
    if (M - m0 == 3) short_row(3, PF, n, m0, K, x, w, b, y, N);
    else if (M - m0 == 2) short_row(2, PF, n, m0, K, x, w, b, y, N);
    else if (M - m0 == 1) short_row(1, PF, n, m0, K, x, w, b, y, N);
}

static void short_rows(int n, int M, int K, const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y,
                       int N) {
    if (M >= PF_ROWS) short_rows_pf(1, n, M, K, x, w, b, y, N);
    else short_rows_pf(0, n, M, K, x, w, b, y, N);
}

/* The product's shares of work, one shape per weight (by row length, never by M, so every row's bits are the same
 * whatever M is): `units` of one short row, or of a block of RB rows; `rest`, the rows after the last block. */
static inline int units(int N, int K) { return K <= SHORTK ? N : N / RB; }

static inline void unit(int i, int M, int N, int K, const uint16_t *x, const uint16_t *w, const uint16_t *b,
                        uint16_t *y) {
    if (K <= SHORTK) short_rows(i, M, K, x, w, b, y, N);
    else rows_block(RB, i * RB, M, K, x, w, b, y, N);
}

static inline void rest(int M, int N, int K, const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y) {
    for (int n = K <= SHORTK ? N : N / RB * RB; n < N; n++) rows_block(1, n, M, K, x, w, b, y, N);
}

#ifdef __AMX_BF16__
/* The AMX build (bgemv-amx: Intel Sapphire Rapids and newer): every weight row's product on the tiles. TDPBF16PS
 * C[16, mc] += A[16, 32] · B[32, mc] takes 16 weight rows × 32 inputs as A, straight from W's own row-major rows
 * (a tile row is 64 bytes of one weight row; stride K), and the activations as B, packed once a call into pairs
 * xp[k/32][p][m][2] = x[m][k + 2p .. k + 2p + 1] (per chunk of AMX_M rows). C[n][m] depends on weight row n and
 * activation row m alone, accumulated over k in order (one float32 per output), so every M gives the same bits and
 * a verify equals its one-row steps, within this build (its bits are not the vdpbf16ps build's).
 * Why: the vdpbf16ps blocks read 25–30 GB/s at one activation row but 18–19 at four (the 1.5B's head, its MLP
 * rows of 1536), while the tiles read ~29–30 at one to four (measured 2026-12-07 on a 2-core Xeon with AMX, hand
 * harness, best of 5 interleaved: head 16.84 → 15.49 ms at M = 1, 25.09 → 15.72 at M = 4). The tile state needs
 * the kernel's permission (arch_prctl XTILEDATA), asked for when the library loads: speclab_amx_ok() says whether
 * it was granted, and without it this build computes as the vdpbf16ps one does. */
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_M 16 /* activation rows a pass: the tiles' 16 float32 columns */
static int amx_ok;
__attribute__((constructor)) static void amx_request(void) {
    amx_ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
}
int speclab_amx_ok(void) { return amx_ok; }

struct amx_cfg { uint8_t palette, start; uint8_t pad[14]; uint16_t colsb[16]; uint8_t rows[16]; };
static __thread int amx_cols; /* the mc this thread's tiles are configured for (0: not this call's) */

/* tmm0 B (16 pairs × mc), tmm1 A (16 weight rows × 32), tmm2 C (16 × mc float32) */
static inline void amx_config(int mc) {
    if (amx_cols == mc) return;
    struct amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[0] = 16; c.colsb[0] = (uint16_t)(mc * 4);
    c.rows[1] = 16; c.colsb[1] = 64;
    c.rows[2] = 16; c.colsb[2] = (uint16_t)(mc * 4);
    __asm__ volatile("ldtilecfg %0" ::"m"(c)); /* the whole struct as the operand (see qtiles.h's amxq_config) */
    amx_cols = mc;
}

static inline int amx_takes(int N) { return amx_ok && N >= 16; }

/* x [M, K] → xp: per chunk of AMX_M rows (offset m0·K), [K/32][16][mc][2] */
static void amx_pack(int M, int K, const uint16_t *x, uint16_t *xp) {
    for (int m0 = 0; m0 < M; m0 += AMX_M) {
        const int mc = M - m0 < AMX_M ? M - m0 : AMX_M;
        uint16_t *o = xp + (size_t)m0 * K;
        for (int kp = 0; kp < K / 2; kp++)
            for (int m = 0; m < mc; m++) {
                const uint32_t pair = *(const uint32_t *)(x + (size_t)(m0 + m) * K + 2 * kp);
                *(uint32_t *)(o + ((size_t)kp * mc + m) * 2) = pair;
            }
    }
}

/* weight rows 16i … 16i+15 against every activation row; while their first pass runs, the next unit's rows (`nx`,
 * the 16·K contiguous weights after these, NULL at the end of the thread's share) are prefetched into L2, a few
 * lines an iteration. Why: a tile load reads 16 rows of 64 bytes, 16 short streams the hardware prefetchers follow
 * badly at SmolLM2's rows of 576 (1152 bytes); with the block after it requested ahead the reads are one stream.
 * Measured M = 1, 2 threads, a 2-core Xeon with AMX (hand harness, SmolLM2-135M's 30 layers' products and its
 * head run back to back, best of 15, three runs): layers 24–26 → 27–29 GB/s, head 23–25 → 29–31 (the read probe
 * 30–31); L2 (T1) beat L1 (T0), one unit ahead beat two, NTA fell to a third. In the engine (with amx_unit1 below):
 * SmolLM2's one-token step 0.921×, the 1.5B's 0.998× (docs/log/2026-12-07-amx-prefetch-and-one-call-step.md). */
static inline __attribute__((always_inline)) void amx_unit_m(const int ONE, int i, int M, int N, int K,
        const uint16_t *xp, const uint16_t *w, const uint16_t *b, uint16_t *y, const char *nx) {
    if (ONE) M = 1;
    float c[16 * AMX_M];
    const uint16_t *wr = w + (size_t)i * 16 * K;
    const int lines = 16 * K * 2 / 64, per = (lines + K / 32 - 1) / (K / 32); /* K % 32 == 0: lines = K / 2 */
    for (int m0 = 0; m0 < M; m0 += AMX_M) {
        const int mc = M - m0 < AMX_M ? M - m0 : AMX_M;
        const uint16_t *xc = xp + (size_t)m0 * K;
        amx_config(mc);
        _tile_zero(2);
        for (int k = 0, li = 0; k < K; k += 32) {
            _tile_loadd(0, xc + (size_t)k * mc, mc * 4);
            _tile_loadd(1, wr + k, K * 2);
            _tile_dpbf16ps(2, 1, 0);
            if (nx)
                for (int j = 0; j < per && li < lines; j++, li++) _mm_prefetch(nx + 64 * (size_t)li, _MM_HINT_T1);
        }
        nx = NULL; /* a further pass (M > AMX_M) reads these rows again from cache */
        _tile_stored(2, c, mc * 4);
        for (int r = 0; r < 16; r++)
            for (int m = 0; m < mc; m++) {
                float v = c[r * mc + m];
                if (b) v += bf16_to_f32(b[i * 16 + r]);
                y[(size_t)(m0 + m) * N + i * 16 + r] = f32_to_bf16(v);
            }
    }
}

/* One activation row (a decode step) compiled apart: with M a constant the unit's loop runs ~10 % faster here
 * (hand harness, SmolLM2's products and head, 2 threads: 24–26 → 26–29 GB/s); same operations, same bits. */
static void amx_unit1(int i, int N, int K, const uint16_t *xp, const uint16_t *w, const uint16_t *b, uint16_t *y,
                      const char *nx) {
    amx_unit_m(1, i, 1, N, K, xp, w, b, y, nx);
}
static void amx_unit(int i, int M, int N, int K, const uint16_t *xp, const uint16_t *w, const uint16_t *b,
                     uint16_t *y, const char *nx) {
    amx_unit_m(0, i, M, N, K, xp, w, b, y, nx);
}

static void amx_rest(int M, int N, int K, const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y) {
    for (int n = N / 16 * 16; n < N; n++) rows_block(1, n, M, K, x, w, b, y, N);
}
#else
static inline int amx_takes(int N) { (void)N; return 0; }
#endif

/* speclab_bgemv's product inside an OpenMP parallel region (engine/kernels/fused_layer.h; bf16 products need
 * no widened copy, so `scratch` holds only the AMX build's packed activations, 2·M·K bytes): the units shared out
 * as speclab_bgemv shares them, then a barrier. */
static void par_gemv(int M, int N, int K, const uint16_t *x, float *scratch, const void *wh, const uint16_t *b,
                     uint16_t *y) {
    const uint16_t *w = (const uint16_t *)wh;
#ifdef __AMX_BF16__
    if (amx_takes(N)) {
        /* one activation row is its own packing ([K/32][16][1][2] is x's order); more rows: each thread packs its
         * own copy (no barrier before the products) where the scratch holds one a thread (10·M·K bytes ≥ 2·M·K a
         * thread for up to 3 threads), else one shared copy behind a barrier */
        const int nt = omp_get_num_threads(), t = omp_get_thread_num();
        const uint16_t *xp = x;
        if (M > 1) {
            if (nt <= 3) {
                uint16_t *own = (uint16_t *)scratch + (size_t)t * M * K;
                amx_pack(M, K, x, own);
                xp = own;
            } else {
#pragma omp single
                amx_pack(M, K, x, (uint16_t *)scratch);
                xp = (const uint16_t *)scratch;
            }
        }
        amx_cols = 0; /* another library's tiles may have run on this thread since */
        /* the units shared out as schedule(static) shares them (one contiguous run a thread), so each knows the
         * next unit of its own share to prefetch */
        const int n = N / 16;
        const int lo = (int)((long long)n * t / nt), hi = (int)((long long)n * (t + 1) / nt);
        for (int i = lo; i < hi; i++) {
            const char *nx = i + 1 < hi ? (const char *)(w + (size_t)(i + 1) * 16 * K) : NULL;
            if (M == 1)
                amx_unit1(i, N, K, xp, w, b, y, nx);
            else
                amx_unit(i, M, N, K, xp, w, b, y, nx);
        }
#pragma omp single nowait
        amx_rest(M, N, K, x, w, b, y);
#pragma omp barrier
        return;
    }
#endif
    (void)scratch;
    const int n = units(N, K);
#pragma omp for schedule(static) nowait
    for (int i = 0; i < n; i++) unit(i, M, N, K, x, w, b, y);
#pragma omp single nowait
    rest(M, N, K, x, w, b, y);
#pragma omp barrier
}

#include "fused_layer.h"
#include "read_probe.h"

/* 0 on success; 1 for a shape it does not take (K not a multiple of 32). */
int speclab_bgemv(int M, int N, int K, const uint16_t *x, const uint16_t *w, const uint16_t *b, uint16_t *y,
                  int threads) {
    if (K % 32 != 0 || M < 1 || N < 1) return 1;
    /* a small weight (the 0.5B draft's key / value projections: 0.2 MB) is not worth waking a second thread:
     * under OMP_WAIT_POLICY=PASSIVE each parallel region costs ~50 µs of wake-up here */
    if ((long long)N * K * 2 < (1LL << 20)) threads = 1;
#ifdef __AMX_BF16__
    if (amx_takes(N)) { /* par_gemv's tiles, in a region of their own (its scratch: packed activations only) */
        float *scratch = M == 1 ? NULL : (float *)malloc(sizeof(float) * FL_SCRATCH_FLOATS(M, K));
        if (M > 1 && !scratch) return 2;
#pragma omp parallel num_threads(threads)
        par_gemv(M, N, K, x, scratch, w, b, y);
        free(scratch);
        return 0;
    }
#endif
    const int n = units(N, K);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < n; i++) unit(i, M, N, K, x, w, b, y);
    rest(M, N, K, x, w, b, y);
    return 0;
}

/* Attention of q query rows against a cache of L keys, each row alone (batch-invariant, like the linears):
 *   row i sees keys 0 … n_i − 1, n_i = L − q + i + 1;  out[i,h] = softmax(scale · Q[i,h] · K[kv(h), :n_i]ᵀ) · V[kv(h), :n_i]
 * with kv(h) = h / (H / Hkv) (grouped-query attention). Q, out: [q, H, D] contiguous bf16; K, V: bf16 with
 * a stride `hs` between heads and D between positions (views of a preallocated cache). D a multiple of 32.
 * Scores and the weighted sum in float32; the softmax subtracts the row's maximum. */
int speclab_attn(int q, int H, int Hkv, int D, int L, const uint16_t *Q, const uint16_t *K, const uint16_t *V,
                 long long hs, float scale, uint16_t *out, int threads) {
    if (D % 32 != 0 || D > 512 || H % Hkv != 0 || q < 1 || q > L) return 1;
    const int group = H / Hkv, steps = D / 32;
#pragma omp parallel num_threads(threads)
    {
        float *s = (float *)malloc(sizeof(float) * (size_t)L);
#pragma omp for schedule(static)
        for (int t = 0; t < q * H; t++) {
            const int i = t / H, h = t % H, n = L - q + i + 1;
            const uint16_t *qr = Q + ((size_t)i * H + h) * D;
            const uint16_t *kh = K + (size_t)(h / group) * hs, *vh = V + (size_t)(h / group) * hs;
            __m512bh qv[16];
            for (int c = 0; c < steps; c++) qv[c] = (__m512bh)_mm512_loadu_si512((const void *)(qr + 32 * c));
            float mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                const uint16_t *kr = kh + (size_t)j * D;
                __m512 acc = _mm512_setzero_ps();
                for (int c = 0; c < steps; c++)
                    acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512((const void *)(kr + 32 * c)), qv[c]);
                float v = hsum512(acc) * scale;
                s[j] = v;
                if (v > mx) mx = v;
            }
            float sum = 0.f;
            for (int j = 0; j < n; j++) {
                s[j] = expf(s[j] - mx);
                sum += s[j];
            }
            const float inv = 1.f / sum;
            __m512 o[32]; /* D / 16 float32 lanes */
            for (int c = 0; c < 2 * steps; c++) o[c] = _mm512_setzero_ps();
            for (int j = 0; j < n; j++) {
                const __m512 p = _mm512_set1_ps(s[j] * inv);
                const uint16_t *vr = vh + (size_t)j * D;
                for (int c = 0; c < 2 * steps; c++) {
                    __m256i raw = _mm256_loadu_si256((const __m256i *)(vr + 16 * c));
                    __m512 vf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
                    o[c] = _mm512_fmadd_ps(p, vf, o[c]);
                }
            }
            uint16_t *orow = out + ((size_t)i * H + h) * D;
            for (int c = 0; c < 2 * steps; c++) {
                float buf[16];
                _mm512_storeu_ps(buf, o[c]);
                for (int e = 0; e < 16; e++) orow[16 * c + e] = f32_to_bf16(buf[e]);
            }
        }
        free(s);
    }
    return 0;
}
