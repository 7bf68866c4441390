/*
 * test_trainer_memory.c — the trainer's own activations in the memory
 * figures (zinc_memory_register_activations / _unregister_activations),
 * and the report's labels on the CPU device, where the device's memory is
 * host memory:
 *  - registered bytes appear in zinc_mem_stats under ZINC_MEM_ACTIVATIONS
 *    at their location, replaced by a second registration of the name
 *    (also across locations), removed by unregistering; misuse is refused;
 *  - zinc_memory_report's rows say "host" and "host_offload", none
 *    "device"; its JSON says "device_is_host": true.
 */
#include <mpi.h>

#include "../engine_test.h"

static uint64_t act(zinc_engine *e, int loc) {
  zinc_mem_stats st = ZINC_MEM_STATS_INIT;
  ET_OK(zinc_memory_stats(e, &st));
  return st.current[loc][ZINC_MEM_ACTIVATIONS];
}

static int line_starts(const char *text, const char *prefix) {
  int n = 0;
  for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
    n += !strncmp(p, prefix, strlen(prefix));
  return n;
}

int main(int argc, char **argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &et_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &et_world);
  et_run r = et_defaults();
  r.stage = 1;
  et_model m;
  zinc_engine *e = et_open(&r, NULL, &m);
  uint64_t d0 = act(e, ZINC_LOC_DEVICE), h0 = act(e, ZINC_LOC_HOST);
  ET_OK(zinc_memory_register_activations(e, "x", ZINC_LOC_DEVICE, 1000));
  ET_OK(zinc_memory_register_activations(e, "y", ZINC_LOC_HOST, 500));
  ET_CHECK(act(e, ZINC_LOC_DEVICE) == d0 + 1000 && act(e, ZINC_LOC_HOST) == h0 + 500,
           "after x=1000 (device), y=500 (host): device %llu host %llu",
           (unsigned long long)(act(e, ZINC_LOC_DEVICE) - d0),
           (unsigned long long)(act(e, ZINC_LOC_HOST) - h0));
  ET_OK(zinc_memory_register_activations(e, "x", ZINC_LOC_DEVICE, 300));
  ET_CHECK(act(e, ZINC_LOC_DEVICE) == d0 + 300, "x again: device +%llu, expected +300",
           (unsigned long long)(act(e, ZINC_LOC_DEVICE) - d0));
  ET_OK(zinc_memory_register_activations(e, "x", ZINC_LOC_HOST, 300));
  ET_CHECK(act(e, ZINC_LOC_DEVICE) == d0 && act(e, ZINC_LOC_HOST) == h0 + 800,
           "x moved to host: device +%llu host +%llu", (unsigned long long)(act(e, 0) - d0),
           (unsigned long long)(act(e, ZINC_LOC_HOST) - h0));
  ET_OK(zinc_memory_unregister_activations(e, "y"));
  ET_CHECK(act(e, ZINC_LOC_HOST) == h0 + 300, "y unregistered: host +%llu, expected +300",
           (unsigned long long)(act(e, ZINC_LOC_HOST) - h0));
  ET_CHECK(zinc_memory_unregister_activations(e, "y") == ZINC_ERR_INVALID,
           "unregistering y twice was accepted");
  ET_CHECK(zinc_memory_register_activations(e, "z", ZINC_LOC_NVME, 1) == ZINC_ERR_INVALID,
           "activations on nvme were accepted");
  ET_CHECK(zinc_memory_register_activations(e, "", ZINC_LOC_HOST, 1) == ZINC_ERR_INVALID,
           "an empty name was accepted");

  ET_CHECK(!strcmp(zinc_engine_location_name(e, ZINC_LOC_DEVICE), "host") &&
           !strcmp(zinc_engine_location_name(e, ZINC_LOC_HOST), "host_offload") &&
           !strcmp(zinc_engine_location_name(e, ZINC_LOC_NVME), "nvme"),
           "cpu engine labels: %s %s %s", zinc_engine_location_name(e, 0),
           zinc_engine_location_name(e, 1), zinc_engine_location_name(e, 2));
  char *text = NULL;
  ET_OK(zinc_memory_report(e, 0, &text));
  ET_CHECK(line_starts(text, "  host    ") == 1 && line_starts(text, "  host_offload ") == 1 &&
           line_starts(text, "  device ") == 0,
           "the report's rows on the cpu device:\n%s", text);
  free(text);
  ET_OK(zinc_memory_report(e, 1, &text));
  ET_CHECK(strstr(text, "\"device_is_host\": true") != NULL, "JSON: %s", text);
  free(text);
  ET_OK(zinc_memory_unregister_activations(e, "x"));
  ET_CHECK(act(e, ZINC_LOC_HOST) == h0, "x unregistered: host +%llu",
           (unsigned long long)(act(e, ZINC_LOC_HOST) - h0));
  ET_OK(zinc_memory_register_activations(e, "left", ZINC_LOC_DEVICE, 64)); /* freed by destroy */
  et_model_free(&m);
  zinc_engine_destroy(e);
  int bad = et_failures;
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (et_rank == 0)
    printf(bad ? "trainer memory tests FAILED\n" : "trainer memory tests passed\n");
  MPI_Finalize();
  return bad ? 1 : 0;
}
