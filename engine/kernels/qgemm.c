/* Weight-only quantized matmul for x86 CPUs: y[M,N] = x[M,K] · Ŵ[N,K]ᵀ. Two builds of this file:
 * with AVX-512 VNNI (integer dot products by vpdpbusd, two groups per 512-bit step) and with AVX2 only
 * (vpmaddubsw + vpmaddwd in 128-bit steps, `rows_avx2`; an 8-bit weight is split into its two nibbles so no
 * 16-bit sum saturates).
 *
 * Weights, per output row n and group g of 32 inputs: Ŵ = s[n,g]·q + mn[n,g], q unsigned
 * (4-bit: 0…15, two per byte; 6-bit: 0…63; 8-bit: 0…255), s and mn in fp16. Packing of a 4-bit group (16 bytes):
 * byte j holds q[j] in its low nibble and q[16 + j] in its high nibble. A 6-bit group is its low nibbles packed
 * as a 4-bit group (16 bytes) and its top two bits (8 bytes: byte j holds those of q[j], q[8 + j], q[16 + j],
 * q[24 + j] in bit pairs 0–1, 2–3, 4–5, 6–7), laid out a pair of groups at a time — 16 + 16 bytes of nibbles,
 * then 8 + 8 of top bits, 48 bytes (a last lone group: 16 + 8) — so a row is one stream (ROW_BYTES: 3K/4).
 * Q4K (bits = 41): GGUF Q4_K blocks as the file stores them — per 256 weights of a row, 144 bytes: d and dmin
 * (fp16), 12 bytes of 6-bit scale and minimum codes sc_j, m_j for its 8 groups (llama.cpp's get_scale_min_k4
 * packing), 128 bytes of nibbles, a pair of groups per 32 bytes (group 2c the low nibbles of bytes 32c … 32c+31,
 * group 2c+1 the high ones); s = d·sc_j and mn = −dmin·m_j in float32 (exact products), so Ŵ is the GGUF's own
 * d·sc·q − dmin·m, at 4.5 bits a weight where the fp16 scale and minimum per 32 make 5.
 * Q50 (bits = 50) and Q80 (bits = 80): GGUF Q5_0 and Q8_0 blocks as the file stores them, one per group of 32
 * weights, its fp16 scale d first. Q5_0, 22 bytes: d, 4 bytes qh (bit j the fifth bit of q[j]), 16 bytes of
 * nibbles packed as a 4-bit group above; Ŵ = d·(q − 16), q ∈ 0…31 — 5.5 bits a weight where our 8-bit groups take
 * 9. Q8_0, 34 bytes: d, 32 signed bytes; Ŵ = d·q, read as the unsigned q ^ 0x80 with d·(q' − 128) — 8.5 bits. So
 * s = d and mn = −16·d (−128·d): the AVX2 build sums the minimum terms as d·c and scales them by −16 (−128) once,
 * exactly; the VNNI build starts each group's integer dot product from −16·Σa (−128·Σa), exactly (b32_prep).
 * Q6K (bits = 61): GGUF Q6_K blocks as stored (q6k_rows.h gives the layout and the VNNI build's loop; the AVX2 build
 * reads a group of 32 as two sub-blocks of 16, each sum scaled by its int8 code in vpmaddwd, and takes the −32 offsets
 * from q6k_prep as the VNNI build does). Q5R (bits = 55), the VNNI build only: Q5_0 blocks regrouped four to 88 bytes
 * without loss (q5_runs.h).
 * Activations are quantized per row and group: x ≈ d[m,g]·a, a ∈ [−127, 127] int8, d = max|x| / 127.
 * Then  y[m,n] = Σ_g d[m,g] · ( s[n,g] · Σ_k q·a  +  mn[n,g] · Σ_k a ).
 *
 * Every y[m,n] is computed by the same sequence of operations whatever M is (rows are independent and
 * the group order is fixed), so a k-token verify gives bit-identical logits to k one-token steps:
 * greedy speculative decoding reproduces autoregressive decoding exactly on this path.
 * Built by engine/kernels/qkernel.py; called through ctypes with raw pointers.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"

#define GROUP 32
/* MCHUNK: activation rows sharing one pass over a weight block. AVX-512 has 32 vector registers, room for
 * 8 rows' accumulators; AVX2 has 16, and 8 rows × 2 weight rows of accumulators spill: measured on a
 * 2-core Zen 1 (K = 1536, N = 8960, 4-bit), 4 rows run a prefill at 61.5–62.0 GFLOP/s against 55.5–55.9
 * for 8 (M = 8 … 300, bit-identical output); M = 1 is unchanged. */
#if defined(__AVX512VNNI__)
#define MCHUNK 8
#else
#define MCHUNK 4
#endif
#define MAXG 512 /* K ≤ 16384 */
#define Q4K 41 /* GGUF Q4_K blocks verbatim (the header above); K a multiple of 256 */
#define Q50 50 /* GGUF Q5_0 blocks verbatim (the header above) */
#define Q80 80 /* GGUF Q8_0 blocks verbatim */
#define Q6K 61 /* GGUF Q6_K blocks verbatim (q6k_rows.h's layout; both builds); K a multiple of 256 */
#define Q6K_BYTES 210
#define Q5R 55 /* GGUF Q5_0 blocks regrouped four to 88 bytes (q5_runs.h; the VNNI build only); K a multiple of 128 */
#define Q4KT 43 /* GGUF Q4_K blocks regrouped sixteen rows at a time (qtiles.h; the AMX build only); K % 256 = 0, N % 16 = 0 */
#define Q6KT 63 /* GGUF Q6_K blocks regrouped likewise (qtiles.h; the AMX build only) */
#define IS_Q6(bits) ((bits) == Q6K || (bits) == Q6KT) /* c holds q6k_prep's offsets for these */
#define IS_TILED(bits) ((bits) == Q4KT || (bits) == Q6KT) /* rows in sixteens (N % 16 = 0) */
#define Q6K_OK(K) ((K) % 256 == 0)
#if defined(__AVX512VNNI__)
#define Q5R_OK(K) ((K) % 128 == 0)
#else
#define Q5R_OK(K) 0
#endif
#if defined(__AVX512VNNI__)
#define Q4KT_OK(K) ((K) % 256 == 0)
#else
#define Q4KT_OK(K) 0
#endif
#define B32_BYTES(bits) ((bits) == Q50 ? 22 : 34) /* one Q5_0 / Q8_0 block: 32 weights */
#define B32_OFF(bits) ((bits) == Q50 ? -16.f : -128.f) /* its minimum term per unit of d */
#define IS_B32(bits) ((bits) == Q50 || (bits) == Q80)
#define ROW_BYTES(bits, K) ((bits) == 4 ? (size_t)(K) / 2 : (bits) == 6 ? (size_t)(K) / 4 * 3 \
                            : ((bits) == Q4K || (bits) == Q4KT) ? (size_t)(K) / 256 * 144 : IS_Q6(bits) ? (size_t)(K) / 256 * 210 \
                            : (bits) == Q5R ? (size_t)(K) / 128 * 88 \
                            : IS_B32(bits) ? (size_t)(K) / GROUP * B32_BYTES(bits) : (size_t)(K))
#define BITS_OK(bits, K) ((bits) == 4 || (bits) == 6 || (bits) == 8 || IS_B32(bits) || ((bits) == Q4K && (K) % 256 == 0) \
                          || ((bits) == Q6K && Q6K_OK(K)) || ((bits) == Q5R && Q5R_OK(K)) \
                          || (IS_TILED(bits) && Q4KT_OK(K)))

/* The fp16 scale d of a Q5_0 / Q8_0 block (its first two bytes; blocks are not 2-byte aligned in a row). */
static inline float b32_d(const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return _cvtsh_ss(h);
}

/* Block blk's eight scales d·sc_j into *sc and minimum terms −dmin·m_j into *mn (float32, exact products), the
 * code bytes unpacked in vector lanes (a row's scales decoded one by one made the 4-bit product compute-bound at
 * half its read speed). The 12 code bytes as three little-endian words w0, w1, w2: sc_0…3 = w0's bytes & 63,
 * m_0…3 = w1's & 63, sc_4…7 = w2's & 15 with w0's top two bits above, m_4…7 = w2's >> 4 with w1's top bits above.
 * Dwords of the block's first 16 bytes: 0 = d | dmin, 1 = w0, 2 = w1,
 * 3 = w2; lanes 1, 2 of (v & 63) are sc_0…3 and m_0…3, of ((w2, w2 >> 4) & 15) | ((w0, w1) >> 2 & 0x30) sc_4…7
 * and m_4…7. */
static inline void q4k_block(const uint8_t *blk, __m256 *sc, __m256 *mn) {
    const __m128i v = _mm_loadu_si128((const __m128i *)blk);
    const __m128i low = _mm_and_si128(v, _mm_set1_epi8(0x3f));                                   /* [·, sc lo, m lo, ·] */
    const __m128i w22 = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0xff), _mm_setr_epi32(0, 0, 0, 4));  /* lane 2: w2, 3: w2 >> 4 */
    const __m128i top = _mm_and_si128(_mm_srli_epi32(v, 2), _mm_set1_epi8(0x30));               /* lanes 1, 2: w0, w1 top bits */
    const __m128i high = _mm_or_si128(_mm_and_si128(w22, _mm_set1_epi8(0x0f)), _mm_shuffle_epi32(top, 0x90));  /* lanes 2, 3 */
    /* sc = lanes (low 1, high 2), m = lanes (low 2, high 3) */
    const __m128i scb = _mm_unpacklo_epi32(_mm_shuffle_epi32(low, 0x01), _mm_shuffle_epi32(high, 0x02));
    const __m128i mb = _mm_unpacklo_epi32(_mm_shuffle_epi32(low, 0x02), _mm_shuffle_epi32(high, 0x03));
    const __m128 dd = _mm_cvtph_ps(v);  /* lanes 0, 1: d, dmin */
    *sc = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(scb)), _mm256_broadcastss_ps(dd));
    *mn = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mb)),
                        _mm256_broadcastss_ps(_mm_xor_ps(_mm_movehdup_ps(dd), _mm_set1_ps(-0.f))));
}

