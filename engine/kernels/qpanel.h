/* The quantized path's long forwards (a prompt's prefill, a draft's catch-up) on the AVX-512 VNNI builds:
 *     speclab_qgemm_long  y[M,N] = x[M,K] · Ŵ[N,K]ᵀ, Ŵ in any format qgemm.c reads but Q6KT
 *     panel_run           the same for a thread's rows inside par_gemv (the fused layers), while speclab_long is set
 * Included by qgemm.c (its GROUP, MCHUNK, MC_CASES, quantize_x, q6k_prep; qcodes.h's row_codes).
 *
 * Why: speclab_qgemm is a product for one to a few activation rows. Each dword lane of its vpdpbusd holds four
 * inputs of one weight row, so every 64 weights cost one activation row a dot product, an int→float conversion, a
 * scale multiply and an FMA — ~6 operations per 64 products whatever M is. A prefill of 9…64 tokens on the 0.5B
 * draft ran at ~4.3 ms a token that way (2-core Xeon, hand probe), 2.7× its dense bf16 catch-up.
 * Here the lanes are sixteen weight rows instead (a panel): the panel's codes are decoded once (row_codes) into
 *     pq[(k/4)·64 + 4r + k%4] = q[n0 + r, k]          ps[i·16 + r], pm[i·16 + r] = qs, qm of row n0 + r
 * and every activation row then takes, per sub-block i of SUB inputs (32; Q6_K 16), SUB/4 vpdpbusd of the panel's
 * vectors against its own four inputs broadcast, then
 *     acc[m] += float(Σ_k q·a) · (ps_i · d[m, g])  +  pm_i · c[m, i]        (c = d·Σa over the sub-block)
 * — SUB/4 + 4 operations per 16·SUB products, ~4× fewer than the one-row product's, the decode amortised over M.
 * The sums are the same terms as speclab_qgemm's in another order (integer sums over a whole sub-block, then
 * float32), so the outputs are not bit-identical to it: this runs where batch invariance is not at stake (a prompt
 * is prefilled once for every run of it) — only inside qkernel.long_forward (HFModel.prefill), never a verify.
 */
#define PANEL 16   /* weight rows a panel: one per dword lane */

/* Rows past which par_gemv (the fused layers' quantized products) takes the panel product; 0: never. Set around a
 * prefill by qkernel.long_forward through speclab_long (which returns the value it replaces), read by every thread
 * of a product. One value per library, not per call: the lab decodes one sequence at a time (the app's Live
 * queue), and a verify never runs inside a prefill. */
static int qp_lo;
int speclab_long(int lo) {
    const int before = qp_lo;
    qp_lo = lo < 0 ? 0 : lo;
    return before;
}

/* 16 × 16 dwords transposed in registers: v[r] holds row r's dwords 0…15 before, dword r of every row after. */
static inline void transpose16(__m512i v[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2)
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]), t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    for (int i = 0; i < 16; i += 4)
        v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]), v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]),
        v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]), v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    for (int i = 0; i < 4; i++)  /* 128-bit lanes: rows 4j … 4j+3 of the same dwords sit in lane j of v[4j + i] */
        t[i] = _mm512_shuffle_i32x4(v[i], v[4 + i], 0x88), t[4 + i] = _mm512_shuffle_i32x4(v[i], v[4 + i], 0xdd),
        t[8 + i] = _mm512_shuffle_i32x4(v[8 + i], v[12 + i], 0x88), t[12 + i] = _mm512_shuffle_i32x4(v[8 + i], v[12 + i], 0xdd);
    for (int i = 0; i < 4; i++)
        v[i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88), v[8 + i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xdd),
        v[4 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0x88), v[12 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0xdd);
}

/* A Q4KT unit (rows 16u … 16u+15) as a packed panel: its runs are in the panel's order already — a run's 64-byte
 * vectors & 0x0f are group 2r's codes, >> 4 group 2r+1's — and its scales a lane a row (q4kt_scales; the odd
 * groups' ÷16 undone, exactly). The codes and scales row_codes gives each row of the blocks as stored, without
 * rebuilding each row's blocks through q4kt_block (the units' first end-to-end run, before this: their AR 8 % slower
 * than the blocks as stored at a level one-token step — docs/log/2026-12-07-panel-on-tiles.md). */
