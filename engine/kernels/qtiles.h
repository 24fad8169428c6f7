/* GGUF Q4_K and Q6_K weights in sixteen-row units, and on AMX int8 tiles: included by both AVX-512 builds of qgemm.c
 * (the layouts and their unpacking in both — qlanes.h multiplies them on vpdpbusd lanes — and the tile product in
 * the AMX build only, under __AMX_INT8__; its GROUP, MCHUNK, f32_to_bf16; quantize_x's a, d and c; q6k_prep's c16).
 *
 * Q4KT (a layout, not a format): a Q4_K tensor's blocks regrouped sixteen rows at a time without loss (N % 16 = 0;
 * qkernel.q4kt_pack). Per unit u of rows 16u … 16u+15 and block b of 256 inputs, 2304 bytes (16 × 144):
 *     head  dwords [4][16]: for each row, its block's d | dmin, then the three code words w0, w1, w2 (q4k_block's)
 *     runs  [4][8][16][4] bytes: for each run r of 32 nibble bytes (groups 2r and 2r+1: low and high nibbles), for
 *           k4 = 0 … 7, the run's bytes 4·k4 … 4·k4+3 of each of the sixteen rows
 * so a run's 512 bytes `& 0x0f` are group 2r's weights and `& 0xf0` group 2r+1's times 16, each in the layout of a
 * tile's B operand (K/4 rows of N × 4 bytes); the two stacked are one B of 16 rows, K = 64.
 *
 * One TDPBSUD a run: the activations as A (signed) in `tile_acts`' layout — two rows per activation row m, row 2m
 * group 2r's 32 bytes then 32 zeros, row 2m+1 32 zeros then group 2r+1's — and the run's weights as B (unsigned),
 * so C[2m+h][n] = Σ_k a[m,k]·q[n,k] over group 2r+h alone, for up to eight activation rows (16 tile rows). A
 * product of two groups a run with half its multiplies on zeros beat two products of one group: the tile unit's
 * throughput, not its multiplies, bounded the loop (M = 1, 8960 × 1536 from cache: 0.216 → ~0.19 ms).
 *
 * Then  y[m,n] = Σ_g ( C_g[m][n]·(S_g[n]·d[m,g]) + Mn_g[n]·c[m,g] )  with S_g = d·sc_g (÷16 for an odd g, whose q
 * came ×16: a power of two, so the same products) and Mn_g = −dmin·m_g, in 16 float32 lanes over the unit's rows
 * n. Per unit and block: the sixteen rows' scales decoded at once (a lane a row), per run eight loads, sixteen
 * ANDs and stores, a tile load of B and one of A, one TDPBSUD; per activation row and group a conversion, a
 * multiply and two FMAs — where the VNNI build (rows_q4k) takes per row and block the scale decoding and per
 * activation row four vpdpbusd, conversions, permutes and FMAs, so its cost grows with M and this one barely.
 *
 * Q6KT: Q6_K blocks (q6k_rows.h's format: Ŵ = (d·sc_j)·(q − 32) per sub-block j of 16) regrouped likewise
 * (qkernel.q6kt_pack), per unit and block 3360 bytes (16 × 210):
 *     d [16] fp16 | sc [16 sub-blocks][16 rows] int8 | ql [8 pairs][4][16][4]: sub-block 2p's q & 15 low, 2p+1's high
 *     | qh [4][4][16][4]: sub-block 4r+s's q >> 4 at bits 2s, 2s+1
 * each 256-byte part in a tile's B order. A run is a pair of sub-blocks (one group of activations): q = low nibble |
 * its top bits moved to bits 4–5, one K = 32 product (A rows 2m, 2m+1: the sub-blocks' 16 bytes each beside 16
 * zeros), and
 *     y[m,n] = Σ_j W_j[n]·(C_j[m][n]·d[m, j/2] + c16[m, j]),  W_j = d·sc_j (exact: fp16 × int8),
 * c16 q6k_prep's −32 offsets — the same two terms as rows_q6k, in 16 lanes over the unit's rows.
 *
 * Both loops are software-pipelined over every run s of a call's units (four C tiles, a run each): at step s, run
 * s−QT_LAG's C tile is stored, run s+QT_AHEAD's weights unpacked, run s's product issued, then run s−QT_LAG−QT_READ
 * folded into the accumulators — so a tile product, its store and the stores feeding a tile load each have other
 * work beside them (one run at a time waited on each: ~2× slower; a two-step pipeline measured the same as this one
 * within the host's noise, which does not stall at a unit's end). Every y[m,n] takes the same operations in the same order whatever M is:
 * batch-invariant within this build (its bits are not rows_q4k's / rows_q6k's).
 */
