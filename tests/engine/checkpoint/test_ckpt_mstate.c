/*
 * test_ckpt_mstate.c — the compression methods' rank-local state
 * (engine/checkpoint/mstate.h) in checkpoints, under mpirun with 1 or more
 * ranks. The test registers its own buffers (a device one and a host one,
 * filled with values generated per rank), then:
 *  - exact: the save writes rank_NNNNN.zms holding the buffers in
 *    registration order (checked byte by byte on disk), the manifest lists
 *    the entries, and a load into an engine registering the same entries
 *    gives every rank its bytes back after they were overwritten;
 *  - damaged: a flipped byte in the last rank's .zms is refused on every
 *    rank (ZINC_ERR_CORRUPT naming the file) and the buffers keep what
 *    they held;
 *  - mismatch: an engine registering another size, or a weights-only load,
 *    gets zeros (the load succeeds); an engine registering nothing loads
 *    the checkpoint and ignores the state;
 *  - the manifest's method_state is checked on parse: a file of another
 *    size than its entries make is refused naming method_state.
 */
#include <mpi.h>

#include "base/fs.h"
#include "engine/checkpoint/format.h"
#include "engine/engine.h"
#include "engine/engine_test.h"
#include "engine/support.h"

static char root[512];

#define DEV_BYTES 5000 /* not a multiple of the staging size or of 8 */
#define HOST_BYTES 24

typedef struct {
  void *dev;
  unsigned char host[HOST_BYTES];
} bufs;

static unsigned char gen(int seed, int which, size_t k) {
  uint32_t h = (uint32_t)(seed * 7919 + et_rank * 104729 + which * 1299709) ^
               (uint32_t)(k * 2654435761u);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (unsigned char)h;
}

static void fill(bufs *b, int seed) {
  for (size_t k = 0; k < DEV_BYTES; k++)
    ((unsigned char *)b->dev)[k] = gen(seed, 0, k); /* the cpu device: host memory */
  for (size_t k = 0; k < HOST_BYTES; k++)
    b->host[k] = gen(seed, 1, k);
}

static int holds(const bufs *b, int seed) {
  for (size_t k = 0; k < DEV_BYTES; k++)
    if (((unsigned char *)b->dev)[k] != gen(seed, 0, k))
      return 0;
  for (size_t k = 0; k < HOST_BYTES; k++)
    if (b->host[k] != gen(seed, 1, k))
      return 0;
  return 1;
}

static int all_zero(const bufs *b) {
  for (size_t k = 0; k < DEV_BYTES; k++)
    if (((unsigned char *)b->dev)[k])
      return 0;
  for (size_t k = 0; k < HOST_BYTES; k++)
    if (b->host[k])
      return 0;
  return 1;
}

/* An engine with the test's buffers registered (dev_bytes of the device
 * one: DEV_BYTES, or another size for the mismatch; 0: none registered). */
static zinc_engine *open_with(et_model *m, bufs *b, size_t dev_bytes) {
  et_run r = et_defaults();
  r.stage = 2;
  zinc_engine *e = et_open(&r, NULL, m);
  memset(b, 0, sizeof *b);
  if (dev_bytes) {
    ET_OK(zinc_engine_buffer_alloc(e, dev_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS, &b->dev,
                                   "test state"));
    ET_OK(zinc_mstate_register(e, "test.device", b->dev, dev_bytes, 0));
    ET_OK(zinc_mstate_register(e, "test.host", b->host, HOST_BYTES, 1));
  }
  return e;
}

