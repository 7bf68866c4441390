/*
 * config.c — the config object: load a file or a string, validate it into
 * a zinc_settings, free it; the settings' defaults, deep copy and free.
 *
 * The text is parsed by jansson with duplicate keys rejected, and what is
 * not JSON by the Hjson reader (hjson.c) as DeepSpeed reads configs; syntax
 * errors and duplicates are reported with the file, line, column and the
 * JSON path reached (json_locate.c, hjson.c). A failed load returns no object and
 * leaves nothing allocated.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"

/* Config files are a few kilobytes; this bounds what a wrong path (a
 * checkpoint shard, a device) can make us read. */
#define ZINC_CONFIG_MAX_BYTES (16u << 20)

const char *zinc_offload_device_name(zinc_offload_device d) {
  switch (d) {
  case ZINC_OFFLOAD_NONE: return "none";
  case ZINC_OFFLOAD_CPU: return "cpu";
  case ZINC_OFFLOAD_NVME: return "nvme";
  }
  return "unknown";
}

static void offload_defaults(zinc_offload_settings *o, int64_t buffer_count) {
  o->device = ZINC_OFFLOAD_NONE;
  o->buffer_count = buffer_count;
  o->ratio = 1.0;
  o->buffer_size = 100000000;
  o->max_in_cpu = 0; /* DeepSpeed's 1e9 would keep most partitions off NVMe: docs/config.md */
}

void zinc_settings_defaults(zinc_settings *s) {
  memset(s, 0, sizeof *s);
  s->train_batch_size = ZINC_AUTO;
  s->train_micro_batch_size_per_gpu = ZINC_AUTO;
  s->gradient_accumulation_steps = ZINC_AUTO;
  s->steps_per_print = 10;
  s->gradient_predivide_factor = 1.0;

  s->fp16_initial_scale_power = 16;
  s->fp16_loss_scale_window = 1000;
  s->fp16_hysteresis = 2;
  s->fp16_min_loss_scale = 1.0;

  s->optimizer = ZINC_OPTIM_ADAM;
  s->lr = 1e-3;
  s->beta1 = 0.9;
  s->beta2 = 0.999;
  s->eps = 1e-8;
  s->adam_w_mode = 1;
  s->max_coeff = 10.0;
  s->min_coeff = 0.01;
  s->bias_correction = 1;
  s->var_freeze_step = 100000;
  s->var_update_scaler = 16;
  s->local_step_scaler = 32678;
  s->local_step_clipper = 16;
  s->freeze_step = 100000;
  s->coeff_beta = 0.9;
  s->factor_max = 4.0;
  s->factor_min = 0.5;
  s->factor_threshold = 0.1;
  s->onebit_freeze_step = 100000;

  s->scheduler = ZINC_SCHED_NONE;
  s->warmup_max_lr = 1e-3;
  s->warmup_num_steps = 1000;
  s->warmup_type = ZINC_WARMUP_LOG;
  s->cos_min_ratio = 1e-4;
  s->cycle_min_lr = NAN;
  s->cycle_max_lr = NAN;
  s->cycle_first_step_size = 2000;
  s->cycle_second_step_size = NAN;
  s->cycle_second_stair_count = -1;
  s->cycle_momentum = 1;
  s->cycle_min_mom = 0.8;
  s->cycle_max_mom = 0.9;
  s->lr_range_test_min_lr = 1e-3;
  s->lr_range_test_step_size = 2000;
  s->lr_range_test_step_rate = 1.0;

  s->contiguous_gradients = 1;
  s->reduce_scatter = 1;
  s->reduce_bucket_size = 500000000;
  s->allgather_partitions = 1;
  s->allgather_bucket_size = 500000000;
  s->sub_group_size = 1000000000;
  offload_defaults(&s->offload_optimizer, 4);
  offload_defaults(&s->offload_param, 5);
  s->stage3_prefetch_bucket_size = 50000000;
  s->stage3_param_persistence_threshold = 100000;
  s->stage3_max_live_parameters = 1000000000;
  s->stage3_max_reuse_distance = 1000000000;
  s->zero_hpz_partition_size = 1;
  s->communication_data_type = -1;
  s->loco_err_beta = 0.8;
  s->loco_reset_T = 1024;
  s->compress_gradient_bits = 4;
  s->compress_gradient_codec = ZINC_GRAD_CODEC_QUANT;
  s->compress_weight_bits = 8;
  s->compress_block_size = 256;
  s->compress_scope = ZINC_COMPRESS_INTER_NODE;
  s->dgc_density = 0.001;
  s->dgc_warmup_steps = 0;
  s->dgc_residual = 1;
  s->psgd_rank = 1;
  s->psgd_start_iter = 1000;
  s->psgd_min_compression_rate = 2;
  s->psgd_error_feedback = 1;
  s->psgd_warm_start = 1;
  s->psgd_orth_epsilon = 0;
  s->psgd_random_seed = 0;
  s->psgd_stats_frequency = 10000;
  s->psgd_batch_same_shape = 0;

  s->aio_block_size = 1048576;
  s->aio_queue_depth = 8;
  s->aio_intra_op_parallelism = 1;
  s->aio_overlap_events = 1;
  s->aio_swap_checksums = 1;

  s->log_level = -1;
  s->comm_timeout_s = 600.0;
  s->max_consecutive_skips = 50;
  s->checkpoint_timeout_s = 1800.0;
  s->comms_logger.prof_all = 1;
  snprintf(s->csv_monitor.job_name, sizeof s->csv_monitor.job_name, "DeepSpeedJobName");
  snprintf(s->tensorboard.job_name, sizeof s->tensorboard.job_name, "DeepSpeedJobName");
}

