//! The plugin's decoder against bytes the real runtime wrote, not only
//! against the tests' own encoder (`integration_tests::plugin::encode`): a
//! misreading shared by encoder and decoder would pass every other test.
//!
//! `the_runtime_hands_consume_what_was_produced` runs the real
//! `iggy-connectors` with the capture plugin (`tests/runtime-capture`),
//! which keeps each `consume`'s three buffers, and decodes them. Run with
//! `FLUSS_SINK_KEEP_CAPTURE=1`, it replaces the kept copy in
//! `tests/data/runtime-buffers/` (the seed of the fuzz target
//! `captured_buffers`), which `kept_runtime_buffers_decode_to_what_was_produced`
//! decodes on every run, with or without the Iggy binaries.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use iggy_connector_fluss_sink::test_support::decode;
use iggy_connector_fluss_sink::{HeaderKind, PayloadSchema, Source};
use integration_tests::iggy::{Connector, Server, base64, binaries_present, start_runtime};
use serde_json::{Value, json};

use super::ONE_AT_A_TIME;

/// Messages produced.
const COUNT: usize = 60;

/// Messages per poll: several `consume` calls, each of several messages.
const POLL: usize = 16;

/// One produced message as the sink should see it.
struct Expected {
    id: u128,
    payload: Value,
    /// Key → (kind, raw value bytes).
    headers: BTreeMap<String, (HeaderKind, Vec<u8>)>,
}

/// The `i`th message: payloads of every JSON shape (escapes, non-ASCII,
/// nesting, a large string whose length takes a three-byte varint) and
/// headers of every kind, some messages with none.
fn expected(i: usize) -> Expected {
    let n = i as i64;
    let payload = match i % 4 {
        0 => json!({"order_id": n, "customer": format!("c{i}"), "amount": format!("{i}.25")}),
        1 => json!({"text": "h\u{e9}llo \"q\" \\ \u{2713} \u{1d11e}\n", "n": -n, "f": 1.5e300}),
        2 => json!({"nested": {"list": [1, null, true, "x", {"deep": [n]}]}, "empty": {}}),
        _ => json!({"big": "y".repeat(if i == 3 { 20_000 } else { 300 })}),
    };
    let mut headers = BTreeMap::new();
    let mut header = |key: &str, kind, value: Vec<u8>| {
        headers.insert(key.to_string(), (kind, value));
    };
    if i % 5 != 4 {
        header("tenant", HeaderKind::String, format!("t{}", i % 3).into_bytes());
        header("seq", HeaderKind::Uint64, (i as u64).to_le_bytes().to_vec());
        header("flag", HeaderKind::Bool, vec![(i % 2) as u8]);
        header("neg", HeaderKind::Int32, (-(i as i32)).to_le_bytes().to_vec());
        header("pi", HeaderKind::Float64, 3.5f64.to_le_bytes().to_vec());
    }
    if i % 5 == 1 {
        header("blob", HeaderKind::Raw, vec![0, 255, i as u8]);
        header("i8", HeaderKind::Int8, (-3i8).to_le_bytes().to_vec());
        header("i16", HeaderKind::Int16, (-300i16).to_le_bytes().to_vec());
        header("i64", HeaderKind::Int64, (-(n << 40)).to_le_bytes().to_vec());
        header(
            "i128",
            HeaderKind::Int128,
            (-(1i128 << 100)).to_le_bytes().to_vec(),
        );
        header("u8", HeaderKind::Uint8, vec![200]);
        header("u16", HeaderKind::Uint16, 60_000u16.to_le_bytes().to_vec());
        header("u32", HeaderKind::Uint32, 4_000_000_000u32.to_le_bytes().to_vec());
        header(
            "u128",
            HeaderKind::Uint128,
            (u128::MAX - 7).to_le_bytes().to_vec(),
        );
        header("f32", HeaderKind::Float32, (-0.25f32).to_le_bytes().to_vec());
    }
    Expected {
        id: 0xF1_0000_0000 + i as u128 * 7919,
        payload,
        headers,
    }
}

