/* A weight row as codes, for every format qgemm.c reads: Ŵ[n, k] = qs[i]·q[k] + qm[i], q an unsigned byte per
 * weight and (qs, qm) float32 per sub-block i of code_sub(bits) weights (16 for Q6_K, whose scales are per 16;
 * 32 otherwise). Included by qgemm.c (both builds; its formats, GROUP, ROW_BYTES, q4k_scales, unpack6, b32_d).
 *
 * Per format (the GGUF's own dequantize_row_* values, see qgemm.c's header):
 *     4 / 6 / 8-bit groups   q as packed           qs = s[n,g]          qm = mn[n,g]
 *     Q4_K                   q = nibble            qs = d·sc_g          qm = −dmin·m_g
 *     Q6_K                   q = nibble | top << 4 qs = d·sc_j (per 16) qm = −32·d·sc_j
 *     Q5_0 (and Q5R)         q = nibble | fifth<<4 qs = d               qm = −16·d
 *     Q8_0                   q = byte ^ 0x80       qs = d               qm = −128·d
 * Every product qs·q is exact in float32 (an fp16, or d·sc, times at most 8 bits) and so is qm, so qs·q + qm is
 * rounded once whether or not it is fused: the de-quantiser gives the values of the formats' scalar loops.
 * Two readers: speclab_dequant (bf16 Ŵ for a long forward on a dense GEMM: qgemm.c's dequant_codes) and, on the
 * VNNI builds, the panel product (qpanel.h), which multiplies the codes themselves.
 */

/* Weights per (qs, qm) pair of a format's codes. */
static inline int code_sub(int bits) { return IS_Q6(bits) ? 16 : GROUP; }

/* Row n of w as codes: q[0…K−1], qs and qm [K / code_sub(bits)]. Not for Q6KT (its rows live in units of 16:
 * q6kt_dequant_unit). */
static void row_codes(int bits, const uint8_t *w, const uint16_t *s, const uint16_t *mn, int n, int K, uint8_t *q,
                      float *qs, float *qm) {
    const int G = K / GROUP;
    const uint8_t *wr = w + (size_t)n * ROW_BYTES(bits, K);
#if defined(__AVX512VNNI__)
    uint8_t row[MAXG / 8 * 144];
    if (bits == Q4KT) {  /* the row's blocks as the GGUF stores them, then as Q4K below */
        for (int b = 0; b < K / 256; b++) q4kt_block(w, K, n, b, row + (size_t)b * 144);
        wr = row;
    }
#endif
    if (bits == Q4K || bits == Q4KT) {
        q4k_scales(wr, G, qs, qm);
        for (int g = 0; g < G; g++)
            _mm256_storeu_si256((__m256i *)(q + (size_t)g * GROUP), _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256(
                (const __m256i *)(wr + Q4K_NIB(g))), (g & 1) * 4), _mm256_set1_epi8(0x0f)));
        return;
    }
    if (bits == Q6K) {  /* q6k_rows.h's layout, 16 weights of one scale at a time */
        for (int b = 0; b < K / 256; b++) {
            const uint8_t *blk = wr + (size_t)b * Q6K_BYTES;
            uint16_t dh;
            memcpy(&dh, blk + 208, 2);
            const float dd = _cvtsh_ss(dh);
            for (int i = 0; i < 256; i += 16) {
                const int h = i / 128, j = i % 128 / 32, l = i % 32;
                const __m128i lb = _mm_loadu_si128((const __m128i *)(blk + 64 * h + l + (j & 1) * 32));
                const __m128i hb = _mm_loadu_si128((const __m128i *)(blk + 128 + 32 * h + l));
                const __m128i nib = _mm_and_si128(j < 2 ? lb : _mm_srli_epi16(lb, 4), _mm_set1_epi8(0x0f));
                const __m128i top = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hb, 2 * j), _mm_set1_epi8(3)), 4);
                _mm_storeu_si128((__m128i *)(q + (size_t)b * 256 + i), _mm_or_si128(nib, top));
                const float sc = dd * (float)(int8_t)blk[192 + i / 16];
                qs[b * 16 + i / 16] = sc, qm[b * 16 + i / 16] = -32.f * sc;
            }
        }
        return;
    }
    if (bits == Q5R) {  /* q5_runs.h's layout: four blocks' d, fifth bits and nibbles a run of 88 bytes */
        const __m128i bit = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
        const __m128i spread = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        for (int r = 0; r < K / 128; r++) {
            const uint8_t *q4 = wr + (size_t)r * 88;
            for (int b = 0; b < 4; b++) {
                uint16_t h, fb[2];
                memcpy(&h, q4 + 2 * b, 2);
                memcpy(&fb[0], q4 + 8 + 2 * b, 2);
                memcpy(&fb[1], q4 + 16 + 2 * b, 2);
                const __m128i nib = _mm_loadu_si128((const __m128i *)(q4 + 24 + 16 * b));
                for (int t = 0; t < 2; t++) {  /* weights 16t … 16t+15: a nibble, and bit j of fb[t] as 16 */
                    const __m128i sel = _mm_and_si128(_mm_shuffle_epi8(_mm_cvtsi32_si128(fb[t]), spread), bit);
                    const __m128i five = _mm_and_si128(_mm_cmpeq_epi8(sel, bit), _mm_set1_epi8(16));
                    _mm_storeu_si128((__m128i *)(q + (size_t)(4 * r + b) * GROUP + 16 * t), _mm_or_si128(
                        _mm_and_si128(t ? _mm_srli_epi16(nib, 4) : nib, _mm_set1_epi8(0x0f)), five));
                }
                const float dg = _cvtsh_ss(h);
                qs[4 * r + b] = dg, qm[4 * r + b] = -16.f * dg;
            }
        }
        return;
    }
    if (IS_B32(bits)) {
        for (int g = 0; g < G; g++) {
            const uint8_t *blk = wr + (size_t)g * B32_BYTES(bits);
            const float dg = b32_d(blk);
            uint8_t *qg = q + (size_t)g * GROUP;
            if (bits == Q80) {
                _mm256_storeu_si256((__m256i *)qg, _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)),
                                                                    _mm256_set1_epi8((char)0x80)));
            } else {
                uint32_t qh;
                memcpy(&qh, blk + 2, 4);
                for (int j = 0; j < GROUP; j++)
                    qg[j] = (uint8_t)((j < 16 ? blk[6 + j] & 0x0f : blk[6 + j - 16] >> 4) | ((qh >> j) & 1) << 4);
            }
            qs[g] = dg, qm[g] = B32_OFF(bits) * dg;
        }
        return;
    }
    for (int g = 0; g < G; g++) {  /* our own groups of 32 */
        qs[g] = _cvtsh_ss(s[(size_t)n * G + g]), qm[g] = _cvtsh_ss(mn[(size_t)n * G + g]);
        uint8_t *qg = q + (size_t)g * GROUP;
        if (bits == 6) unpack6(wr, K, g, qg);
        else if (bits == 4)
            for (int j = 0; j < GROUP; j++) qg[j] = j < 16 ? wr[(size_t)g * 16 + j] & 0x0f : wr[(size_t)g * 16 + j - 16] >> 4;
        else memcpy(qg, wr + (size_t)g * GROUP, GROUP);
    }
}
