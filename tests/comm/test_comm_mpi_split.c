/*
 * test_comm_mpi_split.c — sub-communicators and the comm's life cycle:
 *   - split into even/odd ranks and into consecutive pairs (data-parallel
 *     and model-parallel groups), a reversed key order, a split of a split;
 *     on each, reduce-scatter, all-reduce and all-gather from buffers the
 *     sub-comm allocated with alloc_shared, checked against tree-ordered
 *     sums over the sub-comm's ranks;
 *   - the same on the forced point-to-point path;
 *   - repeated create/destroy in one process (MPI stays initialised, one
 *     finalise at exit; no thread or file descriptor left behind), and a
 *     comm over a trainer-provided MPI_Comm.
 */
#include <dirent.h>

#include "comm/comm_check.h"

#define COUNT 1003

static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  int n = 0, ch;
  if (!f)
    return -1;
  while ((ch = fgetc(f)) != EOF)
    n += ch == '\n';
  fclose(f);
  return n;
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  if (!d)
    return -1;
  for (struct dirent *e; (e = readdir(d));)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Collectives on c, data generated from the rank in c. */
static void exercise(zinc_comm *c, const char *what, uint32_t seed) {
  const int n = c->size, r = c->rank;
  char label[160];
  float *mem = NULL;
  size_t elems = (size_t)(n + 2) * COUNT * 4; /* room for every layout below */
  CHECK_OK(c->ops->alloc_shared(c, elems * sizeof *mem, (void **)&mem));
  if (!mem)
    return;
  float *want = malloc(elems * sizeof *want);
  /* reduce-scatter in place */
  check_fill(mem, (size_t)n * COUNT, ZINC_F32, seed, r, 0);
  CHECK_OK(zinc_comm_reduce_scatter(c, mem, mem + (size_t)r * COUNT, COUNT, ZINC_F32));
  for (size_t i = 0; i < COUNT; i++)
    check_expect_reduce(want, i, ZINC_F32, ZINC_OP_SUM, seed, n, (size_t)r * COUNT + i, -1, 0);
  snprintf(label, sizeof label, "%s: reduce-scatter", what);
  check_equal(mem + (size_t)r * COUNT, want, COUNT, ZINC_F32, label);
  /* all-reduce out of place, f16 */
  uint16_t *h = (uint16_t *)mem, *hout = (uint16_t *)(mem + (size_t)n * COUNT);
  check_fill(h, COUNT, ZINC_F16, seed + 1, r, 0);
  CHECK_OK(zinc_comm_allreduce(c, h, hout, COUNT, ZINC_F16, ZINC_OP_SUM));
  for (size_t i = 0; i < COUNT; i++)
    check_expect_reduce(want, i, ZINC_F16, ZINC_OP_SUM, seed + 1, n, i, -1, 0);
  snprintf(label, sizeof label, "%s: all-reduce f16", what);
  check_equal(hout, want, COUNT, ZINC_F16, label);
  /* all-gather out of place, i64 */
  int64_t *g = (int64_t *)mem, *gout = g + COUNT;
  check_fill(g, COUNT, ZINC_DT_I64, seed + 2, r, 0);
  CHECK_OK(zinc_comm_allgather(c, g, gout, COUNT / 2, ZINC_DT_I64));
  for (int k = 0; k < n; k++)
    check_fill((int64_t *)want + (size_t)k * (COUNT / 2), COUNT / 2, ZINC_DT_I64, seed + 2, k, 0);
  snprintf(label, sizeof label, "%s: all-gather i64", what);
  check_equal(gout, want, (size_t)n * (COUNT / 2), ZINC_DT_I64, label);
  free(want);
  c->ops->free_shared(c, mem);
}

