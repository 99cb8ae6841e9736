//! The row stage: how a batch's messages become rows — a WebAssembly
//! transform, the JSON mapping by column name, or none (Arrow IPC payloads
//! are appended as they are).

use std::sync::Arc;

use crate::batch::{MessageBatch, PayloadSchema};
use crate::config::{PayloadFormat, SinkConfig, TableType};

use crate::rows::DeadLetterKind;
use crate::rows::columns::ColumnOutput;
use crate::rows::json::{ColumnMapping, JsonMapping};
use crate::rows::keyed::{KeyedMapping, KeyedOutput};
use crate::rows::{MessageOutcome, RowBatch, TransformOutput};
use crate::schema::TableSchema;
use crate::transform::{Transform, TransformError};
use crate::writer::{ChunkFinisher, TableKind, TransformedChunk};

/// How messages become rows: a WebAssembly transform, the JSON mapping, or
/// Arrow IPC passthrough (written as it is, without rows).
pub enum RowStage {
    /// A loaded transform.
    Wasm(Arc<Transform>),
    /// JSON fields onto columns by name.
    Json(JsonMapping),
    /// JSON fields onto a log table's Arrow columns in one pass (the lean
    /// row path, see [`crate::rows::columns`]).
    JsonColumns(ColumnMapping),
    /// JSON fields onto a primary-key table's `GenericRow`s in one pass (the
    /// keyed lean path, see [`crate::rows::keyed`]).
    JsonKeyed(KeyedMapping),
    /// Arrow IPC payloads appended as they are.
    ArrowIpc,
}

impl RowStage {
    /// The stage `config` asks for, for the sink table `schema` (loading a
    /// transform compiles it: call off async workers).
    pub fn from_config(config: &SinkConfig, schema: &TableSchema) -> Result<Self, TransformError> {
        Ok(match (config.transform_spec(), config.payload_format) {
            (Some(spec), _) => {
                let transform = Transform::load(&spec, std::slice::from_ref(schema))?;
                let info = transform.load_info();
                tracing::info!("transform loaded ({:?}, {:?})", info.source, info.compile_time);
                Self::Wasm(Arc::new(transform))
            }
            (None, PayloadFormat::Json) => Self::Json(
                JsonMapping::new(schema, config.write_mode().row_kind())
                    .with_partial_update(config.partial_update)
                    .refusing_unknown_fields(config.evolve_schema)
                    .with_metadata(config.include_metadata)
                    .with_route_field(config.route_field())
                    .with_op_header(
                        (config.table_type == TableType::PrimaryKey).then(|| config.op_header.clone()),
                    ),
            ),
            (None, PayloadFormat::ArrowIpc) => Self::ArrowIpc,
        })
    }

    /// The rows of `chunk` (see [`RowStage::rows`]), with the columns of
    /// `finisher`'s table made of them when it is given. A transform's rows
    /// are put in those columns as they are read from its buffer, each cell
    /// decoded once; when that cannot be (a call that failed and was
    /// retried), they are made of the rows read.
    pub(crate) fn finished_rows(
        &self,
        schema: PayloadSchema,
        chunk: &MessageBatch,
        finisher: Option<&ChunkFinisher>,
    ) -> Result<TransformedChunk, TransformError> {
        let (Self::Wasm(transform), Some(finisher)) = (self, finisher) else {
            let rows = Arc::new(self.rows(schema, chunk)?);
            return Ok(match finisher {
                Some(finisher) => finisher.finish(rows, chunk),
                None => TransformedChunk::from(rows),
            });
        };
        let (rows, columns) = transform.process_into_columns(
            chunk,
            finisher.lean_table(),
            Some(finisher.routes()),
            finisher.include_metadata(),
        )?;
        let rows = Arc::new(rows);
        Ok(match columns {
            Some(columns) => finisher.with_columns(rows, columns),
            None => finisher.finish(rows, chunk),
        })
    }

    /// The rows of `chunk`, whose payloads are of the runtime's `schema`
    /// (CPU work). Arrow IPC has no rows: its payloads are written as they are.
    pub fn rows(
        &self,
        schema: PayloadSchema,
        chunk: &MessageBatch,
    ) -> Result<TransformOutput, TransformError> {
        match self {
            Self::Wasm(transform) => transform.process(chunk),
            // The runtime's decoders for Avro, Proto and FlatBuffer streams (and
            // its avro_convert / proto_convert transforms) hand the sink JSON
            // bytes while the batch keeps its original tag: map them as JSON,
            // and say so where a payload is not JSON after all.
            Self::Json(mapping) => {
                let mut output = mapping.map_batch(chunk);
                explain_tag(schema, &mut output.outcomes);
                Ok(output)
            }
            Self::JsonColumns(mapping) => {
                let mut output = mapping.mapping().map_batch(chunk);
                explain_tag(schema, &mut output.outcomes);
                Ok(output)
            }
            Self::JsonKeyed(mapping) => {
                let mut output = mapping.encoded(chunk);
                explain_tag(schema, &mut output.outcomes);
                Ok(output)
            }
            Self::ArrowIpc => Ok(dead_letter_all(
                chunk.len(),
                "arrow_ipc payloads are appended as they are, not made into rows",
            )),
        }
    }

