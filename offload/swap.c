/*
 * swap.c — swap areas (contract and on-disk format in swap.h): the per-rank
 * directories and their locks, clearing stale areas of crashed runs, space
 * reservation, the block layout striped over the paths, and reads and
 * writes of regions as framed I/O batches whose headers carry checksums.
 *
 * Invariants: every file or directory this area created is listed in its
 * stripes and removed by zinc_swap_destroy, which a failed creation calls
 * too; the lock of a directory is held from before anything is written in
 * it until after everything in it is removed.
 */
#define _GNU_SOURCE
#include "offload/swap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/env.h"
#include "base/fs.h"

#define SWAP_PREFIX "zinc-swap-"
#define SWAP_LOCK "lock"
#define SWAP_YOUNG_S 60 /* a lock-less or owner-less directory younger than
                           this may be one being created right now */

typedef struct {
  char *dir;         /* <path>/zinc-swap-<key>-<name>-rank<r>            */
  char *data_path;   /* <dir>/stripe<i>.swap                             */
  int lock_fd;       /* flock held for the area's life; -1 if none       */
  int made_dir;      /* the directory is ours to remove                  */
  int made_data;     /* the data file is ours to remove                  */
  int file;          /* engine file id, -1 if not open                   */
  uint64_t slots;    /* block slots in the data file                     */
} swap_stripe;

struct zinc_swap {
  zinc_aio *aio;
  char name[33];
  int rank;
  int checksums;
  uint64_t area_id;          /* random, in every block header              */
  uint64_t slot_bytes;       /* one block on disk: aio.block_size          */
  uint32_t header_bytes;     /* header in front of each payload            */
  uint64_t block_bytes;      /* payload bytes per block: slot - header     */
  int nregions;
  uint64_t *region_bytes;    /* (nregions) payload bytes                   */
  uint64_t *region_first;    /* (nregions + 1) first block; last = total   */
  int npaths;
  swap_stripe stripes[ZINC_MAX_NVME_PATHS];
};

/* ------------------------------------------------------------- helpers */

static void owner_of(int lock_fd, char *owner, size_t len) {
  ssize_t n = pread(lock_fd, owner, len - 1, 0);
  owner[n > 0 ? n : 0] = '\0';
  owner[strcspn(owner, "\n")] = '\0';
  if (!owner[0])
    snprintf(owner, len, "an unknown process");
}

static int is_young(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0)
    return 0;
  return time(NULL) - st.st_mtime < SWAP_YOUNG_S;
}

/* Unlink every entry of dir except `keep` (NULL: none); returns how many
 * were removed. Swap directories hold only plain files. */
static int empty_dir(const char *dir, const char *keep) {
  DIR *d = opendir(dir);
  if (!d)
    return 0;
  int removed = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
        (keep && !strcmp(e->d_name, keep)))
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0)
      removed++;
    else
      zinc_log(ZINC_LOG_WARN, "could not remove %s/%s: %s", dir, e->d_name, strerror(errno));
  }
  closedir(d);
  return removed;
}

/* Remove zinc-swap-* directories under `path` that nobody holds (left by
 * a crashed run), other than `own`. */
static void clear_stale(const char *path, const char *own) {
  DIR *d = opendir(path);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strncmp(e->d_name, SWAP_PREFIX, strlen(SWAP_PREFIX)) || !strcmp(e->d_name, own))
      continue;
    char *dir = zinc_path_join(path, e->d_name), *lock = dir ? zinc_path_join(dir, SWAP_LOCK) : NULL;
    struct stat st;
    if (!lock || lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
      free(dir);
      free(lock);
      continue;
    }
    int fd = open(lock, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    char owner[256], why[320] = "";
    if (fd < 0) {
      if (errno == ENOENT && !is_young(dir))
        snprintf(why, sizeof why, "it has no lock file and has not changed for %d s",
                 SWAP_YOUNG_S);
    } else if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      owner_of(fd, owner, sizeof owner);
      struct stat ls;
      if (!(fstat(fd, &ls) == 0 && ls.st_size == 0 && is_young(lock)))
        snprintf(why, sizeof why, "left by %s, which no longer holds its lock", owner);
    }
    if (why[0]) {
      zinc_log(ZINC_LOG_WARN, "removing stale swap directory %s (%s: a crashed run)", dir,
               why);
      if (zinc_fs_remove_tree(dir) != ZINC_OK)
        zinc_log(ZINC_LOG_WARN, "could not remove %s: %s", dir, zinc_last_error());
    }
    if (fd >= 0)
      close(fd);
    free(dir);
    free(lock);
  }
  closedir(d);
}

