//! One spooled batch as bytes on disk, framed so that a torn or damaged
//! record is recognised, never replayed as garbage:
//!
//! ```text
//! "FSP1" | payload length (u32 LE) | CRC-32 of the payload (u32 LE) | payload
//! ```
//!
//! The payload holds when it was spooled, the payload schema, the batch's
//! messages (offsets, ids, timestamps, headers, payloads) and, when a
//! transform made the rows, those rows exactly (so that a replay writes what
//! the first attempt would have, whatever version of the transform is in
//! force by then). Rows the JSON mapping or the Arrow IPC decoding make are
//! made again from the messages: they depend on the config alone.

use crate::batch::{Header, HeaderKind, MessageBatch, PayloadSchema, Source};
use crate::rows::DeadLetterKind;
use crate::rows::{MessageOutcome, RowBatch, TransformOutput};

const MAGIC: &[u8; 4] = b"FSP1";

/// Bytes before the payload.
pub(crate) const HEADER_LEN: usize = 12;

/// A batch as the spool keeps it.
#[derive(Debug, Clone)]
pub(crate) struct SpooledBatch {
    /// When it was spooled, microseconds since the epoch.
    pub spooled_at_micros: u64,
    /// The runtime's payload schema.
    pub schema: PayloadSchema,
    /// The messages.
    pub batch: MessageBatch,
    /// The rows a transform made of them, with the kind of its dead letters.
    pub rows: Option<(TransformOutput, DeadLetterKind)>,
    /// How many columns the sink's table had when the transform made the
    /// rows: a replay after columns were added gives its rows NULL in them
    /// (`None`: no rows, or a record written before this was kept).
    pub rows_made_for: Option<u32>,
}

/// Why bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RecordError {
    /// Fewer bytes than the frame says: a write cut short (a crash).
    #[error("torn record: {have} bytes of {need}")]
    Torn {
        /// Bytes present.
        have: usize,
        /// Bytes the frame needs.
        need: usize,
    },
    /// The frame or its contents are damaged.
    #[error("corrupt record: {0}")]
    Corrupt(String),
}

impl SpooledBatch {
    /// Appends `next` (the batch queued right behind this one) so that both
    /// are replayed as one write; `false`, and this one unchanged, when they
    /// cannot be one: another source or payload schema, rows made by a
    /// transform in one and not the other, or too large together.
    pub(crate) fn absorb(&mut self, next: &SpooledBatch) -> bool {
        let rows_match = match (&self.rows, &next.rows) {
            (None, None) => true,
            (Some((_, kind)), Some((_, next_kind))) => kind == next_kind,
            _ => false,
        };
        if !rows_match
            || self.rows_made_for != next.rows_made_for
            || self.schema != next.schema
            || self.batch.source != next.batch.source
        {
            return false;
        }
        if self.batch.extend_from(&next.batch).is_err() {
            return false;
        }
        if let (Some((rows, _)), Some((next_rows, _))) = (&mut self.rows, &next.rows) {
            rows.append_copy(next_rows);
        }
        true
    }

