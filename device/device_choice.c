/*
 * device_choice.c — the device a rank trains on (rules in
 * device/device_choice.h). No CUDA here: the caller asks CUDA for the GPU
 * count and the stream's device, so the CPU build tests every rule.
 */
#include "device/device_choice.h"

#include <string.h>

#include "base/base.h"

zinc_status zinc_device_choose(const zinc_device_choice_in *in, int *ordinal) {
  *ordinal = ZINC_DEVICE_CPU;
  const int rank = in->world_rank, want = in->requested, ngpu = in->gpu_count;
  const int sdev = in->stream_device;
  if (want == ZINC_DEVICE_CPU)
    return ZINC_OK; /* the stream is ignored on the CPU */
  if (want != ZINC_DEVICE_AUTO && want < 0)
    return zinc_error(ZINC_ERR_DEVICE, "zinc_options.device is %d on rank %d: give a CUDA "
                      "ordinal >= 0, ZINC_DEVICE_AUTO (%d) or ZINC_DEVICE_CPU (%d)", want, rank,
                      ZINC_DEVICE_AUTO, ZINC_DEVICE_CPU);
  if (sdev >= ngpu)
    return zinc_error(ZINC_ERR_DEVICE, "zinc_options.cuda_stream of rank %d belongs to GPU %d "
                      "but the rank sees %d GPU(s): create the stream on a GPU the process sees",
                      rank, sdev, ngpu);
  if (want >= 0) {
    if (want >= ngpu)
      return zinc_error(ZINC_ERR_DEVICE, "zinc_options.device is GPU %d on rank %d but the rank "
                        "sees %d GPU(s) (ordinals 0..%d): give an ordinal it sees, or "
                        "ZINC_DEVICE_AUTO", want, rank, ngpu, ngpu - 1);
    if (sdev >= 0 && sdev != want)
      return zinc_error(ZINC_ERR_DEVICE, "zinc_options.device is GPU %d on rank %d but "
                        "zinc_options.cuda_stream belongs to GPU %d: give the stream's GPU as "
                        "the device, or ZINC_DEVICE_AUTO to take it from the stream", want, rank,
                        sdev);
    *ordinal = want;
    return ZINC_OK;
  }
  /* ZINC_DEVICE_AUTO */
  if (sdev >= 0) {
    *ordinal = sdev;
    return ZINC_OK;
  }
  if (ngpu <= 0)
    return ZINC_OK;
  if (in->local_size > ngpu && ngpu > 1)
    return zinc_error(ZINC_ERR_DEVICE, "%d ranks run on the node of rank %d (local rank %d) "
                      "but it has %d GPUs, so two ranks would share a GPU: start at most %d "
                      "ranks per node, or give each rank its own GPU with CUDA_VISIBLE_DEVICES "
                      "(or zinc_options.device, or a cuda_stream on it)",
                      in->local_size, rank, in->local_rank, ngpu, ngpu);
  *ordinal = ngpu == 1 ? 0 : in->local_rank;
  return ZINC_OK;
}

int zinc_device_choice_clash(const char *ids, int id_len, int n, int *first, int *second) {
  for (int j = 1; j < n; j++)
    for (int i = 0; i < j; i++)
      if (memcmp(ids + (size_t)i * (size_t)id_len, ids + (size_t)j * (size_t)id_len,
                 (size_t)id_len) == 0) {
        *first = i;
        *second = j;
        return 1;
      }
  return 0;
}

void zinc_device_choice_near(const int *numa, int n, int me, int *near_rank, int *near_size) {
  *near_rank = 0;
  *near_size = 1;
  if (me < 0 || me >= n || numa[me] < 0)
    return;
  *near_size = 0;
  for (int i = 0; i < n; i++) {
    if (numa[i] != numa[me])
      continue;
    if (i < me)
      ++*near_rank;
    ++*near_size;
  }
}
