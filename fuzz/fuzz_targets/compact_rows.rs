//! The compact-row decoder, which reads what a guest returns: arbitrary
//! bytes are read or refused, never panic (a row it accepts must give all
//! its cells); and rows written with the encoder read back cell for cell.
#![no_main]

use arbitrary::Arbitrary;
use fluss_row_codec::{Cell, RowKind, Rows, RowsBuilder};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug, Clone, PartialEq)]
enum Value {
    Null,
    Absent,
    Boolean(bool),
    TinyInt(i8),
    SmallInt(i16),
    Int(i32),
    BigInt(i64),
    Float(f32),
    Double(f64),
    String(String),
    Bytes(Vec<u8>),
    Decimal(String),
    Date(i32),
    Time(i32),
    Timestamp(i64),
    TimestampLtz(i64),
}

impl Value {
    fn cell(&self) -> Cell<'_> {
        match self {
            Value::Null => Cell::Null,
            Value::Absent => Cell::Absent,
            Value::Boolean(v) => Cell::Boolean(*v),
            Value::TinyInt(v) => Cell::TinyInt(*v),
            Value::SmallInt(v) => Cell::SmallInt(*v),
            Value::Int(v) => Cell::Int(*v),
            Value::BigInt(v) => Cell::BigInt(*v),
            Value::Float(v) => Cell::Float(*v),
            Value::Double(v) => Cell::Double(*v),
            Value::String(v) => Cell::String(v),
            Value::Bytes(v) => Cell::Bytes(v),
            Value::Decimal(v) => Cell::Decimal(v),
            Value::Date(v) => Cell::Date(*v),
            Value::Time(v) => Cell::Time(*v),
            Value::Timestamp(v) => Cell::Timestamp(*v),
            Value::TimestampLtz(v) => Cell::TimestampLtz(*v),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    raw: Vec<u8>,
    rows: Vec<(bool, u16, Vec<Value>)>,
}

/// Bitwise equality (a NaN written is the same NaN read).
fn same(a: Cell<'_>, b: Cell<'_>) -> bool {
    match (a, b) {
        (Cell::Float(x), Cell::Float(y)) => x.to_bits() == y.to_bits(),
        (Cell::Double(x), Cell::Double(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

fuzz_target!(|input: Input| {
    for row in Rows::new(&input.raw) {
        match row {
            Ok(row) => {
                assert_eq!(row.cells().count(), usize::from(row.cell_count));
                let _ = row.encoded_len();
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }

    let mut out = RowsBuilder::new();
    for (delete, table, values) in &input.rows {
        let kind = if *delete { RowKind::Delete } else { RowKind::Append };
        out.begin_row(kind, *table);
        for v in values {
            out.cell(v.cell());
        }
        out.end_row();
    }
    let bytes = out.into_bytes();
    let read: Vec<_> = Rows::new(&bytes)
        .collect::<Result<_, _>>()
        .expect("the encoder's rows decode");
    assert_eq!(read.len(), input.rows.len());
    for (row, (delete, table, values)) in read.iter().zip(&input.rows) {
        assert_eq!(row.kind == RowKind::Delete, *delete);
        assert_eq!(row.table, *table);
        let cells: Vec<Cell<'_>> = row.cells().collect();
        assert_eq!(cells.len(), values.len());
        for (got, sent) in cells.iter().zip(values) {
            assert!(same(*got, sent.cell()), "{got:?} != {sent:?}");
        }
    }
});