/* The key that names this job's directories. */
static void job_key(const char *given, char *key, size_t len) {
  static const char *vars[] = {"ZINC_SWAP_KEY", "SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID",
                               "PMIX_NAMESPACE"};
  const char *k = given;
  for (size_t i = 0; (!k || !*k) && i < sizeof vars / sizeof vars[0]; i++)
    k = zinc_env_str(vars[i]);
  if (!k || !*k)
    k = "local";
  size_t n = 0;
  for (; k[n] && n + 1 < len && n < 64; n++) {
    char c = k[n];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    key[n] = ok ? c : '_';
  }
  key[n] = '\0';
}

/* ------------------------------------------------------------- creation */

/* Make (or take over) this rank's directory under path i and lock it. */
static zinc_status open_stripe_dir(zinc_swap *sw, int i, const char *path,
                                   const char *dirname) {
  swap_stripe *s = &sw->stripes[i];
  s->dir = zinc_path_join(path, dirname);
  char *lock = s->dir ? zinc_path_join(s->dir, SWAP_LOCK) : NULL;
  zinc_status st = ZINC_OK;
  if (!lock) {
    st = zinc_error(ZINC_ERR_NOMEM, "out of host memory naming swap directories");
    goto out;
  }
  for (int attempt = 0; attempt < 3 && s->lock_fd < 0; attempt++) {
    int created = mkdir(s->dir, 0700) == 0;
    if (!created && errno != EEXIST) {
      st = zinc_error(ZINC_ERR_IO, "creating swap directory %s: %s", s->dir, strerror(errno));
      goto out;
    }
    struct stat ds;
    if (lstat(s->dir, &ds) != 0)
      continue; /* removed under us by another run's cleanup: again */
    if (!S_ISDIR(ds.st_mode) || ds.st_uid != geteuid()) {
      st = zinc_error(ZINC_ERR_IO, "swap directory %s exists but is not a directory owned "
                      "by this user; remove it or choose another nvme_path", s->dir);
      goto out;
    }
    s->made_dir = 1;
    if (chmod(s->dir, 0700) != 0) {
      st = zinc_error(ZINC_ERR_IO, "chmod 0700 %s: %s", s->dir, strerror(errno));
      goto out;
    }
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == ENOENT)
      continue;
    if (fd < 0) {
      st = zinc_error(ZINC_ERR_IO, "creating swap lock %s: %s", lock, strerror(errno));
      goto out;
    }
    /* Another process's stale-directory check (clear_stale) holds a lock for
     * a moment while it looks: only a lock held for long is a live owner. */
    int locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
    for (int wait = 0; !locked && wait < 50; wait++) {
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
      locked = flock(fd, LOCK_EX | LOCK_NB) == 0;
    }
    if (!locked) {
      char owner[256];
      owner_of(fd, owner, sizeof owner);
      close(fd);
      s->made_dir = 0; /* someone else's */
      st = zinc_error(ZINC_ERR_IO,
                      "swap directory %s is in use by %s: another run with the same key "
                      "and rank is alive; set ZINC_SWAP_KEY to tell the runs apart",
                      s->dir, owner);
      goto out;
    }
    s->lock_fd = fd;
    if (!created) {
      char owner[256];
      owner_of(fd, owner, sizeof owner);
      if (empty_dir(s->dir, SWAP_LOCK) > 0)
        zinc_log(ZINC_LOG_WARN, "replaced stale swap directory %s (left by %s, which no "
                 "longer holds its lock: a crashed run)", s->dir, owner);
    }
    char host[128] = "?", text[256];
    gethostname(host, sizeof host - 1);
    int n = snprintf(text, sizeof text, "pid %ld on %s\n", (long)getpid(), host);
    if (fchmod(fd, 0600) != 0 || ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) {
      st = zinc_error(ZINC_ERR_IO, "writing swap lock %s: %s", lock, strerror(errno));
      goto out;
    }
  }
  if (s->lock_fd < 0)
    st = zinc_error(ZINC_ERR_IO, "swap directory %s keeps disappearing while it is created",
                    s->dir);
