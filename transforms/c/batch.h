// The batch-and-rows plumbing of a C transform, on the bindings that
// `wit-bindgen c wit --world transform` generates (transform.h): messages one
// at a time, rows and routed tables collected, one outcome per message.
#ifndef FLUSS_SINK_BATCH_H
#define FLUSS_SINK_BATCH_H

#include "fluss_sink.h"
#include "transform.h"

// One message of a batch (borrowed from it).
typedef struct {
  uint64_t offset;
  const uint8_t *payload;
  size_t len;
  const iggy_fluss_sink_types_header_t *headers;
  size_t header_count;
} fs_message;

// Rows and routed tables, as `process` returns them.
typedef struct {
  fs_bytes rows;
  transform_string_t *tables;
  size_t table_count;
} fs_output;

// 0 for the sink's table (name NULL), else the 1-based index of `name`.
uint16_t fs_table_index(fs_output *out, const char *name);

// The value of header `key` as NUL-terminated text (malloc'd), or NULL.
char *fs_header_text(const fs_message *m, const char *key);

// Handles one message: appends rows to out->rows and sets *rows (0 filters
// the message out); false with the reason dead-letters it.
typedef bool (*fs_handler)(void *state, const fs_message *m, fs_output *out, uint32_t *rows, fs_error *err);

// Runs `handle` over `batch` (which it frees) and fills `ret`.
void fs_run(transform_batch_t *batch, transform_batch_output_t *ret, fs_handler handle, void *state);

// The value of config key `key` (malloc'd text), or a copy of `fallback`.
char *fs_config(const transform_list_tuple2_string_string_t *config, const char *key, const char *fallback);

// Sets the error string of `init` to `text`; returns false.
bool fs_init_error(transform_string_t *err, const char *text);

// Adds every column of `table` to `mapper`; false with the reason.
bool fs_mapper_of(fs_mapper *mapper, const transform_table_schema_t *table, fs_error *err);

#endif