/// The HTTP API's name of a header kind.
fn kind_name(kind: HeaderKind) -> &'static str {
    match kind {
        HeaderKind::Raw => "raw",
        HeaderKind::String => "string",
        HeaderKind::Bool => "bool",
        HeaderKind::Int8 => "int8",
        HeaderKind::Int16 => "int16",
        HeaderKind::Int32 => "int32",
        HeaderKind::Int64 => "int64",
        HeaderKind::Int128 => "int128",
        HeaderKind::Uint8 => "uint8",
        HeaderKind::Uint16 => "uint16",
        HeaderKind::Uint32 => "uint32",
        HeaderKind::Uint64 => "uint64",
        HeaderKind::Uint128 => "uint128",
        HeaderKind::Float32 => "float32",
        HeaderKind::Float64 => "float64",
    }
}

/// `e` as the HTTP API takes a message.
fn as_sent(e: &Expected) -> Value {
    let headers: Vec<Value> = e
        .headers
        .iter()
        .map(|(key, (kind, value))| {
            json!({"key": {"kind": "string", "value": base64(key.as_bytes())},
                   "value": {"kind": kind_name(*kind), "value": base64(value)}})
        })
        .collect();
    let mut message = json!({
        "id": e.id as u64,
        "payload": base64(e.payload.to_string().as_bytes()),
    });
    if !headers.is_empty() {
        message["user_headers"] = Value::Array(headers);
    }
    message
}

/// One `consume` call's three buffers, read from the folder the capture
/// plugin wrote them to.
struct Captured {
    folder: PathBuf,
    topic: Vec<u8>,
    meta: Vec<u8>,
    messages: Vec<u8>,
}

/// The captures in `dir`, in call order; folders still being written are
/// left out.
fn captures(dir: &Path) -> Vec<Captured> {
    let mut numbered: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
        .collect();
    numbered.sort();
    numbered
        .into_iter()
        .filter_map(|(_, folder)| {
            let read = |name: &str| std::fs::read(folder.join(name)).ok();
            Some(Captured {
                topic: read("topic_metadata")?,
                meta: read("messages_metadata")?,
                messages: read("messages")?,
                folder,
            })
        })
        .collect()
}

/// Decodes every capture with the plugin's decoder and checks it against
/// what was produced: the stream and topic, each message's id, offset,
/// payload and headers (kind and bytes), the partition's current offset, and
/// timestamps within `produced` (µs since the epoch). Gives the offsets
/// seen, each as often as it was handed over.
fn check(captures: &[Captured], stream: &str, topic: &str, produced: (u64, u64)) -> Vec<u64> {
    let mut offsets = Vec::new();
    for c in captures {
        let at = c.folder.display();
        let names = decode::topic_metadata(&c.topic).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(names, (stream.to_string(), topic.to_string()), "{at}");
        let meta = decode::messages_metadata(&c.meta).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!(meta.schema, PayloadSchema::Json, "{at}");
        let source = Source {
            stream: stream.into(),
            topic: topic.into(),
            partition: meta.partition_id,
        };
        let (schema, batch) =
            decode::raw_messages(&c.messages, source).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_eq!((schema, meta.partition_id), (PayloadSchema::Json, 0), "{at}");
        // The partition's newest offset when it was polled, not the last
        // message's: everything was produced before the runtime started.
        if batch.iter().last().is_some() {
            assert_eq!(
                meta.current_offset,
                COUNT as u64 - 1,
                "{at}: the partition's current offset"
            );
        }
        for m in batch.iter() {
            let i = m.offset as usize;
            assert!(i < COUNT, "{at}: offset {i} was never produced");
            let e = expected(i);
            assert_eq!(m.id, e.id, "{at}: the id of offset {i}");
            let payload: Value =
                serde_json::from_slice(m.payload).unwrap_or_else(|err| panic!("{at}: offset {i}: {err}"));
            assert_eq!(payload, e.payload, "{at}: the payload of offset {i}");
            let headers: BTreeMap<String, (HeaderKind, Vec<u8>)> = m
                .headers
                .iter()
                .map(|h| (h.key.clone(), (h.kind, h.value.clone())))
                .collect();
            assert_eq!(m.headers.len(), headers.len(), "{at}: offset {i}: a key twice");
            assert_eq!(headers, e.headers, "{at}: the headers of offset {i}");
            assert!(
                (produced.0..=produced.1).contains(&m.timestamp),
                "{at}: offset {i}: timestamp {} outside {produced:?}",
                m.timestamp
            );
            offsets.push(m.offset);
        }
    }
    offsets
}