#define Q4KT_UNIT 2304 /* bytes of one unit's block: 16 rows × 144 */
#define Q6KT_UNIT 3360 /* 16 rows × 210 */
/* Q4KT_PF: software prefetch this many bytes ahead in a unit's weights. Why: measured M = 1, 2 threads, 90 copies of
 * an 8960 × 1536 Q4_K weight read in turn (0.70 GB, from memory; the AMX Xeon, its read probe ~20 GB/s then): 15.9
 * GB/s without, 19.4–20.0 at 2304, 4608 and 9216 bytes ahead (hand harness). */
#ifndef Q4KT_PF
#define Q4KT_PF 4608
#endif

#if defined(__AMX_INT8__)
#include <sys/syscall.h>
#include <unistd.h>

static int amx_ok;
__attribute__((constructor)) static void amx_request(void) {
    amx_ok = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
}
int speclab_amx_ok(void) { return amx_ok; }

struct amxq_cfg { uint8_t palette, start; uint8_t pad[14]; uint16_t colsb[16]; uint8_t rows[16]; };

/* tmm0 … tmm3: C (crows × 16 int32, a run each); tmm4, tmm5: A (crows rows of kb bytes); tmm6, tmm7: B (kb / 4 rows
 * of 64 bytes). Loaded at every call: the dense AMX library configures the same tiles its own way on the same
 * threads. */
static inline void amx_tiles_config(int crows, int kb) {
    struct amxq_cfg cf;
    memset(&cf, 0, sizeof cf);
    cf.palette = 1;
    for (int t = 0; t < 4; t++) cf.rows[t] = (uint8_t)crows, cf.colsb[t] = 64;
    for (int t = 4; t < 6; t++) cf.rows[t] = (uint8_t)crows, cf.colsb[t] = (uint16_t)kb;
    for (int t = 6; t < 8; t++) cf.rows[t] = (uint8_t)(kb / 4), cf.colsb[t] = 64;
    /* the whole 64-byte struct as the operand: GCC's _tile_loadconfig names only its first 8 bytes, so the stores to
     * the rest could be dropped as dead (they were, once: LDTILECFG then faulted on a config of zeros) */
    __asm__ volatile("ldtilecfg %0" ::"m"(cf));
}

/* The Q4KT / Q6KT loops' tiles: two tile rows per activation row (tile_acts). */
static inline void amxq_config(int mc, int kb) { amx_tiles_config(2 * mc, kb); }

/* The activations as the tiles take them (A per run, `kb` bytes a row: 64 for Q4KT, 32 for Q6KT), per chunk of
 * MCHUNK rows starting at 2·m0·K bytes: for each run of kb inputs, 2·mc rows — row 2m its first half then zeros,
 * row 2m+1 zeros then its second half. 2·M·K bytes. */
static void tile_acts(int kb, int M, int K, const int8_t *a, int8_t *ax) {
    const int hb = kb / 2;
    for (int m0 = 0; m0 < M; m0 += MCHUNK) {
        const int mc = M - m0 < MCHUNK ? M - m0 : MCHUNK;
        int8_t *o = ax + (size_t)2 * m0 * K;
        for (int r = 0; r < K / kb; r++)
            for (int m = 0; m < mc; m++) {
                const int8_t *src = a + (size_t)(m0 + m) * K + (size_t)r * kb;
                int8_t *row = o + ((size_t)r * 2 * mc + 2 * m) * kb;
                memcpy(row, src, hb);
                memset(row + hb, 0, hb);
                memset(row + kb, 0, hb);
                memcpy(row + kb + hb, src + hb, hb);
            }
    }
}
#endif

