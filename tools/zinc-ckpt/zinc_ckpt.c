/*
 * zinc-ckpt — inspect, verify and export zinc checkpoints without a
 * training program.
 *
 *   zinc-ckpt list   DIR [TAG]          tags, latest, and a checkpoint's contents
 *   zinc-ckpt verify DIR [TAG]          every checksum, the manifest, every shard
 *                                       (and error-feedback file)
 *   zinc-ckpt export DIR [TAG] OUT.safetensors [--dtype f32|bf16|f16|param]
 *                                       consolidated weights (fp32 master,
 *                                       converted), one parameter at a time
 * TAG defaults to the one DIR/latest names. Exit status: 0 ok, 1 a problem
 * with the checkpoint (the message names the file and what is wrong), 2 a
 * usage error.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "base/fs.h"
#include "engine/checkpoint/format.h"
#include "engine/checkpoint/safetensors.h"

static int usage(void) {
  fprintf(stderr,
          "usage: zinc-ckpt list   DIR [TAG]\n"
          "       zinc-ckpt verify DIR [TAG]\n"
          "       zinc-ckpt export DIR [TAG] OUT.safetensors [--dtype f32|bf16|f16|param]\n");
  return 2;
}

static int report(zinc_status st) {
  fprintf(stderr, "zinc-ckpt: %s: %s\n", zinc_status_name(st), zinc_last_error());
  return 1;
}

static void list_tags(const char *dir) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  char *latest = NULL;
  size_t len;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, ZINC_LATEST_NAME);
  if (zinc_fs_read_all(path, &latest, &len) == ZINC_OK)
    latest[strcspn(latest, "\r\n ")] = '\0';
  printf("tags in %s:\n", dir);
  struct dirent *ent;
  while ((ent = readdir(d))) {
    if (ent->d_name[0] == '.')
      continue;
    snprintf(path, sizeof path, "%s/%s/%s", dir, ent->d_name, ZINC_MANIFEST_NAME);
    struct stat sb;
    if (stat(path, &sb) == 0)
      printf("  %s%s\n", ent->d_name, latest && !strcmp(latest, ent->d_name) ? "  (latest)" : "");
  }
  closedir(d);
  free(latest);
}

/* zinc_ckpt_dir_open, and for a checkpoint in parts (no manifest of its
 * own: a part per model-parallel rank, or per pipeline stage) the way to
 * name a part. */
static zinc_status open_dir(const char *dir, const char *tag, zinc_ckpt_dir **d) {
  zinc_status st = zinc_ckpt_dir_open(dir, tag, d);
  if (st == ZINC_OK)
    return st;
  char *name = NULL, path[4096];
  struct stat sb;
  if (tag || zinc_ckpt_latest_read(dir, &name) == ZINC_OK) {
    const char *t = tag ? tag : name;
    snprintf(path, sizeof path, "%s/%s/mp_rank_00", dir, t);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
      zinc_error_wrap(st, "%s/%s is a model-parallel checkpoint, one part per model-parallel "
                      "rank: name a part as DIR/TAG and mp_rank_NN (zinc-ckpt list %s/%s "
                      "mp_rank_00)", dir, t, dir, t);
    snprintf(path, sizeof path, "%s/%s/pp_stage_00/mp_rank_00", dir, t);
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
      zinc_error_wrap(st, "%s/%s is a pipeline checkpoint with model parallelism, one part per "
                      "stage and model-parallel rank: name a part as DIR/TAG/pp_stage_SS and "
                      "mp_rank_NN (zinc-ckpt list %s/%s/pp_stage_00 mp_rank_00)", dir, t, dir,
                      t);
    else {
      snprintf(path, sizeof path, "%s/%s/pp_stage_00", dir, t);
      if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        zinc_error_wrap(st, "%s/%s is a pipeline checkpoint, one part per stage: name a part "
                        "as DIR/TAG and pp_stage_SS (zinc-ckpt list %s/%s pp_stage_00)", dir, t,
                        dir, t);
    }
  }
  free(name);
  return st;
}

