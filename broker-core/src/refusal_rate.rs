//! What refused and denied calls cost their caller: a token bucket per credential.
//!
//! A plan refusal or a broker denial runs nothing and spends no budget, but it is committed:
//! one log entry and a few objects each. Without a price, one session could write entries as
//! fast as the store commits them (a batch of thousands of refused calls is one request). So
//! each credential has a bucket of `burst` refusals that refills at `per_minute`; a refusal or
//! denial about to be committed takes its price in tokens, and without them the call is
//! answered with the capacity error (`host callback capacity exceeded`) and nothing is
//! committed.
//!
//! # The price is in bytes
//!
//! A refusal stores the caller's arguments whole, and an argument may be megabytes: at one
//! token a refusal, one session sending 1 MB of arguments to a tool that refuses them grew the
//! store by 60 MB a minute, without a grant's budget, until the store was full and every
//! episode was refused. So a refusal takes one token for each started [`BYTES_PER_TOKEN`] of
//! what it stores: the small refusals an agent makes by mistake take one, and a credential's
//! refusals store at most `per_minute` × 16 KiB a minute however large each is. A refusal
//! that costs more than the whole burst is taken from a full bucket, which it leaves in debt
//! for the rest of its price.
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
/// Bytes a refusal may store for one token of its credential's bucket.
pub const BYTES_PER_TOKEN: usize = 16 * 1024;
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

    /// Take the price of a refusal that stores `bytes` from `credential`'s bucket at `now`
    /// ([module docs](self)); `false`, and nothing taken, when the bucket holds too few tokens.
    pub fn take(&self, credential: &str, now: Instant, bytes: usize) -> bool {
        if self.rate.off() {
            return true;
        }
        let price = bytes.div_ceil(BYTES_PER_TOKEN).max(1) as f64;
        let mut b = match self.buckets.lock() {
            Ok(b) => b,
            Err(p) => p.into_inner(),
        };
        let burst = f64::from(self.rate.burst);
        let refilled = |bucket: &Bucket| {
            let secs = now.saturating_duration_since(bucket.at).as_secs_f64();
            (bucket.tokens + secs * self.rate.per_minute / 60.0).min(burst)
        };
        // A price above the burst could never be saved up: a full bucket pays it, into debt.
        let enough = |tokens: f64| tokens >= price.min(burst);
        let taken = match b.by_credential.get_mut(credential) {
            Some(bucket) => {
                let tokens = refilled(bucket);
                *bucket = Bucket {
                    tokens: if enough(tokens) {
                        tokens - price
                    } else {
                        tokens
                    },
                    // Callers read the clock before they take the lock: one that read it
                    // before the last refill must not move the bucket's time back, or that
                    // interval would be credited twice.
                    at: now.max(bucket.at),
                };
                enough(tokens)
            }
            None => {
                b.by_credential.insert(
                    credential.to_owned(),
                    Bucket {
                        tokens: burst - price,
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

    /// What a refusal made by mistake stores: its arguments, plan, output and record.
    const SMALL: usize = 2_000;

    fn limiter(per_minute: f64, burst: u32) -> RefusalLimiter {
        RefusalLimiter::new(RefusalRate::new(per_minute, burst).unwrap())
    }

    #[test]
    fn a_burst_then_nothing_until_tokens_refill() {
        let l = limiter(60.0, 3);
        let t0 = Instant::now();
        assert_eq!(
            (0..5).map(|_| l.take("a", t0, SMALL)).collect::<Vec<_>>(),
            [true, true, true, false, false]
        );
        // One token a second.
        assert!(!l.take("a", t0 + Duration::from_millis(900), SMALL));
        assert!(l.take("a", t0 + Duration::from_millis(1000), SMALL));
        assert!(!l.take("a", t0 + Duration::from_millis(1500), SMALL));
        // Never more than the burst, however long the pause.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(
            (0..4)
                .map(|_| l.take("a", later, SMALL))
                .collect::<Vec<_>>(),
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
        assert!(l.take("a", t0, SMALL));
        assert!(l.take("a", t1, SMALL));
        assert!(!l.take("a", t0 + Duration::from_millis(500), SMALL));
        assert!(!l.take("a", t1 + Duration::from_millis(500), SMALL));
        assert!(l.take("a", t1 + Duration::from_millis(1000), SMALL));
    }

    #[test]
    fn credentials_have_their_own_buckets() {
        let l = limiter(1.0, 1);
        let t0 = Instant::now();
        assert!(l.take("a", t0, SMALL));
        assert!(!l.take("a", t0, SMALL));
        assert!(l.take("b", t0, SMALL));
    }

    /// One session sending 1 MB of arguments to a tool that refuses them grew the store by 60
    /// MB a minute at one token a refusal. Each started 16 KiB now takes a token.
    #[test]
    fn a_refusal_pays_for_what_it_stores_by_the_sixteen_kibibytes() {
        let l = limiter(60.0, 60);
        let t0 = Instant::now();
        // 16 KiB is one token, one byte more two: 57 tokens left of 60.
        assert!(l.take("a", t0, BYTES_PER_TOKEN));
        assert!(l.take("a", t0, BYTES_PER_TOKEN + 1));
        // 57 tokens do not buy 57 × 16 KiB + 1 byte, and that refusal takes nothing.
        assert!(!l.take("a", t0, 57 * BYTES_PER_TOKEN + 1));
        assert!(l.take("a", t0, 57 * BYTES_PER_TOKEN));
        assert!(!l.take("a", t0, SMALL));
        assert!(l.take("a", t0 + Duration::from_secs(1), SMALL));
    }

    /// A refusal dearer than the whole burst is taken from a full bucket and leaves it in debt:
    /// a megabyte a refusal is held to the same 16 KiB a token as everything else.
    #[test]
    fn a_refusal_dearer_than_the_burst_empties_a_full_bucket_into_debt() {
        let l = limiter(60.0, 60);
        let t0 = Instant::now();
        let megabyte = 1 << 20;
        // 64 tokens from a bucket of 60: allowed once it is full, leaving 4 owed.
        assert!(l.take("a", t0, megabyte));
        assert!(!l.take("a", t0, SMALL));
        // Four seconds pay the debt, the fifth earns a small refusal.
        assert!(!l.take("a", t0 + Duration::from_millis(4_900), SMALL));
        assert!(l.take("a", t0 + Duration::from_secs(5), SMALL));
        // The next megabyte waits until the bucket is full again: 60 s after it was empty.
        assert!(!l.take("a", t0 + Duration::from_secs(64), megabyte));
        assert!(l.take("a", t0 + Duration::from_secs(65), megabyte));
        // Sustained: 64 s of refill a megabyte, 16 KiB a second.
        let mut t = t0 + Duration::from_secs(65);
        let mut stored = 0;
        for _ in 0..600 {
            t += Duration::from_secs(1);
            if l.take("a", t, megabyte) {
                stored += megabyte;
            }
        }
        assert_eq!(stored, 9 * megabyte, "600 s at 16 KiB a second is 9.4 MiB");
        // A credential in debt is kept by the sweep, or its debt would be forgotten.
        let sweeper = limiter(60.0, 60);
        assert!(sweeper.take("debtor", t0, megabyte));
        for i in 0..SWEEP_FLOOR {
            assert!(sweeper.take(&format!("c{i}"), t0 + Duration::from_secs(60), SMALL));
        }
        assert_eq!(sweeper.tracked(), SWEEP_FLOOR + 1);
        assert!(!sweeper.take("debtor", t0 + Duration::from_secs(63), megabyte));
    }

    #[test]
    fn zero_per_minute_turns_the_limit_off_and_bad_rates_are_refused() {
        let l = limiter(0.0, 1);
        let t0 = Instant::now();
        assert!((0..1000).all(|_| l.take("a", t0, SMALL)));
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
            assert!(l.take(&format!("c{i}"), t0, SMALL));
        }
        assert_eq!(l.tracked(), SWEEP_FLOOR);
        // A minute later every bucket has refilled: the next new caller sweeps them away.
        assert!(l.take("late", t0 + Duration::from_secs(60), SMALL));
        assert_eq!(l.tracked(), 1);
        // Buckets still short of tokens survive a sweep.
        let t1 = t0 + Duration::from_secs(120);
        for i in 0..=SWEEP_FLOOR {
            assert!(l.take(&format!("d{i}"), t1, SMALL));
        }
        assert_eq!(l.tracked(), SWEEP_FLOOR + 1);
    }
}