/* A Q4_K row's group scales s_g = d·sc_g and minimum terms mn_g = −dmin·m_g (float32), G groups (q4k_block's
 * values, a block at a time). */
static inline void q4k_scales(const uint8_t *wr, int G, float *sg, float *mg) {
    for (int b = 0; b < G / 8; b++) {
        __m256 sv, mv;
        q4k_block(wr + (size_t)b * 144, &sv, &mv);
        _mm256_storeu_ps(sg + 8 * b, sv);
        _mm256_storeu_ps(mg + 8 * b, mv);
    }
}

#if defined(__AVX512VNNI__)
/* q4k_block in one 512-bit pass: the 16 code bytes [sc_0…7, m_0…7] gathered in one vector (dwords w0, w1 → low six
 * bits; w2, w2 >> 4 → low four, with w0, w1's top two above), widened at once and multiplied by [d ×8, −dmin ×8].
 * The same products, so the same values, in about 15 operations instead of 25: at one activation row a Q4_K row's
 * scales are a sixth of its work. */
static inline void q4k_block512(const uint8_t *blk, __m256 *sc, __m256 *mn) {
    const __m128i v = _mm_loadu_si128((const __m128i *)blk);
    const __m128i w01 = _mm_shuffle_epi32(v, 0x09);  /* [w0, w1, ·, ·] */
    const __m128i lo = _mm_and_si128(w01, _mm_set1_epi8(0x3f));
    const __m128i hi = _mm_or_si128(
        _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, 0xff), _mm_setr_epi32(0, 4, 0, 0)), _mm_set1_epi8(0x0f)),
        _mm_and_si128(_mm_srli_epi32(w01, 2), _mm_set1_epi8(0x30)));
    const __m512 codes = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi32(lo, hi)));  /* sc_0…7, m_0…7 */
    const __m128 dd = _mm_mul_ps(_mm_permute_ps(_mm_cvtph_ps(v), 0x04), _mm_setr_ps(1.f, -1.f, 0.0625f, 0.f));  /* d, −dmin, d/16 */
    const __m512 r = _mm512_mul_ps(codes, _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 2, 0, 2, 0, 2, 0, 2, 0),
                                                                _mm512_castps128_ps512(dd)));
    *sc = _mm512_castps512_ps256(r);
    *mn = _mm512_extractf32x8_ps(r, 1);
}
#endif

/* Where a Q4_K row keeps group g's 32 bytes of nibbles (shared with its pair), and which half is g's. */
#define Q4K_NIB(g) ((size_t)(g) / 8 * 144 + 16 + (size_t)((g) % 8) / 2 * 32)

/* Where group g of a 6-bit row keeps its nibbles (NIB6) and its top bits (TOP6), G groups a row. */
#define NIB6(g) ((size_t)(g) / 2 * 48 + (size_t)((g) & 1) * 16)
#define TOP6(g, G) ((size_t)(g) / 2 * 48 + (((g) & 1) ? 40 : ((g) + 1 < (G) ? 32 : 16)))

/* q[0…31] of group g of a 6-bit row, one byte each: the odd last group's (and speclab_dequant's) unpacking. */
static inline void unpack6(const uint8_t *wr, int K, int g, uint8_t q[32]) {
    const uint8_t *lo = wr + NIB6(g), *hi = wr + TOP6(g, K / GROUP);
    for (int j = 0; j < 32; j++)
        q[j] = (uint8_t)((j < 16 ? lo[j] & 0x0f : lo[j - 16] >> 4) | (((hi[j % 8] >> (2 * (j / 8))) & 3) << 4));
}

#if defined(__AVX512VNNI__)
/* Σ of q[j]·x[j] over each 4 bytes: q unsigned (≤ 15 for 4-bit, ≤ 255 for 8-bit), x signed. */
static inline __m256i dot32(__m256i q, __m256i x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x);
}
#endif

static inline float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

#if defined(__AVX512VNNI__)
/* The sum of 16 lanes: the two 256-bit halves added lane by lane, then hsum256 (one order for every row body). */
static inline float hsum512(__m512 v) {
    return hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}
#endif

/* Quantize activations: a[m, k] int8, d[m, g], c[m, g] = d · Σ a over the group. Per group of 32:
 * d = max|x| / 127, a = lrint(x / d) clamped to ±127, in eight-lane steps (the same operations as a scalar loop:
 * the max ignores a NaN as `av > amax` does, cvtps rounds to nearest even as lrintf does, a NaN quotient
 * becomes 0 as the int of lrintf's long gives, the sum is exact). */
static void quantize_x(const uint16_t *x, int M, int K, int8_t *a, float *d, float *c) {
    const int G = K / GROUP;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int m = 0; m < M; m++) {
        for (int g = 0; g < G; g++) {
            const uint16_t *xs = x + (size_t)m * K + (size_t)g * GROUP;
            __m256 v[4], mx = _mm256_setzero_ps();
            for (int i = 0; i < 4; i++) {
                v[i] = _mm256_castsi256_ps(_mm256_slli_epi32(
                    _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(xs + 8 * i))), 16));
                mx = _mm256_max_ps(_mm256_and_ps(v[i], absmask), mx);  /* a NaN lane keeps mx */
            }
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
            const float amax = _mm_cvtss_f32(h);
            const float dd = amax / 127.f, inv = dd > 0.f ? 1.f / dd : 0.f;
            const __m256 iv = _mm256_set1_ps(inv);
            __m256i q[4], sum = _mm256_setzero_si256();
            for (int i = 0; i < 4; i++) {
                __m256 t = _mm256_mul_ps(v[i], iv);
                t = _mm256_and_ps(t, _mm256_cmp_ps(t, t, _CMP_ORD_Q));  /* NaN → 0, as (int)lrintf gives */
                q[i] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(t), lim), nlim);
                sum = _mm256_add_epi32(sum, q[i]);
            }
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            _mm256_storeu_si256((__m256i *)(a + (size_t)m * K + (size_t)g * GROUP), _mm256_permutevar8x32_epi32(p, order));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
            d[(size_t)m * G + g] = dd;
            c[(size_t)m * G + g] = dd * (float)_mm_cvtsi128_si32(s4);
        }
    }
}

/* c16[m, j] = −32 · d[m, j/2] · Σ a over sub-block j of 16 (K / 16 floats a row). */
static void q6k_prep(int M, int K, const int8_t *a, const float *d, float *c16) {
    for (int m = 0; m < M; m++)
        for (int j = 0; j < K / 16; j++) {
            int32_t sum = 0;
            for (int t = 0; t < 16; t++) sum += a[(size_t)m * K + (size_t)j * 16 + t];
            c16[(size_t)m * (K / 16) + j] = -32.f * d[(size_t)m * (K / GROUP) + j / 2] * (float)sum;
        }
}

#if defined(__AVX512VNNI__)
/* VPF: software prefetch this many bytes ahead in the weight rows, for rows of at most VPF_ROW bytes (pf below).
 * Why: rows of a few hundred bytes (4-bit, K = 576 … 1536: 288–768 B) come one after another, each with its own
 * scale and minimum set-up between them, and the hardware prefetchers alone left the reads at 21–29 GB/s from
 * memory. Measured M = 1, 2 threads, a 2-core Zen 4 EPYC, from memory (hand harness over the library, five rounds
 * interleaved, a calm spell of the host): 4-bit 8960×1536 22.1–28.8 → 29.8–31.4 GB/s, 2048×1536 28.0–29.6 →
 * 33.3–33.7, 1536×576 24.7–25.7 → 25.9–29.2, 576×576 20.5–21.4 → 23.8–24.4; the 8-bit head (151936×1536) alike
 * with and without (33.3–35.5 / 34.2–35.9); long rows (K = 8960) read as fast without, so they take none. 1024 B
 * ahead was less, 4096 and 8192 no better. Only reads move: the bits are unchanged. */
#ifndef VPF
#define VPF 2048
#endif
#ifndef VPF_ROW
#define VPF_ROW 2048
#endif

/* Rows N0…N1 for MC activation rows (MC a compile-time constant after inlining, so the accumulators
 * live in registers; two per row, over even and odd groups, to hide the FMA latency). A 6-bit pair of groups is
 * read as a 4-bit one, its top bits added by one shuffle, one shift per 16-bit word, one shift and one ternary
 * op: q stays 0…63 unsigned, so vpdpbusd takes it as it takes 4- and 8-bit q. */
