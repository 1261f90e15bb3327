//! The clock and the crash points: what tests inject (a clock for expiry, hooks that kill the
//! process at a named point of the effectful path).

/// Seconds since the Unix epoch; injectable for expiry tests.
pub trait Clock: Send + Sync {
    fn now(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    }
}

/// Named points of the effectful path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// The intent is journaled (durable; for a read beside its intent,
    /// [`super::CoordinatorConfig::sole_spender`], submitted); the handler has not run.
    AfterIntent,
    /// The handler ran; nothing after it is durable.
    AfterHandler,
    /// Inside the final commit's transaction, before it commits (runs on the writer thread;
    /// reached again if the writer rebuilds the batch after another operation failed).
    MidCommit,
    /// The final commit is durable; the caller has not been answered.
    AfterCommit,
}

/// Observer of crash points; the default does nothing.
pub trait Hooks: Send + Sync {
    fn reached(&self, point: CrashPoint);
}

/// The hooks of a coordinator nobody observes.
pub(super) struct NoHooks;
impl Hooks for NoHooks {
    fn reached(&self, _: CrashPoint) {}
}
