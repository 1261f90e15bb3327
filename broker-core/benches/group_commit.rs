//! Durable commits per second through the store's single writer, with 1 and with 32 concurrent
//! submitters, beside the raw fsync rate of the same directory measured in the same run.
//!
//! Run: `cargo bench -p broker-core --bench group_commit` (optionally `-- --seconds 3`,
//! `--dir PATH` to measure another disk). Each commit is a real log append (two objects, an
//! entry, a world, the head) acknowledged only once durable (the commit's pages synced by
//! LMDB, then its meta page by the store's syncing thread).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use broker_core::log::{self, Append, HeadBinding};
use broker_core::object::{sid, Object, Ref};
use broker_core::store::Store;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut seconds = 3.0f64;
    let mut dir: Option<PathBuf> = None;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--seconds" => {
                seconds = args
                    .get(i + 1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(seconds);
                i += 1;
            }
            "--dir" => {
                dir = args.get(i + 1).map(PathBuf::from);
                i += 1;
            }
            _ => {} // cargo bench passes --bench
        }
        i += 1;
    }
    let base = dir.unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).expect("bench directory");
    let tmp = tempfile::tempdir_in(&base).expect("temp dir");
    let duration = Duration::from_secs_f64(seconds);

    let fsync = fsync_rate(tmp.path(), duration);
    let store = Store::create(&tmp.path().join("db")).expect("store");
    let one = commit_rate(&store, 1, duration);
    let many = commit_rate(&store, 32, duration);
    let stats = store.stats();
    println!(
        "group commit benchmark ({}s per row, dir {})",
        seconds,
        base.display()
    );
    println!("{:<28} {:>12} {:>10}", "row", "per second", "vs fsync");
    println!(
        "{:<28} {:>12.0} {:>10}",
        "raw fsync (4 KiB + fdatasync)", fsync, "1.00x"
    );
    println!(
        "{:<28} {:>12.0} {:>9.2}x",
        "durable commits, 1 submitter",
        one,
        one / fsync
    );
    println!(
        "{:<28} {:>12.0} {:>9.2}x",
        "durable commits, 32 submitters",
        many,
        many / fsync
    );
    println!(
        "32 vs 1 submitter: {:.1}x; writer batches {} for {} operations (largest {})",
        many / one,
        stats.batches.load(Ordering::Relaxed),
        stats.operations.load(Ordering::Relaxed),
        stats.largest_batch.load(Ordering::Relaxed)
    );
}

/// fdatasync'ed 4 KiB appends per second in `dir`.
fn fsync_rate(dir: &Path, duration: Duration) -> f64 {
    let path = dir.join("fsync.probe");
    let mut f = std::fs::File::create(&path).expect("probe file");
    let block = [0x5au8; 4096];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        f.write_all(&block).expect("write");
        f.sync_data().expect("fdatasync");
        n += 1;
    }
    let _ = std::fs::remove_file(path);
    n as f64 / start.elapsed().as_secs_f64()
}

fn commit_rate(store: &Store, submitters: usize, duration: Duration) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let threads: Vec<_> = (0..submitters)
        .map(|t| {
            let (store, done, stop) = (store.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let payload = format!("{{\"submitter\":{t},\"n\":{k}}}").into_bytes();
                    let output = Object::new(sid::INVOCATION_OUTPUT, "bench", payload.clone());
                    let mut rec = payload;
                    rec.extend_from_slice(b" record");
                    let record = Object::new(sid::INVOCATION_RECORD, "bench", rec);
                    let append = Append {
                        transition_fn: Ref::of(b"bench"),
                        interpreter: Ref::of(b"bench"),
                        written_by: "bench".into(),
                        transition_ref: record.hash,
                        state_root: output.hash,
                        objects: vec![output, record],
                        binding: HeadBinding::AtHead,
                    };
                    store
                        .write(move |w| log::append(w, &append))
                        .expect("commit");
                    done.fetch_add(1, Ordering::Relaxed);
                    k += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(duration);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("submitter");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}
