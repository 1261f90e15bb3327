//! An answer never shows what a power cut could take back.
//!
//! The store answers a write only once it is durable, but its writer leaves each commit's meta
//! page to be synced by a thread of its own (`docs/data-model.md` §8.6), and LMDB shows a
//! commit to new read transactions as soon as its meta page is written. So a request that
//! only reads can see another episode's commit a sync before the disk has it.
//!
//! Every request runs inside [`hold`]: the store tells a task-local the snapshot id of each
//! read the request's task makes ([`note_reads`]), reads it hands to the blocking pool go
//! through [`spawn_read`], which notes theirs, and when the answer is ready, a snapshot newer
//! than the store's durable one waits for it ([`broker_core::store::Store::until_durable`]: the
//! sync its commit was handed to, which adds no write). A call's own
//! answer already waited for its commit, which is newer than anything it read, so a call never
//! waits here. Reads made outside the request's task (a streamed body) are not noted: the log
//! stream waits for each of its batches itself.

use std::cell::Cell;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use broker_core::store::Store;

tokio::task_local! {
    /// The newest snapshot the request's task has read.
    static NEWEST_READ: Cell<usize>;
}

thread_local! {
    /// The newest snapshot read on this thread since [`spawn_read`] reset it.
    static THREAD_NEWEST: Cell<usize> = const { Cell::new(0) };
}

fn raise(newest: &Cell<usize>, snapshot: usize) {
    newest.set(newest.get().max(snapshot));
}

/// Make `store` tell the running request (if any) of every snapshot it reads.
pub fn note_reads(store: &Store) {
    store.on_read(Box::new(|snapshot| {
        let _ = NEWEST_READ.try_with(|newest| raise(newest, snapshot));
        THREAD_NEWEST.with(|newest| raise(newest, snapshot));
    }));
}

/// `tokio::task::spawn_blocking` for a request's reads: the snapshots `read` sees count as the
/// request's.
pub async fn spawn_read<T: Send + 'static>(
    read: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    let (out, newest) = tokio::task::spawn_blocking(move || {
        THREAD_NEWEST.with(|newest| newest.set(0));
        let out = read();
        (out, THREAD_NEWEST.with(Cell::get))
    })
    .await?;
    let _ = NEWEST_READ.try_with(|n| raise(n, newest));
    Ok(out)
}

/// Run the request, then hold its answer until what it read is durable.
pub async fn hold(State(store): State<Store>, request: Request, next: Next) -> Response {
    let (response, newest) = NEWEST_READ
        .scope(Cell::new(0), async {
            let response = next.run(request).await;
            (response, NEWEST_READ.with(Cell::get))
        })
        .await;
    wait_durable(&store, newest).await;
    response
}

/// Wait until the snapshot `snapshot` is durable. A failed wait is logged, not answered: the
/// writer's failure reaches every caller that writes, and the read itself succeeded. A resend
/// that replays a committed call is not such a read: the coordinator waits for its snapshot
/// itself and answers it not confirmed when that wait fails.
pub async fn wait_durable(store: &Store, snapshot: usize) {
    if let Some(durable) = store.until_durable(snapshot) {
        if let Err(err) = durable.await {
            tracing::warn!(error = %err, snapshot, "an answer showed a snapshot that may not be durable");
        }
    }
}
