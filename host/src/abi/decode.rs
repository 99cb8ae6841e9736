//! Decoding of the three postcard buffers the connectors runtime hands to
//! `iggy_sink_consume` (layout in `docs/runtime-contract.md`),
//! written from the byte layout, without the runtime's crates.
//!
//! Hand-written rather than `postcard` with serde derives: the row_path
//! bench (`runtime_buffers_*`, figures in `docs/benchmarks.md`) measures
//! both into the same batch, and this reader is as fast or faster at every
//! size; it also names the byte where a buffer goes wrong and what was
//! expected there, which postcard's errors do not.

// Public (through `test_support`) for the fuzz targets only.
#![cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]

use base64::Engine as _;

use crate::batch::{BatchTooLarge, Header, HeaderKind, MessageBatch, PayloadSchema, Source};

/// Why a buffer did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{buffer} buffer: {reason} at byte {offset}")]
pub struct DecodeError {
    /// Which buffer.
    pub buffer: &'static str,
    /// Where.
    pub offset: usize,
    /// What is wrong.
    pub reason: String,
}

/// `MessagesMetadata` of the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessagesMetadata {
    /// Partition id.
    pub partition_id: u32,
    /// The consumer's current offset.
    pub current_offset: u64,
    /// The stream's schema.
    pub schema: PayloadSchema,
}

struct Reader<'a> {
    buffer: &'static str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buffer: &'static str, bytes: &'a [u8]) -> Self {
        Self {
            buffer,
            bytes,
            pos: 0,
        }
    }

    fn error(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError {
            buffer: self.buffer,
            offset: self.pos,
            reason: reason.into(),
        }
    }

    /// A varint of at most `bits` bits. Most fit 64 bits: read at once
    /// (no per-byte checks); any other, and any error, is left to
    /// [`Reader::varint_bytewise`], whose result it always equals.
    #[inline]
    fn varint(&mut self, bits: u32) -> Result<u128, DecodeError> {
        let rest = &self.bytes[self.pos..];
        let mut value = 0u64;
        for (i, &byte) in rest.iter().take(10).enumerate() {
            if i == 9 && byte & 0x7e != 0 {
                // Past 64 bits.
                break;
            }
            value |= ((byte & 0x7f) as u64) << (7 * i);
            if byte & 0x80 == 0 {
                // The bytewise reader refuses a byte that starts at or past
                // `bits`, and bits set past `bits`.
                if (7 * i as u32) < bits && (bits >= 64 || value >> bits == 0) {
                    self.pos += i + 1;
                    return Ok(value as u128);
                }
                break;
            }
        }
        self.varint_bytewise(bits)
    }

    /// [`Reader::varint`] a byte at a time: any width up to 128 bits, and
    /// the errors.
    #[cold]
    fn varint_bytewise(&mut self, bits: u32) -> Result<u128, DecodeError> {
        let start = self.pos;
        let mut value: u128 = 0;
        let mut shift = 0u32;
        loop {
            let Some(&byte) = self.bytes.get(self.pos) else {
                self.pos = start;
                return Err(self.error("truncated varint"));
            };
            self.pos += 1;
            if shift >= bits || (shift > 0 && bits - shift < 7 && (byte & 0x7f) >> (bits - shift) != 0) {
                self.pos = start;
                return Err(self.error(format!("varint overflows u{bits}")));
            }
            value |= ((byte & 0x7f) as u128) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
        }
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(self.varint(32)? as u32)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(self.varint(64)? as u64)
    }

    fn u128(&mut self) -> Result<u128, DecodeError> {
        self.varint(128)
    }

    /// A length, checked against what is left so that a huge claimed length
    /// fails here instead of allocating.
    fn len(&mut self, item_size: usize) -> Result<usize, DecodeError> {
        let at = self.pos;
        let len = self.u64()? as usize;
        let left = self.bytes.len() - self.pos;
        if len.saturating_mul(item_size) > left {
            self.pos = at;
            return Err(self.error(format!("length {len} exceeds the {left} bytes left")));
        }
        Ok(len)
    }

    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.len(1)?;
        let out = &self.bytes[self.pos..self.pos + len];
        self.pos += len;
        Ok(out)
    }

    fn string(&mut self) -> Result<&'a str, DecodeError> {
        let at = self.pos;
        let bytes = self.bytes()?;
        std::str::from_utf8(bytes).map_err(|e| DecodeError {
            buffer: self.buffer,
            offset: at,
            reason: format!("string is not UTF-8: {e}"),
        })
    }

    fn schema(&mut self) -> Result<PayloadSchema, DecodeError> {
        let at = self.pos;
        let index = self.u32()?;
        PayloadSchema::from_index(index).ok_or_else(|| {
            self.pos = at;
            self.error(format!("unknown schema variant {index}"))
        })
    }

    fn end(&self) -> Result<(), DecodeError> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(self.error(format!("{} trailing bytes", self.bytes.len() - self.pos)))
        }
    }
}

