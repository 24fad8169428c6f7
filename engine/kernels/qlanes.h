/* The sixteen-row layouts (Q4KT, Q6KT: qtiles.h's header) on vpdpbusd lanes instead of tiles: a unit's sixteen
 * weight rows are the sixteen dword lanes, each activation row's four inputs broadcast — qpanel.h's product, on
 * weights that are already in its order (no decoding, no transpose: the layouts store a tile's B operand, which is
 * that order). Included by qgemm.c after qtiles.h (its scales, unpacking order, fold and qt_out).
 *
 * Why: rows_q4k / rows_q6k keep a weight row in the lanes of one vector, so each activation row costs per 256
 * weights four vpdpbusd, four conversions, four permutes and four FMAs (a verify of four rows ran 1.8× a one-row
 * step on the 1.5B, compute-bound); the tiles (rows_qt_mc) make the rows nearly free but their C-tile round trip
 * costs a one-row step 1.31×. Here, per activation row and group of 32, eight vpdpbusd (four for Q6_K's sub-block)
 * and four fold operations serve sixteen weight rows; the weights' unpacking (an AND, Q6_K an OR of its top bits)
 * is done once for every activation row.
 *
 * The sums are exact int32 and the fold is q4kt_fold's / q6kt_fold's, the same operations in the same order, so
 * every output has rows_qt_mc's bits: the two run one product, and the build picks per call by rows (QT_LANES).
 */
#ifndef QT_LANES
/* Rows up to which the lanes run a Q4KT / Q6KT product, then the tiles. Measured (2-core Xeon, 2 threads, the 1.5B's
 * shapes from memory, hand harness, docs/log/2026-12-07-panel-on-tiles.md): the lanes 1.0–1.6× the tiles' speed at
 * one to four rows, 1.0–1.1× at eight; 1.0–2.0× rows_q4k's / rows_q6k's at one row, 1.1–1.8× at four. */
#define QT_LANES 8
#endif

static int ql_rows = QT_LANES;
/* Rows up to which a Q4KT / Q6KT product runs on the lanes (the rest on the tiles); returns the value it replaces.
 * The same bits either way: a comparison arm and the tests' switch. */
int speclab_qt_lanes(int rows) {
    const int before = ql_rows;
    ql_rows = rows < 0 ? 0 : rows;
    return before;
}
/* Whether a Q4KT / Q6KT product of M rows runs on the lanes here: up to ql_rows rows on the AMX build (the tiles
 * above, unless the OS refused the tile state), at every row count on the VNNI build. */
static inline int ql_lanes(int M) {
#if defined(__AMX_INT8__)
    return M <= ql_rows || !amx_ok;
#else
    (void)M;
    return 1;
#endif
}
static int ql_units;
/* Units multiplied on the lanes since the library loaded (the tests' evidence that the route ran: its bits are the
 * tiles'). */
int speclab_lane_units(void) { return __atomic_load_n(&ql_units, __ATOMIC_RELAXED); }