static void q4kt_panel(const uint8_t *w, int K, int u, uint8_t *pq, float *ps, float *pm) {
    const int B = K / 256;
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const uint8_t *wu = w + (size_t)u * B * Q4KT_UNIT;
    for (int b = 0; b < B; b++) {
        const uint8_t *blk = wu + (size_t)b * Q4KT_UNIT;
        __m512 S[8], Mn[8];
        q4kt_scales(blk, S, Mn);
        for (int h = 0; h < 8; h++) {
            _mm512_store_ps(ps + (size_t)(8 * b + h) * PANEL, (h & 1) ? _mm512_mul_ps(S[h], _mm512_set1_ps(16.f)) : S[h]);
            _mm512_store_ps(pm + (size_t)(8 * b + h) * PANEL, Mn[h]);
        }
        for (int r = 0; r < 4; r++)
            for (int k4 = 0; k4 < 8; k4++) {
                const __m512i v = _mm512_loadu_si512((const void *)(blk + 256 + 512 * r + 64 * k4));
                _mm512_store_si512((void *)(pq + ((size_t)64 * b + 16 * r + k4) * 64), _mm512_and_si512(v, low4));
                _mm512_store_si512((void *)(pq + ((size_t)64 * b + 16 * r + 8 + k4) * 64),
                                   _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
            }
    }
}

/* The panel of rows n0 … n0+R−1 (R ≤ 16; rows past R zero) in its layout above: the rows' codes decoded into
 * q16 [16][K] (row_codes), then each 64-byte column of the sixteen rows transposed at once (a Q4KT unit: as it
 * stands, q4kt_panel). */
static void panel_pack(int bits, const uint8_t *w, const uint16_t *s, const uint16_t *mn, int n0, int R, int K,
                       uint8_t *q16, float *qs, float *qm, uint8_t *pq, float *ps, float *pm) {
    if (bits == Q4KT) {  /* n0 is a unit's first row: a product of a tiled layout is cut in sixteens */
        q4kt_panel(w, K, n0 / 16, pq, ps, pm);
        return;
    }
    const int S = K / code_sub(bits);
    for (int r = 0; r < PANEL; r++) {
        if (r < R) {
            row_codes(bits, w, s, mn, n0 + r, K, q16 + (size_t)r * K, qs, qm);
        } else {
            memset(q16 + (size_t)r * K, 0, (size_t)K);
            memset(qs, 0, sizeof(float) * S);
            memset(qm, 0, sizeof(float) * S);
        }
        for (int i = 0; i < S; i++) ps[i * PANEL + r] = qs[i], pm[i * PANEL + r] = qm[i];
    }
    int k = 0;
    for (; k + 64 <= K; k += 64) {  /* dwords k/4 … k/4+15 of the sixteen rows */
        __m512i v[16];
        for (int r = 0; r < PANEL; r++) v[r] = _mm512_loadu_si512((const void *)(q16 + (size_t)r * K + k));
        transpose16(v);
        for (int j = 0; j < 16; j++) _mm512_store_si512((void *)(pq + ((size_t)k / 4 + j) * 64), v[j]);
    }
    for (; k < K; k += 4)  /* the last K mod 64 */
        for (int r = 0; r < PANEL; r++) memcpy(pq + ((size_t)k / 4) * 64 + 4 * r, q16 + (size_t)r * K + k, 4);
}

/* acc += float(t)·(sv·d) + mv·c: one sub-block's integer sums t folded into sixteen rows' accumulators — one order of
 * operations for panel_rows and tpanel_rows, so their outputs agree to the bit. */
static inline __attribute__((always_inline)) __m512 panel_fold(__m512 acc, __m512i t, __m512 sv, __m512 mv, float d,
                                                               float c) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(sv, _mm512_set1_ps(d)), acc);
    return _mm512_fmadd_ps(mv, _mm512_set1_ps(c), acc);
}

