//! TEST ONLY. A transform that misbehaves on purpose, to prove the host
//! contains it. Config `mode` picks the misbehaviour; it happens on every
//! message whose payload equals config `trigger` (default "poison"); every
//! other message becomes one row `[offset BIGINT]`.
//!
//! Modes: `loop` (never returns), `memory-bomb` (allocates without end),
//! `recursion` (recurses without end), `trap` (executes `unreachable`),
//! `panic` (Rust panic), `wrong-count` (one outcome too few for the batch),
//! `huge-output` (emits `huge_bytes` bytes of rows, default 64 MiB),
//! `type-mismatch` (a STRING where the column is BIGINT), `bad-encoding`
//! (a row buffer that does not decode), `init-error` (init fails), `log`
//! (logs a line at each level and passes), `slow` (every message, poisoned
//! or not, first spins `spin` rounds of a loop, default 1,000,000; no clock,
//! which not every guest target has).

use fluss_transform_sdk::bindings::export_bindings;
use fluss_transform_sdk::bindings::iggy::fluss_sink::host::{Level, log};
use fluss_transform_sdk::bindings::iggy::fluss_sink::types::{Batch, BatchOutput, Outcome, TableSchema};
use fluss_transform_sdk::{RowKind, RowsBuilder};
use std::cell::RefCell;

#[derive(Default, Clone)]
struct Settings {
    mode: String,
    trigger: Vec<u8>,
    huge_bytes: usize,
    spin: u64,
}

thread_local! {
    static SETTINGS: RefCell<Settings> = RefCell::new(Settings::default());
}

struct Evil;

/// Recursion that lives on the WebAssembly stack only (no frame in linear
/// memory), so it meets the host's stack cap rather than the guest's own.
#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    std::hint::black_box(recurse(std::hint::black_box(depth + 1))) + 1
}

impl fluss_transform_sdk::bindings::Guest for Evil {
    fn init(config: Vec<(String, String)>, _tables: Vec<TableSchema>) -> Result<(), String> {
        let get = |k: &str| config.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone());
        fluss_transform_sdk::install_panic_hook();
        let settings = Settings {
            mode: get("mode").ok_or("evil transform needs config `mode`")?,
            trigger: get("trigger").unwrap_or_else(|| "poison".into()).into_bytes(),
            huge_bytes: get("huge_bytes").and_then(|v| v.parse().ok()).unwrap_or(64 << 20),
            spin: get("spin").and_then(|v| v.parse().ok()).unwrap_or(1_000_000),
        };
        if settings.mode == "init-error" {
            return Err("evil init refuses: the config asked for init-error".into());
        }
        SETTINGS.with(|s| *s.borrow_mut() = settings);
        Ok(())
    }

    fn process(batch: Batch) -> BatchOutput {
        let settings = SETTINGS.with(|s| s.borrow().clone());
        let mut rows = RowsBuilder::new();
        let mut outcomes = Vec::new();
        let mut start = 0usize;
        let mut saw_poison = false;
        for (i, &end) in batch.payload_ends.iter().enumerate() {
            let payload = &batch.payloads[start..end as usize];
            start = end as usize;
            let offset = batch.offsets[i];
            let poisoned = payload == settings.trigger.as_slice();
            saw_poison |= poisoned;
            if settings.mode == "slow" {
                let mut sum = 0u64;
                for round in 0..settings.spin {
                    sum = std::hint::black_box(sum.wrapping_add(round));
                }
                std::hint::black_box(sum);
            }
            if settings.mode == "log" {
                for level in [Level::Trace, Level::Debug, Level::Info, Level::Warn, Level::Error] {
                    log(level, &format!("evil log at offset {offset}"));
                }
            }
            if poisoned {
                match settings.mode.as_str() {
                    "loop" => loop {
                        std::hint::black_box(&rows);
                    },
                    "memory-bomb" => {
                        let mut hoard: Vec<Vec<u8>> = Vec::new();
                        loop {
                            hoard.push(vec![1u8; 1 << 20]);
                            std::hint::black_box(&hoard);
                        }
                    }
                    "recursion" => {
                        std::hint::black_box(recurse(0));
                    }
                    "trap" => trap(),
                    "panic" => panic!("evil panic on offset {offset}"),
                    "huge-output" => {
                        let chunk = "x".repeat(1 << 16);
                        let mut n = 0;
                        while rows.as_bytes().len() < settings.huge_bytes {
                            rows.begin_row(RowKind::Append, 0);
                            rows.string(&chunk);
                            rows.end_row();
                            n += 1;
                        }
                        outcomes.push(Outcome::Rows(n));
                        continue;
                    }
                    "type-mismatch" => {
                        rows.begin_row(RowKind::Append, 0);
                        rows.string("not a number");
                        rows.end_row();
                        outcomes.push(Outcome::Rows(1));
                        continue;
                    }
                    "bad-encoding" => {
                        let mut bytes = rows.into_bytes();
                        bytes.extend_from_slice(&[0, 0, 0, 1, 0, 200]);
                        outcomes.push(Outcome::Rows(1));
                        return BatchOutput {
                            outcomes,
                            tables: vec![],
                            rows: bytes,
                        };
                    }
                    _ => {}
                }
            }
            rows.begin_row(RowKind::Append, 0);
            rows.bigint(offset as i64);
            rows.end_row();
            outcomes.push(Outcome::Rows(1));
        }
        if settings.mode == "wrong-count" && saw_poison {
            outcomes.pop();
        }
        BatchOutput {
            outcomes,
            tables: vec![],
            rows: rows.into_bytes(),
        }
    }
}

export_bindings!(Evil with_types_in fluss_transform_sdk::bindings);

/// A WebAssembly `unreachable` trap. Natively (where only clippy builds
/// this crate) an abort stands in for it.
fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}
