/*
 * ckpt_mpi.h — what the checkpoint tests under mpirun share beside
 * engine_test.h: starting MPI with the skip below the ranks a test needs,
 * a shell command run once (rank 0) behind a barrier, and the test's
 * scratch directory, emptied at the start.
 */
#ifndef CKPT_MPI_H
#define CKPT_MPI_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine_test.h"

/* cmd on rank 0, then every rank waits for it. */
static void shell(const char *cmd) {
  if (et_rank == 0 && system(cmd) != 0)
    fprintf(stderr, "command failed: %s\n", cmd);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* MPI started, et_rank and et_world set. 0: go on; 77 (ctest's skip code)
 * below min_world ranks, after saying SKIPPED once and finalising. */
static int et_mpi_start(int *argc, char ***argv, const char *test, int min_world) {
  int provided;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world >= min_world)
    return 0;
  if (et_rank == 0)
    printf("SKIPPED: %s needs %d or more ranks\n", test, min_world);
  MPI_Finalize();
  return 77;
}

/* root = <binary dir>/<name>_np<world>, removed and made again. */
static void et_scratch_dir(char *root, size_t size, const char *name) {
  snprintf(root, size, "%s/%s_np%d", et_binary_dir(), name, et_world);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  shell(cmd);
}

#endif
