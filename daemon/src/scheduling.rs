//! How the kernel schedules the daemon's threads (`[serve] scheduling`, `--scheduling`).
//!
//! A durable call crosses several of the daemon's own threads: the runtime's worker hands the
//! effect to a blocking thread, which hands its intent and entry to the store's writer, whose
//! syncing thread wakes the request again. Under Linux's default policy every such wake-up may
//! preempt the thread that made it, so a thread that had more to do (the writer gathering its
//! next group commit, a worker with more requests ready) is switched out to run the one it
//! woke, and switched back in later. `SCHED_BATCH` tells the kernel these threads are
//! throughput work: a woken one waits for a core to come free instead of preempting, and is
//! otherwise scheduled as usual (same nice value, same share of the CPU).
//!
//! It is a trade, so it is the operator's choice (`batch`), not the default (`inherit`: the
//! policy the daemon was started with, e.g. by systemd's `CPUSchedulingPolicy=` or `chrt`). On
//! the 2-core benchmark machine it cut the daemon's CPU per durable call by 3–13 % and raised
//! reads @128 by about a tenth, but one client's reads, one call at a time, were 8–11 % slower
//! (`docs/benchmarks.md`, twenty-sixth round): the interactive agent's case.
//!
//! The policy is set on the thread that starts `serve`, before the store, the runtime or any
//! plugin starts a thread: every thread inherits it, and so do the processes handlers start
//! (`git`, `ailang`).

use serde::Deserialize;

/// The scheduling policy of the daemon's threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scheduling {
    /// `SCHED_BATCH`: woken threads do not preempt running ones.
    Batch,
    /// Whatever policy the daemon was started with.
    #[default]
    Inherit,
}

impl Scheduling {
    /// The name written in the config file and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scheduling::Batch => "batch",
            Scheduling::Inherit => "inherit",
        }
    }
}

/// Put the calling thread, and so every thread and process it starts from now on, under
/// `policy`. A kernel or sandbox that refuses the change leaves the policy as it was: it is a
/// hint for throughput, not a condition of service, so the caller reports the error and goes on.
pub fn apply(policy: Scheduling) -> std::io::Result<()> {
    match policy {
        Scheduling::Inherit => Ok(()),
        Scheduling::Batch => {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: `param` is a valid sched_param for the call's duration; pid 0 is the
            // calling thread. An unprivileged thread may switch to SCHED_BATCH.
            let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Section {
        scheduling: Scheduling,
    }

    #[test]
    fn the_config_names_each_policy_and_refuses_others() {
        for policy in [Scheduling::Batch, Scheduling::Inherit] {
            let text = format!("scheduling = \"{}\"", policy.name());
            let s: Section = toml::from_str(&text).unwrap();
            assert_eq!(s.scheduling, policy);
        }
        let err = toml::from_str::<Section>("scheduling = \"fifo\"")
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("unknown variant `fifo`"), "{err}");
        assert!(err.contains("expected `batch` or `inherit`"), "{err}");
    }

    /// The calling thread's policy.
    fn policy() -> i32 {
        // SAFETY: reads the calling thread's policy; no memory is passed.
        unsafe { libc::sched_getscheduler(0) }
    }

    /// A thread of its own, so that the test binary's other threads keep their policy.
    #[test]
    fn batch_puts_the_thread_and_the_threads_it_starts_under_sched_batch() {
        std::thread::spawn(|| {
            let before = policy();
            apply(Scheduling::Inherit).unwrap();
            assert_eq!(policy(), before);
            apply(Scheduling::Batch).unwrap();
            assert_eq!(policy(), libc::SCHED_BATCH);
            let child = std::thread::spawn(policy);
            assert_eq!(child.join().unwrap(), libc::SCHED_BATCH);
        })
        .join()
        .unwrap();
    }
}