    /// The rows of `chunk` as Arrow columns, on the lean row path (`None`
    /// for the other stages).
    pub(crate) fn column_chunk(&self, schema: PayloadSchema, chunk: &MessageBatch) -> Option<ColumnOutput> {
        let Self::JsonColumns(mapping) = self else {
            return None;
        };
        let mut output = mapping.map_batch(chunk);
        explain_tag(schema, &mut output.outcomes);
        Some(output)
    }

    /// The rows of `chunk` for a primary-key table, on the keyed lean path
    /// (`None` for the other stages).
    pub(crate) fn keyed_chunk(&self, schema: PayloadSchema, chunk: &MessageBatch) -> Option<KeyedOutput> {
        let Self::JsonKeyed(mapping) = self else {
            return None;
        };
        let mut output = mapping.map_batch(chunk);
        explain_tag(schema, &mut output.outcomes);
        Some(output)
    }

    /// This stage for the sink table `schema`, which takes rows as `kind`
    /// says: the JSON mapping onto that one table makes its Arrow columns
    /// in one pass for a table of [`TableKind::Columns`], or its whole rows
    /// (no partial updates) for one of [`TableKind::KeyedRows`]; any other
    /// stage stays as it is.
    pub fn for_table(self, schema: &TableSchema, kind: &TableKind, include_metadata: bool) -> Self {
        match (self, kind) {
            (Self::Json(mapping), TableKind::Columns(arrow_schema)) if mapping.maps_to_one_table() => {
                Self::JsonColumns(ColumnMapping::new(
                    mapping,
                    schema.clone(),
                    arrow_schema.clone(),
                    include_metadata,
                ))
            }
            (Self::Json(mapping), TableKind::KeyedRows)
                if mapping.maps_to_one_table() && !mapping.is_partial_update() =>
            {
                Self::JsonKeyed(KeyedMapping::new(mapping, schema.clone(), include_metadata))
            }
            (stage, _) => stage,
        }
    }

    /// The most messages one chunk may hold for this stage: a transform's
    /// calls are kept well inside its `call_timeout` (see
    /// [`Transform::messages_per_call`]), 500 messages until its pace is
    /// known. `None` without a transform.
    pub(crate) fn messages_per_chunk(&self) -> Option<usize> {
        match self {
            Self::Wasm(t) => Some(
                t.messages_per_call()
                    .unwrap_or(crate::config::defaults::BATCH_SIZE),
            ),
            _ => None,
        }
    }

    /// Transform calls that failed so far (0 without a transform).
    pub fn faults(&self) -> u64 {
        match self {
            Self::Wasm(t) => t.stats().faults.load(std::sync::atomic::Ordering::Relaxed),
            _ => 0,
        }
    }

    /// Whether the JSON mapping met a field without a column since the
    /// last call (skipped: `evolve_schema` is off).
    pub(crate) fn took_unknown_field(&self) -> bool {
        match self {
            Self::Json(mapping) => mapping.took_unknown_field(),
            Self::JsonColumns(mapping) => mapping.mapping().took_unknown_field(),
            Self::JsonKeyed(mapping) => mapping.mapping().took_unknown_field(),
            Self::Wasm(_) | Self::ArrowIpc => false,
        }
    }

    /// Whether every row this stage makes is for the sink's own table: no
    /// routing (a transform may route any row).
    pub(crate) fn maps_to_one_table(&self) -> bool {
        match self {
            Self::Wasm(_) => false,
            Self::Json(mapping) => mapping.maps_to_one_table(),
            Self::JsonColumns(_) | Self::JsonKeyed(_) | Self::ArrowIpc => true,
        }
    }

    /// The kind dead letters of this stage carry.
    pub fn kind(&self) -> DeadLetterKind {
        match self {
            Self::Wasm(_) => DeadLetterKind::Transform,
            Self::Json(_) | Self::JsonColumns(_) | Self::JsonKeyed(_) => DeadLetterKind::Mapping,
            Self::ArrowIpc => DeadLetterKind::ArrowIpc,
        }
    }
}

/// The runtime's decoders for Avro, Proto and FlatBuffer streams (and its
/// avro_convert / proto_convert transforms) hand the sink JSON bytes while
/// the batch keeps its original tag: they are mapped as JSON, and a
/// payload that is not JSON after all says so.
fn explain_tag(schema: PayloadSchema, outcomes: &mut [MessageOutcome]) {
    if !matches!(
        schema,
        PayloadSchema::Avro | PayloadSchema::Proto | PayloadSchema::FlatBuffer
    ) {
        return;
    }
    for outcome in outcomes {
        // A field without a column is not a payload misread (and the sink
        // reads the field's name back from the reason).
        if crate::rows::json::new_field_of(outcome).is_some() {
            continue;
        }
        if let MessageOutcome::DeadLetter(reason) = outcome {
            reason.push_str(&format!(
                " (the stream is tagged {schema:?}; without a transform the sink maps JSON, which \
                 the runtime's {schema:?} decoder hands over)"
            ));
        }
    }
}

/// An output that dead-letters all `count` messages for `reason`.
fn dead_letter_all(count: usize, reason: &str) -> TransformOutput {
    TransformOutput {
        outcomes: vec![MessageOutcome::DeadLetter(reason.to_string()); count],
        rows: RowBatch::default(),
    }
}
