//! One conformance suite for every guest language: the same messages through
//! each language's `json-to-row` and `tenant-router` components must give the
//! same outcomes as the Rust ones: the same rows (table, kind, cells), the
//! same filtered messages, the same dead letters with the same reasons (for
//! a payload that is not JSON, only the reason's prefix: each language's
//! parser words its error its own way).

use iggy_connector_fluss_sink::TableSchema;
use iggy_connector_fluss_sink::{Header, HeaderKind};
use iggy_connector_fluss_sink::{MessageOutcome, TransformOutput};
use integration_tests::load_transform as load;
use integration_tests::{batch_of, rows_of, table};

/// The guest languages besides Rust, as prefixes of their component names.
const LANGUAGES: &[&str] = &["python", "js", "c", "go"];

fn schema(primary_key: &[&str]) -> TableSchema {
    table(
        "conf.events",
        &[
            ("id", "BIGINT", false),
            ("name", "STRING", true),
            ("score", "DOUBLE", true),
            ("active", "BOOLEAN", true),
            ("count", "INT", true),
            ("small", "SMALLINT", true),
            ("tenant", "STRING", true),
        ],
        primary_key,
    )
}

/// An outcome, comparable across languages.
fn outcome_text(o: &MessageOutcome) -> String {
    match o {
        MessageOutcome::Rows(0) => "filtered".into(),
        MessageOutcome::Rows(n) => format!("rows({n})"),
        MessageOutcome::DeadLetter(r) if r.starts_with("payload is not valid JSON") => {
            "dead-letter: payload is not valid JSON".into()
        }
        MessageOutcome::DeadLetter(r) => format!("dead-letter: {r}"),
    }
}

fn same_as_rust(rust: &TransformOutput, other: &TransformOutput, language: &str, payloads: &[&[u8]]) {
    for (i, (r, o)) in rust.outcomes.iter().zip(&other.outcomes).enumerate() {
        assert_eq!(
            outcome_text(o),
            outcome_text(r),
            "{language}: message {i} {:?}",
            String::from_utf8_lossy(payloads[i])
        );
    }
    assert_eq!(
        other.outcomes.len(),
        rust.outcomes.len(),
        "{language}: one outcome per message"
    );
    assert_eq!(rows_of(other), rows_of(rust), "{language}: the same rows");
}

const JSON_MESSAGES: &[&str] = &[
    r#"{"id":1,"name":"all","score":2.5,"active":true,"count":3,"small":-4,"tenant":"acme"}"#,
    r#"{"id":2}"#,
    r#"{"id":3,"name":null,"score":null,"active":null}"#,
    r#"{"id":"42","count":3.0,"score":"2.25","active":"true","name":7,"tenant":true}"#,
    r#"{"tenant":"x","extra":{"nested":[1,2,{"a":null}]},"id":5,"more":[]}"#,
    r#"{"id":6,"name":"ünïcødé ✓ \"quoted\" \\ back","score":-0.125}"#,
    r#"{"id":7,"score":1e3,"count":-2147483648,"small":32767}"#,
    r#"{"name":"no id"}"#,
    r#"{"id":"x"}"#,
    r#"{"id":9,"count":2147483648}"#,
    r#"{"id":10,"score":{}}"#,
    r#"{"id":11,"name":[1]}"#,
    "this is not JSON",
    r#"[1,2,3]"#,
    r#"{"id":14,"active":1}"#,
    r#"{"id":15,"count":1.5}"#,
    r#"{"id":16,"active":"yes"}"#,
    r#"{}"#,
    r#"{"id":18,"small":40000}"#,
    r#"{"id":19,"score":"abc"}"#,
];

fn run_all(
    file: &str,
    config: &[(&str, &str)],
    tables: &[TableSchema],
    payloads: &[&[u8]],
    headers: &[Vec<Header>],
) {
    let batch = batch_of(payloads, headers);
    let rust = load(file, config, tables).unwrap().process(&batch).unwrap();
    for language in LANGUAGES {
        let name = format!("{language}-{file}");
        let transform = load(&name, config, tables).unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = transform
            .process(&batch)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        same_as_rust(&rust, &out, language, payloads);
        // A second batch through the same instance gives the same again.
        let again = transform.process(&batch).unwrap();
        same_as_rust(&rust, &again, language, payloads);
    }
}

#[test]
fn json_to_row_is_the_same_in_every_language() {
    let payloads: Vec<&[u8]> = JSON_MESSAGES.iter().map(|m| m.as_bytes()).collect();
    run_all("json-to-row", &[], &[schema(&[])], &payloads, &[]);
    // The kind from config, into a primary-key table.
    run_all(
        "json-to-row",
        &[("kind", "upsert")],
        &[schema(&["id"])],
        &payloads[..3],
        &[],
    );
    // Partial updates: a field missing from the payload is an absent cell.
    let partial = [("kind", "upsert"), ("partial_update", "true")];
    let rust = load("json-to-row", &partial, &[schema(&["id"])])
        .unwrap()
        .process(&batch_of(&payloads[1..2], &[]))
        .unwrap();
    assert_eq!(rows_of(&rust)[0].3[1], "Absent", "{:?}", rows_of(&rust));
    run_all(
        "json-to-row",
        &[("kind", "upsert"), ("partial_update", "true")],
        &[schema(&["id"])],
        &payloads,
        &[],
    );
}

