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

use arrow::record_batch::RecordBatch;
use fluss::metadata::{PartitionSpec, TablePath as FlussPath};
use fluss_row_codec::{Cell, RowView};

use super::partition_values::{arrow_cell, partition_value};
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
    pub(super) fn of(
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
    pub(super) fn partition_of(&self, row: &RowView<'_>) -> Result<String, String> {
        self.name_with(|index| Ok(row.cells().nth(index)))
    }

    /// The partition of each row of an Arrow batch of the table (or why it
    /// belongs to none), in row order.
    pub(super) fn names(&self, batch: &RecordBatch) -> Vec<Result<String, String>> {
        (0..batch.num_rows())
            .map(|row| self.name_with(|index| arrow_cell(batch.column(index), row).map(Some)))
            .collect()
    }

    /// The partition of each row of an Arrow batch of the table, as the
    /// batch's rows grouped by partition, in order of first appearance.
    pub(super) fn split(&self, batch: &RecordBatch) -> Result<Vec<(String, RecordBatch)>, String> {
        let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
        for (row, name) in self.names(batch).into_iter().enumerate() {
            let name = name.map_err(|e| format!("row {row}: {e}"))?;
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
    pub(super) fn forget(&self) {
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
        let failed = |step: &str, source: fluss::error::Error| WriteError::Catalog {
            table: path.to_string(),
            step: Some(step.into()),
            source: Box::new(source),
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
