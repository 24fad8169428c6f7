/* GGUF Q6_K blocks read as the file stores them: the AVX-512 VNNI build of qgemm.c (included there; its GROUP,
 * MCHUNK, VPF, hsum512 and f32_to_bf16; quantize_x's activation scales d).
 *
 * Block (llama.cpp's block_q6_K, 256 weights in 210 bytes, 6.5625 bits a weight): ql[128] the low four bits, qh[64]
 * the top two, scales[16] int8 (one per 16 weights), d fp16 last. In each half h (weights 128h … 128h+127, ql + 64h,
 * qh + 32h), for l = 0…31:
 *     q[l]      = ql[l] & 15      | (qh[l] & 3) << 4        q[l + 32] = ql[l + 32] & 15 | (qh[l] >> 2 & 3) << 4
 *     q[l + 64] = ql[l] >> 4      | (qh[l] >> 4 & 3) << 4   q[l + 96] = ql[l + 32] >> 4 | (qh[l] >> 6 & 3) << 4
 * and weight i of the block is Ŵ = (d·sc[i / 16])·(q − 32) (dequantize_row_q6_K).
 *
 * Then with activations x ≈ d[m,g]·a per group of 32 (qgemm.c's quantize_x), per sub-block j of 16 weights:
 *     y[m,n] = Σ_j (d·sc_j)·d[m, j/2] · Σ q·a   +   Σ_j (d·sc_j) · c16[m, j],   c16[m, j] = −32·d[m, j/2]·Σ a
 * The first sum a chunk of 64 weights at a time: a 512-bit vpdpbusd (lane i sums weights 4i … 4i+3, so lanes
 * 4j … 4j+3 are sub-block j's 16), its int→float conversion, one permute spreading the chunk's four combined scales
 * to their lanes, one FMA — per chunk and activation row the four operations of a Q4_K pair. The block's sixteen
 * combined scales (d·sc_j)·d[m, j/2] are one multiply a block and row; the second sum (q6k_prep's c16, the −32
 * offsets) one FMA a block and row.
 *
 * Unpacking a half (64 bytes of ql, 32 of qh broadcast to both 256-bit halves): weights 0…63 are ql & 15 with qh
 * shifted left by 4 (first 32) or 2 (last 32) and masked to bits 4–5; weights 64…127 are ql >> 4 with qh shifted
 * right by 0 or 2 — seven operations for 128 weights, shared by the chunk's activation rows.
 *
 * Every y[m,n] takes the same operations in the same order whatever M is: batch-invariant, like the rest of qgemm.c.
 */
/* Q6_K rows N0…N1 for MC activation rows: a block at a time, its two halves unpacked once for every row of the
 * chunk; d the activations' scales (per group of 32), c16 q6k_prep's offsets. */
static inline __attribute__((always_inline)) void rows_q6k(const int MC, int N0, int N1, int K, const int8_t *a,
        const float *d, const float *c16, const uint8_t *w, uint16_t *y, int ldy) {
    const int B = K / 256, G = K / GROUP;
    const size_t row_bytes = (size_t)B * Q6K_BYTES;
    const __m512i low4 = _mm512_set1_epi8(0x0f), top = _mm512_set1_epi8(0x30);
    /* per 16-bit word: the first 32 bytes of a half shift qh by 4 (weights 0…31) or 0 (64…95), the last 32 by 2 */
    const __m512i shl = _mm512_set_epi16(2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                                         4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4);
    const __m512i shr = _mm512_set_epi16(2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    /* chunk c of a block takes sub-blocks 4c … 4c+3, each in four lanes; sub-block j the activation group j/2 */
    const __m512i sub = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i half = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    for (int n = N0; n < N1; n++) {
        const uint8_t *wr = w + (size_t)n * row_bytes;
        __m512 acc[MCHUNK], off[MCHUNK];
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) acc[m] = off[m] = _mm512_setzero_ps();
        for (int b = 0; b < B; b++) {
            const uint8_t *blk = wr + (size_t)b * Q6K_BYTES;
            _mm_prefetch((const char *)(blk + VPF), _MM_HINT_T0);
            _mm_prefetch((const char *)(blk + VPF + 64), _MM_HINT_T0);
            _mm_prefetch((const char *)(blk + VPF + 128), _MM_HINT_T0);
            _mm_prefetch((const char *)(blk + VPF + 192), _MM_HINT_T0);
            uint16_t dh;
            memcpy(&dh, blk + 208, 2);
            const __m512 wsc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192)))),
                                             _mm512_set1_ps(_cvtsh_ss(dh)));  /* d·sc_j, exact: fp16 × int8 */
            __m512 ts[MCHUNK];  /* (d·sc_j)·d[m, j/2] */
#pragma GCC unroll 8
            for (int m = 0; m < MC; m++) {
                const float *dm = d + (size_t)m * G + (size_t)b * 8;
                ts[m] = _mm512_mul_ps(wsc, _mm512_permutexvar_ps(half, _mm512_castps256_ps512(_mm256_loadu_ps(dm))));
                off[m] = _mm512_fmadd_ps(wsc, _mm512_loadu_ps(c16 + (size_t)m * (K / 16) + (size_t)b * 16), off[m]);
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m512i ql = _mm512_loadu_si512((const void *)(blk + 64 * h));
                const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
                /* (A & 0x0f) | B, B holding only bits 4–5: ternary 0xEC over (A, B, low4) */
                const __m512i v[2] = {
                    _mm512_ternarylogic_epi32(ql, _mm512_and_si512(_mm512_sllv_epi16(qh, shl), top), low4, 0xEC),
                    _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), _mm512_and_si512(_mm512_srlv_epi16(qh, shr), top),
                                              low4, 0xEC)};
#pragma GCC unroll 2
                for (int u = 0; u < 2; u++) {
                    const int c = 2 * h + u;  /* chunk c of the block: weights 64c … 64c+63 */
                    const __m512i idx = _mm512_add_epi32(sub, _mm512_set1_epi32(4 * c));
                    const size_t ch = (size_t)b * 4 + c;
#pragma GCC unroll 8
                    for (int m = 0; m < MC; m++) {
                        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v[u],
                                                                _mm512_loadu_si512((const void *)(a + (size_t)m * K + ch * 64)));
                        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx, ts[m]), acc[m]);
                    }
                }
            }
        }
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) {
            y[(size_t)m * ldy + n] = f32_to_bf16(hsum512(_mm512_add_ps(acc[m], off[m])));
        }
    }
}
