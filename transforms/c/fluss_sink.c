// See fluss_sink.h.
#include "fluss_sink.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fs_put(fs_bytes *b, const void *src, size_t n) {
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap * 2 : 1024;
    while (cap < b->len + n) cap *= 2;
    b->data = realloc(b->data, cap);
    if (!b->data) abort();
    b->cap = cap;
  }
  memcpy(b->data + b->len, src, n);
  b->len += n;
}

void fs_u8(fs_bytes *b, uint8_t v) { fs_put(b, &v, 1); }
// WebAssembly is little-endian, as the encoding is.
void fs_u16(fs_bytes *b, uint16_t v) { fs_put(b, &v, 2); }

static bool fail(fs_error *err, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(err->text, sizeof err->text, fmt, args);
  va_end(args);
  return false;
}

// ---- JSON reading --------------------------------------------------------

typedef struct {
  const uint8_t *p, *end;
} reader;

static void skip_ws(reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) r->p++;
}

static bool invalid(fs_error *err, const char *what) { return fail(err, "payload is not valid JSON: %s", what); }

static void put_utf8(fs_bytes *b, uint32_t c) {
  uint8_t u[4];
  if (c < 0x80) {
    u[0] = (uint8_t)c;
    fs_put(b, u, 1);
  } else if (c < 0x800) {
    u[0] = 0xC0 | (c >> 6), u[1] = 0x80 | (c & 0x3F);
    fs_put(b, u, 2);
  } else if (c < 0x10000) {
    u[0] = 0xE0 | (c >> 12), u[1] = 0x80 | ((c >> 6) & 0x3F), u[2] = 0x80 | (c & 0x3F);
    fs_put(b, u, 3);
  } else {
    u[0] = 0xF0 | (c >> 18), u[1] = 0x80 | ((c >> 12) & 0x3F), u[2] = 0x80 | ((c >> 6) & 0x3F),
    u[3] = 0x80 | (c & 0x3F);
    fs_put(b, u, 4);
  }
}

static bool hex4(reader *r, uint32_t *out) {
  if (r->end - r->p < 4) return false;
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    uint8_t c = r->p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else return false;
  }
  r->p += 4;
  *out = v;
  return true;
}

// Reads a string (after its opening quote) into `out` when not NULL.
static bool read_string(reader *r, fs_bytes *out, fs_error *err) {
  while (r->p < r->end) {
    uint8_t c = *r->p++;
    if (c == '"') return true;
    if (c < 0x20) return invalid(err, "control character in a string");
    if (c != '\\') {
      if (out) fs_put(out, &c, 1);
      continue;
    }
    if (r->p >= r->end) break;
    uint8_t e = *r->p++;
    uint32_t code;
    switch (e) {
      case '"': case '\\': case '/': code = e; break;
      case 'b': code = '\b'; break;
      case 'f': code = '\f'; break;
      case 'n': code = '\n'; break;
      case 'r': code = '\r'; break;
      case 't': code = '\t'; break;
      case 'u':
        if (!hex4(r, &code)) return invalid(err, "bad \\u escape");
        if (code >= 0xD800 && code < 0xDC00) {
          uint32_t low;
          if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u') return invalid(err, "lone surrogate");
          r->p += 2;
          if (!hex4(r, &low) || low < 0xDC00 || low > 0xDFFF) return invalid(err, "lone surrogate");
          code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
        } else if (code >= 0xDC00 && code < 0xE000) {
          return invalid(err, "lone surrogate");
        }
        break;
      default: return invalid(err, "bad escape");
    }
    if (out) put_utf8(out, code);
  }
  return invalid(err, "unterminated string");
}

static bool skip_value(reader *r, fs_error *err, int depth);

