//! The runtime's messages buffer as the real runtime writes it: the corpus
//! starts from the buffers `iggy-connectors` handed a sink
//! (`tests/data/runtime-buffers/`, kept by
//! `tests/tests/iggy_runtime/captured.rs`), and libFuzzer mutates those
//! bytes. Whatever it makes is decoded or refused, never a panic; what
//! decodes, encoded again (`integration_tests::plugin::encode`) decodes to
//! the same messages. The same bytes read as the two metadata buffers and as
//! a header map are decoded or refused too.
#![no_main]

use iggy_connector_fluss_sink::test_support::decode;
use iggy_connector_fluss_sink::{MessageBatch, Source};
use integration_tests::plugin::{TestMessage, encode};
use libfuzzer_sys::fuzz_target;

fn source() -> Source {
    Source {
        stream: "e2e".into(),
        topic: "orders".into(),
        partition: 0,
    }
}

/// `batch`'s messages as the tests' encoder takes them.
fn messages(batch: &MessageBatch) -> Vec<TestMessage> {
    batch
        .iter()
        .map(|m| TestMessage {
            id: m.id,
            offset: m.offset,
            timestamp: m.timestamp,
            headers: m
                .headers
                .iter()
                .map(|h| (h.key.clone(), h.kind as u32, h.value.clone()))
                .collect(),
            payload: m.payload.to_vec(),
        })
        .collect()
}

fuzz_target!(|bytes: &[u8]| {
    let _ = decode::topic_metadata(bytes);
    let _ = decode::messages_metadata(bytes);
    let _ = decode::headers(bytes);
    let Ok((schema, batch)) = decode::raw_messages(bytes, source()) else {
        return;
    };
    let decoded = messages(&batch);
    let again = encode::raw_messages(u32::from(schema.index()), &decoded);
    let (schema_again, batch_again) =
        decode::raw_messages(&again, source()).expect("what decoded, encoded again, decodes");
    assert_eq!(schema_again, schema);
    let redecoded = messages(&batch_again);
    assert_eq!(redecoded.len(), decoded.len());
    for (a, b) in redecoded.iter().zip(&decoded) {
        assert_eq!(
            (a.id, a.offset, a.timestamp, &a.headers, &a.payload),
            (b.id, b.offset, b.timestamp, &b.headers, &b.payload)
        );
    }
});
