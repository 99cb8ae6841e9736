// Helpers for C transforms of the Iggy -> Fluss sink: a growable byte
// buffer, the sink's compact row encoding (row-codec/src/lib.rs), a small
// JSON reader for one flat object, and the JSON-object-to-row mapping with
// the same rules as the Rust `json-to-row` for BOOLEAN, TINYINT, SMALLINT,
// INT, BIGINT, FLOAT, DOUBLE and STRING columns.
//
//   row  := kind:u8 table:u16 cell-count:u16 cell*     (little-endian)
//   cell := tag:u8 payload
#ifndef FLUSS_SINK_H
#define FLUSS_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { FS_APPEND = 0, FS_UPSERT = 1, FS_DELETE = 2 };

// A growable byte buffer (malloc'd; hand `data` over or free it).
typedef struct {
  uint8_t *data;
  size_t len, cap;
} fs_bytes;

void fs_put(fs_bytes *b, const void *src, size_t n);
void fs_u8(fs_bytes *b, uint8_t v);
void fs_u16(fs_bytes *b, uint16_t v);

// An error text, written by the failing call (a dead letter's reason).
typedef struct {
  char text[512];
} fs_error;

// The value of one top-level JSON field.
typedef enum { FS_MISSING, FS_NULL, FS_BOOL, FS_INT, FS_FLOAT, FS_STRING, FS_OBJECT, FS_ARRAY } fs_kind;

typedef struct {
  fs_kind kind;
  bool boolean;
  int64_t integer;  // FS_INT
  double number;    // FS_INT and FS_FLOAT
  char *string;     // FS_STRING, NUL-terminated, malloc'd (may hold NULs: see string_len)
  size_t string_len;
} fs_value;

// Column types the mapping supports.
typedef enum { FS_BOOLEAN, FS_TINYINT, FS_SMALLINT, FS_INTEGER, FS_BIGINT, FS_FLOAT_T, FS_DOUBLE, FS_STRING_T } fs_type;

typedef struct {
  char *name;
  size_t name_len;
  fs_type type;
  bool nullable;
} fs_column;

typedef struct {
  fs_column *columns;
  size_t count;
  // A field missing from the payload is an absent cell (FS_ABSENT) when its
  // column is nullable: a partial update. null stays NULL.
  bool partial;
} fs_mapper;

// The tag of a cell left out of a partial update (not NULL: the column
// keeps its value in the table).
#define FS_ABSENT 15

// Parses `payload` as a JSON object and reads the fields `names[0..n]` into
// `values` (FS_MISSING where absent). Returns false with the reason.
bool fs_read_object(const uint8_t *payload, size_t len, const char *const *names, const size_t *name_lens,
                    size_t n, fs_value *values, fs_error *err);
void fs_value_free(fs_value *v);

// A mapper for columns given as (name, Fluss type text, nullable); false
// with the reason when a type is not supported.
bool fs_mapper_add(fs_mapper *m, const char *name, size_t name_len, const char *type, size_t type_len,
                   bool nullable, fs_error *err);
void fs_mapper_free(fs_mapper *m);

// Appends the row for a JSON object payload to `out`; false (and nothing
// appended) with the reason when the payload does not map.
bool fs_map_row(const fs_mapper *m, uint8_t kind, uint16_t table, const uint8_t *payload, size_t len,
                fs_bytes *out, fs_error *err);

// The text of a top-level field the way the Rust host reads it (strings as
// they are, numbers and booleans as JSON text): *found is false when the
// field is absent or null. False with the reason for objects, arrays and
// payloads that are not JSON objects. `*text` is malloc'd.
bool fs_field_text(const uint8_t *payload, size_t len, const char *name, char **text, bool *found, fs_error *err);

#endif
