/* GGUF Q5_0 blocks four at a time, on the AVX-512 VNNI build of qgemm.c (included there; its GROUP, MCHUNK, VPF,
 * hsum512 and f32_to_bf16; quantize_x's d and c).
 *
 * Q5R (a layout, not a format): the GGUF's Q5_0 blocks (d fp16, qh 32 bits, 16 nibble bytes; Ŵ = d·(q − 16), q =
 * nibble | fifth bit << 4) regrouped without loss four blocks to 88 bytes when a row is whole groups of four
 * (K % 128 = 0; qkernel.q5r_pack):
 *     d[0…3] (fp16) | qh bits 0–15 of blocks 0…3 (uint16 each) | qh bits 16–31 of blocks 0…3 | nibbles of blocks 0…3
 * so one 512-bit load holds four blocks' nibbles: `& 15` gives weights 0…15 of each block, `>> 4 & 15` weights
 * 16…31, and each half's fifth bits are one 64-bit mask read as stored (bit 16b + j: block b's weight j, or 16 + j).
 * The activations come in that order (q5r_order: per 128, weights 0…15 of each of the four groups, then 16…31), so
 * lanes 4b … 4b+3 of a vpdpbusd are block b's in both halves and take one scale d_b·d[m, g+b]. The −16 offsets are
 * activation sums quantize_x already has: Σ_b d_b·(−16·c[m, g+b]), one 128-bit FMA per four blocks and row.
 * Per four blocks and row: two vpdpbusd, two conversions, two FMAs, the scales' multiply and permute, the offsets'
 * FMA; per four blocks: a load, three logic ops and two masked adds — where the 22-byte blocks read as stored take
 * a scale conversion, a permute, two broadcasts and an insert per two (rows_b32).
 * Every y[m,n] takes the same operations in the same order whatever M is: batch-invariant.
 */
#define Q5R_BYTES 88

/* The activations in the order rows_q5r reads them: per row and 128 inputs, [0…15] of groups 0…3, then [16…31]. */
static void q5r_order(int M, int K, const int8_t *a, int8_t *out) {
    for (size_t r = 0; r < (size_t)M * K / 128; r++)
        for (int p = 0; p < 8; p++) memcpy(out + r * 128 + 16 * p, a + r * 128 + 32 * (p % 4) + 16 * (p / 4), 16);
}

static inline __attribute__((always_inline)) void rows_q5r(const int MC, int N0, int N1, int K, const int8_t *a,
        const float *d, const float *c, const uint8_t *w, uint16_t *y, int ldy) {
    const int G = K / GROUP, R = K / 128;
    const size_t row_bytes = (size_t)R * Q5R_BYTES;
    const __m512i low4 = _mm512_set1_epi8(0x0f), five = _mm512_set1_epi8(0x10);
    const __m512i quad = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (int n = N0; n < N1; n++) {
        const uint8_t *wr = w + (size_t)n * row_bytes;
        __m512 acc[MCHUNK];
        __m128 off[MCHUNK];
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) acc[m] = _mm512_setzero_ps(), off[m] = _mm_setzero_ps();
        for (int r = 0; r < R; r++) {
            const uint8_t *q4 = wr + (size_t)r * Q5R_BYTES;
            _mm_prefetch((const char *)(q4 + VPF), _MM_HINT_T0);
            _mm_prefetch((const char *)(q4 + VPF + 64), _MM_HINT_T0);
            const __m128 dd = _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)q4));  /* d_0…3 */
            uint64_t hlo, hhi;
            memcpy(&hlo, q4 + 8, 8);
            memcpy(&hhi, q4 + 16, 8);
            const __m512i p = _mm512_loadu_si512((const void *)(q4 + 24));
            __m512i lo = _mm512_and_si512(p, low4), hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), low4);
            lo = _mm512_mask_add_epi8(lo, (__mmask64)hlo, lo, five);
            hi = _mm512_mask_add_epi8(hi, (__mmask64)hhi, hi, five);
            const size_t g = (size_t)r * 4;
#pragma GCC unroll 8
            for (int m = 0; m < MC; m++) {
                const __m512 sx = _mm512_permutexvar_ps(quad, _mm512_castps128_ps512(
                    _mm_mul_ps(dd, _mm_loadu_ps(d + (size_t)m * G + g))));
                off[m] = _mm_fmadd_ps(dd, _mm_loadu_ps(c + (size_t)m * G + g), off[m]);
                const int8_t *am = a + (size_t)m * K + (size_t)r * 128;
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo,
                                                                                 _mm512_loadu_si512((const void *)am))), sx, acc[m]);
                acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), hi,
                                                                                 _mm512_loadu_si512((const void *)(am + 64)))), sx, acc[m]);
            }
        }
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) {
            __m128 o = _mm_add_ps(off[m], _mm_movehl_ps(off[m], off[m]));
            o = _mm_add_ss(o, _mm_shuffle_ps(o, o, 1));
            y[(size_t)m * ldy + n] = f32_to_bf16(hsum512(acc[m]) - 16.f * _mm_cvtss_f32(o));
        }
    }
}
