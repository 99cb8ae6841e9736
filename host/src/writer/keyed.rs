//! The keyed lean path's writes: a primary-key table's rows made straight
//! into fluss-rs's `GenericRow`s ([`KeyedOutput`]) sent through the table's
//! full upsert writer, with the retries and ordering of every keyed write
//! (`send_rows`), and what cannot be written dead-lettered.

use super::delivery::{send_keyed, undelivered};
use super::tables::Sink;
use super::{DeadLetterKind, FlussWriter, LeanWritten, WriteError, WriteReport};
use crate::batch::MessageBatch;
use crate::deadline::Deadline;
use crate::rows::keyed::KeyedOutput;
use crate::schema::TablePath;

impl FlussWriter {
    /// Whether `path` takes the keyed lean path's rows (see
    /// [`FlussWriter::write_keyed_within`]): an unpartitioned primary-key
    /// table.
    pub async fn takes_keyed_rows(&self, path: &TablePath, deadline: Deadline) -> Result<bool, WriteError> {
        Ok(self.table(path, deadline).await?.takes_keyed_rows())
    }

    /// Writes `output`'s rows for `batch` (whole rows, made by the JSON
    /// mapping) to `path`, a table for which
    /// [`FlussWriter::takes_keyed_rows`] is true; waits for every
    /// acknowledgement and dead-letters what cannot be written (earlier dead
    /// letters are the mapping's), all before `deadline`. An error means some
    /// messages may not be in Fluss.
    pub async fn write_keyed_within(
        &self,
        batch: &MessageBatch,
        output: KeyedOutput,
        path: &TablePath,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let table = self.table(path, deadline).await?;
        let what = format!("{} rows for {path}", output.rows.len());
        let written = self
            .guard_staleness(path, deadline, async {
                let (Sink::Keyed(sink), true) = (&table.sink, table.takes_keyed_rows()) else {
                    return Err(WriteError::Table {
                        table: path.to_string(),
                        reason: "keyed rows go to unpartitioned primary-key tables".into(),
                    });
                };
                // Whole rows: the full writer's column set (partial updates of
                // other columns in flight on this table are waited for).
                let Ok(_pass) = deadline.run(sink.gate.enter(&None)).await else {
                    return Err(undelivered(
                        &what,
                        0,
                        "writes of other columns held the table until the deadline",
                    ));
                };
                let writer = sink.full();
                let mut failures = Vec::new();
                self.send_rows(
                    &table,
                    &output.rows,
                    &what,
                    |kind, row| send_keyed(writer, kind, row),
                    || writer.flush(),
                    deadline,
                    &mut failures,
                )
                .await?;
                Ok(failures)
            })
            .await?;
        let row_messages: Vec<u32> = output.rows.iter().map(|(m, _, _)| *m).collect();
        let lean = LeanWritten {
            kinds: vec![DeadLetterKind::Mapping; batch.len()],
            outcomes: output.outcomes,
            rows: vec![(path, &row_messages)],
        };
        self.finish_lean_write(batch, lean, written, deadline).await
    }
}
