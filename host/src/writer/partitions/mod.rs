//! Partitioned tables: the partition each row belongs to (named the way
//! Fluss and fluss-rs name it: the partition-key values joined by `$`) and
//! which partitions are known to exist (`catalog` asks Fluss and
//! creates the missing ones).
//!
//! fluss-rs takes the partition of an appended Arrow batch from its first
//! row, and a row for a partition that does not exist waits in its buffer
//! for good; so the writer groups rows by partition and makes sure each
//! group's partition exists before it sends.

pub(in crate::writer) mod catalog;
pub(in crate::writer) mod placement;
pub(in crate::writer) mod values;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use arrow::record_batch::RecordBatch;
use fluss::metadata::{PartitionSpec, TablePath as FlussPath};
use fluss_row_codec::{Cell, RowView};

use crate::schema::{DataType, TableSchema};
use crate::writer::partitions::values::{arrow_cell, partition_value};

/// The partitions of an Arrow batch's rows.
#[derive(Debug, Default, PartialEq)]
pub(in crate::writer) struct RowPartitions {
    /// Each partition the rows belong to (or why rows belong to none), in
    /// order of first appearance.
    pub names: Vec<Result<String, String>>,
    /// Each row's entry in `names`.
    pub of_row: Vec<u32>,
}

/// What the writer knows about a partitioned table's partitions.
pub(in crate::writer) struct Partitioning {
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
    pub(in crate::writer) fn of(
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
    pub(in crate::writer) fn partition_of(&self, row: &RowView<'_>) -> Result<String, String> {
        self.name_with(|index| Ok(row.cells().nth(index)))
    }

    /// The partitions of an Arrow batch's rows: each key column compared
    /// row to row (arrow's `partition` kernel), and a partition named once
    /// for each run of rows with equal keys, not for every row.
    pub(in crate::writer) fn partitions(&self, batch: &RecordBatch) -> RowPartitions {
        let rows = batch.num_rows();
        let keys: Vec<_> = self
            .keys
            .iter()
            .map(|(index, ..)| batch.column(*index).clone())
            .collect();
        let runs = match arrow::compute::partition(&keys) {
            Ok(runs) => runs.ranges(),
            // Keys arrow cannot compare: each row alone (naming them says why).
            Err(_) => (0..rows).map(|row| row..row + 1).collect(),
        };
        let mut partitions = RowPartitions {
            names: Vec::new(),
            of_row: Vec::with_capacity(rows),
        };
        let mut seen: HashMap<Result<String, String>, u32> = HashMap::new();
        for run in runs {
            let name = self.name_with(|index| arrow_cell(batch.column(index), run.start).map(Some));
            let entry = *seen.entry(name).or_insert_with_key(|name| {
                partitions.names.push(name.clone());
                partitions.names.len() as u32 - 1
            });
            partitions.of_row.extend(std::iter::repeat_n(entry, run.len()));
        }
        partitions
    }

    /// The rows of an Arrow batch of the table grouped by partition, in
    /// order of first appearance.
    pub(in crate::writer) fn split(&self, batch: &RecordBatch) -> Result<Vec<(String, RecordBatch)>, String> {
        let RowPartitions { names, of_row } = self.partitions(batch);
        if let Some(entry) = names.iter().position(Result::is_err) {
            let row = of_row
                .iter()
                .position(|&e| e as usize == entry)
                .expect("a row has it");
            let reason = names[entry].as_ref().expect_err("an error");
            return Err(format!("row {row}: {reason}"));
        }
        let names = names.into_iter().map(|name| name.expect("checked above"));
        if names.len() == 1 {
            return Ok(names.map(|name| (name, batch.clone())).collect());
        }
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); names.len()];
        for (row, &entry) in of_row.iter().enumerate() {
            rows[entry as usize].push(row as u32);
        }
        names
            .zip(rows)
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
    pub(in crate::writer) fn forget(&self) {
        self.known.lock().expect("partition set poisoned").clear();
    }

