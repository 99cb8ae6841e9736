//! Encoded rows → Arrow arrays, for appends to log tables, and → Fluss
//! `GenericRow`s, for upserts and deletes on primary-key tables.

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

use crate::schema::{DataType, TableSchema};

/// Decimal text as an unscaled integer at `scale`, rounded half away from
/// zero, checked against `precision`.
pub fn decimal_unscaled(text: &str, precision: u8, scale: u8) -> Result<i128, String> {
    let t = text.trim();
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let bad = || format!("\"{text}\" is not a decimal number");
    if (int.is_empty() && frac.is_empty()) || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let mut value: i128 = 0;
    let push = |v: i128, d: u8| v.checked_mul(10).and_then(|v| v.checked_add((d - b'0') as i128));
    for d in int.bytes() {
        value = push(value, d).ok_or_else(bad)?;
    }
    let frac = frac.as_bytes();
    for i in 0..scale as usize {
        value = push(value, *frac.get(i).unwrap_or(&b'0')).ok_or_else(bad)?;
    }
    if frac.get(scale as usize).is_some_and(|&d| d >= b'5') {
        value += 1;
    }
    if value >= 10i128.pow(precision as u32) {
        return Err(format!("{t} does not fit DECIMAL({precision}, {scale})"));
    }
    Ok(if negative { -value } else { value })
}

/// Whether a row's cells convert to the table's Arrow types (the checks that
/// the codec's type check cannot make: decimal precision after rounding).
pub fn convertible(row: &RowView<'_>, schema: &TableSchema) -> Result<(), String> {
    for (cell, column) in row.cells().zip(&schema.columns) {
        if let (Cell::Decimal(text), DataType::Decimal(p, s)) = (cell, column.data_type) {
            decimal_unscaled(text, p, s).map_err(|e| format!("column `{}`: {e}", column.name))?;
        }
    }
    Ok(())
}

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

