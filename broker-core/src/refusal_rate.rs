//! What refused and denied calls cost their caller: a token bucket per credential.
//!
//! A plan refusal or a broker denial runs nothing and spends no budget, but it is committed:
//! one log entry and a few objects each. Without a price, one session could write entries as
//! fast as the store commits them (a batch of thousands of refused calls is one request). So
//! each credential has a bucket of `burst` refusals that refills at `per_minute`; a refusal or
//! denial about to be committed takes one token, and without one the call is answered with
//! the capacity error (`host callback capacity exceeded`) and nothing is committed.
//!
//! Memory is bounded by the callers that refused recently: a bucket that has refilled is the
//! same as no bucket, so full buckets are dropped whenever the map grows past what it held at
//! the last sweep.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

/// Default sustained rate: one refusal or denial a second per credential.
pub const DEFAULT_PER_MINUTE: f64 = 60.0;
/// Default burst.
pub const DEFAULT_BURST: u32 = 60;
/// Buckets kept before the first sweep.
const SWEEP_FLOOR: usize = 1024;

/// The configured rate. `per_minute == 0` turns the limit off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RefusalRate {
    pub per_minute: f64,
    pub burst: u32,
}

impl Default for RefusalRate {
    fn default() -> Self {
        RefusalRate {
            per_minute: DEFAULT_PER_MINUTE,
            burst: DEFAULT_BURST,
        }
    }
}

/// Why a rate was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadRate {
    #[error("the refusal rate must be a finite number of refusals per minute, 0 or more (0 turns the limit off), not {0}")]
    Rate(f64),
    #[error("the refusal burst must be at least 1")]
    Burst,
}

impl RefusalRate {
    pub fn new(per_minute: f64, burst: u32) -> Result<RefusalRate, BadRate> {
        if !per_minute.is_finite() || per_minute < 0.0 {
            return Err(BadRate::Rate(per_minute));
        }
        if burst == 0 {
            return Err(BadRate::Burst);
        }
        Ok(RefusalRate { per_minute, burst })
    }

    fn off(&self) -> bool {
        self.per_minute == 0.0
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets by credential id.
#[derive(Debug)]
pub struct RefusalLimiter {
    rate: RefusalRate,
    buckets: Mutex<Buckets>,
}

#[derive(Debug, Default)]
struct Buckets {
    by_credential: HashMap<String, Bucket>,
    /// Size after the last sweep: the next sweep runs when the map has doubled.
    swept_at: usize,
}

impl RefusalLimiter {
    pub fn new(rate: RefusalRate) -> RefusalLimiter {
        RefusalLimiter {
            rate,
            buckets: Mutex::new(Buckets::default()),
        }
    }

    pub fn rate(&self) -> RefusalRate {
        self.rate
    }

    /// Take one token for `credential` at `now`; `false` when the bucket is empty.
    pub fn take(&self, credential: &str, now: Instant) -> bool {
        if self.rate.off() {
            return true;
        }
        let mut b = match self.buckets.lock() {
            Ok(b) => b,
            Err(p) => p.into_inner(),
        };
        let burst = f64::from(self.rate.burst);
        let refilled = |bucket: &Bucket| {
            let secs = now.saturating_duration_since(bucket.at).as_secs_f64();
            (bucket.tokens + secs * self.rate.per_minute / 60.0).min(burst)
        };
        let taken = match b.by_credential.get_mut(credential) {
            Some(bucket) => {
                let tokens = refilled(bucket);
                *bucket = Bucket {
                    tokens: if tokens >= 1.0 { tokens - 1.0 } else { tokens },
                    // Callers read the clock before they take the lock: one that read it
                    // before the last refill must not move the bucket's time back, or that
                    // interval would be credited twice.
                    at: now.max(bucket.at),
                };
                tokens >= 1.0
            }
            None => {
                b.by_credential.insert(
                    credential.to_owned(),
                    Bucket {
                        tokens: burst - 1.0,
                        at: now,
                    },
                );
                true
            }
        };
        if b.by_credential.len() > b.swept_at.max(SWEEP_FLOOR) {
            b.by_credential.retain(|_, bucket| refilled(bucket) < burst);
            b.swept_at = b.by_credential.len() * 2;
        }
        taken
    }

    /// Buckets held now (for tests and metrics).
    pub fn tracked(&self) -> usize {
        match self.buckets.lock() {
            Ok(b) => b.by_credential.len(),
            Err(p) => p.into_inner().by_credential.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limiter(per_minute: f64, burst: u32) -> RefusalLimiter {
        RefusalLimiter::new(RefusalRate::new(per_minute, burst).unwrap())
    }

    #[test]
    fn a_burst_then_nothing_until_tokens_refill() {
        let l = limiter(60.0, 3);
        let t0 = Instant::now();
        assert_eq!(
            (0..5).map(|_| l.take("a", t0)).collect::<Vec<_>>(),
            [true, true, true, false, false]
        );
        // One token a second.
        assert!(!l.take("a", t0 + Duration::from_millis(900)));
        assert!(l.take("a", t0 + Duration::from_millis(1000)));
        assert!(!l.take("a", t0 + Duration::from_millis(1500)));
        // Never more than the burst, however long the pause.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(
            (0..4).map(|_| l.take("a", later)).collect::<Vec<_>>(),
            [true, true, true, false]
        );
    }

    /// Concurrent refusals read the clock before they take the lock, so one may come with an
    /// earlier reading than the last: it must not earn the interval between again.
    #[test]
    fn an_earlier_clock_reading_earns_no_token() {
        let l = limiter(60.0, 1);
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        assert!(l.take("a", t0));
        assert!(l.take("a", t1));
        assert!(!l.take("a", t0 + Duration::from_millis(500)));
        assert!(!l.take("a", t1 + Duration::from_millis(500)));
        assert!(l.take("a", t1 + Duration::from_millis(1000)));
    }

    #[test]
    fn credentials_have_their_own_buckets() {
        let l = limiter(1.0, 1);
        let t0 = Instant::now();
        assert!(l.take("a", t0));
        assert!(!l.take("a", t0));
        assert!(l.take("b", t0));
    }

    #[test]
    fn zero_per_minute_turns_the_limit_off_and_bad_rates_are_refused() {
        let l = limiter(0.0, 1);
        let t0 = Instant::now();
        assert!((0..1000).all(|_| l.take("a", t0)));
        assert_eq!(l.tracked(), 0);
        assert_eq!(RefusalRate::new(1.0, 0), Err(BadRate::Burst));
        assert_eq!(RefusalRate::new(-1.0, 1), Err(BadRate::Rate(-1.0)));
        assert!(RefusalRate::new(f64::NAN, 1).is_err());
    }

    #[test]
    fn refilled_buckets_are_dropped_so_memory_follows_recent_refusers() {
        let l = limiter(60.0, 2);
        let t0 = Instant::now();
        for i in 0..SWEEP_FLOOR {
            assert!(l.take(&format!("c{i}"), t0));
        }
        assert_eq!(l.tracked(), SWEEP_FLOOR);
        // A minute later every bucket has refilled: the next new caller sweeps them away.
        assert!(l.take("late", t0 + Duration::from_secs(60)));
        assert_eq!(l.tracked(), 1);
        // Buckets still short of tokens survive a sweep.
        let t1 = t0 + Duration::from_secs(120);
        for i in 0..=SWEEP_FLOOR {
            assert!(l.take(&format!("d{i}"), t1));
        }
        assert_eq!(l.tracked(), SWEEP_FLOOR + 1);
    }
}
