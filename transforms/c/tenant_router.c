// tenant-router in C: keeps messages whose JSON field `filter_field` equals
// `filter_value` (both optional) and routes each to table
// `<database>.<prefix><tenant>`, the tenant read from the payload field
// `tenant_field` (default "tenant") or else the header of that name. Rows are
// upserts when the sink's table has a primary key, appends otherwise.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

static struct {
  fs_mapper mapper;
  char *database, *prefix, *tenant_field, *filter_field, *filter_value;
  uint8_t kind;
} s;

bool exports_transform_init(transform_list_tuple2_string_string_t *config, transform_list_table_schema_t *tables,
                            transform_string_t *err) {
  const transform_table_schema_t *table = &tables->ptr[0];
  bool ok = true;
  fs_error e;
  char *path = strndup((const char *)table->path.ptr, table->path.len);
  char *dot = strchr(path, '.');
  if (dot) *dot = 0;
  free(s.database), free(s.prefix), free(s.tenant_field), free(s.filter_field), free(s.filter_value);
  fs_mapper_free(&s.mapper);
  s.database = fs_config(config, "database", path);
  s.prefix = fs_config(config, "prefix", "");
  s.tenant_field = fs_config(config, "tenant_field", "tenant");
  s.filter_field = fs_config(config, "filter_field", NULL);
  s.filter_value = fs_config(config, "filter_value", NULL);
  s.kind = table->primary_key.len ? FS_UPSERT : FS_APPEND;
  if (!s.filter_field != !s.filter_value) ok = fs_init_error(err, "set both `filter_field` and `filter_value`, or neither");
  if (ok && !fs_mapper_of(&s.mapper, table, &e)) ok = fs_init_error(err, e.text);
  free(path);
  transform_list_tuple2_string_string_free(config);
  transform_list_table_schema_free(tables);
  return ok;
}

static bool plain_identifier(const char *t) {
  if (!*t) return false;
  for (; *t; t++) {
    char c = *t;
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

static bool handle(void *state, const fs_message *m, fs_output *out, uint32_t *rows, fs_error *err) {
  (void)state;
  char *text;
  bool found;
  if (s.filter_field) {
    if (!fs_field_text(m->payload, m->len, s.filter_field, &text, &found, err)) return false;
    bool keep = found && strcmp(text, s.filter_value) == 0;
    free(text);
    if (!keep) {
      *rows = 0;
      return true;
    }
  }
  if (!fs_field_text(m->payload, m->len, s.tenant_field, &text, &found, err)) return false;
  if (!found) text = fs_header_text(m, s.tenant_field);
  if (!text) {
    snprintf(err->text, sizeof err->text, "no tenant: neither a `%s` field nor header", s.tenant_field);
    return false;
  }
  bool ok = plain_identifier(text);
  if (!ok) {
    snprintf(err->text, sizeof err->text, "tenant `%s` is not a plain identifier (letters, digits, _)", text);
  } else {
    size_t n = strlen(s.database) + strlen(s.prefix) + strlen(text) + 2;
    char *name = malloc(n);
    snprintf(name, n, "%s.%s%s", s.database, s.prefix, text);
    uint16_t table = fs_table_index(out, name);
    free(name);
    *rows = 1;
    ok = fs_map_row(&s.mapper, s.kind, table, m->payload, m->len, &out->rows, err);
  }
  free(text);
  return ok;
}

void exports_transform_process(transform_batch_t *batch, transform_batch_output_t *ret) {
  fs_run(batch, ret, handle, NULL);
}