static inline __attribute__((always_inline)) void rows_mc(const int MC, int bits, int N0, int N1, int K,
        const int8_t *a, const float *d, const float *c, const uint8_t *w, const uint16_t *s,
        const uint16_t *mn, uint16_t *y, int ldy) {
    const int G = K / GROUP;
    const size_t row_bytes = ROW_BYTES(bits, K);
    const int pf = row_bytes <= VPF_ROW;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    /* 6-bit high bits for groups g, g+1 (16 bytes, broadcast to the four 128-bit lanes): lane L holds bytes
     * (L/2)·16 … of the pair's 64 q, so byte b of lane L takes source byte 8·(L/2) + b mod 8, shifted right by
     * 2·(2·(L mod 2) + b/8), as a 16-bit shift (both bytes of a word share the count) */
    static const int8_t hctl[64] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3,
                                    4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10,
                                    11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15};
    static const int16_t hcnt[32] = {0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6,
                                     0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6};
    const __m512i hsh = _mm512_loadu_si512((const void *)hctl), hsc = _mm512_loadu_si512((const void *)hcnt);
    const __m512i top2 = _mm512_set1_epi8(0x30);
    for (int n = N0; n < N1; n++) {
        __m256 acc0[MCHUNK], acc1[MCHUNK];
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) {
            acc0[m] = _mm256_setzero_ps();
            acc1[m] = _mm256_setzero_ps();
        }
        const uint8_t *wr = w + (size_t)n * row_bytes;
        const uint16_t *sr = s + (size_t)n * G, *mr = mn + (size_t)n * G;
        /* sd[m][g] = s[n,g] · d[m,g], eight groups per step, so the inner loop only broadcasts a load */
        float sd[MCHUNK][MAXG] __attribute__((aligned(32)));
        int e = 0;
        for (; e + 8 <= G; e += 8) {
            __m256 sv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sr + e)));
#pragma GCC unroll 8
            for (int m = 0; m < MC; m++) _mm256_store_ps(&sd[m][e], _mm256_mul_ps(sv, _mm256_loadu_ps(d + (size_t)m * G + e)));
        }
        for (; e < G; e++) {
            float sv = _cvtsh_ss(sr[e]);
            for (int m = 0; m < MC; m++) sd[m][e] = sv * d[(size_t)m * G + e];
        }
        /* two groups per 512-bit step: lanes 0–7 hold group g, lanes 8–15 group g + 1 */
        const __m512i pairidx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
        __m512 acc[MCHUNK];
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) acc[m] = _mm512_setzero_ps();
        int g = 0;
        for (; g + 1 < G; g += 2) {
            __m512i q;
            if (pf) {  /* a line per 2 groups of 8-bit, per 4 of 4-bit: one in two is a repeat, and costs nothing */
                _mm_prefetch((const char *)(wr + (size_t)g * (bits == 8 ? GROUP : bits == 6 ? 24 : 16) + VPF), _MM_HINT_T0);
                if (bits == 8) _mm_prefetch((const char *)(wr + (size_t)g * GROUP + VPF + 32), _MM_HINT_T0);
            }
            if (bits != 8) {
                __m256i p = _mm256_loadu_si256((const __m256i *)(wr + (bits == 6 ? NIB6(g) : (size_t)g * 16)));  /* groups g, g+1 */
                __m256i lo = _mm256_and_si256(p, low4), hi = _mm256_and_si256(_mm256_srli_epi16(p, 4), low4);
                q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(lo, hi, 0x20)),
                                       _mm256_permute2x128_si256(lo, hi, 0x31), 1);
                if (bits == 6) {  /* q |= (top two bits) << 4; 0xF8: A | (B & C) */
                    __m512i h = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(wr + TOP6(g, G))));
                    h = _mm512_slli_epi16(_mm512_srlv_epi16(_mm512_shuffle_epi8(h, hsh), hsc), 4);
                    q = _mm512_ternarylogic_epi32(q, h, top2, 0xF8);
                }
            } else {
                q = _mm512_loadu_si512((const void *)(wr + (size_t)g * GROUP));
            }
#pragma GCC unroll 8
            for (int m = 0; m < MC; m++) {
                __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q,
                                                  _mm512_loadu_si512((const void *)(a + (size_t)m * K + (size_t)g * GROUP)));
                __m512 sc = _mm512_permutexvar_ps(pairidx, _mm512_castps128_ps512(
                    _mm_castpd_ps(_mm_load_sd((const double *)&sd[m][g]))));
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sc, acc[m]);
            }
        }
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++)
            acc0[m] = _mm256_add_ps(_mm512_castps512_ps256(acc[m]), _mm512_extractf32x8_ps(acc[m], 1));
        for (; g < G; g++) {  /* an odd last group */
            __m256i q0;
            if (bits == 4) {
                __m128i p = _mm_loadu_si128((const __m128i *)(wr + (size_t)g * 16));
                q0 = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(p, 4), p), low4);
            } else if (bits == 6) {
                uint8_t t[32];
                unpack6(wr, K, g, t);
                q0 = _mm256_loadu_si256((const __m256i *)t);
            } else {
                q0 = _mm256_loadu_si256((const __m256i *)(wr + (size_t)g * GROUP));
            }
#pragma GCC unroll 8
            for (int m = 0; m < MC; m++) {
                __m256i d0 = dot32(q0, _mm256_loadu_si256((const __m256i *)(a + (size_t)m * K + (size_t)g * GROUP)));
                acc0[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_broadcast_ss(&sd[m][g]), acc0[m]);
            }
        }
        /* the groups' minimum terms: Σ_g mn[n,g] · c[m,g], eight groups per step */
        __m256 mac[MCHUNK];
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) mac[m] = _mm256_setzero_ps();
        int h = 0;
        for (; h + 8 <= G; h += 8) {
            __m256 mv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mr + h)));
#pragma GCC unroll 8
            for (int m = 0; m < MC; m++) mac[m] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(c + (size_t)m * G + h), mac[m]);
        }
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) {
            float tail = 0.f;
            for (int t = h; t < G; t++) tail += _cvtsh_ss(mr[t]) * c[(size_t)m * G + t];
            y[(size_t)m * ldy + n] = f32_to_bf16(hsum256(_mm256_add_ps(acc0[m], acc1[m])) + hsum256(mac[m]) + tail);
        }
    }
}

/* Q4K rows N0…N1 for MC activation rows, a block at a time: its scales and minima decoded (q4k_block512), its
 * minimum terms taken, then its two 64-byte runs of nibbles — the row read once, in order, prefetched VPF bytes
 * ahead. A run of 64 bytes holds groups (2r, 2r+1) in its first 32 bytes and (2r+2, 2r+3) in its last 32, low and
 * high nibbles; one AND with 0x0f gives [2r | 2r+2] and one with 0xf0 gives 16·[2r+1 | 2r+3], so the activations
 * come permuted (q4k_order: per block the groups 0, 2, 1, 3, 4, 6, 5, 7) and the odd groups' scales carry the 1/16
 * (q4k_block512: d/16 for them — a power of two, so every product and sum is the one without it). Per pair of groups
 * and row: vpdpbusd, an int→float conversion, a scale permute and an FMA; the nibbles cost one AND a pair. */
static inline __attribute__((always_inline)) void rows_q4k(const int MC, int N0, int N1, int K, const int8_t *a,
        const float *d, const float *c, const uint8_t *w, uint16_t *y, int ldy) {
    const int G = K / GROUP, B = K / 256;
    const size_t row_bytes = (size_t)B * 144;
    const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8((char)0xf0);
    /* which two of a block's eight group scales each of its four dot products takes: lanes 0–7, lanes 8–15 */
    const __m512i i02 = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i i13 = _mm512_add_epi32(i02, _mm512_set1_epi32(1));
    const __m512i i46 = _mm512_add_epi32(i02, _mm512_set1_epi32(4)), i57 = _mm512_add_epi32(i02, _mm512_set1_epi32(5));
    for (int n = N0; n < N1; n++) {
        const uint8_t *wr = w + (size_t)n * row_bytes;
        __m512 acc[MCHUNK];
        __m256 mac[MCHUNK];
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) acc[m] = _mm512_setzero_ps(), mac[m] = _mm256_setzero_ps();
        for (int b = 0; b < B; b++) {
            const uint8_t *blk = wr + (size_t)b * 144;
            _mm_prefetch((const char *)(blk + VPF), _MM_HINT_T0);
            _mm_prefetch((const char *)(blk + VPF + 64), _MM_HINT_T0);
            _mm_prefetch((const char *)(blk + VPF + 128), _MM_HINT_T0);
            __m256 sv, mv;
            q4k_block512(blk, &sv, &mv);
            const __m512i p0 = _mm512_loadu_si512((const void *)(blk + 16)), p1 = _mm512_loadu_si512((const void *)(blk + 80));
            const __m512i q02 = _mm512_and_si512(p0, low4), q13 = _mm512_and_si512(p0, high4);
            const __m512i q46 = _mm512_and_si512(p1, low4), q57 = _mm512_and_si512(p1, high4);
#pragma GCC unroll 8
            for (int m = 0; m < MC; m++) {
                const __m512 sd = _mm512_castps256_ps512(_mm256_mul_ps(sv, _mm256_loadu_ps(d + (size_t)m * G + (size_t)b * 8)));
                mac[m] = _mm256_fmadd_ps(mv, _mm256_loadu_ps(c + (size_t)m * G + (size_t)b * 8), mac[m]);
                const int8_t *am = a + (size_t)m * K + (size_t)b * 256;
                const __m512i z = _mm512_setzero_si512();
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, q02, _mm512_loadu_si512((const void *)am))),
                                         _mm512_permutexvar_ps(i02, sd), acc[m]);
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, q13, _mm512_loadu_si512((const void *)(am + 64)))),
                                         _mm512_permutexvar_ps(i13, sd), acc[m]);
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, q46, _mm512_loadu_si512((const void *)(am + 128)))),
                                         _mm512_permutexvar_ps(i46, sd), acc[m]);
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(z, q57, _mm512_loadu_si512((const void *)(am + 192)))),
                                         _mm512_permutexvar_ps(i57, sd), acc[m]);
            }
        }
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) {
            y[(size_t)m * ldy + n] = f32_to_bf16(hsum512(acc[m]) + hsum256(mac[m]));
        }
    }
}

