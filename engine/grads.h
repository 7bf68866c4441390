/*
 * grads.h — the gradient buffers handed to the trainer and their
 * reduction (grads.c): the ring of gradient areas, the launched
 * reductions retired in launch order, the stage 0/1 sums.
 */
#ifndef ZINC_ENGINE_GRADS_H
#define ZINC_ENGINE_GRADS_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "engine/engine.h"
#include "kernels/codec.h"

/* A launched gradient reduction: the modules whose areas it reduces.
 * Reductions retire strictly in launch order. */
struct zinc_reduction {
  zinc_comm_req *req;
  int first_module;       /* index into engine->launched_modules */
  int nmodules;
  /* compressed (compress.c): the encoded slices, peer-major */
  void *cx_send, *cx_recv; /* (cx_send_bytes) device: sent / received    */
  size_t cx_send_bytes;
  size_t *cx_counts;      /* (5 N) bytes: counts, displs, rcounts, rdispls,
                             and a cursor per peer                       */
  size_t *cx_cursor;      /* into cx_counts                              */
  zinc_codec cx_codec;    /* the gradient codec this reduction was
                             encoded with (DGC's k is the step's)       */
};


/* -------------------------------------------------------------- grads.c */
size_t zinc_grads_ring_bytes(const zinc_engine *e);
/* Stages 0/1: bytes of the f32 sums of 16-bit gradients (0 when none). */
size_t zinc_grads_sum_bytes(const zinc_engine *e);
zinc_status zinc_grads_init(zinc_engine *e);
void zinc_grads_free(zinc_engine *e);
/* Hand out (allocating/zeroing as needed) the gradient buffers of m. */
zinc_status zinc_grads_open(zinc_engine *e, zinc_module *m);
/* Replay of a READY event: the module's gradients go to the reduction in
 * the recorded order (zeros if the trainer has not reported it). */
zinc_status zinc_grads_replay_ready(zinc_engine *e, zinc_module *m);
/* The trainer reported m (its gradients are complete). */
zinc_status zinc_grads_ready(zinc_engine *e, zinc_module *m);
/* Launch what is pending and wait for every reduction. */
zinc_status zinc_grads_flush(zinc_engine *e);
/* Complete finished reductions without blocking (progress). */
zinc_status zinc_grads_poll(zinc_engine *e);
/* Start of an accumulation window / micro-batch bookkeeping. */
void zinc_grads_micro_begin(zinc_engine *e);
int zinc_grads_is_boundary_micro(const zinc_engine *e);
/* Pointer to the reduced gradient of a unit's chunk for rank r (and its
 * dtype), where the step reads it; NULL when the partition is on NVMe
 * (zinc_nvme_grad_read). */
const void *zinc_grads_chunk(const zinc_engine *e, int unit, int r, int *dtype);
/* prescale_gradients / gradient_predivide_factor: the factor each rank's
 * gradient is multiplied by before the sum (1: none), and the one that
 * turns the stored sum into the averaged, unscaled gradient. */
float zinc_grads_prescale(const zinc_engine *e);
double zinc_grads_mean_base(const zinc_engine *e);
/* Device bytes of grad_window_sum (0 when none). */
size_t zinc_grads_window_bytes(const zinc_engine *e);
/* The gradients travel only by the plain, exact reduce-scatter and no
 * method reads or rewrites them beyond it: no gradient codec or
 * communication_data_type, no row that keeps them in memory
 * (zinc_reduce_keeps_grads). From the settings and layout, so the
 * estimator's bare engine answers too (the NVMe placement's gradient
 * swap asks). */
int zinc_grads_plain(const zinc_engine *e);

#endif /* ZINC_ENGINE_GRADS_H */
