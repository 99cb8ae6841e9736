//! Dead letters: messages that cannot become rows in Fluss, written with
//! the reason to a log table of a fixed schema (or logged at error level
//! when no table is configured). A dead letter that cannot be written fails
//! the call: it is never dropped silently.

use fluss_row_codec::{RowKind, RowView};

use crate::batch::MessageBatch;
use crate::deadline::Deadline;
use crate::rows::DeadLetterKind;
use crate::rows::to_fluss;
use crate::schema::{Column, DataType, TablePath, TableSchema};
use crate::writer::tables::Sink;
use crate::writer::{FlussWriter, WriteError, delivery};

/// The dead-letter table's schema.
pub(crate) fn dead_letter_schema(path: TablePath) -> TableSchema {
    let col = |name: &str, t: DataType, nullable| Column::new(name, t, nullable);
    TableSchema {
        path,
        columns: vec![
            col("stream", DataType::String, true),
            col("topic", DataType::String, true),
            col("partition", DataType::Int, true),
            col("offset", DataType::BigInt, true),
            col("message_id", DataType::String, true),
            col("timestamp", DataType::TimestampLtz(6), true),
            col("payload", DataType::Bytes, true),
            col("error_kind", DataType::String, false),
            col("error", DataType::String, false),
            col("failed_at", DataType::TimestampLtz(6), false),
        ],
        primary_key: vec![],
        partition_keys: vec![],
        added_columns: 0,
    }
}

/// Checks that an existing table can take dead letters: a log table whose
/// columns are the dead-letter schema's (names, types, in order; a column
/// may be nullable where the schema says NOT NULL).
pub(crate) fn check_dead_letter_table(found: &TableSchema) -> Result<(), String> {
    let wanted = dead_letter_schema(found.path.clone());
    if found.has_primary_key() {
        return Err(format!(
            "it has primary key {:?}; the dead-letter table must be a log table",
            found.primary_key
        ));
    }
    if found.is_partitioned() {
        return Err(format!(
            "it is partitioned by {:?}; the dead-letter table must be an unpartitioned log table",
            found.partition_keys
        ));
    }
    let describe = |s: &TableSchema| {
        s.columns
            .iter()
            .map(|c| format!("{} {}", c.name, c.data_type))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let fits = found.columns.len() == wanted.columns.len()
        && found
            .columns
            .iter()
            .zip(&wanted.columns)
            .all(|(f, w)| f.name == w.name && f.data_type == w.data_type && (f.nullable || !w.nullable));
    if !fits {
        return Err(format!(
            "its columns are ({}), a dead-letter table needs ({}); drop it or name another dead_letter_table",
            describe(found),
            describe(&wanted)
        ));
    }
    Ok(())
}

/// One message to dead-letter: its index in the batch, where it failed, why.
pub(in crate::writer) type Letter<'a> = (usize, DeadLetterKind, &'a str);

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

impl FlussWriter {
    /// Dead-letters every message of `batch` with `kind` and `reason`
    /// (a spooled batch whose table is gone), within `deadline`.
    pub async fn dead_letter_batch(
        &self,
        batch: &MessageBatch,
        kind: DeadLetterKind,
        reason: &str,
        deadline: Deadline,
    ) -> Result<(), WriteError> {
        let letters: Vec<Letter<'_>> = (0..batch.len()).map(|i| (i, kind, reason)).collect();
        self.dead_letter(batch, &letters, deadline).await
    }

    /// Dead-letters the messages of `batch` that `letters` name (each with
    /// its kind and reason) and that were never given to a write (fields
    /// the sink could not add columns for), within `deadline`.
    pub async fn dead_letter_messages(
        &self,
        batch: &MessageBatch,
        letters: &[(usize, DeadLetterKind, String)],
        deadline: Deadline,
    ) -> Result<(), WriteError> {
        let letters: Vec<Letter<'_>> = letters.iter().map(|(i, k, r)| (*i, *k, r.as_str())).collect();
        self.dead_letter(batch, &letters, deadline).await
    }