/* The activations in the order rows_q4k reads them: per row and block of 256, groups 0, 2, 1, 3, 4, 6, 5, 7. */
static void q4k_order(int M, int K, const int8_t *a, int8_t *out) {
    static const int src[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (size_t blk = 0; blk < (size_t)M * K / 256; blk++)
        for (int j = 0; j < 8; j++) memcpy(out + blk * 256 + 32 * j, a + blk * 256 + 32 * src[j], 32);
}

/* The activations as Q5_0 / Q8_0 rows take them, per row m and pair p of groups (2p, 2p+1), 16 lanes each (a lone
 * last group: lanes 0–7): bz the integer minimum term −16·Σa of each group in its first lane (0 elsewhere), so
 * vpdpbusd starting from it sums Σ (q − 16)·a exactly and no float minimum term remains; dz the group's d[m,g] in
 * its eight lanes. Written once a product (M·⌈G/2⌉·64 bytes each), read from cache by every weight row. */
static void b32_prep(int M, int K, const int8_t *a, const float *d, int32_t *bz, float *dz) {
    const int G = K / GROUP, P = (G + 1) / 2;
    for (int m = 0; m < M; m++)
        for (int g = 0; g < 2 * P; g++) {
            int32_t *bv = bz + ((size_t)m * P + g / 2) * 16 + (g & 1) * 8;
            float *dv = dz + ((size_t)m * P + g / 2) * 16 + (g & 1) * 8;
            int32_t sum = 0;
            if (g < G)
                for (int j = 0; j < GROUP; j++) sum += a[(size_t)m * K + (size_t)g * GROUP + j];
            for (int l = 0; l < 8; l++) bv[l] = l == 0 ? -16 * sum : 0, dv[l] = g < G ? d[(size_t)m * G + g] : 0.f;
        }
}

/* Q5_0 / Q8_0 rows N0…N1 for MC activation rows (BITS a compile-time constant), a pair of blocks per 512-bit step:
 * the two scales d converted together and spread to their eight lanes; the 64 q built unsigned in their natural
 * order — Q5_0: each block's 16 nibble bytes broadcast to two 128-bit lanes, shifted by 0 / 4 per lane and masked,
 * then the fifth bits added by one byte-masked add whose mask is the two qh words themselves; Q8_0: the bytes ^ 0x80
 * (q + 128: its minimum term is −128·Σa = 8·bz); one vpdpbusd per activation row starting from bz, so
 * y = Σ_g d_a·d·Σ_k (q − 16)·a, the inner sums exact. Why this shape (a 2-core Zen 4, M = 1 from memory): a first
 * version with the nibbles interleaved by two cross-lane permutes and a float minimum term per pair ran ~34 µops a
 * pair and read Q5_0 at 23–27 GB/s, no faster in time than 8-bit groups at 9 bits a weight. The same operations
 * for a row whatever M is. */
static inline __attribute__((always_inline)) void rows_b32(const int MC, const int BITS, int N0, int N1, int K,
        const int8_t *a, const int32_t *bz, const float *dz, const uint8_t *w, uint16_t *y, int ldy) {
    const int G = K / GROUP, P = (G + 1) / 2, BB = B32_BYTES(BITS);
    const size_t row_bytes = (size_t)G * BB;
    const __m512i low4 = _mm512_set1_epi8(0x0f), five = _mm512_set1_epi8(0x10), flip = _mm512_set1_epi8((char)0x80);
    const long long S4 = 0x0004000400040004LL;  /* a shift of 4 in each 16-bit word */
    const __m512i nshift = _mm512_set_epi64(S4, S4, 0, 0, S4, S4, 0, 0);  /* 128-bit lanes 1, 3: the high nibbles */
    const __m512i pairidx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int n = N0; n < N1; n++) {
        const uint8_t *wr = w + (size_t)n * row_bytes;
        __m512 acc[MCHUNK];
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) acc[m] = _mm512_setzero_ps();
        int p = 0;
        for (; 2 * p + 1 < G; p++) {
            const uint8_t *b0 = wr + (size_t)(2 * p) * BB, *b1 = b0 + BB;
            _mm_prefetch((const char *)(b0 + VPF), _MM_HINT_T0);
            if (BITS == Q80) _mm_prefetch((const char *)(b0 + VPF + 64), _MM_HINT_T0);
            uint16_t h0, h1;
            memcpy(&h0, b0, 2);
            memcpy(&h1, b1, 2);
            const __m512 dw = _mm512_permutexvar_ps(pairidx, _mm512_castps128_ps512(
                _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(h0), h1, 1))));  /* d₀ ×8, d₁ ×8 */
            __m512i q;
            if (BITS == Q50) {
                const __m512i nib = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + 6)))),
                    _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b1 + 6))), 1);
                q = _mm512_and_si512(_mm512_srlv_epi16(nib, nshift), low4);
                uint32_t q0, q1;
                memcpy(&q0, b0 + 2, 4);
                memcpy(&q1, b1 + 2, 4);
                q = _mm512_mask_add_epi8(q, (__mmask64)q0 | (__mmask64)q1 << 32, q, five);
            } else {
                q = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))),
                                                        _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1), flip);
            }
#pragma GCC unroll 8
            for (int m = 0; m < MC; m++) {
                const size_t at = ((size_t)m * P + p) * 16;
                __m512i bias = _mm512_loadu_si512((const void *)(bz + at));
                if (BITS == Q80) bias = _mm512_slli_epi32(bias, 3);
                const __m512i dot = _mm512_dpbusd_epi32(bias, q, _mm512_loadu_si512((const void *)(a + (size_t)m * K + (size_t)(2 * p) * GROUP)));
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_loadu_ps(dz + at)), acc[m]);
            }
        }
        __m256 acc0[MCHUNK];
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++)
            acc0[m] = _mm256_add_ps(_mm512_castps512_ps256(acc[m]), _mm512_extractf32x8_ps(acc[m], 1));
        if (2 * p < G) {  /* a lone last block: the low halves of its pair's vectors */
            const uint8_t *b0 = wr + (size_t)(2 * p) * BB;
            const __m256 dw = _mm256_set1_ps(b32_d(b0));
            __m256i q0;
            if (BITS == Q50) {
                const __m256i nib = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + 6)));
                q0 = _mm256_and_si256(_mm256_srlv_epi16(nib, _mm512_castsi512_si256(nshift)), _mm512_castsi512_si256(low4));
                uint32_t qh;
                memcpy(&qh, b0 + 2, 4);
                q0 = _mm256_mask_add_epi8(q0, (__mmask32)qh, q0, _mm512_castsi512_si256(five));
            } else {
                q0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b0 + 2)), _mm512_castsi512_si256(flip));
            }
#pragma GCC unroll 8
            for (int m = 0; m < MC; m++) {
                const size_t at = ((size_t)m * P + p) * 16;
                __m256i bias = _mm256_loadu_si256((const __m256i *)(bz + at));
                if (BITS == Q80) bias = _mm256_slli_epi32(bias, 3);
                const __m256i dot = _mm256_dpbusd_epi32(bias, q0, _mm256_loadu_si256((const __m256i *)(a + (size_t)m * K + (size_t)(2 * p) * GROUP)));
                acc0[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(dw, _mm256_loadu_ps(dz + at)), acc0[m]);
            }
        }
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) y[(size_t)m * ldy + n] = f32_to_bf16(hsum256(acc0[m]));
    }
}

#include "q6k_rows.h"
#include "q5_runs.h"
#include "qtiles.h" /* the sixteen-row layouts; their tile product on the AMX build only */
#include "qlanes.h"

#else
/* AVX2 (no integer dot-product instruction): 128-bit steps, one group at a time, R weight rows at once
 * (their nibbles unpacked once, the activation loads shared). Why this shape (measured on a 2.0 GHz Zen 1
 * EPYC, where a 256-bit op is two 128-bit ones and vpmaddubsw / vpmaddwd share one pipe, so the multiplies
 * bound the loop): the two nibble halves' vpmaddubsw sums are added in 16 bits (|Σ| ≤ 4·15·127 = 7620, no
 * saturation) before one vpmaddwd, three multiplies a group instead of four; R = 2 rows give two independent
 * FMA chains. In cache, M = 1: 9.6 against 8.0 GB/s for the earlier 256-bit loop; M = 4: 2.8 against 2.4.
 * Each row's own sequence of operations does not depend on R or MC, so rows stay batch-invariant.
 * 8-bit weights: low and high nibbles as two 4-bit products, the high one weighted by 16 in vpmaddwd. */
/* QPF: software prefetch this many bytes ahead in each weight row. Without it the two interleaved rows read
 * from memory 10–22 % slower than the one-row loop they replace (K = 1536, 2 threads, Zen 1); measured
 * against that loop, M = 1, 4-bit: 256 → 0.89–1.03×, 512 → 0.91–0.98×, 1024 → 0.81–0.90×, 2048 → 0.80–0.93×,
 * 4096 → 0.78–0.80× (8-bit 0.79×, M = 4 0.85×). */
#ifndef QPF
#define QPF 4096
#endif
/* Bytes 0x10 where bits 0…15 of b are set (byte j for bit j): a Q5_0 group's fifth bits in 16 lanes. */
static inline __m128i fifth_bits(uint32_t b) {
    const __m128i v = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)b), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    const __m128i sel = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(v, sel), sel), _mm_set1_epi8(0x10));
}

/* One group g of rows n … n+R-1 against MC activation rows into acc (rows_avx2's loop body); g4 = g mod 4, a constant
 * where the caller's loop is unrolled four groups a pass (Q6K: which nibble and which qh bits the group takes). */