static int cmd_list(const char *dir, const char *tag) {
  list_tags(dir);
  zinc_ckpt_dir *d;
  zinc_status st = open_dir(dir, tag, &d);
  if (st != ZINC_OK)
    return report(st);
  const zinc_manifest *m = d->manifest;
  printf("\ncheckpoint %s (zinc %s)\n", d->path, m->zinc_version);
  printf("  saved by %d ranks (data-parallel %d) at stage %d, offload %s\n", m->world_size,
         m->dp_size, m->stage, m->offload_optimizer);
  printf("  step %lld, micro-batches %lld, skipped steps %lld, loss scale %g\n",
         (long long)m->step, (long long)m->micro_step, (long long)m->skipped_steps,
         m->scaler_scale);
  if (m->pp_size > 1)
    printf("  pipeline stage %d of %d (this stage's modules)\n", m->pp_stage, m->pp_size);
  if (m->mp_size > 1)
    printf("  model-parallel rank %d of %d (this part of the model)\n", m->mp_rank, m->mp_size);
  if (m->client_state_bytes >= 0)
    printf("  client state: %lld bytes (%s)\n", (long long)m->client_state_bytes,
           ZINC_CLIENT_STATE_NAME);
  int64_t total = 0, bytes = 0;
  for (int i = 0; i < m->nfiles; i++)
    bytes += m->files[i].bytes;
  printf("  %d shard files, %.1f MiB; sections:", m->nfiles, (double)bytes / (1 << 20));
  for (int s = 0; s < m->nsections; s++)
    printf(" %s", m->sections[s]);
  if (m->ef.present) {
    int64_t efb = 0, elems = 0;
    for (int i = 0; i < m->ef.dp_size; i++)
      efb += m->ef.files[i].bytes;
    for (int u = 0; u < m->ef.nunits; u++)
      elems += m->ef.units[u].chunk * m->ef.dp_size;
    printf("\n  error-feedback residuals: %d files (rank_NNNNN.zef), %.1f MiB; %s, block "
           "%d, %d trained units (%lld elements), layout crc32c %08x", m->ef.dp_size,
           (double)efb / (1 << 20), m->ef.f32 ? "f32 (DGC)" : "int8", m->ef.block, m->ef.nunits, (long long)elems,
           m->ef.layout_crc32c);
  } else {
    printf("\n  error-feedback residuals: none saved");
  }
  if (m->ms.present) {
    printf("\n  compression method state: %d files (rank_NNNNN.zms), %.1f KiB each:",
           m->ms.dp_size, (double)m->ms.files[0].bytes / 1024);
    for (int i = 0; i < m->ms.nentries; i++)
      printf(" %s (%lld B)", m->ms.entries[i].name, (long long)m->ms.entries[i].bytes);
  }
  printf("\n\n  %-40s %-6s %-20s %12s\n", "parameter", "dtype", "shape", "elements");
  for (int i = 0; i < m->nparams; i++) {
    const zinc_manifest_param *p = &m->params[i];
    char shape[64];
    int n = snprintf(shape, sizeof shape, "[");
    for (int k = 0; k < p->ndim && n < (int)sizeof shape; k++)
      n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%lld", k ? ", " : "",
                    (long long)p->shape[k]);
    if (n < (int)sizeof shape)
      snprintf(shape + n, sizeof shape - (size_t)n, "]");
    printf("  %-40s %-6s %-20s %12lld\n", p->name, zinc_dtype_name(p->dtype), shape,
           (long long)p->numel);
    total += p->numel;
  }
  printf("  %d parameters, %lld elements\n", m->nparams, (long long)total);
  zinc_ckpt_dir_close(d);
  return 0;
}

/* Files read whole (error-feedback residuals, method state): size and
 * crc32c against the manifest, and whose they are (their identity
 * trailer, format.h); the number that failed. */
static int verify_whole(const zinc_ckpt_dir *d, const zinc_manifest_file *files, int n,
                        int kind, const char *what) {
  int bad = 0;
  for (int i = 0; files && i < n; i++) {
    const zinc_manifest_file *f = &files[i];
    if (zinc_ckpt_dir_verify_rank_file(d, f, kind, what) != ZINC_OK) {
      fprintf(stderr, "  %s: %s\n", f->name, zinc_last_error());
      bad++;
    } else {
      printf("  %s: ok (%lld bytes, crc32c %08x)\n", f->name, (long long)f->bytes, f->crc32c);
    }
  }
  return bad;
}

static int cmd_verify(const char *dir, const char *tag) {
  zinc_ckpt_dir *d;
  zinc_status st = open_dir(dir, tag, &d);
  if (st != ZINC_OK)
    return report(st);
  printf("%s: checksums file and manifest ok\n", d->path);
  int bad = 0;
  for (int i = 0; i < d->manifest->nfiles; i++) {
    st = zinc_ckpt_dir_verify_file(d, i);
    if (st != ZINC_OK) {
      fprintf(stderr, "  %s: %s\n", d->manifest->files[i].name, zinc_last_error());
      bad++;
    } else {
      printf("  %s: ok (%lld bytes, crc32c %08x)\n", d->manifest->files[i].name,
             (long long)d->manifest->files[i].bytes, d->manifest->files[i].crc32c);
    }
  }
  bad += verify_whole(d, d->manifest->ef.present ? d->manifest->ef.files : NULL,
                      d->manifest->ef.dp_size, ZINC_RANK_FILE_EF, "error-feedback");
  bad += verify_whole(d, d->manifest->ms.present ? d->manifest->ms.files : NULL,
                      d->manifest->ms.dp_size, ZINC_RANK_FILE_MSTATE, "method-state");
  if (d->manifest->client_state_bytes >= 0) { /* the trainer's blob */
    char path[4096], *data = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/%s", d->path, ZINC_CLIENT_STATE_NAME);
    st = zinc_fs_read_bounded(path, (size_t)d->manifest->client_state_bytes + 1, &data, &len);
    uint32_t crc = st == ZINC_OK ? zinc_crc32c(0, data, len) : 0;
    if (st != ZINC_OK || (int64_t)len != d->manifest->client_state_bytes ||
        crc != d->manifest->client_state_crc32c) {
      fprintf(stderr, "  %s: %s\n", ZINC_CLIENT_STATE_NAME,
              st != ZINC_OK ? zinc_last_error() : "size or crc32c differs from the manifest");
      bad++;
    } else {
      printf("  %s: ok (%zu bytes, crc32c %08x)\n", ZINC_CLIENT_STATE_NAME, len, crc);
    }
    free(data);
  }
  zinc_ckpt_dir_close(d);
  printf(bad ? "%d file(s) damaged\n" : "checkpoint verified\n", bad);
  return bad ? 1 : 0;
}

