/*
 * config_check.c — zinc's verdict on config files, one line each:
 * "OK FILE" or "REJECT FILE: message". ds_oracle.py sets it beside
 * DeepSpeed's own verdict on the same files.
 */
#include <stdio.h>

#include "zinc.h"

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    zinc_config *cfg = NULL;
    zinc_status st = zinc_config_load(argv[i], &cfg);
    if (st == ZINC_OK)
      printf("OK %s\n", argv[i]);
    else
      printf("REJECT %s: %s\n", argv[i], zinc_last_error());
    zinc_config_free(cfg);
  }
  return 0;
}
