/*
 * activations.h — the engine's side of the activation checkpoints
 * (activations.c); the trainer's calls are zinc.h's.
 */
#ifndef ZINC_ENGINE_ACTIVATIONS_H
#define ZINC_ENGINE_ACTIVATIONS_H

#include "zinc.h"

/* -------------------------------------------------------- activations.c */
/* Free the engine's whole activation-checkpoint store (every checkpoint
 * still held and the store itself); the public zinc_activation_free drops
 * one checkpoint. */
void zinc_activation_store_destroy(zinc_engine *e);

#endif /* ZINC_ENGINE_ACTIVATIONS_H */
