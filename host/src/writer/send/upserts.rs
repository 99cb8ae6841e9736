//! The keyed lean path's writes: a primary-key table's rows made straight
//! into fluss-rs's `GenericRow`s ([`KeyedOutput`], by the JSON mapping or
//! from a transform's rows) sent through the table's full upsert writer,
//! with the retries and ordering of every keyed write (`send_rows`), and
//! what cannot be written dead-lettered.

use std::sync::Arc;

use fluss::row::Datum;

use crate::batch::MessageBatch;
use crate::deadline::Deadline;
use crate::rows::TransformOutput;
use crate::rows::guest_keyed::guest_keyed;
use crate::rows::keyed::KeyedOutput;
use crate::schema::TablePath;
use crate::writer::delivery::failure::undelivered;
use crate::writer::send::rows::send_keyed;
use crate::writer::tables::{Sink, Table};
use crate::writer::writes::chunks::MadeChunks;
use crate::writer::writes::finished::TransformedChunk;
use crate::writer::{DeadLetterKind, FlussWriter, LeanWritten, WriteError, WriteReport};

impl FlussWriter {
    /// Writes `output`'s rows for `batch` (whole rows, made by the JSON
    /// mapping) to `path`, a table of
    /// [`TableKind::KeyedRows`](crate::writer::TableKind::KeyedRows); waits for every
    /// acknowledgement and dead-letters what cannot be written (earlier dead
    /// letters are the mapping's), all before `deadline`. An error means some
    /// messages may not be in Fluss.
    pub(in crate::writer) async fn write_keyed_within(
        &self,
        batch: &MessageBatch,
        output: KeyedOutput,
        path: &TablePath,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let table = self.table(path, deadline).await?;
        let kinds = vec![DeadLetterKind::Mapping; output.outcomes.len()];
        let written = self.guard_staleness(path, deadline, self.send_keyed_rows(&table, &output, deadline));
        let written = written.await?;
        self.finish_keyed_write(batch, output, kinds, path, written, deadline)
            .await
    }

    /// Writes a transform's rows for `batch` to `table` (an unpartitioned
    /// primary-key table) on the keyed lean path: each chunk `chunks` gives
    /// is made into rows as it comes ([`guest_keyed`]), until the end or a
    /// chunk that path cannot take (a partial update, or a row for another
    /// table), which is handed back; then the rows made are written, every
    /// acknowledgement awaited and what cannot be written dead-lettered
    /// (earlier dead letters are `stage`'s), all before `deadline`. Gives
    /// what became of the messages taken, how many were, and the chunk
    /// handed back. Called within the write's staleness guard.
    pub(in crate::writer) async fn write_keyed_chunks(
        &self,
        batch: &MessageBatch,
        chunks: &mut impl MadeChunks<Chunk = Arc<TransformedChunk>>,
        table: &Table,
        stage: DeadLetterKind,
        deadline: Deadline,
    ) -> Result<(WriteReport, usize, Option<Arc<TransformOutput>>), WriteError> {
        let include_metadata = self.settings.include_metadata;
        let mut output = KeyedOutput::default();
        let mut misfits = Vec::new();
        let mut held = None;
        while let Some(chunk) = chunks.next_chunk().await {
            let chunk = chunk.rows.clone();
            let first = output.outcomes.len();
            match guest_keyed(&chunk, first, batch, &table.schema, include_metadata) {
                Some(made) => {
                    misfits.extend(made.misfits.iter().map(|&m| first + m as usize));
                    output.append(made.output);
                }
                None => {
                    held = Some(chunk);
                    break;
                }
            }
        }
        let taken = output.outcomes.len();
        if taken == 0 {
            return Ok((WriteReport::default(), 0, held));
        }
        let mut kinds = vec![stage; taken];
        for m in misfits {
            kinds[m] = DeadLetterKind::Schema;
        }
        let written = self.send_keyed_rows(table, &output, deadline).await?;
        let path = &table.schema.path;
        let report = self
            .finish_keyed_write(batch, output, kinds, path, written, deadline)
            .await?;
        Ok((report, taken, held))
    }

    /// Sends `output`'s rows to `table` through its full upsert writer and
    /// awaits them; gives the messages Fluss refused for good, with why.
    async fn send_keyed_rows(
        &self,
        table: &Table,
        output: &KeyedOutput,
        deadline: Deadline,
    ) -> Result<Vec<(u32, String)>, WriteError> {
        let path = &table.schema.path;
        let what = format!("{} rows for {path}", output.rows.len());
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
        let columns = table.schema.columns.len();
        let mut failures = Vec::new();
        self.send_rows(
            table,
            &output.rows,
            &what,
            |kind, row| {
                if row.values.len() < columns && table.schema.takes_cell_count(row.values.len()) {
                    // Made against the columns the table had before its last
                    // ones were added: NULL in those.
                    let mut widened = row.clone();
                    widened.values.resize(columns, Datum::Null);
                    return send_keyed(writer, kind, &widened);
                }
                send_keyed(writer, kind, row)
            },
            || writer.flush(),
            deadline,
            &mut failures,
        )
        .await?;
        Ok(failures)
    }

    /// The end of a keyed write of `output` (the first messages of
    /// `batch`, `kinds` the kind of each of their dead letters so far):
    /// see `finish_lean_write`.
    async fn finish_keyed_write(
        &self,
        batch: &MessageBatch,
        output: KeyedOutput,
        kinds: Vec<DeadLetterKind>,
        path: &TablePath,
        refused: Vec<(u32, String)>,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let row_messages: Vec<u32> = output.rows.iter().map(|(m, _, _)| *m).collect();
        let lean = LeanWritten {
            kinds,
            outcomes: output.outcomes,
            rows: vec![(path, &row_messages)],
        };
        self.finish_lean_write(batch, lean, refused, deadline).await
    }
}
