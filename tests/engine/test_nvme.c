/*
 * test_nvme.c — NVMe offload through the engine, under mpirun:
 *  - host memory of the optimizer stays at buffer_count x sub-group bytes
 *    (profiler, host/optim) while its state on disk is >= 8x larger;
 *  - the swap area holds the master and only the state slots the optimizer
 *    keeps: for each optimizer the swap file, the profiler's NVMe and host
 *    optimizer bytes and the build's size table equal 4 x (1 + slots)
 *    bytes per element in whole aio blocks, and reading a slot it does not
 *    keep is an error naming it;
 *  - injected I/O faults during a step (EIO, ENOSPC, a short transfer that
 *    recovers) give the documented status and a message naming the file;
 *    after a failure the engine refuses further steps; destroying it leaves
 *    no swap files; reloading the last checkpoint and training on gives the
 *    same parameters as a run without the fault;
 *  - a byte flipped in a swap file is ZINC_ERR_CORRUPT naming file and
 *    offset, never a silently wrong parameter;
 *  - a parameter read that fails on one rank only, during a fetch whose
 *    gather its peers are in: every rank gets ZINC_ERR_IO at the end of the
 *    micro-batch (the peers' message names rank 0), at once, not after a
 *    collective timeout; the checkpoint before it resumes to the same bits;
 *  - parameters on NVMe are read into offload_param.buffer_count buffers:
 *    one buffer with a prefetch window of several modules still trains to
 *    the same bits as no offload; a buffer_size smaller than a module's
 *    read is a config error that names the key and the size needed.
 * Faults are injected with the engine's test hook (ZINC_AIO_FAULT syntax,
 * offload/aio.h), counted from just before the faulty steps.
 */
#include <dirent.h>
#include <glob.h>
#include <mpi.h>
#include <sys/stat.h>

#include "engine/build.h"
#include "engine/engine.h"
#include "engine/place/place.h"
#include "engine/place/placements.h"
#include "engine_test.h"

static char root[512];


static et_run nvme_run(const char *dir) {
  et_run r = et_defaults();
  r.stage = 3;
  r.offload = "nvme";
  r.offload_param = "nvme";
  r.nvme_path = dir;
  r.sub_group = 300;
  r.buffer_count = 2;
  return r;
}

static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *ent;
  while (d && (ent = readdir(d)))
    n += ent->d_name[0] != '.';
  if (d)
    closedir(d);
  return n;
}

static void test_memory_bound(void) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/bound", root);
  mkdir(dir, 0755);
  et_run r = nvme_run(dir);
  r.sub_group = 64; /* far smaller than the shard */
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_OK(et_steps(&m, &r, 0, 3));
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  ET_OK(zinc_memory_stats(e, &st));
  uint64_t host = st.peak[ZINC_LOC_HOST][ZINC_MEM_OPTIM];
  uint64_t disk = st.current[ZINC_LOC_NVME][ZINC_MEM_OPTIM];
  uint64_t bound = 2ull * 64 * 12; /* buffer_count x sub-group x (master, m, v) */
  /* buffers are rounded up to the I/O alignment (4 KiB) */
  ET_CHECK(host >= bound && host <= 2ull * 4096, "host optimizer bytes %llu, expected "
           "buffer_count x sub-group = %llu (rounded to the I/O alignment)",
           (unsigned long long)host, (unsigned long long)bound);
  ET_CHECK(disk >= 8 * host, "optimizer state on disk %llu bytes, not 8x the host's %llu",
           (unsigned long long)disk, (unsigned long long)host);
  if (et_rank == 0)
    printf("nvme: optimizer host memory %llu bytes (2 buffers of one sub-group), on disk %llu "
           "bytes (%.0fx)\n", (unsigned long long)host, (unsigned long long)disk,
           (double)disk / (double)host);
  et_model_free(&m);
  zinc_engine_destroy(e);
  ET_CHECK(count_files(dir) == 0, "swap files left in %s", dir);
}