out:
  free(lock);
  return st;
}

/* Space needed vs available, summed per filesystem, before reserving. */
static zinc_status check_space(zinc_swap *sw) {
  for (int i = 0; i < sw->npaths; i++) {
    struct stat si;
    struct statvfs vs;
    if (stat(sw->stripes[i].dir, &si) != 0 || statvfs(sw->stripes[i].dir, &vs) != 0)
      return zinc_error(ZINC_ERR_IO, "statvfs %s: %s", sw->stripes[i].dir, strerror(errno));
    uint64_t need = 0;
    for (int j = 0; j < sw->npaths; j++) {
      struct stat sj;
      if (stat(sw->stripes[j].dir, &sj) == 0 && sj.st_dev == si.st_dev)
        need += sw->stripes[j].slots * sw->slot_bytes;
    }
    if (vs.f_blocks == 0) { /* ramfs and some FUSE filesystems report no size */
      zinc_log0(ZINC_LOG_WARN, "swap area on %s: its filesystem reports no size (ramfs?), "
                "so the %s swap area's %llu bytes cannot be checked against free space",
                sw->stripes[i].dir, sw->name, (unsigned long long)need);
      continue;
    }
    uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
    if (need > avail)
      return zinc_error(ZINC_ERR_NOMEM,
                        "not enough space for the %s swap area of rank %d on %s: need %llu "
                        "bytes (%.2f GiB), %llu available (%.2f GiB); free space, add drives "
                        "to nvme_path, or offload less",
                        sw->name, sw->rank, sw->stripes[i].dir, (unsigned long long)need,
                        need / 1073741824.0, (unsigned long long)avail, avail / 1073741824.0);
  }
  return ZINC_OK;
}

static zinc_status reserve(zinc_swap *sw, int i) {
  swap_stripe *s = &sw->stripes[i];
  char name[32];
  snprintf(name, sizeof name, "stripe%d.swap", i);
  s->data_path = zinc_path_join(s->dir, name);
  if (!s->data_path)
    return zinc_error(ZINC_ERR_NOMEM, "out of host memory naming swap files");
  ZINC_CHECK(zinc_aio_file_open(sw->aio, s->data_path, O_CREAT | O_EXCL, 0600, &s->file));
  s->made_data = 1;
  int fd = zinc_aio_file_fd(sw->aio, s->file);
  uint64_t bytes = s->slots * sw->slot_bytes;
  if (fchmod(fd, 0600) != 0)
    return zinc_error(ZINC_ERR_IO, "chmod 0600 %s: %s", s->data_path, strerror(errno));
  if (bytes == 0)
    return ZINC_OK;
  zinc_aio_fault f;
  zinc_aio_fault_get(sw->aio, &f);
  int rc = f.fallocate_errno ? -1 : fallocate(fd, 0, 0, (off_t)bytes);
  int err = f.fallocate_errno ? f.fallocate_errno : errno;
  if (rc == 0)
    return ZINC_OK;
  if (err == ENOSPC || err == EDQUOT) {
    struct statvfs vs;
    uint64_t avail = statvfs(s->dir, &vs) == 0 ? (uint64_t)vs.f_bavail * vs.f_frsize : 0;
    return zinc_error(ZINC_ERR_NOMEM,
                      "not enough space for the %s swap area of rank %d: reserving %llu bytes "
                      "(%.2f GiB) for %s failed (%s), %llu bytes available; free space, add "
                      "drives to nvme_path, or offload less",
                      sw->name, sw->rank, (unsigned long long)bytes, bytes / 1073741824.0,
                      s->data_path, strerror(err), (unsigned long long)avail);
  }
  if (err == EOPNOTSUPP) {
    zinc_log(ZINC_LOG_WARN, "the filesystem of %s cannot reserve space (fallocate): a full "
             "disk will only show up when a swap write fails", s->data_path);
    if (ftruncate(fd, (off_t)bytes) == 0)
      return ZINC_OK;
    err = errno;
  }
  return zinc_error(ZINC_ERR_IO, "reserving %llu bytes for %s: %s", (unsigned long long)bytes,
                    s->data_path, strerror(err));
}

