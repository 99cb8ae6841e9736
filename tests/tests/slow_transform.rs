//! A slow transform under auto-sized chunks (`batch_size` left out),
//! through the dlopen'd plugin against the real local Fluss: a large
//! consume of small messages is made in fewer, larger chunks, but never in
//! calls so large that a guest that takes a while per message runs past
//! `call_timeout` and has its calls bisected. The `evil` guest in mode
//! `slow` spins ~400 µs a message (calibrated on this machine first):
//! 3,000-message calls (what 6,000 small messages get on 2 cores from a
//! fast guest) would take ~1.2 s, past the 500 ms deadline set here; the
//! sink keeps its calls to a quarter of it, and never under 500 messages
//! (~200 ms).
//! The test fails, never skips, when no cluster is reachable.

use std::time::{Duration, Instant};

use iggy_connector_fluss_sink::{Transform, TransformSpec};
use integration_tests::fluss_cluster::{block, read_log, unique_table};
use integration_tests::plugin::{Plugin, TestMessage, log_config, logged};
use integration_tests::{component, table, test_cache_dir, text_batch};
use serde_json::json;

/// Rounds of the evil guest's `slow` spin that take about `per_message` a
/// message on this machine, timed through the library on 50 messages.
fn spin_for(per_message: Duration) -> u64 {
    const PROBE: u64 = 200_000;
    let mut spec = TransformSpec::new(component("evil"));
    spec.config = vec![("mode".into(), "slow".into()), ("spin".into(), PROBE.to_string())];
    spec.cache_dir = Some(test_cache_dir());
    let offsets = table("db.evil", &[("offset", "BIGINT", false)], &[]);
    let transform = Transform::load(&spec, &[offsets]).expect("the evil guest loads");
    let batch = text_batch(&["x"; 50]);
    transform.process(&batch).expect("a warm-up call");
    let started = Instant::now();
    transform.process(&batch).expect("the timed call");
    let took = started.elapsed().as_secs_f64() / 50.0;
    (PROBE as f64 * per_message.as_secs_f64() / took).max(1.0) as u64
}

/// Messages `range`, each a small JSON payload (the guest ignores it).
fn messages(range: std::ops::Range<u64>) -> Vec<TestMessage> {
    range
        .map(|i| TestMessage::text(i, &format!(r#"{{"id":{i}}}"#)))
        .collect()
}

/// With and without a warm-up consume (whose calls show the sink the
/// guest's pace): a 6,000-message consume lands every row once, in order,
/// and no call of the guest ran past `call_timeout` (none was retried or
/// bisected, nothing was dead-lettered).
#[test]
fn a_slow_transforms_auto_sized_calls_stay_inside_call_timeout() {
    let plugin = Plugin::load();
    let spin = spin_for(Duration::from_micros(400));
    for warm_up in [false, true] {
        let (path, dlq) = (unique_table("slow_guest"), unique_table("slow_guest_dlq"));
        let mut config = log_config(&path, &dlq);
        config["columns"] = json!([{"name": "id", "type": "BIGINT", "nullable": false}]);
        config["transform"] = json!({
            "path": component("evil").display().to_string(),
            "cache_dir": test_cache_dir().display().to_string(),
            "call_timeout": "500ms",
            "config": {"mode": "slow", "spin": spin.to_string()}
        });
        let id = plugin.open_new(&config);
        let first = if warm_up {
            plugin.consume_json_ok(id, "events", &messages(0..100));
            100
        } else {
            0
        };
        plugin.consume_json_ok(id, "events", &messages(first..first + 6000));

        let offsets: Vec<String> = block(read_log(&path, first as usize + 6000, Duration::from_secs(30)))
            .into_iter()
            .map(|row| row[0].clone())
            .collect();
        let expected: Vec<String> = (0..first + 6000).map(|i| i.to_string()).collect();
        assert!(
            offsets == expected,
            "warm-up {warm_up}: every row once, in message order; read {} rows, the first {:?}; log: {:?}",
            offsets.len(),
            offsets.iter().take(5).collect::<Vec<_>>(),
            logged(&format!("instance={id}"))
        );
        let overrun: Vec<_> = logged(&format!("instance={id}"))
            .into_iter()
            .filter(|(_, line)| line.contains("CPU deadline") || line.contains("retrying the batch"))
            .collect();
        assert!(
            overrun.is_empty(),
            "warm-up {warm_up}: no call ran past its deadline: {overrun:?}"
        );
        assert_eq!(plugin.close(id), 0);
    }
}
