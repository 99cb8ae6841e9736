// Package fluss is the plumbing of a Go transform for the Iggy -> Fluss
// sink, for the standard Go toolchain (GOOS=wasip1 GOARCH=wasm,
// -buildmode=c-shared): it implements the component model's canonical ABI
// for `wit/transform.wit` by hand (Go's 64-bit wasm layout cannot share the
// ABI's 32-bit records, which is why wit-bindgen-go needs TinyGo), hands
// messages to a per-message function, and encodes rows in the sink's
// compact row encoding. The core module is made a component with the WASI
// preview1 reactor adapter (cargo xtask build-transforms go).
package fluss

import (
	"encoding/binary"
	"unsafe"
)

// TableSchema is a table the sink knows: "database.table", columns, primary key.
type TableSchema struct {
	Path       string
	Columns    []Column
	PrimaryKey []string
}

// Column is one column: its name, Fluss type text and nullability.
type Column struct {
	Name     string
	DataType string
	Nullable bool
}

// Header is one message header.
type Header struct {
	Key   string
	Kind  uint8
	Value []byte
}

// Transform is what a Go transform provides.
type Transform struct {
	// Init checks the config and the sink's tables (the sink's own first);
	// an error fails the sink's open with its text.
	Init func(config map[string]string, tables []TableSchema) error
	// Handle appends one message's rows to out and returns how many (0
	// filters it out); an error dead-letters the message with its text.
	Handle func(m *Message, out *Output) (uint32, error)
}

var transform Transform

// Register sets the transform; call it from main's init.
func Register(t Transform) { transform = t }

// Memory handed to the host lives here until the call's post-return.
var pinned [][]byte

func alloc(size, align uint32) uint32 {
	if size == 0 {
		return align
	}
	buf := make([]byte, size+align)
	pinned = append(pinned, buf)
	addr := uint32(uintptr(unsafe.Pointer(&buf[0])))
	return (addr + align - 1) &^ (align - 1)
}

// The host's arguments are lowered into this arena: cabi_realloc must not
// allocate from the Go heap, as that can start a collection, which calls
// WASI, which a realloc may not do. It is sized (in calls, where allocating
// is allowed) to twice the most any call's arguments took.
var (
	argArena = make([]byte, 8<<20)
	argUsed  uint32
	argPeak  uint32
)

func argAlloc(size, align uint32) uint32 {
	base := uint32(uintptr(unsafe.Pointer(&argArena[0])))
	start := (base + argUsed + align - 1) &^ (align - 1)
	if start+size > base+uint32(len(argArena)) {
		// Past the arena: the Go heap, which may trap if it collects now;
		// the next arena will be big enough.
		argPeak = max(argPeak, argUsed+size+align)
		return alloc(size, align)
	}
	argUsed = start + size - base
	argPeak = max(argPeak, argUsed)
	return start
}

// resetArgs makes room for the next call's arguments.
func resetArgs() {
	argUsed = 0
	if want := 2 * argPeak; want > uint32(len(argArena)) {
		argArena = make([]byte, want)
	}
}

//go:wasmexport cabi_realloc
func cabiRealloc(oldPtr, oldSize, align, newSize uint32) uint32 {
	ptr := argAlloc(newSize, align)
	if oldSize > 0 {
		copy(mem(ptr, min(oldSize, newSize)), mem(oldPtr, min(oldSize, newSize)))
	}
	return ptr
}

func mem(ptr, n uint32) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(uintptr(ptr))), n)
}

func u32(ptr uint32) uint32 { return binary.LittleEndian.Uint32(mem(ptr, 4)) }
func u64(ptr uint32) uint64 { return binary.LittleEndian.Uint64(mem(ptr, 8)) }
func str(ptr uint32) string { return string(mem(u32(ptr), u32(ptr+4))) }
func bytesAt(ptr uint32) []byte {
	return append([]byte(nil), mem(u32(ptr), u32(ptr+4))...)
}

// list reads a list<T> (ptr, len) at ptr, calling each on every element.
func list(ptr, elemSize uint32, each func(elem uint32)) {
	base, n := u32(ptr), u32(ptr+4)
	for i := uint32(0); i < n; i++ {
		each(base + i*elemSize)
	}
}

func putU32(ptr, v uint32) { binary.LittleEndian.PutUint32(mem(ptr, 4), v) }

// lowerBytes copies b to host-visible memory and writes (ptr, len) at at.
func lowerBytes(at uint32, b []byte) {
	ptr := alloc(uint32(len(b)), 1)
	copy(mem(ptr, uint32(len(b))), b)
	putU32(at, ptr)
	putU32(at+4, uint32(len(b)))
}