/* Activation rows 0 … MC−1's accumulators rounded into y's columns 0 … R−1. */
static inline __attribute__((always_inline)) void panel_out(const int MC, const __m512 *acc, int R, uint16_t *y,
                                                            int ldy) {
#pragma GCC unroll 16
    for (int m = 0; m < MC; m++) {
        float v[PANEL] __attribute__((aligned(64)));
        _mm512_store_ps(v, acc[m]);
        for (int r = 0; r < R; r++) y[(size_t)m * ldy + r] = f32_to_bf16(v[r]);
    }
}

/* Activation rows 0 … MC−1 (a, d, c offset to the first) against one packed panel; outputs y[m, n0 + r], r < R. */
static inline __attribute__((always_inline)) void panel_rows(const int MC, const int SUB, int K, const uint8_t *pq,
        const float *ps, const float *pm, const int8_t *a, const float *d, const float *c, int R, uint16_t *y, int ldy) {
    const int G = K / GROUP, S = K / SUB;
    __m512 acc[MCHUNK];
#pragma GCC unroll 8
    for (int m = 0; m < MC; m++) acc[m] = _mm512_setzero_ps();
    for (int i = 0; i < S; i++) {
        __m512i wv[8];
#pragma GCC unroll 8
        for (int j = 0; j < SUB / 4; j++) wv[j] = _mm512_load_si512((const void *)(pq + ((size_t)i * (SUB / 4) + j) * 64));
        const __m512 sv = _mm512_load_ps(ps + (size_t)i * PANEL), mv = _mm512_load_ps(pm + (size_t)i * PANEL);
        const int g = i * SUB / GROUP;
#pragma GCC unroll 8
        for (int m = 0; m < MC; m++) {
            const int8_t *am = a + (size_t)m * K + (size_t)i * SUB;
            int32_t a4;
            memcpy(&a4, am, 4);
            __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[0], _mm512_set1_epi32(a4));
#pragma GCC unroll 8
            for (int j = 1; j < SUB / 4; j++) {
                memcpy(&a4, am + 4 * j, 4);
                t = _mm512_dpbusd_epi32(t, wv[j], _mm512_set1_epi32(a4));
            }
            acc[m] = panel_fold(acc[m], t, sv, mv, d[(size_t)m * G + g], c[(size_t)m * S + i]);
        }
    }
    panel_out(MC, acc, R, y, ldy);
}

static void panel_chunk(int mc, int sub, int K, const uint8_t *pq, const float *ps, const float *pm, const int8_t *a,
                        const float *d, const float *c, int R, uint16_t *y, int ldy) {
#define PANEL_BODY(MC, SUB) panel_rows(MC, SUB, K, pq, ps, pm, a, d, c, R, y, ldy)
    if (sub == 16) MC_CASES(PANEL_BODY, 16)
    else MC_CASES(PANEL_BODY, 32)
#undef PANEL_BODY
}

#if defined(__AMX_INT8__)
/* The AMX build: each sub-block's integer sums Σ_k q·a for TCHUNK activation rows and the panel's sixteen rows in one
 * TDPBSUD — the packed panel is a tile's B operand as it stands (SUB/4 rows of 16 rows × 4 codes), the activations
 * are A as quantize_x lays them (rows K bytes apart) — then panel_fold: the same bits as panel_rows (exact int32
 * sums either way), the vpdpbusd chains gone. Pipelined as qtiles.h's
 * loops (a C tile stored QT_LAG steps after its product, folded QT_READ after that).
 * What bounds it is the fold, not the multiplies: per activation row and sub-block a load, a conversion, a multiply
 * and two FMAs for 16·32 products. Measured (2-core Xeon, 2 threads, the 1.5B's shapes, hand harness,
 * docs/log/2026-12-07-panel-on-tiles.md): 1.0–1.4× panel_rows' speed at 64–256 rows in the formats of groups of 32,
 * its tile instructions alone ~56 % of its time and its folds alone ~63 % (they overlap little); Q6_K's sub-blocks
 * of 16 (K = 16 products, twice the folds a product) 0.82–1.0×, so Q6_K keeps panel_rows (groups of 32 only here). */
