//! The plugin as the connectors runtime sees it: the built `.so` loaded with
//! dlopen, its four symbols looked up by name, and the postcard buffers of
//! `consume` written by this module's own encoder (from the byte layout in
//! `docs/runtime-contract.md`, independent of the plugin's decoder).

use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

type LogCallback = extern "C" fn(u8, *const u8, usize, *const u8, usize);
type OpenFn = unsafe extern "C" fn(u32, *const u8, usize, LogCallback) -> i32;
type ConsumeFn = unsafe extern "C" fn(u32, *const u8, usize, *const u8, usize, *const u8, usize) -> i32;
type CloseFn = unsafe extern "C" fn(u32) -> i32;
type VersionFn = unsafe extern "C" fn() -> *const std::ffi::c_char;

/// Log lines the plugin sent through the callback: (level, target, message).
static LOG: Mutex<Vec<(u8, String, String)>> = Mutex::new(Vec::new());

extern "C" fn log_callback(level: u8, target: *const u8, target_len: usize, message: *const u8, len: usize) {
    // SAFETY: the plugin lends two UTF-8 strings of these lengths for the call.
    let (target, message) = unsafe {
        (
            String::from_utf8_lossy(std::slice::from_raw_parts(target, target_len)).into_owned(),
            String::from_utf8_lossy(std::slice::from_raw_parts(message, len)).into_owned(),
        )
    };
    if std::env::var_os("PLUGIN_LOG").is_some() {
        let now = chrono::Utc::now().format("%H:%M:%S%.3f");
        eprintln!("{now} [plugin {level}] {target}: {message}");
    }
    LOG.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((level, target, message));
}

/// Log lines so far whose message contains `needle`.
pub fn logged(needle: &str) -> Vec<(u8, String)> {
    LOG.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(_, _, m)| m.contains(needle))
        .map(|(l, _, m)| (*l, m.clone()))
        .collect()
}

/// The plugin library, loaded once per test process like the runtime does.
pub struct Plugin {
    _library: libloading::Library,
    open: OpenFn,
    consume: ConsumeFn,
    close: CloseFn,
    version: VersionFn,
}

/// The built plugin: `target/<profile>/libiggy_connector_fluss_sink.so`.
pub fn library_path() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/<test> → target/<profile>
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    dir.join("libiggy_connector_fluss_sink.so")
}

fn newest_source_change() -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let mut stack = vec![
        crate::repo_root().join("host/src"),
        crate::repo_root().join("row-codec/src"),
    ];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(modified) = entry.metadata().and_then(|m| m.modified()) {
                newest = newest.max(modified);
            }
        }
    }
    newest
}

