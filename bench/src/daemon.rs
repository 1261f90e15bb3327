//! The release daemon as a child process, sessions minted directly in its store, and the
//! facts read from `/proc` and from LMDB.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Budget of every benchmark grant: far more calls than any run makes.
pub const BUDGET: u64 = 1_000_000_000;

/// The control group every daemon started from now on joins (`--cpu-groups`).
static DAEMON_GROUP: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Make `worldd-bench-daemon` and `worldd-bench-load` under `dir` (a cgroup directory with the
/// cpu controller), move this process into the second, and every daemon started afterwards
/// into the first. The scheduler then shares a busy machine between the two groups, not
/// between threads: hundreds of attacker threads no longer outnumber the daemon's few.
pub fn split_cpu_groups(dir: &Path) -> Result<(), String> {
    let group = |name: &str| -> Result<PathBuf, String> {
        let g = dir.join(name);
        match std::fs::create_dir(&g) {
            Ok(()) => Ok(g),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(g),
            Err(e) => Err(format!("{}: {e}", g.display())),
        }
    };
    let (daemon, load) = (group("worldd-bench-daemon")?, group("worldd-bench-load")?);
    join_group(&load, std::process::id())?;
    DAEMON_GROUP
        .set(daemon)
        .map_err(|_| "--cpu-groups set twice".to_owned())
}

fn join_group(group: &Path, pid: u32) -> Result<(), String> {
    let procs = group.join("cgroup.procs");
    std::fs::write(&procs, pid.to_string()).map_err(|e| format!("{}: {e}", procs.display()))
}

/// `serve` flags that take the refusal rate's limit off: the plan-refusal row measures
/// committed refusals, not their rate limit. The attacks keep the default rate.
pub const REFUSALS_UNLIMITED: [&str; 2] = ["--refusals-per-minute", "0"];

pub struct Daemon {
    child: Child,
    /// Held so the daemon never writes to a closed pipe.
    _stdout: BufReader<ChildStdout>,
    pub addr: String,
    pub db: PathBuf,
    pub root: PathBuf,
}

/// One simulated client: its episode and its bearer token.
#[derive(Clone)]
pub struct Client {
    pub episode: String,
    pub token: String,
}

impl Daemon {
    /// `worldd serve --db <dir>/db --workspace-root <dir>/wt --bind 127.0.0.1:0
    /// --plugin-dir <plugin_dir> --handler workspace --refusals-per-minute 0`; stderr goes to
    /// `<dir>/daemon.log`.
    pub fn start(
        worldd: &Path,
        dir: &Path,
        plugin_dir: &Path,
        log_filter: Option<&str>,
    ) -> Result<Daemon, String> {
        Daemon::start_with(
            &[],
            worldd,
            dir,
            plugin_dir,
            log_filter,
            &["workspace"],
            &REFUSALS_UNLIMITED.map(String::from),
        )
    }

    /// The same with these plugins enabled and extra `serve` flags, the daemon run by
    /// `wrapper` when it names one (a program and its arguments, the daemon's command line
    /// appended; e.g. Valgrind). The wrapper must run the daemon in its own process, as
    /// Valgrind does, for [`Daemon::pid`] to be the daemon's.
    pub fn start_with(
        wrapper: &[String],
        worldd: &Path,
        dir: &Path,
        plugin_dir: &Path,
        log_filter: Option<&str>,
        handlers: &[&str],
        extra: &[String],
    ) -> Result<Daemon, String> {
        let db = dir.join("db");
        let root = dir.join("wt");
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let log = File::create(dir.join("daemon.log")).map_err(|e| e.to_string())?;
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(worldd);
                cmd
            }
            None => Command::new(worldd),
        };
        cmd.arg("serve")
            .arg("--db")
            .arg(&db)
            .arg("--workspace-root")
            .arg(&root)
            .arg("--bind")
            .arg("127.0.0.1:0")
            .arg("--plugin-dir")
            .arg(plugin_dir)
            .args(handlers.iter().flat_map(|h| ["--handler", h]))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        if let Some(f) = log_filter {
            cmd.env("WORLDD_LOG", f);
        }
        let mut child = cmd.spawn().map_err(|e| {
            let program = wrapper.first().map_or(worldd, Path::new);
            format!("{}: {e}", program.display())
        })?;
        if let Some(group) = DAEMON_GROUP.get() {
            if let Err(e) = join_group(group, child.id()) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        }
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        match line.trim().strip_prefix("worldd listening on http://") {
            Some(addr) => Ok(Daemon {
                addr: addr.to_owned(),
                child,
                _stdout: stdout,
                db,
                root,
            }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
                Err(format!("daemon did not start: {line:?}; log: {log}"))
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Mint one session per episode in the store (the daemon keeps running: LMDB serialises
    /// writers across processes) with big Workspace.Read/Write grants, and create each
    /// episode's worktree holding `f.txt` of `file_bytes` bytes.
    pub fn mint(
        &self,
        prefix: &str,
        count: usize,
        file_bytes: usize,
    ) -> Result<Vec<Client>, String> {
        let store = broker_core::store::Store::open(&self.db, Default::default())
            .map_err(|e| format!("open store: {e}"))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|e| e.to_string())?
            .as_secs() as i64;
        let content = vec![b'x'; file_bytes];
        let mut clients = Vec::with_capacity(count);
        for i in 0..count {
            let episode = format!("{prefix}{i}");
            let wt = self.root.join(&episode);
            std::fs::create_dir_all(&wt).map_err(|e| e.to_string())?;
            std::fs::write(wt.join("f.txt"), &content).map_err(|e| e.to_string())?;
            let grants = vec![
                format!("Workspace.Read=worktree:{BUDGET}")
                    .parse()
                    .map_err(|e| format!("{e}"))?,
                format!("Workspace.Write=worktree:{BUDGET}")
                    .parse()
                    .map_err(|e| format!("{e}"))?,
            ];
            let minted = broker_core::session::mint(&store, &episode, grants, 24 * 3600, now)
                .map_err(|e| format!("mint {episode}: {e}"))?;
            clients.push(Client {
                episode,
                token: minted.token,
            });
        }
        Ok(clients)
    }

    /// Reset the peak-RSS counter (`VmHWM`) of the daemon: `echo 5 > /proc/PID/clear_refs`.
    pub fn reset_peak_rss(&self) -> bool {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5").is_ok()
    }

    /// `VmHWM` of the daemon, KiB.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        proc_status_kib(self.pid(), "VmHWM:")
    }

    /// SIGTERM, then wait (graceful drain); SIGKILL after 30 s.
    pub fn stop(mut self) -> Result<(), String> {
        // SAFETY: a plain kill(2) of our own child; no memory is involved.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(status)) = self.child.try_wait() {
                return if status.success() {
                    Ok(())
                } else {
                    Err(format!("daemon exited with {status}"))
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err("daemon did not stop on SIGTERM within 30 s".into())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Samples a process's anonymous memory (`RssAnon`) and open descriptors every 25 ms;
/// [`ProcSampler::finish`] gives the peaks.
pub struct ProcSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Peaks>>,
}

/// The most a sampled process held.
#[derive(Debug, Clone, Copy, Default)]
pub struct Peaks {
    /// `RssAnon`, KiB (`None` where the kernel does not report it).
    pub anon_kib: Option<u64>,
    pub fds: u64,
}

impl ProcSampler {
    pub fn start(pid: u32) -> ProcSampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peaks = Peaks::default();
            loop {
                if let Some(v) = proc_status_kib(pid, "RssAnon:") {
                    peaks.anon_kib = Some(peaks.anon_kib.map_or(v, |p| p.max(v)));
                }
                if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
                    peaks.fds = peaks.fds.max(dir.count() as u64);
                }
                if flag.load(std::sync::atomic::Ordering::Relaxed) {
                    return peaks;
                }
                std::thread::sleep(Duration::from_millis(25));
            }
        });
        ProcSampler {
            stop,
            thread: Some(thread),
        }
    }

    pub fn finish(mut self) -> Peaks {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

/// A field of `/proc/PID/status` given in KiB (`VmHWM:`, `RssAnon:`).
pub fn proc_status_kib(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Pages and entries of one named LMDB database.
#[derive(Debug, Clone)]
pub struct TableStat {
    pub name: String,
    pub entries: u64,
    /// Branch + leaf + overflow pages.
    pub pages: u64,
    pub overflow_pages: u64,
}

/// Size of a store's `data.mdb`, measured three ways, and its tables.
#[derive(Debug, Clone)]
pub struct StoreSize {
    /// (LMDB last page number + 1) × page size: the high-water mark of pages LMDB has used
    /// (free-list pages included), from `mdb_env_info` and `mdb_env_stat`.
    pub lmdb_bytes: u64,
    /// Blocks allocated to `data.mdb` on disk (`st_blocks` × 512, what `du` reports).
    pub allocated_bytes: u64,
    /// Apparent file length (`st_size`).
    pub file_bytes: u64,
    pub page_size: u64,
    /// Every named database (`mdb_stat`), in name order.
    pub tables: Vec<TableStat>,
}

impl StoreSize {
    /// Pages held by the named databases' B-trees (live data, no free list, no meta pages).
    pub fn table_pages(&self) -> u64 {
        self.tables.iter().map(|t| t.pages).sum()
    }
}

/// Measure the store in `db`. Opens the environment read-only in this process (the daemon
/// may be running or stopped; no store handle of this process may be open on `db`).
pub fn store_size(db: &Path) -> Result<StoreSize, String> {
    use heed::types::{Bytes, DecodeIgnore, Str};
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(db.join("data.mdb")).map_err(|e| e.to_string())?;
    let env = unsafe {
        // SAFETY: read-only open of an environment this process has not opened otherwise;
        // the flags match broker-core's except READ_ONLY.
        let mut o = heed::EnvOpenOptions::new().read_txn_without_tls();
        o.map_size(broker_core::store::DEFAULT_MAP_SIZE)
            .max_dbs(64)
            .flags(heed::EnvFlags::READ_ONLY);
        o.open(db)
            .map_err(|e| format!("heed open {}: {e}", db.display()))?
    };
    let info = env.info();
    let page = env.unnamed_database_stat().page_size as u64;
    let mut tables = Vec::new();
    {
        let rtxn = env.read_txn().map_err(|e| e.to_string())?;
        env.open_databases_and_commit(rtxn, |dbo, rtxn| -> Result<_, heed::Error> {
            let Some(main) = dbo.open_database::<Str, DecodeIgnore>(rtxn, None)? else {
                return Ok(heed::CommitOrAbort::<(), ()>::Commit(()));
            };
            let mut names = Vec::new();
            for item in main.iter(rtxn)? {
                names.push(item?.0.to_owned());
            }
            for name in names {
                if let Some(t) = dbo.open_database::<Bytes, DecodeIgnore>(rtxn, Some(&name))? {
                    let st = t.stat(rtxn)?;
                    tables.push(TableStat {
                        name,
                        entries: st.entries as u64,
                        pages: (st.branch_pages + st.leaf_pages + st.overflow_pages) as u64,
                        overflow_pages: st.overflow_pages as u64,
                    });
                }
            }
            Ok(heed::CommitOrAbort::Commit(()))
        })
        .map_err(|e| format!("store tables: {e}"))?;
    }
    let size = StoreSize {
        lmdb_bytes: (info.last_page_number as u64 + 1) * page,
        allocated_bytes: meta.blocks() * 512,
        file_bytes: meta.len(),
        page_size: page,
        tables,
    };
    env.prepare_for_closing().wait();
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_groups_are_made_and_this_process_joins_the_load_generators() {
        // A plain directory stands in for the cgroup file system: the groups are made, this
        // process's id is written to the load generator's, and daemons will join the other.
        let dir = tempfile::tempdir().unwrap();
        split_cpu_groups(dir.path()).unwrap();
        let load = dir.path().join("worldd-bench-load").join("cgroup.procs");
        assert_eq!(
            std::fs::read_to_string(load).unwrap(),
            std::process::id().to_string()
        );
        assert_eq!(
            DAEMON_GROUP.get(),
            Some(&dir.path().join("worldd-bench-daemon"))
        );
        assert!(split_cpu_groups(dir.path())
            .unwrap_err()
            .contains("set twice"));
        let missing = dir.path().join("no-such-dir").join("deeper");
        assert!(split_cpu_groups(&missing)
            .unwrap_err()
            .contains("no-such-dir"));
    }
}
