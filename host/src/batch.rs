//! A batch of Iggy messages as the pipeline carries it: column by column,
//! with every payload in one buffer, which is also how a transform gets it.

use std::ops::Range;

/// The runtime's payload schema for a stream (its `Schema`, same order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PayloadSchema {
    /// JSON (re-encoded compactly by the runtime).
    Json = 0,
    /// Raw bytes.
    Raw = 1,
    /// UTF-8 text.
    Text = 2,
    /// Protocol Buffers.
    Proto = 3,
    /// FlatBuffers.
    FlatBuffer = 4,
    /// Avro.
    Avro = 5,
}

impl PayloadSchema {
    /// Every schema, in index order.
    pub const ALL: [PayloadSchema; 6] = [
        Self::Json,
        Self::Raw,
        Self::Text,
        Self::Proto,
        Self::FlatBuffer,
        Self::Avro,
    ];

    /// The schema with the runtime's index `index`, if any.
    pub fn from_index(index: u32) -> Option<Self> {
        Self::ALL.get(index as usize).copied()
    }

    /// The runtime's index of this schema (also its tag in a spool record).
    pub fn index(self) -> u8 {
        self as u8
    }
}

/// The kind of an Iggy header value (the runtime's `HeaderKind`, same order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum HeaderKind {
    /// Raw bytes.
    Raw = 0,
    /// UTF-8 text.
    String = 1,
    /// One byte, 0 or 1.
    Bool = 2,
    /// i8
    Int8 = 3,
    /// i16 little-endian
    Int16 = 4,
    /// i32 little-endian
    Int32 = 5,
    /// i64 little-endian
    Int64 = 6,
    /// i128 little-endian
    Int128 = 7,
    /// u8
    Uint8 = 8,
    /// u16 little-endian
    Uint16 = 9,
    /// u32 little-endian
    Uint32 = 10,
    /// u64 little-endian
    Uint64 = 11,
    /// u128 little-endian
    Uint128 = 12,
    /// f32 little-endian
    Float32 = 13,
    /// f64 little-endian
    Float64 = 14,
}

impl HeaderKind {
    /// Every kind, in index order.
    pub const ALL: [HeaderKind; 15] = [
        Self::Raw,
        Self::String,
        Self::Bool,
        Self::Int8,
        Self::Int16,
        Self::Int32,
        Self::Int64,
        Self::Int128,
        Self::Uint8,
        Self::Uint16,
        Self::Uint32,
        Self::Uint64,
        Self::Uint128,
        Self::Float32,
        Self::Float64,
    ];

    /// The kind with this index, if any.
    pub fn from_index(index: u32) -> Option<Self> {
        Self::ALL.get(index as usize).copied()
    }
}

/// One header of a message: the key's text and the value's raw bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The key (its bytes as text; non-string keys are shown as their raw bytes).
    pub key: String,
    /// The kind of the value.
    pub kind: HeaderKind,
    /// The value's raw bytes.
    pub value: Vec<u8>,
}

/// Where a batch comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Source {
    /// Iggy stream name.
    pub stream: String,
    /// Iggy topic name.
    pub topic: String,
    /// Partition id.
    pub partition: u32,
}

/// A borrowed view of one message of a [`MessageBatch`].
#[derive(Debug, Clone, Copy)]
pub struct MessageRef<'a> {
    /// Offset in the partition.
    pub offset: u64,
    /// Iggy message id.
    pub id: u128,
    /// Server timestamp, microseconds since the epoch.
    pub timestamp: u64,
    /// The payload.
    pub payload: &'a [u8],
    /// The headers.
    pub headers: &'a [Header],
}

/// Messages stored by column; see the WIT record `batch`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessageBatch {
    /// Where the messages come from.
    pub source: Source,
    pub(crate) offsets: Vec<u64>,
    pub(crate) ids: Vec<(u64, u64)>,
    pub(crate) timestamps: Vec<u64>,
    pub(crate) payloads: Shared<u8>,
    pub(crate) payload_ends: Vec<u32>,
    pub(crate) headers: Shared<Header>,
    pub(crate) header_ends: Vec<u32>,
}

/// A run of items in a buffer that a batch and the batches sliced from it
/// share: slicing a batch into chunks copies none of its payloads or
/// headers, only their ends.
#[derive(Clone)]
pub(crate) struct Shared<T> {
    items: std::sync::Arc<Vec<T>>,
    range: Range<usize>,
}

impl<T> Shared<T> {
    fn with_capacity(capacity: usize) -> Self {
        Self {
            items: std::sync::Arc::new(Vec::with_capacity(capacity)),
            range: 0..0,
        }
    }

    /// Items `range` of these, sharing the buffer.
    fn slice(&self, range: Range<usize>) -> Self {
        Self {
            items: self.items.clone(),
            range: self.range.start + range.start..self.range.start + range.end,
        }
    }
}

