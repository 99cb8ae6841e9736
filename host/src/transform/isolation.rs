//! Fault isolation: one guest call checked for what it returned, and the
//! bisection of a failing batch until each failing message stands alone.

use std::sync::atomic::Ordering;
use std::time::Instant;

use wasmtime::Trap;

use super::bindings::iggy::fluss_sink::types as wit;
use super::error::describe_failure;
use super::{Transform, TransformError};
use crate::batch::MessageBatch;
use crate::rows::{MessageOutcome, RowBatch, RowVisitor, TransformOutput};

/// A failed guest call: its description.
pub(super) struct Fault(pub String);

impl Transform {
    /// Bisects a failing batch until each failing message stands alone.
    pub(super) fn isolate(
        &self,
        batch: &MessageBatch,
        fault: Fault,
        budget: &mut u32,
    ) -> Result<TransformOutput, TransformError> {
        if batch.len() == 1 {
            return Ok(dead_letters(1, &fault.0));
        }
        let mid = batch.len() / 2;
        let mut output = TransformOutput::default();
        let mut last = fault;
        for range in [0..mid, mid..batch.len()] {
            let part = batch.slice(range);
            let part_output = if *budget == 0 {
                dead_letters(
                    part.len(),
                    &format!(
                        "not isolated: the transform failed {} times on this batch (transform.max_faults_per_batch); last failure: {}",
                        self.limits.max_faults_per_batch, last.0
                    ),
                )
            } else {
                match self.attempt(&part, None)? {
                    Ok(o) => o,
                    Err(f) => {
                        *budget -= 1;
                        let described = Fault(f.0.clone());
                        last = f;
                        self.isolate(&part, described, budget)?
                    }
                }
            };
            output.append(part_output);
        }
        Ok(output)
    }

    /// One call to the guest on `batch`, its rows handed to `visitor` as
    /// they are read.
    pub(super) fn attempt(
        &self,
        batch: &MessageBatch,
        visitor: Option<&mut dyn RowVisitor>,
    ) -> Result<Result<TransformOutput, Fault>, TransformError> {
        let mut instance = self.take_instance()?;
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        instance.store.set_epoch_deadline(self.deadline_ticks());
        instance.store.data_mut().last_error = None;

        let headers: Vec<wit::Header<'_>> = batch
            .headers
            .iter()
            .map(|h| wit::Header {
                key: &h.key,
                kind: header_kind(h.kind),
                value: &h.value,
            })
            .collect();
        let input = wit::Batch {
            stream: &batch.source.stream,
            topic: &batch.source.topic,
            partition: batch.source.partition,
            offsets: &batch.offsets,
            ids: &batch.ids,
            timestamps: &batch.timestamps,
            payloads: &batch.payloads,
            payload_ends: &batch.payload_ends,
            headers: &headers,
            header_ends: &batch.header_ends,
        };
        let started = Instant::now();
        let result = instance.bindings.call_process(&mut instance.store, input);
        let raw = match result {
            Ok(raw) => {
                self.pace.record(batch.len(), started.elapsed());
                raw
            }
            Err(e) => {
                if let Some(Trap::Interrupt) = e.downcast_ref::<Trap>() {
                    // It needed longer than the deadline, at the least.
                    self.pace.record(batch.len(), self.limits.call_timeout);
                }
                self.stats.faults.fetch_add(1, Ordering::Relaxed);
                let text = describe_failure(&e, &self.limits, instance.store.data().last_error.as_deref());
                // A failed instance is never reused.
                return Ok(Err(Fault(text)));
            }
        };
        let checked = self.check_output(batch.len(), raw, visitor);
        if checked.is_err() {
            self.stats.faults.fetch_add(1, Ordering::Relaxed);
        }
        self.give_back(instance);
        Ok(checked)
    }

    fn check_output(
        &self,
        messages: usize,
        raw: wit::BatchOutput,
        visitor: Option<&mut dyn RowVisitor>,
    ) -> Result<TransformOutput, Fault> {
        if raw.outcomes.len() != messages {
            return Err(Fault(format!(
                "the transform returned {} outcomes for {messages} messages; it must return exactly one per message",
                raw.outcomes.len()
            )));
        }
        if raw.rows.len() > self.limits.max_output_bytes {
            return Err(Fault(format!(
                "the transform returned {} bytes of rows, over the cap of {} (transform.max_output_bytes)",
                raw.rows.len(),
                self.limits.max_output_bytes
            )));
        }
        let mut counts = Vec::with_capacity(messages);
        let mut outcomes = Vec::with_capacity(messages);
        for outcome in raw.outcomes {
            match outcome {
                wit::Outcome::Rows(n) => {
                    counts.push(n);
                    outcomes.push(MessageOutcome::Rows(n));
                }
                wit::Outcome::DeadLetter(reason) => {
                    counts.push(0);
                    outcomes.push(MessageOutcome::DeadLetter(reason));
                }
            }
        }
        let total: u64 = counts.iter().map(|&c| c as u64).sum();
        if total > self.limits.max_rows_per_batch as u64 {
            return Err(Fault(format!(
                "the transform returned {total} rows, over the cap of {} (transform.max_rows_per_batch)",
                self.limits.max_rows_per_batch
            )));
        }
        let rows = RowBatch::read(raw.rows, raw.tables, &counts, visitor)
            .map_err(|e| Fault(format!("the transform returned malformed rows: {e}")))?;
        Ok(TransformOutput { outcomes, rows })
    }
}

fn dead_letters(count: usize, reason: &str) -> TransformOutput {
    TransformOutput {
        outcomes: vec![MessageOutcome::DeadLetter(reason.to_string()); count],
        rows: RowBatch::default(),
    }
}

fn header_kind(kind: crate::batch::HeaderKind) -> wit::HeaderKind {
    use crate::batch::HeaderKind as K;
    match kind {
        K::Raw => wit::HeaderKind::Raw,
        K::String => wit::HeaderKind::String,
        K::Bool => wit::HeaderKind::Bool,
        K::Int8 => wit::HeaderKind::Int8,
        K::Int16 => wit::HeaderKind::Int16,
        K::Int32 => wit::HeaderKind::Int32,
        K::Int64 => wit::HeaderKind::Int64,
        K::Int128 => wit::HeaderKind::Int128,
        K::Uint8 => wit::HeaderKind::Uint8,
        K::Uint16 => wit::HeaderKind::Uint16,
        K::Uint32 => wit::HeaderKind::Uint32,
        K::Uint64 => wit::HeaderKind::Uint64,
        K::Uint128 => wit::HeaderKind::Uint128,
        K::Float32 => wit::HeaderKind::Float32,
        K::Float64 => wit::HeaderKind::Float64,
    }
}
