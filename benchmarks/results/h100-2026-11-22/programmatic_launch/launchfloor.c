/* Driver launch cost measured from C: n launches of one kernel in a loop (no Python). */
#include <stdint.h>
#include <string.h>
#include <time.h>
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
typedef struct { unsigned id; unsigned pad; union { char raw[64]; int flag; } value; } attr_t;
typedef struct {
  unsigned gx, gy, gz, bx, by, bz, smem; void *stream; attr_t *attrs; unsigned num_attrs;
} config_t;
typedef int (*launch_ex_fn)(const config_t *, void *, void **, void **);
typedef int (*sync_fn)(void *);

static double now_us(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* mode 0: cuLaunchKernel; 1: cuLaunchKernelEx with programmatic serialization;
   2: cuLaunchKernel + cuStreamSynchronize after each. Returns us per launch, or -err. */
double launch_loop(void *lk, void *lkx, void *ss, void *func, unsigned gx, void *stream,
                   void **params, int n, int mode) {
  attr_t attr; memset(&attr, 0, sizeof attr); attr.id = 6; attr.value.flag = 1;
  config_t cfg = {gx, 1, 1, 1, 1, 1, 0, stream, &attr, 1};
  double t0 = now_us();
  for (int i = 0; i < n; i++) {
    int err = mode == 1 ? ((launch_ex_fn)lkx)(&cfg, func, params, 0)
                        : ((launch_fn)lk)(func, gx, 1, 1, 1, 1, 1, 0, stream, params, 0);
    if (err) return -err;
    if (mode == 2 && (err = ((sync_fn)ss)(stream))) return -err;
  }
  int err = ((sync_fn)ss)(stream);
  if (err) return -err;
  return (now_us() - t0) / n;
}