    /// Whether the sink creates partitions that do not exist.
    pub(in crate::writer) fn creates_missing(&self) -> bool {
        self.create_missing
    }

    /// Whether Fluss creates this table's partitions itself.
    pub(in crate::writer) fn is_auto_partitioned(&self) -> bool {
        self.auto_partitioned
    }

    /// Notes that `names` exist.
    pub(in crate::writer) fn remember(&self, names: impl IntoIterator<Item = String>) {
        self.known.lock().expect("partition set poisoned").extend(names);
    }

    /// The spec Fluss's admin API takes for partition `name`.
    pub(in crate::writer) fn spec(&self, name: &str) -> PartitionSpec {
        let map: HashMap<String, String> = self
            .keys
            .iter()
            .map(|(_, key, _)| key.clone())
            .zip(name.split('$').map(str::to_string))
            .collect();
        PartitionSpec::new(map)
    }

    /// Those of `names` not known to exist.
    pub(in crate::writer) fn unknown<'n>(
        &self,
        names: impl IntoIterator<Item = &'n String>,
    ) -> Vec<&'n String> {
        let known = self.known.lock().expect("partition set poisoned");
        names.into_iter().filter(|n| !known.contains(*n)).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

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
            added_columns: 0,
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

    /// An Arrow batch of `partitioned`'s columns with these regions and days.
    fn record(regions: &[Option<&str>], days: &[Option<i32>]) -> RecordBatch {
        use arrow::array::{ArrayRef, Date32Array, Int64Array, StringArray};
        let ids = Int64Array::from_iter_values(0..regions.len() as i64);
        RecordBatch::try_from_iter([
            ("id", Arc::new(ids) as ArrayRef),
            (
                "region",
                Arc::new(StringArray::from(regions.to_vec())) as ArrayRef,
            ),
            ("day", Arc::new(Date32Array::from(days.to_vec())) as ArrayRef),
        ])
        .unwrap()
    }

    #[test]
    fn rows_with_equal_keys_share_one_named_partition_wherever_they_are() {
        let p = Partitioning::of(&partitioned(&["region", "day"]), false, None)
            .unwrap()
            .unwrap();
        let (eu, us) = (Some("eu"), Some("us"));
        let batch = record(
            &[eu, eu, us, eu, eu, None, us, eu],
            &[
                Some(1),
                Some(1),
                Some(1),
                Some(1),
                Some(2),
                Some(1),
                Some(1),
                Some(1),
            ],
        );
        let partitions = p.partitions(&batch);
        assert_eq!(partitions.of_row, [0, 0, 1, 0, 2, 3, 1, 0]);
        assert_eq!(
            partitions.names[..3],
            [
                Ok("eu$1970-01-02".to_string()),
                Ok("us$1970-01-02".to_string()),
                Ok("eu$1970-01-03".to_string()),
            ]
        );
        let null = partitions.names[3].as_ref().unwrap_err();
        assert!(null.contains("`region`") && null.contains("NULL"), "{null}");

        let err = p.split(&batch).unwrap_err();
        assert!(err.starts_with("row 5: partition key `region`"), "{err}");
        let batch = record(&[eu, us, eu, us], &[Some(1); 4]);
        let split = p.split(&batch).unwrap();
        let ids = |b: &RecordBatch| {
            use arrow::array::AsArray;
            let ids = b.column(0).as_primitive::<arrow::datatypes::Int64Type>();
            ids.values().to_vec()
        };
        assert_eq!(
            split
                .iter()
                .map(|(n, b)| (n.as_str(), ids(b)))
                .collect::<Vec<_>>(),
            [("eu$1970-01-02", vec![0, 2]), ("us$1970-01-02", vec![1, 3])]
        );
        assert!(p.partitions(&record(&[], &[])).names.is_empty());
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