impl Plugin {
    /// Loads the plugin; panics with the build command when it is missing or older than its sources.
    pub fn load() -> &'static Plugin {
        static PLUGIN: std::sync::OnceLock<Plugin> = std::sync::OnceLock::new();
        PLUGIN.get_or_init(|| {
            let path = library_path();
            let built = std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .unwrap_or_else(|_| {
                    panic!(
                        "{} is missing: run `cargo build -p iggy_connector_fluss_sink` first",
                        path.display()
                    )
                });
            assert!(
                built >= newest_source_change(),
                "{} is older than its sources: run `cargo build -p iggy_connector_fluss_sink`",
                path.display()
            );
            Self::open_library(&path)
        })
    }

    /// Loads another build of the plugin (say, an older commit's, to
    /// benchmark against), without checking it against the sources here.
    pub fn load_from(path: &Path) -> &'static Plugin {
        Box::leak(Box::new(Self::open_library(path)))
    }

    fn open_library(path: &Path) -> Plugin {
        // SAFETY: loading our own plugin, whose initialisers are Rust statics only.
        let library = unsafe { libloading::Library::new(path) }.expect("dlopen the plugin");
        // SAFETY: the symbols have these C signatures (the ABI under test).
        unsafe {
            Plugin {
                open: *library
                    .get::<OpenFn>(b"iggy_sink_open\0")
                    .expect("iggy_sink_open"),
                consume: *library
                    .get::<ConsumeFn>(b"iggy_sink_consume\0")
                    .expect("iggy_sink_consume"),
                close: *library
                    .get::<CloseFn>(b"iggy_sink_close\0")
                    .expect("iggy_sink_close"),
                version: *library
                    .get::<VersionFn>(b"iggy_sink_version\0")
                    .expect("iggy_sink_version"),
                _library: library,
            }
        }
    }

    /// `iggy_sink_open(id, config)`.
    pub fn open(&self, id: u32, config: &str) -> i32 {
        // SAFETY: the config bytes live for the call.
        unsafe { (self.open)(id, config.as_ptr(), config.len(), log_callback) }
    }

    /// Opens instance `id` with `config`, failing the test with the plugin's
    /// own log lines when it refuses.
    pub fn open_ok(&self, id: u32, config: &serde_json::Value) {
        let code = self.open(id, &config.to_string());
        assert_eq!(
            code,
            0,
            "open failed (the dlopen tests need Fluss: `scripts/fluss-local.sh start`): {:?}",
            logged(&format!("instance={id}"))
        );
    }

    /// Opens a new instance (the next free id) with `config`, as
    /// [`Plugin::open_ok`] does; gives its id.
    pub fn open_new(&self, config: &serde_json::Value) -> u32 {
        let id = next_id();
        self.open_ok(id, config);
        id
    }

    /// `iggy_sink_consume(id, …)` with already encoded buffers.
    pub fn consume_raw(&self, id: u32, topic_meta: &[u8], messages_meta: &[u8], messages: &[u8]) -> i32 {
        // SAFETY: the three buffers live for the call.
        unsafe {
            (self.consume)(
                id,
                topic_meta.as_ptr(),
                topic_meta.len(),
                messages_meta.as_ptr(),
                messages_meta.len(),
                messages.as_ptr(),
                messages.len(),
            )
        }
    }

    /// `iggy_sink_consume` of `messages` from `stream`/`topic`, partition 1, schema `schema`.
    pub fn consume(&self, id: u32, stream: &str, topic: &str, schema: u32, messages: &[TestMessage]) -> i32 {
        let first = messages.first().map_or(0, |m| m.offset);
        self.consume_raw(
            id,
            &encode::topic_metadata(stream, topic),
            &encode::messages_metadata(1, first, schema),
            &encode::raw_messages(schema, messages),
        )
    }

    /// [`Plugin::consume`] of JSON `messages` from `app`/`topic`, failing
    /// the test with instance `id`'s log lines unless it returns 0.
    pub fn consume_json_ok(&self, id: u32, topic: &str, messages: &[TestMessage]) {
        assert_eq!(
            self.consume(id, "app", topic, 0, messages),
            0,
            "{:?}",
            logged(&format!("instance={id}"))
        );
    }

    /// [`Plugin::consume`] of JSON `messages` from `app`/`topic`; the return
    /// code and how long the call took.
    pub fn timed_consume(
        &self,
        id: u32,
        topic: &str,
        messages: &[TestMessage],
    ) -> (i32, std::time::Duration) {
        let started = std::time::Instant::now();
        let code = self.consume(id, "app", topic, 0, messages);
        (code, started.elapsed())
    }

    /// `iggy_sink_close(id)`.
    pub fn close(&self, id: u32) -> i32 {
        // SAFETY: no arguments to lend.
        unsafe { (self.close)(id) }
    }

    /// `iggy_sink_close(id)` for an id with no open instance (its open
    /// failed, or it was closed already), as the runtime calls it: the
    /// plugin refuses it with `-1`, and nothing else happens. (Its log line
    /// reaches a callback only while some instance has one registered.)
    pub fn close_unopened(&self, id: u32) {
        assert_eq!(self.close(id), -1, "close of {id}, which has no open instance");
    }

    /// `iggy_sink_version()`.
    pub fn version(&self) -> String {
        // SAFETY: the plugin returns a static NUL-terminated string.
        unsafe { CStr::from_ptr((self.version)()) }
            .to_str()
            .expect("UTF-8 version")
            .to_string()
    }
}

/// Instance ids unique within the test process (the runtime's start at 1).
pub fn next_id() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// How much later than its deadline a bounded call may return.
pub const GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Fails the test when `took` is past `deadline` plus [`GRACE`], naming `case`.
pub fn assert_prompt(case: &str, took: std::time::Duration, deadline: std::time::Duration) {
    assert!(
        took <= deadline + GRACE,
        "{case}: took {took:?}, more than its deadline {deadline:?} + {GRACE:?}"
    );
}

/// A message as the runtime hands it over.
#[derive(Debug, Clone, Default)]
pub struct TestMessage {
    /// Message id.
    pub id: u128,
    /// Offset in its partition.
    pub offset: u64,
    /// Timestamp, µs.
    pub timestamp: u64,
    /// Headers: (key, kind index, raw value bytes); keys are String kind.
    pub headers: Vec<(String, u32, Vec<u8>)>,
    /// Payload bytes.
    pub payload: Vec<u8>,
}

impl TestMessage {
    /// A message at `offset` with a JSON (or any) text payload.
    pub fn text(offset: u64, payload: &str) -> Self {
        Self {
            id: 10_000 + offset as u128,
            offset,
            timestamp: 1_767_225_600_000_000 + offset,
            headers: Vec::new(),
            payload: payload.as_bytes().to_vec(),
        }
    }

    /// The same message with a String header.
    pub fn with_header(mut self, key: &str, value: &str) -> Self {
        self.headers.push((key.into(), 1, value.as_bytes().to_vec()));
        self
    }
}

/// A postcard 1.x encoder for the runtime's three buffers.
pub mod encode {
    use base64::Engine as _;

