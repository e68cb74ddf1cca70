/* Decode attention straight from the paged KV cache, one query token per sequence.
 *
 * For each sequence d and KV head h, the `group` query heads that share h are scored against
 * every cached position (read through the sequence's block table: no padding to the longest
 * context and no gathered copy), softmaxed, and the values summed with those weights. Keys
 * and values are each read once; everything is accumulated in float32.
 *
 * Layouts (row-major):
 *   q, out        [D, n_heads, head_dim]
 *   k, v (cache)  [num_blocks, BLOCK, n_kv, head_dim]
 *   tables        [D, max_blocks] int64 block ids
 *   lengths       [D] int64 positions to attend to (the new token's included)
 *
 * bfloat16 with head_dim 64 on CPUs with AVX512-BF16 takes the intrinsics path (dot products
 * by vdpbf16ps, a vector exp); float32 or bfloat16 with head_dim 64 on other CPUs with AVX2
 * another (FMA dot products four positions at a time, each key row read once for a group's
 * heads and for consecutive rows of one prompt chunk, bfloat16 widened as it is read, a
 * vector exp); everything else the portable loops. Rows of a prompt chunk are rows here
 * too, each with its own length (causal attention).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#define HAVE_AVX512_BF16 1
#endif
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_AVX2_FMA 1
#endif

#ifdef _OPENMP
#include <omp.h>
#define THREAD_NUM() omp_get_thread_num()
#else
#define THREAD_NUM() 0
#endif

#define BLOCK 16
#define MAX_HEAD_DIM 256
#define MAX_GROUP 16
/* Query vectors (heads of a group, rows of a run) scored in one pass over the keys. */
#define FUSED 6

static inline float bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static void softmax_rows(float *scores, int64_t length, int group) {
    for (int g = 0; g < group; g++) {
        float *sg = scores + g * length, top = -INFINITY, sum = 0.f;
        for (int64_t t = 0; t < length; t++) top = sg[t] > top ? sg[t] : top;
        for (int64_t t = 0; t < length; t++) {
            sg[t] = expf(sg[t] - top);
            sum += sg[t];
        }
        const float inv = 1.f / sum;
        for (int64_t t = 0; t < length; t++) sg[t] *= inv;
    }
}

/* Portable path for one (sequence, KV head); `queries` are fp32 copies of the group's. */
#define DEFINE_HEAD(NAME, T, LOAD)                                                            \
static void NAME(const float *restrict queries, const T *restrict k, const T *restrict v,     \
                 const int64_t *restrict table, int64_t length, int n_kv, int h, int hd,      \
                 int group, float scale, float *restrict scores, float *restrict acc) {       \
    float row[MAX_HEAD_DIM];                                                                  \
    const int64_t stride = (int64_t)n_kv * hd;                                                \
    for (int64_t t = 0; t < length; t++) {                                                    \
        const T *src = k + (table[t / BLOCK] * BLOCK + t % BLOCK) * stride + (int64_t)h * hd; \
        for (int j = 0; j < hd; j++) row[j] = LOAD(src[j]);                                   \
        for (int g = 0; g < group; g++) {                                                     \
            const float *qg = queries + g * hd;                                               \
            float s = 0.f;                                                                    \
            for (int j = 0; j < hd; j++) s += qg[j] * row[j];                                 \
            scores[g * length + t] = s * scale;                                               \
        }                                                                                     \
    }                                                                                         \
    softmax_rows(scores, length, group);                                                      \
    memset(acc, 0, sizeof(float) * group * hd);                                               \
    for (int64_t t = 0; t < length; t++) {                                                    \
        const T *src = v + (table[t / BLOCK] * BLOCK + t % BLOCK) * stride + (int64_t)h * hd; \
        for (int j = 0; j < hd; j++) row[j] = LOAD(src[j]);                                   \
        for (int g = 0; g < group; g++) {                                                     \
            const float p = scores[g * length + t];                                           \
            float *ag = acc + g * hd;                                                         \
            for (int j = 0; j < hd; j++) ag[j] += p * row[j];                                 \
        }                                                                                     \
    }                                                                                         \
}

#define IDENTITY(x) (x)
DEFINE_HEAD(head_f32, float, IDENTITY)
DEFINE_HEAD(head_bf16, uint16_t, bf16_to_float)

