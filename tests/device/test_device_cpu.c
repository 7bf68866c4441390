/* test_device_cpu.c — the cpu backend of the device seam: allocation
 * alignment and the accounting hook's totals per location and category,
 * pin_memory (mlock, and exactly one warning where the OS refuses), copies
 * and fills (large ones split over the pool), streams and events, the
 * kernels through the table, mem_info, thread counts, bad arguments. */
#include <linux/capability.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/base.h"
#include "common/capture.h"
#include "common/compare.h"
#include "device/device_cpu.h"
#include "optim/adam.h"

typedef struct {
  int64_t current[ZINC_LOC_N][ZINC_MEM_NCAT];
  int calls;
} ledger;

static void hook(void *ctx, int location, int category, int64_t bytes) {
  ledger *l = ctx;
  l->current[location][category] += bytes;
  l->calls++;
}

static zinc_device *make_device(int threads, int pin, ledger *l) {
  zinc_device *d = NULL;
  assert_int_equal(zinc_device_cpu_create(threads, pin, &d), ZINC_OK);
  assert_non_null(d);
  assert_string_equal(d->ops->name, "cpu");
  assert_int_equal(d->ops->is_gpu, 0);
  d->mem_hook = hook;
  d->mem_hook_ctx = l;
  return d;
}

static void alloc_free_and_accounting(void **state) {
  ledger l = {0};
  zinc_device *d = make_device(2, 0, &l);
  const size_t sizes[] = {1, 100, 4096, 3 << 20};
  void *dev[4], *host[4];
  long page = sysconf(_SC_PAGESIZE);
  for (int i = 0; i < 4; i++) {
    assert_int_equal(d->ops->alloc(d, sizes[i], ZINC_LOC_DEVICE, ZINC_MEM_OPTIM, &dev[i]), ZINC_OK);
    assert_int_equal(d->ops->alloc(d, sizes[i], ZINC_LOC_HOST, i % 2 ? ZINC_MEM_PARAMS : ZINC_MEM_GRADS,
                                   &host[i]), ZINC_OK);
    assert_int_equal((uintptr_t)dev[i] % 64, 0);
    assert_int_equal((uintptr_t)host[i] % (uintptr_t)page, 0);
    memset(dev[i], 1, sizes[i]);
    memset(host[i], 2, sizes[i]);
  }
  int64_t total = 1 + 100 + 4096 + (3 << 20);
  assert_int_equal(l.current[ZINC_LOC_DEVICE][ZINC_MEM_OPTIM], total);
  assert_int_equal(l.current[ZINC_LOC_HOST][ZINC_MEM_GRADS], 1 + 4096);
  assert_int_equal(l.current[ZINC_LOC_HOST][ZINC_MEM_PARAMS], 100 + (3 << 20));
  assert_int_equal(l.calls, 8);
  for (int i = 0; i < 4; i++) {
    d->ops->free(d, dev[i], sizes[i], ZINC_LOC_DEVICE, ZINC_MEM_OPTIM);
    d->ops->free(d, host[i], sizes[i], ZINC_LOC_HOST, i % 2 ? ZINC_MEM_PARAMS : ZINC_MEM_GRADS);
  }
  for (int loc = 0; loc < ZINC_LOC_N; loc++)
    for (int c = 0; c < ZINC_MEM_NCAT; c++)
      assert_int_equal(l.current[loc][c], 0);
  d->ops->free(d, NULL, 0, ZINC_LOC_HOST, 0); /* NULL is a no-op */
  assert_int_equal(l.calls, 16);

  void *p = (void *)1;
  assert_int_equal(d->ops->alloc(d, 10, ZINC_LOC_NVME, 0, &p), ZINC_ERR_INVALID);
  fprintf(stderr, "message: %s\n", zinc_last_error());
  assert_null(p);
  assert_int_equal(l.calls, 16);
  zinc_device_destroy(d);
  zinc_device_destroy(NULL);
}

/* Drop CAP_IPC_LOCK from this thread's effective set and lower the memlock
 * limit, so that mlock fails as it does for an ordinary user; undo after. */
