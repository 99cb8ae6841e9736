// See batch.h.
#include "batch.h"

#include <stdlib.h>
#include <string.h>

uint16_t fs_table_index(fs_output *out, const char *name) {
  if (!name) return 0;
  size_t len = strlen(name);
  for (size_t i = 0; i < out->table_count; i++) {
    if (out->tables[i].len == len && memcmp(out->tables[i].ptr, name, len) == 0) return (uint16_t)(i + 1);
  }
  out->tables = realloc(out->tables, (out->table_count + 1) * sizeof *out->tables);
  transform_string_dup(&out->tables[out->table_count++], name);
  return (uint16_t)out->table_count;
}

char *fs_header_text(const fs_message *m, const char *key) {
  size_t len = strlen(key);
  for (size_t i = 0; i < m->header_count; i++) {
    const iggy_fluss_sink_types_header_t *h = &m->headers[i];
    if (h->key.len == len && memcmp(h->key.ptr, key, len) == 0) {
      char *text = malloc(h->value.len + 1);
      memcpy(text, h->value.ptr, h->value.len);
      text[h->value.len] = 0;
      return text;
    }
  }
  return NULL;
}

void fs_run(transform_batch_t *batch, transform_batch_output_t *ret, fs_handler handle, void *state) {
  size_t count = batch->offsets.len;
  fs_output out = {0};
  iggy_fluss_sink_types_outcome_t *outcomes = malloc((count ? count : 1) * sizeof *outcomes);
  for (size_t i = 0; i < count; i++) {
    uint32_t start = i ? batch->payload_ends.ptr[i - 1] : 0;
    uint32_t first = i ? batch->header_ends.ptr[i - 1] : 0;
    fs_message m = {
        .offset = batch->offsets.ptr[i],
        .payload = batch->payloads.ptr + start,
        .len = batch->payload_ends.ptr[i] - start,
        .headers = batch->headers.ptr + first,
        .header_count = batch->header_ends.ptr[i] - first,
    };
    size_t mark = out.rows.len;
    uint32_t rows = 0;
    fs_error err;
    if (handle(state, &m, &out, &rows, &err)) {
      outcomes[i].tag = IGGY_FLUSS_SINK_TYPES_OUTCOME_ROWS;
      outcomes[i].val.rows = rows;
    } else {
      out.rows.len = mark;
      outcomes[i].tag = IGGY_FLUSS_SINK_TYPES_OUTCOME_DEAD_LETTER;
      transform_string_dup(&outcomes[i].val.dead_letter, err.text);
    }
  }
  transform_batch_free(batch);
  ret->outcomes = (iggy_fluss_sink_types_list_outcome_t){outcomes, count};
  ret->tables = (transform_list_string_t){out.tables, out.table_count};
  ret->rows = (transform_list_u8_t){out.rows.data, out.rows.len};
}

char *fs_config(const transform_list_tuple2_string_string_t *config, const char *key, const char *fallback) {
  size_t len = strlen(key);
  for (size_t i = 0; i < config->len; i++) {
    const transform_string_t *k = &config->ptr[i].f0, *v = &config->ptr[i].f1;
    if (k->len == len && memcmp(k->ptr, key, len) == 0) {
      char *text = malloc(v->len + 1);
      memcpy(text, v->ptr, v->len);
      text[v->len] = 0;
      return text;
    }
  }
  return fallback ? strdup(fallback) : NULL;
}

bool fs_init_error(transform_string_t *err, const char *text) {
  transform_string_dup(err, text);
  return false;
}

bool fs_mapper_of(fs_mapper *mapper, const transform_table_schema_t *table, fs_error *err) {
  for (size_t i = 0; i < table->columns.len; i++) {
    const iggy_fluss_sink_types_column_t *c = &table->columns.ptr[i];
    if (!fs_mapper_add(mapper, (const char *)c->name.ptr, c->name.len, (const char *)c->data_type.ptr,
                       c->data_type.len, c->nullable, err)) {
      return false;
    }
  }
  return true;
}