    /// Sends dead letters to the dead-letter table (or logs them without
    /// one), within `deadline`.
    pub(in crate::writer) async fn dead_letter(
        &self,
        batch: &MessageBatch,
        letters: &[Letter<'_>],
        deadline: Deadline,
    ) -> Result<(), WriteError> {
        if letters.is_empty() {
            return Ok(());
        }
        if let Some(metrics) = &self.metrics {
            for kind in DeadLetterKind::ALL {
                let count = letters.iter().filter(|(_, k, _)| *k == kind).count();
                if count > 0 {
                    metrics.dead_lettered(kind, count as u64);
                }
            }
        }
        let Some(path) = &self.settings.dead_letter_table else {
            for (i, kind, reason) in letters {
                let m = batch.get(*i);
                tracing::error!(
                    offset = m.offset,
                    kind = kind.as_str(),
                    "dead letter (no dead_letter_table configured): {reason}"
                );
            }
            return Ok(());
        };
        let table = self.table(path, deadline).await?;
        let Sink::Log(writer) = &table.sink else {
            return Err(WriteError::Table {
                table: path.to_string(),
                reason: "the dead-letter table must be a log table".into(),
            });
        };
        let failed_at = now_micros();
        let mut rows = fluss_row_codec::RowsBuilder::new();
        for (i, kind, reason) in letters {
            let m = batch.get(*i);
            rows.begin_row(RowKind::Append, 0);
            rows.string(&batch.source.stream);
            rows.string(&batch.source.topic);
            rows.int(batch.source.partition as i32);
            rows.bigint(m.offset as i64);
            rows.string(&m.id.to_string());
            rows.timestamp_ltz(m.timestamp as i64);
            rows.bytes(m.payload);
            rows.string(kind.as_str());
            rows.string(reason);
            rows.timestamp_ltz(failed_at);
            rows.end_row();
        }
        let bytes = rows.into_bytes();
        let views = fluss_row_codec::Rows::new(&bytes)
            .collect::<Result<Vec<RowView<'_>>, _>>()
            .map_err(|e| WriteError::Table {
                table: path.to_string(),
                reason: format!("encoding dead letters: {e}"),
            })?;
        let record =
            to_fluss::record_batch(&views, &table.schema, &table.arrow_schema).map_err(|reason| {
                WriteError::Table {
                    table: path.to_string(),
                    reason,
                }
            })?;
        let what = format!("{} dead letters to {path}", letters.len());
        let ack = self.deliver(path, &what, true, deadline, || {
            writer.append_arrow_batch(record.clone())
        });
        match delivery::racing_flush(ack, writer.flush()).await? {
            Ok(()) => Ok(()),
            Err(reason) => Err(WriteError::Table {
                table: path.to_string(),
                reason: format!("Fluss refused the dead letters: {reason}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> TablePath {
        "shop.dlq".parse().unwrap()
    }

    #[test]
    fn the_dead_letter_schema_fits_itself() {
        assert_eq!(check_dead_letter_table(&dead_letter_schema(path())), Ok(()));
    }

    #[test]
    fn another_schema_is_refused_with_both_column_lists() {
        let other = TableSchema {
            path: path(),
            columns: vec![Column::new("id", DataType::BigInt, false)],
            primary_key: vec![],
            partition_keys: vec![],
            added_columns: 0,
        };
        let error = check_dead_letter_table(&other).unwrap_err();
        assert!(error.contains("(id BIGINT)"), "{error}");
        assert!(error.contains("error_kind STRING"), "{error}");
    }

    #[test]
    fn a_primary_key_table_is_refused() {
        let mut keyed = dead_letter_schema(path());
        keyed.primary_key = vec!["offset".into()];
        assert!(check_dead_letter_table(&keyed).unwrap_err().contains("log table"));
    }
}
