//! Partition-key values as Fluss writes them in partition names (the
//! formats of Fluss and fluss-rs: dates `yyyy-MM-dd`, timestamps
//! `yyyy-MM-dd-HH-mm-ss_…`, floats with `_` for the point, bytes in hex),
//! from the sink's cells and from Arrow columns.

use arrow::array::{Array, ArrayRef};
use chrono::{Datelike, Timelike};
use fluss_row_codec::Cell;

use crate::schema::DataType;

/// Row `row` of an Arrow column of a partition key, as a cell.
pub(in crate::writer) fn arrow_cell(array: &ArrayRef, row: usize) -> Result<Cell<'_>, String> {
    use arrow::array::{AsArray, types as t};
    use arrow::datatypes::{DataType as A, TimeUnit};
    if array.is_null(row) {
        return Ok(Cell::Null);
    }
    Ok(match array.data_type() {
        A::Utf8 => Cell::String(array.as_string::<i32>().value(row)),
        A::LargeUtf8 => Cell::String(array.as_string::<i64>().value(row)),
        A::Boolean => Cell::Boolean(array.as_boolean().value(row)),
        A::Int8 => Cell::TinyInt(array.as_primitive::<t::Int8Type>().value(row)),
        A::Int16 => Cell::SmallInt(array.as_primitive::<t::Int16Type>().value(row)),
        A::Int32 => Cell::Int(array.as_primitive::<t::Int32Type>().value(row)),
        A::Int64 => Cell::BigInt(array.as_primitive::<t::Int64Type>().value(row)),
        A::Float32 => Cell::Float(array.as_primitive::<t::Float32Type>().value(row)),
        A::Float64 => Cell::Double(array.as_primitive::<t::Float64Type>().value(row)),
        A::Date32 => Cell::Date(array.as_primitive::<t::Date32Type>().value(row)),
        A::Binary => Cell::Bytes(array.as_binary::<i32>().value(row)),
        A::FixedSizeBinary(_) => Cell::Bytes(array.as_fixed_size_binary().value(row)),
        A::Time32(TimeUnit::Millisecond) => {
            Cell::Time(array.as_primitive::<t::Time32MillisecondType>().value(row))
        }
        A::Timestamp(unit, zone) => {
            let micros = match unit {
                TimeUnit::Second => array.as_primitive::<t::TimestampSecondType>().value(row) * 1_000_000,
                TimeUnit::Millisecond => {
                    array.as_primitive::<t::TimestampMillisecondType>().value(row) * 1_000
                }
                TimeUnit::Microsecond => array.as_primitive::<t::TimestampMicrosecondType>().value(row),
                TimeUnit::Nanosecond => array.as_primitive::<t::TimestampNanosecondType>().value(row) / 1_000,
            };
            if zone.is_some() {
                Cell::TimestampLtz(micros)
            } else {
                Cell::Timestamp(micros)
            }
        }
        other => return Err(format!("an Arrow {other} column cannot key a partition here")),
    })
}

/// A partition-key cell as Fluss writes it in a partition name. Types that
/// cannot key a partition, and NULL, are refused.
pub(in crate::writer) fn partition_value(cell: Cell<'_>, data_type: DataType) -> Result<String, String> {
    use DataType as T;
    Ok(match (cell, data_type) {
        (Cell::Null, _) => return Err("the value is NULL, and a partition key cannot be".into()),
        (Cell::String(s), T::String | T::Char(_)) => s.to_string(),
        (Cell::Boolean(b), T::Boolean) => b.to_string(),
        (Cell::Bytes(b), T::Bytes | T::Binary(_)) => b.iter().map(|byte| format!("{byte:02x}")).collect(),
        (Cell::TinyInt(v), t) if t.is_integer() => v.to_string(),
        (Cell::SmallInt(v), t) if t.is_integer() => v.to_string(),
        (Cell::Int(v), t) if t.is_integer() => v.to_string(),
        (Cell::BigInt(v), t) if t.is_integer() => v.to_string(),
        (Cell::Date(days), T::Date) => {
            let date = chrono::DateTime::from_timestamp(i64::from(days) * 86_400, 0)
                .map(|midnight| midnight.date_naive())
                .ok_or_else(|| format!("date out of range: {days} days from 1970-01-01"))?;
            format!("{:04}-{:02}-{:02}", date.year(), date.month(), date.day())
        }
        (Cell::Time(millis), T::Time(_)) => {
            let (h, m, s, ms) = (
                millis / 3_600_000,
                millis / 60_000 % 60,
                millis / 1_000 % 60,
                millis % 1_000,
            );
            format!("{h:02}-{m:02}-{s:02}_{ms:03}")
        }
        (Cell::Float(v), T::Float) => float_text(f64::from(v), v.to_string()),
        (Cell::Float(v), T::Double) => float_text(f64::from(v), f64::from(v).to_string()),
        (Cell::Double(v), T::Double) => float_text(v, v.to_string()),
        (Cell::Timestamp(micros), T::Timestamp(_)) | (Cell::TimestampLtz(micros), T::TimestampLtz(_)) => {
            timestamp_text(micros)?
        }
        (cell, t) => {
            return Err(format!(
                "a {} value cannot key a partition of type {t}",
                cell.type_name()
            ));
        }
    })
}