/* The sixteen rows' scales S_g (odd g ÷ 16) and minimum terms Mn_g of one block, a lane a row. */
static inline void q4kt_scales(const uint8_t *hd, __m512 S[8], __m512 Mn[8]) {
    const __m512i dd = _mm512_loadu_si512((const void *)hd);
    const __m512i w0 = _mm512_loadu_si512((const void *)(hd + 64)), w1 = _mm512_loadu_si512((const void *)(hd + 128));
    const __m512i w2 = _mm512_loadu_si512((const void *)(hd + 192));
    const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    const __m512 ndmin = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))));
    const __m512i m63 = _mm512_set1_epi32(63), m15 = _mm512_set1_epi32(15), m48 = _mm512_set1_epi32(48);
    const __m512 d16 = _mm512_mul_ps(d, _mm512_set1_ps(0.0625f));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {  /* llama.cpp's get_scale_min_k4: j < 4 six bits of w0 / w1; j ≥ 4 w2's nibbles, w0 / w1's tops */
        const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(w0, 8 * j), m63);
        const __m512i mc = _mm512_and_si512(_mm512_srli_epi32(w1, 8 * j), m63);
        const __m512i sh = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 8 * j), m15),
                                           _mm512_and_si512(_mm512_srli_epi32(w0, 8 * j + 2), m48));
        const __m512i mh = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 8 * j + 4), m15),
                                           _mm512_and_si512(_mm512_srli_epi32(w1, 8 * j + 2), m48));
        S[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(sc), (j & 1) ? d16 : d);
        Mn[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(mc), ndmin);
        S[4 + j] = _mm512_mul_ps(_mm512_cvtepi32_ps(sh), (j & 1) ? d16 : d);
        Mn[4 + j] = _mm512_mul_ps(_mm512_cvtepi32_ps(mh), ndmin);
    }
}

#if defined(__AMX_INT8__)
/* Run t's product into C tile t mod 4: B from the unpacked weights (64 bytes a row), A from rows lda bytes apart
 * (tile_acts' rows: kb; qpanel.h's activations as quantize_x lays them: K). */
static inline __attribute__((always_inline)) void qt_issue(int t, const uint8_t *bw, const int8_t *ar, int lda) {
    if (t & 1) {
        _tile_loadd(7, bw, 64);
        _tile_loadd(5, ar, lda);
    } else {
        _tile_loadd(6, bw, 64);
        _tile_loadd(4, ar, lda);
    }
    switch (t & 3) {
        case 0: _tile_zero(0); _tile_dpbsud(0, 4, 6); break;
        case 1: _tile_zero(1); _tile_dpbsud(1, 5, 7); break;
        case 2: _tile_zero(2); _tile_dpbsud(2, 4, 6); break;
        default: _tile_zero(3); _tile_dpbsud(3, 5, 7); break;
    }
}

/* Run t's C tile (t mod 4) into cb (2·mc rows of 16 int32). */
static inline __attribute__((always_inline)) void qt_store(int t, int32_t *cb) {
    switch (t & 3) {
        case 0: _tile_stored(0, cb, 64); break;
        case 1: _tile_stored(1, cb, 64); break;
        case 2: _tile_stored(2, cb, 64); break;
        default: _tile_stored(3, cb, 64); break;
    }
}
#endif

/* Q4KT run t of a unit (block t / 4, groups 2(t mod 4) and +1): the nibbles into bw (low: rows 0–7, high: 8–15) and
 * the run's scales (the block's decoded at its first run). */
static inline __attribute__((always_inline)) void q4kt_unpack(const uint8_t *wu, int t, uint8_t *bw, __m512 *S,
        __m512 *Mn, __m512 bS[8], __m512 bM[8]) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), high4 = _mm512_set1_epi8((char)0xf0);
    const uint8_t *blk = wu + (size_t)(t >> 2) * Q4KT_UNIT;
    if ((t & 3) == 0) q4kt_scales(blk, bS, bM);
    const uint8_t *run = blk + 256 + 512 * (t & 3);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        if (Q4KT_PF) _mm_prefetch((const char *)(run + 64 * i + Q4KT_PF), _MM_HINT_T0);
        const __m512i p = _mm512_loadu_si512((const void *)(run + 64 * i));
        _mm512_store_si512((void *)(bw + 64 * i), _mm512_and_si512(p, low4));
        _mm512_store_si512((void *)(bw + 512 + 64 * i), _mm512_and_si512(p, high4));
    }
    S[0] = bS[2 * (t & 3)], S[1] = bS[2 * (t & 3) + 1], Mn[0] = bM[2 * (t & 3)], Mn[1] = bM[2 * (t & 3) + 1];
}

