/* A trainer outside the zinc tree: built against the installed library to
 * prove the install (header, shared library, CMake package, pkg-config). */
#include <stdio.h>
#include <zinc.h>

static zinc_status init(const zinc_param *p, float *dst, int64_t n, void *ctx) {
  (void)p;
  (void)ctx;
  for (int64_t i = 0; i < n; i++)
    dst[i] = 1.0f;
  return ZINC_OK;
}

int main(void) {
  zinc_config *cfg;
  if (zinc_config_parse("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": "
                        "{\"stage\": 2}}", &cfg) != ZINC_OK) {
    fprintf(stderr, "config: %s\n", zinc_last_error());
    return 1;
  }
  zinc_options opt = ZINC_OPTIONS_INIT;
  opt.device = ZINC_DEVICE_CPU;
  zinc_engine *e;
  if (zinc_engine_create(cfg, &opt, &e) != ZINC_OK) {
    fprintf(stderr, "create: %s\n", zinc_last_error());
    return 1;
  }
  zinc_config_free(cfg);
  zinc_module *m = zinc_module_add(e, "linear");
  int64_t shape[1] = {10};
  zinc_param *w = zinc_param_add(e, m, "w", ZINC_F32, 1, shape);
  if (!w || zinc_engine_build(e, init, NULL) != ZINC_OK)
    return 1;
  zinc_module_fetch(e, m);
  zinc_module_release(e, m);
  zinc_module_fetch(e, m);
  float *g = zinc_param_grad(w);
  for (int i = 0; i < 10; i++)
    g[i] += 0.5f;
  zinc_module_grads_ready(e, m);
  zinc_module_release(e, m);
  zinc_backward_end(e);
  zinc_step_info info = ZINC_STEP_INFO_INIT;
  if (zinc_step(e, &info) != ZINC_OK || info.step != 1) {
    fprintf(stderr, "step: %s\n", zinc_last_error());
    return 1;
  }
  float full[10];
  zinc_param_get_full(e, w, ZINC_STATE_PARAM, full);
  printf("consumer: zinc %s, one step done, w[0] = %.6f\n", zinc_version(), full[0]);
  zinc_engine_destroy(e);
  return full[0] < 1.0f ? 0 : 1; /* a positive gradient lowered it */
}
