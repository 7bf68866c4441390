/*
 * test_comm_mpi_serialized.c — a trainer that initialised MPI itself below
 * MPI_THREAD_MULTIPLE (here MPI_THREAD_SERIALIZED): the mpi comm must not
 * start a worker thread, `start` runs the batch at once in the caller's
 * thread, wait/test still complete the request, results are the same, and
 * zinc must not finalise the trainer's MPI (the trainer does).
 */
#include "comm/comm_check.h"

#define COUNT 777

int main(int argc, char **argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided == MPI_THREAD_MULTIPLE) {
    fprintf(stderr, "SKIPPED: MPI gave MPI_THREAD_MULTIPLE when SERIALIZED was asked\n");
    MPI_Finalize();
    return 77;
  }
  zinc_comm *c = NULL;
  CHECK_OK(zinc_comm_mpi_create(NULL, 60.0, &c));
  if (c) {
    const int n = c->size, r = c->rank;
    float *send = malloc((size_t)n * COUNT * sizeof *send), *recv = malloc(COUNT * sizeof *recv);
    float *want = malloc(COUNT * sizeof *want);
    check_fill(send, (size_t)n * COUNT, ZINC_F32, 5, r, 0);
    zinc_coll rs = {.kind = ZINC_COLL_REDUCE_SCATTER, .send = send, .recv = recv,
                    .count = COUNT, .dtype = ZINC_F32};
    zinc_comm_req *req = NULL;
    CHECK_OK(c->ops->start(c, &rs, 1, &req));
    int done = 0;
    if (req)
      CHECK_OK(c->ops->test(c, req, &done));
    CHECK(done == 1, "below MPI_THREAD_MULTIPLE a started batch is done when start returns");
    for (size_t i = 0; i < COUNT; i++)
      check_expect_reduce(want, i, ZINC_F32, ZINC_OP_SUM, 5, n, (size_t)r * COUNT + i, -1, 0);
    check_equal(recv, want, COUNT, ZINC_F32, "serialized: started reduce-scatter");
    memset(recv, 0, COUNT * sizeof *recv);
    CHECK_OK(c->ops->start(c, &rs, 1, &req));
    if (req)
      CHECK_OK(c->ops->wait(c, req));
    check_equal(recv, want, COUNT, ZINC_F32, "serialized: waited reduce-scatter");
    zinc_comm_destroy(c);
    free(send);
    free(recv);
    free(want);
  }
  int rc = check_finish("test_comm_mpi_serialized");
  MPI_Finalize(); /* ours to do: zinc did not initialise MPI */
  return rc;
}