static void test_splits(zinc_comm *world, const char *path) {
  const int n = world->size, r = world->rank;
  char what[96];
  zinc_comm *parity = NULL, *pairs = NULL, *reversed = NULL, *sub = NULL;

  CHECK_OK(world->ops->split(world, r % 2, r, &parity));
  if (parity) {
    CHECK(parity->size == (n + 1 - r % 2) / 2 && parity->rank == r / 2,
          "%s: even/odd split gave rank %d of %d", path, parity->rank, parity->size);
    snprintf(what, sizeof what, "%s: %s ranks", path, r % 2 ? "odd" : "even");
    exercise(parity, what, 10 + (uint32_t)(r % 2));
  }
  CHECK_OK(world->ops->split(world, r / 2, r, &pairs));
  if (pairs) {
    CHECK(pairs->rank == r % 2 && pairs->size == (r / 2 * 2 + 1 < n ? 2 : 1),
          "%s: pair split gave rank %d of %d", path, pairs->rank, pairs->size);
    snprintf(what, sizeof what, "%s: pair %d", path, r / 2);
    exercise(pairs, what, 20);
  }
  CHECK_OK(world->ops->split(world, 0, n - r, &reversed));
  if (reversed) {
    CHECK(reversed->rank == n - 1 - r, "%s: reversed key gave rank %d", path, reversed->rank);
    snprintf(what, sizeof what, "%s: reversed order", path);
    exercise(reversed, what, 30);
    /* split of a split: everybody in one group again */
    CHECK_OK(reversed->ops->split(reversed, 7, 0, &sub));
    if (sub) {
      snprintf(what, sizeof what, "%s: split of a split", path);
      exercise(sub, what, 40);
    }
  }
  zinc_comm_destroy(sub);
  zinc_comm_destroy(reversed);
  zinc_comm_destroy(pairs);
  zinc_comm_destroy(parity);
}

int main(void) {
  zinc_comm *world = NULL;
  CHECK_OK(zinc_comm_mpi_create(NULL, 60.0, &world));
  if (!world)
    return check_finish("test_comm_mpi_split");
  test_splits(world, "shm");
  zinc_comm_destroy(world);

  /* Many comms, one after the other: MPI stays up until exit, and each
   * destroy gives back its worker thread, its windows' descriptors and
   * mappings (counted after the first round, when MPI's own are open). */
  int fds_before = 0, threads_before = 0, maps_before = 0;
  for (int i = 0; i < 12; i++) {
    if (i == 1) {
      fds_before = count_entries("/proc/self/fd");
      threads_before = count_entries("/proc/self/task");
      maps_before = count_lines("/proc/self/maps");
    }
    zinc_comm *c = NULL;
    CHECK_OK(zinc_comm_mpi_create(NULL, 60.0, &c));
    if (!c)
      break;
    int one = 1, sum = 0;
    CHECK_OK(zinc_comm_allreduce(c, &one, &sum, 1, ZINC_DT_I32, ZINC_OP_SUM));
    CHECK(sum == c->size, "create/destroy round %d: sum %d", i, sum);
    zinc_comm_destroy(c);
  }
  int fds_after = count_entries("/proc/self/fd"), threads_after = count_entries("/proc/self/task");
  CHECK(fds_after <= fds_before, "11 create/destroy rounds: %d open descriptors, %d before",
        fds_after, fds_before);
  CHECK(threads_after <= threads_before, "11 create/destroy rounds: %d threads, %d before",
        threads_after, threads_before);
  int maps_after = count_lines("/proc/self/maps");
  CHECK(maps_after <= maps_before + 4, "11 create/destroy rounds: %d mappings, %d before "
        "(shared windows not unmapped?)", maps_after, maps_before);
  zinc_comm_destroy(NULL);

  /* A trainer's own communicator (here: ranks in reverse order). */
  int wr, wn;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  MPI_Comm_size(MPI_COMM_WORLD, &wn);
  MPI_Comm mine;
  MPI_Comm_split(MPI_COMM_WORLD, 0, wn - wr, &mine);
  zinc_comm *c = NULL;
  CHECK_OK(zinc_comm_mpi_create(&mine, 60.0, &c));
  if (c) {
    CHECK(c->rank == wn - 1 - wr, "comm over a trainer comm: rank %d", c->rank);
    exercise(c, "trainer comm", 50);
    zinc_comm_destroy(c);
  }
  MPI_Comm_free(&mine);

  setenv("ZINC_COMM_MPI_SHM", "0", 1);
  CHECK_OK(zinc_comm_mpi_create(NULL, 60.0, &world));
  if (world) {
    test_splits(world, "p2p");
    zinc_comm_destroy(world);
  }
  return check_finish("test_comm_mpi_split");
}
