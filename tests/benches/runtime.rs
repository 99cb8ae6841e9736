//! Messages per second through the real Iggy connectors runtime, and the
//! plugin's share of each batch, from the runtime's own per-batch figures
//! (`benchmark = true`: `decode_us`, `prepare_us`, `ffi_us` — the plugin's
//! `consume` — and `total_us`), at `batch_length` 1,000 and 10,000, JSON
//! orders of ~70 B into a 3-column log table with the release plugin.
//!
//! For each sample the runtime is paused (SIGSTOP), the sample's messages
//! are produced (iterations × `batch_length`), and the runtime goes on: it
//! drains the backlog in full polls, and the sample's time is the sum of
//! those polls' `total_us` (or `ffi_us`), so criterion's time per iteration
//! is the time per batch and its throughput the messages per second.
//!
//! Needs the Iggy binaries (`../shared/iggy` or `FLUSS_SINK_IGGY_DIR`), the
//! release plugin and a cluster: `cargo build --release -p
//! iggy_connector_fluss_sink`, `scripts/fluss-local.sh start`, then
//! `cargo bench -p integration-tests --bench runtime`.
//!
//! With `FLUSS_SINK_PLUGIN_BEFORE=<path to another build's .so>` the runtime
//! loads that build instead, and the benchmarks are named `…_before`: run it
//! right after a run of the current build to compare the two.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use integration_tests::fluss_cluster::{bootstrap, unique_table};
use integration_tests::iggy::{Connector, Running, Server, binaries_present, start_runtime, wait_for_table};

/// One of the runtime's per-batch benchmark events.
#[derive(Debug, Clone, Copy)]
struct BatchTimes {
    batch_size: u64,
    ffi_us: u64,
    total_us: u64,
}

/// `field=value` of a log line (ANSI colours removed first).
fn field(line: &str, name: &str) -> Option<u64> {
    let at = line.find(&format!("{name}="))? + name.len() + 1;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Every per-batch event in the runtime's log so far.
fn batches(runtime: &Running) -> Vec<BatchTimes> {
    runtime
        .log()
        .lines()
        .filter(|l| l.contains("iggy_connectors::benchmark") && l.contains("total_us"))
        .filter_map(|l| {
            let l = strip_ansi(l);
            Some(BatchTimes {
                batch_size: field(&l, "batch_size")?,
                ffi_us: field(&l, "ffi_us")?,
                total_us: field(&l, "total_us")?,
            })
        })
        .collect()
}

/// A runtime with `batch_length`, its server, and the batches seen so far.
struct Rig {
    server: Server,
    runtime: Running,
    batch_length: usize,
    produced: u64,
    seen: usize,
    _work: tempfile::TempDir,
}

impl Rig {
    /// A rig loading `plugin` (another build), or the current build.
    fn new(batch_length: usize, plugin: Option<PathBuf>) -> Self {
        let work = tempfile::tempdir().unwrap();
        let server = Server::start(work.path(), 1);
        let table = unique_table("bench_runtime");
        let mut connector = Connector::new(format!(
            r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
columns = [
  {{ name = "order_id", type = "BIGINT", nullable = false }},
  {{ name = "customer", type = "STRING" }},
  {{ name = "amount", type = "DECIMAL(12, 2)" }},
]"#,
            bootstrap = bootstrap(),
            database = table.database,
            name = table.table,
        ));
        connector.batch_length = batch_length;
        connector.benchmark = true;
        connector.plugin = plugin;
        let runtime = start_runtime(&server, work.path(), "runtime", &connector, &[]);
        wait_for_table(&table);
        Self {
            server,
            runtime,
            batch_length,
            produced: 0,
            seen: 0,
            _work: work,
        }
    }

    /// Produces `polls` full polls while the runtime is paused, lets it
    /// drain them, and returns their figures.
    fn drain(&mut self, polls: u64) -> Vec<BatchTimes> {
        self.runtime.pause();
        let count = polls * self.batch_length as u64;
        self.server.produce_orders(self.produced, self.produced + count);
        self.produced += count;
        self.runtime.resume();
        let started = Instant::now();
        loop {
            let all = batches(&self.runtime);
            let done: u64 = all[self.seen..].iter().map(|b| b.batch_size).sum();
            if done >= count {
                let new = all[self.seen..].to_vec();
                self.seen = all.len();
                return new;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the runtime did not drain {count} messages in 120 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Which of a batch's times a benchmark sums.
type PickTime = fn(&BatchTimes) -> u64;

fn micros(batches: &[BatchTimes], pick: impl Fn(&BatchTimes) -> u64) -> Duration {
    Duration::from_micros(batches.iter().map(pick).sum())
}

fn runtime(c: &mut Criterion) {
    if !binaries_present("the runtime benchmark") {
        return;
    }
    let before: Option<PathBuf> = std::env::var_os("FLUSS_SINK_PLUGIN_BEFORE").map(Into::into);
    let suffix = if before.is_some() { "_before" } else { "" };
    let times: [(&str, PickTime); 2] = [
        ("total_per_batch", |b| b.total_us),
        ("plugin_consume_per_batch", |b| b.ffi_us),
    ];
    let mut summary = Vec::new();
    for batch_length in [1000, 10_000] {
        let mut rig = Rig::new(batch_length, before.clone());
        let mut all = Vec::new();
        let mut group = c.benchmark_group("runtime");
        group.throughput(Throughput::Elements(batch_length as u64));
        for (name, pick) in times {
            group.bench_function(BenchmarkId::new(format!("{name}{suffix}"), batch_length), |b| {
                b.iter_custom(|iters| {
                    let drained = rig.drain(iters);
                    all.extend_from_slice(&drained);
                    micros(&drained, pick)
                })
            });
        }
        group.finish();
        let full: Vec<&BatchTimes> = all
            .iter()
            .filter(|b| b.batch_size == batch_length as u64)
            .collect();
        let ffi: u64 = full.iter().map(|b| b.ffi_us).sum();
        let total: u64 = full.iter().map(|b| b.total_us).sum();
        summary.push(format!(
            "batch_length {batch_length}{suffix}: {} full batches, ffi_us / total_us = {:.3} (target <= 0.35), {:.0} msg/s by total_us",
            full.len(),
            ffi as f64 / total.max(1) as f64,
            (full.len() * batch_length) as f64 / (total.max(1) as f64 / 1e6)
        ));
    }
    for line in summary {
        eprintln!("{line}");
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = runtime
}
criterion_main!(benches);
