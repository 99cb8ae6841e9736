//! A transform's rows written as they are made. Chunk after chunk (one
//! transform call each, in message order), the rows for log tables whose
//! Arrow batches land whole are checked, put in their tables' columns and
//! sent while the next chunks are still being made: the lean path (a chunk
//! whose columns were made beside its rows, see [`crate::writer::writes::finished`], is sent
//! as it comes). Rows for
//! an unpartitioned primary-key table are made into the upsert writer's
//! rows chunk by chunk as they come, then sent: the keyed lean path. At the
//! first chunk either path cannot take (a row for any other kind of table,
//! or a partial update), what was sent is settled first; then that chunk
//! and the ones after it go the encoded way, so that no bucket sees its
//! rows out of order.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use crate::batch::MessageBatch;
use crate::deadline::Deadline;
use crate::rows::columns::ColumnOutput;
use crate::rows::guest_columns::{LeanTable, guest_columns};
use crate::rows::{DeadLetterKind, MessageOutcome, TransformOutput};
use crate::schema::TablePath;
use crate::writer::send::log_columns::LeanChunk;
use crate::writer::tables::Table;
use crate::writer::tables::routing;
use crate::writer::writes::chunks::MadeChunks;
use crate::writer::writes::finished::TransformedChunk;
use crate::writer::{FlussWriter, WriteError, WriteReport};

/// Messages whose rows are put in Arrow columns and sent together on the
/// lean path (the client joins what fits its batches).
const COLUMN_CHUNK: usize = 500;

impl FlussWriter {
    /// Writes the rows `chunks` makes of `batch` (one [`TransformedChunk`]
    /// per chunk of messages, in message order; columns that come made
    /// with a chunk's rows are sent as they are) to `default_table` and the
    /// tables the rows name, waits for every acknowledgement, and
    /// dead-letters what cannot be written, all before `deadline`; `stage`
    /// names where earlier dead letters came from. Each chunk is written as
    /// soon as `chunks` gives it (awaited until it is made). When `chunks` ends before the batch does, only the messages of
    /// the chunks it gave are written and reported. An error means some
    /// messages may not be in Fluss.
    pub(in crate::writer) async fn write_transformed_within(
        &self,
        batch: &MessageBatch,
        chunks: impl MadeChunks<Chunk = Arc<TransformedChunk>>,
        default_table: &TablePath,
        stage: DeadLetterKind,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        self.guard_staleness(
            default_table,
            deadline,
            self.write_transformed(batch, chunks, default_table, stage, deadline),
        )
        .await
    }

    async fn write_transformed(
        &self,
        batch: &MessageBatch,
        mut chunks: impl MadeChunks<Chunk = Arc<TransformedChunk>>,
        default_table: &TablePath,
        stage: DeadLetterKind,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let default = self.table(default_table, deadline).await?;
        // The lean paths take the chunks they can; then `start` messages
        // are written, and `held` is the first chunk they could not take.
        let (mut report, start, held) = if default.takes_columns() {
            let mut lean = LeanStream {
                writer: self,
                batch,
                default_table,
                stage,
                deadline,
                resolved: HashMap::new(),
                tables: vec![Some(default.clone())],
                output: TransformOutput::default(),
                kinds: Vec::new(),
                pending: 0..0,
                held: None,
            };
            let lean_chunks = LeanChunks {
                lean: &mut lean,
                chunks: &mut chunks,
            };
            let report = self.write_column_chunks(batch, lean_chunks, deadline).await?;
            (report, lean.output.outcomes.len(), lean.held.take())
        } else if default.takes_keyed_rows() {
            self.write_keyed_chunks(batch, &mut chunks, &default, stage, deadline)
                .await?
        } else {
            (WriteReport::default(), 0, None)
        };
        // The rest, from the first chunk the lean paths cannot take.
        let mut rest = TransformOutput::default();
        if let Some(held) = held {
            rest.append(Arc::unwrap_or_clone(held));
        }
        while let Some(chunk) = chunks.next_chunk().await {
            rest.append_copy(&chunk.rows);
        }
        if rest.outcomes.is_empty() {
            return Ok(report);
        }
        let end = start + rest.outcomes.len();
        let sliced;
        let rest_batch = if (start, end) == (0, batch.len()) {
            batch
        } else {
            sliced = batch.slice(start..end);
            &sliced
        };
        let encoded = self
            .write_rows_of(rest_batch, rest, default_table, stage, deadline)
            .await?;
        report.add(&encoded);
        Ok(report)
    }
}

