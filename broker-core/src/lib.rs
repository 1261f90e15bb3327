//! `broker-core`: the durable call pipeline of `worldd`.
//!
//! This crate turns one tool call into one durable, verifiable log entry. It knows nothing of
//! HTTP or plugins: surfaces (MCP, A2A, REST) and the plugin loader live in the daemon, which
//! hands the [`coordinator::Coordinator`] a set of [`coordinator::EffectHandler`]s.
//!
//! The pipeline, one module per concept:
//!
//! | step | module |
//! |---|---|
//! | canonical JSON (RFC 8785) and `sha256:` refs | [`canon`], [`object`] |
//! | tools as data, the plan interpreter, the registry | [`transition`], [`plan`], [`registry`] |
//! | sessions, grants, the broker's decision | [`session`], [`grant`], [`broker`] |
//! | durable intents and outcomes, task ids | [`journal`], [`task`] |
//! | the world's store over the storage layer (typed tables, one group-committing writer), the hash-chained log | [`store`], [`log`] |
//! | the store's migration (schema 1 → 6; 2–5 → 6 by the version alone), a page census for profiling the writer | [`migrate`], [`pages`] |
//! | how full the store may get; what refusals cost; who reads what | [`capacity`], [`refusal_rate`], [`access`] |
//! | following the log live: a signal after each durable commit | [`commit_signal`] |
//! | plan → admit → execute → finish → commit; a handler run under its deadline | [`coordinator`], [`deadline`] |
//! | what each episode holds in the store, by bytes | [`holdings`] |
//! | text a terminal shows as it is written (stored strings shown to an operator) | [`plain_text`] |
//! | client-built commits and `rest:` receipts | [`commit`] |
//! | re-verify any call's provenance (`worldd why`) | [`verify`] |
//!
//! The storage layer (private module `storage`: typed tables and transactions over LMDB, one
//! writer thread) knows no entry, intent or session; the world's modules (`log`, `journal`,
//! `task`, `session`, `registry`, `access`) build on it, and [`store`] opens it with the
//! world's tables. No module depends on one that depends back on it (`.ci/module-cycles`), and
//! LMDB's types stay private (`.ci/public-api`). `docs/architecture.md` draws the layers.
//!
//! # Example
//!
//! Create a store (it starts with its genesis entry), publish a tool, mint a session and run
//! a call through an in-process handler; then verify the committed entry.
//!
//! ```
//! use std::sync::Arc;
//! use broker_core::broker::HandlerIdentity;
//! use broker_core::coordinator::*;
//! use broker_core::{registry, session, store::Store, transition::Transition, verify};
//! use serde_json::{json, Map, Value};
//!
//! struct Echo;
//! impl EffectHandler for Echo {
//!     fn identity(&self) -> HandlerIdentity { HandlerIdentity::in_process("echo", "0.1.0") }
//!     fn execute(&self, req: &EffectRequest<'_>) -> HandlerOutcome {
//!         let mut out = Map::new();
//!         out.insert("ok".into(), json!(true));
//!         out.insert("content".into(), json!(format!("read {}", req.payload["path"])));
//!         HandlerOutcome::Ok(out)
//!     }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store = Store::create(&dir.path().join("db"))?;
//! let doc = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../transitions/se-tools/ailang-read.json"))?;
//! registry::publish(&store, registry::DEFAULT_REGISTRY, vec![Transition::from_slice(&doc)?], "example")?;
//!
//! let mut handlers = Handlers::new();
//! handlers.insert("Workspace.Read", Arc::new(Echo))?;
//! let coordinator = Coordinator::new(store.clone(), handlers, CoordinatorConfig::default());
//!
//! let grant = "Workspace.Read=worktree:10".parse()?;
//! let minted = session::mint(&store, "ep1", vec![grant], 3600, coordinator.now())?;
//! let out = coordinator.invoke(&Call {
//!     surface: Surface::Mcp,
//!     session: Arc::new(minted.session),
//!     skill_id: "ailang-read".into(),
//!     task_id: None,
//!     args: json!({"path": "hello.ail"}),
//!     transition_fn: None,
//! })?;
//! let result: Value = serde_json::from_slice(&out.output)?;
//! assert_eq!(result["ok"], true);
//! assert_eq!(result["world"]["effects"][0]["status"], "ok");
//!
//! // The bytes returned are the committed output: `why` finds and re-verifies the chain.
//! let report = verify::why(&store, &verify::Handle::Output(out.output), 100)?;
//! assert!(report.all_ok());
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! - Every commit recomputes the entry hash, the world ref, index continuity and the
//!   `prevEntryHash` link ([`log`]).
//! - An effect's intent and the spend it causes are durable before the handler runs, except
//!   an effect that only reads when this coordinator is its store's only spender: it runs while
//!   its intent is on its way to the disk, and is answered only once both are durable
//!   ([`coordinator::CoordinatorConfig::sole_spender`]). Spend always equals the sum of the
//!   intents not withdrawn (an intent whose handler was never started is withdrawn and gives
//!   its units back); an intent without an outcome is indeterminate and never re-run
//!   ([`journal`]).
//! - Bad input anywhere in the public API is a typed error, never a panic.
//!
//! # Features
//!
//! - `fixtures`: raw reads and overwrites of any table's rows past every hash check
//!   (`store::RawTable`, `Store::raw_rows`), so tamper tests can damage a store on purpose.
//!   Only test builds turn it on (this crate's and the daemon's `[dev-dependencies]`).

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod access;
pub mod broker;
pub mod canon;
pub mod capacity;
pub mod commit;
pub mod commit_signal;
pub mod coordinator;
pub mod deadline;
pub mod grant;
pub mod holdings;
mod invocation_row;
mod invocations;
pub mod journal;
pub mod log;
mod log_row;
pub mod migrate;
pub mod object;
mod objects;
pub mod pages;
mod panics;
pub mod plain_text;
pub mod plan;
mod ref_tail;
pub mod refusal_rate;
pub mod registry;
mod schema;
mod semantic_index;
pub mod session;
mod storage;
pub mod store;
pub mod task;
pub mod transition;
pub mod verify;

/// worldd's one glob dialect (the plan language's `path-glob`, the workspace plugin's deny
/// globs): [`dialect::glob`], re-exported.
pub use dialect::glob;
