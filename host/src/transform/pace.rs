//! How fast a transform's guest goes, in nanoseconds per message of its
//! recent calls, so that auto-sized chunks (`batch_size` left out) stay
//! well inside `transform.call_timeout`: a guest that takes 1 ms a message
//! gets calls of 500 messages, not of 5,000 that would run past a 2 s
//! deadline and be bisected.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The pace of one transform's calls; unmeasured until the first call.
#[derive(Debug, Default)]
pub(super) struct Pace {
    /// Nanoseconds per message; 0 before any call was measured.
    ns_per_message: AtomicU64,
}

impl Pace {
    /// Records a call of `messages` messages that took `took`. A slower
    /// pace is taken at once; a faster one a quarter of the way, so that
    /// one quick call does not undo what slow ones showed.
    pub(super) fn record(&self, messages: usize, took: Duration) {
        if messages == 0 {
            return;
        }
        let measured = (took.as_nanos() / messages as u128).clamp(1, u64::MAX as u128) as u64;
        let _ = self
            .ns_per_message
            .try_update(Ordering::Relaxed, Ordering::Relaxed, |known| {
                Some(match known {
                    0 => measured,
                    known if measured >= known => measured,
                    known => known - (known - measured) / 4,
                })
            });
    }

    /// Messages one call is expected to go through within `budget`, `None`
    /// before any call was measured.
    pub(super) fn messages_within(&self, budget: Duration) -> Option<usize> {
        match self.ns_per_message.load(Ordering::Relaxed) {
            0 => None,
            ns => Some((budget.as_nanos() / ns as u128).min(usize::MAX as u128) as usize),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUDGET: Duration = Duration::from_millis(500);

    #[test]
    fn unmeasured_until_the_first_call() {
        let pace = Pace::default();
        assert_eq!(pace.messages_within(BUDGET), None);
        pace.record(0, Duration::from_secs(1));
        assert_eq!(pace.messages_within(BUDGET), None, "an empty call says nothing");
        pace.record(1_000, Duration::from_millis(100));
        assert_eq!(pace.messages_within(BUDGET), Some(5_000));
    }

    #[test]
    fn slows_down_at_once_and_speeds_up_a_quarter_at_a_time() {
        let pace = Pace::default();
        pace.record(1_000, Duration::from_millis(10));
        assert_eq!(pace.messages_within(BUDGET), Some(50_000), "10 µs a message");
        pace.record(500, Duration::from_millis(500));
        assert_eq!(pace.messages_within(BUDGET), Some(500), "1 ms a message, at once");
        pace.record(1_000, Duration::from_millis(10));
        assert_eq!(
            pace.messages_within(BUDGET),
            Some(664),
            "1 ms - (1 ms - 10 µs) / 4 = 752.5 µs a message"
        );
    }
}
