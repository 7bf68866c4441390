/*
 * placements.h — the placements' own state and calls, shared by the files
 * of engine/place/ (and tests); the rest of the engine reaches them
 * through place.h's table. One banner per file: the staged CPU optimizer
 * (cpu.c), partial offload (partial.c), the host cache in front of the
 * NVMe parameter partition (pcache.c), the NVMe swap areas (nvme.c,
 * nvme_step.c, nvme_param.c) and the device row every other row falls
 * back to (device.c). The state of all of them is one struct behind
 * e->pl (struct zinc_place below): the rows share pieces of it (the NVMe
 * rows and partial offload stage through cpu.c's slots).
 */
#ifndef ZINC_ENGINE_PLACE_PLACEMENTS_H
#define ZINC_ENGINE_PLACE_PLACEMENTS_H

#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "engine/engine.h"
#include "engine/place/place.h"
#include "optim/optimizer.h"
#include "zinc.h"

typedef struct zinc_nvme zinc_nvme; /* nvme.h */

/* The offloaded optimizer's copy pipeline (cpu.c), when gradients or
 * parameters live where the CPU cannot compute on them. */
typedef struct {
  int ready;
  zinc_device *host;      /* runs the CPU Adam: the engine's device on the
                             cpu build, a cpu device of its own on cuda */
  int host_owned;
  zinc_stream *copy[2];   /* 0: gradients in, 1: parameters out */
  zinc_event *in_done[2], *out_done[2]; /* per staging slot */
  zinc_event *grads_done;
  void *grad[2], *param[2]; /* pinned staging slots (NULL: not needed) */
  size_t grad_bytes, param_bytes;
} zinc_offload;

/* Partial optimizer offload (partial.c): optimizer elements
 * [0, device_numel) keep master/m/v on the device, the rest in host
 * memory; e->master, exp_avg, exp_avg_sq are then NULL. */
typedef struct {
  int64_t device_numel;   /* D: a whole number of sub-groups */
  void *dev[3];           /* (D) on the device: master, exp_avg, exp_avg_sq
                             in their dtypes (place.h's zinc_array_dtype;
                             NULL: a slot not kept) */
  void *host[3];          /* (opt_numel - D) in host memory: the same */
} zinc_partial;

/* bf16 optimizer array elements at `at` (wherever the device's copy op
 * reaches) to/from count f32 host values: widened exactly on read,
 * rounded to nearest even on write (device.c). */
zinc_status zinc_place_bf16_io(zinc_engine *e, void *at, int64_t count, float *host, int write);

/* The host cache in front of the NVMe parameter partition
 * (offload_param.max_in_cpu, pcache.c): partition bytes
 * [0, bytes) live here, the rest in the swap area. */
typedef struct {
  size_t bytes;           /* a prefix of whole modules' units; 0: none */
  int64_t elems;          /* its elements (this rank's chunks) */
  void *host;             /* (bytes) host memory, the partition's dtype */
} zinc_pcache;

/* The placement's state (e->pl): the row init chose and every piece a row
 * may hold (zeros where unused). */
struct zinc_place {
  const zinc_placement *ops; /* the row (place.c's table) */
  zinc_offload off;          /* cpu.c's staging pipeline */
  zinc_partial partial;      /* partial.c */
  zinc_pcache pcache;        /* pcache.c */
  zinc_nvme *nvme;           /* nvme.c, or NULL */
};

/* The rows (place.c's table). */
extern const zinc_placement zinc_place_nvme_row, zinc_place_partial_row,
    zinc_place_nvme_param_row, zinc_place_cpu_row, zinc_place_device_row;

/* place.c: the raw hooks behind access.c's checks. */
zinc_status zinc_place_opt_io(zinc_engine *e, int array, int64_t off, int64_t count, float *data,
                              int write);
zinc_status zinc_place_pshard_io(zinc_engine *e, size_t off, size_t bytes, void *data,
                                 int write);

/* ------------------------------------------------------------- device.c */
/* The device row's hooks, and the pieces the other rows build theirs
 * from: the gradient partition in memory at stages 2-3 (unless the row's
 * grad_location is NVMe), the optimizer state as three arrays at
 * opt_location. */
void zinc_place_grads_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
void zinc_place_state_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
zinc_status zinc_place_grads_alloc(zinc_engine *e);
zinc_status zinc_place_state_alloc(zinc_engine *e);
void zinc_place_memory_free(zinc_engine *e); /* both, whatever was allocated */
int zinc_place_memory_grad_location(const zinc_engine *e);
zinc_status zinc_place_device_optim(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                                    const zinc_opt_seg *segs, int nseg, int pass,
                                    double *norms);