impl<T: Clone> Shared<T> {
    /// The buffer, to append to: these items' own (copied first when it
    /// is shared or holds more than them).
    fn own(&mut self) -> &mut Vec<T> {
        let whole = self.range == (0..self.items.len());
        if !whole || std::sync::Arc::get_mut(&mut self.items).is_none() {
            self.items = std::sync::Arc::new(self[..].to_vec());
        }
        std::sync::Arc::get_mut(&mut self.items).expect("owned just now")
    }

    /// Appends `more`.
    fn extend_from_slice(&mut self, more: &[T]) {
        let items = self.own();
        items.extend_from_slice(more);
        self.range = 0..items.len();
    }

    /// Appends `more`, leaving the buffer as it is when there are none.
    fn extend(&mut self, more: impl IntoIterator<Item = T>) {
        let mut more = more.into_iter().peekable();
        if more.peek().is_some() {
            let items = self.own();
            items.extend(more);
            self.range = 0..items.len();
        }
    }
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.items[self.range.clone()]
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self[..].fmt(f)
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

impl<T: Eq> Eq for Shared<T> {}

/// A batch too large for the 32-bit offsets of the WIT layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("batch payloads exceed 4 GiB; use smaller batches")]
pub struct BatchTooLarge;

impl MessageBatch {
    /// An empty batch from `source`.
    pub fn new(source: Source) -> Self {
        Self {
            source,
            ..Self::default()
        }
    }

    /// An empty batch with room for `messages` messages and `payload_bytes` bytes.
    pub fn with_capacity(source: Source, messages: usize, payload_bytes: usize) -> Self {
        Self {
            source,
            offsets: Vec::with_capacity(messages),
            ids: Vec::with_capacity(messages),
            timestamps: Vec::with_capacity(messages),
            payloads: Shared::with_capacity(payload_bytes),
            payload_ends: Vec::with_capacity(messages),
            headers: Shared::default(),
            header_ends: Vec::with_capacity(messages),
        }
    }

    /// Appends one message.
    pub fn push(
        &mut self,
        offset: u64,
        id: u128,
        timestamp: u64,
        payload: &[u8],
        headers: impl IntoIterator<Item = Header>,
    ) -> Result<(), BatchTooLarge> {
        let end = u32::try_from(self.payloads.len() + payload.len()).map_err(|_| BatchTooLarge)?;
        self.payloads.extend_from_slice(payload);
        self.payload_ends.push(end);
        self.headers.extend(headers);
        self.header_ends
            .push(u32::try_from(self.headers.len()).map_err(|_| BatchTooLarge)?);
        self.offsets.push(offset);
        self.ids.push(((id >> 64) as u64, id as u64));
        self.timestamps.push(timestamp);
        Ok(())
    }

    /// Number of messages.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Bytes of all payloads together.
    pub fn payload_bytes(&self) -> usize {
        self.payloads.len()
    }

    /// True when there are no messages.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    fn payload_range(&self, i: usize) -> Range<usize> {
        let start = if i == 0 {
            0
        } else {
            self.payload_ends[i - 1] as usize
        };
        start..self.payload_ends[i] as usize
    }

    fn header_range(&self, i: usize) -> Range<usize> {
        let start = if i == 0 {
            0
        } else {
            self.header_ends[i - 1] as usize
        };
        start..self.header_ends[i] as usize
    }

