/*
 * zero.c — the "zero_optimization" section (stage, buckets, stage-3
 * limits, offload_optimizer / offload_param) and "aio" (the NVMe I/O engine
 * the offload uses).
 *
 * DeepSpeed's pydantic model accepts every field under its own name and
 * its stage3_ alias (prefetch_bucket_size / stage3_prefetch_bucket_size);
 * both are accepted here, and giving both is an error. Deprecated forms
 * (cpu_offload, cpu_offload_param, a bare true/false section) are mapped
 * to their replacement with a warning.
 *
 * The ZeRO++ compression keys (zero_quantized_gradients / _weights,
 * zeropp_loco_param) are read here; the codecs they use come from
 * "zinc": {"compression": ...} (sections.c), which is read first, so that
 * the warnings here may look at it.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "config/config_internal.h"

#define T zinc_settings
#define O zinc_offload_settings
#define INF HUGE_VAL
/* DeepSpeed's pydantic int fields: 15099494.4 reads as 15099494, with a warning */
#define TR ZINC_KEY_TRUNC

static const zinc_key zero_keys[] = {
    ZINC_KI(T, "stage", stage, 0, 3),
    ZINC_KB(T, "contiguous_gradients", contiguous_gradients),
    ZINC_KCUSTOM("overlap_comm"),
    ZINC_KB(T, "reduce_scatter", reduce_scatter),
    ZINC_KL(T, "reduce_bucket_size", reduce_bucket_size, 0, ZINC_KEY_AUTO | TR, ZINC_AUTO),
    ZINC_KB(T, "allgather_partitions", allgather_partitions),
    ZINC_KL(T, "allgather_bucket_size", allgather_bucket_size, 0, TR, 0),
    ZINC_KB_NOOP(T, "round_robin_gradients", round_robin_gradients,
                 "a DeepSpeed CPU-offload copy schedule; zinc's partitions are already "
                 "contiguous per rank"),
    ZINC_KL(T, "sub_group_size", sub_group_size, 0, TR, 0),
    ZINC_KCUSTOM("offload_optimizer"),
    ZINC_KCUSTOM("offload_param"),
    ZINC_KL(T, "stage3_prefetch_bucket_size", stage3_prefetch_bucket_size, 0, ZINC_KEY_AUTO | TR,
            ZINC_AUTO),
    ZINC_KL(T, "prefetch_bucket_size", stage3_prefetch_bucket_size, 0, ZINC_KEY_AUTO | TR,
            ZINC_AUTO),
    ZINC_KL(T, "stage3_param_persistence_threshold", stage3_param_persistence_threshold, 0,
            ZINC_KEY_AUTO | TR, ZINC_AUTO),
    ZINC_KL(T, "param_persistence_threshold", stage3_param_persistence_threshold, 0,
            ZINC_KEY_AUTO | TR, ZINC_AUTO),
    ZINC_KL(T, "stage3_max_live_parameters", stage3_max_live_parameters, 0, ZINC_KEY_AUTO | TR,
            ZINC_AUTO),
    ZINC_KL(T, "max_live_parameters", stage3_max_live_parameters, 0, ZINC_KEY_AUTO | TR, ZINC_AUTO),
    ZINC_KL(T, "stage3_max_reuse_distance", stage3_max_reuse_distance, 0, ZINC_KEY_AUTO | TR,
            ZINC_AUTO),
    ZINC_KL(T, "max_reuse_distance", stage3_max_reuse_distance, 0, ZINC_KEY_AUTO | TR, ZINC_AUTO),
    ZINC_KB_AUTO(T, "stage3_gather_16bit_weights_on_model_save",
                 stage3_gather_16bit_weights_on_model_save),
    ZINC_KB_AUTO(T, "gather_16bit_weights_on_model_save",
                 stage3_gather_16bit_weights_on_model_save),
    ZINC_KB_AUTO(T, "stage3_gather_fp16_weights_on_model_save",
                 stage3_gather_16bit_weights_on_model_save),
    /* ZeRO++ hpZ: stage-3 secondary partition over groups of this many ranks */
    ZINC_KI(T, "zero_hpz_partition_size", zero_hpz_partition_size, 1, INT_MAX),
    /* ZeRO++ qwZ / qgZ (docs/config.md "Compressed communication"; the codecs
     * are zinc.compression's) and LoCo error feedback */
    ZINC_KB(T, "zero_quantized_weights", zero_quantized_weights),
    ZINC_KB(T, "zero_quantized_gradients", zero_quantized_gradients),
    ZINC_KCUSTOM("zeropp_loco_param"),
    ZINC_KCUSTOM("cpu_offload"),
    ZINC_KCUSTOM("cpu_offload_param"),
    /* DeepSpeed options with no effect in zinc (silent at their default) */
    ZINC_KINERT("cpu_offload_use_pin_memory", "null"),
    ZINC_KINERT("load_from_fp32_weights", "true"),
    ZINC_KINERT("elastic_checkpoint", "false"),
    ZINC_KINERT("ignore_unused_parameters", "true"),
    ZINC_KINERT("legacy_stage1", "false"),
    ZINC_KINERT("use_multi_rank_bucket_allreduce", "true"),
    ZINC_KINERT("zero_quantized_nontrainable_weights", "false"),
    ZINC_KINERT("mics_shard_size", "-1"),
    ZINC_KINERT("mics_hierarchical_params_gather", "false"),
    ZINC_KINERT("memory_efficient_linear", "true"),
    ZINC_KINERT("pipeline_loading_checkpoint", "false"),
    ZINC_KINERT("override_module_apply", "true"),
    ZINC_KINERT("log_trace_cache_warnings", "false"),
    ZINC_KINERT("stage3_model_persistence_threshold", NULL),
    ZINC_KINERT("model_persistence_threshold", NULL),
    ZINC_KINERT("stage3_module_granularity_threshold", "0"),
    ZINC_KINERT("module_granularity_threshold", "0"),
    ZINC_KINERT("stage3_use_all_reduce_for_fetch_params", "false"),
    ZINC_KINERT("use_all_reduce_for_fetch_params", "false"),
};

