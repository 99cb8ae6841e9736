//! The catalog side of partitioned tables: which partitions a batch's rows
//! need, whether they exist, and creating the missing ones (within the
//! batch's deadline) or saying why a row's partition cannot be had.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::deadline::Deadline;
use crate::rows::{MessageOutcome, TransformOutput};
use crate::writer::tables::{Table, fluss_path};
use crate::writer::{DeadLetterKind, FlussWriter, WriteError};

impl FlussWriter {
    /// The partition of each of `output`'s rows (`None` for a row of an
    /// unpartitioned table), in row order. Messages with a row that belongs
    /// to no partition, or to one that cannot be had, are dead-lettered in
    /// `output` (their kind set in `kinds`).
    pub(in crate::writer) async fn place_in_partitions<'t>(
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
    pub(in crate::writer) async fn ensure_partitions(
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
        partitioning.remember(listed.iter().map(|p| p.get_partition_name()));
        let missing = partitioning.unknown(names);
        if !missing.is_empty()
            && partitioning.creates_missing()
            && let Err(reason) = self
                .before_creating_partitions(path, table.table_id, deadline)
                .await?
        {
            refused.extend(missing.into_iter().map(|name| (name.clone(), reason.clone())));
            return Ok(refused);
        }
        for name in missing {
            if !partitioning.creates_missing() {
                let who = if partitioning.is_auto_partitioned() {
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
                    partitioning.remember([name.clone()]);
                }
                Err(e)
                    if crate::writer::delivery::failure::classify(&e)
                        == crate::writer::delivery::failure::Failure::Permanent =>
                {
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
