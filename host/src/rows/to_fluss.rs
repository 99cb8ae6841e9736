//! Cells → Arrow arrays, for appends to log tables (from encoded rows, or
//! straight from the JSON mapping: see [`crate::rows::columns`]), and encoded rows
//! → Fluss `GenericRow`s, for upserts and deletes on primary-key tables.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, FixedSizeBinaryBuilder,
    Float32Builder, Float64Builder, Int8Builder, Int16Builder, Int32Builder, Int64Builder, StringBuilder,
    Time32MillisecondBuilder, Time32SecondBuilder, Time64MicrosecondBuilder, Time64NanosecondBuilder,
    TimestampMicrosecondBuilder, TimestampMillisecondBuilder, TimestampNanosecondBuilder,
    TimestampSecondBuilder,
};
use arrow::datatypes::{DataType as ArrowType, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use fluss::row::{Date, Datum, Decimal, GenericRow, Time, TimestampLtz, TimestampNtz};
use fluss_row_codec::{Cell, RowView};

use crate::rows::decimal::decimal_unscaled;
use crate::schema::{Column, DataType, TableSchema};

fn as_i64(cell: Cell<'_>) -> Option<i64> {
    match cell {
        Cell::TinyInt(v) => Some(v as i64),
        Cell::SmallInt(v) => Some(v as i64),
        Cell::Int(v) => Some(v as i64),
        Cell::BigInt(v) => Some(v),
        Cell::Date(v) | Cell::Time(v) => Some(v as i64),
        Cell::Timestamp(v) | Cell::TimestampLtz(v) => Some(v),
        _ => None,
    }
}

fn as_f64(cell: Cell<'_>) -> Option<f64> {
    match cell {
        Cell::Float(v) => Some(v as f64),
        Cell::Double(v) => Some(v),
        _ => None,
    }
}

fn scale_micros(micros: i64, unit: &TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => micros.div_euclid(1_000_000),
        TimeUnit::Millisecond => micros.div_euclid(1_000),
        TimeUnit::Microsecond => micros,
        TimeUnit::Nanosecond => micros.saturating_mul(1_000),
    }
}

/// The builder of one Arrow column, fed one cell at a time. Kept instead of
/// arrow's own `make_builder`: a typed builder per column, matched once a
/// cell, is faster than a `dyn ArrayBuilder` downcast at every cell (the
/// `row_path` bench's `rows_to_arrow_make_builder`, `docs/benchmarks.md`).
pub(crate) enum ColumnBuilder {
    Boolean(BooleanBuilder),
    Int8(Int8Builder),
    Int16(Int16Builder),
    Int32(Int32Builder),
    Int64(Int64Builder),
    Float32(Float32Builder),
    Float64(Float64Builder),
    Utf8(StringBuilder),
    Binary(BinaryBuilder),
    FixedSizeBinary(FixedSizeBinaryBuilder),
    /// The builder, the column's precision and scale (for the cell's text),
    /// and Arrow's.
    Decimal128(Decimal128Builder, (u8, u8), (u8, i8)),
    Date32(Date32Builder),
    Time32Second(Time32SecondBuilder),
    Time32Millisecond(Time32MillisecondBuilder),
    Time64Microsecond(Time64MicrosecondBuilder),
    Time64Nanosecond(Time64NanosecondBuilder),
    TimestampSecond(TimestampSecondBuilder),
    TimestampMillisecond(TimestampMillisecondBuilder),
    TimestampMicrosecond(TimestampMicrosecondBuilder),
    TimestampNanosecond(TimestampNanosecondBuilder),
}

