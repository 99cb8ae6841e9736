//! The example transforms, built as components, produce the rows they promise.

use iggy_connector_fluss_sink::MessageOutcome;
use iggy_connector_fluss_sink::{Header, HeaderKind, MessageBatch, Source};
use iggy_connector_fluss_sink::{Transform, TransformError, TransformSpec};
use integration_tests::load_transform as load;
use integration_tests::{batch_of, component, rows_of, table, text_batch};

/// The evil guest's table: one BIGINT column, each message's offset.
fn offsets_table() -> iggy_connector_fluss_sink::TableSchema {
    table("db.evil", &[("offset", "BIGINT", false)], &[])
}

fn events_table() -> iggy_connector_fluss_sink::TableSchema {
    table(
        "db.events",
        &[
            ("id", "BIGINT", false),
            ("name", "STRING", true),
            ("amount", "DECIMAL(10, 2)", true),
            ("at", "TIMESTAMP(6)", true),
        ],
        &[],
    )
}

#[test]
fn json_to_row_maps_by_column_name() {
    let t = load("json-to-row", &[], &[events_table()]).unwrap();
    let out = t
        .process(&text_batch(&[
            r#"{"name":"a","id":1,"amount":"12.30","at":"2024-01-02T03:04:05","extra":true}"#,
            r#"{"id":2}"#,
            r#"{"name":"no id"}"#,
            r#"{"id":"three"}"#,
            "not json",
        ]))
        .unwrap();
    assert_eq!(
        rows_of(&out),
        vec![
            (
                0,
                "".into(),
                "append",
                vec![
                    "BigInt(1)".into(),
                    "String(\"a\")".into(),
                    "Decimal(\"12.30\")".into(),
                    "Timestamp(1704164645000000)".into()
                ]
            ),
            (
                1,
                "".into(),
                "append",
                vec!["BigInt(2)".into(), "Null".into(), "Null".into(), "Null".into()]
            ),
        ]
    );
    assert_eq!(
        out.outcomes[2],
        MessageOutcome::DeadLetter("column `id` is NOT NULL but the payload has no value for it".into())
    );
    assert_eq!(
        out.outcomes[3],
        MessageOutcome::DeadLetter("column `id` (BIGINT): \"three\" is not a BIGINT".into())
    );
    assert!(
        matches!(&out.outcomes[4], MessageOutcome::DeadLetter(r) if r.starts_with("payload is not valid JSON"))
    );
}

#[test]
fn json_to_row_rejects_a_bad_kind_at_init() {
    let err = load("json-to-row", &[("kind", "merge")], &[events_table()])
        .err()
        .unwrap();
    assert!(matches!(err, TransformError::Init { .. }));
    assert!(
        err.to_string()
            .contains("config `kind` must be append, upsert or delete, not `merge`"),
        "{err}"
    );
}