/* Swap file and memory figures per optimizer. The arrays per element are
 * written here from the optimizers' definitions (optim/optimizer.h), and
 * the block format from offload/swap.h: a region of B bytes takes
 * ceil(B / (block_size - 4096)) blocks of block_size bytes. */
static void test_state_bytes(void) {
  enum { BLOCK = 8192, PAYLOAD = BLOCK - 4096, GROUP = 1000, BUFFERS = 2 };
  const struct {
    et_optim o;
    int arrays; /* master + kept slots */
    int missing; /* an array it does not keep (0: none) */
  } cases[] = {
      {{.type = "AdamW", .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
        .weight_decay = 0.01}, 3, 0},
      {{.type = "Lamb", .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6,
        .weight_decay = 0.01, .min_coeff = 0.05, .max_coeff = 5.0}, 3, 0},
      {{.type = "Lion", .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1}, 2, 2},
      {{.type = "Adagrad", .lr = 0.01, .eps = 1e-8, .weight_decay = 0.01}, 2, 1},
      {{.type = "SGD", .lr = 0.05, .momentum = 0.9}, 2, 2},
      {{.type = "SGD", .lr = 0.05}, 1, 1},
  };
  char dir[600];
  snprintf(dir, sizeof dir, "%s/slots", root);
  mkdir(dir, 0755);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    et_run r = et_defaults();
    r.stage = 2;
    r.offload = "nvme";
    r.nvme_path = dir;
    r.sub_group = GROUP;
    r.buffer_count = BUFFERS;
    r.optim = &cases[c].o;
    r.extra = "  \"aio\": {\"block_size\": 8192}";
    et_model m;
    zinc_engine *e = et_open(&r, NULL, &m);
    ET_OK(et_steps(&m, &r, 0, 2));
    char what[96];
    snprintf(what, sizeof what, "%s%s", cases[c].o.type,
             et_optim_is(&cases[c].o, "SGD") && cases[c].o.momentum == 0 ? " (no momentum)" : "");
    /* elements of this rank's optimizer partition: at least its share of
     * the model */
    int64_t n = e->opt_numel, model = 0;
    for (int i = 0; i < TM_NPARAM; i++)
      model += zinc_param_numel(m.par[i]);
    ET_CHECK(n * et_world >= model, "%s: optimizer partition of %lld elements x %d ranks < "
             "the model's %lld", what, (long long)n, et_world, (long long)model);
    /* sub-groups of sub_group_size elements, at most the partition */
    int64_t g = n < GROUP ? n : GROUP;
    uint64_t disk = 0, groups = 0;
    for (int64_t a = 0; a < n; a += g, groups++) {
      uint64_t len = (uint64_t)(n - a < g ? n - a : g);
      disk += (len * 4 * (uint64_t)cases[c].arrays + PAYLOAD - 1) / PAYLOAD * BLOCK;
    }
    /* buffer_count buffers (at most one per sub-group) of one sub-group,
     * each rounded up to the probed I/O alignment (at most 4096) */
    uint64_t bufs = groups < BUFFERS ? groups : BUFFERS;
    uint64_t host = bufs * (uint64_t)g * 4 * (uint64_t)cases[c].arrays;
    uint64_t host_most = bufs * ((uint64_t)g * 4 * (uint64_t)cases[c].arrays + 4095) / 4096 * 4096;
    zinc_mem_stats st = ZINC_MEM_STATS_INIT;
    ET_OK(zinc_memory_stats(e, &st));
    ET_CHECK(st.current[ZINC_LOC_NVME][ZINC_MEM_OPTIM] == disk,
             "%s: optimizer bytes on NVMe %llu, expected %llu (%d arrays of %lld elements in "
             "%llu sub-groups)", what, (unsigned long long)st.current[ZINC_LOC_NVME][ZINC_MEM_OPTIM],
             (unsigned long long)disk, cases[c].arrays, (long long)n, (unsigned long long)groups);
    uint64_t host_now = st.current[ZINC_LOC_HOST][ZINC_MEM_OPTIM];
    ET_CHECK(host_now >= host && host_now <= host_most,
             "%s: host optimizer buffers %llu bytes, expected %llu rounded up to the I/O "
             "alignment (at most %llu)", what, (unsigned long long)host_now,
             (unsigned long long)host, (unsigned long long)host_most);
    uint64_t table[ZINC_LOC_N][ZINC_MEM_NCAT];
    zinc_build_sizes(e, table);
    ET_CHECK(table[ZINC_LOC_NVME][ZINC_MEM_OPTIM] == disk,
             "%s: the build's size table (the estimator's) says %llu NVMe bytes, expected %llu",
             what, (unsigned long long)table[ZINC_LOC_NVME][ZINC_MEM_OPTIM],
             (unsigned long long)disk);
    char pattern[800];
    snprintf(pattern, sizeof pattern, "%s/zinc-swap-*-optimizer-rank%d/stripe0.swap", dir,
             et_rank);
    glob_t gl;
    struct stat sb;
    int found = glob(pattern, 0, NULL, &gl) == 0 && gl.gl_pathc == 1 &&
                stat(gl.gl_pathv[0], &sb) == 0;
    ET_CHECK(found && (uint64_t)sb.st_size == disk, "%s: swap file %s is %lld bytes, "
             "expected %llu", what, found ? gl.gl_pathv[0] : pattern,
             found ? (long long)sb.st_size : -1LL, (unsigned long long)disk);
    if (found && et_rank == 0)
      printf("nvme: %-18s %lld elements, %d arrays: swap file %lld bytes (%llu blocks of "
             "%d), host buffers %llu bytes\n", what, (long long)n, cases[c].arrays,
             (long long)sb.st_size, (unsigned long long)disk / BLOCK, BLOCK,
             (unsigned long long)host_now);
    globfree(&gl);
    if (cases[c].missing) {
      float x;
      const char *name = cases[c].missing == 1 ? "exp_avg" : "exp_avg_sq";
      zinc_status rs = zinc_opt_read(e, cases[c].missing, 0, 1, &x);
      ET_CHECK(rs == ZINC_ERR_INVALID && strstr(zinc_last_error(), name),
               "%s: reading %s it does not keep: %s \"%s\"", what, name, zinc_status_name(rs),
               zinc_last_error());
      rs = zinc_opt_write(e, cases[c].missing, 0, 1, &x);
      ET_CHECK(rs == ZINC_ERR_INVALID && strstr(zinc_last_error(), name),
               "%s: writing %s it does not keep: %s \"%s\"", what, name, zinc_status_name(rs),
               zinc_last_error());
    }
    et_model_free(&m);
    zinc_engine_destroy(e);
  }
  ET_CHECK(count_files(dir) == 0, "swap files left in %s", dir);
}