typedef struct {
  struct __user_cap_header_struct hdr;
  struct __user_cap_data_struct data[2];
  struct rlimit lim;
} privilege;

static void drop_mlock_privilege(privilege *saved) {
  saved->hdr = (struct __user_cap_header_struct){_LINUX_CAPABILITY_VERSION_3, 0};
  syscall(SYS_capget, &saved->hdr, saved->data);
  struct __user_cap_data_struct d[2];
  memcpy(d, saved->data, sizeof d);
  d[0].effective &= ~(1u << CAP_IPC_LOCK);
  syscall(SYS_capset, &saved->hdr, d);
  getrlimit(RLIMIT_MEMLOCK, &saved->lim);
  struct rlimit small = {64 << 10, saved->lim.rlim_max};
  setrlimit(RLIMIT_MEMLOCK, &small);
}

static void restore_privilege(privilege *saved) {
  setrlimit(RLIMIT_MEMLOCK, &saved->lim);
  syscall(SYS_capset, &saved->hdr, saved->data);
}

static void pin_memory(void **state) {
  ledger l = {0};
  /* where mlock works, pinned buffers really are locked */
  zinc_device *d = make_device(1, 1, &l);
  void *p;
  assert_int_equal(d->ops->alloc(d, 1 << 20, ZINC_LOC_HOST, ZINC_MEM_OPTIM, &p), ZINC_OK);
  d->ops->free(d, p, 1 << 20, ZINC_LOC_HOST, ZINC_MEM_OPTIM);
  zinc_device_destroy(d);

  /* where it does not, allocations still succeed, with one warning per device */
  privilege saved;
  drop_mlock_privilege(&saved);
  size_t big = 4 << 20;
  void *probe = aligned_alloc(4096, big);
  int refused = mlock(probe, big) != 0;
  if (!refused)
    munlock(probe, big);
  free(probe);
  test_stderr cap;
  test_stderr_begin(&cap);
  d = make_device(1, 1, &l);
  void *bufs[3];
  for (int i = 0; i < 3; i++)
    assert_int_equal(d->ops->alloc(d, big, ZINC_LOC_HOST, ZINC_MEM_OPTIM, &bufs[i]), ZINC_OK);
  char *log = test_stderr_end(&cap);
  restore_privilege(&saved);
  for (int i = 0; i < 3; i++) {
    memset(bufs[i], 7, big);
    d->ops->free(d, bufs[i], big, ZINC_LOC_HOST, ZINC_MEM_OPTIM);
  }
  int warnings = test_count_lines(log, "pin_memory");
  free(log);
  zinc_device_destroy(d);
  if (!refused) {
    fprintf(stderr, "SKIPPED: mlock beyond the memlock limit still succeeds here; the "
                    "warning path cannot be shown\n");
    skip();
  }
  fprintf(stderr, "mlock refused: %d warning(s) for 3 allocations\n", warnings);
  assert_int_equal(warnings, 1);
}

