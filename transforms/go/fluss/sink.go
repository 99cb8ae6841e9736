package fluss

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Row kinds.
const (
	Append uint8 = 0
	Upsert uint8 = 1
	Delete uint8 = 2
)

// Message is one message of a batch.
type Message struct {
	Offset  uint64
	Payload []byte
	Headers []Header
}

// HeaderText is the value of header key as text, and whether it is there.
func (m *Message) HeaderText(key string) (string, bool) {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// Output collects rows (compact encoding) and routed table names.
type Output struct {
	Rows   []byte
	tables []string
}

// TableIndex is 0 for the sink's table (""), else the 1-based index of name.
func (o *Output) TableIndex(name string) uint16 {
	if name == "" {
		return 0
	}
	for i, t := range o.tables {
		if t == name {
			return uint16(i + 1)
		}
	}
	o.tables = append(o.tables, name)
	return uint16(len(o.tables))
}

// SupportedTypes are the column types the JSON mapping handles.
var SupportedTypes = []string{"BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "STRING"}

type column struct {
	name     string
	typ      string
	nullable bool
}

// Absent is the tag of a cell left out of a partial update (not NULL: the
// column keeps its value in the table).
const Absent byte = 15

// Mapper maps JSON objects onto one row of a table's columns by name, with
// the same rules as the Rust json-to-row for the supported types. With
// Partial set, a field missing from the payload is an absent cell when its
// column is nullable (a partial update); null stays NULL.
type Mapper struct {
	columns []column
	Partial bool
}

// NewMapper refuses a column of a type it does not support.
func NewMapper(columns []Column) (*Mapper, error) {
	m := &Mapper{}
	for _, c := range columns {
		t := strings.TrimSuffix(c.DataType, " NOT NULL")
		supported := false
		for _, s := range SupportedTypes {
			supported = supported || s == t
		}
		if !supported {
			return nil, fmt.Errorf("column `%s`: type %s is not supported by this transform (supported: %s)",
				c.Name, t, strings.Join(SupportedTypes, ", "))
		}
		m.columns = append(m.columns, column{c.Name, t, c.Nullable})
	}
	return m, nil
}

// ParseObject reads a payload as a JSON object, numbers kept as text.
func ParseObject(payload []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("payload is not valid JSON: %v", err)
	}
	if _, err := d.Token(); err == nil {
		return nil, fmt.Errorf("payload is not valid JSON: trailing characters")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("payload is JSON but not an object")
	}
	return obj, nil
}

// NumberText writes a JSON number the way the Rust host does.
func NumberText(n json.Number) string {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, _ := strconv.ParseFloat(string(n), 64)
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

var intRanges = map[string][3]int64{
	"TINYINT":  {2, math.MinInt8, math.MaxInt8},
	"SMALLINT": {3, math.MinInt16, math.MaxInt16},
	"INT":      {4, math.MinInt32, math.MaxInt32},
	"BIGINT":   {5, math.MinInt64, math.MaxInt64},
}
var intSizes = map[string]int{"TINYINT": 1, "SMALLINT": 2, "INT": 4, "BIGINT": 8}

func putString(out []byte, s string) []byte {
	out = append(out, 8)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(s)))
	return append(out, s...)
}

func putInteger(out []byte, t string, v int64) ([]byte, error) {
	if r, ok := intRanges[t]; ok {
		if v < r[1] || v > r[2] {
			return out, fmt.Errorf("%d is out of range", v)
		}
		out = append(out, byte(r[0]))
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(v))
		return append(out, b[:intSizes[t]]...), nil
	}
	switch t {
	case "FLOAT":
		return binary.LittleEndian.AppendUint32(append(out, 6), math.Float32bits(float32(v))), nil
	case "DOUBLE":
		return binary.LittleEndian.AppendUint64(append(out, 7), math.Float64bits(float64(v))), nil
	case "STRING":
		return putString(out, strconv.FormatInt(v, 10)), nil
	}
	return out, fmt.Errorf("found the number %d, expected a %s", v, t)
}