/* Units u0 … u1−1 for MC ≤ 8 activation rows a (quantize_x's layout, K bytes a row), d, c (Q6KT: q6k_prep's c16). */
static inline __attribute__((always_inline)) void rows_ql_mc(const int MC, const int Q6, int u0, int u1, int K,
        const int8_t *a, const float *d, const float *c, const uint8_t *w, uint16_t *y, int ldy) {
    const int G = K / GROUP, J = K / 16, B = K / 256;
    const size_t unit_bytes = (size_t)B * (Q6 ? Q6KT_UNIT : Q4KT_UNIT);
    const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8((char)0xf0), top = _mm512_set1_epi8(0x30);
    for (int u = u0; u < u1; u++) {
        const uint8_t *wu = w + (size_t)u * unit_bytes;
        __m512 acc[MCHUNK];
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) acc[m] = _mm512_setzero_ps();
        for (int b = 0; b < B; b++) {
            if (!Q6) {
                const uint8_t *blk = wu + (size_t)b * Q4KT_UNIT;
                __m512 S[8], Mn[8];
                q4kt_scales(blk, S, Mn);
                for (int h = 0; h < 8; h++) {  /* group 8b + h: run h / 2's low (h even) or high nibbles */
                    const uint8_t *run = blk + 256 + 512 * (h >> 1);
                    __m512i q[8];
#pragma GCC unroll 8
                    for (int i = 0; i < 8; i++) {
                        const __m512i p = _mm512_loadu_si512((const void *)(run + 64 * i));
                        if (Q4KT_PF && !(h & 1)) _mm_prefetch((const char *)(run + 64 * i + Q4KT_PF), _MM_HINT_T0);
                        q[i] = _mm512_and_si512(p, (h & 1) ? high4 : low4);
                    }
                    const int g = 8 * b + h;
#pragma GCC unroll 8
                    for (int m = 0; m < MC; m++) {
                        const int8_t *am = a + (size_t)m * K + (size_t)g * GROUP;
                        __m512i t = _mm512_setzero_si512();
#pragma GCC unroll 8
                        for (int i = 0; i < 8; i++) {
                            int32_t a4;
                            memcpy(&a4, am + 4 * i, 4);
                            t = _mm512_dpbusd_epi32(t, q[i], _mm512_set1_epi32(a4));
                        }
                        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(S[h], _mm512_set1_ps(d[(size_t)m * G + g])), acc[m]);
                        acc[m] = _mm512_fmadd_ps(Mn[h], _mm512_set1_ps(c[(size_t)m * G + g]), acc[m]);
                    }
                }
            } else {
                const uint8_t *blk = wu + (size_t)b * Q6KT_UNIT;
                const __m512 dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
                for (int p = 0; p < 8; p++) {  /* sub-blocks 2p, 2p+1 (group 8b + p): q6kt_unpack's codes, in registers */
                    const int s0 = 2 * (p & 1), g = 8 * b + p, j = 2 * g;
                    const uint8_t *ql = blk + 288 + 256 * p, *qh = blk + 2336 + 256 * (p >> 1);
                    __m512i q[8];
#pragma GCC unroll 4
                    for (int i = 0; i < 4; i++) {
                        if (Q4KT_PF) _mm_prefetch((const char *)(ql + 64 * i + Q4KT_PF), _MM_HINT_T0);
                        const __m512i l = _mm512_loadu_si512((const void *)(ql + 64 * i));
                        const __m512i hb = _mm512_loadu_si512((const void *)(qh + 64 * i));
                        const __m512i h0 = s0 == 0 ? _mm512_slli_epi16(hb, 4) : hb;
                        const __m512i h1 = s0 == 0 ? _mm512_slli_epi16(hb, 2) : _mm512_srli_epi16(hb, 2);
                        q[i] = _mm512_ternarylogic_epi32(_mm512_and_si512(l, low4), h0, top, 0xF8);
                        q[4 + i] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4), h1, top, 0xF8);
                    }
                    const __m512 W0 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                        _mm_loadu_si128((const __m128i *)(blk + 32 + 32 * p)))));
                    const __m512 W1 = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                        _mm_loadu_si128((const __m128i *)(blk + 48 + 32 * p)))));
#pragma GCC unroll 8
                    for (int m = 0; m < MC; m++) {
                        const int8_t *am = a + (size_t)m * K + (size_t)g * GROUP;
                        __m512i t0 = _mm512_setzero_si512(), t1 = _mm512_setzero_si512();
#pragma GCC unroll 4
                        for (int i = 0; i < 4; i++) {
                            int32_t a0, a1;
                            memcpy(&a0, am + 4 * i, 4);
                            memcpy(&a1, am + 16 + 4 * i, 4);
                            t0 = _mm512_dpbusd_epi32(t0, q[i], _mm512_set1_epi32(a0));
                            t1 = _mm512_dpbusd_epi32(t1, q[4 + i], _mm512_set1_epi32(a1));
                        }
                        const __m512 dm = _mm512_set1_ps(d[(size_t)m * G + g]);
                        acc[m] = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(t0), dm,
                                                 _mm512_set1_ps(c[(size_t)m * J + j])), W0, acc[m]);
                        acc[m] = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(t1), dm,
                                                 _mm512_set1_ps(c[(size_t)m * J + j + 1])), W1, acc[m]);
                    }
                }
            }
        }
        qt_out(MC, u, acc, y, ldy);
    }
    __atomic_add_fetch(&ql_units, u1 - u0, __ATOMIC_RELAXED);
}
