/*
 * gpt_args.h — command-line flags of the GPT example (gpt_train, with zinc)
 * and of its standalone twin (gpt_alone, the model alone: speed and
 * learning without the engine). One table, so both read the same flags.
 */
#ifndef GPT_ARGS_H
#define GPT_ARGS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int layers, width, heads, seq; // model: L, C, NH, T (max_seq_len = T)
  int batch;                     // micro-batch per rank; 0 = the config's
  int steps;                     // optimizer steps to run (in total, also on resume)
  uint64_t seed;                 // corpus and initialisation
  const char *config;            // DeepSpeed JSON
  const char *ckpt_dir;          // NULL: no checkpoints
  int save_every;                // 0: only at the end (with --ckpt-dir)
  int resume;                    // load ckpt_dir/latest first
  const char *init_weights;      // gpt_train only: initial weights from this .safetensors
  const char *init_prefix;       // the file's names are this prefix + zinc's ("" by default)
  int bf16;                      // register bf16 parameters
  int freeze_embedding;          // gpt_train only: wte frozen (so is the tied output projection)
  const char *data;              // NULL: the generated corpus
  int64_t corpus_bytes;          // size of the generated corpus
  const char *log_csv;           // rank 0 writes step,loss,... here
  int threads;                   // OpenMP threads per rank; 0 = share of the cores
  int sample;                    // characters to generate at the end
  float lr;                      // gpt_alone only (gpt_train: the config's)
  int help;
} gpt_args;

/* Defaults, then argv. Returns 0, or -1 with a message in err. */
int gpt_args_parse(gpt_args *a, int argc, char **argv, char *err, size_t errlen);
/* Flag summary for --help. */
const char *gpt_args_usage(void);
/* Set the OpenMP threads of this process and return their number:
 * --threads, else OMP_NUM_THREADS, else the cores this process may run on
 * divided by the ranks on this node (from the launcher's environment), at
 * least 1. Returns 1 in a build without OpenMP. */
int gpt_threads_setup(const gpt_args *a);

#endif /* GPT_ARGS_H */