static int cmd_export(const char *dir, const char *tag, const char *out, int dtype) {
  zinc_ckpt_dir *d;
  zinc_status st = open_dir(dir, tag, &d);
  if (st != ZINC_OK)
    return report(st);
  const zinc_manifest *m = d->manifest;
  for (int i = 0; i < m->nfiles && st == ZINC_OK; i++)
    st = zinc_ckpt_dir_verify_file(d, i);
  zinc_safetensors_tensor *t = calloc((size_t)m->nparams + 1, sizeof *t);
  int64_t largest = 1;
  for (int i = 0; i < m->nparams; i++) {
    const zinc_manifest_param *p = &m->params[i];
    t[i] = (zinc_safetensors_tensor){p->name, dtype < 0 ? p->dtype : (zinc_dtype)dtype, p->ndim,
                                     p->shape};
    if (p->numel > largest)
      largest = p->numel;
  }
  zinc_safetensors *w = NULL;
  if (st == ZINC_OK)
    st = zinc_safetensors_open(out, t, m->nparams, &w);
  zinc_shard_reader **readers = calloc((size_t)m->nfiles, sizeof *readers);
  /* one parameter at a time, read piece by piece in bounded blocks */
  enum { BLOCK = 1 << 20 };
  float *buf = malloc(BLOCK * sizeof(float));
  for (int i = 0; i < m->nparams && st == ZINC_OK; i++) {
    const zinc_manifest_param *p = &m->params[i];
    for (int k = 0; k < p->npieces && st == ZINC_OK; k++) {
      const zinc_manifest_piece *pc = &p->pieces[k];
      if (!readers[pc->file]) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", d->path, m->files[pc->file].name);
        st = zinc_shard_reader_open(path, &readers[pc->file]);
      }
      for (int64_t x = 0; x < pc->length && st == ZINC_OK; x += BLOCK) {
        int64_t n = pc->length - x < BLOCK ? pc->length - x : BLOCK;
        st = zinc_shard_reader_read(readers[pc->file], 0, (uint64_t)(pc->file_offset + x), buf,
                                    (size_t)n);
        if (st == ZINC_OK)
          st = zinc_safetensors_put(w, i, pc->param_offset + x, buf, n);
      }
    }
  }
  if (st == ZINC_OK) {
    st = zinc_safetensors_finish(w);
    w = NULL;
  }
  zinc_safetensors_abort(w);
  for (int i = 0; i < m->nfiles; i++)
    zinc_shard_reader_close(readers[i]);
  free(readers);
  free(buf);
  free(t);
  if (st == ZINC_OK)
    printf("wrote %s: %d tensors from %s\n", out, m->nparams, d->path);
  zinc_ckpt_dir_close(d);
  return st == ZINC_OK ? 0 : report(st);
}

int main(int argc, char **argv) {
  if (argc < 3)
    return usage();
  const char *cmd = argv[1], *dir = argv[2];
  if (!strcmp(cmd, "list") || !strcmp(cmd, "verify")) {
    if (argc > 4)
      return usage();
    const char *tag = argc == 4 ? argv[3] : NULL;
    return !strcmp(cmd, "list") ? cmd_list(dir, tag) : cmd_verify(dir, tag);
  }
  if (!strcmp(cmd, "export")) {
    const char *pos[2] = {NULL, NULL};
    int npos = 0, dtype = -1;
    for (int i = 3; i < argc; i++) {
      if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
        const char *v = argv[++i];
        dtype = !strcmp(v, "f32") ? ZINC_F32 : !strcmp(v, "bf16") ? ZINC_BF16
              : !strcmp(v, "f16") ? ZINC_F16 : !strcmp(v, "param") ? -1 : -2;
        if (dtype == -2)
          return usage();
      } else if (npos < 2) {
        pos[npos++] = argv[i];
      } else {
        return usage();
      }
    }
    if (npos == 0)
      return usage();
    return npos == 1 ? cmd_export(dir, NULL, pos[0], dtype) : cmd_export(dir, pos[0], pos[1], dtype);
  }
  return usage();
}
