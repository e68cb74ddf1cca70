/* A whole forward step of a Llama-family model in native code: any number of token rows
 * (decodes of many sequences, prompt chunks, or both), each at its own position.
 *
 * Decoding one token per sequence reads every weight once and does little arithmetic with
 * it, so its speed is set by how fast the weights stream from memory and by what is paid
 * per operation. In PyTorch a step is ~400 small operator calls around kernels that are
 * either float (4-8x the bytes) or slower than memory; here the whole step is one call:
 *
 *   embed -> per layer: rms_norm, QKV, RoPE, K/V into the paged cache, attention
 *   (decode_attention.c), O, residual, rms_norm, gate|up, SiLU * up, down, residual
 *   -> rms_norm -> lm_head logits (only for the rows asked for).
 *
 * A prompt chunk is rows of one sequence at consecutive positions: every layer writes all
 * rows' keys and values into the cache before any row attends, and row r attends to the
 * positions up to its own (length = position + 1), which is causal attention. Each row's
 * arithmetic is independent of the other rows, so a token's result does not depend on
 * what else is in the step or on how its prompt was chunked.
 *
 * Matrix products are integer dot products: AVX-512 VNNI (vpdpbusd) where the CPU has it,
 * else AVX2 (vpmaddubsw): unsigned bytes times signed bytes, summed exactly. Each
 * activation row is quantised to int8 per group of 32 inputs (one float scale per group);
 * weights are the model file's own 4-bit codes (Q4_0/Q4_1: w = d * code + m per group of
 * 32) or, for the lm_head, int8 codes with one scale per group of 32 (Q8_0; exact for a
 * Q8_0 file). Per group of 32 inputs:
 *   sum(w * x) = d * dx * sum(code * xq) + m * sum(x)
 * Weights are laid out in tiles of TILE output rows (8 for AVX2, 16 for AVX-512), so one
 * register holds 4 codes of each of the tile's rows and a broadcast of 4 activation bytes
 * multiplies all of them: every 32-bit lane accumulates its own output row, and no
 * horizontal sums are needed. The products' integer sums are exact and both instruction
 * sets apply the scales in the same order per output row.
 *
 * Q4 tile, per (TILE rows, group of 32 inputs), TILE * 20 bytes in memory order:
 *   4 x TILE * 4 bytes of codes: register k, lane r, byte b holds code[r][4k + b] in its
 *                                low nibble and code[r][16 + 4k + b] in its high nibble
 *   TILE x fp16 d, then TILE x fp16 m
 * Int8 tile, per (TILE rows, group of 32), TILE * 34 bytes: register k (0..7), lane r,
 *   byte b holds code[r][4k + b] + Q8_OFFSET (codes within -127..127; VNNI multiplies
 *   unsigned weight bytes, so they are stored offset by 128 there), then TILE x fp16 d
 *   (w = d * code).
 *
 * Everything between the products stays in float32 (the residual stream included); the
 * query, keys and values take the cache's type (float32 or bfloat16) for the attention.
 */
#include "decode_attention.c"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define HAVE_AVX2 1
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#define HAVE_VNNI512 1
#endif
#endif

#ifdef HAVE_VNNI512
#define TILE 16
#define Q8_OFFSET 128
#else
#define TILE 8
#define Q8_OFFSET 0
#endif
#define GROUP 32
#define Q4_TILE_BYTES (TILE * 20)
#define Q8_TILE_BYTES (TILE * 34)
/* Rows one call takes: a step's whole token budget (scratch is sized per call). */
#define MAX_ROWS 8192

typedef struct {
    const uint8_t *tiles; /* [out / TILE][in / 32][Q4_TILE_BYTES] */
    const float *bias;    /* [out] or NULL */
    int64_t in, out;
} Q4Matrix;

typedef struct {
    const int8_t *tiles; /* [out / TILE][in / 32][Q8_TILE_BYTES] */
    int64_t in, out;
} Q8Matrix;

typedef struct {
    const float *input_norm, *post_norm; /* [hidden] */
    Q4Matrix qkv, o, gate_up, down;
} Layer;

typedef struct {
    int64_t hidden, intermediate, n_heads, n_kv, head_dim, n_layers, vocab, max_position;
    int64_t bf16;             /* 1: embedding and cache in bfloat16, 0: float32 */
    float eps;
    const void *embed;        /* [vocab, hidden] */
    const float *final_norm;  /* [hidden] */
    const double *inv_freq;   /* [head_dim / 2] RoPE frequencies, scaling applied */
    const Layer *layers;      /* [n_layers] */
    Q8Matrix lm_head;
} Model;