static void offload_free(zinc_offload_settings *o) {
  for (int i = 0; i < ZINC_MAX_NVME_PATHS; i++) {
    free(o->nvme_paths[i]);
    o->nvme_paths[i] = NULL;
  }
  o->nvme_path_count = 0;
}

void zinc_settings_free(zinc_settings *s) {
  if (!s)
    return;
  offload_free(&s->offload_optimizer);
  offload_free(&s->offload_param);
  free(s->memory_timeline);
  s->memory_timeline = NULL;
}

static zinc_status offload_copy(zinc_offload_settings *dst, const zinc_offload_settings *src) {
  for (int i = 0; i < ZINC_MAX_NVME_PATHS; i++) {
    dst->nvme_paths[i] = NULL;
    if (src->nvme_paths[i] && !(dst->nvme_paths[i] = zinc_strdup(src->nvme_paths[i])))
      return zinc_error(ZINC_ERR_NOMEM, "out of memory copying nvme_path %s",
                        src->nvme_paths[i]);
  }
  return ZINC_OK;
}

zinc_status zinc_settings_copy(zinc_settings *dst, const zinc_settings *src) {
  *dst = *src;
  dst->memory_timeline = NULL;
  for (int i = 0; i < ZINC_MAX_NVME_PATHS; i++)
    dst->offload_optimizer.nvme_paths[i] = dst->offload_param.nvme_paths[i] = NULL;
  zinc_status st = offload_copy(&dst->offload_optimizer, &src->offload_optimizer);
  if (st == ZINC_OK)
    st = offload_copy(&dst->offload_param, &src->offload_param);
  if (st == ZINC_OK && src->memory_timeline &&
      !(dst->memory_timeline = zinc_strdup(src->memory_timeline)))
    st = zinc_error(ZINC_ERR_NOMEM, "out of memory copying zinc.memory_timeline");
  if (st != ZINC_OK)
    zinc_settings_free(dst);
  return st;
}

/* ------------------------------------------------------------------ loading */

/* Whether jansson stopped at a comment (JSON has none, so its error there
 * says only that the file is not JSON; the Hjson reader's says more). */
static int json_stopped_at_comment(const char *text, size_t len, size_t position) {
  for (size_t at = position > 0 ? position - 1 : 0; at <= position && at < len; at++)
    if (text[at] == '#' || (text[at] == '/' && at + 1 < len &&
                            (text[at + 1] == '/' || text[at + 1] == '*')))
      return 1;
  return 0;
}