#define TCHUNK 16 /* activation rows a tile product: A and C's sixteen tile rows */
static int qp_tiles = 1;
/* Whether the AMX build's panel takes the tiles (1, the default) or panel_rows' vpdpbusd (0: a comparison arm);
 * returns the value it replaces. */
int speclab_panel_tiles(int on) {
    const int before = qp_tiles;
    qp_tiles = on != 0;
    return before;
}
static int qp_tile_panels;
/* Panels multiplied on the tiles since the library loaded (the tests' evidence that the route ran: its bits are
 * panel_rows'). */
int speclab_tile_panels(void) { return __atomic_load_n(&qp_tile_panels, __ATOMIC_RELAXED); }

static inline __attribute__((always_inline)) void tpanel_rows(const int MC, int K, const uint8_t *pq, const float *ps,
        const float *pm, const int8_t *a, const float *d, const float *c, int R, uint16_t *y, int ldy) {
    const int G = K / GROUP;  /* groups of 32: a sub-block is a group */
    int32_t cb[4][TCHUNK * 16] __attribute__((aligned(64)));
    __m512 acc[TCHUNK];
#pragma GCC unroll 16
    for (int m = 0; m < MC; m++) acc[m] = _mm512_setzero_ps();
    for (int s = 0; s < G + QT_LAG + QT_READ; s++) {
        if (s >= QT_LAG && s - QT_LAG < G) qt_store(s - QT_LAG, cb[(s - QT_LAG) & 3]);
        if (s < G) qt_issue(s, pq + (size_t)s * (GROUP / 4) * 64, a + (size_t)s * GROUP, K);
        if (s >= QT_LAG + QT_READ) {
            const int f = s - QT_LAG - QT_READ;
            const __m512 sv = _mm512_load_ps(ps + (size_t)f * PANEL), mv = _mm512_load_ps(pm + (size_t)f * PANEL);
            const int32_t *cf = cb[f & 3];
#pragma GCC unroll 16
            for (int m = 0; m < MC; m++) {
                acc[m] = panel_fold(acc[m], _mm512_load_si512((const void *)(cf + 16 * m)), sv, mv,
                                    d[(size_t)m * G + f], c[(size_t)m * G + f]);
            }
        }
    }
    panel_out(MC, acc, R, y, ldy);
}

static void tpanel_chunk(int mc, int K, const uint8_t *pq, const float *ps, const float *pm, const int8_t *a,
                         const float *d, const float *c, int R, uint16_t *y, int ldy) {
#define TP(MC) case MC: tpanel_rows(MC, K, pq, ps, pm, a, d, c, R, y, ldy); break;
    switch (mc) { TP(1) TP(2) TP(3) TP(4) TP(5) TP(6) TP(7) TP(8) TP(9) TP(10) TP(11) TP(12) TP(13) TP(14) TP(15)
                  default: TP(16) }
#undef TP
}
#endif

/* Rows n0 … n1−1 of one weight (n0 a multiple of 16) against activation rows 0 … M−1 by panels: a thread's share of
 * a product. a, d: quantize_x's int8 activations (in order) and scales; cm: per row and sub-block, d·Σa (q6_c16 = 0)
 * or, for Q6_K, q6k_prep's −32·d·Σa (q6_c16 = 1: then qs takes qm's place, qm = −32·qs exactly, the same products).
 * Its panel buffers are its own (~40·K bytes). Returns 0, or −1 if they could not be allocated (nothing written). */
