// TEST ONLY. A C transform that waits through WASI's clocks: on a message
// whose payload is config `trigger` (default "poison") it either sleeps 120 s
// (config `mode` = "sleep", nanosleep) or reads the monotonic clock in a loop
// until 120 s have passed on it (`mode` = "clock-spin"); every other message
// becomes one row [offset BIGINT]. It proves that a guest waiting on a clock
// cannot hold the host past call_timeout.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batch.h"

static struct {
  char *mode, *trigger;
} s;

bool exports_transform_init(transform_list_tuple2_string_string_t *config, transform_list_table_schema_t *tables,
                            transform_string_t *err) {
  free(s.mode), free(s.trigger);
  s.mode = fs_config(config, "mode", "sleep");
  s.trigger = fs_config(config, "trigger", "poison");
  bool ok = strcmp(s.mode, "sleep") == 0 || strcmp(s.mode, "clock-spin") == 0;
  if (!ok) fs_init_error(err, "config `mode` must be sleep or clock-spin");
  transform_list_tuple2_string_string_free(config);
  transform_list_table_schema_free(tables);
  return ok;
}

static double monotonic_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static bool handle(void *state, const fs_message *m, fs_output *out, uint32_t *rows, fs_error *err) {
  (void)state, (void)err;
  if (m->len == strlen(s.trigger) && memcmp(m->payload, s.trigger, m->len) == 0) {
    if (strcmp(s.mode, "sleep") == 0) {
      struct timespec two_minutes = {.tv_sec = 120, .tv_nsec = 0};
      nanosleep(&two_minutes, NULL);
    } else {
      double until = monotonic_seconds() + 120.0;
      while (monotonic_seconds() < until) {
      }
    }
  }
  fs_u8(&out->rows, FS_APPEND);
  fs_u16(&out->rows, 0);
  fs_u16(&out->rows, 1);
  fs_u8(&out->rows, 5);  // BIGINT
  int64_t offset = (int64_t)m->offset;
  fs_put(&out->rows, &offset, sizeof offset);
  *rows = 1;
  return true;
}

void exports_transform_process(transform_batch_t *batch, transform_batch_output_t *ret) {
  fs_run(batch, ret, handle, NULL);
}
