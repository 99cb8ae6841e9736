//! `fluss-sink dry-run --compare candidate.wasm`: the same input through
//! the current row stage and a candidate transform (same table, same
//! config and limits), printing only the messages whose outcome differs —
//! their rows, filtered, or dead letter — and a summary line.

use std::path::Path;
use std::process::ExitCode;

use comfy_table::{ContentArrangement, Table};
use iggy_connector_fluss_sink::MessageBatch;
use iggy_connector_fluss_sink::TableSchema;
use iggy_connector_fluss_sink::{MessageOutcome, TransformOutput};
use serde_json::{Value, json};

use crate::input;
use crate::shown::{ShownRow, rows_by_message};
use crate::stage::{Args, DryRunError, outputs, stage};

/// What became of one message, comparable between two stages.
fn outcome(outcome: &MessageOutcome, rows: &[ShownRow]) -> Value {
    match outcome {
        MessageOutcome::Rows(0) => json!({"outcome": "filtered"}),
        MessageOutcome::Rows(_) => json!({
            "outcome": "rows",
            "rows": rows.iter().map(ShownRow::to_json).collect::<Vec<_>>(),
        }),
        MessageOutcome::DeadLetter(reason) => json!({"outcome": "dead_letter", "reason": reason}),
    }
}

/// How two outcomes of one message differ, for the summary.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Differences {
    /// Messages compared.
    pub messages: usize,
    /// Both made rows, not the same.
    pub rows_changed: usize,
    /// Rows or filtered before, dead-lettered by the candidate.
    pub newly_dead_lettered: usize,
    /// Dead-lettered before, rows or filtered with the candidate.
    pub no_longer_dead_lettered: usize,
    /// Filtered by one and not the other (no dead letter either side).
    pub filtering_changed: usize,
    /// Dead-lettered by both, for different reasons.
    pub reason_changed: usize,
}

impl Differences {
    fn total(&self) -> usize {
        self.rows_changed
            + self.newly_dead_lettered
            + self.no_longer_dead_lettered
            + self.filtering_changed
            + self.reason_changed
    }

    fn count(&mut self, current: &Value, candidate: &Value) {
        let kind = |v: &Value| v["outcome"].as_str().unwrap_or_default().to_string();
        match (kind(current).as_str(), kind(candidate).as_str()) {
            ("rows", "rows") => self.rows_changed += 1,
            ("dead_letter", "dead_letter") => self.reason_changed += 1,
            (_, "dead_letter") => self.newly_dead_lettered += 1,
            ("dead_letter", _) => self.no_longer_dead_lettered += 1,
            _ => self.filtering_changed += 1,
        }
    }

    fn summary(&self) -> String {
        format!(
            "{} messages: {} differ ({} with other rows, {} newly dead-lettered, {} no longer dead-lettered, {} filtered differently, {} dead-lettered for another reason)",
            self.messages,
            self.total(),
            self.rows_changed,
            self.newly_dead_lettered,
            self.no_longer_dead_lettered,
            self.filtering_changed,
            self.reason_changed
        )
    }
}

/// The messages whose outcome differs: (index, current, candidate), and the counts.
pub(crate) fn differences(
    batch: &MessageBatch,
    schema: &TableSchema,
    current: &TransformOutput,
    candidate: &TransformOutput,
) -> (Vec<(usize, Value, Value)>, Differences) {
    let (rows_now, rows_then) = (
        rows_by_message(current, schema),
        rows_by_message(candidate, schema),
    );
    let mut counts = Differences {
        messages: batch.len(),
        ..Differences::default()
    };
    let mut differing = Vec::new();
    for i in 0..batch.len() {
        let now = outcome(&current.outcomes[i], &rows_now[i]);
        let then = outcome(&candidate.outcomes[i], &rows_then[i]);
        if now != then {
            counts.count(&now, &then);
            differing.push((i, now, then));
        }
    }
    (differing, counts)
}

/// Runs the comparison and prints it.
pub(crate) fn run(args: &Args, candidate: &Path) -> Result<ExitCode, DryRunError> {
    let (schema, current_stage) = stage(args)?;
    let mut candidate_args = args.clone();
    candidate_args.transform = Some(candidate.to_path_buf());
    candidate_args.compare = None;
    let (_, candidate_stage) = stage(&candidate_args)?;
    let batch = input::messages(&args.input, args.envelope)?;
    let current = outputs(&current_stage, &schema, &batch, args.batch_size)?;
    let then = outputs(&candidate_stage, &schema, &batch, args.batch_size)?;
    let (differing, counts) = differences(&batch, &schema, &current, &then);
    if args.json {
        for (i, now, then) in &differing {
            println!(
                "{}",
                json!({"offset": batch.get(*i).offset, "current": now, "candidate": then})
            );
        }
    } else if !differing.is_empty() {
        let mut table = Table::new();
        table
            .load_preset(comfy_table::presets::UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_header(["offset", "current", "candidate"]);
        for (i, now, then) in &differing {
            table.add_row([
                batch.get(*i).offset.to_string(),
                now.to_string(),
                then.to_string(),
            ]);
        }
        println!("{table}");
    }
    eprintln!("{}", counts.summary());
    Ok(ExitCode::SUCCESS)
}