static bool read_number(reader *r, fs_value *v, fs_error *err) {
  const uint8_t *start = r->p;
  bool is_float = false;
  if (r->p < r->end && *r->p == '-') r->p++;
  if (r->p >= r->end || *r->p < '0' || *r->p > '9') return invalid(err, "bad number");
  if (*r->p == '0') r->p++;
  else while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
  if (r->p < r->end && *r->p == '.') {
    is_float = true;
    r->p++;
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') return invalid(err, "bad number");
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
  }
  if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
    is_float = true;
    r->p++;
    if (r->p < r->end && (*r->p == '+' || *r->p == '-')) r->p++;
    if (r->p >= r->end || *r->p < '0' || *r->p > '9') return invalid(err, "bad number");
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') r->p++;
  }
  char text[64];
  size_t n = (size_t)(r->p - start);
  if (n >= sizeof text) n = sizeof text - 1;
  memcpy(text, start, n);
  text[n] = 0;
  if (v) {
    errno = 0;
    if (!is_float) {
      long long i = strtoll(text, NULL, 10);
      if (errno != ERANGE) {
        v->kind = FS_INT, v->integer = i, v->number = (double)i;
        return true;
      }
    }
    v->kind = FS_FLOAT, v->number = strtod(text, NULL);
  }
  return true;
}

static bool expect_word(reader *r, const char *word, fs_error *err) {
  size_t n = strlen(word);
  if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) return invalid(err, "unexpected character");
  r->p += n;
  return true;
}

// Reads one value into `v` (NULL to skip it).
static bool read_value(reader *r, fs_value *v, fs_error *err, int depth) {
  skip_ws(r);
  if (r->p >= r->end) return invalid(err, "unexpected end");
  if (depth > 128) return invalid(err, "nested too deep");
  uint8_t c = *r->p;
  if (c == '"') {
    r->p++;
    if (!v) return read_string(r, NULL, err);
    fs_bytes s = {0};
    if (!read_string(r, &s, err)) {
      free(s.data);
      return false;
    }
    fs_u8(&s, 0);
    v->kind = FS_STRING, v->string = (char *)s.data, v->string_len = s.len - 1;
    return true;
  }
  if (c == '{' || c == '[') {
    if (v) v->kind = c == '{' ? FS_OBJECT : FS_ARRAY;
    return skip_value(r, err, depth);
  }
  if (c == 't' || c == 'f') {
    if (!expect_word(r, c == 't' ? "true" : "false", err)) return false;
    if (v) v->kind = FS_BOOL, v->boolean = c == 't';
    return true;
  }
  if (c == 'n') {
    if (!expect_word(r, "null", err)) return false;
    if (v) v->kind = FS_NULL;
    return true;
  }
  return read_number(r, v, err);
}

static bool skip_value(reader *r, fs_error *err, int depth) {
  uint8_t open = *r->p++;
  uint8_t close = open == '{' ? '}' : ']';
  skip_ws(r);
  if (r->p < r->end && *r->p == close) {
    r->p++;
    return true;
  }
  for (;;) {
    if (open == '{') {
      skip_ws(r);
      if (r->p >= r->end || *r->p != '"') return invalid(err, "expected a key");
      r->p++;
      if (!read_string(r, NULL, err)) return false;
      skip_ws(r);
      if (r->p >= r->end || *r->p != ':') return invalid(err, "expected ':'");
      r->p++;
    }
    if (!read_value(r, NULL, err, depth + 1)) return false;
    skip_ws(r);
    if (r->p < r->end && *r->p == ',') {
      r->p++;
      continue;
    }
    if (r->p < r->end && *r->p == close) {
      r->p++;
      return true;
    }
    return invalid(err, "expected ',' or a closing bracket");
  }
}

void fs_value_free(fs_value *v) {
  if (v->kind == FS_STRING) free(v->string);
  v->kind = FS_MISSING;
  v->string = NULL;
}

