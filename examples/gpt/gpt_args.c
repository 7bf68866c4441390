/*
 * gpt_args.c — the flag table of the GPT example (see gpt_args.h). Every
 * numeric flag is range checked; an unknown flag is an error, not ignored.
 */
#include "gpt_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static const char usage[] =
    "model:\n"
    "  --layers N        transformer blocks (default 2)\n"
    "  --width C         channels, a multiple of --heads (default 128)\n"
    "  --heads N         attention heads (default 4)\n"
    "  --seq T           sequence length (default 64)\n"
    "  --bf16            bf16 parameters (fp32 compute)\n"
    "  --freeze-embedding\n"
    "                    do not train the token embedding wte (gpt_train only);\n"
    "                    it is tied to the output projection, so that is frozen\n"
    "                    too, as requires_grad=False on a tied weight in PyTorch\n"
    "training:\n"
    "  --config FILE     DeepSpeed JSON (default examples/configs/zero3.json)\n"
    "  --batch B         micro-batch per rank; must match the config's\n"
    "                    train_micro_batch_size_per_gpu (default: the config's)\n"
    "  --steps N         optimizer steps (default 300)\n"
    "  --seed S          corpus and initialisation seed (default 1)\n"
    "  --threads N       OpenMP threads per rank (default: cores / local ranks)\n"
    "data:\n"
    "  --data FILE       train on this text file (default: a generated corpus)\n"
    "  --corpus-bytes N  size of the generated corpus (default 2000000)\n"
    "checkpoints and output:\n"
    "  --ckpt-dir DIR    save checkpoints under DIR (tags global_stepN)\n"
    "  --save-every N    also every N steps (default: only at the end)\n"
    "  --resume          continue from DIR/latest (its weights, optimizer state and\n"
    "                    data position)\n"
    "  --init-weights F  gpt_train: initial weights from the .safetensors file F\n"
    "                    (names as zinc-ckpt export writes them: \"embed.wte\", ...)\n"
    "  --init-prefix P   the file's names are P followed by zinc's (\"model.\" ...)\n"
    "  --log-csv FILE    step,loss,lr,grad_norm,loss_scale,skipped per step\n"
    "  --sample N        characters to generate at the end (default 200)\n"
    "  --lr X            learning rate (gpt_alone only; gpt_train: the config)\n"
    "  --help\n";

const char *gpt_args_usage(void) { return usage; }

static int parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi,
                     int64_t *out, char *err, size_t errlen) {
  char *end = NULL;
  errno = 0;
  long long v = s ? strtoll(s, &end, 0) : 0;
  if (!s || errno || end == s || *end || v < lo || v > hi) {
    snprintf(err, errlen, "%s: expected an integer in [%lld, %lld], got '%s'", flag,
             (long long)lo, (long long)hi, s ? s : "(nothing)");
    return -1;
  }
  *out = v;
  return 0;
}

int gpt_args_parse(gpt_args *a, int argc, char **argv, char *err, size_t errlen) {
  *a = (gpt_args){.layers = 2, .width = 128, .heads = 4, .seq = 64, .steps = 300,
                  .seed = 1, .config = "examples/configs/zero3.json",
                  .corpus_bytes = 2000000, .sample = 200, .lr = 3e-3f};
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t x = 0;
    struct { const char *name; int *dst; int64_t lo, hi; } ints[] = {
        {"--layers", &a->layers, 1, 64},     {"--width", &a->width, 1, 8192},
        {"--heads", &a->heads, 1, 256},      {"--seq", &a->seq, 1, 8192},
        {"--batch", &a->batch, 1, 65536},    {"--steps", &a->steps, 0, 1 << 30},
        {"--save-every", &a->save_every, 0, 1 << 30},
        {"--threads", &a->threads, 0, 4096}, {"--sample", &a->sample, 0, 1 << 20},
    };
    int done = 0;
    for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]) && !done; k++) {
      if (strcmp(f, ints[k].name) != 0)
        continue;
      if (parse_i64(f, v, ints[k].lo, ints[k].hi, &x, err, errlen))
        return -1;
      *ints[k].dst = (int)x;
      i++;
      done = 1;
    }
    if (done)
      continue;
    if (!strcmp(f, "--seed") || !strcmp(f, "--corpus-bytes")) {
      if (parse_i64(f, v, 0, INT64_MAX, &x, err, errlen))
        return -1;
      if (!strcmp(f, "--seed"))
        a->seed = (uint64_t)x;
      else
        a->corpus_bytes = x;
      i++;
    } else if (!strcmp(f, "--lr")) {
      char *end = NULL;
      a->lr = v ? strtof(v, &end) : 0;
      if (!v || end == v || *end || !(a->lr > 0)) {
        snprintf(err, errlen, "--lr: expected a positive number, got '%s'", v ? v : "");
        return -1;
      }
      i++;
    } else if (!strcmp(f, "--config") || !strcmp(f, "--ckpt-dir") ||
               !strcmp(f, "--data") || !strcmp(f, "--log-csv") ||
               !strcmp(f, "--init-weights") || !strcmp(f, "--init-prefix")) {
      if (!v) {
        snprintf(err, errlen, "%s needs a path", f);
        return -1;
      }
      if (!strcmp(f, "--config"))
        a->config = v;
      else if (!strcmp(f, "--ckpt-dir"))
        a->ckpt_dir = v;
      else if (!strcmp(f, "--data"))
        a->data = v;
      else if (!strcmp(f, "--init-weights"))
        a->init_weights = v;
      else if (!strcmp(f, "--init-prefix"))
        a->init_prefix = v;
      else
        a->log_csv = v;
      i++;
    } else if (!strcmp(f, "--resume")) {
      a->resume = 1;
    } else if (!strcmp(f, "--bf16")) {
      a->bf16 = 1;
    } else if (!strcmp(f, "--freeze-embedding")) {
      a->freeze_embedding = 1;
    } else if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
      a->help = 1;
    } else {
      snprintf(err, errlen, "unknown flag '%s' (--help lists them)", f);
      return -1;
    }
  }
  if (a->width % a->heads != 0) {
    snprintf(err, errlen, "--width %d is not a multiple of --heads %d", a->width, a->heads);
    return -1;
  }
  if (a->init_prefix && !a->init_weights) {
    snprintf(err, errlen, "--init-prefix needs --init-weights FILE");
    return -1;
  }
  if (a->resume && !a->ckpt_dir) {
    snprintf(err, errlen, "--resume needs --ckpt-dir DIR");
    return -1;
  }
  return 0;
}

int gpt_threads_setup(const gpt_args *a) {
#ifdef _OPENMP
  int t = a->threads;
  const char *omp = getenv("OMP_NUM_THREADS");
  if (t == 0 && omp && atoi(omp) > 0)
    t = atoi(omp);
  if (t == 0) {
    static const char *const local_size_vars[] = {
        "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    int local = 1;
    for (size_t k = 0; k < sizeof(local_size_vars) / sizeof(local_size_vars[0]); k++) {
      const char *s = getenv(local_size_vars[k]);
      if (s && atoi(s) > 0) {
        local = atoi(s);
        break;
      }
    }
    t = omp_get_num_procs() / local;
  }
  if (t < 1)
    t = 1;
  omp_set_num_threads(t);
  return t;
#else
  (void)a;
  return 1;
#endif
}
