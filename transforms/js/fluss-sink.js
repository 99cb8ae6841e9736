// Helpers for JavaScript transforms of the Iggy -> Fluss sink.
//
// A transform implements `wit/transform.wit`: `init(config, tables)` once,
// then `process(batch)` per batch, returning one outcome per message and the
// rows in the sink's compact row encoding (row-codec/src/lib.rs):
//
//   row  := kind:u8 table:u16 cell-count:u16 cell*     (little-endian)
//   cell := tag:u8 payload
//
// This module gives messages one at a time, collects rows and outcomes, and
// maps JSON objects onto columns by name with the same rules as the Rust
// `json-to-row` for BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE and
// STRING (other column types are refused at init). JSON numbers are doubles
// here: BIGINT values beyond 2^53 lose precision.

export const APPEND = 0;
export const UPSERT = 1;
export const DELETE = 2;
export const KINDS = { append: APPEND, upsert: UPSERT, delete: DELETE };

const INTS = {
  TINYINT: [2, 1, -(2 ** 7), 2 ** 7 - 1],
  SMALLINT: [3, 2, -(2 ** 15), 2 ** 15 - 1],
  INT: [4, 4, -(2 ** 31), 2 ** 31 - 1],
  BIGINT: [5, 8, -(2 ** 63), 2 ** 63 - 1],
};
export const SUPPORTED_TYPES = ['BOOLEAN', 'TINYINT', 'SMALLINT', 'INT', 'BIGINT', 'FLOAT', 'DOUBLE', 'STRING'];

const utf8 = new TextEncoder();
const utf8Decoder = new TextDecoder();

/** A growable little-endian byte buffer. */
export class Bytes {
  constructor() {
    this.buf = new Uint8Array(1024);
    this.view = new DataView(this.buf.buffer);
    this.len = 0;
  }
  reserve(n) {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.len));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  u8(v) { this.reserve(1); this.view.setUint8(this.len, v); this.len += 1; }
  i8(v) { this.reserve(1); this.view.setInt8(this.len, v); this.len += 1; }
  u16(v) { this.reserve(2); this.view.setUint16(this.len, v, true); this.len += 2; }
  i16(v) { this.reserve(2); this.view.setInt16(this.len, v, true); this.len += 2; }
  u32(v) { this.reserve(4); this.view.setUint32(this.len, v, true); this.len += 4; }
  i32(v) { this.reserve(4); this.view.setInt32(this.len, v, true); this.len += 4; }
  i64(v) { this.reserve(8); this.view.setBigInt64(this.len, BigInt(v), true); this.len += 8; }
  f32(v) { this.reserve(4); this.view.setFloat32(this.len, v, true); this.len += 4; }
  f64(v) { this.reserve(8); this.view.setFloat64(this.len, v, true); this.len += 8; }
  raw(bytes) { this.reserve(bytes.length); this.buf.set(bytes, this.len); this.len += bytes.length; }
  truncate(len) { this.len = len; }
  bytes() { return this.buf.slice(0, this.len); }
}

/** The batch's messages in order: { offset, payload (Uint8Array), headers, headerStr(key) }. */
export function messages(batch) {
  const out = [];
  for (let i = 0; i < batch.offsets.length; i++) {
    const start = i > 0 ? batch.payloadEnds[i - 1] : 0;
    const first = i > 0 ? batch.headerEnds[i - 1] : 0;
    const headers = batch.headers.slice(first, batch.headerEnds[i]);
    out.push({
      offset: batch.offsets[i],
      payload: batch.payloads.subarray(start, batch.payloadEnds[i]),
      headers,
      headerStr(key) {
        const h = headers.find((h) => h.key === key);
        return h === undefined ? undefined : utf8Decoder.decode(h.value);
      },
    });
  }
  return out;
}

/** Rows and routed tables, as `process` returns them. */
export class Output {
  constructor() {
    this.rows = new Bytes();
    this.tables = [];
  }
  /** 0 for the sink's table (undefined), else the 1-based index of `name`. */
  tableIndex(name) {
    if (name === undefined) return 0;
    const i = this.tables.indexOf(name);
    if (i >= 0) return i + 1;
    this.tables.push(name);
    return this.tables.length;
  }
}

/** Why a message cannot become rows; its message becomes the dead letter's reason. */
export class DeadLetter extends Error {}