static const zinc_key offload_optimizer_keys[] = {
    ZINC_KCUSTOM("device"),
    ZINC_KCUSTOM("nvme_path"),
    ZINC_KB_AUTO(O, "pin_memory", pin_memory),
    ZINC_KL(O, "buffer_count", buffer_count, 0, ZINC_KEY_AUTO | TR, ZINC_AUTO),
    /* the NVMe step always overlaps read(k+1) | update(k) | write(k-1) and
     * writes the initial swap area in large pieces: these change nothing */
    ZINC_KB(O, "pipeline_read", pipeline_read),
    ZINC_KB(O, "pipeline_write", pipeline_write),
    ZINC_KB(O, "fast_init", fast_init),
    /* the fraction of the optimizer's sub-groups offloaded; the rest stay
     * on the device (engine/place/partial.c; validate.c says when not) */
    ZINC_KF(O, "ratio", ratio, 0, 1, 0, 0),
    ZINC_KINERT("super_offload", "false"),
    ZINC_KINERT("cpuadam_cores_perc", NULL),
};

static const zinc_key offload_param_keys[] = {
    ZINC_KCUSTOM("device"),
    ZINC_KCUSTOM("nvme_path"),
    ZINC_KB_AUTO(O, "pin_memory", pin_memory),
    /* NVMe parameter reads: buffer_count buffers, each at most buffer_size
     * elements (engine/place/nvme.c) */
    ZINC_KL(O, "buffer_count", buffer_count, 0, ZINC_KEY_AUTO | TR, ZINC_AUTO),
    ZINC_KL(O, "buffer_size", buffer_size, 1, TR, 0),
    /* NVMe parameters: this many elements of the partition (whole modules,
     * in partition order) stay in host memory (engine/place/pcache.c) */
    ZINC_KL(O, "max_in_cpu", max_in_cpu, 0, TR, 0),
};