    /// The framed bytes of this record.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Encoder(Vec::with_capacity(
            HEADER_LEN + 64 + self.batch.payloads.len() + self.batch.len() * 48,
        ));
        out.0.extend_from_slice(MAGIC);
        out.0.extend_from_slice(&[0; 8]);
        out.u64(self.spooled_at_micros);
        out.u8(self.schema.index());
        let b = &self.batch;
        out.str(&b.source.stream);
        out.str(&b.source.topic);
        out.u32(b.source.partition);
        out.u32(b.len() as u32);
        for m in b.iter() {
            out.u64(m.offset);
            out.u64((m.id >> 64) as u64);
            out.u64(m.id as u64);
            out.u64(m.timestamp);
            out.bytes(m.payload);
            out.u32(m.headers.len() as u32);
            for h in m.headers {
                out.str(&h.key);
                out.u8(h.kind as u8);
                out.bytes(&h.value);
            }
        }
        match &self.rows {
            None => out.u8(0),
            Some((output, kind)) => {
                match self.rows_made_for {
                    Some(columns) => {
                        out.u8(2);
                        out.u32(columns);
                    }
                    None => out.u8(1),
                }
                out.u8(kind_tag(*kind));
                out.u32(output.outcomes.len() as u32);
                for outcome in &output.outcomes {
                    match outcome {
                        MessageOutcome::Rows(n) => {
                            out.u8(0);
                            out.u32(*n);
                        }
                        MessageOutcome::DeadLetter(reason) => {
                            out.u8(1);
                            out.str(reason);
                        }
                    }
                }
                out.u32(output.rows.tables().len() as u32);
                for t in output.rows.tables() {
                    out.str(t);
                }
                out.u32(output.rows.len() as u32);
                for (message, bytes) in output.rows.encoded_rows() {
                    out.u32(message);
                    out.bytes(bytes);
                }
            }
        }
        let payload_len = (out.0.len() - HEADER_LEN) as u32;
        let crc = crc32fast::hash(&out.0[HEADER_LEN..]);
        out.0[4..8].copy_from_slice(&payload_len.to_le_bytes());
        out.0[8..12].copy_from_slice(&crc.to_le_bytes());
        out.0
    }

    /// The record in `bytes` (a whole file).
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        if bytes.len() < HEADER_LEN {
            return Err(RecordError::Torn {
                have: bytes.len(),
                need: HEADER_LEN,
            });
        }
        if &bytes[..4] != MAGIC {
            return Err(RecordError::Corrupt("it does not start with FSP1".into()));
        }
        let len = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        let need = HEADER_LEN + len;
        if bytes.len() < need {
            return Err(RecordError::Torn {
                have: bytes.len(),
                need,
            });
        }
        if bytes.len() > need {
            return Err(RecordError::Corrupt(format!(
                "{} bytes after the record's end",
                bytes.len() - need
            )));
        }
        let payload = &bytes[HEADER_LEN..];
        if crc32fast::hash(payload) != crc {
            return Err(RecordError::Corrupt("its checksum does not match".into()));
        }
        let mut d = Decoder(payload);
        let record = d.record().map_err(RecordError::Corrupt)?;
        if !d.0.is_empty() {
            return Err(RecordError::Corrupt(format!("{} bytes left over", d.0.len())));
        }
        Ok(record)
    }
}

struct Encoder(Vec<u8>);

impl Encoder {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
    fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
}

struct Decoder<'a>(&'a [u8]);

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("{n} bytes needed, {} left", self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn str(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|e| format!("text is not UTF-8: {e}"))
    }
    /// A count of items that each take at least `min_bytes`, checked
    /// against what is left (so that a damaged count allocates nothing).
    fn count(&mut self, min_bytes: usize) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_bytes) > self.0.len() {
            return Err(format!(
                "a count of {n} does not fit the {} bytes left",
                self.0.len()
            ));
        }
        Ok(n)
    }

    fn record(&mut self) -> Result<SpooledBatch, String> {
        let spooled_at_micros = self.u64()?;
        let tag = self.u8()?;
        let schema = PayloadSchema::from_index(u32::from(tag))
            .ok_or_else(|| format!("payload schema {tag} is unknown"))?;
        let source = Source {
            stream: self.str()?,
            topic: self.str()?,
            partition: self.u32()?,
        };
        let messages = self.count(40)?;
        let mut batch = MessageBatch::with_capacity(source, messages, 0);
        for _ in 0..messages {
            let offset = self.u64()?;
            let id = ((self.u64()? as u128) << 64) | self.u64()? as u128;
            let timestamp = self.u64()?;
            let payload = self.bytes()?;
            let header_count = self.count(9)?;
            let mut headers = Vec::with_capacity(header_count);
            for _ in 0..header_count {
                let key = self.str()?;
                let kind = self.u8()?;
                let kind = HeaderKind::from_index(kind as u32)
                    .ok_or_else(|| format!("header kind {kind} is unknown"))?;
                headers.push(Header {
                    key,
                    kind,
                    value: self.bytes()?.to_vec(),
                });
            }
            batch
                .push(offset, id, timestamp, payload, headers)
                .map_err(|e| e.to_string())?;
        }
        let (rows, rows_made_for) = match self.u8()? {
            0 => (None, None),
            1 => (Some(self.output(messages)?), None),
            2 => {
                let columns = self.u32()?;
                (Some(self.output(messages)?), Some(columns))
            }
            tag => return Err(format!("rows tag {tag} is unknown")),
        };
        Ok(SpooledBatch {
            spooled_at_micros,
            schema,
            batch,
            rows,
            rows_made_for,
        })
    }

    fn output(&mut self, messages: usize) -> Result<(TransformOutput, DeadLetterKind), String> {
        let kind = kind_of(self.u8()?)?;
        let count = self.count(5)?;
        if count != messages {
            return Err(format!("{count} outcomes for {messages} messages"));
        }
        let mut outcomes = Vec::with_capacity(count);
        for _ in 0..count {
            outcomes.push(match self.u8()? {
                0 => MessageOutcome::Rows(self.u32()?),
                1 => MessageOutcome::DeadLetter(self.str()?),
                tag => return Err(format!("outcome tag {tag} is unknown")),
            });
        }
        let table_count = self.count(4)?;
        let tables = (0..table_count)
            .map(|_| self.str())
            .collect::<Result<Vec<_>, _>>()?;
        let row_count = self.count(8)?;
        let mut counts = vec![0u32; messages];
        let mut bytes = Vec::new();
        let mut last = 0u32;
        for _ in 0..row_count {
            let message = self.u32()?;
            if message < last || message as usize >= messages {
                return Err(format!("row of message {message} out of order or out of range"));
            }
            last = message;
            counts[message as usize] += 1;
            bytes.extend_from_slice(self.bytes()?);
        }
        let rows = RowBatch::from_encoded(bytes, tables, &counts)?;
        Ok((TransformOutput { outcomes, rows }, kind))
    }
}

