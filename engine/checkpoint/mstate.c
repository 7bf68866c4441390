/*
 * mstate.c — the compression methods' rank-local state in checkpoints
 * (mstate.h): the registry; save and load.
 */
#include "engine/checkpoint/mstate.h"

#include <string.h>

#include "engine/engine.h"

zinc_status zinc_mstate_register(zinc_engine *e, const char *name, void *ptr, size_t bytes,
                                 int host) {
  if (strlen(name) >= ZINC_MSTATE_NAME)
    return zinc_error(ZINC_ERR_INVALID, "method state \"%s\": name longer than %d bytes", name,
                      ZINC_MSTATE_NAME - 1);
  for (int i = 0; i < e->nmstate; i++)
    if (!strcmp(e->mstate[i].name, name))
      return zinc_error(ZINC_ERR_INVALID, "method state \"%s\" registered twice", name);
  if (e->nmstate == ZINC_MSTATE_MAX)
    return zinc_error(ZINC_ERR_INVALID, "method state \"%s\": more than %d buffers registered",
                      name, ZINC_MSTATE_MAX);
  zinc_mstate_entry *m = &e->mstate[e->nmstate++];
  memset(m, 0, sizeof *m);
  strcpy(m->name, name);
  m->ptr = ptr;
  m->bytes = bytes;
  m->host = host;
  return ZINC_OK;
}

void zinc_mstate_clear(zinc_engine *e) {
  memset(e->mstate, 0, sizeof e->mstate);
  e->nmstate = 0;
}