/* zeropp_loco_param: {"err_beta": 0.8, "reset_T": 1024}. DeepSpeed reads
 * both keys with loco_param[...] at its first reduce (a KeyError when one
 * is missing); zinc fills a missing one with the default its docstring
 * states. */
static const zinc_key loco_keys[] = {
    ZINC_KF(T, "err_beta", loco_err_beta, 0, 1, ZINC_KEY_HI_OPEN, 0),
    ZINC_KL(T, "reset_T", loco_reset_T, 1, TR, 0),
};

/* null (LoCo off) or an object (LoCo on). */
static zinc_status read_loco(zinc_cfg_reader *r, const json_t *zero, zinc_settings *s) {
  size_t mark;
  const json_t *v = zinc_cfg_enter(r, zero, "zeropp_loco_param", &mark);
  if (!v)
    return ZINC_OK;
  if (zinc_cfg_is_auto(v))
    zinc_cfg_auto_default(r, "null (LoCo off), DeepSpeed's default");
  else if (!json_is_null(v)) {
    if (!json_is_object(v))
      return zinc_cfg_bad(r, v, "null or an object {\"err_beta\": 0.8, \"reset_T\": 1024}");
    ZINC_CHECK(zinc_cfg_walk(r, v, loco_keys, ZINC_KEY_COUNT(loco_keys), s, sizeof *s));
    s->loco_enabled = 1;
  }
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* Compression keys that a stage or another key makes idle: said once
 * each, as DeepSpeed would run on without them. */
static void note_compression(zinc_cfg_reader *r, const zinc_settings *s) {
  if (s->zero_quantized_gradients && s->stage == 0)
    zinc_cfg_warn(r, "%s.zero_quantized_gradients = true has no effect at stage 0: quantized "
                  "gradients (qgZ) compress the reduce-scatter of stages 1, 2 and 3; set a "
                  "stage or remove the key", r->path);
  if (s->zero_quantized_weights && s->stage < 3)
    zinc_cfg_warn(r, "%s.zero_quantized_weights = true has no effect at stage %d: quantized "
                  "weights (qwZ) compress the parameter all-gather of stage 3 only; set "
                  "stage 3 or remove the key", r->path, s->stage);
  if (s->loco_enabled && !s->zero_quantized_gradients)
    zinc_cfg_warn(r, "%s.zeropp_loco_param has no effect without zero_quantized_gradients: "
                  "it sets the error feedback of the quantized gradients; set "
                  "zero_quantized_gradients true or remove it", r->path);
  if (s->zero_quantized_gradients && s->stage > 0 && s->compress_gradient_bits == 1 &&
      s->compress_gradient_codec == ZINC_GRAD_CODEC_QUANT && !s->loco_enabled)
    zinc_cfg_warn(r, "zinc.compression.gradient_bits = 1 without %s.zeropp_loco_param: sign "
                  "compression with no error feedback will not converge (accepted, for "
                  "experiments); give zeropp_loco_param, or use 4 or 8 bits", r->path);
  if (s->compress_gradient_codec == ZINC_GRAD_CODEC_DGC && !s->zero_quantized_gradients)
    zinc_cfg_warn(r, "zinc.compression.gradient_codec = \"dgc\" has no effect without "
                  "%s.zero_quantized_gradients: it picks the codec of the compressed gradient "
                  "reduce-scatter; set zero_quantized_gradients true", r->path);
  if (s->compress_gradient_codec == ZINC_GRAD_CODEC_POWERSGD && s->zero_quantized_gradients)
    zinc_cfg_warn(r, "%s.zero_quantized_gradients is not used with zinc.compression."
                  "gradient_codec = \"powersgd\": PowerSGD replaces the whole gradient "
                  "reduction; remove zero_quantized_gradients", r->path);
  if (s->compress_gradient_codec == ZINC_GRAD_CODEC_DGC && s->loco_enabled)
    zinc_cfg_warn(r, "%s.zeropp_loco_param is not used with zinc.compression.gradient_codec = "
                  "\"dgc\": DGC keeps its own fp32 residual (zinc.compression.dgc.residual); "
                  "remove zeropp_loco_param", r->path);
}

/* nvme_path: a string, or (zinc) a list of strings to stripe over. */
static zinc_status read_nvme_path(zinc_cfg_reader *r, const json_t *v,
                                  zinc_offload_settings *o) {
  if (json_is_null(v))
    return ZINC_OK;
  if (zinc_cfg_is_auto(v)) {
    zinc_cfg_auto_default(r, "no path (null), DeepSpeed's default");
    return ZINC_OK;
  }
  size_t n = json_is_array(v) ? json_array_size(v) : 1;
  if (!json_is_string(v) && !json_is_array(v))
    return zinc_cfg_bad(r, v, "a directory path, or a list of up to %d paths",
                        ZINC_MAX_NVME_PATHS);
  if (n < 1 || n > ZINC_MAX_NVME_PATHS)
    return zinc_cfg_bad(r, v, "a list of 1..%d directory paths", ZINC_MAX_NVME_PATHS);
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
    size_t mark = json_is_array(v) ? zinc_cfg_push_index(r, i) : r->path_len;
    if (!json_is_string(e) || json_string_length(e) == 0)
      return zinc_cfg_bad(r, e, "a non-empty directory path");
    o->nvme_paths[i] = zinc_strdup(json_string_value(e));
    if (!o->nvme_paths[i])
      return zinc_error(ZINC_ERR_NOMEM, "out of memory copying %s", r->path);
    o->nvme_path_count = (int)i + 1;
    zinc_cfg_pop(r, mark);
  }
  return ZINC_OK;
}