/// Builds one Arrow column from the `index`-th cell of each row.
fn column(rows: &[RowView<'_>], index: usize, ty: &ArrowType, column: &DataType) -> Result<ArrayRef, String> {
    let cells = rows.iter().map(|r| {
        r.cells()
            .nth(index)
            .expect("rows were checked against the schema")
    });
    macro_rules! build {
        ($builder:expr, $convert:expr) => {{
            let mut b = $builder;
            for cell in cells {
                match cell {
                    Cell::Null => b.append_null(),
                    other => b.append_value($convert(other)),
                }
            }
            Arc::new(b.finish()) as ArrayRef
        }};
    }
    let n = rows.len();
    let int = |c| as_i64(c).expect("checked integer");
    Ok(match ty {
        ArrowType::Boolean => build!(BooleanBuilder::with_capacity(n), |c| matches!(
            c,
            Cell::Boolean(true)
        )),
        ArrowType::Int8 => build!(Int8Builder::with_capacity(n), |c| int(c) as i8),
        ArrowType::Int16 => build!(Int16Builder::with_capacity(n), |c| int(c) as i16),
        ArrowType::Int32 => build!(Int32Builder::with_capacity(n), |c| int(c) as i32),
        ArrowType::Int64 => build!(Int64Builder::with_capacity(n), int),
        ArrowType::Float32 => build!(Float32Builder::with_capacity(n), |c| as_f64(c).expect("float")
            as f32),
        ArrowType::Float64 => build!(Float64Builder::with_capacity(n), |c| as_f64(c).expect("double")),
        ArrowType::Utf8 => build!(StringBuilder::with_capacity(n, n * 16), |c| match c {
            Cell::String(s) => s,
            _ => unreachable!("checked string"),
        }),
        ArrowType::Binary => build!(BinaryBuilder::with_capacity(n, n * 16), |c| match c {
            Cell::Bytes(b) => b,
            _ => unreachable!("checked bytes"),
        }),
        ArrowType::FixedSizeBinary(width) => {
            let mut b = FixedSizeBinaryBuilder::with_capacity(n, *width);
            for cell in cells {
                match cell {
                    Cell::Bytes(bytes) => b.append_value(bytes).map_err(|e| e.to_string())?,
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        ArrowType::Decimal128(p, s) => {
            let DataType::Decimal(cp, cs) = *column else {
                unreachable!("decimal column")
            };
            let mut b = Decimal128Builder::with_capacity(n);
            for cell in cells {
                match cell {
                    Cell::Decimal(text) => b.append_value(decimal_unscaled(text, cp, cs)?),
                    _ => b.append_null(),
                }
            }
            Arc::new(
                b.finish()
                    .with_precision_and_scale(*p, *s)
                    .map_err(|e| e.to_string())?,
            )
        }
        ArrowType::Date32 => build!(Date32Builder::with_capacity(n), |c| int(c) as i32),
        ArrowType::Time32(TimeUnit::Second) => {
            build!(Time32SecondBuilder::with_capacity(n), |c| (int(c) / 1000) as i32)
        }
        ArrowType::Time32(_) => build!(Time32MillisecondBuilder::with_capacity(n), |c| int(c) as i32),
        ArrowType::Time64(TimeUnit::Microsecond) => {
            build!(Time64MicrosecondBuilder::with_capacity(n), |c| int(c) * 1000)
        }
        ArrowType::Time64(_) => build!(Time64NanosecondBuilder::with_capacity(n), |c| int(c) * 1_000_000),
        ArrowType::Timestamp(unit, tz) => {
            let tz = tz.clone();
            let v = |c| scale_micros(int(c), unit);
            match unit {
                TimeUnit::Second => build!(TimestampSecondBuilder::with_capacity(n).with_timezone_opt(tz), v),
                TimeUnit::Millisecond => build!(
                    TimestampMillisecondBuilder::with_capacity(n).with_timezone_opt(tz),
                    v
                ),
                TimeUnit::Microsecond => build!(
                    TimestampMicrosecondBuilder::with_capacity(n).with_timezone_opt(tz),
                    v
                ),
                TimeUnit::Nanosecond => build!(
                    TimestampNanosecondBuilder::with_capacity(n).with_timezone_opt(tz),
                    v
                ),
            }
        }
        other => return Err(format!("Arrow type {other} is not supported by the sink")),
    })
}

/// One record batch from rows already checked against `schema`.
pub fn record_batch(
    rows: &[RowView<'_>],
    schema: &TableSchema,
    arrow_schema: &SchemaRef,
) -> Result<RecordBatch, String> {
    let columns = arrow_schema
        .fields()
        .iter()
        .zip(&schema.columns)
        .enumerate()
        .map(|(i, (field, col))| column(rows, i, field.data_type(), &col.data_type))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(arrow_schema.clone(), columns).map_err(|e| e.to_string())
}

/// One Fluss row from a row already checked against `schema`.
pub fn generic_row(row: &RowView<'_>, schema: &TableSchema) -> Result<GenericRow<'static>, String> {
    let mut out = GenericRow::new(schema.columns.len());
    for (i, (cell, column)) in row.cells().zip(&schema.columns).enumerate() {
        let datum: Datum<'static> = match (cell, column.data_type) {
            (Cell::Null, _) => Datum::Null,
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
        };
        out.set_field(i, datum);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_scale_round_and_check_precision() {
        assert_eq!(decimal_unscaled("12.3", 10, 2), Ok(1230));
        assert_eq!(decimal_unscaled("-12.345", 10, 2), Ok(-1235));
        assert_eq!(decimal_unscaled("12.344", 10, 2), Ok(1234));
        assert_eq!(decimal_unscaled(".5", 3, 0), Ok(1));
        assert_eq!(decimal_unscaled("7", 3, 1), Ok(70));
        assert!(
            decimal_unscaled("99.996", 4, 2)
                .unwrap_err()
                .contains("does not fit DECIMAL(4, 2)")
        );
        assert!(
            decimal_unscaled("1e5", 10, 0)
                .unwrap_err()
                .contains("not a decimal")
        );
    }
}