static void capture(et_model *m, const et_run *r, float **out) {
  for (int i = 0; i < TM_NPARAM; i++)
    ET_OK(zinc_param_get_full(m->e, m->par[i], ZINC_STATE_PARAM, out[i]));
  (void)r;
}

/* fault: a ZINC_AIO_FAULT spec applied to the engine that runs steps 3..6 */
static void test_fault_on(const char *fault, zinc_status expect, const char *needle,
                          int one_rank);
static void test_fault(const char *fault, zinc_status expect, const char *needle) {
  test_fault_on(fault, expect, needle, 0);
}

/* one_rank: only rank 0 sees the fault, in a parameter read during a fetch
 * (optimizer in memory, parameters on NVMe): its peers are inside the same
 * gather, and every rank must report it at the end of the micro-batch. */
static void test_fault_on(const char *fault, zinc_status expect, const char *needle,
                          int one_rank) {
  char dir[600], ck[640];
  snprintf(dir, sizeof dir, "%s/fault", root);
  snprintf(ck, sizeof ck, "%s/fault_ckpt", root);
  mkdir(dir, 0755);
  et_run r = nvme_run(dir);
  if (one_rank)
    r.offload = "cpu";
  /* the reference: 6 steps without a fault */
  et_model a;
  zinc_engine *e = et_open(&r, NULL, &a);
  ET_OK(et_steps(&a, &r, 0, 6));
  float **ref = et_alloc_params(&r.shape);
  capture(&a, &r, ref);
  et_model_free(&a);
  zinc_engine_destroy(e);
  /* 3 steps, checkpoint, then a faulty engine */
  e = et_open(&r, NULL, &a);
  ET_OK(et_steps(&a, &r, 0, 3));
  ET_OK(zinc_save_checkpoint(e, ck, "step3"));
  et_model_free(&a);
  zinc_engine_destroy(e);
  et_model b;
  e = et_open(&r, NULL, &b);
  zinc_status st = zinc_load_checkpoint(e, ck, NULL);
  if (st == ZINC_OK && (!one_rank || et_rank == 0))
    st = zinc_nvme_inject(e, fault); /* counted from here: inside the next steps */
  double t0 = MPI_Wtime();
  if (st == ZINC_OK)
    st = et_steps(&b, &r, 3, 6);
  double took = MPI_Wtime() - t0;
  int all_ok = st == ZINC_OK, every = 0;
  MPI_Allreduce(&all_ok, &every, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (expect == ZINC_OK) {
    ET_CHECK(st == ZINC_OK, "fault %s: %s: %s (expected to recover)", fault,
             zinc_status_name(st), zinc_last_error());
  } else if (one_rank) {
    ET_CHECK(st == expect && strstr(zinc_last_error(), et_rank == 0 ? needle : "rank 0:") &&
                 took < 60,
             "fault %s on rank 0 only: rank %d got %s \"%s\" after %.1f s, expected %s "
             "mentioning \"%s\" at once", fault, et_rank, zinc_status_name(st),
             st == ZINC_OK ? "" : zinc_last_error(), took, zinc_status_name(expect),
             et_rank == 0 ? needle : "rank 0:");
    ET_CHECK(zinc_step(e, NULL) != ZINC_OK, "fault %s: the engine went on after it", fault);
    if (et_rank == 1)
      printf("nvme: a parameter read failing on rank 0 only: rank 1 got %s after %.2f s: %s\n",
             zinc_status_name(st), took, zinc_last_error());
  } else {
    /* injected on every rank: it fires (on at least one) and every rank
     * returns it, the first failing rank's message on the others */
    ET_CHECK(st == expect && strstr(zinc_last_error(), needle),
             "fault %s: got %s \"%s\", expected %s mentioning \"%s\"", fault,
             zinc_status_name(st), zinc_last_error(), zinc_status_name(expect), needle);
    ET_CHECK(zinc_step(e, NULL) != ZINC_OK, "fault %s: the engine went on after it", fault);
  }
  if (expect != ZINC_OK)
    ET_CHECK(!every, "fault %s: no rank failed", fault);
  et_model_free(&b);
  zinc_engine_destroy(e);
  ET_CHECK(count_files(dir) == 0, "fault %s: swap files left in %s", fault, dir);
  /* recovery: reload the checkpoint in a fresh engine and finish */
  et_model c;
  e = et_open(&r, NULL, &c);
  ET_OK(zinc_load_checkpoint(e, ck, NULL));
  ET_OK(et_steps(&c, &r, 3, 6));
  float **got = et_alloc_params(&r.shape);
  capture(&c, &r, got);
  char what[160];
  snprintf(what, sizeof what, "after fault %s, reload and retrain", fault);
  ET_CHECK(et_same_bits(&r.shape, got, ref, what), "%s: differs from the run without it", what);
  et_free_params(got);
  et_free_params(ref);
  et_model_free(&c);
  zinc_engine_destroy(e);
}

/* flip a byte in the first non-empty swap file found under dir */
static int corrupt_swap(const char *dir) {
  char cmd[1400];
  snprintf(cmd, sizeof cmd,
           "f=$(find %s -path '*optimizer*' -name 'stripe*.swap' -size +0 | sort | head -1); [ -n \"$f\" ] && "
           "printf '\\x5a' | dd of=\"$f\" bs=1 seek=5000 conv=notrunc status=none", dir);
  return system(cmd) == 0;
}

static void test_corruption(void) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/corrupt_r%d", root, et_rank);
  mkdir(dir, 0755);
  et_run r = nvme_run(dir);
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  ET_OK(et_steps(&m, &r, 0, 2));
  if (et_rank == 0)
    ET_CHECK(corrupt_swap(dir), "no swap file to corrupt under %s", dir);
  MPI_Barrier(MPI_COMM_WORLD);
  zinc_status st = et_steps(&m, &r, 2, 4);
  if (et_rank == 0)
    ET_CHECK(st == ZINC_ERR_CORRUPT && strstr(zinc_last_error(), "offset") &&
                 strstr(zinc_last_error(), ".swap"),
             "corrupted swap block: %s \"%s\"", zinc_status_name(st), zinc_last_error());
  et_model_free(&m);
  zinc_engine_destroy(e);
  ET_CHECK(count_files(dir) == 0, "swap files left after a corruption");
}

