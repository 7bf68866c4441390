/*
 * cpu_codec.c — the codecs of kernels/codec.h on the CPU: argument checks,
 * the split over the thread pool and the padding; the block loops live in
 * the instruction-set tables (cpu_kernels_{scalar,avx2,avx512}.c), the
 * arithmetic in kernels/codec_math.h.
 *
 * Splits: encode of a block codec is split over whole groups of blocks
 * (zinc_codec_group_blocks: a group ends on a payload byte boundary), so no
 * two threads write one byte and each block is computed by one thread in
 * the reference order; decode is elementwise, split on multiples of 8
 * elements (whole payload bytes). Cast codecs are the cast and accumulate
 * kernels of cpu_kernels.c. TOPK runs codec_math.h's block functions on
 * every instruction set (its passes are integer compares: correctness
 * first), split over whole blocks. Any split gives the same bytes.
 */
#include <string.h>

#include "base/base.h"
#include "kernels/cpu_kernels.h"
#include "kernels/cpu_kernels_isa.h"

/* Elements per unit of work handed to a thread (as cpu_kernels.c). */
#define CODEC_GRAIN 16384

static int cast_dtype(int kind) {
  return kind == ZINC_CODEC_F32 ? ZINC_F32 : kind == ZINC_CODEC_BF16 ? ZINC_BF16 : ZINC_F16;
}

/* Zero the padding after `used` bytes up to zinc_codec_bytes. */
static void zero_padding(void *dst, size_t used, size_t total) {
  if (total > used)
    memset((char *)dst + used, 0, total - used);
}

typedef struct {
  const zinc_cpu_isa_ops *ops;
  int kind;
  int64_t block, group, n, nb;
  float *scales;
  uint8_t *payload;
  const void *src;
  int sdt;
  float *ef_scales;
  uint8_t *ef_q;
  float beta, omb;
  uint64_t seed;
  /* decode */
  void *dst;
  int ddt, accumulate;
  const float *cscales;
  const uint8_t *cpayload;
} codec_job;

typedef struct {
  zinc_codec c;
  int64_t n;
  float *values;
  uint16_t *index;
  const void *src;
  int sdt;
  float *res;
  void *dst;
  int ddt, accumulate;
} topk_job;

/* TOPK blocks [begin, end). */
static void topk_encode_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const topk_job *j = ctx;
  for (int64_t b = begin; b < end; b++)
    zinc_codec_topk_encode_block(j->c.block, j->c.k, j->values, j->index, j->src, j->sdt, j->n,
                                 b, j->res);
}

static void topk_decode_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const topk_job *j = ctx;
  for (int64_t b = begin; b < end; b++)
    zinc_codec_topk_decode_block(j->c.block, j->c.k, j->dst, j->ddt, j->values, j->index, j->n,
                                 b, j->accumulate);
}

static topk_job topk_layout(zinc_codec c, int64_t n, const void *enc) {
  int64_t entries = zinc_codec_topk_entries(c, n);
  topk_job j = {.c = c, .n = n, .values = (float *)enc};
  j.index = (uint16_t *)((char *)enc + 4 * entries);
  return j;
}

static int64_t topk_blocks(zinc_codec c, int64_t n) { return (n + c.block - 1) / c.block; }

/* Groups [begin, end) of blocks. */
static void encode_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const codec_job *j = ctx;
  int64_t b0 = begin * j->group, b1 = end * j->group < j->nb ? end * j->group : j->nb;
  j->ops->codec_encode(j->kind, j->block, j->scales, j->payload, j->src, j->sdt, j->n, b0, b1,
                       j->ef_scales, j->ef_q, j->beta, j->omb, j->seed);
}

/* Units [begin, end) of 8 elements. */
static void decode_part(void *ctx, int64_t begin, int64_t end, int tid) {
  const codec_job *j = ctx;
  int64_t lo = begin * 8, hi = end * 8 < j->n ? end * 8 : j->n;
  j->ops->codec_decode(j->kind, j->block, j->dst, j->ddt, j->cscales, j->cpayload, lo, hi,
                       j->accumulate);
}

