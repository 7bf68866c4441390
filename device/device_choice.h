/*
 * device_choice.h — which device a rank trains on, as pure functions of
 * what the rank knows (its place on the node, the GPUs it sees, the
 * ordinal it asked for, the device of the trainer's stream), so that every
 * case is tested in the CPU build; the engine (engine/engine.c) gathers the
 * inputs from CUDA and MPI and calls these.
 *
 * The rules (zinc_options.device and .cuda_stream in include/zinc.h):
 *   - ZINC_DEVICE_CPU: the CPU, whatever the stream;
 *   - an ordinal >= 0: that GPU; it must exist, and when the trainer gave
 *     a stream it must be the stream's device;
 *   - ZINC_DEVICE_AUTO with a stream: the stream's device;
 *   - ZINC_DEVICE_AUTO without one: the GPU of index local_rank; more
 *     ranks on the node than GPUs it sees is refused (the index would wrap
 *     and two ranks would share a GPU, which NCCL refuses late), except
 *     where each rank sees one GPU (CUDA_VISIBLE_DEVICES set per rank):
 *     then ordinal 0, and zinc_device_choice_clash tells whether two ranks
 *     of the node still landed on the same GPU;
 *   - ZINC_DEVICE_AUTO with no GPU: the CPU.
 */
#ifndef ZINC_DEVICE_CHOICE_H
#define ZINC_DEVICE_CHOICE_H

#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int world_rank;     /* for the messages                                   */
  int local_rank;     /* this rank's index among the ranks of its node      */
  int local_size;     /* ranks on this node                                 */
  int gpu_count;      /* GPUs this rank sees (0: none, or built without CUDA) */
  int requested;      /* zinc_options.device: ZINC_DEVICE_AUTO, _CPU or an ordinal */
  int stream_device;  /* the ordinal of the trainer's cuda_stream; -1: no stream
                         given (NULL, the legacy default stream)            */
} zinc_device_choice_in;

/* *ordinal = the CUDA ordinal to create, or ZINC_DEVICE_CPU. On a refusal
 * ZINC_ERR_DEVICE (*ordinal = ZINC_DEVICE_CPU) with a message naming the
 * rank, the figures that clash and what to change. */
zinc_status zinc_device_choose(const zinc_device_choice_in *in, int *ordinal);

/* Two ranks of one node on one GPU: ids[i] (id_len bytes, NUL-padded; the
 * GPU's PCI bus id) is the GPU of the node's local rank i, n ranks. Returns
 * 0 when all differ; else 1 with *second the lowest local rank whose GPU an
 * earlier rank has, *first the lowest such earlier rank. */
int zinc_device_choice_clash(const char *ids, int id_len, int n, int *first, int *second);

/* The local ranks that share a NUMA node near their GPUs, among whom the
 * node's cores are cut for their CPU work (device/topology.h): numa[i] is
 * the NUMA node of local rank i's GPU (-1: unknown, or on the CPU), n
 * ranks. *near_rank = rank me's index among the ranks with its node,
 * *near_size = their number; 0 and 1 when numa[me] < 0. */
void zinc_device_choice_near(const int *numa, int n, int me, int *near_rank, int *near_size);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_DEVICE_CHOICE_H */