// init: func(config: list<tuple<string, string>>, tables: list<table-schema>) -> result<_, string>
//
//go:wasmexport init
func exportInit(configPtr, configLen, tablesPtr, tablesLen uint32) uint32 {
	config := map[string]string{}
	for i := uint32(0); i < configLen; i++ {
		e := configPtr + i*16
		config[str(e)] = str(e + 8)
	}
	var tables []TableSchema
	for i := uint32(0); i < tablesLen; i++ {
		t := tablesPtr + i*24
		schema := TableSchema{Path: str(t)}
		list(t+8, 20, func(c uint32) {
			schema.Columns = append(schema.Columns, Column{str(c), str(c + 8), mem(c+16, 1)[0] != 0})
		})
		list(t+16, 8, func(k uint32) { schema.PrimaryKey = append(schema.PrimaryKey, str(k)) })
		tables = append(tables, schema)
	}
	resetArgs()
	result := alloc(12, 4)
	if err := transform.Init(config, tables); err != nil {
		mem(result, 1)[0] = 1
		lowerBytes(result+4, []byte(err.Error()))
	} else {
		mem(result, 1)[0] = 0
	}
	return result
}

//go:wasmexport cabi_post_init
func postInit(uint32) { pinned = nil }

// process: func(batch: batch) -> batch-output, the batch record passed by pointer.
//
//go:wasmexport process
func exportProcess(batch uint32) uint32 {
	var offsets []uint64
	list(batch+20, 8, func(e uint32) { offsets = append(offsets, u64(e)) })
	payloads := mem(u32(batch+44), u32(batch+48))
	var payloadEnds, headerEnds []uint32
	list(batch+52, 4, func(e uint32) { payloadEnds = append(payloadEnds, u32(e)) })
	var headers []Header
	list(batch+60, 20, func(h uint32) {
		headers = append(headers, Header{str(h), mem(h+8, 1)[0], bytesAt(h + 12)})
	})
	list(batch+68, 4, func(e uint32) { headerEnds = append(headerEnds, u32(e)) })

	out := &Output{}
	type outcome struct {
		rows   uint32
		reason string
		dead   bool
	}
	outcomes := make([]outcome, len(offsets))
	for i := range offsets {
		start, first := uint32(0), uint32(0)
		if i > 0 {
			start, first = payloadEnds[i-1], headerEnds[i-1]
		}
		m := &Message{Offset: offsets[i], Payload: payloads[start:payloadEnds[i]], Headers: headers[first:headerEnds[i]]}
		mark := len(out.Rows)
		rows, err := transform.Handle(m, out)
		if err != nil {
			out.Rows = out.Rows[:mark]
			outcomes[i] = outcome{reason: err.Error(), dead: true}
		} else {
			outcomes[i] = outcome{rows: rows}
		}
	}

	result := alloc(24, 4)
	list8 := alloc(uint32(12*len(outcomes)), 4)
	for i, o := range outcomes {
		e := list8 + uint32(i)*12
		if o.dead {
			mem(e, 1)[0] = 1
			lowerBytes(e+4, []byte(o.reason))
		} else {
			mem(e, 1)[0] = 0
			putU32(e+4, o.rows)
		}
	}
	putU32(result, list8)
	putU32(result+4, uint32(len(outcomes)))
	tables := alloc(uint32(8*len(out.tables)), 4)
	for i, t := range out.tables {
		lowerBytes(tables+uint32(i)*8, []byte(t))
	}
	putU32(result+8, tables)
	putU32(result+12, uint32(len(out.tables)))
	lowerBytes(result+16, out.Rows)
	resetArgs()
	return result
}

//go:wasmexport cabi_post_process
func postProcess(uint32) { pinned = nil }

// The WASI adapter's allocations come from this static arena, not from the
// Go heap: the adapter's memory must not move or be collected, and its
// allocations must not call back into WASI.
var adapterArena [1 << 20]byte
var adapterUsed uint32

//go:wasmexport cabi_realloc_adapter
func cabiReallocAdapter(oldPtr, oldSize, align, newSize uint32) uint32 {
	base := uint32(uintptr(unsafe.Pointer(&adapterArena[0])))
	start := (base + adapterUsed + align - 1) &^ (align - 1)
	if start+newSize > base+uint32(len(adapterArena)) {
		panic("the WASI adapter's arena is full")
	}
	adapterUsed = start + newSize - base
	if oldSize > 0 {
		copy(mem(start, min(oldSize, newSize)), mem(oldPtr, min(oldSize, newSize)))
	}
	return start
}