zinc_status zinc_cpu_codec_encode(zinc_threadpool *pool, zinc_cpu_isa isa, zinc_codec c,
                                  void *dst, const void *src, int src_dtype, int64_t n,
                                  void *ef, float ef_beta, uint64_t seed) {
  ZINC_CHECK(zinc_codec_check("cpu codec encode", 1, c, dst, src, src_dtype, n, ef, ef_beta, 0));
  const zinc_cpu_isa_ops *ops;
  ZINC_CHECK(zinc_cpu_isa_table(isa, "codec encode", &ops));
  if (n == 0)
    return ZINC_OK;
  const size_t total = zinc_codec_bytes(c, n);
  if (c.kind == ZINC_CODEC_TOPK) {
    topk_job j = topk_layout(c, n, dst);
    j.src = src;
    j.sdt = src_dtype;
    j.res = ef;
    zinc_threadpool_for(pool, topk_blocks(c, n), CODEC_GRAIN / c.block + 1, topk_encode_part, &j);
    zero_padding(dst, (size_t)(6 * zinc_codec_topk_entries(c, n)), total);
    if (ef)
      zero_padding(ef, (size_t)(4 * n), zinc_codec_ef_bytes(c, n));
    return ZINC_OK;
  }
  if (!zinc_codec_is_block(c)) {
    int cdt = cast_dtype(c.kind);
    ZINC_CHECK(zinc_cpu_cast(pool, isa, dst, cdt, src, src_dtype, n));
    zero_padding(dst, (size_t)n * (cdt == ZINC_F32 ? 4 : 2), total);
    return ZINC_OK;
  }
  const int64_t off = zinc_codec_payload_offset(c.block, n);
  codec_job j = {.ops = ops, .kind = c.kind, .block = c.block, .n = n,
                 .group = zinc_codec_group_blocks(c.block), .scales = dst,
                 .payload = (uint8_t *)dst + off, .src = src, .sdt = src_dtype,
                 .beta = ef_beta, .omb = 1.0f - ef_beta, .seed = seed};
  j.nb = off / 4;
  if (ef) {
    j.ef_scales = ef;
    j.ef_q = (uint8_t *)ef + off;
  }
  int64_t groups = (j.nb + j.group - 1) / j.group;
  int64_t grain = CODEC_GRAIN / (c.block * j.group) + 1; /* groups per unit */
  zinc_threadpool_for(pool, groups, grain, encode_part, &j);
  zero_padding(dst, (size_t)(off + zinc_codec_payload_bytes(c.kind, n)), total);
  if (ef)
    zero_padding(ef, (size_t)(off + n), zinc_codec_bytes((zinc_codec){ZINC_CODEC_INT8, c.block, 0}, n));
  return ZINC_OK;
}

zinc_status zinc_cpu_codec_decode(zinc_threadpool *pool, zinc_cpu_isa isa, zinc_codec c,
                                  void *dst, int dst_dtype, const void *src, int64_t n,
                                  int accumulate) {
  ZINC_CHECK(zinc_codec_check("cpu codec decode", 0, c, dst, src, dst_dtype, n, NULL, 0.0f,
                              accumulate));
  const zinc_cpu_isa_ops *ops;
  ZINC_CHECK(zinc_cpu_isa_table(isa, "codec decode", &ops));
  if (n == 0)
    return ZINC_OK;
  if (c.kind == ZINC_CODEC_TOPK) {
    topk_job j = topk_layout(c, n, src);
    j.dst = dst;
    j.ddt = dst_dtype;
    j.accumulate = accumulate;
    if (!accumulate)
      memset(dst, 0, (size_t)n * zinc_dtype_size(dst_dtype));
    zinc_threadpool_for(pool, topk_blocks(c, n), CODEC_GRAIN / c.block + 1, topk_decode_part, &j);
    return ZINC_OK;
  }
  if (!zinc_codec_is_block(c)) {
    int cdt = cast_dtype(c.kind);
    if (accumulate)
      return zinc_cpu_accumulate_f32(pool, isa, dst, src, cdt, n, 0);
    return zinc_cpu_cast(pool, isa, dst, dst_dtype, src, cdt, n);
  }
  const int64_t off = zinc_codec_payload_offset(c.block, n);
  codec_job j = {.ops = ops, .kind = c.kind, .block = c.block, .n = n, .dst = dst,
                 .ddt = dst_dtype, .accumulate = accumulate, .cscales = src,
                 .cpayload = (const uint8_t *)src + off};
  zinc_threadpool_for(pool, (n + 7) / 8, CODEC_GRAIN / 8, decode_part, &j);
  return ZINC_OK;
}