/* Parse `len` bytes of text from `source` into a new config. */
static zinc_status config_from_text(const char *text, size_t len, const char *source,
                                    zinc_config **out) {
  zinc_config *cfg = NULL;
  json_t *root = NULL;
  zinc_status st = zinc_calloc((void **)&cfg, 1, sizeof *cfg, "the config object");
  if (st != ZINC_OK)
    return st;
  zinc_settings_defaults(&cfg->s);
  cfg->source = zinc_strdup(source);
  if (!cfg->source) {
    st = zinc_error(ZINC_ERR_NOMEM, "out of memory loading config %s", source);
    goto fail;
  }

  /* A UTF-8 byte order mark (editors on Windows write one) is not part of
   * the text, as for Python's reader and the Hjson reference: positions
   * count from after it. */
  if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) {
    text += 3;
    len -= 3;
  }

  /* JSON first; what is not JSON is read as Hjson, as DeepSpeed reads
   * every config (comments, optional commas and quotes: hjson.c) */
  json_error_t jerr;
  root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
  zinc_hjson_error herr = {0};
  if (!root && json_error_code(&jerr) != json_error_duplicate_key) {
    root = zinc_hjson_parse(text, len, &herr);
    if (root && herr.lone_value && json_is_string(root)) {
      /* a line the reference would keep as one quoteless string (`a: {b: 1`):
       * a config is an object, so the object's syntax error is the one */
      json_decref(root);
      root = NULL;
    }
    if (root && json_is_object(root) && json_object_size(root) == 0 && !memchr(text, '{', len)) {
      json_decref(root); /* blanks and comments only: a truncated file or a wrong path */
      st = zinc_error(ZINC_ERR_CONFIG, "config %s: empty (no settings in it); give the "
                      "DeepSpeed config, at least {\"train_micro_batch_size_per_gpu\": N}",
                      source);
      root = NULL;
      goto fail;
    }
  }
  if (!root) {
    char path[ZINC_CFG_PATH_MAX];
    zinc_json_path_at(text, len, (size_t)jerr.position, path, sizeof path);
    if (json_error_code(&jerr) == json_error_duplicate_key)
      st = zinc_error(ZINC_ERR_CONFIG,
                      "config %s: %s: key given twice (line %d, column %d: %s); keep one",
                      source, path[0] ? path : "(top level)", jerr.line, jerr.column,
                      jerr.text);
    else if ((size_t)jerr.position > herr.offset && /* JSON got further: its error first */
             !json_stopped_at_comment(text, len, (size_t)jerr.position))
      st = zinc_error(ZINC_ERR_CONFIG, "config %s: not valid JSON at line %d, column %d%s%s%s: "
                      "%s (nor Hjson: line %d, column %d: %s)", source, jerr.line, jerr.column,
                      path[0] ? " (in " : "", path, path[0] ? ")" : "", jerr.text, herr.line,
                      herr.column, herr.message);
    else
      st = zinc_error(ZINC_ERR_CONFIG, "config %s: not valid Hjson at line %d, column %d%s%s%s: "
                      "%s (nor JSON: line %d, column %d: %s)", source, herr.line, herr.column,
                      herr.path[0] ? " (in " : "", herr.path, herr.path[0] ? ")" : "",
                      herr.message, jerr.line, jerr.column, jerr.text);
    goto fail;
  }

  zinc_cfg_reader reader = {.source = source};
  st = zinc_cfg_read_document(&reader, root, &cfg->s);
  if (st == ZINC_OK) {
    zinc_cfg_note_auto(root, &cfg->s, &cfg->file_mask);
    st = zinc_cfg_validate(&reader, root, &cfg->s);
  }
  if (st != ZINC_OK) {
    zinc_error_wrap(st, "config %s", source);
    goto fail;
  }
  cfg->warnings = reader.warnings;
  json_decref(root);
  *out = cfg;
  return ZINC_OK;

fail:
  json_decref(root);
  zinc_config_free(cfg);
  return st;
}

zinc_status zinc_config_parse(const char *json_text, zinc_config **out) {
  if (!out)
    return zinc_error(ZINC_ERR_INVALID, "zinc_config_parse: out is NULL");
  *out = NULL;
  if (!json_text)
    return zinc_error(ZINC_ERR_INVALID, "zinc_config_parse: json_text is NULL");
  return config_from_text(json_text, strlen(json_text), "<string>", out);
}

/* URL-safe (or standard) base64, strictly: every character in the
 * alphabet, '=' only as padding, a whole number of quanta. The decoded
 * bytes (NUL-terminated, caller frees) or NULL. */
static char *base64_decode(const char *in, size_t *len_out) {
  size_t n = strlen(in);
  if (n == 0 || n % 4 != 0)
    return NULL;
  char *out = malloc(n / 4 * 3 + 1);
  if (!out)
    return NULL;
  size_t len = 0;
  for (size_t i = 0; i < n; i += 4) {
    uint32_t q = 0;
    int pad = 0;
    for (int k = 0; k < 4; k++) {
      char c = in[i + k];
      int v = c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
              : c >= '0' && c <= '9' ? c - '0' + 52 : c == '-' || c == '+' ? 62
              : c == '_' || c == '/' ? 63 : -1;
      if (c == '=' && i + 4 == n && k >= 2) {
        pad++;
        v = 0;
      } else if (v < 0 || pad) {
        free(out);
        return NULL;
      }
      q = q << 6 | (uint32_t)v;
    }
    out[len++] = (char)(q >> 16);
    if (pad < 2)
      out[len++] = (char)(q >> 8 & 0xff);
    if (pad < 1)
      out[len++] = (char)(q & 0xff);
  }
  out[len] = '\0';
  *len_out = len;
  return out;
}