/* A Q4KT run's groups g, g+1 (C rows 2m, 2m+1 in cb) into the accumulators: acc[m] += C·(S·d[m,g]) + Mn·c[m,g]. */
static inline __attribute__((always_inline)) void q4kt_fold(const int MC, const __m512 *S, const __m512 *Mn, int g,
        int G, const float *d, const float *c, const int32_t *cb, __m512 *acc) {
#pragma GCC unroll 8
    for (int m = 0; m < MC; m++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cb + 16 * (2 * m + h))));
            acc[m] = _mm512_fmadd_ps(v, _mm512_mul_ps(S[h], _mm512_set1_ps(d[(size_t)m * G + g + h])), acc[m]);
            acc[m] = _mm512_fmadd_ps(Mn[h], _mm512_set1_ps(c[(size_t)m * G + g + h]), acc[m]);
        }
}

/* The unit's sums rounded into y's sixteen columns 16u … 16u+15. */
static inline __attribute__((always_inline)) void qt_out(const int MC, int u, const __m512 *acc, uint16_t *y, int ldy) {
#pragma GCC unroll 8
    for (int m = 0; m < MC; m++) {
        float o[16] __attribute__((aligned(64)));
        _mm512_store_ps(o, acc[m]);
        for (int n = 0; n < 16; n++) y[(size_t)m * ldy + 16 * u + n] = f32_to_bf16(o[n]);
    }
}

/* QT_LAG: a run's C tile is stored this many steps after its product is issued (four C tiles: at most three runs in
 * flight beside the one being issued); QT_READ, QT_AHEAD below. Why steps apart at all: a vector load of a tile just
 * stored, and a tile load of vector stores just made, each wait for those stores to commit. */
#ifndef QT_LAG
#define QT_LAG 3
#endif
#ifndef QT_READ
#define QT_READ 2 /* steps between a C tile's store and the vector loads that fold it */
#endif
#ifndef QT_AHEAD
#define QT_AHEAD 2 /* steps between a run's unpacking (vector stores) and its tile load */
#endif

/* Q6KT run t of a unit (block t / 8, sub-blocks 2p and 2p+1, p = t mod 8): its q into bw (rows 0–3, 4–7) and W. */
static inline __attribute__((always_inline)) void q6kt_unpack(const uint8_t *wu, int t, uint8_t *bw, __m512 *W) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), top = _mm512_set1_epi8(0x30);
    const uint8_t *blk = wu + (size_t)(t >> 3) * Q6KT_UNIT;
    const int p = t & 7, s0 = 2 * (p & 1);  /* the pair's top bits: s0, s0 + 1 of qh part p / 2 */
    const uint8_t *ql = blk + 288 + 256 * p, *qh = blk + 2336 + 256 * (p >> 1);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        if (Q4KT_PF) _mm_prefetch((const char *)(ql + 64 * i + Q4KT_PF), _MM_HINT_T0);
        const __m512i l = _mm512_loadu_si512((const void *)(ql + 64 * i)), h = _mm512_loadu_si512((const void *)(qh + 64 * i));
        /* bits 2s, 2s+1 to 4, 5: s = 0 shift left 4, 1 left 2, 2 none, 3 right 2 (16-bit shifts; the mask keeps a byte's own) */
        const __m512i h0 = s0 == 0 ? _mm512_slli_epi16(h, 4) : h;
        const __m512i h1 = s0 == 0 ? _mm512_slli_epi16(h, 2) : _mm512_srli_epi16(h, 2);
        /* (A & 0x0f) | (B & 0x30): ternary 0xF8, A | (B & C), over (A & 0x0f, B, 0x30) */
        _mm512_store_si512((void *)(bw + 64 * i), _mm512_ternarylogic_epi32(_mm512_and_si512(l, low4), h0, top, 0xF8));
        _mm512_store_si512((void *)(bw + 256 + 64 * i),
                           _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l, 4), low4), h1, top, 0xF8));
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
    W[0] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 32 + 32 * p)))));
    W[1] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 48 + 32 * p)))));
}

/* A Q6KT run's sub-blocks j, j+1 (global; group j/2; C rows 2m, 2m+1 in cb) into the accumulators. */
static inline __attribute__((always_inline)) void q6kt_fold(const int MC, const __m512 *W, int j, int G, int J,
        const float *d, const float *c16, const int32_t *cb, __m512 *acc) {
#pragma GCC unroll 8
    for (int m = 0; m < MC; m++)
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512 v = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(cb + 16 * (2 * m + h))));
            const __m512 t = _mm512_fmadd_ps(v, _mm512_set1_ps(d[(size_t)m * G + j / 2]),
                                             _mm512_set1_ps(c16[(size_t)m * J + j + h]));
            acc[m] = _mm512_fmadd_ps(t, W[h], acc[m]);
        }
}

