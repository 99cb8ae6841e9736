//! `fluss-sink dry-run`: messages through the sink's row stage, nothing written.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use base64::Engine as _;
use comfy_table::{ContentArrangement, Table};
use fluss_row_codec::{Cell, RowKind};
use iggy_connector_fluss_sink::JsonMapping;
use iggy_connector_fluss_sink::RowStage;
use iggy_connector_fluss_sink::TableSchema;
use iggy_connector_fluss_sink::{MessageBatch, PayloadSchema};
use iggy_connector_fluss_sink::{MessageOutcome, TransformOutput};
use iggy_connector_fluss_sink::{Transform, TransformSpec};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

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

/// Runs the dry run and prints its report.
pub(crate) fn run(args: Args) -> Result<ExitCode, DryRunError> {
    if let Some(candidate) = args.compare.clone() {
        return crate::compare::run(&args, &candidate);
    }
    let (schema, stage) = stage(&args)?;
    let batch = input::messages(&args.input, args.envelope)?;
    let output = outputs(&stage, &schema, &batch, args.batch_size)?;

    if args.json {
        for line in json_lines(&batch, &output, &schema) {
            println!("{line}");
        }
    } else {
        println!("{}", table(&batch, &output, &schema));
    }
    let (rows, filtered, dead) = output.counts();
    eprintln!(
        "{} messages: {rows} became {} rows, {filtered} filtered, {dead} dead-lettered",
        batch.len(),
        output.rows.len()
    );
    Ok(if args.fail_on_dead_letter && dead > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A cell as JSON: numbers and text as they are, bytes in base64, dates
/// and times in ISO-8601, decimals as their text; `None` for an absent cell
/// (a column a partial update leaves out, which is not NULL).
fn cell_json(cell: Cell<'_>) -> Option<Value> {
    Some(match cell {
        Cell::Absent => return None,
        Cell::Null => Value::Null,
        Cell::Boolean(b) => b.into(),
        Cell::TinyInt(n) => n.into(),
        Cell::SmallInt(n) => n.into(),
        Cell::Int(n) => n.into(),
        Cell::BigInt(n) => n.into(),
        Cell::Float(n) => n.into(),
        Cell::Double(n) => n.into(),
        Cell::String(s) | Cell::Decimal(s) => s.into(),
        Cell::Bytes(b) => base64::engine::general_purpose::STANDARD.encode(b).into(),
        Cell::Date(days) => chrono::NaiveDate::from_num_days_from_ce_opt(days + 719_163)
            .map_or(Value::from(days), |d| d.to_string().into()),
        Cell::Time(ms) => chrono::NaiveTime::from_num_seconds_from_midnight_opt(
            (ms / 1000) as u32,
            (ms % 1000) as u32 * 1_000_000,
        )
        .map_or(Value::from(ms), |t| t.to_string().into()),
        Cell::Timestamp(us) => chrono::DateTime::from_timestamp_micros(us)
            .map_or(Value::from(us), |t| t.naive_utc().to_string().into()),
        Cell::TimestampLtz(us) => {
            chrono::DateTime::from_timestamp_micros(us).map_or(Value::from(us), |t| t.to_rfc3339().into())
        }
    })
}

/// How an absent cell shows where cells are listed by position.
const ABSENT: &str = "<absent>";

/// One row as shown: its table, kind, cells, and the columns it leaves out.
#[derive(Clone)]
pub(crate) struct ShownRow {
    table: String,
    kind: &'static str,
    /// By column name when the sink table's columns fit (absent cells left
    /// out), else by position (absent cells as [`ABSENT`]).
    cells: Value,
    /// Columns (or positions) a partial update leaves out.
    absent: Vec<String>,
}

fn shown_row(
    table: String,
    kind: &'static str,
    row: &fluss_row_codec::RowView<'_>,
    schema: &TableSchema,
) -> ShownRow {
    let cells: Vec<Option<Value>> = row.cells().map(cell_json).collect();
    let by_name = cells.len() == schema.columns.len();
    let name_of = |i: usize| {
        if by_name {
            schema.columns[i].name.clone()
        } else {
            i.to_string()
        }
    };
    let absent = (0..cells.len())
        .filter(|&i| cells[i].is_none())
        .map(name_of)
        .collect();
    let cells = if by_name {
        Value::Object(
            schema
                .columns
                .iter()
                .zip(cells)
                .filter_map(|(c, v)| Some((c.name.clone(), v?)))
                .collect(),
        )
    } else {
        Value::Array(
            cells
                .into_iter()
                .map(|v| v.unwrap_or_else(|| ABSENT.into()))
                .collect(),
        )
    };
    ShownRow {
        table,
        kind,
        cells,
        absent,
    }
}

impl ShownRow {
    pub(crate) fn to_json(&self) -> Value {
        let mut value = json!({"table": self.table, "kind": self.kind, "cells": self.cells});
        if !self.absent.is_empty() {
            value["absent"] = json!(self.absent);
        }
        value
    }

    fn to_text(&self) -> String {
        if self.absent.is_empty() {
            self.cells.to_string()
        } else {
            format!("{} (absent: {})", self.cells, self.absent.join(", "))
        }
    }
}

/// Each message's rows.
pub(crate) fn rows_by_message(output: &TransformOutput, schema: &TableSchema) -> Vec<Vec<ShownRow>> {
    let mut by_message = vec![Vec::new(); output.outcomes.len()];
    for (entry, row) in output.rows.iter() {
        let table = output
            .rows
            .table_name(entry.table)
            .map_or_else(|| schema.path.to_string(), str::to_string);
        by_message[entry.message as usize].push(shown_row(table, entry.kind.name(), &row, schema));
    }
    by_message
}

fn json_lines(batch: &MessageBatch, output: &TransformOutput, schema: &TableSchema) -> Vec<String> {
    let rows = rows_by_message(output, schema);
    output
        .outcomes
        .iter()
        .enumerate()
        .map(|(i, outcome)| {
            let offset = batch.get(i).offset;
            let value = match outcome {
                MessageOutcome::Rows(0) => json!({"offset": offset, "outcome": "filtered"}),
                MessageOutcome::Rows(_) => json!({
                    "offset": offset,
                    "outcome": "rows",
                    "rows": rows[i].iter().map(ShownRow::to_json).collect::<Vec<_>>(),
                }),
                MessageOutcome::DeadLetter(reason) => {
                    json!({"offset": offset, "outcome": "dead_letter", "reason": reason})
                }
            };
            value.to_string()
        })
        .collect()
}

fn table(batch: &MessageBatch, output: &TransformOutput, schema: &TableSchema) -> Table {
    let rows = rows_by_message(output, schema);
    let mut table = Table::new();
    table
        .load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(["offset", "outcome", "table", "kind", "row / reason"]);
    for (i, outcome) in output.outcomes.iter().enumerate() {
        let offset = batch.get(i).offset.to_string();
        match outcome {
            MessageOutcome::Rows(0) => {
                table.add_row([offset.as_str(), "filtered", "", "", ""]);
            }
            MessageOutcome::Rows(_) => {
                for row in &rows[i] {
                    table.add_row([offset.as_str(), "row", &row.table, row.kind, &row.to_text()]);
                }
            }
            MessageOutcome::DeadLetter(reason) => {
                table.add_row([offset.as_str(), "dead-letter", "", "", reason]);
            }
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_render_as_json_a_reader_expects() {
        let shown = |cell| cell_json(cell).unwrap();
        assert_eq!(shown(Cell::Date(19_723)), json!("2024-01-01"));
        assert_eq!(shown(Cell::Time(3_723_004)), json!("01:02:03.004"));
        assert_eq!(
            shown(Cell::Timestamp(1_704_067_200_000_001)),
            json!("2024-01-01 00:00:00.000001")
        );
        assert_eq!(shown(Cell::TimestampLtz(0)), json!("1970-01-01T00:00:00+00:00"));
        assert_eq!(shown(Cell::Bytes(b"hi")), json!("aGk="));
        assert_eq!(shown(Cell::Decimal("1.50")), json!("1.50"));
        assert_eq!(cell_json(Cell::Absent), None);
    }

    #[test]
    fn absent_cells_show_apart_from_null() {
        use iggy_connector_fluss_sink::{Column, DataType, TablePath};
        let schema = TableSchema {
            path: TablePath::new("d", "t"),
            columns: vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("name", DataType::String, true),
                Column::new("score", DataType::Int, true),
            ],
            primary_key: vec!["id".into()],
            partition_keys: vec![],
        };
        let mut b = fluss_row_codec::RowsBuilder::new();
        b.begin_row(RowKind::Upsert, 0);
        b.bigint(1);
        b.null();
        b.absent();
        b.end_row();
        let bytes = b.into_bytes();
        let row = fluss_row_codec::Rows::new(&bytes).next().unwrap().unwrap();
        let shown = shown_row("d.t".into(), "upsert", &row, &schema);
        assert_eq!(
            shown.to_json(),
            json!({"table": "d.t", "kind": "upsert", "cells": {"id": 1, "name": null}, "absent": ["score"]})
        );
        assert_eq!(shown.to_text(), r#"{"id":1,"name":null} (absent: score)"#);
    }
}