#[test]
fn tenant_router_filters_and_routes_per_tenant() {
    let tables = [table(
        "lake.events",
        &[
            ("tenant", "STRING", true),
            ("v", "INT", true),
            ("type", "STRING", true),
        ],
        &[],
    )];
    let t = load(
        "tenant-router",
        &[
            ("prefix", "events_"),
            ("filter_field", "type"),
            ("filter_value", "order"),
        ],
        &tables,
    )
    .unwrap();
    let header = vec![Header {
        key: "tenant".into(),
        kind: HeaderKind::String,
        value: b"globex".to_vec(),
    }];
    let batch = batch_of(
        &[
            br#"{"tenant":"acme","v":1,"type":"order"}"#,
            br#"{"tenant":"acme","v":2,"type":"click"}"#,
            br#"{"v":3,"type":"order"}"#,
            br#"{"tenant":"bad name","v":4,"type":"order"}"#,
            br#"{"tenant":"initech","v":5,"type":"order"}"#,
            br#"{"v":6,"type":"order"}"#,
        ],
        &[vec![], vec![], header, vec![], vec![], vec![]],
    );
    let out = t.process(&batch).unwrap();
    let routed: Vec<(u32, String)> = rows_of(&out)
        .into_iter()
        .map(|(m, table, _, _)| (m, table))
        .collect();
    assert_eq!(
        routed,
        vec![
            (0, "lake.events_acme".into()),
            (2, "lake.events_globex".into()),
            (4, "lake.events_initech".into())
        ]
    );
    assert_eq!(out.outcomes[1], MessageOutcome::Rows(0), "filtered out");
    assert!(
        matches!(&out.outcomes[3], MessageOutcome::DeadLetter(r) if r.contains("not a plain identifier"))
    );
    assert!(matches!(&out.outcomes[5], MessageOutcome::DeadLetter(r) if r.contains("no tenant")));
    assert_eq!(out.counts(), (3, 1, 2));

    // Table indexes stay valid across batches of the same instance.
    let again = t
        .process(&text_batch(&[r#"{"tenant":"initech","v":7,"type":"order"}"#]))
        .unwrap();
    assert_eq!(rows_of(&again)[0].1, "lake.events_initech");

    // More tenants than the component keeps table names for, twice over
    // (names built anew past the kept ones), in one batch and the next.
    let payloads: Vec<String> = (0..150)
        .map(|i| format!(r#"{{"tenant":"t{}","v":{i},"type":"order"}}"#, i % 75))
        .collect();
    let payloads: Vec<&str> = payloads.iter().map(String::as_str).collect();
    for _ in 0..2 {
        let out = t.process(&text_batch(&payloads)).unwrap();
        let tables: Vec<String> = rows_of(&out).into_iter().map(|(_, table, _, _)| table).collect();
        let want: Vec<String> = (0..150).map(|i| format!("lake.events_t{}", i % 75)).collect();
        assert_eq!(tables, want);
    }
}

#[test]
fn cdc_upsert_turns_ops_into_upserts_and_deletes() {
    let tables = [table(
        "db.users",
        &[("id", "BIGINT", false), ("name", "STRING", true)],
        &["id"],
    )];
    let t = load("cdc-upsert", &[], &tables).unwrap();
    let delete_header = vec![Header {
        key: "op".into(),
        kind: HeaderKind::String,
        value: b"d".to_vec(),
    }];
    let batch = batch_of(
        &[
            br#"{"op":"c","id":1,"name":"ann"}"#,
            br#"{"op":"u","id":1,"name":"anne"}"#,
            br#"{"id":1}"#,
            br#"{"op":"x","id":2}"#,
        ],
        &[vec![], vec![], delete_header],
    );
    let out = t.process(&batch).unwrap();
    let kinds: Vec<(u32, &str)> = rows_of(&out).into_iter().map(|(m, _, k, _)| (m, k)).collect();
    assert_eq!(kinds, vec![(0, "upsert"), (1, "upsert"), (2, "delete")]);
    assert!(matches!(&out.outcomes[3], MessageOutcome::DeadLetter(r) if r.contains("unknown operation `x`")));

    let log_table = [table("db.log", &[("id", "BIGINT", false)], &[])];
    let err = load("cdc-upsert", &[], &log_table).err().unwrap();
    assert!(err.to_string().contains("has no primary key"), "{err}");
}

#[test]
fn instances_are_reused_across_batches() {
    let t = load("json-to-row", &[], &[events_table()]).unwrap();
    for i in 0..5 {
        let out = t.process(&text_batch(&[&format!(r#"{{"id":{i}}}"#)])).unwrap();
        assert_eq!(out.rows.len(), 1);
    }
    assert_eq!(
        t.stats()
            .instances_created
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}

/// Four calls in flight at once (each thread's first call spins in the
/// guest long enough for the others to start) run in four instances; the
/// calls after them reuse those instances, each thread's rows its own.
#[test]
fn concurrent_batches_each_get_their_own_instance() {
    let t = load(
        "evil",
        &[("mode", "slow"), ("spin", "200000000")],
        &[offsets_table()],
    )
    .unwrap();
    let barrier = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        for thread in 0..4u64 {
            let (t, barrier) = (&t, &barrier);
            s.spawn(move || {
                barrier.wait();
                for i in 0..3 {
                    let offset = thread * 100 + i;
                    let mut batch = MessageBatch::new(Source {
                        stream: "app".into(),
                        topic: "events".into(),
                        partition: 1,
                    });
                    batch.push(offset, 0, 0, b"x", []).unwrap();
                    let out = t.process(&batch).unwrap();
                    assert_eq!(rows_of(&out)[0].3[0], format!("BigInt({offset})"));
                }
            });
        }
    });
    let created = t
        .stats()
        .instances_created
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(created, 4, "one instance per call in flight, reused after");
}

#[test]
fn an_instance_past_the_memory_mark_is_recycled() {
    let mut spec = TransformSpec::new(component("json-to-row"));
    spec.cache_dir = Some(integration_tests::test_cache_dir());
    spec.limits.recycle_memory = 1;
    let t = Transform::load(&spec, &[events_table()]).unwrap();
    for _ in 0..3 {
        t.process(&text_batch(&[r#"{"id":1}"#])).unwrap();
    }
    let stats = t.stats();
    assert_eq!(
        stats.recycled.load(std::sync::atomic::Ordering::Relaxed),
        4,
        "the first instance and one per batch"
    );
    assert_eq!(
        stats.instances_created.load(std::sync::atomic::Ordering::Relaxed),
        4
    );
}