static inline __attribute__((always_inline)) void qgroup(const int MC, const int R, const int bits, int n, int g, const int g4, int K,
        int G, size_t row_bytes, const int8_t *a, const uint8_t *w, const float *sd, __m128 acc[2][MCHUNK]) {
    const __m128i low4 = _mm_set1_epi8(0x0f), ones = _mm_set1_epi16(1), sixteen = _mm_set1_epi16(16);
    __m128i lo[2][2], hi[2][2];  /* [row][16-byte half of an 8-bit group] */
    __m128i sc6[2][2];           /* Q6K: [row][half of the group] its sub-block's scale code, in every 16-bit lane */
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        const uint8_t *wr = w + (size_t)(n + r) * row_bytes;
        if (bits == Q4K) {  /* q[0…15] and q[16…31]: bytes 0–15 and 16–31 of the pair's run, g's nibble of each */
            const uint8_t *run = wr + Q4K_NIB(g);
            const int sh = (g & 1) * 4;
            lo[r][0] = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)run), sh), low4);
            hi[r][0] = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)(run + 16)), sh), low4);
            lo[r][1] = hi[r][1] = _mm_setzero_si128();
            continue;
        }
        /* Q6K: q6k_rows.h's layout; group g is (half h, quarter j = g4) of block g / 8, q ≤ 63. Four multiplies a
         * group (int6 takes six), more unpacking. Measured with the AVX2 build on a Zen 4 (no AVX2-only CPU at hand),
         * against int6 on the same weights, the 1.5B's shapes, two threads: 1.18–1.25× int6's time at M = 1 and
         * 0.88–1.18× at M = 4 (docs/results/kernels-qwen-avx2build-amd-epyc-avx512bf16.json, q6_k against qgemm6).
         * j a constant (variable shifts instead: 1.09× slower by hand) and the setup's scales in vectors (scalar: 28 %
         * of a row's time by hand). */
        if (bits == Q6K) {
            const uint8_t *blk = wr + (size_t)(g / 8) * Q6K_BYTES;
            const int h = (g % 8) / 4, j = g4;
            const uint8_t *ql = blk + 64 * h + 32 * (j & 1), *qh = blk + 128 + 32 * h;
            const __m128i top = _mm_set1_epi8(0x30);
            /* the half's eight scale codes as int16; sub-block 2j + t of the half spread to every lane by one shuffle */
            const __m128i codes = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(blk + 192 + 8 * h)));
            for (int t = 0; t < 2; t++) {  /* weights 16t … 16t+15: a nibble of ql, bits 2j, 2j+1 of qh moved to 4–5 */
                const __m128i l = _mm_loadu_si128((const __m128i *)(ql + 16 * t));
                const __m128i hb = _mm_loadu_si128((const __m128i *)(qh + 16 * t));
                const __m128i nib = _mm_and_si128(j < 2 ? l : _mm_srli_epi16(l, 4), low4);
                const __m128i hi2 = _mm_and_si128(j == 0 ? _mm_slli_epi16(hb, 4) : j == 1 ? _mm_slli_epi16(hb, 2)
                                                  : j == 2 ? hb : _mm_srli_epi16(hb, 2), top);
                const __m128i q = _mm_or_si128(nib, hi2);
                if (t == 0) lo[r][0] = q; else hi[r][0] = q;
                sc6[r][t] = _mm_shuffle_epi8(codes, _mm_set1_epi16((int16_t)((4 * j + 2 * t) | (4 * j + 2 * t + 1) << 8)));
            }
            lo[r][1] = hi[r][1] = _mm_setzero_si128();
            continue;
        }
        if (bits == Q50) {  /* as a 4-bit group with each q's fifth bit from qh: q ≤ 31, |Σ| ≤ 4·31·127 in 16 bits */
            const uint8_t *blk = wr + (size_t)g * 22;
            const __m128i p = _mm_loadu_si128((const __m128i *)(blk + 6));
            uint32_t qh;
            memcpy(&qh, blk + 2, 4);
            lo[r][0] = _mm_or_si128(_mm_and_si128(p, low4), fifth_bits(qh & 0xffff));
            hi[r][0] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(p, 4), low4), fifth_bits(qh >> 16));
            lo[r][1] = hi[r][1] = _mm_setzero_si128();
            continue;
        }
        if (bits == Q80) {  /* as an 8-bit group of the unsigned q ^ 0x80 */
            const uint8_t *blk = wr + (size_t)g * 34;
            const __m128i flip = _mm_set1_epi8((char)0x80);
            const __m128i p0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(blk + 2)), flip);
            const __m128i p1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(blk + 18)), flip);
            lo[r][0] = _mm_and_si128(p0, low4);
            hi[r][0] = _mm_and_si128(_mm_srli_epi16(p0, 4), low4);
            lo[r][1] = _mm_and_si128(p1, low4);
            hi[r][1] = _mm_and_si128(_mm_srli_epi16(p1, 4), low4);
            continue;
        }
        const uint8_t *wg = wr + (bits == 6 ? NIB6(g) : (size_t)g * (bits == 8 ? GROUP : 16));
        __m128i p = _mm_loadu_si128((const __m128i *)wg);
        lo[r][0] = _mm_and_si128(p, low4);
        hi[r][0] = _mm_and_si128(_mm_srli_epi16(p, 4), low4);
        if (bits == 6) {  /* as an 8-bit group: low nibbles of q[0…15] and q[16…31], then their top two bits */
            const __m128i three = _mm_set1_epi8(3);
            const __m128i h = _mm_loadl_epi64((const __m128i *)(wr + TOP6(g, G)));
            lo[r][1] = hi[r][0];
            hi[r][0] = _mm_and_si128(_mm_unpacklo_epi64(h, _mm_srli_epi16(h, 2)), three);
            hi[r][1] = _mm_and_si128(_mm_unpacklo_epi64(_mm_srli_epi16(h, 4), _mm_srli_epi16(h, 6)), three);
        } else if (bits == 8) {
            p = _mm_loadu_si128((const __m128i *)(wg + 16));
            lo[r][1] = _mm_and_si128(p, low4);
            hi[r][1] = _mm_and_si128(_mm_srli_epi16(p, 4), low4);
        } else {
            lo[r][1] = hi[r][1] = _mm_setzero_si128();  /* unused (bits is a constant here: no code) */
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MC; m++) {
        const int8_t *ag = a + (size_t)m * K + (size_t)g * GROUP;
        const __m128i a0 = _mm_loadu_si128((const __m128i *)ag), a1 = _mm_loadu_si128((const __m128i *)(ag + 16));
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            __m128i i32;
            if (bits == Q6K) {  /* each half its own sub-block scale: Σ q·a ≤ 2·63·127 in 16 bits, × sc (|sc| ≤ 128) in 32 */
                i32 = _mm_add_epi32(_mm_madd_epi16(_mm_maddubs_epi16(lo[r][0], a0), sc6[r][0]),
                                    _mm_madd_epi16(_mm_maddubs_epi16(hi[r][0], a1), sc6[r][1]));
            } else if (bits == 4 || bits == Q4K || bits == Q50) {  /* q[j] pairs with a[j] (low nibbles), q[16 + j] with a[16 + j] (high) */
                i32 = _mm_madd_epi16(_mm_add_epi16(_mm_maddubs_epi16(lo[r][0], a0), _mm_maddubs_epi16(hi[r][0], a1)), ones);
            } else {  /* q = lo + 16·hi, bytes 0–15 against a0, 16–31 against a1 */
                i32 = _mm_add_epi32(
                    _mm_madd_epi16(_mm_add_epi16(_mm_maddubs_epi16(lo[r][0], a0), _mm_maddubs_epi16(lo[r][1], a1)), ones),
                    _mm_madd_epi16(_mm_add_epi16(_mm_maddubs_epi16(hi[r][0], a0), _mm_maddubs_epi16(hi[r][1], a1)), sixteen));
            }
            acc[r][m] = _mm_fmadd_ps(_mm_cvtepi32_ps(i32), _mm_broadcast_ss(sd + ((size_t)r * MC + m) * G + g), acc[r][m]);
        }
    }
}

static inline __attribute__((always_inline)) void rows_avx2(const int MC, const int R, int bits, int n, int K,
        const int8_t *a, const float *d, const float *c, const uint8_t *w, const uint16_t *s,
        const uint16_t *mn, uint16_t *y, int ldy) {
    const int G = K / GROUP;
    const size_t row_bytes = ROW_BYTES(bits, K);
    /* sd[(r·MC + m)·G + g] = s[n+r, g] · d[m, g]: the inner loop then only broadcasts a load */
    float sd[2 * MCHUNK * MAXG] __attribute__((aligned(32)));
    float qm[2][MAXG] __attribute__((aligned(32)));  /* Q4K: the rows' minimum terms, decoded with their scales;
                                                       * Q5_0 / Q8_0: their scales d (× B32_OFF after the sum) */
    float q6s[2][bits == Q6K ? 2 * MAXG : 1] __attribute__((aligned(32)));  /* Q6K: d·sc_j per sub-block of 16 */
    __m128 acc[2][MCHUNK];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        const uint16_t *sr = s + (size_t)(n + r) * G;
        float *sdr = sd + (size_t)r * MC * G;
        int e = 0;
        if (bits == Q6K) {  /* the block's d for its eight groups; d·sc_j (exact: fp16 × int8) for the −32 offsets */
            const uint8_t *wr = w + (size_t)(n + r) * row_bytes;
            for (int b = 0; b < K / 256; b++) {
                uint16_t dh;
                memcpy(&dh, wr + (size_t)b * Q6K_BYTES + 208, 2);
                const __m256 db = _mm256_set1_ps(_cvtsh_ss(dh));
                const __m128i codes = _mm_loadu_si128((const __m128i *)(wr + (size_t)b * Q6K_BYTES + 192));
                _mm256_storeu_ps(q6s[r] + b * 16, _mm256_mul_ps(db, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes))));
                _mm256_storeu_ps(q6s[r] + b * 16 + 8,
                                 _mm256_mul_ps(db, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(codes, 8)))));