#ifdef HAVE_AVX512_BF16
/* exp(x) for x <= 0: 2^n * p(r), r = x - n ln2 in [-ln2/2, ln2/2], p of degree 6 (error
 * ~2 ulp); below -87 the result underflows to 0 as expf's does. */
static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), 0);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
    return _mm512_scalef_ps(p, n);
}

/* exp(s - max) over each head's row of scores, in place; inv[g] = 1 / that row's sum, which
 * the value pass applies once to its sums instead of to every weight. */
static void softmax_rows512(float *scores, int64_t length, int group, float *inv) {
    for (int g = 0; g < group; g++) {
        float *sg = scores + g * length;
        __m512 vmax = _mm512_set1_ps(-INFINITY);
        int64_t t = 0;
        for (; t + 16 <= length; t += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(sg + t));
        float top = _mm512_reduce_max_ps(vmax);
        for (; t < length; t++) top = sg[t] > top ? sg[t] : top;
        __m512 vtop = _mm512_set1_ps(top), vsum = _mm512_setzero_ps();
        t = 0;
        for (; t + 16 <= length; t += 16) {
            __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(sg + t), vtop));
            _mm512_storeu_ps(sg + t, e);
            vsum = _mm512_add_ps(vsum, e);
        }
        float sum = _mm512_reduce_add_ps(vsum);
        for (; t < length; t++) {
            sg[t] = expf(sg[t] - top);
            sum += sg[t];
        }
        inv[g] = 1.f / sum;
    }
}

/* Sixteen 16-lane partial sums -> their sixteen totals, in token order: a tree of
 * 128-bit-lane and in-lane shuffles (15 adds instead of 16 full horizontal reductions). */
static inline __m512 sum16(const __m512 v[16]) {
    __m512 w[8], x[4], y[2];
    for (int i = 0; i < 8; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++)
        x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++)
        y[i] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(x[2 * i], x[2 * i + 1], 0xEE));
    __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88),
                             _mm512_shuffle_ps(y[0], y[1], 0xDD));
    /* z holds token k + 4e at element 4k + e. */
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    return _mm512_permutexvar_ps(order, z);
}

/* Sixteen bf16 values -> float32. */
static inline __m512 load16(const uint16_t *src) {
    return _mm512_cvtpbh_ps((__m256bh)_mm256_loadu_si256((const __m256i *)src));
}

/* Fetch a head's 16 rows of the cache block the table names next. Blocks are scattered
 * over the cache, so the hardware prefetcher (which stops at page boundaries) cannot guess
 * them: without this the kernel waits on memory for most of its time. */
static inline void prefetch_block(const uint16_t *cache, const int64_t *table, int64_t block,
                                  int64_t n_blocks, int64_t stride, int h) {
    if (block >= n_blocks) return;
    const char *base = (const char *)(cache + table[block] * BLOCK * stride + h * 64);
    for (int i = 0; i < BLOCK; i++) {
        _mm_prefetch(base + i * stride * 2, _MM_HINT_T0);
        _mm_prefetch(base + i * stride * 2 + 64, _MM_HINT_T0);
    }
}

/* acc[g] = sum_t p[g][t] v[t] for G query heads: each value row is converted once and
 * used by all G heads. Inlined with G a constant, so acc stays in registers. */
static inline __attribute__((always_inline)) void values_pass(
    const int G, const uint16_t *v, const int64_t *table, int64_t length, int64_t stride, int h,
    int64_t n_blocks, const float *scores, const float *inv, float *acc) {
    __m512 a[6][4];
    for (int g = 0; g < G; g++)
        for (int i = 0; i < 4; i++) a[g][i] = _mm512_setzero_ps();
    for (int64_t t = 0; t < length; t++) {
        if (t % BLOCK == 0) prefetch_block(v, table, t / BLOCK + 2, n_blocks, stride, h);
        const uint16_t *src = v + (table[t / BLOCK] * BLOCK + t % BLOCK) * stride + h * 64;
        const __m512 r0 = load16(src), r1 = load16(src + 16);
        const __m512 r2 = load16(src + 32), r3 = load16(src + 48);
        for (int g = 0; g < G; g++) {
            const __m512 p = _mm512_set1_ps(scores[g * length + t]);
            a[g][0] = _mm512_fmadd_ps(p, r0, a[g][0]);
            a[g][1] = _mm512_fmadd_ps(p, r1, a[g][1]);
            a[g][2] = _mm512_fmadd_ps(p, r2, a[g][2]);
            a[g][3] = _mm512_fmadd_ps(p, r3, a[g][3]);
        }
    }
    for (int g = 0; g < G; g++)
        for (int i = 0; i < 4; i++)
            _mm512_storeu_ps(acc + g * 64 + 16 * i,
                             _mm512_mul_ps(a[g][i], _mm512_set1_ps(inv[g])));
}

