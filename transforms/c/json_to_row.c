// json-to-row in C: each JSON object payload becomes one row of the sink's
// table by column name. Config `kind`: append (default), upsert or delete;
// `partial_update`: "true" leaves fields missing from a payload out of the
// row (a partial update).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

static fs_mapper mapper;
static uint8_t kind;

bool exports_transform_init(transform_list_tuple2_string_string_t *config, transform_list_table_schema_t *tables,
                            transform_string_t *err) {
  char *name = fs_config(config, "kind", "append");
  bool ok = true;
  fs_error e;
  if (strcmp(name, "append") == 0) kind = FS_APPEND;
  else if (strcmp(name, "upsert") == 0) kind = FS_UPSERT;
  else if (strcmp(name, "delete") == 0) kind = FS_DELETE;
  else {
    snprintf(e.text, sizeof e.text, "config `kind` must be append, upsert or delete, not `%s`", name);
    ok = fs_init_error(err, e.text);
  }
  char *partial = fs_config(config, "partial_update", "false");
  if (ok && strcmp(partial, "true") != 0 && strcmp(partial, "false") != 0) {
    snprintf(e.text, sizeof e.text, "config `partial_update` must be true or false, not `%s`", partial);
    ok = fs_init_error(err, e.text);
  }
  fs_mapper_free(&mapper);
  if (ok && !fs_mapper_of(&mapper, &tables->ptr[0], &e)) ok = fs_init_error(err, e.text);
  mapper.partial = strcmp(partial, "true") == 0;
  free(partial);
  free(name);
  transform_list_tuple2_string_string_free(config);
  transform_list_table_schema_free(tables);
  return ok;
}

static bool handle(void *state, const fs_message *m, fs_output *out, uint32_t *rows, fs_error *err) {
  (void)state;
  *rows = 1;
  return fs_map_row(&mapper, kind, 0, m->payload, m->len, &out->rows, err);
}

void exports_transform_process(transform_batch_t *batch, transform_batch_output_t *ret) {
  fs_run(batch, ret, handle, NULL);
}