static void copy_fill_streams_events(void **state) {
  ledger l = {0};
  zinc_device *d = make_device(3, 0, &l);
  const zinc_device_ops *o = d->ops;
  size_t n = (5 << 20) + 13; /* split over the pool */
  unsigned char *a, *b;
  assert_int_equal(o->alloc(d, n, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS, (void **)&a), ZINC_OK);
  assert_int_equal(o->alloc(d, n, ZINC_LOC_HOST, ZINC_MEM_BUFFERS, (void **)&b), ZINC_OK);
  for (size_t i = 0; i < n; i++)
    a[i] = (unsigned char)(i * 31 + 7);
  zinc_stream *s1, *s2;
  zinc_event *e;
  assert_int_equal(o->stream_create(d, &s1), ZINC_OK);
  assert_int_equal(o->stream_create(d, &s2), ZINC_OK);
  assert_ptr_not_equal(s1, s2);
  assert_int_equal(o->event_create(d, &e), ZINC_OK);
  /* copy on s1, record, make s2 wait, then read on s2: the copy is visible */
  assert_int_equal(o->copy(d, b, a, n, s1), ZINC_OK);
  assert_int_equal(o->event_record(d, e, s1), ZINC_OK);
  assert_int_equal(o->stream_wait_event(d, s2, e), ZINC_OK);
  assert_int_equal(o->event_sync(d, e), ZINC_OK);
  assert_memory_equal(a, b, n);
  assert_int_equal(o->copy(d, b + 1, a, 100, s2), ZINC_OK); /* small, misaligned */
  assert_memory_equal(b + 1, a, 100);
  assert_int_equal(o->fill_zero(d, b + 3, n - 3, s2), ZINC_OK);
  assert_int_equal(o->stream_sync(d, s2), ZINC_OK);
  assert_int_equal(b[2], a[1]);
  for (size_t i = 3; i < n; i++)
    if (b[i] != 0) {
      fprintf(stderr, "fill_zero left byte %zu = %u\n", i, b[i]);
      fail();
    }
  assert_int_equal(o->copy(d, b, a, 0, NULL), ZINC_OK);
  assert_int_equal(o->copy(d, NULL, a, 5, NULL), ZINC_ERR_INVALID);
  assert_int_equal(o->event_record(d, NULL, s1), ZINC_ERR_INVALID);
  assert_int_equal(o->event_sync(d, NULL), ZINC_ERR_INVALID);
  o->event_destroy(d, e);
  o->stream_destroy(d, s1);
  o->stream_destroy(d, s2);
  o->free(d, a, n, ZINC_LOC_DEVICE, ZINC_MEM_BUFFERS);
  o->free(d, b, n, ZINC_LOC_HOST, ZINC_MEM_BUFFERS);
  zinc_device_destroy(d);
}

static void kernels_through_the_table(void **state) {
  ledger l = {0};
  zinc_device *d = make_device(2, 0, &l);
  const zinc_device_ops *o = d->ops;
  enum { N = 40001 };
  float *p = malloc(N * 4), *m = malloc(N * 4), *v = malloc(N * 4), *g = malloc(N * 4);
  float *pr = malloc(N * 4), *mr = malloc(N * 4), *vr = malloc(N * 4);
  uint16_t *out = malloc(N * 2), *h = malloc(N * 2);
  for (int i = 0; i < N; i++) {
    p[i] = pr[i] = (float)(i % 97) * 0.01f - 0.4f;
    m[i] = mr[i] = (float)(i % 13) * 1e-3f;
    v[i] = vr[i] = (float)(i % 7) * 1e-5f;
    g[i] = (float)(i % 29) * 0.1f - 1.2f;
  }
  zinc_opt_coef c;
  assert_int_equal(zinc_adam_coef_init(&c, 1e-2, 0.9, 0.999, 1e-8, 0.1, 0, 1, 2, 0.5), ZINC_OK);
  zinc_opt_seg seg = {.master = p,
                      .exp_avg = m,
                      .exp_avg_sq = v,
                      .grad = g,
                      .param_out = out,
                      .n = N,
                      .grad_dtype = ZINC_F32,
                      .param_dtype = ZINC_F16,
                      .decay = 1,
                      .coef = 0,
                      .lamb_ratio = 0.0f};
  assert_int_equal(o->optim(d, NULL, &c, 1, &seg, 1, ZINC_OPT_PASS_UPDATE, NULL), ZINC_OK);
  uint16_t *outr = malloc(N * 2);
  for (int i = 0; i < N; i++) {
    zinc_adam_elem(&c, 1, &pr[i], &mr[i], &vr[i], g[i]);
    outr[i] = zinc_f32_to_f16(pr[i]);
  }
  int64_t bad = test_compare_bits("master", p, pr, N, ZINC_F32) +
                test_compare_bits("exp_avg", m, mr, N, ZINC_F32) +
                test_compare_bits("exp_avg_sq", v, vr, N, ZINC_F32) +
                test_compare_bits("param_out", out, outr, N, ZINC_F16);
  assert_int_equal(bad, 0);

  zinc_sumsq_chunk ch[2] = {{g, N, ZINC_F32}, {out, N, ZINC_F16}};
  double part[2];
  assert_int_equal(o->sumsq(d, NULL, ch, 2, part), ZINC_OK);
  double r0 = zinc_sumsq_chunk_ref(g, N, ZINC_F32), r1 = zinc_sumsq_chunk_ref(out, N, ZINC_F16);
  assert_memory_equal(&part[0], &r0, 8);
  assert_memory_equal(&part[1], &r1, 8);

  assert_int_equal(o->cast(d, NULL, h, ZINC_BF16, g, ZINC_F32, N), ZINC_OK);
  assert_int_equal(o->accumulate_f32(d, NULL, pr, h, ZINC_BF16, N, 1), ZINC_OK);
  assert_int_equal(o->accumulate_f32(d, NULL, pr, h, ZINC_BF16, N, 0), ZINC_OK);
  for (int i = 0; i < N; i++) {
    float x = zinc_bf16_to_f32(zinc_f32_to_bf16(g[i]));
    assert_true(pr[i] == x + x);
  }
  free(p); free(m); free(v); free(g); free(pr); free(mr); free(vr); free(out); free(outr); free(h);
  zinc_device_destroy(d);
}