bool fs_read_object(const uint8_t *payload, size_t len, const char *const *names, const size_t *name_lens,
                    size_t n, fs_value *values, fs_error *err) {
  reader r = {payload, payload + len};
  for (size_t i = 0; i < n; i++) values[i] = (fs_value){.kind = FS_MISSING};
  skip_ws(&r);
  if (r.p >= r.end) return invalid(err, "empty payload");
  if (*r.p != '{') {
    fs_value top = {0};
    if (!read_value(&r, &top, err, 0)) return false;
    fs_value_free(&top);
    skip_ws(&r);
    if (r.p != r.end) return invalid(err, "trailing characters");
    return fail(err, "payload is JSON but not an object");
  }
  r.p++;
  skip_ws(&r);
  bool empty = r.p < r.end && *r.p == '}';
  if (empty) r.p++;
  while (!empty) {
    skip_ws(&r);
    if (r.p >= r.end || *r.p != '"') goto bad_key;
    r.p++;
    fs_bytes key = {0};
    if (!read_string(&r, &key, err)) {
      free(key.data);
      goto failed;
    }
    skip_ws(&r);
    if (r.p >= r.end || *r.p != ':') {
      free(key.data);
      invalid(err, "expected ':'");
      goto failed;
    }
    r.p++;
    fs_value *slot = NULL;
    for (size_t i = 0; i < n; i++) {
      if (name_lens[i] == key.len && memcmp(names[i], key.data, key.len) == 0) slot = &values[i];
    }
    free(key.data);
    if (slot) fs_value_free(slot);
    if (!read_value(&r, slot, err, 1)) goto failed;
    skip_ws(&r);
    if (r.p < r.end && *r.p == ',') {
      r.p++;
      continue;
    }
    if (r.p < r.end && *r.p == '}') {
      r.p++;
      break;
    }
    invalid(err, "expected ',' or '}'");
    goto failed;
  }
  skip_ws(&r);
  if (r.p != r.end) {
    invalid(err, "trailing characters");
    goto failed;
  }
  return true;
bad_key:
  invalid(err, "expected a key");
failed:
  for (size_t i = 0; i < n; i++) fs_value_free(&values[i]);
  return false;
}

// ---- The mapping -----------------------------------------------------------