fn micros_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

/// The kept copy of a capture.
fn kept_dir() -> PathBuf {
    integration_tests::repo_root().join("tests/data/runtime-buffers")
}

/// The capture plugin, built beside the test binary.
fn capture_plugin() -> PathBuf {
    let plugin = integration_tests::plugin::library_path().with_file_name("libruntime_capture.so");
    assert!(
        plugin.exists(),
        "{} is missing: cargo build -p runtime-capture",
        plugin.display()
    );
    plugin
}

#[test]
fn the_runtime_hands_consume_what_was_produced() {
    if !binaries_present("the_runtime_hands_consume_what_was_produced") {
        return;
    }
    let plugin = capture_plugin();
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 1);
    let started = micros_now();
    let messages: Vec<Value> = (0..COUNT).map(|i| as_sent(&expected(i))).collect();
    server
        .produce_as_is(0, messages)
        .expect("the server takes every header kind");
    let produced = (started, micros_now());
    let dir = work.path().join("captured");
    let connector = Connector {
        batch_length: POLL,
        plugin: Some(plugin),
        ..Connector::new(String::new())
    };
    let env = [("FLUSS_SINK_CAPTURE_DIR".to_string(), dir.display().to_string())];
    let runtime = start_runtime(&server, work.path(), "runtime", &connector, &env);
    let waited = Instant::now();
    let count = || check(&captures(&dir), server.stream, server.topic, produced).len();
    while count() < COUNT {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "{} of {COUNT} messages handed to consume in 60 s; runtime log:\n{}",
            count(),
            runtime.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Past the expected count: a message handed over twice shows up here.
    std::thread::sleep(Duration::from_secs(2));
    drop(runtime);
    let captured = captures(&dir);
    let offsets = check(&captured, server.stream, server.topic, produced);
    assert_eq!(
        offsets,
        (0..COUNT as u64).collect::<Vec<_>>(),
        "every message once, in order"
    );
    assert!(
        captured.len() >= COUNT / POLL,
        "{} consume calls for {COUNT} messages in polls of {POLL}",
        captured.len()
    );
    if std::env::var_os("FLUSS_SINK_KEEP_CAPTURE").is_some() {
        let kept = kept_dir();
        let _ = std::fs::remove_dir_all(&kept);
        for (n, c) in captured.iter().enumerate() {
            let to = kept.join(n.to_string());
            std::fs::create_dir_all(&to).unwrap();
            for name in ["topic_metadata", "messages_metadata", "messages"] {
                std::fs::copy(c.folder.join(name), to.join(name)).unwrap();
            }
        }
        std::fs::write(
            kept.join("produced"),
            format!(
                "{} {} {} {}\n",
                server.stream, server.topic, produced.0, produced.1
            ),
        )
        .unwrap();
    }
}

#[test]
fn kept_runtime_buffers_decode_to_what_was_produced() {
    let kept = kept_dir();
    let produced = std::fs::read_to_string(kept.join("produced"))
        .unwrap_or_else(|e| panic!("{}: {e}", kept.join("produced").display()));
    let fields: Vec<&str> = produced.split_whitespace().collect();
    let [stream, topic, from, to] = fields[..] else {
        panic!("{produced:?}: stream, topic, first and last µs")
    };
    let window = (from.parse().unwrap(), to.parse().unwrap());
    let offsets = check(&captures(&kept), stream, topic, window);
    assert_eq!(offsets, (0..COUNT as u64).collect::<Vec<_>>());
}
