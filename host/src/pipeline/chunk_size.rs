//! How many messages one chunk of a batch holds: one transform call, one
//! run of the JSON mapping, one Arrow batch handed to the writer.
//!
//! Each chunk costs the same however small it is (a task on the blocking
//! pool, a transform call, an Arrow batch that fluss-rs encodes, compresses
//! and sends on its own), so a large batch of small messages goes faster in
//! fewer, larger chunks (the consume bench measures it: docs/benchmarks.md).
//! Chunks stay small enough to be made on every core at once,
//! and a chunk of large messages stays at the 500 messages it always had.

use crate::config::defaults::BATCH_SIZE;

/// About the most payload bytes [`ChunkSize::Auto`] puts in one chunk
/// before it would make fewer than 500 messages a chunk.
const CHUNK_PAYLOAD_BYTES: usize = 1 << 20;

/// The size of a batch: its messages and the bytes of their payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchShape {
    /// Messages in the batch.
    pub messages: usize,
    /// Bytes of their payloads, all together.
    pub payload_bytes: usize,
}

/// `batch_size` as the config gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkSize {
    /// `batch_size` is set: every chunk holds this many messages, the last
    /// one what is left.
    Fixed(usize),
    /// `batch_size` is left out: chunks of 500 messages, or larger ones for
    /// a large batch of small messages: at most ~1 MiB of payloads each, at
    /// least as many chunks as are made at once, and no more messages than
    /// the stage takes in one call (a transform's pace); sizes evened out.
    Auto,
}

impl From<Option<usize>> for ChunkSize {
    fn from(batch_size: Option<usize>) -> Self {
        batch_size.map_or(ChunkSize::Auto, ChunkSize::Fixed)
    }
}

impl ChunkSize {
    /// Messages per chunk for `batch`, `at_once` chunks being made at once
    /// by a stage that takes at most `per_call` messages in one call
    /// (`None`: no such limit). Always at least 1; `Auto` never goes under
    /// 500.
    pub(crate) fn for_batch(self, batch: BatchShape, at_once: usize, per_call: Option<usize>) -> usize {
        let BatchShape {
            messages,
            payload_bytes,
        } = batch;
        let size = match self {
            ChunkSize::Fixed(size) => return size.max(1),
            ChunkSize::Auto if messages <= BATCH_SIZE => return BATCH_SIZE,
            ChunkSize::Auto => {
                let per_core = messages.div_ceil(at_once.max(1));
                let by_bytes = match payload_bytes {
                    0 => messages,
                    bytes => (CHUNK_PAYLOAD_BYTES as u128 * messages as u128 / bytes as u128) as usize,
                };
                per_core
                    .min(by_bytes)
                    .min(per_call.unwrap_or(usize::MAX))
                    .max(BATCH_SIZE)
            }
        };
        // As many chunks as that size needs, of even sizes.
        messages.div_ceil(messages.div_ceil(size))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(messages: usize, payload_bytes: usize) -> BatchShape {
        BatchShape {
            messages,
            payload_bytes,
        }
    }

    fn chunks(size: usize, messages: usize) -> Vec<usize> {
        (0..messages)
            .step_by(size)
            .map(|start| size.min(messages - start))
            .collect()
    }

    #[test]
    fn a_set_batch_size_is_every_chunk_but_the_last() {
        let fixed = ChunkSize::Fixed(50);
        assert_eq!(fixed.for_batch(shape(10_000, 1_100_000), 2, None), 50);
        assert_eq!(fixed.for_batch(shape(7, 7), 4, None), 50);
        assert_eq!(
            ChunkSize::Fixed(0).for_batch(shape(10, 10), 2, None),
            1,
            "never zero"
        );
        assert_eq!(ChunkSize::from(Some(250)), ChunkSize::Fixed(250));
        assert_eq!(ChunkSize::from(None), ChunkSize::Auto);
    }

    #[test]
    fn auto_keeps_500_message_chunks_for_small_batches_and_large_messages() {
        let auto = ChunkSize::Auto;
        assert_eq!(
            auto.for_batch(shape(1_000, 110_000), 2, None),
            500,
            "1,000 small messages, 2 cores"
        );
        assert_eq!(
            auto.for_batch(shape(1_000, 110_000), 4, None),
            500,
            "never under 500"
        );
        assert_eq!(auto.for_batch(shape(300, 33_000), 2, None), 500, "one chunk");
        assert_eq!(
            auto.for_batch(shape(10_000, 20_480_000), 2, None),
            500,
            "2 KB messages: ~1 MiB is 500 already"
        );
        assert_eq!(
            auto.for_batch(shape(10_000, 100_000_000), 2, None),
            500,
            "10 KB messages: 500 even past 1 MiB"
        );
    }

    #[test]
    fn auto_makes_fewer_larger_chunks_of_many_small_messages() {
        let auto = ChunkSize::Auto;
        let small = auto.for_batch(shape(10_000, 1_100_000), 2, None);
        assert_eq!(chunks(small, 10_000), [5_000, 5_000], "~110 B: one chunk a core");
        let quad = auto.for_batch(shape(10_000, 1_100_000), 4, None);
        assert_eq!(chunks(quad, 10_000), [2_500; 4], "four cores");
        let medium = auto.for_batch(shape(10_000, 4_000_000), 2, None);
        assert_eq!(
            chunks(medium, 10_000),
            [2_500; 4],
            "~400 B: at most ~1 MiB a chunk"
        );
        let uneven = auto.for_batch(shape(1_300, 143_000), 4, None);
        assert_eq!(
            chunks(uneven, 1_300),
            [434, 434, 432],
            "evened out, not 500 + 500 + 300"
        );
        assert_eq!(auto.for_batch(shape(10_000, 0), 2, None), 5_000, "empty payloads");
    }

    #[test]
    fn auto_keeps_a_transforms_calls_to_its_pace() {
        let auto = ChunkSize::Auto;
        let small = shape(10_000, 1_100_000);
        assert_eq!(auto.for_batch(small, 2, Some(100_000)), 5_000, "a fast guest");
        let slow = auto.for_batch(small, 2, Some(1_200));
        assert_eq!(slow, 1_112, "9 chunks of at most 1,200, evened out");
        assert_eq!(auto.for_batch(small, 2, Some(10)), 500, "never under 500");
        let fixed = ChunkSize::Fixed(5_000);
        assert_eq!(
            fixed.for_batch(small, 2, Some(10)),
            5_000,
            "a set batch_size is kept"
        );
    }
}
