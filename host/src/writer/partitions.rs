//! Partitioned tables: the partition each row belongs to (named the way
//! Fluss and fluss-rs name it: the partition-key values joined by `$`),
//! which partitions exist, and creating the missing ones.
//!
//! fluss-rs takes the partition of an appended Arrow batch from its first
//! row, and a row for a partition that does not exist waits in its buffer
//! for good; so the writer groups rows by partition and makes sure each
//! group's partition exists before it sends.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use arrow::array::{Array, ArrayRef};
use arrow::record_batch::RecordBatch;
use fluss::metadata::{PartitionSpec, TablePath as FlussPath};
use fluss_row_codec::{Cell, RowView};
use jiff::ToSpan;

use super::tables::{Table, fluss_path};
use super::{DeadLetterKind, FlussWriter, WriteError};
use crate::deadline::Deadline;
use crate::rows::{MessageOutcome, TransformOutput};
use crate::schema::{DataType, TableSchema};

/// What the writer knows about a partitioned table's partitions.
pub(super) struct Partitioning {
    /// Each partition key's column index, name and type, in key order.
    keys: Vec<(usize, String, DataType)>,
    /// Fluss creates this table's partitions itself (auto-partitioning).
    auto_partitioned: bool,
    /// The sink creates partitions that do not exist.
    create_missing: bool,
    /// Partition names known to exist.
    known: Mutex<HashSet<String>>,
}

impl Partitioning {
    /// The partitioning of `schema`, if it is partitioned. `create_missing`
    /// is the `auto_create_partitions` option; left out, the sink creates
    /// partitions unless Fluss does (auto-partitioning).
    pub fn of(
        schema: &TableSchema,
        auto_partitioned: bool,
        create_missing: Option<bool>,
    ) -> Result<Option<Self>, String> {
        if !schema.is_partitioned() {
            return Ok(None);
        }
        let keys = schema
            .partition_keys
            .iter()
            .map(|key| {
                let index = schema
                    .columns
                    .iter()
                    .position(|c| &c.name == key)
                    .ok_or_else(|| format!("partition key `{key}` is not a column of the table"))?;
                Ok((index, key.clone(), schema.columns[index].data_type))
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Some(Self {
            keys,
            auto_partitioned,
            create_missing: create_missing.unwrap_or(!auto_partitioned),
            known: Mutex::new(HashSet::new()),
        }))
    }

    /// The name of the partition `row` belongs to, or why it belongs to none.
    pub fn partition_of(&self, row: &RowView<'_>) -> Result<String, String> {
        self.name_with(|index| Ok(row.cells().nth(index)))
    }

    /// The partition of each row of an Arrow batch of the table, as the
    /// batch's rows grouped by partition, in order of first appearance.
    pub fn split(&self, batch: &RecordBatch) -> Result<Vec<(String, RecordBatch)>, String> {
        let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
        for row in 0..batch.num_rows() {
            let name = self
                .name_with(|index| arrow_cell(batch.column(index), row).map(Some))
                .map_err(|e| format!("row {row}: {e}"))?;
            match groups.iter_mut().find(|(n, _)| *n == name) {
                Some((_, rows)) => rows.push(row as u32),
                None => groups.push((name, vec![row as u32])),
            }
        }
        if let [(name, _)] = groups.as_slice() {
            return Ok(vec![(name.clone(), batch.clone())]);
        }
        groups
            .into_iter()
            .map(|(name, rows)| {
                let indices = arrow::array::UInt32Array::from(rows);
                arrow::compute::take_record_batch(batch, &indices)
                    .map(|part| (name, part))
                    .map_err(|e| format!("cannot split the batch by partition: {e}"))
            })
            .collect()
    }

    /// The partition name made of the cells `cell_at` gives for the key
    /// columns' indexes.
    fn name_with<'c>(
        &self,
        cell_at: impl Fn(usize) -> Result<Option<Cell<'c>>, String>,
    ) -> Result<String, String> {
        let mut name = String::new();
        for (i, (index, key, data_type)) in self.keys.iter().enumerate() {
            let cell = cell_at(*index)
                .map_err(|e| format!("partition key `{key}`: {e}"))?
                .ok_or_else(|| format!("the row has no cell for partition key `{key}`"))?;
            let value =
                partition_value(cell, *data_type).map_err(|e| format!("partition key `{key}`: {e}"))?;
            if let Some(invalid) = FlussPath::detect_invalid_name(&value) {
                return Err(format!(
                    "partition key `{key}`: the value cannot name a Fluss partition: {invalid}"
                ));
            }
            if i > 0 {
                name.push('$');
            }
            name.push_str(&value);
        }
        Ok(name)
    }

