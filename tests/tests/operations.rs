//! Operating the sink, through the plugin loaded with dlopen as the runtime
//! loads it, against the real local Fluss (`scripts/fluss-local.sh start`):
//! a transform swapped while the sink runs, broken versions refused while
//! the old one keeps writing, and the Prometheus endpoint scraped during and
//! after a stream.

use std::path::Path;
use std::time::{Duration, Instant};

use integration_tests::fluss_cluster::{block, bootstrap, read_log, unique_table};
use integration_tests::plugin::{Plugin, TestMessage, logged, next_id};
use integration_tests::{component, test_cache_dir};
use serde_json::{Value, json};

const JSON: u32 = 0;

/// The endpoint every instance of these tests shares.
/// The metrics endpoint of this binary's instances, on a port that was free.
static METRICS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| format!("127.0.0.1:{}", integration_tests::free_port()));

/// The scraped value of the series `series` (name and labels, as printed).
fn scrape(series: &str) -> Option<f64> {
    let text = integration_tests::metrics_text(&METRICS).expect("the metrics endpoint answers");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Replaces `path` with `source`'s bytes in one step (a rename), as a deploy would.
fn deploy(source: &Path, path: &Path) {
    let staged = path.with_extension("staged");
    std::fs::copy(source, &staged).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// Waits for a plugin log line of instance `id` containing `needle`.
fn wait_for_log(id: u32, needle: &str) -> String {
    let started = Instant::now();
    loop {
        let instance = format!("instance={id}");
        if let Some((_, line)) = logged(needle).into_iter().find(|(_, l)| l.contains(&instance)) {
            return line;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no log line with `{needle}` for instance {id} in 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn messages(from: u64, to: u64) -> Vec<TestMessage> {
    (from..to)
        .map(|i| TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}"}}"#)))
        .collect()
}

/// A config for a log table `table` of (`id`, `name`) with `extra` options.
fn config(table: &iggy_connector_fluss_sink::TablePath, extra: Value) -> Value {
    let mut config = json!({
        "bootstrap_servers": bootstrap(),
        "database": table.database,
        "table": table.table,
        "columns": [{"name": "id", "type": "BIGINT", "nullable": false}, {"name": "name", "type": "STRING"}],
    });
    for (key, value) in extra.as_object().expect("an object of options") {
        config[key] = value.clone();
    }
    config
}

/// The version the log gives a component: its file's SHA-256, 12 hex digits.
fn version(path: &Path) -> String {
    iggy_connector_fluss_sink::version_of(&std::fs::read(path).unwrap())
}

#[test]
fn a_transform_swapped_mid_stream_handles_exactly_the_offsets_the_log_names() {
    let plugin = Plugin::load();
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("transform.wasm");
    deploy(&component("json-to-row"), &path);
    let table = unique_table("reload");
    let id = next_id();
    plugin.open_ok(
        id,
        &config(
            &table,
            json!({
            "metrics_address": METRICS.as_str(),
            "transform": {"path": path, "cache_dir": test_cache_dir(), "reload_check_interval": "50ms"}
            }),
        ),
    );
    let first = version(&path);
    assert_eq!(plugin.consume(id, "app", "events", JSON, &messages(0, 100)), 0);

    // A file that is not a component, then one whose init refuses the sink's
    // table (cdc-upsert needs a primary key): both refused, the old version
    // keeps writing.
    std::fs::write(path.with_extension("staged"), b"not a component").unwrap();
    std::fs::rename(path.with_extension("staged"), &path).unwrap();
    let refused = wait_for_log(id, "transform reload refused");
    assert!(refused.contains("is not a WebAssembly component"), "{refused}");
    assert_eq!(plugin.consume(id, "app", "events", JSON, &messages(100, 200)), 0);
    deploy(&component("cdc-upsert"), &path);
    let refused = wait_for_log(id, "has no primary key");
    assert!(refused.contains("transform reload refused"), "{refused}");
    assert_eq!(plugin.consume(id, "app", "events", JSON, &messages(200, 300)), 0);

    // The noop transform filters everything: what it handles is not written.
    deploy(&component("noop"), &path);
    let noop = version(&path);
    wait_for_log(id, &format!("transform reloaded: version {noop}"));
    for from in (300..600).step_by(100) {
        assert_eq!(
            plugin.consume(id, "app", "events", JSON, &messages(from, from + 100)),
            0
        );
    }
    let takeover = wait_for_log(id, &format!("transform version {noop} handles offsets"));
    assert!(takeover.contains("handles offsets 300..=399"), "{takeover}");
    let series =
        |name: &str, labels: &str| scrape(&format!("fluss_sink_{name}{{instance=\"{id}\"{labels}}}"));
    assert_eq!(series("transform_reloads_total", ",result=\"ok\""), Some(1.0));
    assert_eq!(
        series("transform_reloads_total", ",result=\"refused\""),
        Some(2.0)
    );
    assert_eq!(
        series("transform_version", &format!(",version=\"{noop}\"")),
        Some(1.0)
    );
    assert_eq!(
        series("transform_version", &format!(",version=\"{first}\"")),
        None
    );
    assert_eq!(series("messages_written_total", ""), Some(300.0));
    assert_eq!(series("messages_filtered_total", ""), Some(300.0));
    // The scrape after the swap, for whoever runs this with --nocapture.
    let text = integration_tests::metrics_text(&METRICS).expect("the metrics endpoint answers");
    let instance = format!("instance=\"{id}\"");
    for line in text
        .lines()
        .filter(|l| l.contains(&instance) && !l.contains("_bucket{"))
    {
        eprintln!("scrape: {line}");
    }
    assert_eq!(plugin.close(id), 0);

    let rows = block(read_log(&table, 300, Duration::from_secs(30)));
    let ids: Vec<u64> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(
        ids,
        (0..300).collect::<Vec<_>>(),
        "the old version wrote 0..300 once, the new one none"
    );
    let closed = wait_for_log(id, "closed");
    assert!(
        closed.contains("received=600") && closed.contains("written=300") && closed.contains("filtered=300"),
        "{closed}"
    );
}

/// Two instances on one transform file, one with `reload` off: once the
/// other has swapped in the new file (waited for, not slept on), the one
/// with reload off still runs the old version.
#[test]
fn with_reload_off_a_new_file_is_ignored() {
    let plugin = Plugin::load();
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("transform.wasm");
    deploy(&component("json-to-row"), &path);
    let (table, twin_table) = (unique_table("noreload"), unique_table("noreload_twin"));
    let transform = |reload: bool| {
        json!({"transform": {"path": path, "cache_dir": test_cache_dir(), "reload": reload,
                             "reload_check_interval": "100ms"}})
    };
    let id = next_id();
    plugin.open_ok(id, &config(&table, transform(false)));
    wait_for_log(id, "hot reload is off");
    let twin = next_id();
    plugin.open_ok(twin, &config(&twin_table, transform(true)));
    // noop filters every message: had it been swapped in, nothing would land
    // (seen: with `reload: true` here, 0 of 50 rows).
    deploy(&component("noop"), &path);
    let noop = version(&path);
    wait_for_log(twin, &format!("transform reloaded: version {noop}"));
    assert_eq!(plugin.close(twin), 0);
    assert!(
        logged("transform reloaded")
            .iter()
            .all(|(_, line)| !line.split_whitespace().any(|w| w == format!("instance={id}"))),
        "the instance with reload off never reloaded"
    );
    assert_eq!(plugin.consume(id, "app", "events", JSON, &messages(0, 50)), 0);
    assert_eq!(plugin.close(id), 0);
    // Read past the count: each of the 50 rows once, none filtered.
    let ids: Vec<String> = block(read_log(&table, 50, Duration::from_secs(30)))
        .into_iter()
        .map(|row| row[0].clone())
        .collect();
    assert_eq!(ids, (0..50).map(|i| i.to_string()).collect::<Vec<_>>());
}

#[test]
fn metrics_scraped_during_and_after_a_stream_match_fluss_and_the_dead_letter_table() {
    let plugin = Plugin::load();
    let table = unique_table("metrics");
    let dlq = unique_table("metrics_dlq");
    let id = next_id();
    plugin.open_ok(
        id,
        &config(
            &table,
            json!({
            "dead_letter_table": dlq.to_string(),
            "metrics_address": METRICS.as_str()
            }),
        ),
    );
    // A series that is missing fails the test: it never reads as 0.
    let series = |name: &str, labels: &str| {
        let series = format!("fluss_sink_{name}{{instance=\"{id}\"{labels}}}");
        scrape(&series).unwrap_or_else(|| panic!("{series} is not exported"))
    };
    // Every tenth message has an id that is not a number: dead-lettered.
    let batch = |from: u64| -> Vec<TestMessage> {
        (from..from + 100)
            .map(|i| match i % 10 {
                7 => TestMessage::text(i, r#"{"id":"seven"}"#),
                _ => TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}"}}"#)),
            })
            .collect()
    };
    assert_eq!(plugin.consume(id, "app", "events", JSON, &batch(0)), 0);
    assert_eq!(series("messages_received_total", ""), 100.0, "during the stream");
    assert_eq!(series("messages_written_total", ""), 90.0);
    for from in [100, 200] {
        assert_eq!(plugin.consume(id, "app", "events", JSON, &batch(from)), 0);
    }
    assert_eq!(plugin.consume(id, "app", "events", JSON, &[]), 0, "an empty poll");

    // Read past the counts: each row and each letter once, by identity.
    let rows = block(read_log(&table, 270, Duration::from_secs(30)));
    let letters = block(read_log(&dlq, 30, Duration::from_secs(30)));
    let ids: Vec<String> = rows.iter().map(|row| row[0].clone()).collect();
    let letter_offsets: Vec<String> = letters.iter().map(|letter| letter[3].clone()).collect();
    let (bad, good): (Vec<u64>, Vec<u64>) = (0..300).partition(|i| i % 10 == 7);
    assert_eq!(ids, good.iter().map(u64::to_string).collect::<Vec<_>>());
    assert_eq!(letter_offsets, bad.iter().map(u64::to_string).collect::<Vec<_>>());
    assert_eq!(series("messages_received_total", ""), 300.0);
    assert_eq!(series("messages_written_total", ""), rows.len() as f64);
    assert_eq!(
        series("rows_written_total", &format!(",table=\"{table}\"")),
        rows.len() as f64
    );
    assert_eq!(
        series("messages_dead_lettered_total", ",kind=\"mapping\""),
        letters.len() as f64
    );
    assert_eq!((rows.len(), letters.len()), (270, 30));
    // Empty polls return at once, before the pipeline: not counted.
    assert_eq!(series("consume_calls_total", ",result=\"ok\""), 3.0);
    assert_eq!(series("consume_duration_seconds_count", ""), 3.0);
    assert_eq!(series("messages_in_flight", ""), 0.0);
    assert!(series("write_ack_duration_seconds_count", "") >= 3.0);
    assert_eq!(plugin.close(id), 0);
    assert_eq!(
        scrape(&format!(
            "fluss_sink_messages_received_total{{instance=\"{id}\"}}"
        )),
        None,
        "a closed instance leaves the endpoint"
    );
}

#[test]
fn a_scraper_that_connects_and_says_nothing_blocks_no_other_scrape() {
    let plugin = Plugin::load();
    let table = unique_table("metrics_hung");
    let id = next_id();
    plugin.open_ok(
        id,
        &config(
            &table,
            json!({
            "metrics_address": METRICS.as_str()
            }),
        ),
    );
    let _silent: Vec<std::net::TcpStream> = (0..8)
        .map(|_| std::net::TcpStream::connect(METRICS.as_str()).unwrap())
        .collect();
    // Answered within the tests' HTTP bound (`integration_tests::http`): a
    // server that served the silent connections first would not answer.
    assert_eq!(
        scrape(&format!(
            "fluss_sink_messages_received_total{{instance=\"{id}\"}}"
        )),
        Some(0.0)
    );
    assert_eq!(plugin.close(id), 0);
}

#[test]
fn a_metrics_address_taken_by_another_program_fails_open_naming_it() {
    let plugin = Plugin::load();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let table = unique_table("metrics_taken");
    let id = next_id();
    let config = config(
        &table,
        json!({
        "metrics_address": address
        }),
    );
    assert_ne!(plugin.open(id, &config.to_string()), 0);
    let failed = wait_for_log(id, "open failed");
    assert!(
        failed.contains(&format!("cannot serve metrics on {address}")),
        "{failed}"
    );
}