func putFloat(out []byte, t string, f float64, text string) ([]byte, error) {
	switch t {
	case "FLOAT":
		return binary.LittleEndian.AppendUint32(append(out, 6), math.Float32bits(float32(f))), nil
	case "DOUBLE":
		return binary.LittleEndian.AppendUint64(append(out, 7), math.Float64bits(f)), nil
	case "STRING":
		return putString(out, text), nil
	}
	if f == math.Trunc(f) && math.Abs(f) < 9.0e18 {
		return putInteger(out, t, int64(f))
	}
	return out, fmt.Errorf("found the number %s, expected a %s", text, t)
}

func putCell(out []byte, t string, v any) ([]byte, error) {
	switch v := v.(type) {
	case bool:
		switch t {
		case "BOOLEAN":
			if v {
				return append(out, 1, 1), nil
			}
			return append(out, 1, 0), nil
		case "STRING":
			return putString(out, strconv.FormatBool(v)), nil
		}
		return out, fmt.Errorf("found the boolean %t, expected a %s", v, t)
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return putInteger(out, t, i)
		}
		f, _ := strconv.ParseFloat(string(v), 64)
		return putFloat(out, t, f, NumberText(v))
	case string:
		return putText(out, t, v)
	case []any:
		return out, fmt.Errorf("found an array, expected a %s", t)
	default:
		return out, fmt.Errorf("found an object, expected a %s", t)
	}
}

func putText(out []byte, t, s string) ([]byte, error) {
	bad := fmt.Errorf("\"%s\" is not a %s", s, t)
	trimmed := strings.TrimSpace(s)
	switch t {
	case "STRING":
		return putString(out, s), nil
	case "BOOLEAN":
		switch trimmed {
		case "true":
			return append(out, 1, 1), nil
		case "false":
			return append(out, 1, 0), nil
		}
		return out, bad
	case "FLOAT", "DOUBLE":
		f, err := strconv.ParseFloat(trimmed, 64)
		if err != nil && !strings.Contains(err.Error(), "range") {
			return out, bad
		}
		return putFloat(out, t, f, trimmed)
	}
	digits := strings.TrimLeft(trimmed, "+-")
	if digits == "" || len(trimmed)-len(digits) > 1 || strings.Trim(digits, "0123456789") != "" {
		return out, bad
	}
	i, err := strconv.ParseInt(trimmed, 10, 64)
	if err != nil {
		return out, fmt.Errorf("%s is out of range", trimmed)
	}
	return putInteger(out, t, i)
}

// Encode appends the row of kind for table (0: the sink's) mapped from a
// JSON object payload to rows; an error says why the payload does not map.
func (m *Mapper) Encode(rows []byte, kind uint8, table uint16, payload []byte) ([]byte, error) {
	obj, err := ParseObject(payload)
	if err != nil {
		return rows, err
	}
	out := append(rows, kind)
	out = binary.LittleEndian.AppendUint16(out, table)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(m.columns)))
	for _, c := range m.columns {
		v, present := obj[c.name]
		if !present && m.Partial && c.nullable {
			out = append(out, Absent)
			continue
		}
		if !present || v == nil {
			if !c.nullable {
				return rows, fmt.Errorf("column `%s` is NOT NULL but the payload has no value for it", c.name)
			}
			out = append(out, 0)
			continue
		}
		if out, err = putCell(out, c.typ, v); err != nil {
			return rows, fmt.Errorf("column `%s` (%s): %v", c.name, c.typ, err)
		}
	}
	return out, nil
}

// FieldText is a top-level field as the Rust host reads it for routing:
// strings as they are, numbers and booleans as JSON text; ok is false when
// the field is absent or null.
func FieldText(payload []byte, name string) (text string, ok bool, err error) {
	obj, err := ParseObject(payload)
	if err != nil {
		return "", false, err
	}
	switch v := obj[name].(type) {
	case nil:
		return "", false, nil
	case string:
		return v, true, nil
	case bool:
		return strconv.FormatBool(v), true, nil
	case json.Number:
		return NumberText(v), true, nil
	case []any:
		return "", false, fmt.Errorf("column `%s` (STRING): found an array, expected a STRING", name)
	default:
		return "", false, fmt.Errorf("column `%s` (STRING): found an object, expected a STRING", name)
	}
}