/// The lean path's side of a streamed write: the chunks taken so far, the
/// tables they name, and the chunk it could not take.
struct LeanStream<'w> {
    writer: &'w FlussWriter,
    batch: &'w MessageBatch,
    default_table: &'w TablePath,
    stage: DeadLetterKind,
    deadline: Deadline,
    /// Every table name met, resolved (or why it cannot be had).
    resolved: HashMap<String, Result<Arc<Table>, String>>,
    /// The tables of `output`'s rows by index (0: the sink's own; `None`:
    /// one that cannot be had, whose messages are dead-lettered).
    tables: Vec<Option<Arc<Table>>>,
    /// The chunks taken, joined in message order.
    output: TransformOutput,
    /// The kind of each of `output`'s dead letters.
    kinds: Vec<DeadLetterKind>,
    /// Messages of `output` not yet put in columns.
    pending: Range<usize>,
    /// The first chunk with rows for a table the lean path cannot write.
    held: Option<Arc<TransformOutput>>,
}

/// The lean path's chunks of columns, made of the chunks of rows a
/// transform makes.
struct LeanChunks<'s, 'w, C> {
    lean: &'s mut LeanStream<'w>,
    chunks: &'s mut C,
}

impl<C: MadeChunks<Chunk = Arc<TransformedChunk>>> MadeChunks for LeanChunks<'_, '_, C> {
    type Chunk = Result<LeanChunk, WriteError>;

    async fn next_chunk(&mut self) -> Option<Self::Chunk> {
        self.lean.next_chunk(self.chunks).await
    }

    /// Made when the lean stream has rows taken but not yet in columns (or
    /// holds a chunk back: the end), or the transform's next chunk is made.
    fn next_is_made(&self) -> bool {
        self.lean.held.is_some() || !self.lean.pending.is_empty() || self.chunks.next_is_made()
    }
}

