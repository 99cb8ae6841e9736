//! One deadline for a whole call (`open`, `consume`), handed down to every
//! RPC, retry, bisection and dead-letter write made for it, so that the call
//! returns when it runs out however many steps it has left.

use std::time::Duration;

use tokio::time::Instant;

/// The instant by which a call must be done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline(Instant);

/// A step was cut off by its call's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the call's deadline passed")]
pub struct Expired;

impl Deadline {
    /// The deadline `budget` from now.
    pub fn after(budget: Duration) -> Self {
        Self(Instant::now() + budget)
    }

    /// The instant itself.
    pub fn instant(self) -> Instant {
        self.0
    }

    /// Time left (zero once passed).
    pub fn remaining(self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }

    /// Whether it has passed.
    pub fn expired(self) -> bool {
        Instant::now() >= self.0
    }

    /// The earlier of this deadline and `budget` from now.
    pub fn at_most(self, budget: Duration) -> Self {
        Self(self.0.min(Instant::now() + budget))
    }

    /// Runs `step`, cut off when the deadline passes.
    pub async fn run<T>(self, step: impl Future<Output = T>) -> Result<T, Expired> {
        tokio::time::timeout_at(self.0, step).await.map_err(|_| Expired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_step_that_hangs_is_cut_off_at_the_deadline() {
        let deadline = Deadline::after(Duration::from_millis(50));
        let started = std::time::Instant::now();
        let result = deadline.run(std::future::pending::<()>()).await;
        assert_eq!(result, Err(Expired));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(50) && took < Duration::from_secs(1),
            "{took:?}"
        );
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
}