/* Activations of the step's rows, quantised per group of 32 for the integer products. */
typedef struct {
    int8_t *q;     /* [rows][n] */
    float *d;      /* [rows][n / 32] scale: x ~ d * q */
    float *sum;    /* [rows][n / 32] exact float sum of the group's x */
    int32_t *qsum; /* [rows][n / 32] sum of the group's q (undoes Q8_OFFSET) */
} Quantised;

/* Rows of the output tile that one call of a tile function multiplies (see ROW_BLOCK). */
#define MAX_BLOCK 8

int forward_step_supported(void) {
#ifdef HAVE_AVX2
    return 1;
#else
    return 0;
#endif
}

/* How the caller lays out the weights: rows per tile, and the offset of the int8 codes. */
int step_tile_rows(void) { return TILE; }
int step_q8_offset(void) { return Q8_OFFSET; }

#ifdef HAVE_AVX2

static inline float hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

static inline float hmax8(__m256 v) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_max_ss(x, _mm_movehdup_ps(x)));
}

static inline int32_t hsum8_i32(__m256i v) {
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4e));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xb1));
    return _mm_cvtsi128_si32(x);
}

/* 8 int32 -> 8 int8 (values within -127..127) */
static inline void store8_i8(int8_t *dst, __m256i v) {
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    const __m128i b = _mm_packs_epi16(w, w);
    _mm_storel_epi64((__m128i *)dst, b);
}

static void quantise(const float *x, int rows, int64_t n, Quantised *out) {
    const int64_t groups = n / GROUP;
    const __m256 sign = _mm256_set1_ps(-0.f);
    for (int r = 0; r < rows; r++) {
        for (int64_t g = 0; g < groups; g++) {
            const float *src = x + r * n + g * GROUP;
            __m256 v[4], top = _mm256_setzero_ps(), sum = _mm256_setzero_ps();
            for (int k = 0; k < 4; k++) {
                v[k] = _mm256_loadu_ps(src + 8 * k);
                top = _mm256_max_ps(top, _mm256_andnot_ps(sign, v[k]));
                sum = _mm256_add_ps(sum, v[k]);
            }
            const float t = hmax8(top);
            const __m256 inv = _mm256_set1_ps(t > 0.f ? 127.f / t : 0.f);
            int8_t *dst = out->q + r * n + g * GROUP;
            __m256i qsum = _mm256_setzero_si256();
            for (int k = 0; k < 4; k++) {
                const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], inv));
                store8_i8(dst + 8 * k, q);
                qsum = _mm256_add_epi32(qsum, q);
            }
            out->d[r * groups + g] = t / 127.f;
            out->sum[r * groups + g] = hsum8(sum);
            out->qsum[r * groups + g] = hsum8_i32(qsum);
        }
    }
}

static inline int32_t load4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Bytes ahead of the tile being multiplied that are asked for: weights stream from memory
 * once, and the hardware prefetcher alone leaves the loads waiting. */
#define PREFETCH_AHEAD 2048 /* best of 0, 1, 2 and 4 KiB: 7.9, 6.6, 6.4, 7.2 ms/token */

#ifdef HAVE_VNNI512
/* Activation rows that go through a tile at once: its codes are loaded and unpacked once
 * for all of them; 32 registers hold 4 rows' sums with room to spare. */
#define ROW_BLOCK 4
typedef __m512 VecF;
typedef __m512i VecI;
#define ZERO_F() _mm512_setzero_ps()
#define ZERO_I() _mm512_setzero_si512()
#define SET1_F(v) _mm512_set1_ps(v)
#define LOAD_F(p) _mm512_loadu_ps(p)
#define STORE_F(p, v) _mm512_storeu_ps(p, v)
#define FMADD(a, b, c) _mm512_fmadd_ps(a, b, c)
#define MUL_F(a, b) _mm512_mul_ps(a, b)
#define ADD_F(a, b) _mm512_add_ps(a, b)
#define TO_F(v) _mm512_cvtepi32_ps(v)
#define HALVES(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define LOAD_I(p) _mm512_loadu_si512((const void *)(p))
#define LOW_NIBBLES() _mm512_set1_epi8(0x0f)
#define AND_I(a, b) _mm512_and_si512(a, b)
#define SHIFT4(c) _mm512_srli_epi16(c, 4)
#define WIDEN16(s) (s) /* vpdpbusd sums into 32-bit lanes already */
#else
/* Two rows at once: everything stays in AVX2's 16 registers (blocks of 3 and 4 rows
 * spilled to the stack and were slower: 32 rows took 160 and 165 ms a step against 142). */