fn kind_tag(kind: DeadLetterKind) -> u8 {
    DeadLetterKind::ALL
        .iter()
        .position(|k| *k == kind)
        .expect("every kind is in ALL") as u8
}

fn kind_of(tag: u8) -> Result<DeadLetterKind, String> {
    DeadLetterKind::ALL
        .get(tag as usize)
        .copied()
        .ok_or_else(|| format!("dead-letter kind {tag} is unknown"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluss_row_codec::{RowKind, RowsBuilder};

    fn batch() -> MessageBatch {
        let mut b = MessageBatch::new(Source {
            stream: "app".into(),
            topic: "events".into(),
            partition: 3,
        });
        for i in 0..4u64 {
            let headers = (0..i % 2).map(|_| Header {
                key: "op".into(),
                kind: HeaderKind::String,
                value: b"delete".to_vec(),
            });
            b.push(
                100 + i,
                u128::MAX - i as u128,
                7 + i,
                format!("{{\"id\":{i}}}").as_bytes(),
                headers,
            )
            .unwrap();
        }
        b
    }

    fn output() -> TransformOutput {
        // Message 0: two rows (one routed), 1: filtered, 2: dead-lettered, 3: one row.
        let mut rows = RowsBuilder::new();
        for (table, v) in [(0u16, 1i64), (1, 2), (0, 4)] {
            rows.begin_row(RowKind::Append, table);
            rows.bigint(v);
            rows.end_row();
        }
        TransformOutput {
            outcomes: vec![
                MessageOutcome::Rows(2),
                MessageOutcome::Rows(0),
                MessageOutcome::DeadLetter("no tenant".into()),
                MessageOutcome::Rows(1),
            ],
            rows: RowBatch::from_encoded(rows.into_bytes(), vec!["db.acme".into()], &[2, 0, 0, 1]).unwrap(),
        }
    }

    fn record() -> SpooledBatch {
        SpooledBatch {
            spooled_at_micros: 1_700_000_000_000_000,
            schema: PayloadSchema::Json,
            batch: batch(),
            rows: Some((output(), DeadLetterKind::Transform)),
            rows_made_for: Some(1),
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let r = record();
        let back = SpooledBatch::decode(&r.encode()).unwrap();
        assert_eq!(back.batch, r.batch);
        assert_eq!(back.schema, PayloadSchema::Json);
        assert_eq!(back.spooled_at_micros, r.spooled_at_micros);
        let (out, kind) = back.rows.unwrap();
        let (want, _) = r.rows.unwrap();
        assert_eq!(kind, DeadLetterKind::Transform);
        assert_eq!(out.outcomes, want.outcomes);
        assert_eq!(out.rows.tables(), want.rows.tables());
        let rows = |o: &TransformOutput| -> Vec<(u32, u16, Vec<u8>)> {
            o.rows.encoded_rows().map(|(m, b)| (m, 0, b.to_vec())).collect()
        };
        assert_eq!(rows(&out), rows(&want));
        let entries: Vec<_> = out.rows.iter().map(|(e, _)| (e.message, e.table)).collect();
        assert_eq!(entries, vec![(0, 0), (0, 1), (3, 0)]);
        assert_eq!(back.rows_made_for, Some(1));
    }

    #[test]
    fn a_record_written_before_the_rows_width_was_kept_reads_back_without_it() {
        let mut r = record();
        r.rows_made_for = None;
        let back = SpooledBatch::decode(&r.encode()).unwrap();
        assert_eq!(back.rows_made_for, None);
        assert_eq!(back.rows.unwrap().0.outcomes, r.rows.unwrap().0.outcomes);
    }

    /// Each row's message, table name and encoded bytes.
    fn row_shapes(o: &TransformOutput) -> Vec<(u32, Option<String>, Vec<u8>)> {
        o.rows
            .encoded_rows()
            .zip(o.rows.iter())
            .map(|((m, bytes), (e, _))| (m, o.rows.table_name(e.table).map(str::to_string), bytes.to_vec()))
            .collect()
    }

    #[test]
    fn a_record_absorbs_the_next_of_its_source_with_its_rows_after_its_own() {
        let mut joined = record();
        assert!(joined.absorb(&record()));
        assert_eq!(joined.batch.len(), 8);
        let offsets: Vec<u64> = joined.batch.iter().map(|m| m.offset).collect();
        assert_eq!(offsets, [100, 101, 102, 103, 100, 101, 102, 103]);
        let (rows, kind) = joined.rows.as_ref().unwrap();
        assert_eq!(*kind, DeadLetterKind::Transform);
        assert_eq!(rows.outcomes.len(), 8);
        assert_eq!(rows.counts(), (4, 2, 2));
        let shapes = row_shapes(rows);
        let messages: Vec<u32> = shapes.iter().map(|r| r.0).collect();
        assert_eq!(
            messages,
            [0, 0, 3, 4, 4, 7],
            "the second batch's rows follow, shifted by 4"
        );
        let own = row_shapes(&output());
        assert_eq!(
            shapes[3..].iter().map(|r| (&r.1, &r.2)).collect::<Vec<_>>(),
            own.iter().map(|r| (&r.1, &r.2)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_record_refuses_a_batch_that_cannot_be_one_write_with_it() {
        let mut other_partition = record();
        other_partition.batch.source.partition = 4;
        let mut other_schema = record();
        other_schema.schema = PayloadSchema::Raw;
        let mut without_rows = record();
        without_rows.rows = None;
        let mut other_kind = record();
        other_kind.rows.as_mut().unwrap().1 = DeadLetterKind::Mapping;
        let mut other_width = record();
        other_width.rows_made_for = Some(2);
        for (case, next) in [
            ("rows made for another width of the table", other_width),
            ("another partition", other_partition),
            ("another payload schema", other_schema),
            ("no transform rows", without_rows),
            ("another dead-letter kind", other_kind),
        ] {
            let mut first = record();
            assert!(!first.absorb(&next), "{case}");
            assert_eq!(first.batch, record().batch, "{case}: left as it was");
            assert_eq!(first.rows.unwrap().0.outcomes.len(), 4, "{case}");
        }
        let (mut plain, mut next) = (record(), record());
        (plain.rows, next.rows) = (None, None);
        assert!(plain.absorb(&next), "two batches without rows join");
        assert_eq!(plain.batch.len(), 8);
    }

    #[test]
    fn rows_dropped_by_a_check_are_not_spooled() {
        let mut r = record();
        let (out, _) = r.rows.as_mut().unwrap();
        out.outcomes[0] = MessageOutcome::DeadLetter("misfit".into());
        out.rows.retain_messages(|m| m != 0);
        let back = SpooledBatch::decode(&r.encode()).unwrap();
        let (out, _) = back.rows.unwrap();
        let entries: Vec<_> = out.rows.iter().map(|(e, _)| e.message).collect();
        assert_eq!(entries, vec![3]);
    }

    #[test]
    fn every_cut_of_a_record_is_torn_and_every_flipped_bit_is_corrupt() {
        let bytes = record().encode();
        for cut in 0..bytes.len() {
            match SpooledBatch::decode(&bytes[..cut]) {
                Err(RecordError::Torn { have, .. }) => assert_eq!(have, cut),
                other => panic!("a cut at {cut} must be torn: {other:?}"),
            }
        }
        for at in (0..bytes.len()).step_by(7) {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(
                SpooledBatch::decode(&damaged).is_err(),
                "a flipped bit at byte {at} was read as a record"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            SpooledBatch::decode(&longer),
            Err(RecordError::Corrupt(_))
        ));
    }

    #[test]
    fn a_record_without_rows_keeps_only_the_messages() {
        let r = SpooledBatch {
            rows: None,
            rows_made_for: None,
            schema: PayloadSchema::Raw,
            ..record()
        };
        let back = SpooledBatch::decode(&r.encode()).unwrap();
        assert!(back.rows.is_none());
        assert_eq!(back.schema, PayloadSchema::Raw);
        assert_eq!(back.batch.get(1).headers[0].value, b"delete");
    }
}