#if defined(__AMX_INT8__)
/* Units u0 … u1−1 (rows 16u0 … 16u1−1) of a Q4KT (Q6 = 0) or Q6KT (Q6 = 1) weight for MC ≤ 8 activation rows: ax
 * their tile_acts rows (64 or 32 bytes a run), d quantize_x's scales, c its sums (Q4KT) or q6k_prep's offsets (Q6KT).
 * One pipeline over every run of every unit (s = (u − u0)·T + t), so no unit waits for its last products: runs are
 * folded in order, and a unit's sums are rounded out at its last run's fold. */
static inline __attribute__((always_inline)) void rows_qt_mc(const int MC, const int Q6, int u0, int u1, int K,
        const int8_t *ax, const float *d, const float *c, const uint8_t *w, uint16_t *y, int ldy) {
    const int G = K / GROUP, J = K / 16, kb = Q6 ? 32 : 64, T = K / 256 * (Q6 ? 8 : 4), TT = (u1 - u0) * T;
    const size_t unit_bytes = (size_t)(K / 256) * (Q6 ? Q6KT_UNIT : Q4KT_UNIT);
    uint8_t bw[4][1024] __attribute__((aligned(64)));
    int32_t cb[4][16 * 16] __attribute__((aligned(64)));
    /* runs' scales by s mod 8 (s − 5 … s + 2 live at once): Q4KT's S and Mn, Q6KT's W in S; a Q4KT block's in bS, bM */
    __m512 acc[8], bS[8], bM[8], S[8][2], Mn[8][2];
    if (TT == 0) return;
    amxq_config(MC, kb);
#pragma GCC unroll 8
    for (int m = 0; m < MC; m++) acc[m] = _mm512_setzero_ps();
    for (int s = -QT_AHEAD; s < TT + QT_LAG + QT_READ; s++) {  /* s < 0: the first runs unpacked ahead */
        if (s >= QT_LAG && s - QT_LAG < TT) qt_store(s - QT_LAG, cb[(s - QT_LAG) & 3]);
        if (s + QT_AHEAD < TT) {
            const int r = s + QT_AHEAD, un = r / T;
            const uint8_t *wu = w + (size_t)(u0 + un) * unit_bytes;
            if (Q6) q6kt_unpack(wu, r - un * T, bw[r & 3], S[r & 7]);
            else q4kt_unpack(wu, r - un * T, bw[r & 3], S[r & 7], Mn[r & 7], bS, bM);
        }
        if (s >= 0 && s < TT) qt_issue(s, bw[s & 3], ax + (size_t)(s % T) * 2 * MC * kb, kb);
        if (s >= QT_LAG + QT_READ) {
            const int f = s - QT_LAG - QT_READ, uf = f / T, t = f - uf * T;
            if (Q6) q6kt_fold(MC, S[f & 7], 2 * t, G, J, d, c, cb[f & 3], acc);
            else q4kt_fold(MC, S[f & 7], Mn[f & 7], 2 * t, G, d, c, cb[f & 3], acc);
            if (t == T - 1) {
                qt_out(MC, u0 + uf, acc, y, ldy);
#pragma GCC unroll 8
                for (int m = 0; m < MC; m++) acc[m] = _mm512_setzero_ps();
            }
        }
    }
    _tile_release();  /* the tiles back to their init state: a context switch then saves none of their 8 KB */
}
#endif

/* One Q4_K block of row n (its 144 bytes as the GGUF stores them) from the Q4KT layout (speclab_dequant's reader). */
static void q4kt_block(const uint8_t *w, int K, int n, int b, uint8_t out[144]) {
    const int B = K / 256, u = n / 16, i = n % 16;
    const uint8_t *blk = w + ((size_t)u * B + b) * Q4KT_UNIT;
    for (int t = 0; t < 4; t++) memcpy(out + 4 * t, blk + 64 * t + 4 * i, 4);
    for (int r = 0; r < 4; r++)
        for (int k4 = 0; k4 < 8; k4++) memcpy(out + 16 + 32 * r + 4 * k4, blk + 256 + 512 * r + 64 * k4 + 4 * i, 4);
}
