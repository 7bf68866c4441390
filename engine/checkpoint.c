/*
 * checkpoint.c — placeholder until crash-safe sharded checkpoints land:
 * both calls say plainly that they are not available yet.
 */
#include "engine/engine.h"

zinc_status zinc_save_checkpoint(zinc_engine *e, const char *dir, const char *tag) {
  return zinc_error(ZINC_ERR_UNSUPPORTED, "zinc_save_checkpoint(\"%s\", \"%s\"): checkpoints "
                    "are not implemented in this build yet", dir ? dir : "(null)",
                    tag ? tag : "(null)");
}

zinc_status zinc_load_checkpoint(zinc_engine *e, const char *dir, const char *tag) {
  return zinc_error(ZINC_ERR_UNSUPPORTED, "zinc_load_checkpoint(\"%s\", \"%s\"): checkpoints "
                    "are not implemented in this build yet", dir ? dir : "(null)",
                    tag ? tag : "(null)");
}