zinc_status zinc_place_memory_pshard_io(zinc_engine *e, size_t off, size_t bytes, void *data,
                                        int write);

/* ---------------------------------------------------------------- cpu.c */
/* 1 when the offloaded optimizer goes through staging copies: offload cpu
 * or nvme on the cuda device (or on the cpu device with
 * ZINC_OFFLOAD_STAGING=1). */
int zinc_offload_staged(const zinc_engine *e);
/* For the NVMe sub-group pipeline (nvme_step.c), which stages its
 * gradients and parameters through the same slots: elements per slot, and
 * whether gradients come from / parameters go to device memory. */
int64_t zinc_offload_staging_group(const zinc_engine *e);
int zinc_offload_grads_on_device(const zinc_engine *e);
int zinc_offload_params_on_device(const zinc_engine *e);
/* Elements per sub-group of the offloaded step (cpu and NVMe):
 * zero_optimization.sub_group_size, at most the optimizer partition, at
 * least 1. DeepSpeed's 0 makes every parameter its own sub-group; zinc's
 * sub-groups are element ranges of the partition, and 0 takes
 * ZINC_SUB_GROUP_FOR_ZERO elements (the staging slot's size) instead of
 * ranges of one element. */
#define ZINC_SUB_GROUP_FOR_ZERO ((int64_t)16 << 20)
int64_t zinc_offload_sub_group(const zinc_engine *e);
/* Pinned staging the build allocates for it (0 when not staged). */
size_t zinc_offload_staging_bytes(const zinc_engine *e);
zinc_status zinc_offload_init(zinc_engine *e);
void zinc_offload_free(zinc_engine *e);
/* One pass of the CPU optimizer in sub-groups with gradient copies in and
 * parameter copies out overlapping it (segs: one per run, as step.c builds
 * them). Lamb's UPDATE pass (segs without param_out) copies gradients in,
 * writes no parameter and fills norms[2 j], norms[2 j + 1] for run j; its
 * APPLY pass copies no gradient. norms is NULL otherwise. */
zinc_status zinc_offload_step(zinc_engine *e, const zinc_opt_coef *c, int ncoef, const zinc_opt_seg *segs,
                              int nseg, int pass, double *norms);
/* The CPU optimizer over state in host memory: zinc_offload_step when
 * staged, else the device's op (the cpu device computes on host memory). */
zinc_status zinc_offload_optim(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                               const zinc_opt_seg *segs, int nseg, int pass, double *norms);

/* ------------------------------------------------------------ partial.c */
/* offload_optimizer.ratio < 1 applies: device cpu, stages 1-3. */
int zinc_partial_enabled(const zinc_engine *e);
/* D: the optimizer elements that stay on the device (0 when off). */
int64_t zinc_partial_device_numel(const zinc_engine *e);
/* Move D elements' master and state from host to device in bytes (the
 * build's sizes; a no-op when off). */
void zinc_partial_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
/* Allocate both sides (instead of e->master/exp_avg/exp_avg_sq); free. */
zinc_status zinc_partial_alloc(zinc_engine *e);
void zinc_partial_free(zinc_engine *e);
/* zinc_opt_read/zinc_opt_write's copy (the partial row's opt_io). */
zinc_status zinc_partial_opt_io(zinc_engine *e, int array, int64_t off, int64_t count,
                                float *host, int write);
/* One optimizer pass (segs: one per run, as step.c builds them): the
 * device's op over [0, D), the CPU optimizer over the rest (through the
 * staged pipeline when e->off.ready). norms as zinc_offload_step's. */
zinc_status zinc_partial_step(zinc_engine *e, const zinc_opt_coef *c, int ncoef,
                              const zinc_opt_seg *segs, int nseg, int pass, double *norms);

/* ------------------------------------------------------------- pcache.c */
/* Bytes of the partition max_in_cpu keeps in host memory (0 when off):
 * the longest prefix of whole modules' units within max_in_cpu elements;
 * *elems (may be NULL) its elements, *units (may be NULL) its units. Needs
 * the layout only (the estimator calls it). */