/* head_dim 64: a row is two 32-lane bf16 vectors; q.k is two vdpbf16ps. */
static void head_bf16_avx512(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                             const int64_t *table, int64_t length, int n_kv, int h, int group,
                             float scale, float *scores, float *acc) {
    const int64_t stride = (int64_t)n_kv * 64;
    __m512bh q0[MAX_GROUP], q1[MAX_GROUP];
    for (int g = 0; g < group; g++) {
        q0[g] = (__m512bh)_mm512_loadu_si512(q + g * 64);
        q1[g] = (__m512bh)_mm512_loadu_si512(q + g * 64 + 32);
    }
    const __m512 vscale = _mm512_set1_ps(scale);
    int64_t t = 0;
    const int64_t n_blocks = (length + BLOCK - 1) / BLOCK;
    prefetch_block(k, table, 0, n_blocks, stride, h);
    prefetch_block(k, table, 1, n_blocks, stride, h);
    for (; t + BLOCK <= length; t += BLOCK) { /* whole cache blocks */
        prefetch_block(k, table, t / BLOCK + 2, n_blocks, stride, h);
        const uint16_t *base = k + table[t / BLOCK] * BLOCK * stride + h * 64;
        for (int g = 0; g < group; g++) {
            __m512 part[BLOCK];
            for (int i = 0; i < BLOCK; i++) {
                const uint16_t *src = base + i * stride;
                __m512 s = _mm512_dpbf16_ps(_mm512_setzero_ps(), q0[g],
                                            (__m512bh)_mm512_loadu_si512(src));
                part[i] = _mm512_dpbf16_ps(s, q1[g], (__m512bh)_mm512_loadu_si512(src + 32));
            }
            _mm512_storeu_ps(scores + g * length + t, _mm512_mul_ps(sum16(part), vscale));
        }
    }
    for (; t < length; t++) { /* the last, partly filled block */
        const uint16_t *src = k + (table[t / BLOCK] * BLOCK + t % BLOCK) * stride + h * 64;
        __m512bh k0 = (__m512bh)_mm512_loadu_si512(src);
        __m512bh k1 = (__m512bh)_mm512_loadu_si512(src + 32);
        for (int g = 0; g < group; g++) {
            __m512 s = _mm512_dpbf16_ps(_mm512_setzero_ps(), q0[g], k0);
            s = _mm512_dpbf16_ps(s, q1[g], k1);
            scores[g * length + t] = _mm512_reduce_add_ps(s) * scale;
        }
    }
    float inv[MAX_GROUP];
    softmax_rows512(scores, length, group, inv);
    prefetch_block(v, table, 0, n_blocks, stride, h);
    prefetch_block(v, table, 1, n_blocks, stride, h);
    switch (group) { /* a constant group size keeps every accumulator in a register */
    case 1: values_pass(1, v, table, length, stride, h, n_blocks, scores, inv, acc); break;
    case 2: values_pass(2, v, table, length, stride, h, n_blocks, scores, inv, acc); break;
    case 3: values_pass(3, v, table, length, stride, h, n_blocks, scores, inv, acc); break;
    case 4: values_pass(4, v, table, length, stride, h, n_blocks, scores, inv, acc); break;
    case 5: values_pass(5, v, table, length, stride, h, n_blocks, scores, inv, acc); break;
    case 6: values_pass(6, v, table, length, stride, h, n_blocks, scores, inv, acc); break;
    default:
        for (int g = 0; g < group; g++)
            values_pass(1, v, table, length, stride, h, n_blocks, scores + g * length,
                        inv + g, acc + g * 64);
    }
}
#endif

#ifdef HAVE_AVX2_FMA
/* exp(x) for x <= 0, as exp512 but with 8 lanes: 2^n is put in the exponent bits directly
 * (n >= -126 after the clamp, so the result stays a normal float). */
static inline __m256 exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
    const __m256i bits = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

static inline float sum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

