//! `iggy_connector_fluss_sink`: a sink plugin for the Apache Iggy connectors
//! runtime that lands messages in Apache Fluss, reshaped by user-supplied
//! WebAssembly transforms.
//!
//! Data flows one way:
//!
//! - `abi`: the runtime's C calls, decoded into a [`MessageBatch`]; the only
//!   module that touches raw pointers;
//! - `pipeline`: one per plugin instance, configured by `config`
//!   ([`SinkConfig`]), spooling batches to disk (`spool`) when asked;
//! - the row stage: a WebAssembly `transform` ([`Transform`]), the JSON
//!   mapping ([`JsonMapping`], [`ColumnMapping`]) or Arrow IPC, each giving
//!   one outcome per message and its rows (`rows`: [`TransformOutput`]);
//! - `writer`: the rows written to Fluss ([`FlussWriter`]), dead letters
//!   included, within one [`Deadline`] per call.
//!
//! The modules are private; this page is the crate's whole public surface,
//! used by the `fluss-sink` CLI, the integration tests and the benchmarks.
//! The `test-support` feature adds [`test_support`], for benchmarks, fuzz
//! targets and tests that need the sink's internals (the chunk-level types
//! among them).

mod abi;
mod batch;
mod config;
mod deadline;
mod metrics;
mod pipeline;
mod private_dir;
mod retry;
mod rows;
mod schema;
mod spool;
mod transform;
mod writer;

pub use batch::{BatchTooLarge, Header, HeaderKind, MessageBatch, MessageRef, PayloadSchema, Source};
pub use config::{ColumnConfig, ConfigError, SinkConfig, TableType};
pub use deadline::{Deadline, Expired};
pub use metrics::InstanceMetrics;
pub use pipeline::RowStage;
pub use rows::json::JsonMapping;
pub use rows::{DeadLetterKind, MessageOutcome, RowBatch, RowEntry, TransformOutput};
pub use schema::{BadTablePath, Column, DataType, TablePath, TableSchema};
pub use transform::cache::LoadSource;
pub use transform::{Limits, LoadInfo, Transform, TransformError, TransformSpec, TransformStats, version_of};
pub use writer::{
    AddedColumns, ArrowIpcPayloads, BatchRows, ClientError, ColumnChunks, FlussWriter, MadeRows,
    SchemaChange, TableKind, TransformedChunks, WriteError, WriteReport, WriteTarget, WriterSettings,
    Writing,
};

/// The sink's internals that benchmarks and fuzz targets measure or feed
/// directly; not a stable interface.
#[cfg(feature = "test-support")]
pub mod test_support {
    use arrow::datatypes::SchemaRef;
    use arrow::record_batch::RecordBatch;

    use crate::{TableSchema, TransformOutput};

    pub use crate::abi::decode;
    pub use crate::rows::json::ColumnMapping;
    pub use crate::rows::keyed::{KeyedMapping, KeyedOutput};
    pub use crate::writer::{AllMade, ChunkFinisher, MadeChunks, TransformedChunk};

    /// Fetches table `path`'s metadata into `writer`'s client again, as the
    /// writer does itself after a write that was not acknowledged in time,
    /// without opening the table again: after a column was added, the
    /// writers it holds are then of a schema the client no longer has.
    pub async fn refresh_client_metadata(writer: &crate::FlussWriter, path: &crate::TablePath) {
        writer
            .refresh_table_metadata(path, crate::Deadline::after(std::time::Duration::from_secs(10)))
            .await;
    }

    /// Fluss's Arrow form of `schema`, as the writer appends it.
    pub fn arrow_schema_of(schema: &TableSchema) -> Result<SchemaRef, String> {
        crate::writer::arrow_schema_of(schema)
    }

    /// The Arrow record batch the writer appends for `output`'s rows of the
    /// sink's own table (rows must fit `schema`), so that benchmarks can
    /// hand fluss-rs the very same batch.
    pub fn to_record_batch(
        output: &TransformOutput,
        schema: &TableSchema,
        arrow_schema: &SchemaRef,
    ) -> Result<RecordBatch, String> {
        crate::writer::to_record_batch(output, schema, arrow_schema)
    }

    /// [`to_record_batch`] made with arrow's own `make_builder` builders
    /// instead of the sink's typed ones, for the `row_path` bench to compare
    /// (the bench table's types only: BIGINT, STRING, DECIMAL, TIMESTAMP(6)).
    pub fn to_record_batch_with_arrow_builders(
        output: &TransformOutput,
        schema: &TableSchema,
        arrow_schema: &SchemaRef,
    ) -> Result<RecordBatch, String> {
        let rows = crate::writer::own_table_rows(output);
        crate::rows::to_fluss::record_batch_with_arrow_builders(&rows, schema, arrow_schema)
    }

    /// `transform`'s rows of `batch` in the lean path's Arrow columns of
    /// `schema`'s log table (`arrow_schema` its Arrow form), as a chunk's
    /// task makes them: put in the columns as they are read from the
    /// guest's buffer (`once`), or read first and then put in the columns.
    pub fn transform_columns(
        transform: &crate::Transform,
        batch: &crate::MessageBatch,
        schema: &TableSchema,
        arrow_schema: &SchemaRef,
        once: bool,
    ) -> Result<crate::rows::columns::ColumnOutput, String> {
        use crate::rows::guest_columns::{LeanTable, guest_columns};
        let table = LeanTable { schema, arrow_schema };
        if !once {
            let output = transform.process(batch).map_err(|e| e.to_string())?;
            return guest_columns(&output, 0..batch.len(), batch, &[Some(table)], false);
        }
        let (_, columns) = transform
            .process_into_columns(batch, table, None, false)
            .map_err(|e| e.to_string())?;
        columns.unwrap_or_else(|| Err("the transform's first call failed".into()))
    }
}