/* The scale op: every fp16 and bf16 pattern times 1/3 and 4096 (fp16
 * overflow to inf), against the canonical conversions written out here. */
static void scale_every_pattern(void **state) {
  ledger l = {0};
  zinc_device *d = make_device(2, 0, &l);
  enum { N = 65536 };
  uint16_t *x = malloc(N * 2);
  assert_non_null(x);
  const float factors[2] = {1.0f / 3.0f, 4096.0f};
  for (int dt = ZINC_BF16; dt <= ZINC_F16; dt++)
    for (int k = 0; k < 2; k++) {
      for (int i = 0; i < N; i++)
        x[i] = (uint16_t)i;
      assert_int_equal(d->ops->scale(d, NULL, x, dt, N, factors[k]), ZINC_OK);
      int bad = 0;
      for (int i = 0; i < N; i++) {
        uint16_t want = dt == ZINC_F16
                            ? zinc_f32_to_f16(zinc_f16_to_f32((uint16_t)i) * factors[k])
                            : zinc_f32_to_bf16(zinc_bf16_to_f32((uint16_t)i) * factors[k]);
        if (x[i] != want && bad++ < 4)
          fprintf(stderr, "scale dtype %d x %g: pattern 0x%04x gave 0x%04x, want 0x%04x\n", dt,
                  factors[k], i, x[i], want);
      }
      assert_int_equal(bad, 0);
    }
  free(x);
  zinc_device_destroy(d);
}

static void mem_info_and_threads(void **state) {
  ledger l = {0};
  zinc_device *d = make_device(0, 0, &l);
  int64_t fr, tot;
  assert_int_equal(d->ops->mem_info(d, &fr, &tot), ZINC_OK);
  fprintf(stderr, "mem_info: %lld of %lld bytes free\n", (long long)fr, (long long)tot);
  assert_true(tot > (64 << 20));
  assert_true(fr > 0 && fr <= tot);
  zinc_topology *t = zinc_device_cpu_topology(d);
  assert_non_null(t);
  assert_int_equal(zinc_threadpool_size(zinc_device_cpu_pool(d)), zinc_topology_cores(t));
  assert_int_equal(zinc_device_cpu_isa(d), zinc_cpu_isa_select());
  zinc_device_destroy(d);

  d = make_device(3, 0, &l);
  assert_int_equal(zinc_threadpool_size(zinc_device_cpu_pool(d)), 3);
  zinc_device_destroy(d);

  zinc_device_cpu_placement pl = ZINC_DEVICE_CPU_PLACEMENT_INIT;
  pl.local_rank = 2;
  pl.local_size = 2;
  d = (zinc_device *)1;
  assert_int_equal(zinc_device_cpu_create_placed(&pl, &d), ZINC_ERR_INVALID);
  fprintf(stderr, "message: %s\n", zinc_last_error());
  assert_null(d);
  assert_int_equal(zinc_device_cpu_create(-1, 0, &d), ZINC_ERR_INVALID);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(alloc_free_and_accounting),
      cmocka_unit_test(pin_memory),
      cmocka_unit_test(copy_fill_streams_events),
      cmocka_unit_test(kernels_through_the_table),
      cmocka_unit_test(scale_every_pattern),
      cmocka_unit_test(mem_info_and_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