/* exp(s - max) over one row of scores, in place; returns 1 / their sum, which the value
 * pass applies once to its sums instead of to every weight. */
static float softmax_row256(float *sg, int64_t length) {
    __m256 vtop = _mm256_set1_ps(-INFINITY);
    int64_t t = 0;
    for (; t + 8 <= length; t += 8) vtop = _mm256_max_ps(vtop, _mm256_loadu_ps(sg + t));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vtop), _mm256_extractf128_ps(vtop, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float top = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    for (; t < length; t++) top = sg[t] > top ? sg[t] : top;
    vtop = _mm256_set1_ps(top);
    __m256 vsum = _mm256_setzero_ps();
    for (t = 0; t + 8 <= length; t += 8) {
        const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(sg + t), vtop));
        _mm256_storeu_ps(sg + t, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float sum = sum8(vsum);
    for (; t < length; t++) {
        sg[t] = expf(sg[t] - top);
        sum += sg[t];
    }
    return 1.f / sum;
}

/* 8 values of a cache row as float32: stored so, or bfloat16 (the float's high half). */
static inline __m256 load8_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline __m256 load8_bf16(const uint16_t *p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

/* head_dim 64 with AVX2, the cache in float32 or bfloat16 (converted as it is read), for a
 * run of `rows` query rows (one row, or consecutive rows of one prompt chunk: same block
 * table, each attending to one position more than the row before) and the `group` query
 * heads of KV head h:
 * - scores: every query of the run against each K row, the row loaded (and widened) once for
 *   up to FUSED queries (the group's heads, and the run's rows over the positions they all
 *   attend to). Per (query, position) the arithmetic is fixed: dot4's for positions below
 *   the row's length rounded down to 4, the single-row formula after. So a row's scores, and
 *   everything after, do not depend on the rows it ran beside: a token's output is the same
 *   whatever the batch and however its prompt was chunked.
 * - a vector exp softmax per (row, head), then each row's values summed into registers, each
 *   value row loaded once for up to 3 heads. */
#define DEFINE_AVX2_HEAD(SUFFIX, T, LOAD8)                                                    \
/* n queries (scaled, qs[n][64]) . 4 cache rows of one block -> out[j][t .. t + 3]. */        \
static inline __attribute__((always_inline)) void dot4_##SUFFIX(                              \
    const float *qs, const int n, const T *row, int64_t stride, float *const *out,            \
    int64_t t) {                                                                              \
    __m256 a[FUSED][4];                                                                       \
    for (int i = 0; i < 4; i++, row += stride) {                                              \
        __m256 x[8];                                                                          \
        for (int c = 0; c < 8; c++) x[c] = LOAD8(row + 8 * c);                                \
        for (int j = 0; j < n; j++) {                                                         \
            const float *qj = qs + 64 * j;                                                    \
            __m256 s0 = _mm256_mul_ps(_mm256_load_ps(qj), x[0]);                              \
            __m256 s1 = _mm256_mul_ps(_mm256_load_ps(qj + 8), x[1]);                          \
            for (int c = 2; c < 8; c += 2) {                                                  \
                s0 = _mm256_fmadd_ps(_mm256_load_ps(qj + 8 * c), x[c], s0);                   \
                s1 = _mm256_fmadd_ps(_mm256_load_ps(qj + 8 * c + 8), x[c + 1], s1);           \
            }                                                                                 \
            a[j][i] = _mm256_add_ps(s0, s1);                                                  \
        }                                                                                     \
    }                                                                                         \
    /* Pairwise adds leave row i's total in element i of each 128-bit half. */                \
    for (int j = 0; j < n; j++) {                                                             \
        const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a[j][0], a[j][1]),                     \
                                        _mm256_hadd_ps(a[j][2], a[j][3]));                    \
        _mm_storeu_ps(out[j] + t, _mm_add_ps(_mm256_castps256_ps128(h),                       \
                                             _mm256_extractf128_ps(h, 1)));                   \
    }                                                                                         \
}                                                                                             \
                                                                                              \