    /// Message `i`.
    pub fn get(&self, i: usize) -> MessageRef<'_> {
        let (high, low) = self.ids[i];
        MessageRef {
            offset: self.offsets[i],
            id: ((high as u128) << 64) | low as u128,
            timestamp: self.timestamps[i],
            payload: &self.payloads[self.payload_range(i)],
            headers: &self.headers[self.header_range(i)],
        }
    }

    /// Every message, in order.
    pub fn iter(&self) -> impl Iterator<Item = MessageRef<'_>> {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Appends every message of `other` (the next messages of the same
    /// source); on `BatchTooLarge` this batch is left as it was.
    pub fn extend_from(&mut self, other: &MessageBatch) -> Result<(), BatchTooLarge> {
        if u32::try_from(self.payloads.len() + other.payloads.len()).is_err()
            || u32::try_from(self.headers.len() + other.headers.len()).is_err()
        {
            return Err(BatchTooLarge);
        }
        for m in other.iter() {
            self.push(m.offset, m.id, m.timestamp, m.payload, m.headers.iter().cloned())?;
        }
        Ok(())
    }

    /// Messages `range`: their payloads and headers shared with this
    /// batch, the rest copied.
    pub fn slice(&self, range: Range<usize>) -> MessageBatch {
        let before = |ends: &[u32], i: usize| if i == 0 { 0 } else { ends[i - 1] };
        let payload_base = before(&self.payload_ends, range.start);
        let payload_end = before(&self.payload_ends, range.end).max(payload_base);
        let header_base = before(&self.header_ends, range.start);
        let header_end = before(&self.header_ends, range.end).max(header_base);
        MessageBatch {
            source: self.source.clone(),
            offsets: self.offsets[range.clone()].to_vec(),
            ids: self.ids[range.clone()].to_vec(),
            timestamps: self.timestamps[range.clone()].to_vec(),
            payloads: self.payloads.slice(payload_base as usize..payload_end as usize),
            payload_ends: self.payload_ends[range.clone()]
                .iter()
                .map(|e| e - payload_base)
                .collect(),
            headers: self.headers.slice(header_base as usize..header_end as usize),
            header_ends: self.header_ends[range].iter().map(|e| e - header_base).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> MessageBatch {
        let mut b = MessageBatch::new(Source {
            stream: "s".into(),
            topic: "t".into(),
            partition: 1,
        });
        for i in 0..5u64 {
            let headers = (0..i % 2).map(|_| Header {
                key: format!("k{i}"),
                kind: HeaderKind::String,
                value: b"v".to_vec(),
            });
            b.push(
                i,
                u128::MAX - i as u128,
                100 + i,
                format!("p{i}").as_bytes(),
                headers,
            )
            .unwrap();
        }
        b
    }

    #[test]
    fn messages_read_back_as_pushed() {
        let b = batch();
        assert_eq!(b.len(), 5);
        let m = b.get(3);
        assert_eq!(
            (m.offset, m.id, m.timestamp, m.payload),
            (3, u128::MAX - 3, 103, &b"p3"[..])
        );
        assert_eq!(m.headers.len(), 1);
        assert_eq!(m.headers[0].key, "k3");
        assert!(b.get(2).headers.is_empty());
    }

    #[test]
    fn a_batch_extended_by_another_reads_as_both_in_order() {
        let (whole, mut joined) = (batch(), batch().slice(0..2));
        joined.extend_from(&whole.slice(2..5)).unwrap();
        assert_eq!(joined.len(), 5);
        for (a, b) in joined.iter().zip(whole.iter()) {
            assert_eq!(
                (a.offset, a.id, a.timestamp, a.payload, a.headers),
                (b.offset, b.id, b.timestamp, b.payload, b.headers)
            );
        }
    }

    #[test]
    fn slices_rebase_their_offsets() {
        let b = batch();
        for start in 0..=5 {
            for end in start..=5 {
                let s = b.slice(start..end);
                assert_eq!(s.len(), end - start);
                for (i, m) in s.iter().enumerate() {
                    let original = b.get(start + i);
                    assert_eq!(m.payload, original.payload);
                    assert_eq!(m.headers, original.headers);
                    assert_eq!(m.id, original.id);
                }
            }
        }
    }

    #[test]
    fn a_slice_shares_payloads_and_headers_and_either_side_grows_alone() {
        let mut b = batch();
        let mut s = b.slice(1..4);
        assert!(
            std::ptr::eq(s.get(0).payload.as_ptr(), b.get(1).payload.as_ptr()),
            "the slice's payloads are the batch's bytes, not a copy"
        );
        assert!(std::ptr::eq(&s.get(0).headers[0], &b.get(1).headers[0]));
        b.push(5, 5, 105, b"p5", []).unwrap();
        s.push(
            9,
            9,
            109,
            b"p9",
            [Header {
                key: "k9".into(),
                kind: HeaderKind::String,
                value: b"w".to_vec(),
            }],
        )
        .unwrap();
        let payloads = |b: &MessageBatch| b.iter().map(|m| m.payload.to_vec()).collect::<Vec<_>>();
        assert_eq!(payloads(&b), [&b"p0"[..], b"p1", b"p2", b"p3", b"p4", b"p5"]);
        assert_eq!(payloads(&s), [&b"p1"[..], b"p2", b"p3", b"p9"]);
        let keys = |b: &MessageBatch| {
            b.iter()
                .flat_map(|m| m.headers.iter().map(|h| h.key.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&b), ["k1", "k3"]);
        assert_eq!(keys(&s), ["k1", "k3", "k9"]);
        assert_eq!(b.slice(1..4), s.slice(0..3), "equal by content");
    }

    #[test]
    fn header_kinds_follow_the_runtime_order() {
        assert_eq!(HeaderKind::from_index(0), Some(HeaderKind::Raw));
        assert_eq!(HeaderKind::from_index(14), Some(HeaderKind::Float64));
        assert_eq!(HeaderKind::from_index(15), None);
        for (i, k) in HeaderKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i);
        }
    }
}