/// `TopicMetadata { stream, topic }`.
pub fn topic_metadata(bytes: &[u8]) -> Result<(String, String), DecodeError> {
    let mut r = Reader::new("topic metadata", bytes);
    let stream = r.string()?.to_string();
    let topic = r.string()?.to_string();
    r.end()?;
    Ok((stream, topic))
}

/// `MessagesMetadata { partition_id, current_offset, schema }`.
pub fn messages_metadata(bytes: &[u8]) -> Result<MessagesMetadata, DecodeError> {
    let mut r = Reader::new("messages metadata", bytes);
    let partition_id = r.u32()?;
    let current_offset = r.u64()?;
    let schema = r.schema()?;
    r.end()?;
    Ok(MessagesMetadata {
        partition_id,
        current_offset,
        schema,
    })
}

/// One header key or value: `{ kind, value: base64 text }`.
fn header_part(r: &mut Reader<'_>) -> Result<(HeaderKind, Vec<u8>), DecodeError> {
    let at = r.pos;
    let kind_index = r.u32()?;
    let kind = HeaderKind::from_index(kind_index).ok_or_else(|| DecodeError {
        buffer: r.buffer,
        offset: at,
        reason: format!("unknown header kind {kind_index}"),
    })?;
    let text_at = r.pos;
    let text = r.string()?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| DecodeError {
            buffer: r.buffer,
            offset: text_at,
            reason: format!("header value is not base64: {e}"),
        })?;
    Ok((kind, raw))
}

/// A message's `headers` bytes: empty, or a postcard map of key → value.
pub fn headers(bytes: &[u8]) -> Result<Vec<Header>, DecodeError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader::new("headers", bytes);
    let count = r.len(4)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let (_, key) = header_part(&mut r)?;
        let (kind, value) = header_part(&mut r)?;
        out.push(Header {
            key: String::from_utf8_lossy(&key).into_owned(),
            kind,
            value,
        });
    }
    r.end()?;
    Ok(out)
}

