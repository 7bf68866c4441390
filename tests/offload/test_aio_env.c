/* test_aio_env.c — ZINC_AIO_FAULT end to end: ctest starts this program
 * with the variable set in its environment (tests/offload/CMakeLists.txt); the
 * engine, created with no programmatic faults, must apply it. Expects the
 * variable to fail the second request of a two-request write with EIO. */
#include "aio_test_util.h"

#include "base/base.h"

int main(void) {
  const char *spec = getenv("ZINC_AIO_FAULT");
  if (!spec || strcmp(spec, "error@2=EIO") != 0) {
    fprintf(stderr, "SKIPPED: run through ctest, which sets ZINC_AIO_FAULT=error@2=EIO\n");
    return 77;
  }
  char scratch[4096];
  scratch_make(scratch, sizeof scratch, "aio_env");
  zinc_aio_params p = test_params(scratch, 65536, 4, 1);
  p.fault = NULL;
  zinc_aio *aio = NULL;
  int rc = 1;
  if (zinc_aio_create(&p, &aio) != ZINC_OK) {
    fprintf(stderr, "create: %s\n", zinc_last_error());
    goto out;
  }
  char path[4200];
  snprintf(path, sizeof path, "%s/env.bin", scratch);
  int file;
  void *buf = NULL;
  if (zinc_aio_file_open(aio, path, O_CREAT, 0600, &file) != ZINC_OK ||
      zinc_aio_buffer_alloc(aio, 131072, &buf) != ZINC_OK) {
    fprintf(stderr, "setup: %s\n", zinc_last_error());
    goto out;
  }
  memset(buf, 7, 131072);
  zinc_status st = zinc_aio_write(aio, file, 0, buf, 131072);
  printf("write: %s: %s\n", zinc_status_name(st), zinc_last_error());
  rc = !(st == ZINC_ERR_IO && strstr(zinc_last_error(), "at offset 65536") &&
         strstr(zinc_last_error(), "Input/output error"));
  zinc_aio_buffer_free(aio, buf);
out:
  zinc_aio_destroy(aio);
  scratch_remove(scratch);
  return rc;
}