static zinc_status read_offload_device(zinc_cfg_reader *r, const json_t *v,
                                       zinc_offload_settings *o) {
  const char *name = json_is_string(v) ? json_string_value(v) : "";
  if (zinc_cfg_is_auto(v)) /* Accelerate fills it from its own default, "none" too */
    zinc_cfg_auto_default(r, "\"none\" (no offload), DeepSpeed's default");
  else if (strcmp(name, "none") == 0)
    o->device = ZINC_OFFLOAD_NONE;
  else if (strcmp(name, "cpu") == 0)
    o->device = ZINC_OFFLOAD_CPU;
  else if (strcmp(name, "nvme") == 0)
    o->device = ZINC_OFFLOAD_NVME;
  else
    return zinc_cfg_bad(r, v, "\"none\", \"cpu\" or \"nvme\"");
  return ZINC_OK;
}

static zinc_status read_offload(zinc_cfg_reader *r, const json_t *zero, const char *name,
                                const zinc_key *keys, size_t nkeys,
                                zinc_offload_settings *o) {
  size_t mark = zinc_cfg_push(r, name);
  const json_t *obj, *v = json_object_get(zero, name);
  if (zinc_cfg_is_auto(v)) {
    zinc_cfg_auto_default(r, "no %s (null), DeepSpeed's default", name);
    v = NULL;
  }
  ZINC_CHECK(zinc_cfg_object(r, v, &obj));
  if (obj) {
    ZINC_CHECK(zinc_cfg_walk(r, obj, keys, nkeys, o, sizeof *o));
    size_t m;
    if ((v = zinc_cfg_enter(r, obj, "device", &m))) {
      ZINC_CHECK(read_offload_device(r, v, o));
      zinc_cfg_pop(r, m);
    }
    if ((v = zinc_cfg_enter(r, obj, "nvme_path", &m))) {
      ZINC_CHECK(read_nvme_path(r, v, o));
      zinc_cfg_pop(r, m);
    }
  }
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* cpu_offload / cpu_offload_param (deprecated booleans): true means
 * {"device": "cpu"} (with a warning); giving the section that replaced
 * them as well is an error. false changes nothing. */
static zinc_status read_deprecated_offload(zinc_cfg_reader *r, const json_t *zero,
                                           const char *name, const char *replacement,
                                           zinc_offload_settings *o) {
  const json_t *v = json_object_get(zero, name);
  if (!v)
    return ZINC_OK;
  size_t mark = zinc_cfg_push(r, name);
  int on = 0;
  if (zinc_cfg_is_auto(v))
    zinc_cfg_auto_default(r, "false, DeepSpeed's default");
  else
    ZINC_CHECK(zinc_cfg_bool(r, v, &on));
  if (on && json_object_get(zero, replacement))
    return zinc_cfg_bad(r, v, "nothing: %s replaces it and is given too; remove %s", replacement,
                        name);
  if (on) {
    o->device = ZINC_OFFLOAD_CPU;
    zinc_cfg_warn(r, "%s is deprecated (as in DeepSpeed); read as %s {\"device\": \"cpu\"}",
                  r->path, replacement);
  }
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

zinc_status zinc_cfg_read_zero(zinc_cfg_reader *r, const json_t *v, zinc_settings *s) {
  size_t mark = zinc_cfg_push(r, "zero_optimization");
  const json_t *zero;
  if (json_is_boolean(v)) {
    /* DeepSpeed's oldest form: "zero_optimization": true means stage 1. */
    s->stage = json_is_true(v) ? 1 : 0;
    zinc_cfg_warn(r, "%s = %s is DeepSpeed's deprecated form; read as {\"stage\": %d}", r->path,
                  json_is_true(v) ? "true" : "false", s->stage);
    zinc_cfg_pop(r, mark);
    return ZINC_OK;
  }
  ZINC_CHECK(zinc_cfg_object(r, v, &zero));
  if (!zero) {
    zinc_cfg_pop(r, mark);
    return ZINC_OK;
  }
  ZINC_CHECK(zinc_cfg_walk(r, zero, zero_keys, ZINC_KEY_COUNT(zero_keys), s, sizeof *s));
  /* DeepSpeed: overlap_comm defaults to true at stage 3 only. */
  s->overlap_comm = s->stage == 3;
  size_t m;
  const json_t *overlap = zinc_cfg_enter(r, zero, "overlap_comm", &m);
  if (overlap) {
    if (zinc_cfg_is_auto(overlap))
      zinc_cfg_auto_default(r, "%s, DeepSpeed's default at stage %d", s->overlap_comm ? "true"
                            : "false", s->stage);
    else if (!json_is_null(overlap))
      ZINC_CHECK(zinc_cfg_bool(r, overlap, &s->overlap_comm));
    zinc_cfg_pop(r, m);
  }
  ZINC_CHECK(read_loco(r, zero, s));
  ZINC_CHECK(read_offload(r, zero, "offload_optimizer", offload_optimizer_keys,
                          ZINC_KEY_COUNT(offload_optimizer_keys), &s->offload_optimizer));
  ZINC_CHECK(read_offload(r, zero, "offload_param", offload_param_keys,
                          ZINC_KEY_COUNT(offload_param_keys), &s->offload_param));
  ZINC_CHECK(read_deprecated_offload(r, zero, "cpu_offload", "offload_optimizer",
                                     &s->offload_optimizer));
  ZINC_CHECK(read_deprecated_offload(r, zero, "cpu_offload_param", "offload_param",
                                     &s->offload_param));
  if (s->zero_hpz_partition_size > 1 && s->stage < 3) /* DeepSpeed ignores it there too */
    zinc_cfg_warn(r, "%s.zero_hpz_partition_size = %d has no effect at stage %d: the "
                  "secondary parameter partition (hpZ) is a stage-3 feature; set stage 3 "
                  "or remove the key", r->path, s->zero_hpz_partition_size, s->stage);
  if (s->compress_gradient_codec == ZINC_GRAD_CODEC_POWERSGD && s->stage >= 2)
    return zinc_error(ZINC_ERR_CONFIG, "zinc.compression.gradient_codec = \"powersgd\" needs "
                      "stage 0 or 1, not %s.stage = %d: PowerSGD multiplies each rank's whole "
                      "local gradient matrix, and at stages 2 and 3 the gradient is "
                      "reduce-scattered bucket by bucket as backward produces it, so no rank "
                      "ever holds it whole; set stage 0 or 1, or pick another gradient_codec "
                      "(\"quant\", \"terngrad\", \"dgc\")", r->path, s->stage);
  note_compression(r, s);
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}

/* ---------------------------------------------------------------------- aio */

/* The ranges are the I/O engine's (offload/aio.c, offload/swap.c), so that
 * a value it cannot run is refused here, naming the key, and not when the
 * engine is built. */
static const zinc_key aio_keys[] = {
    ZINC_KCUSTOM("block_size"),
    ZINC_KI(T, "queue_depth", aio_queue_depth, 1, ZINC_AIO_MAX_QUEUE_DEPTH),
    ZINC_KI(T, "intra_op_parallelism", aio_intra_op_parallelism, 1, ZINC_AIO_MAX_THREADS),
    ZINC_KI(T, "thread_count", aio_intra_op_parallelism, 1, ZINC_AIO_MAX_THREADS),
    ZINC_KB(T, "single_submit", aio_single_submit),
    ZINC_KB(T, "overlap_events", aio_overlap_events),
    ZINC_KB(T, "use_gds", aio_use_gds),
    ZINC_KB(T, "allow_buffered_io", aio_allow_buffered_io),
    ZINC_KB(T, "swap_checksums", aio_swap_checksums),
};

zinc_status zinc_cfg_read_aio(zinc_cfg_reader *r, const json_t *v, zinc_settings *s) {
  size_t mark = zinc_cfg_push(r, "aio");
  const json_t *aio;
  ZINC_CHECK(zinc_cfg_object(r, v, &aio));
  if (aio) {
    ZINC_CHECK(zinc_cfg_walk(r, aio, aio_keys, ZINC_KEY_COUNT(aio_keys), s, sizeof *s));
    size_t m;
    const json_t *b = zinc_cfg_enter(r, aio, "block_size", &m);
    if (b && zinc_cfg_is_auto(b)) {
      zinc_cfg_auto_default(r, "%lld, DeepSpeed's default", (long long)s->aio_block_size);
      zinc_cfg_pop(r, m);
    } else if (b) {
      /* O_DIRECT transfers are whole, aligned pages, and each NVMe swap
       * block is a page of header (block number, checksum, ...) before its
       * payload, which must be at least a page too: 4096 bytes would leave
       * no room for data. */
      int64_t x;
      if (zinc_cfg_int64(r, b, ZINC_AIO_MIN_BLOCK_SIZE, ZINC_AIO_MAX_BLOCK_SIZE, &x) != ZINC_OK ||
          x % 4096 != 0)
        return zinc_cfg_bad(r, b, "a multiple of 4096 (bytes) from %d to %d, e.g. 1048576 "
                            "(the default): each NVMe swap block is a 4096-byte header and "
                            "at least one 4096-byte page of data", ZINC_AIO_MIN_BLOCK_SIZE,
                            ZINC_AIO_MAX_BLOCK_SIZE);
      s->aio_block_size = x;
      zinc_cfg_pop(r, m);
    }
    if (s->aio_use_gds)
      zinc_cfg_warn(r, "aio.use_gds = true: GPUDirect Storage is not supported by zinc; "
                    "NVMe traffic goes through pinned host buffers");
  }
  zinc_cfg_pop(r, mark);
  return ZINC_OK;
}
