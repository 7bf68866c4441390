/*
 * swap.h — swap areas: where one rank keeps state that lives on NVMe
 * (optimizer state, parameter partitions), and the format of its blocks.
 *
 * An area belongs to (nvme_path list, rank, name). Under each path it owns
 * one directory, <path>/zinc-swap-<key>-<name>-rank<r>/ (mode 0700), holding
 * a lock file and one data file, stripe<i>.swap (mode 0600). The key is the
 * caller's, else $ZINC_SWAP_KEY, else the launcher's job id (SLURM_JOB_ID,
 * PBS_JOBID, LSB_JOBID, PMIX_NAMESPACE), else "local": two jobs on one node
 * never share a directory, and a rerun under the same key finds its own.
 *
 * The area is a list of regions whose sizes are fixed at creation; all the
 * space is reserved then with fallocate, so a full disk is reported
 * (ZINC_ERR_NOMEM, naming the path, the bytes needed and the bytes
 * available) before training starts. On disk a block is exactly
 * aio.block_size bytes, so every request is one device-friendly, aligned
 * block: [header | payload], a header of H bytes (H = max(engine
 * alignment, 4096)) and up to block_size - H payload bytes
 * (zinc_swap_block_bytes). Each region is a run of blocks; only the last
 * block of a region may carry less payload. Block b of the area (counting
 * all regions in order) lives in file b % npaths at offset
 * (b / npaths) * block_size, so one rank's traffic is spread over every
 * drive. Header and payload go in one vectored request, the payload
 * straight to/from the caller's buffer. Header layout (little-endian):
 *     0  u32 magic         0x5057535a ("ZSWP")
 *     4  u16 version       1
 *     6  u16 flags         bit 0: payload_crc is set
 *     8  u32 header_bytes  H
 *    12  u32 payload_len   meaningful payload bytes in this block
 *    16  u64 area_id       random per area: blocks of other areas or runs fail
 *    24  u64 block_index   b, the block's index in the area
 *    32  u32 payload_crc   crc32c of the payload_len bytes (0 if flag unset)
 *    36  24 bytes zero (reserved)
 *    60  u32 header_crc    crc32c of bytes 0..59
 *    64  zero up to H
 * The payload follows at H; the rest of the block after payload_len
 * (rounded up to the alignment) is unspecified.
 * With checksums on (aio.swap_checksums, the default) the payload crc is
 * written and verified on read; with them off the header is still written
 * and checked, the payload is not. Any mismatch is ZINC_ERR_CORRUPT naming
 * the file and offset.
 *
 * Stale areas: the lock file is held with flock() for the area's life, and
 * carries the owner's pid and host. At creation every zinc-swap-* directory
 * under the paths whose lock nobody holds (a crashed run) is removed with a
 * warning; a directory of ours held by a live process is an error naming
 * its pid. zinc_swap_destroy (and any failed creation) removes the files
 * and directories the area created.
 *
 * Thread safety: reads and writes of different blocks may run at once from
 * any threads; create/destroy are not concurrent with anything else.
 */
#ifndef ZINC_OFFLOAD_SWAP_H
#define ZINC_OFFLOAD_SWAP_H

#include <stddef.h>
#include <stdint.h>

#include "offload/aio.h"
#include "zinc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------- block headers */

#define ZINC_SWAP_MAGIC 0x5057535au
#define ZINC_SWAP_VERSION 1
#define ZINC_SWAP_HEADER_USED 64   /* bytes of the header that carry fields */
#define ZINC_SWAP_FLAG_CRC 1u

typedef struct {
  uint16_t version;
  uint16_t flags;
  uint32_t header_bytes;
  uint32_t payload_len;
  uint64_t area_id;
  uint64_t block_index;
  uint32_t payload_crc;
} zinc_swap_header;

/* Write h into buf (len >= ZINC_SWAP_HEADER_USED; bytes past 64 up to len
 * are zeroed), computing the header crc. */
void zinc_swap_header_encode(const zinc_swap_header *h, void *buf, size_t len);
/* Parse and validate a header from untrusted bytes: magic, version, known
 * flags, zero reserved bytes, header crc, a power-of-two header_bytes of at
 * least 512, and zero bytes from 64 up to min(len, header_bytes). Pure: no
 * I/O, no allocation. ZINC_ERR_CORRUPT with a message saying what is wrong
 * (an all-zero header says the block was never written). */
zinc_status zinc_swap_header_parse(const void *buf, size_t len, zinc_swap_header *out);

/* ----------------------------------------------------------------- areas */

typedef struct zinc_swap zinc_swap;

typedef struct {
  const char *const *paths;   /* (path_count) nvme_path directories       */
  int path_count;             /* 1..ZINC_MAX_NVME_PATHS                    */
  int rank;                   /* >= 0                                      */
  const char *name;           /* [A-Za-z0-9_]{1,32}: "optimizer", "param"  */
  const char *key;            /* NULL: see above                           */
  int checksums;              /* aio.swap_checksums                        */
  const uint64_t *region_bytes; /* (region_count) payload bytes, each > 0  */
  int region_count;
} zinc_swap_params;

zinc_status zinc_swap_create(zinc_aio *aio, const zinc_swap_params *params,
                             zinc_swap **out);
/* Close and remove the area's files and directories. NULL is fine. No I/O
 * of the area may be in flight. */
void zinc_swap_destroy(zinc_swap *sw);

int zinc_swap_region_count(const zinc_swap *sw);
uint64_t zinc_swap_region_bytes(const zinc_swap *sw, int region);
uint64_t zinc_swap_block_bytes(const zinc_swap *sw);  /* payload per block:
                                                         block_size - header */
uint64_t zinc_swap_disk_bytes(const zinc_swap *sw);   /* reserved, all paths */
const char *zinc_swap_dir(const zinc_swap *sw, int path);
/* Capacity a buffer needs for a read or write of `bytes` (the last block's
 * payload travels rounded up to the alignment). Buffers are aligned to
 * zinc_aio_alignment(); zinc_aio_buffer_alloc gives such buffers. */
uint64_t zinc_swap_buffer_bytes(const zinc_swap *sw, uint64_t bytes);

/* Write or read `bytes` of region `region` starting at `offset`. offset is
 * a multiple of the block size; the range ends at a block boundary or at
 * the region's end (so every block is transferred whole); buf is aligned
 * and has zinc_swap_buffer_bytes(bytes) of room. With out != NULL the
 * call returns at once with a handle for zinc_aio_wait; with out == NULL it
 * waits. Reading a block never written is ZINC_ERR_CORRUPT. */
zinc_status zinc_swap_write(zinc_swap *sw, int region, uint64_t offset, const void *buf,
                            uint64_t bytes, zinc_aio_handle **out);
zinc_status zinc_swap_read(zinc_swap *sw, int region, uint64_t offset, void *buf,
                           uint64_t bytes, zinc_aio_handle **out);

#ifdef __cplusplus
}
#endif
#endif /* ZINC_OFFLOAD_SWAP_H */
