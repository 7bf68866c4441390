/*
 * test_device_agree.c — a device that fails on one rank at creation (no
 * GPU, a bad ordinal, out of memory) fails zinc_engine_create on every
 * rank at once, before any NCCL comm would wait for the missing rank:
 * ZINC_TEST_DEVICE_FAIL_RANK makes device creation fail on one rank, and
 * every rank must return ZINC_ERR_DEVICE with the same message naming that
 * rank, within ET_FAST seconds although the comm timeout is 120 s. Each
 * rank fails in turn (device ZINC_DEVICE_CPU and ZINC_DEVICE_AUTO, which in
 * the CPU build takes the CPU through the device choice); then, with the
 * variable unset, creation succeeds again. Needs 2+ ranks (ctest: 2 and 3),
 * else SKIPPED (77).
 */
#include <mpi.h>

#include "engine_test.h"

#define ET_FAST 5.0 /* typically well under 1 s; 5 s for a loaded CI machine */

static void fail_on(int failing, int device) {
  char value[16];
  snprintf(value, sizeof value, "%d", failing);
  setenv("ZINC_TEST_DEVICE_FAIL_RANK", value, 1);
  et_run r = et_defaults();
  r.extra = "\"zinc\": {\"comm_timeout_s\": 120}";
  char *json = et_config_json(&r);
  zinc_config *cfg = NULL;
  ET_OK(zinc_config_parse(json, &cfg));
  free(json);
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = device;
  opt.threads = 1;
  zinc_engine *e = NULL;
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  zinc_status st = zinc_engine_create(cfg, &opt, &e);
  double dt = MPI_Wtime() - t0;
  char what[96];
  snprintf(what, sizeof what, "device %s fails on rank %d",
           device == ZINC_DEVICE_AUTO ? "auto" : "cpu", failing);
  char who[32];
  snprintf(who, sizeof who, "rank %d", failing);
  et_expect_everywhere(st, ZINC_ERR_DEVICE, dt, what,
                       (const char *const[]){"ZINC_TEST_DEVICE_FAIL_RANK", who, NULL}, failing);
  ET_CHECK(dt < ET_FAST, "%s: took %.2f s on rank %d (limit %.0f s; the comm timeout is 120 s)",
           what, dt, et_rank, ET_FAST);
  ET_CHECK(e == NULL, "%s: an engine came back with the error", what);
  if (et_rank == 0)
    printf("%s: every rank failed after %.3f s (rank 0)\n", what, dt);
  /* the same text on every rank, the failing one included */
  char mine[1024] = {0}, ref[1024] = {0};
  snprintf(mine, sizeof mine, "%s", zinc_last_error());
  memcpy(ref, mine, sizeof ref);
  MPI_Bcast(ref, sizeof ref, MPI_CHAR, 0, MPI_COMM_WORLD);
  ET_CHECK(strcmp(mine, ref) == 0, "%s: rank %d says \"%s\" but rank 0 \"%s\"", what, et_rank,
           mine, ref);
  zinc_engine_destroy(e);
  zinc_config_free(cfg);
  unsetenv("ZINC_TEST_DEVICE_FAIL_RANK");
}

static void create_again(void) {
  et_run r = et_defaults();
  zinc_engine *e = et_create(&r, NULL);
  ET_CHECK(e != NULL, "creation after the failures: %s", zinc_last_error());
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  if (et_world < 2) {
    printf("SKIPPED: test_device_agree needs 2 or more ranks\n");
    MPI_Finalize();
    return 77;
  }
  for (int failing = 0; failing < et_world; failing++)
    fail_on(failing, ZINC_DEVICE_CPU);
  fail_on(et_world - 1, ZINC_DEVICE_AUTO);
  create_again();
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "device agreement tests FAILED\n"
               : "device agreement passed at %d ranks: each rank's device failure on every "
                 "rank, same message, at once\n", et_world);
  MPI_Finalize();
  return bad ? 1 : 0;
}