#define ROW_BLOCK 2
typedef __m256 VecF;
typedef __m256i VecI;
#define ZERO_F() _mm256_setzero_ps()
#define ZERO_I() _mm256_setzero_si256()
#define SET1_F(v) _mm256_set1_ps(v)
#define LOAD_F(p) _mm256_loadu_ps(p)
#define STORE_F(p, v) _mm256_storeu_ps(p, v)
#define FMADD(a, b, c) _mm256_fmadd_ps(a, b, c)
#define MUL_F(a, b) _mm256_mul_ps(a, b)
#define ADD_F(a, b) _mm256_add_ps(a, b)
#define TO_F(v) _mm256_cvtepi32_ps(v)
#define HALVES(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define LOAD_I(p) _mm256_loadu_si256((const __m256i *)(p))
#define LOW_NIBBLES() _mm256_set1_epi8(0x0f)
#define AND_I(a, b) _mm256_and_si256(a, b)
#define SHIFT4(c) _mm256_srli_epi16(c, 4)
#define WIDEN16(s) _mm256_madd_epi16(s, _mm256_set1_epi16(1))
#endif

/* s += code * xq over one register of codes (4 inputs of each tile row) and 4 activation
 * bytes, exactly. AVX2 sums pairs into 16-bit lanes; the caller widens them (see q4_tile). */
#ifdef HAVE_VNNI512
#define Q4_DOT(s, codes, xq) ((s) = _mm512_dpbusd_epi32((s), (codes), _mm512_set1_epi32(load4(xq))))
#else
#define Q4_DOT(s, codes, xq)                                                                 \
    ((s) = _mm256_add_epi16((s), _mm256_maddubs_epi16((codes), _mm256_set1_epi32(load4(xq)))))
#endif

/* One tile (TILE output rows) for activation rows r0 .. r0 + R - 1; R is a constant where
 * this is inlined, so the row loops unroll and nothing spills. */
