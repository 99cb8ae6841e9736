//! `fluss-sink dry-run`: messages through the sink's row stage, nothing
//! written; each message's outcome printed as a table or JSON lines.

use std::process::ExitCode;

use comfy_table::{ContentArrangement, Table};
use iggy_connector_fluss_sink::{MessageBatch, MessageOutcome, TableSchema, TransformOutput};
use serde_json::json;

use crate::input;
use crate::shown::{ShownRow, rows_by_message};
use crate::stage::{Args, DryRunError, outputs, stage};

/// Runs the dry run and prints its report.
pub(crate) fn run(args: Args) -> Result<ExitCode, DryRunError> {
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
