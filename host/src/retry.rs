//! One retry policy for every write path: exponential backoff from
//! `retry_backoff` up to [`MAX_BACKOFF`], plus up to half of it again as
//! jitter, bounded by `max_retries` under a bounded deadline and always by
//! the deadline itself; each retry counted in the metrics and logged the
//! same way. The writer's row and batch writes and the spool's replays all
//! go through [`Retries`].

use std::fmt::Display;
use std::time::Duration;

use crate::deadline::Deadline;
use crate::metrics::InstanceMetrics;

/// The longest backoff between two attempts.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How often, and how far apart, a failed write is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// The first backoff (`retry_backoff`); it doubles with each retry.
    pub(crate) first_backoff: Duration,
    /// Retries allowed under a bounded deadline (`max_retries`); an
    /// unbounded one (the spool's) retries until the write succeeds.
    pub(crate) max_retries: u32,
}

/// How loud a retry's log line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loudness {
    /// At warn level: a retry an operator should see.
    Warn,
    /// At debug level: a retry that is part of normal work.
    Debug,
}

/// The retries of one write, as they are made.
pub(crate) struct Retries<'a> {
    policy: RetryPolicy,
    what: &'a str,
    deadline: Deadline,
    backoff: Duration,
    made: u32,
    metrics: Option<&'a InstanceMetrics>,
    loudness: Loudness,
}

impl<'a> Retries<'a> {
    /// No retry made yet of writing `what` (named in log lines), before `deadline`.
    pub(crate) fn new(policy: RetryPolicy, what: &'a str, deadline: Deadline) -> Self {
        Self {
            policy,
            what,
            deadline,
            backoff: policy.first_backoff,
            made: 0,
            metrics: None,
            loudness: Loudness::Warn,
        }
    }

    /// Counts the retried rows in `metrics`.
    pub(crate) fn counted_in(mut self, metrics: Option<&'a InstanceMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Logs retries at `loudness`.
    pub(crate) fn logged(mut self, loudness: Loudness) -> Self {
        self.loudness = loudness;
        self
    }

    /// Retries made so far.
    pub(crate) fn made(&self) -> u32 {
        self.made
    }

    /// Starts again from the first backoff (after a success).
    pub(crate) fn reset(&mut self) {
        self.backoff = self.policy.first_backoff;
        self.made = 0;
    }

    /// The wait before the next retry, counting it as made: the backoff
    /// plus up to half of it as jitter. `None` when no retry is left: past
    /// `max_retries` under a bounded deadline, or when the wait would reach
    /// the deadline.
    fn next_wait(&mut self) -> Option<Duration> {
        let wait = self.backoff + self.backoff.mul_f64(fastrand::f64() * 0.5);
        let capped = self.deadline.is_bounded() && self.made >= self.policy.max_retries;
        if capped || self.deadline.remaining() <= wait {
            return None;
        }
        self.made += 1;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Some(wait)
    }

    /// After `error` failed `rows` rows for a reason that may pass: logs and
    /// counts the retry and waits its backoff. `false` (at once) when no
    /// retry is left.
    pub(crate) async fn wait_after(&mut self, rows: usize, error: &(dyn Display + Sync)) -> bool {
        let Some(wait) = self.next_wait() else {
            return false;
        };
        if let Some(metrics) = self.metrics {
            metrics.retried(rows as u64);
        }
        let (what, attempt) = (self.what, self.made);
        match self.loudness {
            Loudness::Warn => {
                tracing::warn!(
                    attempt,
                    rows,
                    "transient error writing {what}, retrying in {wait:?}: {error}"
                )
            }
            Loudness::Debug => {
                tracing::debug!(
                    attempt,
                    rows,
                    "transient error writing {what}, retrying in {wait:?}: {error}"
                )
            }
        }
        tokio::time::sleep(wait).await;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            first_backoff: Duration::from_millis(100),
            max_retries,
        }
    }

    #[test]
    fn backoff_doubles_to_its_cap_with_at_most_half_again_as_jitter() {
        let mut retries = Retries::new(policy(100), "rows", Deadline::unbounded());
        let mut base = Duration::from_millis(100);
        for _ in 0..10 {
            let wait = retries.next_wait().expect("an unbounded deadline always retries");
            assert!(
                wait >= base && wait <= base.mul_f64(1.5),
                "{wait:?} for a {base:?} backoff"
            );
            base = (base * 2).min(MAX_BACKOFF);
        }
        assert_eq!(retries.made(), 10);
        retries.reset();
        let wait = retries.next_wait().unwrap();
        assert!(wait <= Duration::from_millis(150), "reset starts over: {wait:?}");
    }

    #[test]
    fn max_retries_bounds_a_bounded_deadline_only() {
        let mut bounded = Retries::new(policy(2), "rows", Deadline::after(Duration::from_secs(3600)));
        assert!(bounded.next_wait().is_some());
        assert!(bounded.next_wait().is_some());
        assert_eq!(bounded.next_wait(), None, "past max_retries");
        assert_eq!(bounded.made(), 2);
        let mut spool = Retries::new(policy(0), "rows", Deadline::unbounded());
        assert!(
            spool.next_wait().is_some(),
            "the spool retries until Fluss answers"
        );
    }

    #[test]
    fn no_retry_whose_wait_would_reach_the_deadline() {
        // The first wait is 100-150 ms (the backoff and its jitter).
        let mut retries = Retries::new(policy(10), "rows", Deadline::after(Duration::from_millis(90)));
        assert_eq!(retries.next_wait(), None, "no wait fits in 90 ms");
        assert_eq!(retries.made(), 0);
        let mut retries = Retries::new(policy(10), "rows", Deadline::after(Duration::from_millis(400)));
        let wait = retries.next_wait().expect("every first wait fits in 400 ms");
        assert!((Duration::from_millis(100)..=Duration::from_millis(150)).contains(&wait));
    }
}