#pragma GCC unroll 8
                for (int m = 0; m < MC; m++)
                    _mm256_storeu_ps(sdr + (size_t)m * G + e, _mm256_mul_ps(db, _mm256_loadu_ps(d + (size_t)m * G + e)));
                e += 8;
            }
        }
        if (IS_B32(bits)) {  /* each block's d, one by one (they sit 22 or 34 bytes apart) */
            for (; e < G; e++) {
                const float sv = qm[r][e] = b32_d(w + (size_t)(n + r) * row_bytes + (size_t)e * B32_BYTES(bits));
                for (int m = 0; m < MC; m++) sdr[(size_t)m * G + e] = sv * d[(size_t)m * G + e];
            }
        }
        for (; e + 8 <= G; e += 8) {
            __m256 sv;
            if (bits == Q4K) {
                __m256 mv;
                q4k_block(w + (size_t)(n + r) * row_bytes + (size_t)e / 8 * 144, &sv, &mv);
                _mm256_store_ps(qm[r] + e, mv);
            } else {
                sv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sr + e)));
            }
#pragma GCC unroll 8
            for (int m = 0; m < MC; m++) _mm256_storeu_ps(sdr + (size_t)m * G + e, _mm256_mul_ps(sv, _mm256_loadu_ps(d + (size_t)m * G + e)));
        }
        for (; e < G; e++) {
            float sv = _cvtsh_ss(sr[e]);
            for (int m = 0; m < MC; m++) sdr[(size_t)m * G + e] = sv * d[(size_t)m * G + e];
        }
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) acc[r][m] = _mm_setzero_ps();
    }
    /* four groups a pass, the prefetch once per pass: one group a pass spent ~11 of its ~36 instructions on loop
     * and prefetch bookkeeping, and Zen 1 decodes ~4 a cycle, so the loop ran ~5 TSC cycles a group and row against
     * the 3 that its multiplies need (M = 1, 1536×1536 in cache). The groups still enter each accumulator in
     * order, so the bits are unchanged. */
    int g = 0;
    for (; g + 4 <= G; g += 4) {
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            const uint8_t *wg = w + (size_t)(n + r) * row_bytes + (bits == Q6K ? (size_t)g * Q6K_BYTES / 8
                                    : (size_t)g * (bits == 8 ? GROUP : bits == 6 ? 24 : bits == Q4K ? 18
                                                   : IS_B32(bits) ? B32_BYTES(bits) : 16));
            _mm_prefetch((const char *)(wg + QPF), _MM_HINT_T0);  /* a line a pass: 4 groups of 4-bit */
            if (bits != 4) _mm_prefetch((const char *)(wg + QPF + 64), _MM_HINT_T0);  /* 6-bit: 96 bytes a pass */
            if (bits == Q80) _mm_prefetch((const char *)(wg + QPF + 128), _MM_HINT_T0);  /* 136 bytes a pass */
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) qgroup(MC, R, bits, n, g + u, u, K, G, row_bytes, a, w, sd, acc);
    }
    for (; g < G; g++) qgroup(MC, R, bits, n, g, g % 4, K, G, row_bytes, a, w, sd, acc);  /* never Q6K: G % 8 == 0 */
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        const uint16_t *mr = mn + (size_t)(n + r) * G;
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) {  /* the groups' minimum terms: Σ_g mn[n,g] · c[m,g], eight groups per step */
            __m256 mac = _mm256_setzero_ps();
            int h = 0;
            float tail = 0.f;
            if (bits == Q6K) {  /* Σ_j (d·sc_j)·c16[m, j], c16 = q6k_prep's −32·d[m, j/2]·Σ a (K / 16 a row) */
                for (; h < K / 16; h += 8)
                    mac = _mm256_fmadd_ps(_mm256_loadu_ps(q6s[r] + h), _mm256_loadu_ps(c + (size_t)m * (K / 16) + h), mac);
            } else {
                for (; h + 8 <= G; h += 8)
                    mac = _mm256_fmadd_ps(bits == Q4K || IS_B32(bits) ? _mm256_load_ps(qm[r] + h)
                                                      : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(mr + h))),
                                          _mm256_loadu_ps(c + (size_t)m * G + h), mac);
                for (int t = h; t < G; t++) tail += (IS_B32(bits) ? qm[r][t] : _cvtsh_ss(mr[t])) * c[(size_t)m * G + t];
            }
            __m128 v = acc[r][m];
            v = _mm_add_ps(v, _mm_movehl_ps(v, v));
            v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
            const float mins = IS_B32(bits) ? B32_OFF(bits) * (hsum256(mac) + tail) : hsum256(mac) + tail;
            y[(size_t)m * ldy + n + r] = f32_to_bf16(_mm_cvtss_f32(v) + mins);
        }
    }
}

/* Rows N0…N1, two at a time (one left over alone), MC a compile-time constant in each body. */
static inline __attribute__((always_inline)) void rows_mc(const int MC, int bits, int N0, int N1, int K,
        const int8_t *a, const float *d, const float *c, const uint8_t *w, const uint16_t *s,
        const uint16_t *mn, uint16_t *y, int ldy) {
    int n = N0;
    if (bits == 4) {  /* bits a constant in each body */
        for (; n + 2 <= N1; n += 2) rows_avx2(MC, 2, 4, n, K, a, d, c, w, s, mn, y, ldy);
        if (n < N1) rows_avx2(MC, 1, 4, n, K, a, d, c, w, s, mn, y, ldy);
    } else if (bits == 6) {
        for (; n + 2 <= N1; n += 2) rows_avx2(MC, 2, 6, n, K, a, d, c, w, s, mn, y, ldy);
        if (n < N1) rows_avx2(MC, 1, 6, n, K, a, d, c, w, s, mn, y, ldy);
    } else if (bits == Q4K) {
        for (; n + 2 <= N1; n += 2) rows_avx2(MC, 2, Q4K, n, K, a, d, c, w, s, mn, y, ldy);
        if (n < N1) rows_avx2(MC, 1, Q4K, n, K, a, d, c, w, s, mn, y, ldy);
    } else if (bits == Q50) {
        for (; n + 2 <= N1; n += 2) rows_avx2(MC, 2, Q50, n, K, a, d, c, w, s, mn, y, ldy);
        if (n < N1) rows_avx2(MC, 1, Q50, n, K, a, d, c, w, s, mn, y, ldy);
    } else if (bits == Q80) {
        for (; n + 2 <= N1; n += 2) rows_avx2(MC, 2, Q80, n, K, a, d, c, w, s, mn, y, ldy);
        if (n < N1) rows_avx2(MC, 1, Q80, n, K, a, d, c, w, s, mn, y, ldy);
    } else if (bits == Q6K) {
        for (; n + 2 <= N1; n += 2) rows_avx2(MC, 2, Q6K, n, K, a, d, c, w, s, mn, y, ldy);
        if (n < N1) rows_avx2(MC, 1, Q6K, n, K, a, d, c, w, s, mn, y, ldy);
    } else {
        for (; n + 2 <= N1; n += 2) rows_avx2(MC, 2, 8, n, K, a, d, c, w, s, mn, y, ldy);
        if (n < N1) rows_avx2(MC, 1, 8, n, K, a, d, c, w, s, mn, y, ldy);
    }
}
#endif

/* lanes: the tile layouts' rows on vpdpbusd lanes (qlanes.h; a in quantize_x's layout) rather than on the tiles (a
 * in tile_acts' layout); the same bits either way (ql_lanes picks by a product's rows). */
static void rows(int mc, int bits, int lanes, int N0, int N1, int K, const int8_t *a, const float *d, const float *c,
                 const int32_t *bz, const float *dz, const uint8_t *w, const uint16_t *s, const uint16_t *mn,
                 uint16_t *y, int ldy) {
#if defined(__AVX512VNNI__)
/* One specialised body per chunk size: BODY(MC, …) with MC a constant 1…8. */
#define MC_CASES(BODY, ...) switch (mc) { \
            case 1: BODY(1, __VA_ARGS__); break; case 2: BODY(2, __VA_ARGS__); break; \
            case 3: BODY(3, __VA_ARGS__); break; case 4: BODY(4, __VA_ARGS__); break; \
            case 5: BODY(5, __VA_ARGS__); break; case 6: BODY(6, __VA_ARGS__); break; \
            case 7: BODY(7, __VA_ARGS__); break; default: BODY(8, __VA_ARGS__); break; }
    if (bits == Q4K) {  /* Q4_K rows: their own body (rows_q4k); a in q4k_order */
        MC_CASES(rows_q4k, N0, N1, K, a, d, c, w, y, ldy)
        return;
    }
    if (bits == Q6K) {  /* Q6_K rows: their own body (q6k_rows.h); c holds q6k_prep's offsets */
        MC_CASES(rows_q6k, N0, N1, K, a, d, c, w, y, ldy)
        return;
    }
    if (bits == Q5R) {  /* Q5_0 blocks four at a time (q5_runs.h); a in q5r_order */
        MC_CASES(rows_q5r, N0, N1, K, a, d, c, w, y, ldy)
        return;
    }
    if (bits == Q4KT) {  /* Q4_K on the lanes (qlanes.h) or the AMX build's tiles (qtiles.h), sixteen rows a unit: N0
                          * and N1 are multiples of 16; a is tile_acts' layout for the tiles */
#if defined(__AMX_INT8__)
        if (!lanes) MC_CASES(rows_qt_mc, 0, N0 / 16, N1 / 16, K, a, d, c, w, y, ldy)
        else
#endif
        MC_CASES(rows_ql_mc, 0, N0 / 16, N1 / 16, K, a, d, c, w, y, ldy)
        return;
    }
    if (bits == Q6KT) {  /* Q6_K likewise; c holds q6k_prep's offsets */
#if defined(__AMX_INT8__)
        if (!lanes) MC_CASES(rows_qt_mc, 1, N0 / 16, N1 / 16, K, a, d, c, w, y, ldy)
        else
#endif
        MC_CASES(rows_ql_mc, 1, N0 / 16, N1 / 16, K, a, d, c, w, y, ldy)
        return;
    }
    if (IS_B32(bits)) {  /* Q5_0 / Q8_0 rows: their own body (rows_b32), one per format and chunk size */
        if (bits == Q50) MC_CASES(rows_b32, Q50, N0, N1, K, a, bz, dz, w, y, ldy)
        else MC_CASES(rows_b32, Q80, N0, N1, K, a, bz, dz, w, y, ldy)
        return;
    }
