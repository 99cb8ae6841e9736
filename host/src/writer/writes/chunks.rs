//! Chunks of a batch's rows as the writer takes them: in message order,
//! each made elsewhere (on the blocking pool, by a transform) while the
//! writer sends the ones before it. The writer awaits each chunk; it may
//! hold small made rows back to send them with the next ones, but only
//! while those next ones are already made: it never holds rows while it
//! waits for a chunk, so a slow chunk never keeps the rows before it from
//! Fluss.
#![cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]

use std::future::Future;

/// Chunks in message order, each awaited until made, that can tell whether
/// the next one is made.
pub trait MadeChunks: Send {
    /// One chunk.
    type Chunk: Send;

    /// The next chunk once it is made; `None` at the end.
    fn next_chunk(&mut self) -> impl Future<Output = Option<Self::Chunk>> + Send;

    /// Whether the next chunk (or the end) can be taken without waiting
    /// for it to be made.
    fn next_is_made(&self) -> bool;
}

impl<C: MadeChunks + ?Sized> MadeChunks for &mut C {
    type Chunk = C::Chunk;

    fn next_chunk(&mut self) -> impl Future<Output = Option<C::Chunk>> + Send {
        (**self).next_chunk()
    }

    fn next_is_made(&self) -> bool {
        (**self).next_is_made()
    }
}

/// Chunks that never keep the writer waiting: all made beforehand, or made
/// on the writer's own thread as they are taken.
pub struct AllMade<I>(pub I);

impl<I> MadeChunks for AllMade<I>
where
    I: Iterator + Send,
    I::Item: Send,
{
    type Chunk = I::Item;

    async fn next_chunk(&mut self) -> Option<I::Item> {
        self.0.next()
    }

    fn next_is_made(&self) -> bool {
        true
    }
}

/// `chunks` with `f` applied to each as it is taken.
pub(in crate::writer) struct MapMade<C, F> {
    pub(in crate::writer) chunks: C,
    pub(in crate::writer) f: F,
}

impl<C, T, F> MadeChunks for MapMade<C, F>
where
    C: MadeChunks,
    T: Send,
    F: FnMut(C::Chunk) -> T + Send,
{
    type Chunk = T;

    async fn next_chunk(&mut self) -> Option<T> {
        let chunk = self.chunks.next_chunk().await?;
        Some((self.f)(chunk))
    }

    fn next_is_made(&self) -> bool {
        self.chunks.next_is_made()
    }
}
