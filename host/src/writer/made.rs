//! Chunks of a batch's rows as the writer takes them: in message order,
//! each made elsewhere (on the blocking pool, by a transform) while the
//! writer sends the ones before it. The writer may hold small made rows
//! back to send them with the next ones, but only while those next ones
//! are already made: it never holds rows while it waits for a chunk, so a
//! slow chunk never keeps the rows before it from Fluss.
#![cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]

/// Chunks in message order that can tell whether the next one is made.
pub trait MadeChunks: Iterator {
    /// Whether the next chunk (or the end) can be taken without waiting
    /// for it to be made.
    fn next_is_made(&self) -> bool;
}

impl<C: MadeChunks + ?Sized> MadeChunks for &mut C {
    fn next_is_made(&self) -> bool {
        (**self).next_is_made()
    }
}

/// Chunks that never keep the writer waiting: all made beforehand, or made
/// on the writer's own thread as they are taken.
pub struct AllMade<I>(pub I);

impl<I: Iterator> Iterator for AllMade<I> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        self.0.next()
    }
}

impl<I: Iterator> MadeChunks for AllMade<I> {
    fn next_is_made(&self) -> bool {
        true
    }
}

/// `chunks` with `f` applied to each as it is taken.
pub(super) struct MapMade<C, F> {
    pub(super) chunks: C,
    pub(super) f: F,
}

impl<C: MadeChunks, T, F: FnMut(C::Item) -> T> Iterator for MapMade<C, F> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.chunks.next().map(&mut self.f)
    }
}

impl<C: MadeChunks, T, F: FnMut(C::Item) -> T> MadeChunks for MapMade<C, F> {
    fn next_is_made(&self) -> bool {
        self.chunks.next_is_made()
    }
}