#endif
    switch (mc) {  /* one specialised body per chunk size */
        case 1: rows_mc(1, bits, N0, N1, K, a, d, c, w, s, mn, y, ldy); break;
        case 2: rows_mc(2, bits, N0, N1, K, a, d, c, w, s, mn, y, ldy); break;
        case 3: rows_mc(3, bits, N0, N1, K, a, d, c, w, s, mn, y, ldy); break;
#if MCHUNK == 4
        default: rows_mc(4, bits, N0, N1, K, a, d, c, w, s, mn, y, ldy); break;
#else
        case 4: rows_mc(4, bits, N0, N1, K, a, d, c, w, s, mn, y, ldy); break;
        case 5: rows_mc(5, bits, N0, N1, K, a, d, c, w, s, mn, y, ldy); break;
        case 6: rows_mc(6, bits, N0, N1, K, a, d, c, w, s, mn, y, ldy); break;
        case 7: rows_mc(7, bits, N0, N1, K, a, d, c, w, s, mn, y, ldy); break;
        default: rows_mc(8, bits, N0, N1, K, a, d, c, w, s, mn, y, ldy); break;
#endif
    }
}

/* y[M, N] (bf16) = x[M, K] (bf16) · Ŵᵀ; returns 0, or −1 on a bad shape or allocation failure. */
int speclab_qgemm(int bits, int M, int N, int K, const uint16_t *x, const uint8_t *w, const uint16_t *s,
                  const uint16_t *mn, uint16_t *y, int nthreads) {
    if (!BITS_OK(bits, K) || K % GROUP || K / GROUP > MAXG || M < 1 || N < 1 || (IS_TILED(bits) && N % 16)) return -1;
    int G = K / GROUP;
    const size_t P16 = (size_t)(G + 1) / 2 * 16;  /* b32_prep's lanes a row */
    int8_t *a = (int8_t *)malloc((size_t)M * K);
    const size_t CW = IS_Q6(bits) ? (size_t)K / 16 : (size_t)G;  /* c's width: Q6_K's offsets per 16 (q6k_prep) */
    float *d = (float *)malloc(sizeof(float) * (size_t)M * G), *c = (float *)malloc(sizeof(float) * (size_t)M * CW);
    int32_t *bz = NULL;
    float *dz = NULL;
#if defined(__AVX512VNNI__)
    if (IS_B32(bits)) bz = (int32_t *)malloc(sizeof(int32_t) * M * P16), dz = (float *)malloc(sizeof(float) * M * P16);
    const int need_b32 = IS_B32(bits);
#else
    const int need_b32 = 0;
#endif
    if (!a || !d || !c || (need_b32 && (!bz || !dz))) {
        free(a); free(d); free(c); free(bz); free(dz);
        return -1;
    }
    quantize_x(x, M, K, a, d, c);
    if (IS_Q6(bits)) q6k_prep(M, K, a, d, c);  /* c's per-group sums are not read by Q6_K rows */
#if defined(__AVX512VNNI__)
    if (need_b32) b32_prep(M, K, a, d, bz, dz);
    if (bits == Q4K || bits == Q5R) {  /* rows_q4k's / rows_q5r's order of the activations (in place, via a copy) */
        int8_t *t = (int8_t *)malloc((size_t)M * K);
        if (!t) {
            free(a); free(d); free(c); free(bz); free(dz);
            return -1;
        }
        if (bits == Q4K) q4k_order(M, K, a, t);
        else q5r_order(M, K, a, t);
        memcpy(a, t, (size_t)M * K);
        free(t);
    }
#endif
#if defined(__AVX512VNNI__)
    const int lanes = IS_TILED(bits) && ql_lanes(M);
#else
    const int lanes = 0;  /* no sixteen-row layouts on the AVX2 build (refused above) */
#endif
#if defined(__AMX_INT8__)
    if (IS_TILED(bits) && !lanes) {  /* the activations as the tiles take them (tile_acts: 2·M·K bytes), in place of a */
        int8_t *t = (int8_t *)malloc((size_t)2 * M * K);
        if (!t) {
            free(a); free(d); free(c); free(bz); free(dz);
            return -1;
        }
        tile_acts(bits == Q4KT ? 64 : 32, M, K, a, t);
        free(a);
        a = t;
    }
#endif
    for (int m0 = 0; m0 < M; m0 += MCHUNK) {
        int mc = M - m0 < MCHUNK ? M - m0 : MCHUNK;
        const int8_t *am = a + (size_t)(IS_TILED(bits) && !lanes ? 2 : 1) * m0 * K;
        const float *dm = d + (size_t)m0 * G, *cm = c + (size_t)m0 * CW;
        const int32_t *bm = bz ? bz + (size_t)m0 * P16 : NULL;
        const float *zm = dz ? dz + (size_t)m0 * P16 : NULL;
        uint16_t *ym = y + (size_t)m0 * N;
        /* blocks of 64 rows; the tile layouts a block of sixteens a thread (their pipeline spans a call's units) */
        int block = IS_TILED(bits) ? (N / 16 + nthreads - 1) / nthreads * 16 : 64;
        int nb = (N + block - 1) / block;
#pragma omp parallel for schedule(static) num_threads(nthreads)
        for (int b = 0; b < nb; b++) {
            int n0 = b * block, n1 = n0 + block < N ? n0 + block : N;
            rows(mc, bits, lanes, n0, n1, K, am, dm, cm, bm, zm, w, s, mn, ym, N);
        }
    }
    free(a); free(d); free(c); free(bz); free(dz);
    return 0;
}

#include "qcodes.h"
#if defined(__AVX512VNNI__)
#include "qpanel.h"
#endif

/* A quantized product for the fused layer (fused_layer.h): up to three row segments stacked along N, each
 * packed as speclab_qgemm takes it — one segment where every projection of the product has the same bits,
 * one per projection where a GGUF mixes them (a Q6_K v_proj beside Q4_K q and k). */
struct qweight {
    int nseg;
    int rows[3], bits[3];
    const uint8_t *q[3];
    const uint16_t *s[3], *mn[3];
};

/* This thread's rows [r0, r1) of n inside a parallel region: its own run, cut at multiples of 16 (par_gemv reads them
 * in blocks of 64). Why not blocks of 64 shared out: SmolLM2's 576-row products are 9 blocks, 5 : 4 between two
 * threads (hand harness, its 30 layers' 8-bit products: ~2 % faster evenly cut). Each row is computed alone, so the
 * bits are the same. */
static inline void thread_rows(int n, int *r0, int *r1) {
    const int u16 = (n + 15) / 16, nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int e = (int)((long long)u16 * (t + 1) / nt) * 16;
    *r0 = (int)((long long)u16 * t / nt) * 16;
    *r1 = e < n ? e : n;
}

/* speclab_qgemm's product inside an OpenMP parallel region: activations quantized once (into `scratch`, which
 * holds FL_SCRATCH_FLOATS(M, K) floats: a, d, c and b32_prep's lanes), blocks of 64 rows shared out per segment,
 * then a barrier; the bias is added after the rounding, in bf16, as QGemmLinear.forward adds it. */
