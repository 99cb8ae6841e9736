"""Helpers for Python transforms of the Iggy -> Fluss sink.

A transform implements `wit/transform.wit`: `init(config, tables)` once, then
`process(batch)` per batch, returning one outcome per message and the rows in
the sink's compact row encoding (row-codec/src/lib.rs):

    row  := kind:u8 table:u16 cell-count:u16 cell*     (little-endian)
    cell := tag:u8 payload

This module gives messages one at a time (`Message`), collects rows and
outcomes (`Output`), and maps JSON objects onto columns by name with the same
rules as the Rust `json-to-row` for the types BOOLEAN, TINYINT, SMALLINT, INT,
BIGINT, FLOAT, DOUBLE and STRING (other column types are refused at init).
"""

import json
import struct

APPEND, UPSERT, DELETE = 0, 1, 2
KINDS = {"append": APPEND, "upsert": UPSERT, "delete": DELETE}

_INT_RANGES = {
    "TINYINT": (2, "<b", -(2**7), 2**7 - 1),
    "SMALLINT": (3, "<h", -(2**15), 2**15 - 1),
    "INT": (4, "<i", -(2**31), 2**31 - 1),
    "BIGINT": (5, "<q", -(2**63), 2**63 - 1),
}
SUPPORTED_TYPES = ("BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "STRING")


class Message:
    """One message of a batch: offset, payload bytes and headers."""

    def __init__(self, batch, i):
        start = batch.payload_ends[i - 1] if i > 0 else 0
        self.offset = batch.offsets[i]
        self.payload = batch.payloads[start : batch.payload_ends[i]]
        first = batch.header_ends[i - 1] if i > 0 else 0
        self.headers = batch.headers[first : batch.header_ends[i]]

    def header_str(self, key):
        """The value of header `key` as text, or None."""
        for h in self.headers:
            if h.key == key:
                return bytes(h.value).decode("utf-8", "replace")
        return None


def messages(batch):
    """The batch's messages in order."""
    return [Message(batch, i) for i in range(len(batch.offsets))]


class Output:
    """Rows and one outcome per message, as `process` returns them."""

    def __init__(self):
        self.rows = bytearray()
        self.tables = []

    def table_index(self, name):
        """0 for the sink's table (None), else the 1-based index of `name`."""
        if name is None:
            return 0
        try:
            return self.tables.index(name) + 1
        except ValueError:
            self.tables.append(name)
            return len(self.tables)


def parse_object(payload):
    """A payload as a JSON object; raises ValueError with the reason."""
    try:
        value = json.loads(bytes(payload))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"payload is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError("payload is JSON but not an object")
    return value


ABSENT = b"\x0f"
"""A cell left out of a partial update (not NULL: the column keeps its value)."""


class Mapper:
    """JSON objects onto one row of `columns` (a list of WIT `column`s). With
    `partial`, a field missing from the payload is an absent cell when its
    column is nullable (a partial update); null stays NULL."""

    def __init__(self, columns, partial=False):
        self.partial = partial
        self.columns = []
        for c in columns:
            data_type = c.data_type.replace(" NOT NULL", "")
            if data_type not in SUPPORTED_TYPES:
                raise ValueError(
                    f"column `{c.name}`: type {data_type} is not supported by this transform "
                    f"(supported: {', '.join(SUPPORTED_TYPES)})"
                )
            self.columns.append((c.name, data_type, c.nullable))

    def encode(self, kind, table, payload):
        """The encoded row for a JSON object payload; raises ValueError with the reason."""
        value = parse_object(payload)
        cells = bytearray()
        for name, data_type, nullable in self.columns:
            if self.partial and nullable and name not in value:
                cells += ABSENT
                continue
            v = value.get(name)
            if v is None:
                if not nullable:
                    raise ValueError(f"column `{name}` is NOT NULL but the payload has no value for it")
                cells += b"\x00"
                continue
            try:
                cells += _cell(data_type, v)
            except ValueError as e:
                raise ValueError(f"column `{name}` ({data_type}): {e}") from None
        return struct.pack("<BHH", kind, table, len(self.columns)) + cells


def _integer(data_type, v):
    if data_type in _INT_RANGES:
        tag, fmt, low, high = _INT_RANGES[data_type]
        if not low <= v <= high:
            raise ValueError(f"{v} is out of range")
        return bytes([tag]) + struct.pack(fmt, v)
    if data_type == "FLOAT":
        return b"\x06" + struct.pack("<f", float(v))
    if data_type == "DOUBLE":
        return b"\x07" + struct.pack("<d", float(v))
    if data_type == "STRING":
        return _string(str(v))
    raise ValueError(f"found the number {v}, expected a {data_type}")


def number_text(v):
    """A JSON number as text the way the Rust host writes it (3.0 is "3")."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e16:
        return str(int(v))
    return str(v)


def _string(s):
    b = s.encode("utf-8")
    return b"\x08" + struct.pack("<I", len(b)) + b


def _cell(data_type, v):
    if isinstance(v, bool):
        if data_type == "BOOLEAN":
            return b"\x01" + bytes([int(v)])
        if data_type == "STRING":
            return _string("true" if v else "false")
        raise ValueError(f"found the boolean {str(v).lower()}, expected a {data_type}")
    if isinstance(v, int):
        return _integer(data_type, v)
    if isinstance(v, float):
        if data_type == "FLOAT":
            return b"\x06" + struct.pack("<f", v)
        if data_type == "DOUBLE":
            return b"\x07" + struct.pack("<d", v)
        if data_type == "STRING":
            return _string(number_text(v))
        if v == int(v) and abs(v) < 9.0e18:
            return _integer(data_type, int(v))
        raise ValueError(f"found the number {v}, expected a {data_type}")
    if isinstance(v, str):
        return _text(data_type, v)
    what = "an object" if isinstance(v, dict) else "an array"
    raise ValueError(f"found {what}, expected a {data_type}")


def _text(data_type, s):
    bad = ValueError(f'"{s}" is not a {data_type}')
    t = s.strip()
    if data_type == "STRING":
        return _string(s)
    if data_type == "BOOLEAN":
        if t in ("true", "false"):
            return b"\x01" + bytes([t == "true"])
        raise bad
    if data_type in _INT_RANGES:
        if not t or not (t.lstrip("+-").isdigit()) or t.count("+") + t.count("-") > 1:
            raise bad
        return _integer(data_type, int(t))
    try:
        number = float(t)
    except ValueError:
        raise bad from None
    return _integer(data_type, number)


def run(batch, handle):
    """Calls `handle(message, output)` for each message: it appends rows to
    `output.rows` and returns how many (0 filters the message out); raising
    ValueError dead-letters the message with its text.
    Returns the WIT `batch-output`."""
    from wit_world.imports import types

    out = Output()
    outcomes = []
    for message in messages(batch):
        mark = len(out.rows)
        try:
            added = handle(message, out)
            outcomes.append(types.Outcome_Rows(added))
        except ValueError as e:
            del out.rows[mark:]
            outcomes.append(types.Outcome_DeadLetter(str(e)))
    return types.BatchOutput(outcomes=outcomes, tables=out.tables, rows=bytes(out.rows))