    use super::TestMessage;

    /// LEB128 varint.
    pub fn varint(out: &mut Vec<u8>, mut value: u128) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        varint(out, b.len() as u128);
        out.extend_from_slice(b);
    }

    /// `TopicMetadata { stream, topic }`.
    pub fn topic_metadata(stream: &str, topic: &str) -> Vec<u8> {
        let mut out = Vec::new();
        bytes(&mut out, stream.as_bytes());
        bytes(&mut out, topic.as_bytes());
        out
    }

    /// `MessagesMetadata { partition_id, current_offset, schema }`.
    pub fn messages_metadata(partition: u32, offset: u64, schema: u32) -> Vec<u8> {
        let mut out = Vec::new();
        varint(&mut out, partition as u128);
        varint(&mut out, offset as u128);
        varint(&mut out, schema as u128);
        out
    }

    /// A headers map; each key and value is `{ kind, base64 text }`.
    pub fn headers(headers: &[(String, u32, Vec<u8>)]) -> Vec<u8> {
        if headers.is_empty() {
            return Vec::new();
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut out = Vec::new();
        varint(&mut out, headers.len() as u128);
        for (key, kind, value) in headers {
            varint(&mut out, 1);
            bytes(&mut out, b64.encode(key).as_bytes());
            varint(&mut out, *kind as u128);
            bytes(&mut out, b64.encode(value).as_bytes());
        }
        out
    }

    /// `RawMessages { schema, messages }`.
    pub fn raw_messages(schema: u32, messages: &[TestMessage]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(&mut out, schema as u128);
        varint(&mut out, messages.len() as u128);
        for m in messages {
            varint(&mut out, m.id);
            varint(&mut out, m.offset as u128);
            varint(&mut out, 0); // checksum
            varint(&mut out, m.timestamp as u128);
            varint(&mut out, m.timestamp as u128); // origin timestamp
            bytes(&mut out, &headers(&m.headers));
            bytes(&mut out, &m.payload);
        }
        out
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        fn hex(b: &[u8]) -> String {
            b.iter().map(|x| format!("{x:02x}")).collect()
        }

        #[test]
        fn matches_the_design_doc_vectors() {
            assert_eq!(hex(&topic_metadata("app", "events")), "03617070066576656e7473");
            assert_eq!(hex(&messages_metadata(3, 1000, 0)), "03e80700");
            let h = vec![("k".to_string(), 1, b"v".to_vec())];
            assert_eq!(hex(&headers(&h)), "01010461773d3d010464673d3d");
            let m = TestMessage {
                id: 1,
                offset: 2,
                timestamp: 3,
                headers: h,
                payload: b"{}".to_vec(),
            };
            assert_eq!(
                hex(&raw_messages(0, &[m])),
                "000101020003030d01010461773d3d010464673d3d027b7d"
            );
        }
    }
}

/// A config for a log table `path` with tenant/v columns whose messages
/// `tenant-router` routes to `<path's table>_<tenant>` tables, created as
/// needed; the prefix is returned beside it.
pub fn tenant_router_config(path: &iggy_connector_fluss_sink::TablePath) -> (serde_json::Value, String) {
    let prefix = format!("{}_", path.table);
    let config = serde_json::json!({
        "bootstrap_servers": crate::fluss_cluster::bootstrap(),
        "database": path.database,
        "table": path.table,
        "columns": [{"name": "tenant", "type": "STRING"}, {"name": "v", "type": "INT"}],
        "auto_create_table": true,
        "allowed_tables": [format!("{}.{prefix}*", path.database)],
        "transform": {
            "path": crate::component("tenant-router"),
            "cache_dir": crate::test_cache_dir(),
            "config": {"prefix": prefix}
        }
    });
    (config, prefix)
}

/// A config for a log table `path` with id/name/amount columns and a dead-letter table.
pub fn log_config(
    path: &iggy_connector_fluss_sink::TablePath,
    dlq: &iggy_connector_fluss_sink::TablePath,
) -> serde_json::Value {
    serde_json::json!({
        "bootstrap_servers": crate::fluss_cluster::bootstrap(),
        "database": path.database,
        "table": path.table,
        "columns": [
            {"name": "id", "type": "BIGINT", "nullable": false},
            {"name": "name", "type": "STRING"},
            {"name": "amount", "type": "DECIMAL(10, 2)"}
        ],
        "dead_letter_table": dlq.to_string(),
        "delivery_timeout": "60s"
    })
}

/// JSON messages `from..from + count` (offsets are the ids), each
/// `{"id", "name", "extra"}`: for tests that add column `extra` mid-stream.
pub fn messages_with_extra(from: u64, count: u64) -> Vec<TestMessage> {
    (from..from + count)
        .map(|i| TestMessage::text(i, &format!(r#"{{"id":{i},"name":"n{i}","extra":"e{i}"}}"#)))
        .collect()
}
