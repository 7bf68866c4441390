/*
 * device_wait.h — waiting for device work with a deadline. CUDA's waits
 * (cudaEventSynchronize, cudaStreamSynchronize, cudaDeviceSynchronize) have
 * no timeout: behind a kernel that never ends (an NCCL collective waiting
 * for a dead peer) they block for ever. The cuda device instead polls a
 * query (cudaEventQuery, cudaStreamQuery) against a deadline and fails
 * naming what it waited for. The loop is plain C, tested in the CPU build
 * with a fake predicate (tests/device/test_device_wait.c).
 */
#ifndef ZINC_DEVICE_WAIT_H
#define ZINC_DEVICE_WAIT_H

#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* *done = 1 when the work waited for has finished, 0 when not yet; a
 * failed query returns its status (set with zinc_error) and ends the wait. */
typedef zinc_status (*zinc_wait_pred)(void *ctx, int *done);

/* Poll done(ctx) until it says done or failed, or until timeout_s seconds
 * have passed: then ZINC_ERR_DEVICE "<what>: not finished after <t> s
 * (<hint>)". The first polls spin (short waits cost nothing more), later
 * ones sleep, doubling up to 1 ms, since CUDA offers no wait with a
 * deadline to block on. timeout_s <= 0: one poll. A failed predicate's
 * status is returned as it is. */
zinc_status zinc_wait_deadline(zinc_wait_pred done, void *ctx, double timeout_s,
                               const char *what, const char *hint);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_DEVICE_WAIT_H */