    /// Forgets which partitions exist (one may have been dropped, or expired
    /// by Fluss's retention): the next write lists them again.
    pub fn forget(&self) {
        self.known.lock().expect("partition set poisoned").clear();
    }

    fn spec(&self, name: &str) -> PartitionSpec {
        let map: HashMap<String, String> = self
            .keys
            .iter()
            .map(|(_, key, _)| key.clone())
            .zip(name.split('$').map(str::to_string))
            .collect();
        PartitionSpec::new(map)
    }

    fn unknown<'n>(&self, names: impl IntoIterator<Item = &'n String>) -> Vec<&'n String> {
        let known = self.known.lock().expect("partition set poisoned");
        names.into_iter().filter(|n| !known.contains(*n)).collect()
    }
}

/// Row `row` of an Arrow column of a partition key, as a cell.
fn arrow_cell(array: &ArrayRef, row: usize) -> Result<Cell<'_>, String> {
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
pub(super) fn partition_value(cell: Cell<'_>, data_type: DataType) -> Result<String, String> {
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
            let date = jiff::civil::date(1970, 1, 1)
                .checked_add(days.days())
                .map_err(|e| format!("date out of range: {e}"))?;
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
    let at = jiff::Timestamp::from_millisecond(millis).map_err(|e| format!("timestamp out of range: {e}"))?;
    let t = at.to_zoned(jiff::tz::TimeZone::UTC).datetime();
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

impl FlussWriter {
    /// The partition of each of `output`'s rows (`None` for a row of an
    /// unpartitioned table), in row order. Messages with a row that belongs
    /// to no partition, or to one that cannot be had, are dead-lettered in
    /// `output` (their kind set in `kinds`).
    pub(super) async fn place_in_partitions<'t>(
        &self,
        output: &mut TransformOutput,
        kinds: &mut [DeadLetterKind],
        table_of: &impl Fn(u16) -> Option<&'t Arc<Table>>,
        deadline: Deadline,
    ) -> Result<Vec<Option<String>>, WriteError> {
        let mut partition_of: Vec<Option<String>> = vec![None; output.rows.len()];
        let mut wanted: HashMap<u16, HashSet<String>> = HashMap::new();
        for (i, (entry, row)) in output.rows.iter().enumerate() {
            let m = entry.message as usize;
            let Some(partitioning) = table_of(entry.table).and_then(|t| t.partitioning.as_ref()) else {
                continue;
            };
            if matches!(output.outcomes[m], MessageOutcome::DeadLetter(_)) {
                continue;
            }
            match partitioning.partition_of(&row) {
                Ok(name) => {
                    wanted.entry(entry.table).or_default().insert(name.clone());
                    partition_of[i] = Some(name);
                }
                Err(reason) => {
                    let table = &table_of(entry.table).expect("checked above").schema.path;
                    output.outcomes[m] = MessageOutcome::DeadLetter(format!("table {table}: {reason}"));
                    kinds[m] = DeadLetterKind::Partition;
                }
            }
        }
        for (table_index, names) in &wanted {
            let table = table_of(*table_index).expect("resolved above");
            let refused = self.ensure_partitions(table, names, deadline).await?;
            if refused.is_empty() {
                continue;
            }
            for (i, (entry, _)) in output.rows.iter().enumerate() {
                let m = entry.message as usize;
                if entry.table != *table_index || matches!(output.outcomes[m], MessageOutcome::DeadLetter(_))
                {
                    continue;
                }
                if let Some(reason) = partition_of[i].as_ref().and_then(|p| refused.get(p)) {
                    output.outcomes[m] = MessageOutcome::DeadLetter(reason.clone());
                    kinds[m] = DeadLetterKind::Partition;
                }
            }
        }
        Ok(partition_of)
    }

    /// Makes sure `names` (partitions of `table`) exist: lists the table's
    /// partitions once when one is not known, then creates the missing ones
    /// where the sink may. Returns, for each partition that cannot be had,
    /// why (its rows dead-letter); `Err` when Fluss did not answer in time
    /// or failed for a reason that may pass.
    pub(super) async fn ensure_partitions(
        &self,
        table: &Table,
        names: &HashSet<String>,
        deadline: Deadline,
    ) -> Result<HashMap<String, String>, WriteError> {
        let mut refused = HashMap::new();
        let Some(partitioning) = &table.partitioning else {
            return Ok(refused);
        };
        if partitioning.unknown(names).is_empty() {
            return Ok(refused);
        }
        let path = &table.schema.path;
        let fluss = fluss_path(path);
        let late = |step: &str| WriteError::DeadlinePassed {
            step: format!("{step} of {path}"),
        };
        let failed = |step: &str, e: fluss::error::Error| WriteError::Table {
            table: path.to_string(),
            reason: format!("{step}: {e}"),
        };
        let listed = deadline
            .run(self.admin.list_partition_infos(&fluss))
            .await
            .map_err(|_| late("listing the partitions"))?
            .map_err(|e| failed("listing the partitions", e))?;
        partitioning
            .known
            .lock()
            .expect("partition set poisoned")
            .extend(listed.iter().map(|p| p.get_partition_name()));
        for name in partitioning.unknown(names) {
            if !partitioning.create_missing {
                let who = if partitioning.auto_partitioned {
                    "Fluss creates this table's partitions itself (auto-partitioning) and "
                } else {
                    ""
                };
                refused.insert(
                    name.clone(),
                    format!(
                        "partition `{name}` of {path} does not exist; {who}auto_create_partitions is off"
                    ),
                );
                continue;
            }
            let created = deadline
                .run(
                    self.admin
                        .create_partition(&fluss, &partitioning.spec(name), true),
                )
                .await
                .map_err(|_| late(&format!("creating partition `{name}`")))?;
            match created {
                Ok(()) => {
                    tracing::info!(table = %path, partition = %name, "created partition");
                    partitioning
                        .known
                        .lock()
                        .expect("partition set poisoned")
                        .insert(name.clone());
                }
                Err(e) if super::delivery::classify(&e) == super::delivery::Failure::Permanent => {
                    refused.insert(
                        name.clone(),
                        format!("Fluss refused to create partition `{name}` of {path}: {e}"),
                    );
                }
                Err(e) => return Err(failed(&format!("creating partition `{name}`"), e)),
            }
        }
        Ok(refused)
    }
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
    fn null_and_unkeyable_values_are_refused_by_name() {
        let null = partition_value(Cell::Null, DataType::String).unwrap_err();
        assert!(null.contains("NULL"), "{null}");
        let decimal = partition_value(Cell::Decimal("1.5"), DataType::Decimal(3, 1)).unwrap_err();
        assert!(decimal.contains("cannot key a partition"), "{decimal}");
    }

    fn partitioned(keys: &[&str]) -> TableSchema {
        use crate::schema::{Column, TablePath};
        TableSchema {
            path: TablePath::new("d", "t"),
            columns: vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("region", DataType::String, true),
                Column::new("day", DataType::Date, true),
            ],
            primary_key: vec![],
            partition_keys: keys.iter().map(|k| k.to_string()).collect(),
        }
    }

    fn row_of(cells: impl FnOnce(&mut fluss_row_codec::RowsBuilder)) -> Vec<u8> {
        let mut b = fluss_row_codec::RowsBuilder::new();
        b.begin_row(fluss_row_codec::RowKind::Append, 0);
        cells(&mut b);
        b.end_row();
        b.into_bytes()
    }

    #[test]
    fn a_row_is_named_by_its_keys_in_key_order() {
        let p = Partitioning::of(&partitioned(&["day", "region"]), false, None)
            .unwrap()
            .unwrap();
        let bytes = row_of(|b| {
            b.bigint(1);
            b.string("eu");
            b.date(20_788);
        });
        let row = fluss_row_codec::Rows::new(&bytes).next().unwrap().unwrap();
        assert_eq!(p.partition_of(&row).unwrap(), "2026-12-01$eu");

        let bytes = row_of(|b| {
            b.bigint(1);
            b.string("eu west");
            b.null();
        });
        let row = fluss_row_codec::Rows::new(&bytes).next().unwrap().unwrap();
        let err = p.partition_of(&row).unwrap_err();
        assert!(
            err.contains("partition key `day`") && err.contains("NULL"),
            "{err}"
        );
        let p = Partitioning::of(&partitioned(&["region"]), false, None)
            .unwrap()
            .unwrap();
        let err = p.partition_of(&row).unwrap_err();
        assert!(err.contains("cannot name a Fluss partition"), "{err}");
    }

    #[test]
    fn the_sink_creates_partitions_unless_fluss_does() {
        let schema = partitioned(&["region"]);
        assert!(
            Partitioning::of(&schema, false, None)
                .unwrap()
                .unwrap()
                .create_missing
        );
        assert!(
            !Partitioning::of(&schema, true, None)
                .unwrap()
                .unwrap()
                .create_missing
        );
        assert!(
            Partitioning::of(&schema, true, Some(true))
                .unwrap()
                .unwrap()
                .create_missing
        );
        assert!(
            Partitioning::of(&partitioned(&[]), false, None)
                .unwrap()
                .is_none()
        );
        let err = Partitioning::of(&partitioned(&["zone"]), false, None)
            .err()
            .unwrap();
        assert!(err.contains("`zone`"), "{err}");
    }
}