static void test_param_buffers(void) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/pbuf", root);
  mkdir(dir, 0755);
  et_run r = et_defaults();
  r.stage = 3;
  r.overlap = 1;
  r.steps = 6;
  r.prefetch = 100000; /* every module ahead: more reads wanted than buffers */
  float **plain = et_alloc_params(&r.shape), **swapped = et_alloc_params(&r.shape);
  et_train(&r, plain, NULL, NULL);
  r.offload = "cpu";
  r.offload_param = "nvme";
  r.nvme_path = dir;
  r.param_buffer_count = 1;
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  et_train(&r, swapped, NULL, &st);
  ET_CHECK(et_same_bits(&r.shape, swapped, plain, "param nvme, 1 read buffer"),
           "parameters on NVMe with one read buffer differ from no offload");
  et_free_params(plain);
  et_free_params(swapped);

  /* a buffer too small for the largest module's read */
  r.param_buffer_size = 8;
  zinc_engine *e = et_create(&r, NULL);
  et_model m;
  zinc_status bst = et_build(&m, e, &r);
  const char *msg = zinc_last_error();
  ET_CHECK(bst == ZINC_ERR_CONFIG && strstr(msg, "offload_param.buffer_size") &&
               strstr(msg, "raise buffer_size to at least"),
           "buffer_size 8: %s: %s", zinc_status_name(bst), msg);
  if (et_rank == 0)
    printf("nvme: parameters through 1 read buffer match no offload bitwise; buffer_size 8: "
           "%s\n", msg);
  et_model_free(&m);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  snprintf(root, sizeof root, "%s/nvme_test_np%d",
           et_binary_dir(), et_world);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  if (et_rank == 0 && system(cmd) != 0)
    return 1;
  MPI_Barrier(MPI_COMM_WORLD);
  test_memory_bound();
  test_state_bytes();
  test_fault("error@40=EIO", ZINC_ERR_IO, ".swap");
  test_fault("enospc@40", ZINC_ERR_IO, "No space"); /* request 60 is past 3 steps at 3 ranks */
  test_fault("short@45", ZINC_OK, "");
  test_corruption();
  test_param_buffers();
  if (et_world > 1)
    test_fault_on("error@1=EIO", ZINC_ERR_IO, ".swap", 1);
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0) {
    if (!bad) {
      snprintf(cmd, sizeof cmd, "rm -rf %s", root);
      if (system(cmd) != 0)
        bad = 1;
    }
    printf(bad ? "nvme tests FAILED\n" : "nvme tests passed at %d ranks\n", et_world);
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