impl ColumnBuilder {
    /// A builder for Arrow type `ty` of a `column` column, with room for `n`
    /// cells and, in a string or bytes column, `bytes` bytes of values.
    pub(crate) fn new(ty: &ArrowType, column: &DataType, n: usize, bytes: usize) -> Result<Self, String> {
        use ColumnBuilder as B;
        Ok(match ty {
            ArrowType::Boolean => B::Boolean(BooleanBuilder::with_capacity(n)),
            ArrowType::Int8 => B::Int8(Int8Builder::with_capacity(n)),
            ArrowType::Int16 => B::Int16(Int16Builder::with_capacity(n)),
            ArrowType::Int32 => B::Int32(Int32Builder::with_capacity(n)),
            ArrowType::Int64 => B::Int64(Int64Builder::with_capacity(n)),
            ArrowType::Float32 => B::Float32(Float32Builder::with_capacity(n)),
            ArrowType::Float64 => B::Float64(Float64Builder::with_capacity(n)),
            ArrowType::Utf8 => B::Utf8(StringBuilder::with_capacity(n, bytes)),
            ArrowType::Binary => B::Binary(BinaryBuilder::with_capacity(n, bytes)),
            ArrowType::FixedSizeBinary(width) => {
                B::FixedSizeBinary(FixedSizeBinaryBuilder::with_capacity(n, *width))
            }
            ArrowType::Decimal128(p, s) => {
                let DataType::Decimal(cp, cs) = *column else {
                    return Err(format!("a {column} column cannot be Arrow's {ty}"));
                };
                B::Decimal128(Decimal128Builder::with_capacity(n), (cp, cs), (*p, *s))
            }
            ArrowType::Date32 => B::Date32(Date32Builder::with_capacity(n)),
            ArrowType::Time32(TimeUnit::Second) => B::Time32Second(Time32SecondBuilder::with_capacity(n)),
            ArrowType::Time32(_) => B::Time32Millisecond(Time32MillisecondBuilder::with_capacity(n)),
            ArrowType::Time64(TimeUnit::Microsecond) => {
                B::Time64Microsecond(Time64MicrosecondBuilder::with_capacity(n))
            }
            ArrowType::Time64(_) => B::Time64Nanosecond(Time64NanosecondBuilder::with_capacity(n)),
            ArrowType::Timestamp(unit, tz) => {
                let tz = tz.clone();
                match unit {
                    TimeUnit::Second => {
                        B::TimestampSecond(TimestampSecondBuilder::with_capacity(n).with_timezone_opt(tz))
                    }
                    TimeUnit::Millisecond => B::TimestampMillisecond(
                        TimestampMillisecondBuilder::with_capacity(n).with_timezone_opt(tz),
                    ),
                    TimeUnit::Microsecond => B::TimestampMicrosecond(
                        TimestampMicrosecondBuilder::with_capacity(n).with_timezone_opt(tz),
                    ),
                    TimeUnit::Nanosecond => B::TimestampNanosecond(
                        TimestampNanosecondBuilder::with_capacity(n).with_timezone_opt(tz),
                    ),
                }
            }
            other => return Err(format!("Arrow type {other} is not supported by the sink")),
        })
    }

    /// Appends `cell` (checked against the column with `check_row`, or
    /// made for the column by the JSON mapping).
    #[inline]
    pub(crate) fn push(&mut self, cell: Cell<'_>) -> Result<(), String> {
        use ColumnBuilder as B;
        let mismatch = || format!("a {} cell where the column does not take one", cell.type_name());
        macro_rules! value {
            ($b:expr, $v:expr) => {
                match cell {
                    Cell::Null => $b.append_null(),
                    _ => $b.append_value($v.ok_or_else(mismatch)?),
                }
            };
        }
        let int = as_i64(cell);
        match self {
            B::Boolean(b) => value!(
                b,
                match cell {
                    Cell::Boolean(v) => Some(v),
                    _ => None,
                }
            ),
            B::Int8(b) => value!(b, int.map(|v| v as i8)),
            B::Int16(b) => value!(b, int.map(|v| v as i16)),
            B::Int32(b) => value!(b, int.map(|v| v as i32)),
            B::Int64(b) => value!(b, int),
            B::Float32(b) => value!(b, as_f64(cell).map(|v| v as f32)),
            B::Float64(b) => value!(b, as_f64(cell)),
            B::Utf8(b) => value!(
                b,
                match cell {
                    Cell::String(s) => Some(s),
                    _ => None,
                }
            ),
            B::Binary(b) => value!(
                b,
                match cell {
                    Cell::Bytes(v) => Some(v),
                    _ => None,
                }
            ),
            B::FixedSizeBinary(b) => match cell {
                Cell::Bytes(bytes) => b.append_value(bytes).map_err(|e| e.to_string())?,
                _ => b.append_null(),
            },
            B::Decimal128(b, (p, s), _) => match cell {
                Cell::Decimal(text) => b.append_value(decimal_unscaled(text, *p, *s)?),
                _ => b.append_null(),
            },
            B::Date32(b) => value!(b, int.map(|v| v as i32)),
            B::Time32Second(b) => value!(b, int.map(|v| (v / 1000) as i32)),
            B::Time32Millisecond(b) => value!(b, int.map(|v| v as i32)),
            B::Time64Microsecond(b) => value!(b, int.map(|v| v * 1000)),
            B::Time64Nanosecond(b) => value!(b, int.map(|v| v * 1_000_000)),
            B::TimestampSecond(b) => value!(b, int.map(|v| scale_micros(v, &TimeUnit::Second))),
            B::TimestampMillisecond(b) => value!(b, int.map(|v| scale_micros(v, &TimeUnit::Millisecond))),
            B::TimestampMicrosecond(b) => value!(b, int),
            B::TimestampNanosecond(b) => value!(b, int.map(|v| scale_micros(v, &TimeUnit::Nanosecond))),
        }
        Ok(())
    }