impl LeanStream<'_> {
    /// The next [`COLUMN_CHUNK`] messages' columns, taking the next chunk
    /// from `chunks` when those taken are done; `None` at the end of
    /// `chunks` or at a chunk the lean path cannot take (then held).
    async fn next_chunk(
        &mut self,
        chunks: &mut impl MadeChunks<Chunk = Arc<TransformedChunk>>,
    ) -> Option<Result<LeanChunk, WriteError>> {
        if self.held.is_some() {
            return None;
        }
        if self.pending.is_empty() {
            let chunk = chunks.next_chunk().await?;
            match self.take_premade(&chunk).await {
                Ok(Some(made)) => return Some(Ok(made)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            let rows = match Arc::try_unwrap(chunk) {
                Ok(chunk) => chunk.rows,
                Err(shared) => shared.rows.clone(),
            };
            match self.take(rows).await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
        let start = self.pending.start;
        let messages = start..(start + COLUMN_CHUNK).min(self.pending.end);
        self.pending.start = messages.end;
        let tables: Vec<Option<LeanTable<'_>>> = self
            .tables
            .iter()
            .map(|t| {
                t.as_deref().map(|t| LeanTable {
                    schema: &t.schema,
                    arrow_schema: &t.arrow_schema,
                })
            })
            .collect();
        let include_metadata = self.writer.settings.include_metadata;
        let made = guest_columns(
            &self.output,
            messages.clone(),
            self.batch,
            &tables,
            include_metadata,
        );
        let columns = made.unwrap_or_else(|reason| ColumnOutput {
            outcomes: vec![
                MessageOutcome::DeadLetter(format!("cannot build the Arrow batch: {reason}"));
                messages.len()
            ],
            ..ColumnOutput::default()
        });
        Some(Ok(LeanChunk {
            columns,
            kinds: self.kinds[messages].to_vec(),
            tables: self.tables.clone(),
        }))
    }

    /// The columns made with `chunk`'s rows where they were made (see
    /// [`TransformedChunk::premade`]), taken as they are when every table
    /// they were made for is the very table the rows' table names resolve
    /// to now; `None` when there are none or one is not (the rows are then
    /// taken instead).
    async fn take_premade(&mut self, chunk: &TransformedChunk) -> Result<Option<LeanChunk>, WriteError> {
        let Some((made_for, columns)) = chunk.premade() else {
            return Ok(None);
        };
        let names = chunk.rows.rows.tables();
        let default = self.tables[0].as_ref().expect("the sink's own table");
        if made_for.len() != names.len() + 1 || !Arc::ptr_eq(&made_for[0], default) {
            return Ok(None);
        }
        self.resolve(names).await?;
        let same = names
            .iter()
            .zip(&made_for[1..])
            .all(|(name, table)| matches!(&self.resolved[name], Ok(t) if Arc::ptr_eq(t, table)));
        if !same {
            return Ok(None);
        }
        let indexes = self.output.rows.table_indexes(names);
        self.name_new_tables();
        Ok(Some(self.take_made(columns.clone().routed_to(&indexes))))
    }

    /// Resolves each of `names` (tables a chunk's rows name) not resolved
    /// yet: past [`routing::MAX_TABLES_PER_BATCH`], or where rows may not
    /// go, one cannot be had.
    async fn resolve(&mut self, names: &[String]) -> Result<(), WriteError> {
        for name in names {
            if self.resolved.contains_key(name) {
                continue;
            }
            let resolved = if self.resolved.len() >= routing::MAX_TABLES_PER_BATCH {
                Err(format!(
                    "the batch names more than {} distinct tables",
                    routing::MAX_TABLES_PER_BATCH
                ))
            } else {
                let default = self.tables[0].as_ref().expect("the sink's own table");
                self.writer
                    .resolve_routed(name, self.default_table, default, self.deadline)
                    .await?
            };
            self.resolved.insert(name.clone(), resolved);
        }
        Ok(())
    }

    /// The tables of the names `output` has come to name since the last call.
    fn name_new_tables(&mut self) {
        let named = self.output.rows.tables();
        for name in &named[self.tables.len() - 1..] {
            self.tables.push(self.resolved[name].as_ref().ok().cloned());
        }
    }

    /// Takes `columns`, a chunk's rows made into their tables' columns
    /// where they were made, as they are.
    fn take_made(&mut self, columns: ColumnOutput) -> LeanChunk {
        // Their messages counted, their rows not copied: the messages after
        // them keep their place in the batch.
        self.output.outcomes.extend_from_slice(&columns.outcomes);
        self.kinds.resize(self.output.outcomes.len(), self.stage);
        LeanChunk {
            kinds: vec![self.stage; columns.outcomes.len()],
            columns,
            tables: self.tables.clone(),
        }
    }

    /// Takes `chunk` onto the lean path (`true`), or holds it back when one
    /// of the tables it names is not a log table whose batches land whole
    /// (`false`). Rows for a table that cannot be had (or may not be routed
    /// to) dead-letter their message.
    async fn take(&mut self, chunk: Arc<TransformOutput>) -> Result<bool, WriteError> {
        self.resolve(chunk.rows.tables()).await?;
        let other_kind = chunk
            .rows
            .tables()
            .iter()
            .any(|name| matches!(&self.resolved[name], Ok(t) if !t.takes_columns()));
        if other_kind {
            self.held = Some(chunk);
            return Ok(false);
        }
        let start = self.output.outcomes.len();
        match Arc::try_unwrap(chunk) {
            // Rows made whole beforehand, shared with no one: taken as they are.
            Ok(whole) => self.output.append(whole),
            Err(shared) => {
                if start == 0 {
                    // Room for the whole batch at this chunk's rate: the
                    // joined rows are copied once, never moved as they grow.
                    let (messages, per) = (self.batch.len(), shared.outcomes.len().max(1));
                    self.output.reserve(
                        messages,
                        shared.rows.len() * messages / per,
                        shared.rows.encoded_bytes() * messages / per,
                    );
                }
                self.output.append_copy(&shared);
            }
        }
        let end = self.output.outcomes.len();
        self.kinds.resize(end, self.stage);
        self.name_new_tables();
        let mut unresolved = Vec::new();
        for (entry, _) in self.output.rows.iter_messages(start..end) {
            if let Some(name) = self.output.rows.table_name(entry.table)
                && let Err(reason) = &self.resolved[name]
            {
                unresolved.push((entry.message as usize, format!("table {name}: {reason}")));
            }
        }
        for (message, reason) in unresolved {
            self.output.outcomes[message] = MessageOutcome::DeadLetter(reason);
            self.kinds[message] = DeadLetterKind::Table;
        }
        self.pending = start..end;
        Ok(true)
    }
}
