//! One deadline for a whole call (`open`, `consume`), handed down to every
//! RPC, retry, bisection and dead-letter write made for it, so that the call
//! returns when it runs out however many steps it has left.

use std::time::Duration;

use tokio::time::Instant;

/// The instant by which a call must be done, or none at all for the
/// spool's writes ([`Deadline::unbounded`]), which wait for Fluss as long
/// as it takes and retry transient failures without a cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline {
    at: Instant,
    bounded: bool,
}

/// How far away an unbounded deadline sits (tokio's timers take it).
const FAR_AWAY: Duration = Duration::from_secs(365 * 24 * 3600);

/// A step was cut off by its call's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the call's deadline passed")]
pub struct Expired;

impl Deadline {
    /// The deadline `budget` from now.
    pub fn after(budget: Duration) -> Self {
        Self {
            at: Instant::now() + budget,
            bounded: true,
        }
    }

    /// No deadline: a write that must not give up while Fluss is away (the
    /// spool's), ended only by its acknowledgement, a permanent refusal, or
    /// its task being stopped.
    pub fn unbounded() -> Self {
        Self {
            at: Instant::now() + FAR_AWAY,
            bounded: false,
        }
    }

    /// Whether this is a real deadline; retries are capped by `max_retries`
    /// only under one.
    pub fn is_bounded(self) -> bool {
        self.bounded
    }

    /// The instant itself.
    pub fn instant(self) -> Instant {
        self.at
    }

    /// Time left (zero once passed).
    pub fn remaining(self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Whether it has passed.
    pub fn expired(self) -> bool {
        Instant::now() >= self.at
    }

    /// The earlier of this deadline and `budget` from now (a real deadline).
    pub fn at_most(self, budget: Duration) -> Self {
        Self {
            at: self.at.min(Instant::now() + budget),
            bounded: true,
        }
    }

    /// Runs `step`, cut off when the deadline passes.
    pub async fn run<T>(self, step: impl Future<Output = T>) -> Result<T, Expired> {
        tokio::time::timeout_at(self.at, step).await.map_err(|_| Expired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Paused time: the clock moves only when every task waits, so the cut
    // is exactly at the deadline however busy the machine is.
    #[tokio::test(start_paused = true)]
    async fn a_step_that_hangs_is_cut_off_at_the_deadline() {
        let deadline = Deadline::after(Duration::from_millis(50));
        let started = Instant::now();
        let result = deadline.run(std::future::pending::<()>()).await;
        assert_eq!(result, Err(Expired));
        assert_eq!(started.elapsed(), Duration::from_millis(50));
        assert!(deadline.expired());
        assert_eq!(deadline.remaining(), Duration::ZERO);
    }

    #[tokio::test]
    async fn a_step_that_finishes_in_time_keeps_its_result() {
        let deadline = Deadline::after(Duration::from_secs(5));
        assert_eq!(deadline.run(async { 7 }).await, Ok(7));
        assert!(!deadline.expired());
        assert!(deadline.at_most(Duration::from_millis(1)) < deadline);
    }

    #[tokio::test]
    async fn an_unbounded_deadline_does_not_pass_but_its_steps_can_be_bounded() {
        let none = Deadline::unbounded();
        assert!(!none.is_bounded() && !none.expired());
        assert!(none.remaining() > Duration::from_secs(3600 * 24 * 300));
        let step = none.at_most(Duration::from_millis(20));
        assert!(step.is_bounded());
        assert_eq!(step.run(std::future::pending::<()>()).await, Err(Expired));
    }
}
