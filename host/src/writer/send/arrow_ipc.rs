//! `payload_format = "arrow_ipc"`: each payload is an Arrow IPC stream whose
//! record batches are appended as one batch (so a message is written whole
//! or not at all), matched to the table by column name (a missing nullable
//! column becomes NULL; a type that Arrow can cast safely is cast; anything
//! else is refused with the reason).

use std::collections::HashSet;
use std::io::Cursor;

use arrow::array::{ArrayRef, new_null_array};
use arrow::compute::{CastOptions, can_cast_types, cast_with_options, concat_batches};
use arrow::datatypes::SchemaRef;
use arrow::ipc::reader::StreamReader;
use arrow::record_batch::RecordBatch;

use crate::batch::MessageBatch;
use crate::deadline::Deadline;
use crate::schema::TablePath;
use crate::writer::tables::Sink;
use crate::writer::{DeadLetterKind, FlussWriter, WriteError, WriteReport, delivery};

/// The rows of one IPC stream payload, fitted to `table`, as one batch.
pub(in crate::writer) fn decode(payload: &[u8], table: &SchemaRef) -> Result<RecordBatch, String> {
    let reader = StreamReader::try_new(Cursor::new(payload), None)
        .map_err(|e| format!("payload is not an Arrow IPC stream: {e}"))?;
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| format!("Arrow IPC stream is corrupt: {e}"))?;
        out.push(fit(&batch, table)?);
    }
    concat_batches(table, &out).map_err(|e| format!("cannot join the stream's batches: {e}"))
}

fn fit(batch: &RecordBatch, table: &SchemaRef) -> Result<RecordBatch, String> {
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    let columns = table
        .fields()
        .iter()
        .map(|field| {
            let Some((index, _)) = batch.schema().column_with_name(field.name()) else {
                if field.is_nullable() {
                    return Ok(new_null_array(field.data_type(), batch.num_rows()));
                }
                return Err(format!(
                    "the batch has no column `{}`, which is NOT NULL",
                    field.name()
                ));
            };
            let column = batch.column(index);
            let column: ArrayRef = if column.data_type() == field.data_type() {
                column.clone()
            } else if can_cast_types(column.data_type(), field.data_type()) {
                cast_with_options(column, field.data_type(), &options).map_err(|e| {
                    format!(
                        "column `{}`: cannot cast {} to {}: {e}",
                        field.name(),
                        column.data_type(),
                        field.data_type()
                    )
                })?
            } else {
                return Err(format!(
                    "column `{}` is {} in the batch but {} in the table",
                    field.name(),
                    column.data_type(),
                    field.data_type()
                ));
            };
            if !field.is_nullable() && column.null_count() > 0 {
                return Err(format!(
                    "column `{}` is NOT NULL but the batch has nulls in it",
                    field.name()
                ));
            }
            Ok(column)
        })
        .collect::<Result<Vec<_>, String>>()?;
    RecordBatch::try_new(table.clone(), columns).map_err(|e| e.to_string())
}

