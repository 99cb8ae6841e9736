//! What a dry run runs: its options, the row stage they describe (a
//! transform, the connector file's JSON mapping, or the plain mapping), and
//! that stage's outputs for a file of messages, checked as the sink checks
//! them. `fluss-sink dry-run` and its `--compare` both start here.

use std::path::PathBuf;
use std::sync::Arc;

use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::{
    JsonMapping, MessageBatch, PayloadSchema, RowStage, TableSchema, Transform, TransformOutput,
    TransformSpec,
};
use indicatif::{ProgressBar, ProgressStyle};

use crate::input;

/// Options of `dry-run`.
#[derive(clap::Args, Clone)]
pub(crate) struct Args {
    /// JSON-lines file: one message payload per line (see --envelope).
    #[arg(long)]
    pub(crate) input: PathBuf,
    /// The transform component (.wasm); without it, the JSON mapping runs.
    #[arg(long)]
    pub(crate) transform: Option<PathBuf>,
    /// The sink table's schema (TOML: table, primary_key, columns).
    #[arg(long)]
    pub(crate) schema: Option<PathBuf>,
    /// A connector file: its declared columns and transform are used unless given above.
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// A transform config entry, `key=value` (repeatable; replaces the connector file's).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) settings: Vec<String>,
    /// Lines are `{"payload": …, "headers": {"k": "v"}}` instead of bare payloads.
    #[arg(long)]
    pub(crate) envelope: bool,
    /// Print one JSON object per message instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Messages per transform call.
    #[arg(long, default_value_t = 1000)]
    pub(crate) batch_size: usize,
    /// Exit with status 1 when any message is dead-lettered.
    #[arg(long)]
    pub(crate) fail_on_dead_letter: bool,
    /// A candidate transform (.wasm): run the same input through it too and
    /// print only the messages whose outcome differs, with a summary line.
    #[arg(long, value_name = "CANDIDATE.wasm")]
    pub(crate) compare: Option<PathBuf>,
}

/// Why a dry run could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DryRunError {
    /// An input file.
    #[error(transparent)]
    Input(#[from] input::InputError),
    /// No schema was given.
    #[error("no table schema: pass --schema, or --config with a connector file that declares columns")]
    NoSchema,
    /// A `--set` is not `key=value`.
    #[error("--set {0}: expected key=value")]
    BadSetting(String),
    /// The transform did not load or failed a batch.
    #[error(transparent)]
    Transform(#[from] iggy_connector_fluss_sink::TransformError),
    /// The connector file's options do not describe a dry-runnable stage.
    #[error("{0}")]
    Unsupported(String),
}

pub(crate) fn stage(args: &Args) -> Result<(TableSchema, RowStage), DryRunError> {
    let connector = args.config.as_deref().map(input::connector_file).transpose()?;
    let config = connector.as_ref().map(|c| &c.config);
    let schema = match (&args.schema, config) {
        (Some(path), _) => input::schema_file(path)?,
        (None, Some(c)) => c
            .declared_schema()
            .map_err(|e| DryRunError::Unsupported(e.to_string()))?
            .ok_or(DryRunError::NoSchema)?,
        (None, None) => return Err(DryRunError::NoSchema),
    };
    let settings = args
        .settings
        .iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.to_string()))
                .ok_or_else(|| DryRunError::BadSetting(s.clone()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let from_config = config.and_then(|c| c.transform_spec());
    let spec = match (&args.transform, from_config) {
        (Some(path), base) => Some(TransformSpec {
            path: path.clone(),
            ..base.unwrap_or_else(|| TransformSpec::new(path.clone()))
        }),
        (None, base) => base,
    };
    let stage = match (spec, config) {
        (Some(mut spec), _) => {
            if !settings.is_empty() {
                spec.config = settings;
            }
            RowStage::Wasm(Arc::new(Transform::load(&spec, std::slice::from_ref(&schema))?))
        }
        (None, Some(c)) => {
            let stage = RowStage::from_config(c, &schema)?;
            if let RowStage::ArrowIpc = stage {
                return Err(DryRunError::Unsupported(
                    "payload_format = \"arrow_ipc\" appends payloads as they are; there are no rows to show"
                        .into(),
                ));
            }
            stage
        }
        (None, None) => {
            let kind = if schema.has_primary_key() {
                RowKind::Upsert
            } else {
                RowKind::Append
            };
            RowStage::Json(JsonMapping::new(&schema, kind))
        }
    };
    Ok((schema, stage))
}

/// The rows of `batch` through `stage`, `size` messages a call, checked
/// against the sink's table as the sink checks them.
pub(crate) fn outputs(
    stage: &RowStage,
    schema: &TableSchema,
    batch: &MessageBatch,
    size: usize,
) -> Result<TransformOutput, DryRunError> {
    let progress = ProgressBar::new(batch.len() as u64).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} messages {per_sec} eta {eta}")
            .expect("a valid template"),
    );
    let mut output = TransformOutput::default();
    let size = size.max(1);
    for start in (0..batch.len()).step_by(size) {
        let chunk = batch.slice(start..(start + size).min(batch.len()));
        let mut part = stage.rows(PayloadSchema::Json, &chunk)?;
        let default = schema.path.to_string();
        part.check_rows(|table| match table {
            None => Some(schema),
            Some(name) if name == default => Some(schema),
            Some(_) => None,
        });
        progress.inc(chunk.len() as u64);
        output.append(part);
    }
    progress.finish_and_clear();
    Ok(output)
}