/* Decoded base64 that is a config, not an accident of a short file name
 * made of base64 letters: UTF-8 text without control characters other than
 * tab and line breaks. */
static int looks_like_text(const char *t, size_t len) {
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)t[i];
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
      return 0;
    if (c < 0x80)
      continue;
    int more = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (more < 0 || i + (size_t)more >= len)
      return 0;
    for (int k = 1; k <= more; k++)
      if (((unsigned char)t[i + k] & 0xC0) != 0x80)
        return 0;
    i += (size_t)more;
  }
  return len > 0;
}

/* A path or base64 string as a message shows it: whole when short, its
 * start and its length when long (a base64 config is kilobytes). */
static void shown_name(const char *path, char *out, size_t cap) {
  size_t n = strlen(path);
  if (n <= 160)
    snprintf(out, cap, "%s", path);
  else
    snprintf(out, cap, "%.64s... (%zu characters)", path, n);
}

zinc_status zinc_config_load(const char *path, zinc_config **out) {
  if (!out)
    return zinc_error(ZINC_ERR_INVALID, "zinc_config_load: out is NULL");
  *out = NULL;
  if (!path)
    return zinc_error(ZINC_ERR_INVALID, "zinc_config_load: path is NULL");
  FILE *f = fopen(path, "rb");
  int open_errno = f ? 0 : errno;
  /* As DeepSpeed (os.path.exists(config), else urlsafe_b64decode(config)):
   * a string that names no file may be the config itself, base64-encoded,
   * as launchers pass it on the command line. A file that exists wins. A
   * real config's base64 is longer than a file name may be, so a name too
   * long for the filesystem (ENAMETOOLONG) is tried as base64 too, and so
   * is one whose '/' letters pass through a file (ENOTDIR). */
  if (!f && (open_errno == ENOENT || open_errno == ENAMETOOLONG || open_errno == ENOTDIR)) {
    char shown[200];
    shown_name(path, shown, sizeof shown);
    if (strlen(path) / 4 * 3 > ZINC_CONFIG_MAX_BYTES)
      return zinc_error(ZINC_ERR_CONFIG, "config %s: larger than %u bytes as base64; is this "
                        "the DeepSpeed JSON file?", shown, ZINC_CONFIG_MAX_BYTES);
    size_t len = 0;
    char *text = base64_decode(path, &len);
    if (text && looks_like_text(text, len)) {
      zinc_status st = config_from_text(text, len, "<base64 config>", out);
      free(text);
      return st;
    }
    free(text);
    return zinc_error(ZINC_ERR_IO, "config %s: cannot open: %s (nor is the string a "
                      "base64-encoded config)", shown, strerror(open_errno));
  }
  if (!f)
    return zinc_error(ZINC_ERR_IO, "config %s: cannot open: %s", path, strerror(open_errno));
  char *text = NULL;
  size_t len = 0, cap = 0;
  zinc_status st = ZINC_OK;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 8192;
      char *grown = cap <= ZINC_CONFIG_MAX_BYTES + 1 ? realloc(text, cap) : NULL;
      if (!grown) {
        st = cap > ZINC_CONFIG_MAX_BYTES + 1
                 ? zinc_error(ZINC_ERR_CONFIG, "config %s: larger than %u bytes; is this "
                              "the DeepSpeed JSON file?", path, ZINC_CONFIG_MAX_BYTES)
                 : zinc_error(ZINC_ERR_NOMEM, "config %s: out of memory reading it", path);
        break;
      }
      text = grown;
    }
    size_t n = fread(text + len, 1, cap - len, f);
    len += n;
    if (n == 0) {
      if (ferror(f))
        st = zinc_error(ZINC_ERR_IO, "config %s: read failed: %s", path, strerror(errno));
      break;
    }
  }
  fclose(f);
  if (st == ZINC_OK)
    st = config_from_text(text, len, path, out);
  free(text);
  return st;
}

void zinc_config_free(zinc_config *cfg) {
  if (!cfg)
    return;
  zinc_settings_free(&cfg->s);
  free(cfg->source);
  free(cfg);
}

int zinc_config_warning_count(const zinc_config *cfg) { return cfg ? cfg->warnings : 0; }