static zinc_status check_params(const zinc_aio *aio, const zinc_swap_params *p) {
  if (p->path_count < 1 || p->path_count > ZINC_MAX_NVME_PATHS || !p->paths)
    return zinc_error(ZINC_ERR_INVALID, "swap area: %d nvme paths; give 1 to %d",
                      p->path_count, ZINC_MAX_NVME_PATHS);
  size_t n = p->name ? strlen(p->name) : 0;
  int ok = n >= 1 && n <= 32;
  for (size_t i = 0; ok && i < n; i++) {
    char c = p->name[i];
    ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  if (!ok || p->rank < 0)
    return zinc_error(ZINC_ERR_INVALID, "swap area name \"%s\" / rank %d: the name must be "
                      "1-32 of [A-Za-z0-9_] and the rank >= 0", p->name ? p->name : "(null)",
                      p->rank);
  if (p->region_count < 0 || (p->region_count > 0 && !p->region_bytes))
    return zinc_error(ZINC_ERR_INVALID, "swap area %s: %d regions", p->name, p->region_count);
  for (int i = 0; i < p->region_count; i++)
    if (p->region_bytes[i] == 0)
      return zinc_error(ZINC_ERR_INVALID, "swap area %s: region %d is empty", p->name, i);
  size_t header = zinc_aio_alignment(aio) > 4096 ? zinc_aio_alignment(aio) : 4096;
  if ((uint64_t)zinc_aio_block_size(aio) < 2 * header)
    return zinc_error(ZINC_ERR_INVALID,
                      "swap area %s: aio.block_size %lld is too small; each block carries a "
                      "%zu-byte header, so use at least %zu (1 MiB, the default, is better)",
                      p->name, (long long)zinc_aio_block_size(aio), header, 2 * header);
  return ZINC_OK;
}

/* Lay the regions out as consecutive blocks; stripe slots per path. */
static zinc_status layout(zinc_swap *sw, const zinc_swap_params *p) {
  sw->nregions = p->region_count;
  ZINC_CHECK(zinc_calloc((void **)&sw->region_bytes, (size_t)p->region_count + 1,
                         sizeof *sw->region_bytes, "swap regions"));
  ZINC_CHECK(zinc_calloc((void **)&sw->region_first, (size_t)p->region_count + 1,
                         sizeof *sw->region_first, "swap regions"));
  uint64_t blocks = 0;
  for (int i = 0; i < p->region_count; i++) {
    sw->region_bytes[i] = p->region_bytes[i];
    sw->region_first[i] = blocks;
    blocks += zinc_div_up(p->region_bytes[i], sw->block_bytes);
  }
  sw->region_first[p->region_count] = blocks;
  for (int i = 0; i < sw->npaths; i++)
    sw->stripes[i].slots = blocks / (uint64_t)sw->npaths + ((uint64_t)i < blocks % sw->npaths);
  uint64_t disk;
  if (!zinc_mul_ok(blocks, sw->slot_bytes, &disk) || disk > (uint64_t)INT64_MAX)
    return zinc_error(ZINC_ERR_INVALID, "swap area %s: %llu blocks is too large", sw->name,
                      (unsigned long long)blocks);
  return ZINC_OK;
}

zinc_status zinc_swap_create(zinc_aio *aio, const zinc_swap_params *p, zinc_swap **out) {
  *out = NULL;
  ZINC_CHECK(check_params(aio, p));
  zinc_swap *sw;
  ZINC_CHECK(zinc_calloc((void **)&sw, 1, sizeof *sw, "a swap area"));
  sw->aio = aio;
  snprintf(sw->name, sizeof sw->name, "%s", p->name);
  sw->rank = p->rank;
  sw->checksums = p->checksums;
  sw->npaths = p->path_count;
  sw->slot_bytes = (uint64_t)zinc_aio_block_size(aio);
  sw->header_bytes = (uint32_t)(zinc_aio_alignment(aio) > 4096 ? zinc_aio_alignment(aio) : 4096);
  sw->block_bytes = sw->slot_bytes - sw->header_bytes;
  for (int i = 0; i < ZINC_MAX_NVME_PATHS; i++) {
    sw->stripes[i].lock_fd = -1;
    sw->stripes[i].file = -1;
  }
  if (getrandom(&sw->area_id, sizeof sw->area_id, 0) != sizeof sw->area_id)
    sw->area_id = (uint64_t)getpid() << 32 ^ (uint64_t)(zinc_now() * 1e9);
  zinc_status st;
  ZINC_CHECK_GOTO(layout(sw, p), st, fail);
  char key[72], dirname[160];
  job_key(p->key, key, sizeof key);
  snprintf(dirname, sizeof dirname, SWAP_PREFIX "%s-%s-rank%d", key, sw->name, sw->rank);
  for (int i = 0; i < sw->npaths; i++) {
    for (int j = 0; j < i; j++)
      if (!strcmp(p->paths[i], p->paths[j])) {
        st = zinc_error(ZINC_ERR_INVALID, "nvme_path lists %s twice", p->paths[i]);
        goto fail;
      }
    clear_stale(p->paths[i], dirname);
    ZINC_CHECK_GOTO(open_stripe_dir(sw, i, p->paths[i], dirname), st, fail);
  }
  ZINC_CHECK_GOTO(check_space(sw), st, fail);
  for (int i = 0; i < sw->npaths; i++)
    ZINC_CHECK_GOTO(reserve(sw, i), st, fail);
  *out = sw;
  return ZINC_OK;
fail:
  zinc_swap_destroy(sw);
  return st;
}

void zinc_swap_destroy(zinc_swap *sw) {
  if (!sw)
    return;
  for (int i = 0; i < sw->npaths; i++) {
    swap_stripe *s = &sw->stripes[i];
    if (s->file >= 0 && zinc_aio_file_close(sw->aio, s->file) != ZINC_OK)
      zinc_log(ZINC_LOG_WARN, "%s", zinc_last_error());
    if (s->made_data && unlink(s->data_path) != 0)
      zinc_log(ZINC_LOG_WARN, "could not remove swap file %s: %s", s->data_path,
               strerror(errno));
    if (s->made_dir && s->lock_fd >= 0) {
      char *lock = zinc_path_join(s->dir, SWAP_LOCK);
      if (lock)
        unlink(lock);
      free(lock);
    }
    if (s->made_dir && rmdir(s->dir) != 0)
      zinc_log(ZINC_LOG_WARN, "could not remove swap directory %s: %s", s->dir,
               strerror(errno));
    if (s->lock_fd >= 0)
      close(s->lock_fd);
    free(s->dir);
    free(s->data_path);
  }
  free(sw->region_bytes);
  free(sw->region_first);
  free(sw);
}

/* ------------------------------------------------------------- accessors */

int zinc_swap_region_count(const zinc_swap *sw) { return sw->nregions; }
uint64_t zinc_swap_region_bytes(const zinc_swap *sw, int region) {
  return region >= 0 && region < sw->nregions ? sw->region_bytes[region] : 0;
}
uint64_t zinc_swap_block_bytes(const zinc_swap *sw) { return sw->block_bytes; }
uint64_t zinc_swap_disk_bytes(const zinc_swap *sw) {
  return sw->region_first[sw->nregions] * sw->slot_bytes;
}
const char *zinc_swap_dir(const zinc_swap *sw, int path) {
  return path >= 0 && path < sw->npaths ? sw->stripes[path].dir : NULL;
}
uint64_t zinc_swap_buffer_bytes(const zinc_swap *sw, uint64_t bytes) {
  return zinc_round_up(bytes, zinc_aio_alignment(sw->aio));
}

/* --------------------------------------------------------------- blocks */

/* The region holding block b (binary search over region_first). */
static int region_of(const zinc_swap *sw, uint64_t b) {
  int lo = 0, hi = sw->nregions - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (sw->region_first[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

static uint32_t payload_len(const zinc_swap *sw, uint64_t b) {
  int r = region_of(sw, b);
  uint64_t start = (b - sw->region_first[r]) * sw->block_bytes;
  uint64_t left = sw->region_bytes[r] - start;
  return (uint32_t)(left < sw->block_bytes ? left : sw->block_bytes);
}

static zinc_status frame_fill(void *ctx, const zinc_aio_op *op, void *header) {
  const zinc_swap *sw = ctx;
  zinc_swap_header h = {ZINC_SWAP_VERSION, 0, sw->header_bytes, payload_len(sw, op->tag),
                        sw->area_id, op->tag, 0};
  if (sw->checksums) {
    h.flags = ZINC_SWAP_FLAG_CRC;
    h.payload_crc = zinc_crc32c(0, op->buf, h.payload_len);
  }
  zinc_swap_header_encode(&h, header, sw->header_bytes);
  return ZINC_OK;
}

/* ZINC_ERR_CORRUPT naming the block, its file and offset, and `detail`. */
static zinc_status corrupt(const zinc_swap *sw, const zinc_aio_op *op, const char *detail) {
  int never = strstr(detail, "never written") != NULL;
  return zinc_error(ZINC_ERR_CORRUPT,
      "corrupt swap block %llu (region %d of the %s area, rank %d) in %s at offset %llu: "
      "%s; %s",
      (unsigned long long)op->tag, region_of(sw, op->tag), sw->name, sw->rank,
      zinc_aio_file_path(sw->aio, op->file), (unsigned long long)op->offset, detail,
      never ? "it was read before it was written"
            : "the drive returned other bytes than were written: check it (dmesg, smartctl) "
              "and resume from a checkpoint");
}

static zinc_status frame_check(void *ctx, const zinc_aio_op *op, const void *header) {
  const zinc_swap *sw = ctx;
  zinc_swap_header h;
  char what[512] = "";
  if (zinc_swap_header_parse(header, sw->header_bytes, &h) != ZINC_OK) {
    snprintf(what, sizeof what, "%s", zinc_last_error());
    return corrupt(sw, op, what);
  }
  uint32_t want_len = payload_len(sw, op->tag);
  if (h.area_id != sw->area_id)
    snprintf(what, sizeof what, "it belongs to another swap area (id %016llx, expected "
             "%016llx)", (unsigned long long)h.area_id, (unsigned long long)sw->area_id);
  else if (h.block_index != op->tag)
    snprintf(what, sizeof what, "its header names block %llu",
             (unsigned long long)h.block_index);
  else if (h.payload_len != want_len || h.header_bytes != sw->header_bytes)
    snprintf(what, sizeof what, "its header says %u payload bytes after a %u-byte header, "
             "expected %u after %u", h.payload_len, h.header_bytes, want_len, sw->header_bytes);
  else if (sw->checksums && !(h.flags & ZINC_SWAP_FLAG_CRC))
    snprintf(what, sizeof what, "its header carries no payload checksum");
  else if (sw->checksums) {
    uint32_t crc = zinc_crc32c(0, op->buf, h.payload_len);
    if (crc != h.payload_crc)
      snprintf(what, sizeof what, "payload crc32c 0x%08x, header says 0x%08x (payload at "
               "offset %llu)", crc, h.payload_crc,
               (unsigned long long)(op->offset + sw->header_bytes));
  }
  return what[0] ? corrupt(sw, op, what) : ZINC_OK;
}

static zinc_status swap_io(zinc_swap *sw, zinc_aio_dir dir, int region, uint64_t offset,
                           void *buf, uint64_t bytes, zinc_aio_handle **out) {
  const char *verb = dir == ZINC_AIO_WRITE ? "writing" : "reading";
  if (out)
    *out = NULL;
  if (region < 0 || region >= sw->nregions)
    return zinc_error(ZINC_ERR_INVALID, "%s swap area %s: no region %d (it has %d)", verb,
                      sw->name, region, sw->nregions);
  uint64_t rb = sw->region_bytes[region], bs = sw->block_bytes;
  if (bytes == 0 || offset % bs || offset > rb || bytes > rb - offset ||
      ((offset + bytes) % bs && offset + bytes != rb))
    return zinc_error(ZINC_ERR_INVALID,
                      "%s swap area %s region %d (%llu bytes): range [%llu, +%llu) must "
                      "start at a multiple of the %llu-byte block and end at one or at the "
                      "region's end",
                      verb, sw->name, region, (unsigned long long)rb,
                      (unsigned long long)offset, (unsigned long long)bytes,
                      (unsigned long long)bs);
  uint64_t nblocks = zinc_div_up(bytes, bs);
  if (nblocks > INT32_MAX)
    return zinc_error(ZINC_ERR_INVALID, "%s swap area %s: %llu blocks in one call", verb,
                      sw->name, (unsigned long long)nblocks);
  zinc_aio_op *ops;
  ZINC_CHECK(zinc_calloc((void **)&ops, nblocks, sizeof *ops, "swap I/O ops"));
  uint64_t first = sw->region_first[region] + offset / bs;
  size_t align = zinc_aio_alignment(sw->aio);
  for (uint64_t k = 0; k < nblocks; k++) {
    uint64_t b = first + k;
    const swap_stripe *s = &sw->stripes[b % (uint64_t)sw->npaths];
    uint64_t len = bytes - k * bs < bs ? bytes - k * bs : bs;
    ops[k] = (zinc_aio_op){dir, s->file, (b / (uint64_t)sw->npaths) * sw->slot_bytes,
                           (char *)buf + k * bs, zinc_round_up(len, align), b};
  }
  zinc_aio_framing framing = {sw->header_bytes, frame_fill, frame_check, sw};
  zinc_aio_handle *h;
  zinc_status st = zinc_aio_submit(sw->aio, ops, (int)nblocks, &framing, &h);
  free(ops);
  if (st != ZINC_OK)
    return zinc_error_wrap(st, "%s swap area %s region %d", verb, sw->name, region);
  if (out) {
    *out = h;
    return ZINC_OK;
  }
  return zinc_aio_wait(h);
}

zinc_status zinc_swap_write(zinc_swap *sw, int region, uint64_t offset, const void *buf,
                            uint64_t bytes, zinc_aio_handle **out) {
  return swap_io(sw, ZINC_AIO_WRITE, region, offset, (void *)buf, bytes, out);
}

zinc_status zinc_swap_read(zinc_swap *sw, int region, uint64_t offset, void *buf,
                           uint64_t bytes, zinc_aio_handle **out) {
  return swap_io(sw, ZINC_AIO_READ, region, offset, buf, bytes, out);
}