    /// The column built.
    pub(crate) fn finish(self) -> Result<ArrayRef, String> {
        use ColumnBuilder as B;
        fn done<T: arrow::array::ArrayBuilder>(mut b: T) -> ArrayRef {
            b.finish()
        }
        Ok(match self {
            B::Boolean(b) => done(b),
            B::Int8(b) => done(b),
            B::Int16(b) => done(b),
            B::Int32(b) => done(b),
            B::Int64(b) => done(b),
            B::Float32(b) => done(b),
            B::Float64(b) => done(b),
            B::Utf8(b) => done(b),
            B::Binary(b) => done(b),
            B::FixedSizeBinary(b) => done(b),
            B::Decimal128(mut b, _, (p, s)) => Arc::new(
                b.finish()
                    .with_precision_and_scale(p, s)
                    .map_err(|e| e.to_string())?,
            ),
            B::Date32(b) => done(b),
            B::Time32Second(b) => done(b),
            B::Time32Millisecond(b) => done(b),
            B::Time64Microsecond(b) => done(b),
            B::Time64Nanosecond(b) => done(b),
            B::TimestampSecond(b) => done(b),
            B::TimestampMillisecond(b) => done(b),
            B::TimestampMicrosecond(b) => done(b),
            B::TimestampNanosecond(b) => done(b),
        })
    }
}

