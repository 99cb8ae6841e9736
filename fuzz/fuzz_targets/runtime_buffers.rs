//! The runtime's three buffers (`abi/decode`): a well-formed encoding of
//! arbitrary messages decodes to exactly those messages; the same bytes cut
//! short or with one byte changed decode or are refused, never panic; and
//! raw bytes are decoded as each buffer too.
#![no_main]

use arbitrary::Arbitrary;
use iggy_connector_fluss_sink::test_support::decode;
use iggy_connector_fluss_sink::{HeaderKind, Source};
use integration_tests::plugin::{TestMessage, encode};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Message {
    id: u128,
    offset: u64,
    timestamp: u64,
    headers: Vec<(String, u8, Vec<u8>)>,
    payload: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    stream: String,
    topic: String,
    partition: u32,
    offset: u64,
    schema: u8,
    messages: Vec<Message>,
    /// Where to cut the messages buffer, if anywhere.
    cut: Option<u16>,
    /// A byte to change in the messages buffer, if any.
    flip: Option<(u16, u8)>,
    raw: Vec<u8>,
}

fn source() -> Source {
    Source {
        stream: "s".into(),
        topic: "t".into(),
        partition: 0,
    }
}

fuzz_target!(|input: Input| {
    let topic = encode::topic_metadata(&input.stream, &input.topic);
    assert_eq!(
        decode::topic_metadata(&topic).expect("well-formed topic metadata"),
        (input.stream.clone(), input.topic.clone())
    );
    let meta = encode::messages_metadata(input.partition, input.offset, u32::from(input.schema));
    let decoded = decode::messages_metadata(&meta);
    match decoded {
        Ok(m) => {
            assert_eq!(
                (m.partition_id, m.current_offset),
                (input.partition, input.offset)
            );
        }
        Err(e) => assert!(e.to_string().contains("schema"), "{e}"),
    }

    let kinds = HeaderKind::ALL.len() as u8;
    let messages: Vec<TestMessage> = input
        .messages
        .iter()
        .map(|m| TestMessage {
            id: m.id,
            offset: m.offset,
            timestamp: m.timestamp,
            headers: m
                .headers
                .iter()
                .map(|(k, kind, v)| (k.clone(), u32::from(kind % kinds), v.clone()))
                .collect(),
            payload: m.payload.clone(),
        })
        .collect();
    let mut bytes = encode::raw_messages(0, &messages);
    let (_, batch) = decode::raw_messages(&bytes, source()).expect("well-formed messages");
    assert_eq!(batch.len(), messages.len());
    for (got, sent) in batch.iter().zip(&messages) {
        assert_eq!(
            (got.id, got.offset, got.timestamp),
            (sent.id, sent.offset, sent.timestamp)
        );
        assert_eq!(got.payload, sent.payload.as_slice());
        assert_eq!(got.headers.len(), sent.headers.len());
        for (h, (key, kind, value)) in got.headers.iter().zip(&sent.headers) {
            assert_eq!((&h.key, h.kind as u32, &h.value), (key, *kind, value));
        }
    }

    if let Some(cut) = input.cut {
        let cut = usize::from(cut) % bytes.len().max(1);
        let _ = decode::raw_messages(&bytes[..cut], source());
    }
    if let Some((at, byte)) = input.flip {
        let at = usize::from(at) % bytes.len().max(1);
        if let Some(b) = bytes.get_mut(at) {
            *b ^= byte;
        }
        let _ = decode::raw_messages(&bytes, source());
    }
    let _ = decode::topic_metadata(&input.raw);
    let _ = decode::messages_metadata(&input.raw);
    let _ = decode::headers(&input.raw);
    let _ = decode::raw_messages(&input.raw, source());
});