static inline __attribute__((always_inline)) void q4_tile(const Q4Matrix *w, int64_t t,
                                                          const Quantised *x, int r0,
                                                          const int R, float *y) {
    const int64_t groups = w->in / GROUP;
    const VecI low = LOW_NIBBLES();
    const uint8_t *p = w->tiles + t * groups * Q4_TILE_BYTES;
    VecF acc[MAX_BLOCK];
    for (int r = 0; r < R; r++) acc[r] = ZERO_F();
    for (int64_t g = 0; g < groups; g++, p += Q4_TILE_BYTES) {
        for (int line = 0; line < Q4_TILE_BYTES; line += 64)
            _mm_prefetch((const char *)p + PREFETCH_AHEAD + line, _MM_HINT_T0);
        /* AVX2's 16-bit lane sums: codes <= 15 and |xq| <= 127, so all 8 pair sums of a
         * lane (<= 8 * 3810) fit before widening once. */
        VecI s[MAX_BLOCK];
        for (int r = 0; r < R; r++) s[r] = ZERO_I();
        for (int k = 0; k < 4; k++) {
            const VecI c = LOAD_I(p + TILE * 4 * k);
            const VecI lo = AND_I(c, low), hi = AND_I(SHIFT4(c), low);
            for (int r = 0; r < R; r++) {
                const int8_t *xq = x->q + (r0 + r) * w->in + g * GROUP + 4 * k;
                Q4_DOT(s[r], lo, xq);
                Q4_DOT(s[r], hi, xq + 16);
            }
        }
        const VecF d = HALVES(p + TILE * 16), m = HALVES(p + TILE * 18);
        for (int r = 0; r < R; r++) {
            const int64_t i = (r0 + r) * groups + g;
            const VecF dot = TO_F(WIDEN16(s[r]));
            acc[r] = FMADD(dot, MUL_F(d, SET1_F(x->d[i])), acc[r]);
            acc[r] = FMADD(m, SET1_F(x->sum[i]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        VecF v = acc[r];
        if (w->bias) v = ADD_F(v, LOAD_F(w->bias + t * TILE));
        STORE_F(y + (r0 + r) * w->out + t * TILE, v);
    }
}

/* s = sum(code * xq) over a group, exactly, for int8 codes stored as Q8_OFFSET + code. */
static inline __attribute__((always_inline)) VecI q8_group(const int8_t *p, const int8_t *xq,
                                                           int32_t qsum) {
#ifdef HAVE_VNNI512
    /* Unsigned (code + 128) times signed xq: the sum carries 128 * sum(xq) extra. */
    VecI s = _mm512_setzero_si512();
    for (int k = 0; k < 8; k++)
        s = _mm512_dpbusd_epi32(s, LOAD_I(p + TILE * 4 * k), _mm512_set1_epi32(load4(xq + 4 * k)));
    return _mm512_sub_epi32(s, _mm512_set1_epi32(Q8_OFFSET * qsum));
#else
    /* Signed times signed as |w| times (x with w's sign): vpmaddubsw wants its first
     * operand unsigned. Pair sums (<= 2 * 127 * 127) widen at once. */
    (void)qsum;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++) {
        const __m256i c = LOAD_I(p + TILE * 4 * k);
        const __m256i x4 = _mm256_sign_epi8(_mm256_set1_epi32(load4(xq + 4 * k)), c);
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(c), x4);
        s = _mm256_add_epi32(s, _mm256_madd_epi16(pairs, ones));
    }
    return s;
#endif
}

static inline __attribute__((always_inline)) void q8_tile(const Q8Matrix *w, int64_t t,
                                                          const Quantised *x, int r0,
                                                          const int R, float *y) {
    const int64_t groups = w->in / GROUP;
    const int8_t *p = w->tiles + t * groups * Q8_TILE_BYTES;
    VecF acc[MAX_BLOCK];
    for (int r = 0; r < R; r++) acc[r] = ZERO_F();
    for (int64_t g = 0; g < groups; g++, p += Q8_TILE_BYTES) {
        for (int line = 0; line < Q8_TILE_BYTES; line += 64)
            _mm_prefetch((const char *)p + PREFETCH_AHEAD + line, _MM_HINT_T0);
        const VecF d = HALVES(p + TILE * 32);
        for (int r = 0; r < R; r++) {
            const int64_t i = (r0 + r) * groups + g;
            const VecI s = q8_group(p, x->q + (r0 + r) * w->in + g * GROUP, x->qsum[i]);
            acc[r] = FMADD(TO_F(s), MUL_F(d, SET1_F(x->d[i])), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) STORE_F(y + (r0 + r) * w->out + t * TILE, acc[r]);
}

/* Rows taken through all the tiles before the next ones: their activations stay in L2 and
 * their outputs in cache while they are written (all of a prompt chunk's rows at once wrote
 * 64 bytes into each of hundreds of rows per tile: 1.44 against 1.18 ms a row). */
#define ROW_CHUNK 64

/* y[r][row] = sum_i w[row][i] * x[r][i] (+ bias) for all rows r and the tiles [t0, t1):
 * whole blocks of ROW_BLOCK rows, then what is left (R is a constant in every call). */
#define DEFINE_TILES(NAME, MATRIX, TILE_FN)                                                  \
static void NAME(const MATRIX *w, int rows, const Quantised *x, float *y, int64_t t0,       \
                 int64_t t1) {                                                              \
    for (int c0 = 0; c0 < rows; c0 += ROW_CHUNK) {                                          \
        const int c1 = rows < c0 + ROW_CHUNK ? rows : c0 + ROW_CHUNK;                       \
        for (int64_t t = t0; t < t1; t++) {                                                 \
            int r0 = c0;                                                                    \
            for (; r0 + ROW_BLOCK <= c1; r0 += ROW_BLOCK) TILE_FN(w, t, x, r0, ROW_BLOCK, y); \
            switch (c1 - r0) {                                                              \
            case 3: TILE_FN(w, t, x, r0, 3, y); break;                                      \
            case 2: TILE_FN(w, t, x, r0, 2, y); break;                                      \
            case 1: TILE_FN(w, t, x, r0, 1, y); break;                                      \
            default: break;                                                                 \
            }                                                                               \
        }                                                                                   \
    }                                                                                       \
}

DEFINE_TILES(q4_tiles, Q4Matrix, q4_tile)
DEFINE_TILES(q8_tiles, Q8Matrix, q8_tile)

/* The tiles are shared out in equal contiguous runs: each thread streams its own part. */
static void share(int64_t tiles, int64_t *t0, int64_t *t1) {
#ifdef _OPENMP
    const int n = omp_get_num_threads(), i = omp_get_thread_num();
#else
    const int n = 1, i = 0;
#endif
    *t0 = tiles * i / n;
    *t1 = tiles * (i + 1) / n;
}

/* All the tiles of a matrix, shared among `threads` (one thread: no parallel region to
 * open and close ~150 times a step). */
#define DEFINE_MATMUL(NAME, MATRIX, TILES_FN)                                                \
static void NAME(const MATRIX *w, int rows, const Quantised *x, float *y, int threads) {    \
    if (threads == 1) {                                                                     \
        TILES_FN(w, rows, x, y, 0, w->out / TILE);                                          \
        return;                                                                             \
    }                                                                                       \
    _Pragma("omp parallel num_threads(threads)")                                            \
    {                                                                                       \
        int64_t t0, t1;                                                                     \
        share(w->out / TILE, &t0, &t1);                                                     \
        TILES_FN(w, rows, x, y, t0, t1);                                                    \
    }                                                                                       \
}

DEFINE_MATMUL(q4_matmul, Q4Matrix, q4_tiles)
DEFINE_MATMUL(q8_matmul, Q8Matrix, q8_tiles)

/* out = SiLU(gate) * up, 8 at a time (a prompt chunk makes this millions of exps):
 * sigmoid(g) from e = exp(-|g|), which exp256 takes (x <= 0): 1 / (1 + e) for g >= 0,
 * e / (1 + e) below. */
static void silu_mul(const float *gate, const float *up, int64_t n, float *out) {
    const __m256 one = _mm256_set1_ps(1.f), sign = _mm256_set1_ps(-0.f);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 g = _mm256_loadu_ps(gate + j);
        const __m256 e = exp256(_mm256_or_ps(g, sign));
        const __m256 inv = _mm256_div_ps(one, _mm256_add_ps(one, e));
        const __m256 sigmoid = _mm256_blendv_ps(inv, _mm256_mul_ps(e, inv), g);
        _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), _mm256_loadu_ps(up + j)));
    }
    for (; j < n; j++) out[j] = gate[j] / (1.f + expf(-gate[j])) * up[j];
}

