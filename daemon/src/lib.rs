//! `worldd`: the daemon and command line of the World effect broker.
//!
//! The binary is a thin shell over [`cli::main`]. Everything it serves is assembled here from
//! [`broker_core`] (the durable call pipeline) and the plugins found by [`plugins`]:
//!
//! | module | what |
//! |---|---|
//! | [`cli`] | the clap tree: `serve`, `quickstart`, `session …`, `why`, `doctor`, `backup`, `handlers`, `publish` and the client verbs |
//! | [`backup`] | a consistent copy of a store (and its plugins' state) taken while the daemon serves it |
//! | [`plugins`] | find, load (abi_stable) and configure effect-handler plugins; adapt them to broker-core |
//! | [`state`] | the shared state: store, coordinator, authentication, invocation |
//! | [`admission`] | per-episode queues, then global execution slots |
//! | [`watched`] | a call's effect on the blocking pool, watched for its handler's deadline; its commit driven by a task of its own |
//! | [`scheduling`] | how the kernel schedules the daemon's threads (`[serve] scheduling`) |
//! | [`limits`] | the operator's sizes, counts and deadlines (`[limits]`) |
//! | [`byte_size`] | sizes as an operator writes them (`64GiB`, `"16 MiB"`), for flags and the config file |
//! | [`edge`] | the HTTP edge: connections, timeouts, Host and Origin, body reads, answers waiting for their clients (`[server]`) |
//! | [`json_bounds`] | the limits a request body's JSON meets before anything in it runs |
//! | [`memory`] | handing freed heap back to the kernel once a burst of large requests is over |
//! | [`quota`] | per-key caps (a credential's share of the answer budget, an episode's log streams) |
//! | [`server`] | the axum router and graceful shutdown |
//! | `fork_guard` | in a child that plugin code forks without `exec`: the daemon's listener, store files and locks put over with `/dev/null`, its shutdown signals back to their default |
//! | [`service_manager`] | `READY=1` and `STOPPING=1` for a service manager that asked (`$NOTIFY_SOCKET`, systemd's `Type=notify`) |
//! | [`durable_answers`] | an answer waits until every snapshot it read is durable |
//! | [`mcp`] | `POST /mcp/` |
//! | [`a2a`] | `POST /a2a/` and the agent card |
//! | [`rest`] | `/v1/*` |
//! | [`api_error`], [`extract`] | the REST error envelope `{"error":{"class","message"}}`, and the extractors that refuse in it |
//! | [`operator_commit`] | `POST /v1/commit`: an operator's act, with a commit grant and a size limit |
//! | [`catalog`] | `/v1/handlers`: the loaded plugins, and whether each of a session's tools can run (rule R8) |
//! | [`fallback`] | JSON 404 / 405 answers that point to the real endpoints |
//! | [`tools`] | the tool surface a session sees (shared by MCP and A2A) |
//! | [`outcome`] | the closed outcome classification of a call (shared by MCP, A2A and reconciliation) |
//! | [`invalid_params`] | a bad argument is `-32602 invalid params` on both surfaces, never a host failure |
//! | [`reconcile`] | `/v1/calls/…`, `/v1/invocations/…` and `/v1/budget`: did my call land, what is left |
//! | [`metrics`] | Prometheus counters at `/v1/metrics` |
//! | [`log_throttle`] | log lines any client can cause, written at most once per interval |
//! | [`log_stream`], [`log_summary`], [`visibility`] | the log live: `/v1/log/stream` (SSE) and `/v1/log/summaries`, filtered by who reads |
//! | [`workbench`] | the provenance explorer at `/workbench` (embedded HTML, CSS and JS) |
//! | [`verify_reads`] | `/v1/invocations/{id}/rows` and `/v1/log/{i}/world`: the stored rows `worldd why --addr` recomputes from |
//!
//! # Serving a router in a test
//!
//! The router can be driven without sockets (the end-to-end tests in `tests/` drive the real
//! binary instead):
//!
//! ```
//! use std::sync::Arc;
//! use broker_core::coordinator::{Coordinator, CoordinatorConfig, Handlers};
//! use broker_core::store::Store;
//! use tower::ServiceExt;
//! use worldd::state::{AppState, DaemonInfo};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store = Store::create(&dir.path().join("db"))?;
//! let coordinator = Coordinator::new(store.clone(), Handlers::new(), CoordinatorConfig::default());
//! let info = DaemonInfo { db_path: "db".into(), version: "test", open_reads: false };
//! let app = worldd::server::router(AppState::new(store, Arc::new(coordinator), info));
//! let res = app
//!     .oneshot(axum::http::Request::get("/v1/health").body(axum::body::Body::empty())?)
//!     .await?;
//! assert_eq!(res.status(), 200);
//! # Ok(()) }
//! ```

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod a2a;
pub mod admission;
pub mod api_error;
pub mod backup;
pub mod byte_size;
pub mod catalog;
mod challenge;
pub mod cli;
mod descriptors;
pub mod durable_answers;
pub mod edge;
mod exit_guard;
pub mod extract;
pub mod fallback;
mod flock;
mod fork_guard;
pub mod invalid_params;
pub mod json_bounds;
mod json_numbers;
mod json_scan;
pub mod limits;
pub mod log_stream;
pub mod log_summary;
pub mod log_throttle;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod operator_commit;
pub mod outcome;
// The paths the plugin's library image and log had before they moved under `plugins`.
pub use plugins::image as plugin_image;
pub use plugins::log as plugin_log;
pub mod plugins;
mod proc_locks;
mod process_state;
pub mod quota;
pub mod reconcile;
pub mod rest;
pub mod scheduling;
pub mod server;
pub mod service_manager;
mod spelling;
pub mod state;
pub(crate) mod text;
pub mod tools;
pub mod verify_reads;
pub mod visibility;
pub mod watched;
pub mod workbench;