/// One record batch from rows checked against `schema` (`check_row`), in
/// one pass over their cells.
pub(crate) fn record_batch(
    rows: &[RowView<'_>],
    schema: &TableSchema,
    arrow_schema: &SchemaRef,
) -> Result<RecordBatch, String> {
    let bytes = rows.len() * 16;
    let mut builders = arrow_schema
        .fields()
        .iter()
        .zip(&schema.columns)
        .map(|(field, column)| ColumnBuilder::new(field.data_type(), &column.data_type, rows.len(), bytes))
        .collect::<Result<Vec<_>, _>>()?;
    for row in rows {
        for ((cell, builder), column) in row.cells().zip(&mut builders).zip(&schema.columns) {
            builder
                .push(cell)
                .map_err(|e| format!("column `{}`: {e}", column.name))?;
        }
        // A row made before the table's last columns were added (see
        // `TableSchema::added_columns`): NULL in them.
        for builder in builders.iter_mut().skip(row.cell_count as usize) {
            builder.push(Cell::Null)?;
        }
    }
    let columns = builders
        .into_iter()
        .map(ColumnBuilder::finish)
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(arrow_schema.clone(), columns).map_err(|e| e.to_string())
}

/// One Fluss row from a row already checked against `schema`.
pub(crate) fn generic_row(row: &RowView<'_>, schema: &TableSchema) -> Result<GenericRow<'static>, String> {
    let mut out = GenericRow::new(schema.columns.len());
    for (i, (cell, column)) in row.cells().zip(&schema.columns).enumerate() {
        out.set_field(i, datum(cell, column)?);
    }
    Ok(out)
}

/// `cell` (checked against `column`, see [`crate::rows::check::check_cell`])
/// as fluss-rs takes it. An absent cell is NULL: a partial update's writer
/// leaves it out by its target columns.
pub(crate) fn datum(cell: Cell<'_>, column: &Column) -> Result<Datum<'static>, String> {
    Ok(match (cell, column.data_type) {
        (Cell::Null | Cell::Absent, _) => Datum::Null,
        (Cell::Boolean(v), _) => v.into(),
        (c, DataType::TinyInt) => (as_i64(c).expect("int") as i8).into(),
        (c, DataType::SmallInt) => (as_i64(c).expect("int") as i16).into(),
        (c, DataType::Int) => (as_i64(c).expect("int") as i32).into(),
        (c, DataType::BigInt) => as_i64(c).expect("int").into(),
        (c, DataType::Float) => (as_f64(c).expect("float") as f32).into(),
        (c, DataType::Double) => as_f64(c).expect("double").into(),
        (Cell::String(s), _) => s.to_string().into(),
        (Cell::Bytes(b), _) => b.to_vec().into(),
        (Cell::Decimal(text), DataType::Decimal(p, s)) => {
            let unscaled =
                decimal_unscaled(text, p, s).map_err(|e| format!("column `{}`: {e}", column.name))?;
            let bytes = unscaled.to_be_bytes();
            Decimal::from_unscaled_bytes(&bytes, p as u32, s as u32)
                .map_err(|e| e.to_string())?
                .into()
        }
        (Cell::Date(d), _) => Date::new(d).into(),
        (Cell::Time(ms), _) => Time::new(ms).into(),
        (Cell::Timestamp(us), _) => {
            TimestampNtz::from_millis_nanos(us.div_euclid(1000), (us.rem_euclid(1000) * 1000) as i32)
                .map_err(|e| e.to_string())?
                .into()
        }
        (Cell::TimestampLtz(us), _) => {
            TimestampLtz::from_millis_nanos(us.div_euclid(1000), (us.rem_euclid(1000) * 1000) as i32)
                .map_err(|e| e.to_string())?
                .into()
        }
        (cell, _) => {
            return Err(format!(
                "column `{}`: cannot write a {} cell",
                column.name,
                cell.type_name()
            ));
        }
    })
}

/// [`record_batch`] made with arrow's own builders (`make_builder`, each
/// cell appended through a downcast to its column's builder), for the
/// `row_path` bench to measure against [`ColumnBuilder`]. Covers the types
/// of the bench's table: BIGINT, STRING, DECIMAL and TIMESTAMP(6).
#[cfg(feature = "test-support")]
pub(crate) fn record_batch_with_arrow_builders(
    rows: &[RowView<'_>],
    schema: &TableSchema,
    arrow_schema: &SchemaRef,
) -> Result<RecordBatch, String> {
    use arrow::array::{ArrayBuilder, make_builder};

    fn builder<T: 'static>(b: &mut Box<dyn ArrayBuilder>) -> &mut T {
        b.as_any_mut()
            .downcast_mut::<T>()
            .expect("make_builder made this column's builder")
    }
    let mut builders: Vec<Box<dyn ArrayBuilder>> = arrow_schema
        .fields()
        .iter()
        .map(|field| make_builder(field.data_type(), rows.len()))
        .collect();
    for row in rows {
        for ((cell, b), column) in row.cells().zip(&mut builders).zip(&schema.columns) {
            let null = matches!(cell, Cell::Null);
            match (column.data_type, cell) {
                (DataType::BigInt, _) => builder::<Int64Builder>(b).append_option(as_i64(cell)),
                (DataType::String, Cell::String(s)) => builder::<StringBuilder>(b).append_value(s),
                (DataType::String, _) if null => builder::<StringBuilder>(b).append_null(),
                (DataType::Decimal(p, s), Cell::Decimal(text)) => {
                    builder::<Decimal128Builder>(b).append_value(decimal_unscaled(text, p, s)?)
                }
                (DataType::Decimal(..), _) if null => builder::<Decimal128Builder>(b).append_null(),
                (DataType::Timestamp(6), _) => {
                    builder::<TimestampMicrosecondBuilder>(b).append_option(as_i64(cell))
                }
                (other, cell) => {
                    return Err(format!(
                        "column `{}`: a {} cell in a {other} column is outside the comparison",
                        column.name,
                        cell.type_name()
                    ));
                }
            }
        }
    }
    let columns = builders
        .iter_mut()
        .zip(arrow_schema.fields())
        .map(|(b, field)| match field.data_type() {
            ArrowType::Decimal128(p, s) => {
                let array = builder::<Decimal128Builder>(b).finish();
                Ok(Arc::new(
                    array
                        .with_precision_and_scale(*p, *s)
                        .map_err(|e| e.to_string())?,
                ) as ArrayRef)
            }
            _ => Ok(b.finish()),
        })
        .collect::<Result<Vec<_>, String>>()?;
    RecordBatch::try_new(arrow_schema.clone(), columns).map_err(|e| e.to_string())
}