static void rms_norm(const float *x, const float *weight, int rows, int64_t n, float eps,
                     float *out) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + r * n;
        float ss = 0.f;
        for (int64_t j = 0; j < n; j++) ss += xr[j] * xr[j];
        const float inv = 1.f / sqrtf(ss / (float)n + eps);
        for (int64_t j = 0; j < n; j++) out[r * n + j] = weight[j] * (xr[j] * inv);
    }
}

/* HF's rotate_half layout: pairs (i, i + half) rotated by the angle of frequency i. */
static void rope(float *head, const float *cos, const float *sin, int64_t hd) {
    const int64_t half = hd / 2;
    for (int64_t i = 0; i < half; i++) {
        const float a = head[i], b = head[i + half];
        head[i] = a * cos[i] - b * sin[i];
        head[i + half] = b * cos[i] + a * sin[i];
    }
}

/* Element j of a row kept in the model's storage type (float32 or bfloat16). */
static inline float load_value(const void *row, int64_t j, int bf16) {
    return bf16 ? bf16_to_float(((const uint16_t *)row)[j]) : ((const float *)row)[j];
}

static inline void store_value(void *row, int64_t j, float value, int bf16) {
    if (bf16)
        ((uint16_t *)row)[j] = float_to_bf16(value);
    else
        ((float *)row)[j] = value;
}

typedef struct {
    float *x, *h, *qkv, *gate_up;
    float *cos, *sin;     /* [rows][head_dim / 2] each row's rotation at its position */
    void *q, *attended;   /* [rows][n_heads * head_dim] in the cache's type */
    Quantised quant;
} Scratch;