static void close_with(zinc_engine *e, et_model *m, bufs *b, size_t dev_bytes) {
  zinc_engine_buffer_free(e, b->dev, dev_bytes, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  et_model_free(m);
  zinc_engine_destroy(e);
}

static void test_registry(void) {
  et_model m;
  bufs b;
  zinc_engine *e = open_with(&m, &b, DEV_BYTES);
  ET_CHECK(zinc_mstate_register(e, "test.host", b.host, 8, 1) == ZINC_ERR_INVALID &&
           strstr(zinc_last_error(), "twice"), "a name registered twice: %s", zinc_last_error());
  ET_CHECK(zinc_mstate_register(e, "a.name.that.is.far.too.long.for.the.registry.table",
                                b.host, 8, 1) == ZINC_ERR_INVALID,
           "a name too long was registered");
  ET_CHECK(zinc_mstate_total(e) == DEV_BYTES + HOST_BYTES, "total %lld",
           (long long)zinc_mstate_total(e));
  close_with(e, &m, &b, DEV_BYTES);
}

static void flip_byte(const char *path, long at) {
  FILE *f = fopen(path, "r+b");
  ET_CHECK(f != NULL, "cannot open %s", path);
  if (!f)
    return;
  fseek(f, at, SEEK_SET);
  int c = fgetc(f);
  fseek(f, at, SEEK_SET);
  fputc(c ^ 0x40, f);
  fclose(f);
}

static void test_exact_and_damaged(void) {
  char dir[700], path[1024];
  snprintf(dir, sizeof dir, "%s/ms", root);
  et_model m;
  bufs b;
  zinc_engine *e = open_with(&m, &b, DEV_BYTES);
  fill(&b, 1);
  ET_OK(zinc_save_checkpoint(e, dir, "t"));
  /* on disk: the buffers in registration order */
  snprintf(path, sizeof path, "%s/t/rank_%05d.zms", dir, et_rank);
  char *disk = NULL;
  size_t len = 0;
  ET_OK(zinc_fs_read_all(path, &disk, &len));
  ET_CHECK(disk && len == DEV_BYTES + HOST_BYTES + ZINC_RANK_TRAILER &&
           memcmp(disk, b.dev, DEV_BYTES) == 0 && memcmp(disk + DEV_BYTES, b.host, HOST_BYTES) == 0,
           "%s holds %zu bytes, not the rank's %d registered bytes in order and the identity "
           "trailer", path, len, DEV_BYTES + HOST_BYTES);
  /* the trailer names this rank (format.h, "Per-rank files") */
  int kind = 0;
  zinc_rank_file_id id;
  uint64_t payload = 0;
  ET_CHECK(disk && len == DEV_BYTES + HOST_BYTES + ZINC_RANK_TRAILER &&
               zinc_rank_trailer_decode((unsigned char *)disk + DEV_BYTES + HOST_BYTES,
                                        ZINC_RANK_TRAILER, path, &kind, &id,
                                        &payload) == ZINC_OK &&
               kind == ZINC_RANK_FILE_MSTATE && id.rank == (uint32_t)et_rank &&
               id.world == (uint32_t)et_world && payload == DEV_BYTES + HOST_BYTES,
           "%s's identity trailer does not name rank %d of %d: %s", path, et_rank, et_world,
           zinc_last_error());
  free(disk);
  zinc_ckpt_dir *d = NULL;
  ET_OK(zinc_ckpt_dir_open(dir, "t", &d));
  const zinc_manifest_mstate *ms = &d->manifest->ms;
  ET_CHECK(ms->present && ms->dp_size == et_world && ms->nentries == 2 &&
           !strcmp(ms->entries[0].name, "test.device") && ms->entries[0].bytes == DEV_BYTES &&
           !strcmp(ms->entries[1].name, "test.host") && ms->entries[1].bytes == HOST_BYTES,
           "manifest method_state (present %d dp_size %d entries %d)", ms->present,
           ms->dp_size, ms->nentries);
  zinc_ckpt_dir_close(d);
  /* overwritten, then restored exactly */
  fill(&b, 2);
  ET_OK(zinc_load_checkpoint(e, dir, "t"));
  ET_CHECK(holds(&b, 1), "rank %d: the loaded method state is not the saved bytes", et_rank);
  /* a damaged file: refused everywhere, nothing changed */
  MPI_Barrier(MPI_COMM_WORLD);
  if (et_rank == 0) {
    snprintf(path, sizeof path, "%s/t/rank_%05d.zms", dir, et_world - 1);
    flip_byte(path, DEV_BYTES - 3);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  fill(&b, 3);
  double t0 = MPI_Wtime();
  zinc_status st = zinc_load_checkpoint(e, dir, "t");
  char name[32];
  snprintf(name, sizeof name, "rank_%05d.zms", et_world - 1);
  const char *needles[] = {"method-state file", name, NULL};
  et_expect_everywhere(st, ZINC_ERR_CORRUPT, MPI_Wtime() - t0, "a damaged .zms file", needles,
                       -1);
  ET_CHECK(holds(&b, 3), "rank %d: a refused load changed the method state", et_rank);
  close_with(e, &m, &b, DEV_BYTES);
}

static void test_zeroed(void) {
  char dir[700];
  snprintf(dir, sizeof dir, "%s/zero", root);
  et_model m;
  bufs b;
  zinc_engine *e = open_with(&m, &b, DEV_BYTES);
  fill(&b, 4);
  ET_OK(zinc_save_checkpoint(e, dir, "t"));
  fill(&b, 5);
  ET_OK(zinc_load_checkpoint_ex(e, dir, "t", ZINC_LOAD_WEIGHTS_ONLY));
  ET_CHECK(all_zero(&b), "a weights-only load kept the method state");
  close_with(e, &m, &b, DEV_BYTES);
  /* another size registered: zeros */
  e = open_with(&m, &b, DEV_BYTES + 8);
  memset(b.dev, 0x55, DEV_BYTES + 8);
  memset(b.host, 0x55, HOST_BYTES);
  ET_OK(zinc_load_checkpoint(e, dir, "t"));
  int zero = 1;
  for (size_t k = 0; k < DEV_BYTES + 8; k++)
    zero &= ((unsigned char *)b.dev)[k] == 0;
  ET_CHECK(zero && all_zero(&b), "a load into other buffers did not zero them");
  close_with(e, &m, &b, DEV_BYTES + 8);
  /* nothing registered: ignored */
  e = open_with(&m, &b, 0);
  ET_OK(zinc_load_checkpoint(e, dir, "t"));
  close_with(e, &m, &b, 0);
  /* a checkpoint without method state into an engine with it: zeros */
  e = open_with(&m, &b, 0);
  ET_OK(zinc_save_checkpoint(e, dir, "none"));
  close_with(e, &m, &b, 0);
  e = open_with(&m, &b, DEV_BYTES);
  fill(&b, 6);
  ET_OK(zinc_load_checkpoint(e, dir, "none"));
  ET_CHECK(all_zero(&b), "a checkpoint without method state left the buffers nonzero");
  close_with(e, &m, &b, DEV_BYTES);
  /* the manifest: a file size its entries do not make is refused */
  if (et_rank == 0) {
    char path[1024];
    snprintf(path, sizeof path, "%s/t/manifest.json", dir);
    char *text = NULL;
    size_t len = 0;
    ET_OK(zinc_fs_read_all(path, &text, &len));
    char *at = text ? strstr(text, "\"bytes\": 24") : NULL;
    ET_CHECK(at != NULL, "manifest %s has no entry of 24 bytes", path);
    if (at) {
      at[10] = '5';
      zinc_manifest *mf = NULL;
      zinc_status st = zinc_manifest_parse(text, len, path, &mf);
      ET_CHECK(st == ZINC_ERR_CORRUPT && strstr(zinc_last_error(), "method_state"),
               "a manifest whose method_state sizes disagree parses: %s %s",
               zinc_status_name(st), zinc_last_error());
      zinc_manifest_free(mf);
    }
    free(text);
  }
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  snprintf(root, sizeof root, "%s/ckpt_mstate_np%d", et_binary_dir(), et_world);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  if (et_rank == 0 && system(cmd) != 0)
    return 1;
  MPI_Barrier(MPI_COMM_WORLD);
  test_registry();
  test_exact_and_damaged();
  test_zeroed();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0) {
    if (!bad) {
      snprintf(cmd, sizeof cmd, "rm -rf %s", root);
      if (system(cmd) != 0)
        bad = 1;
    }
    printf(bad ? "method-state checkpoint tests FAILED\n"
               : "method-state checkpoint tests passed at %d ranks\n", et_world);
  }
  MPI_Finalize();
  return bad ? 1 : 0;
}