static void par_gemv(int M, int N, int K, const uint16_t *x, float *scratch, const void *wh, const uint16_t *b,
                     uint16_t *y) {
    const struct qweight *W = (const struct qweight *)wh;
    const int G = K / GROUP;
    const size_t P16 = (size_t)(G + 1) / 2 * 16;
    int8_t *a = (int8_t *)scratch;
    float *d = (float *)(a + (((size_t)M * K + 63) & ~(size_t)63)), *c = d + (size_t)M * G;
    int32_t *bz = (int32_t *)(c + (size_t)M * G);
    float *dz = (float *)(bz + (size_t)M * P16);
    int8_t *a4 = (int8_t *)(dz + (size_t)M * P16);  /* rows_q4k's order of a (the VNNI build) */
    float *c16 = (float *)(a4 + (((size_t)M * K + 63) & ~(size_t)63));  /* q6k_prep's offsets */
    int8_t *a5 = (int8_t *)(c16 + (size_t)M * (K / 16));  /* rows_q5r's order of a (the VNNI build) */
    int8_t *ax4 = a5 + (((size_t)M * K + 63) & ~(size_t)63), *ax6 = ax4 + (size_t)2 * M * K;  /* tile_acts (AMX build) */
    int any_b32 = 0, any_q4k = 0, any_q6k = 0, any_q5r = 0, any_q4kt = 0, any_q6kt = 0;
    for (int sg = 0; sg < W->nseg; sg++)
        any_b32 |= IS_B32(W->bits[sg]), any_q4k |= W->bits[sg] == Q4K, any_q6k |= IS_Q6(W->bits[sg]),
            any_q5r |= W->bits[sg] == Q5R, any_q4kt |= W->bits[sg] == Q4KT, any_q6kt |= W->bits[sg] == Q6KT;
#if defined(__AVX512VNNI__)
    const int lanes = ql_lanes(M);  /* the tile layouts' segments on lanes (a), not tiles (ax4, ax6) */
#else
    const int lanes = 0;  /* no sixteen-row layouts on the AVX2 build */
#endif
#pragma omp single
    {
        quantize_x(x, M, K, a, d, c);
        if (any_q6k) q6k_prep(M, K, a, d, c16);
#if defined(__AVX512VNNI__)
        if (any_b32) b32_prep(M, K, a, d, bz, dz);
        if (any_q4k) q4k_order(M, K, a, a4);
        if (any_q5r) q5r_order(M, K, a, a5);
#endif
#if defined(__AMX_INT8__)
        if (any_q4kt && !lanes) tile_acts(64, M, K, a, ax4);
        if (any_q6kt && !lanes) tile_acts(32, M, K, a, ax6);
#else
        (void)ax4, (void)ax6, (void)any_q4kt, (void)any_q6kt, (void)lanes;
#endif
    }
    int paneled[3] = {0, 0, 0};  /* segments this thread's rows of took the panel product (a prefill's, qp_lo) */
#if defined(__AVX512VNNI__)
    const int lo = qp_lo;
    for (int sg = 0, col = 0; lo && sg < W->nseg; col += W->rows[sg], sg++) {
        const int bs = W->bits[sg];
        int r0, r1;
        thread_rows(W->rows[sg], &r0, &r1);
        if (bs != Q6KT && M > (IS_Q6(bs) ? 2 * lo + 1 : lo))  /* an allocation failure leaves the rows below */
            paneled[sg] = !panel_run(bs, W->q[sg], W->s[sg], W->mn[sg], r0, r1, M, K, a, d, IS_Q6(bs) ? c16 : c,
                                     IS_Q6(bs), y + col, N);
    }
#endif
    for (int m0 = 0; m0 < M; m0 += MCHUNK) {
        const int mc = M - m0 < MCHUNK ? M - m0 : MCHUNK;
        int col = 0;
        for (int sg = 0; sg < W->nseg; sg++) {
            const int n = W->rows[sg];
            int r0, r1;
            thread_rows(n, &r0, &r1);
            if (paneled[sg]) {
                col += n;
                continue;
            }
            /* the tile layouts' run is one call (its pipeline spans the thread's units); the rest in blocks of 64 */
            const int step = IS_TILED(W->bits[sg]) ? (r1 > r0 ? r1 - r0 : 1) : 64;
            for (int n0 = r0; n0 < r1; n0 += step) {
                const int n1 = n0 + step < r1 ? n0 + step : r1;
#if defined(__AVX512VNNI__)
                const int bs = W->bits[sg];
                const int8_t *as = IS_TILED(bs) && !lanes ? (bs == Q4KT ? ax4 : ax6) + (size_t)2 * m0 * K
                                 : (bs == Q4K ? a4 : bs == Q5R ? a5 : a) + (size_t)m0 * K;
                const float *cs = IS_Q6(bs) ? c16 + (size_t)m0 * (K / 16) : c + (size_t)m0 * G;
#else
                const int8_t *as = a + (size_t)m0 * K;
                const float *cs = IS_Q6(W->bits[sg]) ? c16 + (size_t)m0 * (K / 16) : c + (size_t)m0 * G;
#endif
                rows(mc, W->bits[sg], lanes, n0, n1, K, as, d + (size_t)m0 * G, cs,
                     bz + (size_t)m0 * P16, dz + (size_t)m0 * P16, W->q[sg], W->s[sg], W->mn[sg],
                     y + (size_t)m0 * N + col, N);
            }
            col += n;
        }
    }
#pragma omp barrier
    if (b) {
#pragma omp for schedule(static)
        for (int t = 0; t < M * N; t++) y[t] = f32_to_bf16(bf16_to_f32(y[t]) + bf16_to_f32(b[t % N]));
    }
}

#include "fused_layer.h"

#if defined(__AVX512VNNI__)
/* Rows 16u … 16u+15 of a Q6KT weight as bf16: each run unpacked as the tile loop unpacks it (q6kt_unpack), then
 * each row's 16 q of a sub-block gathered from the B layout ([k4][row][4]) and (d·sc_j)·(q − 32) rounded once — the
 * values of Q6_K's codes (qcodes.h), without rebuilding the GGUF's blocks byte by byte (~10× slower for the 1.5B's head). */
static void q6kt_dequant_unit(const uint8_t *w, int K, int u, uint16_t *out) {
    uint8_t bw[1024] __attribute__((aligned(64)));
    float wl[2][16] __attribute__((aligned(64)));
    const uint8_t *wu = w + (size_t)u * (K / 256) * Q6KT_UNIT;
    const __m256i off = _mm256_set1_epi32(32);
    for (int t = 0; t < K / 256 * 8; t++) {
        __m512 W[2];
        q6kt_unpack(wu, t, bw, W);
        _mm512_store_ps(wl[0], W[0]);
        _mm512_store_ps(wl[1], W[1]);
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 16; i++) {
                const uint8_t *src = bw + 256 * h + 4 * i;
                int32_t v[4];
                for (int k4 = 0; k4 < 4; k4++) memcpy(&v[k4], src + 64 * k4, 4);
                const __m128i q = _mm_loadu_si128((const __m128i *)v);
                const __m256 sv = _mm256_set1_ps(wl[h][i]);
                uint16_t *o = out + (size_t)(16 * u + i) * K + (size_t)(t >> 3) * 256 + 16 * (2 * (t & 7) + h);
                bf16_store8(o, _mm256_mul_ps(sv, _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(q), off))));
                bf16_store8(o + 8, _mm256_mul_ps(sv, _mm256_cvtepi32_ps(_mm256_sub_epi32(
                    _mm256_cvtepu8_epi32(_mm_srli_si128(q, 8)), off))));
            }
    }
}
#endif

/* o[k] = bf16(qs[i]·q[k] + qm[i]) over a row of codes, eight lanes at a time (the product exact, one rounding). */
static void dequant_codes(uint16_t *o, const uint8_t *q, const float *qs, const float *qm, int K, int sub) {
    for (int i = 0; i < K / sub; i++) {
        const __m256 sv = _mm256_set1_ps(qs[i]), mv = _mm256_set1_ps(qm[i]);
        for (int t = 0; t < sub; t += 8)
            bf16_store8(o + (size_t)i * sub + t, _mm256_add_ps(_mm256_mul_ps(sv, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                                     _mm_loadl_epi64((const __m128i *)(q + (size_t)i * sub + t))))), mv));
    }
}

#if defined(__AVX512VNNI__)
/* Rows 16u … 16u+15 of a Q4KT weight as bf16: per block the sixteen rows' scales at once (q4kt_scales), per row and
 * run its 32 nibble bytes gathered from the B layout, then dequant_codes — the values of row_codes' Q4_K codes (an
 * odd group's ÷16 scale times its ×16 code: the same exact product), without rebuilding each row's blocks. */
static void q4kt_dequant_unit(const uint8_t *w, int K, int u, uint16_t *out) {
    float sl[8][16] __attribute__((aligned(64))), ml[8][16] __attribute__((aligned(64)));
    const uint8_t *wu = w + (size_t)u * (K / 256) * Q4KT_UNIT;
    for (int b = 0; b < K / 256; b++) {
        const uint8_t *blk = wu + (size_t)b * Q4KT_UNIT;
        __m512 S[8], Mn[8];
        q4kt_scales(blk, S, Mn);
        for (int h = 0; h < 8; h++) _mm512_store_ps(sl[h], S[h]), _mm512_store_ps(ml[h], Mn[h]);
        for (int r = 0; r < 4; r++)
            for (int i = 0; i < 16; i++) {
                uint8_t q[32], lo[32], hi[32];
                for (int k4 = 0; k4 < 8; k4++) memcpy(q + 4 * k4, blk + 256 + 512 * r + 64 * k4 + 4 * i, 4);
                for (int t = 0; t < 32; t++) lo[t] = q[t] & 0x0f, hi[t] = q[t] & 0xf0;
                uint16_t *o = out + (size_t)(16 * u + i) * K + (size_t)b * 256 + 64 * r;
                dequant_codes(o, lo, &sl[2 * r][i], &ml[2 * r][i], GROUP, GROUP);
                dequant_codes(o + GROUP, hi, &sl[2 * r + 1][i], &ml[2 * r + 1][i], GROUP, GROUP);
            }
    }
}
#endif

/* Ŵ[N, K] as bf16 (for a long forward — a prefill — that a dense GEMM runs faster than this kernel): each row's codes
 * (qcodes.h) scaled in eight-lane steps (a scalar loop took ~1.5 s for the 1.5B's weights, more than the GEMM of a
 * short prompt). */
int speclab_dequant(int bits, int N, int K, const uint8_t *w, const uint16_t *s, const uint16_t *mn, uint16_t *out,
                    int nthreads) {
    if (!BITS_OK(bits, K) || K % GROUP || K / GROUP > MAXG || N < 1 || (IS_TILED(bits) && N % 16)) return -1;
#if defined(__AVX512VNNI__)
    if (IS_TILED(bits)) {
#pragma omp parallel for schedule(static) num_threads(nthreads)
        for (int u = 0; u < N / 16; u++) {
            if (bits == Q6KT) q6kt_dequant_unit(w, K, u, out);
            else q4kt_dequant_unit(w, K, u, out);
        }
        return 0;
    }
#endif
    const int sub = code_sub(bits);
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int n = 0; n < N; n++) {
        uint8_t q[MAXG * GROUP];
        float qs[MAXG * 2], qm[MAXG * 2];
        row_codes(bits, w, s, mn, n, K, q, qs, qm);
        dequant_codes(out + (size_t)n * K, q, qs, qm, K, sub);
    }
    return 0;
}