static int panel_run(int bits, const uint8_t *w, const uint16_t *s, const uint16_t *mn, int n0, int n1, int M, int K,
                     const int8_t *a, const float *d, const float *cm, int q6_c16, uint16_t *y, int ldy) {
    if (n1 <= n0) return 0;
    const int G = K / GROUP, S = K / code_sub(bits), sub = code_sub(bits);
    uint8_t *pq = (uint8_t *)aligned_alloc(64, (size_t)PANEL * K), *q16 = (uint8_t *)malloc((size_t)PANEL * K);
    float *ps = (float *)aligned_alloc(64, sizeof(float) * (size_t)PANEL * S);
    float *pm = (float *)aligned_alloc(64, sizeof(float) * (size_t)PANEL * S);
    float *qs = (float *)malloc(sizeof(float) * (size_t)S), *qm = (float *)malloc(sizeof(float) * (size_t)S);
    const int ok = pq && q16 && ps && pm && qs && qm;
#if defined(__AMX_INT8__)
    const int tiles = qp_tiles && amx_ok && sub == GROUP;  /* Q6_K's sub-blocks of 16: K = 16 products, slower */
    int cfg = 0;  /* the tile rows configured (a chunk's), 0: none yet */
#endif
    for (int n = n0; ok && n < n1; n += PANEL) {
        const int R = n1 - n < PANEL ? n1 - n : PANEL;
        panel_pack(bits, w, s, mn, n, R, K, q16, qs, qm, pq, ps, pm);
#if defined(__AMX_INT8__)
        if (tiles) {
            for (int m0 = 0; m0 < M; m0 += TCHUNK) {
                const int mc = M - m0 < TCHUNK ? M - m0 : TCHUNK;
                if (mc != cfg) amx_tiles_config(mc, GROUP), cfg = mc;
                tpanel_chunk(mc, K, pq, ps, pm, a + (size_t)m0 * K, d + (size_t)m0 * G,
                             cm + (size_t)m0 * S, R, y + (size_t)m0 * ldy + n, ldy);
            }
            __atomic_add_fetch(&qp_tile_panels, 1, __ATOMIC_RELAXED);
            continue;
        }
#endif
        for (int m0 = 0; m0 < M; m0 += MCHUNK)
            panel_chunk(M - m0 < MCHUNK ? M - m0 : MCHUNK, sub, K, pq, ps, q6_c16 ? ps : pm, a + (size_t)m0 * K,
                        d + (size_t)m0 * G, cm + (size_t)m0 * S, R, y + (size_t)m0 * ldy + n, ldy);
    }
#if defined(__AMX_INT8__)
    if (cfg) _tile_release();
#endif
    free(pq); free(q16); free(ps); free(pm); free(qs); free(qm);
    return ok ? 0 : -1;
}

/* y[M, N] (bf16) = x[M, K] (bf16) · Ŵᵀ by panels, each thread a run of whole panels; returns 0, or −1 on a bad
 * shape, the Q6KT layout or an allocation failure. */
int speclab_qgemm_long(int bits, int M, int N, int K, const uint16_t *x, const uint8_t *w, const uint16_t *s,
                       const uint16_t *mn, uint16_t *y, int nthreads) {
    if (!BITS_OK(bits, K) || K % GROUP || K / GROUP > MAXG || M < 1 || N < 1 || bits == Q6KT || (IS_TILED(bits) && N % 16))
        return -1;
    const int G = K / GROUP, sub = code_sub(bits), S = K / sub;
    int8_t *a = (int8_t *)malloc((size_t)M * K);
    float *d = (float *)malloc(sizeof(float) * (size_t)M * G), *c = (float *)malloc(sizeof(float) * (size_t)M * G);
    float *cs = sub == GROUP ? c : (float *)malloc(sizeof(float) * (size_t)M * S);
    int fail = !a || !d || !c || !cs;
    if (!fail) {
        quantize_x(x, M, K, a, d, c);
        if (sub != GROUP) q6k_prep(M, K, a, d, cs);  /* Q6_K: −32·d·Σa per 16 (panel_run's q6_c16) */
        const int NP = (N + PANEL - 1) / PANEL;
#pragma omp parallel num_threads(nthreads)
        {
            const int nt = omp_get_num_threads(), t = omp_get_thread_num();
            const int p0 = (int)((long long)NP * t / nt), p1 = (int)((long long)NP * (t + 1) / nt);
            const int n1 = p1 * PANEL < N ? p1 * PANEL : N;
            if (panel_run(bits, w, s, mn, p0 * PANEL, n1, M, K, a, d, cs, sub != GROUP, y, N)) {
#pragma omp atomic write
                fail = 1;
            }
        }
    }
    free(a); free(d); free(c);
    if (cs != c) free(cs);
    return fail ? -1 : 0;
}
