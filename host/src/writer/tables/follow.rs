//! Tables that change while the writer has them open: Fluss adds columns
//! (nullable, at the end) to a table in use, and a writer made before the
//! change keeps writing the old columns. [`FlussWriter::follow_tables`]
//! asks Fluss for each open table's schema and opens again each one whose
//! schema changed; writes under way finish with the table they hold, the
//! next ones get the new one. Rows made against the old columns (a
//! transform's, made before it was initialised again; the spool's) stop
//! short of the added ones and get NULL there (see
//! [`crate::schema::TableSchema::added_columns`]).

use std::sync::Arc;

use futures::StreamExt;

use super::{Table, expired, fluss_path};
use crate::deadline::Deadline;
use crate::schema::{TablePath, TableSchema};
use crate::writer::{FlussWriter, WriteError};

/// How many open tables one look asks Fluss about at once (one request to
/// the coordinator each), so that a look at many routed tables takes about
/// as long as a look at a few.
const LOOKS_AT_ONCE: usize = 8;

/// A table whose schema changed in Fluss, now open with its new schema.
#[derive(Debug, Clone)]
pub struct SchemaChange {
    /// Which table.
    pub table: TablePath,
    /// The columns added at the end since the writer last looked.
    pub added: Vec<String>,
    /// The table was dropped and made again (another table id), or its
    /// columns changed otherwise than by an addition at the end: rows are
    /// checked against the new columns only.
    pub remade: bool,
    /// The schema now.
    pub schema: TableSchema,
}

impl FlussWriter {
    /// Looks at every open table's schema in Fluss, each within `deadline`
    /// (up to [`LOOKS_AT_ONCE`] at a time), and opens again those whose
    /// schema changed. A table Fluss cannot
    /// tell about now is left as it is (logged at debug level) and looked
    /// at again next time. The changes a write met since the last call (see
    /// [`FlussWriter::table_after_change`]) come first.
    pub async fn follow_tables(&self, deadline: Deadline) -> Vec<SchemaChange> {
        let open: Vec<(TablePath, Arc<Table>)> = (self.tables.lock().await.iter())
            .map(|(path, table)| (path.clone(), table.clone()))
            .collect();
        let mut changes = std::mem::take(&mut *self.changes_met.lock().unwrap_or_else(|e| e.into_inner()));
        let looks = futures::stream::iter(open)
            .map(|(path, table)| async move {
                let looked = self.follow_table(&path, &table, deadline).await;
                (path, looked)
            })
            .buffered(LOOKS_AT_ONCE);
        let looked: Vec<_> = looks.collect().await;
        for (path, looked) in looked {
            match looked {
                Ok(Some(change)) => changes.push(change),
                Ok(None) => {}
                Err(e) => tracing::debug!(table = %path, "cannot look at the table's schema now: {e}"),
            }
        }
        changes
    }

    /// The table at `path` as it is open now, once a write through the one
    /// it held was refused for a schema it no longer has: looked at again at
    /// once (the change kept for [`FlussWriter::follow_tables`] to report),
    /// unless it was opened again since.
    pub(in crate::writer) async fn table_after_change(
        &self,
        path: &TablePath,
        deadline: Deadline,
    ) -> Result<Arc<Table>, WriteError> {
        let open = self.table(path, deadline).await?;
        if let Some(change) = self.follow_table(path, &open, deadline).await? {
            tracing::info!(table = %path, "a write met a change of table {path}: it is opened again");
            (self.changes_met.lock().unwrap_or_else(|e| e.into_inner())).push(change);
        }
        self.table(path, deadline).await
    }

    /// Opens `path` again when its schema in Fluss is not `open`'s.
    pub(super) async fn follow_table(
        &self,
        path: &TablePath,
        open: &Arc<Table>,
        deadline: Deadline,
    ) -> Result<Option<SchemaChange>, WriteError> {
        let info = deadline
            .run(self.admin.get_table_info(&fluss_path(path)))
            .await
            .map_err(|_| expired(path, "looking at the schema of"))?
            .map_err(|source| WriteError::Catalog {
                table: path.to_string(),
                step: Some("cannot look at the table's schema".into()),
                source: Box::new(source),
            })?;
        if (info.get_table_id(), info.get_schema_id()) == (open.table_id, open.schema_id) {
            return Ok(None);
        }
        let mut reopened = self.open_table(path, deadline).await?;
        let (before, after) = (&open.schema.columns, &reopened.schema.columns);
        let appended = open.table_id == reopened.table_id
            && after.len() >= before.len()
            && after[..before.len()] == before[..];
        let added: Vec<String> = if appended {
            after[before.len()..].iter().map(|c| c.name.clone()).collect()
        } else {
            Vec::new()
        };
        if appended {
            reopened.schema.added_columns = open.schema.added_columns + added.len();
        }
        let schema = reopened.schema.clone();
        let reopened = Arc::new(reopened);
        {
            let mut tables = self.tables.lock().await;
            // Another look may have swapped it already: the newest stays.
            match tables.get(path) {
                Some(current) if Arc::ptr_eq(current, open) => {
                    tables.insert(path.clone(), reopened);
                }
                _ => return Ok(None),
            }
        }
        Ok(Some(SchemaChange {
            table: path.clone(),
            added,
            remade: !appended,
            schema,
        }))
    }
}