impl FlussWriter {
    /// Appends Arrow IPC stream payloads to `table` (a log table) as they
    /// are, before `deadline`; a payload that does not decode or fit is
    /// dead-lettered.
    pub(in crate::writer) async fn write_arrow_ipc_within(
        &self,
        batch: &MessageBatch,
        table: &TablePath,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let mut target = self.table(table, deadline).await?;
        let mut report = WriteReport::default();
        let mut reasons: Vec<(usize, DeadLetterKind, String)> = Vec::new();
        let mut messages = batch.iter().enumerate();
        // A message to send again through the table opened again, once.
        let (mut again, mut retried) = (None, None);
        while let Some((i, message)) = again.take().or_else(|| messages.next()) {
            let Sink::Log(writer) = &target.sink else {
                return Err(WriteError::Table {
                    table: table.to_string(),
                    reason: "arrow_ipc payloads go to log tables only".into(),
                });
            };
            let record = match decode(message.payload, &target.arrow_schema) {
                Ok(b) => b,
                Err(reason) => {
                    reasons.push((i, DeadLetterKind::ArrowIpc, reason));
                    continue;
                }
            };
            if record.num_rows() == 0 {
                report.filtered += 1;
                continue;
            }
            // A partitioned table takes one append per partition.
            let parts = match &target.partitioning {
                None => vec![(None, record)],
                Some(partitioning) => match partitioning.split(&record) {
                    Ok(parts) => parts.into_iter().map(|(n, b)| (Some(n), b)).collect(),
                    Err(reason) => {
                        reasons.push((i, DeadLetterKind::Partition, format!("table {table}: {reason}")));
                        continue;
                    }
                },
            };
            let names: HashSet<String> = parts.iter().filter_map(|(n, _)| n.clone()).collect();
            let refused = self.ensure_partitions(&target, &names, deadline).await?;
            if let Some(reason) = names.iter().find_map(|n| refused.get(n)) {
                reasons.push((i, DeadLetterKind::Partition, reason.clone()));
                continue;
            }
            let what = format!("the Arrow rows of offset {} to {table}", message.offset);
            let mut failed = None;
            for (_, part) in &parts {
                let ack = self.deliver(table, &what, true, deadline, || {
                    writer.append_arrow_batch(part.clone())
                });
                let acked = delivery::racing_flush(ack, writer.flush()).await;
                if let (Err(_), Some(partitioning)) = (&acked, &target.partitioning) {
                    // A partition may have gone (dropped, or expired by Fluss).
                    partitioning.forget();
                }
                if let (Err(WriteError::SchemaChanged { .. }), None) = (&acked, &target.partitioning) {
                    // Refused before it was sent: the message is decoded
                    // again for the table opened again, and sent through it.
                    failed = Some(None);
                    break;
                }
                if let Err(reason) = acked? {
                    failed = Some(Some(reason));
                    break;
                }
            }
            if let Some(None) = failed {
                if retried == Some(i) {
                    return Err(WriteError::SchemaChanged {
                        table: table.to_string(),
                    });
                }
                target = self.table_after_change(table, deadline).await?;
                (again, retried) = (Some((i, message)), Some(i));
                continue;
            }
            let failed = failed.flatten();
            match failed {
                None => {
                    report.written += 1;
                    if let Some(metrics) = &self.metrics {
                        let rows: usize = parts.iter().map(|(_, p)| p.num_rows()).sum();
                        metrics.rows_written(table, rows as u64);
                    }
                }
                Some(reason) => reasons.push((i, DeadLetterKind::ArrowIpc, reason)),
            }
        }
        let letters: Vec<_> = reasons
            .iter()
            .map(|(i, kind, reason)| (*i, *kind, reason.as_str()))
            .collect();
        report.dead_lettered = letters.len();
        self.dead_letter(batch, &letters, deadline).await?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int32Array, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::ipc::writer::StreamWriter;

    use super::*;

    fn ipc(batch: &RecordBatch) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = StreamWriter::try_new(&mut buf, &batch.schema()).unwrap();
        w.write(batch).unwrap();
        w.finish().unwrap();
        drop(w);
        buf
    }

    fn table() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    #[test]
    fn batches_are_matched_by_name_and_cast() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int32, false)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![1, 2]))]).unwrap();
        let out = decode(&ipc(&batch), &table()).unwrap();
        let ids = out.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values(), &[1, 2]);
        assert_eq!(out.column(1).null_count(), 2);
    }

    #[test]
    fn a_stream_of_several_batches_becomes_one() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let part = |ids: Vec<i64>| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(ids))]).unwrap()
        };
        let mut buf = Vec::new();
        let mut w = StreamWriter::try_new(&mut buf, &schema).unwrap();
        w.write(&part(vec![1, 2])).unwrap();
        w.write(&part(vec![3])).unwrap();
        w.finish().unwrap();
        drop(w);
        let out = decode(&buf, &table()).unwrap();
        let ids = out.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(ids.values(), &[1, 2, 3]);
    }

    #[test]
    fn mismatches_and_garbage_are_refused_with_reasons() {
        let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, true)]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(vec!["x"]))]).unwrap();
        let err = decode(&ipc(&batch), &table()).unwrap_err();
        assert_eq!(err, "the batch has no column `id`, which is NOT NULL");
        let err = decode(b"{\"id\":1}", &table()).unwrap_err();
        assert!(err.starts_with("payload is not an Arrow IPC stream"), "{err}");
    }
}