static const char *const TYPE_NAMES[] = {"BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "STRING"};

bool fs_mapper_add(fs_mapper *m, const char *name, size_t name_len, const char *type, size_t type_len,
                   bool nullable, fs_error *err) {
  size_t n = type_len;
  if (n > 9 && memcmp(type + n - 9, " NOT NULL", 9) == 0) n -= 9;
  for (int t = 0; t < 8; t++) {
    if (strlen(TYPE_NAMES[t]) == n && memcmp(TYPE_NAMES[t], type, n) == 0) {
      m->columns = realloc(m->columns, (m->count + 1) * sizeof *m->columns);
      char *copy = malloc(name_len + 1);
      memcpy(copy, name, name_len);
      copy[name_len] = 0;
      m->columns[m->count++] = (fs_column){copy, name_len, (fs_type)t, nullable};
      return true;
    }
  }
  return fail(err,
              "column `%.*s`: type %.*s is not supported by this transform (supported: BOOLEAN, TINYINT, "
              "SMALLINT, INT, BIGINT, FLOAT, DOUBLE, STRING)",
              (int)name_len, name, (int)n, type);
}

void fs_mapper_free(fs_mapper *m) {
  for (size_t i = 0; i < m->count; i++) free(m->columns[i].name);
  free(m->columns);
  *m = (fs_mapper){0};
}

// A number the way the Rust host prints it: integers without a fraction,
// others in the shortest form that reads back the same.
static void number_text(double v, char *buf, size_t size) {
  if (v == floor(v) && fabs(v) < 1e16) {
    snprintf(buf, size, "%.0f", v);
    return;
  }
  for (int precision = 1; precision <= 17; precision++) {
    snprintf(buf, size, "%.*g", precision, v);
    if (strtod(buf, NULL) == v) return;
  }
}

static void put_string(fs_bytes *out, const char *s, size_t len) {
  uint32_t n = (uint32_t)len;
  fs_u8(out, 8);
  fs_put(out, &n, 4);
  fs_put(out, s, len);
}

// An integer into `type`; false with the reason.
static bool put_integer(fs_bytes *out, fs_type type, int64_t v, fs_error *err) {
  static const int64_t LOW[] = {0, INT8_MIN, INT16_MIN, INT32_MIN, INT64_MIN};
  static const int64_t HIGH[] = {0, INT8_MAX, INT16_MAX, INT32_MAX, INT64_MAX};
  static const uint8_t SIZE[] = {0, 1, 2, 4, 8};
  switch (type) {
    case FS_TINYINT: case FS_SMALLINT: case FS_INTEGER: case FS_BIGINT:
      if (v < LOW[type] || v > HIGH[type]) return fail(err, "%lld is out of range", (long long)v);
      fs_u8(out, (uint8_t)(type + 1));
      fs_put(out, &v, SIZE[type]);  // little-endian: the low bytes first
      return true;
    case FS_FLOAT_T: {
      float f = (float)v;
      fs_u8(out, 6);
      fs_put(out, &f, 4);
      return true;
    }
    case FS_DOUBLE: {
      double d = (double)v;
      fs_u8(out, 7);
      fs_put(out, &d, 8);
      return true;
    }
    case FS_STRING_T: {
      char text[32];
      snprintf(text, sizeof text, "%lld", (long long)v);
      put_string(out, text, strlen(text));
      return true;
    }
    default: return fail(err, "found the number %lld, expected a %s", (long long)v, TYPE_NAMES[type]);
  }
}

static bool put_double(fs_bytes *out, fs_type type, double v, fs_error *err) {
  char text[64];
  switch (type) {
    case FS_FLOAT_T: {
      float f = (float)v;
      fs_u8(out, 6);
      fs_put(out, &f, 4);
      return true;
    }
    case FS_DOUBLE:
      fs_u8(out, 7);
      fs_put(out, &v, 8);
      return true;
    case FS_STRING_T:
      number_text(v, text, sizeof text);
      put_string(out, text, strlen(text));
      return true;
    default:
      if (v == floor(v) && fabs(v) < 9.0e18) return put_integer(out, type, (int64_t)v, err);
      number_text(v, text, sizeof text);
      return fail(err, "found the number %s, expected a %s", text, TYPE_NAMES[type]);
  }
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static bool put_text(fs_bytes *out, fs_type type, const char *s, size_t len, fs_error *err) {
  if (type == FS_STRING_T) {
    put_string(out, s, len);
    return true;
  }
  size_t a = 0, b = len;
  while (a < b && is_space(s[a])) a++;
  while (b > a && is_space(s[b - 1])) b--;
  char trimmed[64];
  bool fits = b - a < sizeof trimmed;
  if (fits) {
    memcpy(trimmed, s + a, b - a);
    trimmed[b - a] = 0;
  }
  if (type == FS_BOOLEAN && fits && (strcmp(trimmed, "true") == 0 || strcmp(trimmed, "false") == 0)) {
    fs_u8(out, 1);
    fs_u8(out, trimmed[0] == 't');
    return true;
  }
  if (type != FS_BOOLEAN && fits && b > a) {
    char *end;
    errno = 0;
    if (type == FS_FLOAT_T || type == FS_DOUBLE) {
      double d = strtod(trimmed, &end);
      if (*end == 0) return put_double(out, type, d, err);
    } else {
      size_t digits = trimmed[0] == '+' || trimmed[0] == '-';
      bool all_digits = digits < b - a;
      for (size_t i = digits; i < b - a; i++) all_digits &= trimmed[i] >= '0' && trimmed[i] <= '9';
      long long v = strtoll(trimmed, &end, 10);
      if (all_digits && errno != ERANGE) return put_integer(out, type, v, err);
      if (all_digits) return fail(err, "%s is out of range", trimmed);
    }
  }
  return fail(err, "\"%.*s\" is not a %s", (int)len, s, TYPE_NAMES[type]);
}

static bool put_cell(fs_bytes *out, fs_type type, const fs_value *v, fs_error *err) {
  switch (v->kind) {
    case FS_BOOL:
      if (type == FS_BOOLEAN) {
        fs_u8(out, 1);
        fs_u8(out, v->boolean);
        return true;
      }
      if (type == FS_STRING_T) {
        put_string(out, v->boolean ? "true" : "false", v->boolean ? 4 : 5);
        return true;
      }
      return fail(err, "found the boolean %s, expected a %s", v->boolean ? "true" : "false", TYPE_NAMES[type]);
    case FS_INT: return put_integer(out, type, v->integer, err);
    case FS_FLOAT: return put_double(out, type, v->number, err);
    case FS_STRING: return put_text(out, type, v->string, v->string_len, err);
    case FS_OBJECT: return fail(err, "found an object, expected a %s", TYPE_NAMES[type]);
    case FS_ARRAY: return fail(err, "found an array, expected a %s", TYPE_NAMES[type]);
    default: return fail(err, "no value");
  }
}

bool fs_map_row(const fs_mapper *m, uint8_t kind, uint16_t table, const uint8_t *payload, size_t len,
                fs_bytes *out, fs_error *err) {
  const char **names = malloc((m->count + 1) * sizeof *names);
  size_t *lens = malloc((m->count + 1) * sizeof *lens);
  fs_value *values = malloc((m->count + 1) * sizeof *values);
  for (size_t i = 0; i < m->count; i++) names[i] = m->columns[i].name, lens[i] = m->columns[i].name_len;
  bool ok = fs_read_object(payload, len, names, lens, m->count, values, err);
  size_t mark = out->len;
  if (ok) {
    fs_u8(out, kind);
    fs_u16(out, table);
    fs_u16(out, (uint16_t)m->count);
    for (size_t i = 0; ok && i < m->count; i++) {
      const fs_column *c = &m->columns[i];
      if (values[i].kind == FS_MISSING && m->partial && c->nullable) {
        fs_u8(out, FS_ABSENT);
        continue;
      }
      if (values[i].kind == FS_MISSING || values[i].kind == FS_NULL) {
        if (!c->nullable) {
          ok = fail(err, "column `%s` is NOT NULL but the payload has no value for it", c->name);
        } else {
          fs_u8(out, 0);
        }
        continue;
      }
      fs_error cell;
      if (!put_cell(out, c->type, &values[i], &cell)) {
        ok = fail(err, "column `%s` (%s): %s", c->name, TYPE_NAMES[c->type], cell.text);
      }
    }
    for (size_t i = 0; i < m->count; i++) fs_value_free(&values[i]);
  }
  if (!ok) out->len = mark;
  free(names);
  free(lens);
  free(values);
  return ok;
}

bool fs_field_text(const uint8_t *payload, size_t len, const char *name, char **text, bool *found, fs_error *err) {
  size_t name_len = strlen(name);
  fs_value v;
  *text = NULL;
  *found = false;
  if (!fs_read_object(payload, len, &name, &name_len, 1, &v, err)) return false;
  char buf[64];
  switch (v.kind) {
    case FS_MISSING: case FS_NULL: return true;
    case FS_STRING:
      *text = v.string;
      *found = true;
      return true;
    case FS_BOOL: *text = strdup(v.boolean ? "true" : "false"); break;
    case FS_INT:
      snprintf(buf, sizeof buf, "%lld", (long long)v.integer);
      *text = strdup(buf);
      break;
    case FS_FLOAT:
      number_text(v.number, buf, sizeof buf);
      *text = strdup(buf);
      break;
    default:
      return fail(err, "column `%s` (STRING): found %s, expected a STRING", name,
                  v.kind == FS_OBJECT ? "an object" : "an array");
  }
  *found = true;
  return true;
}