/** Parses a payload as a JSON object, or throws DeadLetter. */
export function parseObject(payload) {
  let value;
  try {
    value = JSON.parse(utf8Decoder.decode(payload));
  } catch (e) {
    throw new DeadLetter(`payload is not valid JSON: ${e.message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new DeadLetter('payload is JSON but not an object');
  }
  return value;
}

/** A JSON number as text the way the Rust host writes it. */
export function numberText(v) {
  return Number.isInteger(v) && Math.abs(v) < 1e16 ? v.toFixed(0) : String(v);
}

function integer(out, type, v) {
  if (type in INTS) {
    const [tag, size, low, high] = INTS[type];
    if (v < low || v > high) throw new DeadLetter(`${numberText(v)} is out of range`);
    out.u8(tag);
    if (size === 1) out.i8(v);
    else if (size === 2) out.i16(v);
    else if (size === 4) out.i32(v);
    else out.i64(v);
  } else if (type === 'FLOAT') {
    out.u8(6);
    out.f32(v);
  } else if (type === 'DOUBLE') {
    out.u8(7);
    out.f64(v);
  } else if (type === 'STRING') {
    string(out, numberText(v));
  } else {
    throw new DeadLetter(`found the number ${numberText(v)}, expected a ${type}`);
  }
}

function string(out, s) {
  const b = utf8.encode(s);
  out.u8(8);
  out.u32(b.length);
  out.raw(b);
}

function cell(out, type, v) {
  if (typeof v === 'boolean') {
    if (type === 'BOOLEAN') {
      out.u8(1);
      out.u8(v ? 1 : 0);
    } else if (type === 'STRING') string(out, v ? 'true' : 'false');
    else throw new DeadLetter(`found the boolean ${v}, expected a ${type}`);
  } else if (typeof v === 'number') {
    if (type === 'FLOAT' || type === 'DOUBLE' || type === 'STRING' || Number.isInteger(v)) integer(out, type, v);
    else throw new DeadLetter(`found the number ${v}, expected a ${type}`);
  } else if (typeof v === 'string') {
    const t = v.trim();
    const bad = new DeadLetter(`"${v}" is not a ${type}`);
    if (type === 'STRING') string(out, v);
    else if (type === 'BOOLEAN') {
      if (t !== 'true' && t !== 'false') throw bad;
      out.u8(1);
      out.u8(t === 'true' ? 1 : 0);
    } else if (type in INTS) {
      if (!/^[+-]?[0-9]+$/.test(t)) throw bad;
      integer(out, type, Number(t));
    } else {
      const n = Number(t);
      if (t === '' || Number.isNaN(n)) throw bad;
      integer(out, type, n);
    }
  } else {
    throw new DeadLetter(`found ${Array.isArray(v) ? 'an array' : 'an object'}, expected a ${type}`);
  }
}

/** JSON objects onto one row of `columns` (WIT `column` records). */
/** The tag of a cell left out of a partial update (not NULL: the column keeps its value). */
export const ABSENT = 15;

/**
 * JSON objects onto one row of `columns`. With `partial`, a field missing from
 * the payload is an absent cell when its column is nullable (a partial
 * update); null stays NULL.
 */
export class Mapper {
  constructor(columns, partial = false) {
    this.partial = partial;
    this.columns = columns.map((c) => {
      const type = c.dataType.replace(' NOT NULL', '');
      if (!SUPPORTED_TYPES.includes(type)) {
        throw `column \`${c.name}\`: type ${type} is not supported by this transform (supported: ${SUPPORTED_TYPES.join(', ')})`;
      }
      return [c.name, type, c.nullable];
    });
  }

  /** Appends the row for a JSON object payload to `out`, or throws DeadLetter. */
  encode(out, kind, table, payload) {
    const value = parseObject(payload);
    out.u8(kind);
    out.u16(table);
    out.u16(this.columns.length);
    for (const [name, type, nullable] of this.columns) {
      const v = value[name];
      if (this.partial && nullable && !Object.hasOwn(value, name)) {
        out.u8(ABSENT);
        continue;
      }
      if (v === undefined || v === null) {
        if (!nullable) throw new DeadLetter(`column \`${name}\` is NOT NULL but the payload has no value for it`);
        out.u8(0);
        continue;
      }
      try {
        cell(out, type, v);
      } catch (e) {
        if (e instanceof DeadLetter) throw new DeadLetter(`column \`${name}\` (${type}): ${e.message}`);
        throw e;
      }
    }
  }
}

/**
 * Calls `handle(message, output)` for each message: it appends rows to
 * `output.rows` and returns how many (0 filters the message out); throwing
 * DeadLetter dead-letters the message with its text. Returns the WIT
 * `batch-output`.
 */
export function run(batch, handle) {
  const out = new Output();
  const outcomes = [];
  for (const message of messages(batch)) {
    const mark = out.rows.len;
    try {
      outcomes.push({ tag: 'rows', val: handle(message, out) });
    } catch (e) {
      if (!(e instanceof DeadLetter)) throw e;
      out.rows.truncate(mark);
      outcomes.push({ tag: 'dead-letter', val: e.message });
    }
  }
  return { outcomes, tables: out.tables, rows: out.rows.bytes() };
}