static int scratch_alloc(const Model *m, int rows, Scratch *s) {
    const int64_t qkv = (m->n_heads + 2 * m->n_kv) * m->head_dim;
    const int64_t attn = m->n_heads * m->head_dim;
    int64_t widest = m->intermediate > m->hidden ? m->intermediate : m->hidden;
    widest = attn > widest ? attn : widest;
    const int64_t groups = rows * widest / GROUP;
    s->x = malloc(sizeof(float) * rows * m->hidden);
    s->h = malloc(sizeof(float) * rows * widest);
    s->qkv = malloc(sizeof(float) * rows * qkv);
    s->gate_up = malloc(sizeof(float) * rows * 2 * m->intermediate);
    s->cos = malloc(sizeof(float) * rows * m->head_dim / 2);
    s->sin = malloc(sizeof(float) * rows * m->head_dim / 2);
    s->q = malloc(sizeof(float) * rows * attn);
    s->attended = malloc(sizeof(float) * rows * attn);
    s->quant.q = malloc((size_t)rows * widest);
    s->quant.d = malloc(sizeof(float) * groups);
    s->quant.sum = malloc(sizeof(float) * groups);
    s->quant.qsum = malloc(sizeof(int32_t) * groups);
    return s->x && s->h && s->qkv && s->gate_up && s->cos && s->sin && s->q && s->attended &&
           s->quant.q && s->quant.d && s->quant.sum && s->quant.qsum;
}