/// `RawMessages { schema, messages }` into a batch from `source`.
pub fn raw_messages(bytes: &[u8], source: Source) -> Result<(PayloadSchema, MessageBatch), DecodeError> {
    let mut r = Reader::new("messages", bytes);
    let schema = r.schema()?;
    // Each message takes at least 7 bytes (five varints and two lengths).
    let count = r.len(7)?;
    let mut batch = MessageBatch::with_capacity(source, count, bytes.len());
    for _ in 0..count {
        let id = r.u128()?;
        let offset = r.u64()?;
        let _checksum = r.u64()?;
        let timestamp = r.u64()?;
        let _origin_timestamp = r.u64()?;
        let headers_at = r.pos;
        let header_bytes = r.bytes()?;
        let headers = headers(header_bytes).map_err(|e| DecodeError {
            buffer: "messages",
            offset: headers_at + e.offset,
            reason: format!("headers: {}", e.reason),
        })?;
        let payload = r.bytes()?;
        batch
            .push(offset, id, timestamp, payload, headers)
            .map_err(|BatchTooLarge| r.error("payloads exceed 4 GiB"))?;
    }
    r.end()?;
    Ok((schema, batch))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn topic_metadata_vector() {
        assert_eq!(
            topic_metadata(&hex("03617070066576656e7473")).unwrap(),
            ("app".into(), "events".into())
        );
    }

    #[test]
    fn messages_metadata_vector() {
        let m = messages_metadata(&hex("03e80700")).unwrap();
        assert_eq!(
            m,
            MessagesMetadata {
                partition_id: 3,
                current_offset: 1000,
                schema: PayloadSchema::Json
            }
        );
    }

    #[test]
    fn string_headers_vector() {
        let h = headers(&hex("01010461773d3d010464673d3d")).unwrap();
        assert_eq!(
            h,
            vec![Header {
                key: "k".into(),
                kind: HeaderKind::String,
                value: b"v".to_vec()
            }]
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]
        /// The whole-word varint reader gives what the bytewise one gives
        /// (value, error and position), for any width and any encoding:
        /// 0 to 11 continuation bytes (low bits weighted to none and all
        /// set), then a last byte (weighted to one bit set: where a width
        /// ends; it may continue into nothing).
        #[test]
        fn varints_read_at_once_equal_varints_read_bytewise(
            continued in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::Just(0u8),
                    proptest::prelude::Just(0x7f),
                    proptest::prelude::any::<u8>(),
                ],
                0..12,
            ),
            last in proptest::prop_oneof![
                proptest::prelude::Just(0u8),
                proptest::prelude::Just(0x7f),
                proptest::strategy::Strategy::prop_map(0..8u32, |bit| 1u8 << bit),
                proptest::prelude::any::<u8>(),
            ],
            bits in proptest::prop_oneof![
                proptest::prelude::Just(32u32),
                proptest::prelude::Just(64u32),
                proptest::prelude::Just(128u32),
            ],
        ) {
            let mut bytes: Vec<u8> = continued.iter().map(|b| b | 0x80).collect();
            bytes.push(last);
            let (mut fast, mut slow) = (Reader::new("t", &bytes), Reader::new("t", &bytes));
            proptest::prop_assert_eq!(fast.varint(bits), slow.varint_bytewise(bits));
            proptest::prop_assert_eq!(fast.pos, slow.pos);
        }
    }

    #[test]
    fn varints_at_the_edges_of_their_widths() {
        let read = |bytes: &[u8], bits| Reader::new("t", bytes).varint(bits);
        let max64 = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(read(&max64, 64), Ok(u64::MAX as u128));
        assert!(read(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03], 64).is_err());
        assert_eq!(
            read(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03], 128),
            Ok((u64::MAX as u128) | (1 << 64))
        );
        assert_eq!(read(&[0xff, 0xff, 0xff, 0xff, 0x0f], 32), Ok(u32::MAX as u128));
        assert!(read(&[0xff, 0xff, 0xff, 0xff, 0x1f], 32).is_err());
        assert!(
            read(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00], 32).is_err(),
            "a sixth byte for a u32"
        );
        assert!(read(&[0x80, 0x80], 64).is_err(), "truncated");
    }

    #[test]
    fn raw_messages_vector() {
        let (schema, batch) = raw_messages(
            &hex("000101020003030d01010461773d3d010464673d3d027b7d"),
            Source::default(),
        )
        .unwrap();
        assert_eq!(schema, PayloadSchema::Json);
        assert_eq!(batch.len(), 1);
        let m = batch.get(0);
        assert_eq!((m.id, m.offset, m.timestamp, m.payload), (1, 2, 3, &b"{}"[..]));
        assert_eq!(m.headers[0].key, "k");
    }

    #[test]
    fn typed_headers_vector() {
        let h = headers(&hex(concat!(
            "0501085a6d78685a773d3d020441513d3d0104626d566e05082b2f2f2f2f773d3d010463476b3d0e0c414141414141",
            "41414445413d0104633256780b0c4b674141414141414141413d01086447567559573530010859574e745a513d3d"
        )))
        .unwrap();
        let find = |k: &str| h.iter().find(|x| x.key == k).unwrap_or_else(|| panic!("{k}"));
        assert_eq!(
            (find("flag").kind, find("flag").value.clone()),
            (HeaderKind::Bool, vec![1])
        );
        assert_eq!(find("neg").kind, HeaderKind::Int32);
        assert_eq!(i32::from_le_bytes(find("neg").value[..].try_into().unwrap()), -5);
        assert_eq!(find("pi").kind, HeaderKind::Float64);
        assert_eq!(f64::from_le_bytes(find("pi").value[..].try_into().unwrap()), 3.5);
        assert_eq!(find("seq").kind, HeaderKind::Uint64);
        assert_eq!(u64::from_le_bytes(find("seq").value[..].try_into().unwrap()), 42);
        assert_eq!(
            (find("tenant").kind, find("tenant").value.clone()),
            (HeaderKind::String, b"acme".to_vec())
        );
    }

    #[test]
    fn every_header_kind_decodes() {
        for kind in HeaderKind::ALL {
            let value = base64::engine::general_purpose::STANDARD.encode([7u8]);
            let mut bytes = vec![1, 1, 4];
            bytes.extend_from_slice(b"aw=="); // key "k"
            bytes.push(kind as u8);
            bytes.push(value.len() as u8);
            bytes.extend_from_slice(value.as_bytes());
            let h = headers(&bytes).unwrap();
            assert_eq!((h[0].kind, h[0].value.clone()), (kind, vec![7]));
        }
    }

    #[test]
    fn truncated_garbage_and_huge_lengths_are_errors() {
        let good = hex("000101020003030d01010461773d3d010464673d3d027b7d");
        for cut in 0..good.len() {
            assert!(
                raw_messages(&good[..cut], Source::default()).is_err(),
                "cut at {cut}"
            );
        }
        let err = raw_messages(&[0, 0xff, 0xff, 0xff, 0xff, 0x0f], Source::default()).unwrap_err();
        assert!(err.reason.contains("exceeds"), "{err}");
        let err = topic_metadata(&[0xff; 20]).unwrap_err();
        assert!(err.reason.contains("overflows"), "{err}");
        let err = messages_metadata(&hex("03e8070009")).unwrap_err();
        assert!(err.reason.contains("trailing"), "{err}");
        let err = messages_metadata(&hex("03e80709")).unwrap_err();
        assert!(err.reason.contains("unknown schema variant 9"), "{err}");
    }

    // The structured round trip (the test harness's encoder → these
    // decoders) is the `runtime_buffers` fuzz target's.
    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..512)) {
                let _ = topic_metadata(&input);
                let _ = messages_metadata(&input);
                let _ = headers(&input);
                let _ = raw_messages(&input, Source::default());
            }

        }
    }
}