fn float_text(value: f64, text: String) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "Inf" } else { "-Inf" }.into()
    } else {
        text.replace('.', "_")
    }
}

/// `yyyy-MM-dd-HH-mm-ss_` then the milliseconds, then the nanoseconds past
/// them, each only when not zero (Fluss's own format).
fn timestamp_text(micros: i64) -> Result<String, String> {
    let millis = micros.div_euclid(1_000);
    let nanos_of_milli = micros.rem_euclid(1_000) * 1_000;
    let t = chrono::DateTime::from_timestamp_millis(millis)
        .ok_or_else(|| format!("timestamp out of range: {millis} ms from 1970-01-01"))?;
    let mut text = format!(
        "{:04}-{:02}-{:02}-{:02}-{:02}-{:02}_",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    );
    let millis_of_second = millis.rem_euclid(1_000);
    if nanos_of_milli > 0 {
        text.push_str(&format!("{millis_of_second:03}{nanos_of_milli:06}"));
    } else if millis_of_second > 0 {
        text.push_str(&format!("{millis_of_second:03}"));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_as_fluss_names_them() {
        use DataType as T;
        let cases: Vec<(Cell<'_>, DataType, &str)> = vec![
            (Cell::String("eu-west_1"), T::String, "eu-west_1"),
            (Cell::Boolean(true), T::Boolean, "true"),
            (Cell::Bytes(&[0x0a, 0xff]), T::Bytes, "0aff"),
            (Cell::Int(-42), T::BigInt, "-42"),
            (Cell::Date(0), T::Date, "1970-01-01"),
            (Cell::Date(20_788), T::Date, "2026-12-01"),
            (Cell::Date(-1), T::Date, "1969-12-31"),
            (Cell::Time(3_723_004), T::Time(3), "01-02-03_004"),
            (Cell::Double(1.5), T::Double, "1_5"),
            (Cell::Double(f64::NEG_INFINITY), T::Double, "-Inf"),
            (
                Cell::Timestamp(1_764_547_200_000_000),
                T::Timestamp(6),
                "2025-12-01-00-00-00_",
            ),
            (
                Cell::Timestamp(1_764_547_200_123_000),
                T::Timestamp(6),
                "2025-12-01-00-00-00_123",
            ),
            (
                Cell::TimestampLtz(1_764_547_200_123_456),
                T::TimestampLtz(6),
                "2025-12-01-00-00-00_123456000",
            ),
            (
                Cell::Timestamp(-1_000),
                T::Timestamp(6),
                "1969-12-31-23-59-59_999",
            ),
        ];
        for (cell, data_type, expected) in cases {
            assert_eq!(
                partition_value(cell, data_type).unwrap(),
                expected,
                "{cell:?} as {data_type}"
            );
        }
    }

    #[test]
    fn dates_and_timestamps_past_the_calendar_are_refused() {
        let date = partition_value(Cell::Date(i32::MAX), DataType::Date).unwrap_err();
        assert!(date.starts_with("date out of range"), "{date}");
        let at = partition_value(Cell::Timestamp(i64::MAX), DataType::Timestamp(6)).unwrap_err();
        assert!(at.starts_with("timestamp out of range"), "{at}");
    }

    #[test]
    fn null_and_unkeyable_values_are_refused_by_name() {
        let null = partition_value(Cell::Null, DataType::String).unwrap_err();
        assert!(null.contains("NULL"), "{null}");
        let decimal = partition_value(Cell::Decimal("1.5"), DataType::Decimal(3, 1)).unwrap_err();
        assert!(decimal.contains("cannot key a partition"), "{decimal}");
    }
}