static void scratch_free(Scratch *s) {
    void *all[] = {s->x,        s->h,         s->qkv,        s->gate_up,
                   s->cos,      s->sin,       s->q,          s->attended,
                   s->quant.q,  s->quant.d,   s->quant.sum,  s->quant.qsum};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

/* The angles in double, as the reference tables are computed, once per step for all layers. */
static void rope_angles(const Model *m, int rows, const int64_t *positions, Scratch *s) {
    const int64_t half = m->head_dim / 2;
    for (int r = 0; r < rows; r++)
        for (int64_t i = 0; i < half; i++) {
            const double angle = (double)positions[r] * m->inv_freq[i];
            s->cos[r * half + i] = (float)cos(angle);
            s->sin[r * half + i] = (float)sin(angle);
        }
}

/* RoPE on the q and k heads; k and v into the cache at their slots, q beside them. */
static void place_qkv(const Model *m, int rows, const int64_t *slots, void *k_cache,
                      void *v_cache, Scratch *s) {
    const int64_t hd = m->head_dim, nh = m->n_heads, nkv = m->n_kv;
    const int64_t width = (nh + 2 * nkv) * hd;
    const int bf16 = (int)m->bf16;
    for (int r = 0; r < rows; r++) {
        float *row = s->qkv + r * width;
        const float *cos = s->cos + r * hd / 2, *sin = s->sin + r * hd / 2;
        for (int64_t h = 0; h < nh + nkv; h++) rope(row + h * hd, cos, sin, hd);
        for (int64_t j = 0; j < nh * hd; j++) store_value(s->q, r * nh * hd + j, row[j], bf16);
        const int64_t at = slots[r] * nkv * hd;
        for (int64_t j = 0; j < nkv * hd; j++) {
            store_value(k_cache, at + j, row[nh * hd + j], bf16);
            store_value(v_cache, at + j, row[(nh + nkv) * hd + j], bf16);
        }
    }
}

static int attention(const Model *m, int rows, const void *k_cache, const void *v_cache,
                     const int64_t *tables, const int64_t *lengths, int max_blocks,
                     int threads, Scratch *s) {
    const int nh = (int)m->n_heads, nkv = (int)m->n_kv, hd = (int)m->head_dim;
    const float scale = 1.f / sqrtf((float)hd);
    if (m->bf16)
        return decode_attention_bf16(s->q, k_cache, v_cache, tables, lengths, s->attended,
                                     rows, nh, nkv, hd, max_blocks, scale, threads);
    return decode_attention_f32(s->q, k_cache, v_cache, tables, lengths, s->attended, rows, nh,
                                nkv, hd, max_blocks, scale, threads);
}

static int layer_step(const Model *m, const Layer *layer, int rows, const int64_t *slots,
                      void *k_cache, void *v_cache, const int64_t *tables,
                      const int64_t *lengths, int max_blocks, int threads, Scratch *s) {
    const int64_t n = m->hidden, inter = m->intermediate, attn = m->n_heads * m->head_dim;
    rms_norm(s->x, layer->input_norm, rows, n, m->eps, s->h);
    quantise(s->h, rows, n, &s->quant);
    q4_matmul(&layer->qkv, rows, &s->quant, s->qkv, threads);
    place_qkv(m, rows, slots, k_cache, v_cache, s);
    if (attention(m, rows, k_cache, v_cache, tables, lengths, max_blocks, threads, s) != 0)
        return -1;
    for (int64_t j = 0; j < rows * attn; j++) s->h[j] = load_value(s->attended, j, (int)m->bf16);
    quantise(s->h, rows, attn, &s->quant);
    q4_matmul(&layer->o, rows, &s->quant, s->h, threads);
    for (int64_t j = 0; j < rows * n; j++) s->x[j] += s->h[j];
    rms_norm(s->x, layer->post_norm, rows, n, m->eps, s->h);
    quantise(s->h, rows, n, &s->quant);
    q4_matmul(&layer->gate_up, rows, &s->quant, s->gate_up, threads);
    for (int r = 0; r < rows; r++) {
        const float *gate = s->gate_up + r * 2 * inter;
        silu_mul(gate, gate + inter, inter, s->h + r * inter);
    }
    quantise(s->h, rows, inter, &s->quant);
    q4_matmul(&layer->down, rows, &s->quant, s->h, threads);
    for (int64_t j = 0; j < rows * n; j++) s->x[j] += s->h[j];
    return 0;
}

#endif /* HAVE_AVX2 */

/* Runs `rows` tokens through the model (each at its position; see the top of this file):
 * writes their K/V into the cache and the logits [n_logits, vocab] of the rows listed in
 * logit_rows. k_caches / v_caches: one [blocks, 16, n_kv, head_dim] cache per layer, in the
 * model's storage type; tables [rows, max_blocks] (each row its sequence's block table) and
 * lengths [rows] (positions each row attends to, its own included) as decode_attention
 * takes them; cache_blocks: blocks per cache. Returns 0, or -1 (nothing computed, the
 * cache possibly written) when this CPU lacks the instructions, a token, position, slot,
 * block, length or logit row is out of range or memory runs out. */
int forward_step(const Model *m, void *const *k_caches, void *const *v_caches,
                 int64_t cache_blocks, int rows, const int64_t *tokens,
                 const int64_t *positions, const int64_t *slots, const int64_t *tables,
                 const int64_t *lengths, int max_blocks, const int64_t *logit_rows,
                 int n_logits, float *logits, int threads) {
#ifdef HAVE_AVX2
    if (rows < 1 || rows > MAX_ROWS || threads < 1 || n_logits < 0 || n_logits > rows)
        return -1;
    for (int i = 0; i < n_logits; i++)
        if (logit_rows[i] < 0 || logit_rows[i] >= rows) return -1;
    for (int r = 0; r < rows; r++) {
        if (tokens[r] < 0 || tokens[r] >= m->vocab || positions[r] < 0 ||
            positions[r] >= m->max_position || slots[r] < 0 || slots[r] >= cache_blocks * BLOCK)
            return -1;
        for (int b = 0; b < max_blocks; b++)
            if (tables[(int64_t)r * max_blocks + b] < 0 ||
                tables[(int64_t)r * max_blocks + b] >= cache_blocks)
                return -1;
    }
    Scratch s;
    int status = -1;
    if (scratch_alloc(m, rows, &s)) {
        const int64_t n = m->hidden;
        for (int r = 0; r < rows; r++)
            for (int64_t j = 0; j < n; j++)
                s.x[r * n + j] = load_value(m->embed, tokens[r] * n + j, (int)m->bf16);
        rope_angles(m, rows, positions, &s);
        status = 0;
        for (int64_t i = 0; i < m->n_layers && status == 0; i++)
            status = layer_step(m, &m->layers[i], rows, slots, k_caches[i], v_caches[i],
                                tables, lengths, max_blocks, threads, &s);
        if (status == 0 && n_logits > 0) { /* the lm_head only where a token is sampled */
            for (int i = 0; i < n_logits; i++)
                rms_norm(s.x + logit_rows[i] * n, m->final_norm, 1, n, m->eps, s.h + i * n);
            quantise(s.h, n_logits, n, &s.quant);
            q8_matmul(&m->lm_head, n_logits, &s.quant, logits, threads);
        }
    }
    scratch_free(&s);
    return status;
#else
    (void)m, (void)k_caches, (void)v_caches, (void)cache_blocks, (void)rows, (void)tokens;
    (void)positions, (void)slots, (void)tables, (void)lengths, (void)max_blocks;
    (void)logit_rows, (void)n_logits, (void)logits, (void)threads;
    return -1;
#endif
}