/* Scores of n queries at positions [from, to), both multiples of 4, FUSED at a time. */     \
static void scores4_##SUFFIX(const float *qs, int n, float *const *out, const T *k,           \
                             const int64_t *table, int64_t stride, int h, int64_t from,       \
                             int64_t to) {                                                    \
    for (int j0 = 0; j0 < n; j0 += FUSED) {                                                   \
        const int m = n - j0 < FUSED ? n - j0 : FUSED;                                        \
        for (int64_t t = from; t < to; t += 4) { /* 4 divides BLOCK: rows share a block */    \
            const T *row = k + (table[t / BLOCK] * BLOCK + t % BLOCK) * stride + h * 64;      \
            const float *q = qs + 64 * j0;                                                    \
            float *const *o = out + j0;                                                       \
            switch (m) { /* a constant count keeps the loops unrolled */                      \
            case 1: dot4_##SUFFIX(q, 1, row, stride, o, t); break;                            \
            case 2: dot4_##SUFFIX(q, 2, row, stride, o, t); break;                            \
            case 3: dot4_##SUFFIX(q, 3, row, stride, o, t); break;                            \
            case 4: dot4_##SUFFIX(q, 4, row, stride, o, t); break;                            \
            case 5: dot4_##SUFFIX(q, 5, row, stride, o, t); break;                            \
            default: dot4_##SUFFIX(q, 6, row, stride, o, t);                                  \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
/* Positions from `from` (length rounded down to 4) to length - 1: one q . k at a time. */    \
static void scores1_##SUFFIX(const float *qs, int n, float *const *out, const T *k,           \
                             const int64_t *table, int64_t stride, int h, int64_t from,       \
                             int64_t length) {                                                \
    for (int64_t t = from; t < length; t++) {                                                 \
        const T *row = k + (table[t / BLOCK] * BLOCK + t % BLOCK) * stride + h * 64;          \
        for (int j = 0; j < n; j++) {                                                         \
            const float *qj = qs + 64 * j;                                                    \
            __m256 s = _mm256_mul_ps(_mm256_load_ps(qj), LOAD8(row));                         \
            for (int c = 1; c < 8; c++)                                                       \
                s = _mm256_fmadd_ps(_mm256_load_ps(qj + 8 * c), LOAD8(row + 8 * c), s);       \
            out[j][t] = sum8(s);                                                              \
        }                                                                                     \
    }                                                                                         \
}                                                                                             \
                                                                                              \
/* For G query heads at once, half a head (32 of 64 dims: the register budget) from column    \
 * `at` of each value row: acc[g][at % 64 ..] = sum_t p[g][t] * v[t][at ..]. Each value row   \
 * is loaded (and widened) once for the G heads instead of once each; every sum still runs    \
 * over t in order, as one head at a time did (same results). 32 rows at 480 positions:       \
 * 121 -> 115 ms a step; a 512-token prompt 1.07 -> 0.90 s. */                                \
static inline __attribute__((always_inline)) void values_##SUFFIX(                            \
    const T *v, const int64_t *table, int64_t length, int64_t stride, int64_t at,            \
    float *const *p, const float *inv, float *acc, const int G) {                             \
    __m256 o[3][4];                                                                           \
    for (int g = 0; g < G; g++)                                                               \
        for (int c = 0; c < 4; c++) o[g][c] = _mm256_setzero_ps();                            \
    for (int64_t t = 0; t < length; t++) {                                                    \
        const T *row = v + (table[t / BLOCK] * BLOCK + t % BLOCK) * stride + at;              \
        __m256 x[4];                                                                          \
        for (int c = 0; c < 4; c++) x[c] = LOAD8(row + 8 * c);                                \
        for (int g = 0; g < G; g++) {                                                         \
            const __m256 pg = _mm256_set1_ps(p[g][t]);                                        \
            for (int c = 0; c < 4; c++) o[g][c] = _mm256_fmadd_ps(pg, x[c], o[g][c]);         \
        }                                                                                     \
    }                                                                                         \
    for (int g = 0; g < G; g++)                                                               \
        for (int c = 0; c < 4; c++)                                                           \
            _mm256_storeu_ps(acc + g * 64 + (at % 64) + 8 * c,                                \
                             _mm256_mul_ps(o[g][c], _mm256_set1_ps(inv[g])));                 \
}                                                                                             \
                                                                                              \
static void head_##SUFFIX##_avx2(const T *q, int64_t q_stride, int rows, const T *k,          \
                                 const T *v, const int64_t *table, int64_t length, int n_kv,  \
                                 int h, int group, float scale, float *scores, float *acc) {  \
    const int64_t stride = (int64_t)n_kv * 64, longest = length + rows - 1;                   \
    const int n = rows * group;                                                               \
    float qs[MAX_GROUP * 64] __attribute__((aligned(32)));                                    \
    float *out[MAX_GROUP];                                                                    \
    for (int j = 0; j < n; j++) {                                                             \
        const T *qj = q + (j / group) * q_stride + (j % group) * 64;                          \
        for (int c = 0; c < 8; c++)                                                           \
            _mm256_store_ps(qs + 64 * j + 8 * c,                                              \
                            _mm256_mul_ps(LOAD8(qj + 8 * c), _mm256_set1_ps(scale)));         \
        out[j] = scores + j * longest;                                                        \
    }                                                                                         \
    scores4_##SUFFIX(qs, n, out, k, table, stride, h, 0, length - length % 4);                \
    for (int b = 0; b < rows; b++) { /* what only this row attends to, and its tail */        \
        const int64_t own = length + b, whole = own - own % 4;                                \
        const float *qb = qs + 64 * b * group;                                                \
        float *const *ob = out + b * group;                                                   \
        scores4_##SUFFIX(qb, group, ob, k, table, stride, h, length - length % 4, whole);     \
        scores1_##SUFFIX(qb, group, ob, k, table, stride, h, whole, own);                     \
        float inv[MAX_GROUP];                                                                 \
        for (int g = 0; g < group; g++) inv[g] = softmax_row256(ob[g], own);                  \
        for (int g0 = 0; g0 < group; g0 += 3)                                                 \
            for (int half = 0; half < 2; half++) {                                            \
                const int64_t at = h * 64 + 32 * half;                                        \
                float *ab = acc + (b * group + g0) * 64, *const *pb = ob + g0;                \
                const float *ib = inv + g0;                                                   \
                switch (group - g0) {                                                         \
                case 1: values_##SUFFIX(v, table, own, stride, at, pb, ib, ab, 1); break;     \
                case 2: values_##SUFFIX(v, table, own, stride, at, pb, ib, ab, 2); break;     \
                default: values_##SUFFIX(v, table, own, stride, at, pb, ib, ab, 3);           \
                }                                                                             \
            }                                                                                 \
    }                                                                                         \
}

DEFINE_AVX2_HEAD(f32, float, load8_f32)
#ifndef HAVE_AVX512_BF16 /* which has its own bfloat16 path */
DEFINE_AVX2_HEAD(bf16, uint16_t, load8_bf16)
#endif
#endif

/* How many rows from d on form a run (see the AVX2 head): at most `most`, consecutive,
 * each attending to one position more than the one before through the same block table. */
static int run_rows(const int64_t *tables, const int64_t *lengths, int d, int n_seqs,
                    int max_blocks, int most) {
    const int64_t *first = tables + (int64_t)d * max_blocks;
    int r = 1;
    for (; r < most && d + r < n_seqs && lengths[d + r] == lengths[d] + r; r++) {
        const int64_t used = (lengths[d + r] + BLOCK - 1) / BLOCK;
        if (memcmp(first, tables + (int64_t)(d + r) * max_blocks, sizeof(int64_t) * used))
            break;
    }
    return r;
}

/* Returns 0, or -1 when a size is beyond the fixed buffers or a length is outside its block
 * table (nothing is read then). The (run of rows, KV head) pairs are shared among
 * `n_threads` OpenMP threads when built with it. */
#define DEFINE_ENTRY(NAME, T, HEAD, LOAD, STORE, FAST)                                        \
int NAME(const T *q, const T *k, const T *v, const int64_t *tables, const int64_t *lengths,   \
         T *out, int n_seqs, int n_heads, int n_kv, int hd, int max_blocks, float scale,      \
         int n_threads) {                                                                     \
    const int group = n_heads / n_kv, most = group < FUSED ? FUSED / group : 1;               \
    if (hd > MAX_HEAD_DIM || group > MAX_GROUP || n_threads < 1) return -1;                   \
    int64_t longest = 1;                                                                      \
    for (int d = 0; d < n_seqs; d++) {                                                        \
        if (lengths[d] < 1 || lengths[d] > (int64_t)max_blocks * BLOCK) return -1;            \
        longest = lengths[d] > longest ? lengths[d] : longest;                                \
    }                                                                                         \
    int *starts = malloc(sizeof(int) * (n_seqs + 1)), n_runs = 0;                             \
    const int64_t per_thread = (int64_t)most * group * longest;                               \
    float *all_scores = malloc(sizeof(float) * per_thread * n_threads);                       \
    if (!starts || !all_scores) {                                                             \
        free(starts), free(all_scores);                                                       \
        return -1;                                                                            \
    }                                                                                         \
    for (int d = 0; d < n_seqs; d += run_rows(tables, lengths, d, n_seqs, max_blocks, most))  \
        starts[n_runs++] = d;                                                                 \
    starts[n_runs] = n_seqs;                                                                  \
    _Pragma("omp parallel num_threads(n_threads)")                                            \
    {                                                                                         \
        float queries[MAX_GROUP * MAX_HEAD_DIM], acc[MAX_GROUP * MAX_HEAD_DIM];               \
        float *scores = all_scores + per_thread * THREAD_NUM();                               \
        _Pragma("omp for schedule(dynamic, 1)")                                               \
        for (int w = 0; w < n_runs * n_kv; w++) {                                             \
            const int d0 = starts[w / n_kv], rows = starts[w / n_kv + 1] - d0, h = w % n_kv;  \
            const int64_t *table = tables + (int64_t)d0 * max_blocks;                         \
            const int64_t q_stride = (int64_t)n_heads * hd;                                   \
            const T *qh = q + d0 * q_stride + h * group * hd;                                 \
            if (!FAST(qh, q_stride, rows, k, v, table, lengths[d0], n_kv, h, hd, group,       \
                      scale, scores, acc)) {                                                  \
                for (int b = 0; b < rows; b++) {                                              \
                    for (int i = 0; i < group * hd; i++)                                      \
                        queries[i] = LOAD(qh[b * q_stride + i]);                              \
                    HEAD(queries, k, v, table, lengths[d0] + b, n_kv, h, hd, group, scale,    \
                         scores, acc + b * group * hd);                                       \
                }                                                                             \
            }                                                                                 \
            for (int b = 0; b < rows; b++) {                                                  \
                T *oh = out + (d0 + b) * q_stride + h * group * hd;                           \
                for (int i = 0; i < group * hd; i++) oh[i] = STORE(acc[b * group * hd + i]);  \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    free(starts);                                                                             \
    free(all_scores);                                                                         \
    return 0;                                                                                 \
}

/* The fast paths take a run of rows (q_stride apart); 0 when none applies here. */
static int f32_fast_path(const float *q, int64_t q_stride, int rows, const float *k,
                         const float *v, const int64_t *table, int64_t length, int n_kv, int h,
                         int hd, int group, float scale, float *scores, float *acc) {
#ifdef HAVE_AVX2_FMA
    if (hd == 64) {
        head_f32_avx2(q, q_stride, rows, k, v, table, length, n_kv, h, group, scale, scores,
                      acc);
        return 1;
    }
#endif
    (void)q, (void)q_stride, (void)rows, (void)k, (void)v, (void)table, (void)length;
    (void)n_kv, (void)h, (void)hd, (void)group, (void)scale, (void)scores, (void)acc;
    return 0;
}

static int bf16_fast_path(const uint16_t *q, int64_t q_stride, int rows, const uint16_t *k,
                          const uint16_t *v, const int64_t *table, int64_t length, int n_kv,
                          int h, int hd, int group, float scale, float *scores, float *acc) {
#ifdef HAVE_AVX512_BF16
    if (hd == 64) { /* vdpbf16ps dot products: a row at a time */
        for (int b = 0; b < rows; b++)
            head_bf16_avx512(q + b * q_stride, k, v, table, length + b, n_kv, h, group, scale,
                             scores, acc + b * group * 64);
        return 1;
    }
#elif defined(HAVE_AVX2_FMA)
    if (hd == 64) { /* no bfloat16 dot products: converted to float32 as read */
        head_bf16_avx2(q, q_stride, rows, k, v, table, length, n_kv, h, group, scale, scores,
                       acc);
        return 1;
    }
#endif
    (void)q, (void)q_stride, (void)rows, (void)k, (void)v, (void)table, (void)length;
    (void)n_kv, (void)h, (void)hd, (void)group, (void)scale, (void)scores, (void)acc;
    return 0;
}

DEFINE_ENTRY(decode_attention_f32, float, head_f32, IDENTITY, IDENTITY, f32_fast_path)
DEFINE_ENTRY(decode_attention_bf16, uint16_t, head_bf16, bf16_to_float, float_to_bf16,
             bf16_fast_path)