size_t zinc_pcache_plan(const zinc_engine *e, int64_t *elems, int *units);
/* Bytes of the partition's swap region: the rest (at least 1). */
uint64_t zinc_pcache_disk_bytes(const zinc_engine *e);
zinc_status zinc_pcache_init(zinc_engine *e);
void zinc_pcache_free(zinc_engine *e);
/* The head of partition range [*off, *off + *bytes) the cache holds is
 * copied to (write: from) *data; off, bytes and data advance past it. */
void zinc_pcache_io(zinc_engine *e, size_t *off, size_t *bytes, char **data, int write);

/* --------------------------------------------------------------- nvme.c */
zinc_status zinc_nvme_init(zinc_engine *e);
void zinc_nvme_free(zinc_engine *e);
/* Add what NVMe offload holds (swap area on disk, host buffers) to bytes:
 * exactly what zinc_nvme_init accounts. */
void zinc_nvme_sizes(const zinc_engine *e, uint64_t bytes[ZINC_LOC_N][ZINC_MEM_NCAT]);
/* ZINC_ERR_CONFIG when offload_param.buffer_size cannot hold a fetch. */
zinc_status zinc_nvme_check_config(const zinc_engine *e);
/* A free parameter read buffer of at least `bytes`, or NULL (all busy). */
void *zinc_nvme_param_buffer_take(zinc_engine *e, size_t bytes);
void zinc_nvme_param_buffer_give(zinc_engine *e, void *buf);
int zinc_nvme_opt_on_disk(const zinc_engine *e);
int zinc_nvme_param_on_disk(const zinc_engine *e);
/* The reduced gradient partition lives in the NVMe swap area instead of
 * host memory (grad_part NULL): offload_optimizer nvme at stages 2-3 on a
 * host device when the gradients travel plainly (zinc_grads_plain: no
 * gradient compression, communication_data_type, PowerSGD or DGC
 * momentum) without the 1-bit/0-1 optimizers (zinc_nvme_grads_swapped:
 * from the settings, for the build and the estimator;
 * zinc_nvme_grads_on_disk: this engine's). */
int zinc_nvme_grads_swapped(const zinc_engine *e);
int zinc_nvme_grads_on_disk(const zinc_engine *e);
/* Elements [off, off + count) of the partition on disk into dst (f32). */
zinc_status zinc_nvme_grad_read(zinc_engine *e, int64_t off, int64_t count, float *dst);
/* Partition elements [off, off + count) = (overwrite ? 0 : themselves) +
 * src (count elements of dtype, host-readable), with the device's
 * accumulate_f32; src NULL writes zeros. Synchronous. */
zinc_status zinc_nvme_grad_accumulate(zinc_engine *e, int64_t off, const void *src, int dtype,
                                      int64_t count, int overwrite);
/* Tests: inject I/O faults (ZINC_AIO_FAULT syntax) from now on. */
zinc_status zinc_nvme_inject(zinc_engine *e, const char *spec);
/* Tests: payload bytes the NVMe swap areas have read and written so far
 * (0 without NVMe offload). */
void zinc_nvme_io_bytes(const zinc_engine *e, uint64_t *read, uint64_t *written);
/* The accessors' NVMe side (access.c): optimizer elements [off, off +
 * count) of array 0-2 (kept: the caller checked), and bytes [off, off +
 * len) of the parameter swap region, to (write: from) host memory through
 * the bounce buffer. */
zinc_status zinc_nvme_opt_io(zinc_engine *e, int array, int64_t off, int64_t count, float *data,
                             int write);
zinc_status zinc_nvme_param_io(zinc_engine *e, uint64_t off, void *data, uint64_t len,
                               int write);

/* The NVMe rows' stage-3 partition I/O (pcache, then the swap area; memory
 * without a parameter swap area) and their free. */
zinc_status zinc_nvme_pshard_io(zinc_engine *e, size_t off, size_t bytes, void *data, int write);
void zinc_nvme_row_free(zinc_engine *e);

/* ---------------------------------------------------------- nvme_step.c */
/* One optimizer pass over NVMe-resident state in sub-groups (segs: one per
 * run, with gradient and in-memory parameter pointers). Lamb's UPDATE pass
 * writes no parameters and fills norms[2 j], norms[2 j + 1] for run j (its
 * runs never cross a sub-group: zinc_lamb_grid); norms is NULL otherwise. */
zinc_status zinc_nvme_step(zinc_engine *e, const zinc_opt_coef *c, int ncoef, const zinc_opt_seg *segs,
                           int nseg, int pass, double *norms);

#endif /* ZINC_ENGINE_PLACE_PLACEMENTS_H */