#[test]
fn json_to_row_refuses_a_bad_config_in_every_language() {
    for file in ["json-to-row".to_string()]
        .into_iter()
        .chain(LANGUAGES.iter().map(|l| format!("{l}-json-to-row")))
    {
        let err = load(&file, &[("kind", "merge")], &[schema(&[])])
            .err()
            .expect("init refuses");
        assert!(
            err.to_string()
                .contains("config `kind` must be append, upsert or delete, not `merge`"),
            "{file}: {err}"
        );
    }
}

#[test]
fn tenant_router_is_the_same_in_every_language() {
    let tenant = |t: &str| {
        vec![Header {
            key: "tenant".into(),
            kind: HeaderKind::String,
            value: t.as_bytes().to_vec(),
        }]
    };
    let messages: &[(&str, Vec<Header>)] = &[
        (r#"{"id":1,"tenant":"acme","type":"order"}"#, vec![]),
        (r#"{"id":2,"tenant":"acme","type":"click"}"#, vec![]),
        (r#"{"id":3,"type":"order"}"#, tenant("globex")),
        (r#"{"id":4,"tenant":"bad name","type":"order"}"#, vec![]),
        (r#"{"id":5,"type":"order"}"#, vec![]),
        (
            r#"{"id":6,"tenant":"initech","type":"order","score":"high"}"#,
            vec![],
        ),
        (r#"{"id":7,"tenant":42,"type":"order"}"#, vec![]),
        (r#"{"id":8,"tenant":"acme"}"#, vec![]),
        ("not json", vec![]),
        (r#"{"id":10,"tenant":{"x":1},"type":"order"}"#, vec![]),
        (r#"{"id":11,"tenant":"","type":"order"}"#, vec![]),
        (r#"{"id":12,"tenant":"globex","type":"order"}"#, tenant("ignored")),
        (r#"{"tenant":"acme","type":"order"}"#, vec![]),
    ];
    let payloads: Vec<&[u8]> = messages.iter().map(|(p, _)| p.as_bytes()).collect();
    let headers: Vec<Vec<Header>> = messages.iter().map(|(_, h)| h.clone()).collect();
    let config = [
        ("prefix", "t_"),
        ("filter_field", "type"),
        ("filter_value", "order"),
    ];
    run_all("tenant-router", &config, &[schema(&[])], &payloads, &headers);
    run_all(
        "tenant-router",
        &[("database", "lake")],
        &[schema(&["id"])],
        &payloads,
        &headers,
    );
}

/// The Go guest lowers the host's arguments into an 8 MiB arena and falls
/// back to its heap past it, where a garbage collection may trap; the host
/// then retries the batch on a fresh instance, whose arena is big enough.
/// Batches of 12 MB (past the arena), three in a row, must give exactly the
/// rows of the Rust component.
#[test]
fn batches_past_the_go_guests_argument_arena_give_the_same_rows() {
    let tables = [schema(&[])];
    let rust = load("json-to-row", &[], &tables).unwrap();
    let go = load("go-json-to-row", &[], &tables).unwrap();
    let name = "x".repeat(1_000);
    for round in 0..3u64 {
        let payloads: Vec<String> = (0..12_000u64)
            .map(|i| {
                format!(
                    r#"{{"id":{},"name":"{name}","score":{i}.5}}"#,
                    round * 100_000 + i
                )
            })
            .collect();
        let bytes: Vec<&[u8]> = payloads.iter().map(|p| p.as_bytes()).collect();
        let batch = batch_of(&bytes, &[]);
        assert!(
            payloads.iter().map(String::len).sum::<usize>() > 8 << 20,
            "the batch is past the arena"
        );
        let expected = rust.process(&batch).unwrap();
        let got = go
            .process(&batch)
            .unwrap_or_else(|e| panic!("go, round {round}: {e}"));
        same_as_rust(&expected, &got, "go", &bytes);
        assert_eq!(got.rows.len(), 12_000, "round {round}: every message is its row");
    }
    let stats = go.stats();
    // Seen here: 6 calls, 2 faults, 3 instances (the guest's runtime is
    // single-threaded and deterministic, so its collections fall the same
    // way every run).
    assert!(
        stats.faults.load(std::sync::atomic::Ordering::Relaxed) >= 1,
        "the trap-and-retry path ran"
    );
    eprintln!(
        "go guest, 3 batches of 12 MB: {} calls, {} faults, {} instances",
        stats.calls.load(std::sync::atomic::Ordering::Relaxed),
        stats.faults.load(std::sync::atomic::Ordering::Relaxed),
        stats.instances_created.load(std::sync::atomic::Ordering::Relaxed)
    );
}
