//! worldd plugin `ailang`: `Ailang.Check`, `Ailang.Run`, `Ailang.RunEnv`, `Ailang.RunNet`,
//! `Ailang.Discover` and `Ailang.CLI`, executed by the operator's `ailang` binary under a
//! per-episode AILANG policy confined to the episode's worktree.
//!
//! Serves the se-tools `ailang-check`, `ailang-run`, `builtins-search`, `examples-search` and
//! `ailang-cli`, whose transition documents (`transitions/se-tools/<id>.json`) it ships in its
//! manifest, and the finish functions `check-report` and `builtins-inventory`.
//! The operator guide is `docs/plugins/ailang.md`.
//!
//! # Effects
//!
//! | effect | class | ops | how |
//! |---|---|---|---|
//! | `Ailang.Check` | read | `ai_check` | `ailang policy-tool`, base policy |
//! | `Ailang.Discover` | read | `builtins_list`, `examples_search` | `ailang policy-tool`, base policy |
//! | `Ailang.CLI` | unknown | the summary's `cli` list ∩ [`CLI_OPS`] | `ailang policy-tool`, base policy (`test` runs code) |
//! | `Ailang.Run` / `RunEnv` / `RunNet` | unknown | `run` | `ailang run`, a run variant of the policy |
//!
//! # Outputs
//!
//! - policy-tool ops: the policy-tool's reply (an object with a boolean `ok`, e.g.
//!   `{ok, argv, exit_code, stdout, stderr}` or `{ok:false, refused}`) plus `tool`
//!   (`sha256:` of the `ailang` binary) and `policy_digest` (hex SHA-256 of the base policy
//!   file's bytes). A reply that is not such an object, or that carries `tool`,
//!   `policy_digest` or `world`, is a failed effect.
//! - examples-search without a corpus: declined (below); a daemon that skips the preflight
//!   gets `{ok:false, refused: NO_CORPUS, tool, policy_digest}` without anything run.
//! - runs: `{admitted, exit_code, decision, limit, stdout, stderr, policy:{digest,
//!   security_mode, caps, net_allow}}`, read from `ailang run` exactly as the `run` module
//!   describes, plus `ok: false` and `refused` when `ailang` refused the program before it
//!   ran (`admitted: false`), so the call is a policy refusal; anything else is the failed
//!   effect `broker: ailang run produced no recognised outcome envelope (rc N)`.
//!
//! # Declined (preflight, nothing spent)
//!
//! A path argument that holds a `..` segment ([`DOT_DOT`]), leads out of the worktree, into
//! git's own data, to a file with more than one hard link (unless `allowHardLinks`) or that
//! the walk beneath the worktree cannot finish; a `path`, `module`, `query` or `package` that
//! begins with `-`; an ailang-cli flag key that names `write` ([`WRITE_FLAG`]) or is not a
//! plain flag name; an examples op without a corpus ([`NO_CORPUS`]); an `args_json` over
//! 64 KiB; and the operator gates `capability "<c>" is not enabled by the operator (ailang
//! config runAllowCaps)` and `Net names no reachable host:port (ailang config runNetAllow)`.
//! The effect refuses each of them again (a failed `broker: <E> refused: …`; the examples op
//! its stamped answer) for a daemon that skips the preflight. Every effect is also declined ([`UNRUNNABLE`], the log naming the file
//! and [`RESTART`]) when the archived binary has been removed or lost its execute bit since
//! start: every call would fail before anything ran; and ([`ARCHIVE_CHANGED`]) when its bytes
//! are no longer those `tool` names, checked before each call (a `stat` per call; a hash only
//! when what `stat` says changed since the last hash, so a copy that stays changed is hashed
//! once). The check and the start are both by path: bytes written into the copy between the
//! check of a call and its start are not seen by that call, only by the next.
//!
//! # Failures (effect `failed`, nothing runs)
//!
//! `broker: <E> refused: scope "<s>" is not "worktree"`, `broker: <E> refuses op "<op>": not
//! in this effect's op allowlist`, `broker: <E> refused: key "OP" aliases "op"`, `broker: <E>
//! refused: payload is not a JSON object`, `broker: Ailang.CLI refused: flag "write" writes the
//! worktree; Ailang.CLI never writes (use Workspace.Write)`, the declined requests above when
//! the preflight was skipped, and a worktree that is a symbolic link (it is opened by
//! descriptor without following one, and every child starts in that descriptor). Also failed: a policy whose summary does not match, a child that
//! times out (its whole process group is SIGKILLed) or writes more than 8 MiB to stdout or
//! stderr. A child that allocates past `memoryMiB` fails inside `ailang`; a run that so ends
//! without an envelope logs `ailang`'s stderr for the operator. A run or an Ailang.CLI op whose
//! child started but could not be waited for is `indeterminate`: it may have run to its end.
//!
//! # Config
//!
//! See [`config_schema`]: `bin` (without it the constructor *declines*: [`DECLINE`]; one
//! another user could have written or swapped is refused, as the daemon refuses such a plugin
//! library),
//! `allowHardLinks`, `examplesDir`, `memoryMiB` (each child process's `RLIMIT_DATA`, 4096 MiB
//! unless set; per process, inherited by what it starts), `runAllowCaps`,
//! `runNetAllow`, `runNetAllowHttp`, `stateDir`.
//!
//! # Tests
//!
//! The tests run a stand-in for `ailang` (`tests/ailang-standin/ailang`, a Python script that
//! imitates the documented CLI). It is test code only and is never shipped.

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod config;
mod cut;
mod finish;
mod handler;
mod policy;
mod process;
mod run;

use handler_kit::manifest::embedded_transitions;
use handler_kit::serde_json::Value;
use handler_kit::{export_plugin, Host, Manifest, Plugin};

pub use config::{config_schema, net_allow_entry, Config, CAPS, DECLINE, OPERATOR_CAPS};
pub use finish::{
    builtins_inventory, check_report, parse_inventory, Builtin, BUILTINS_INVENTORY, CHECK_REPORT,
    MAX_QUERY_MATCHES,
};
pub use handler::{
    AilangHandler, ANSWER_MARGIN, ARCHIVE_CHANGED, CHECK, CLI, CLI_OPS, DISCOVER, DOT_DOT,
    HARD_CAP, NO_CORPUS, RESTART, RUN, RUN_ENV, RUN_NET, UNRUNNABLE, WRITE_FLAG,
};
pub use policy::{toml_string, verify_summary, PolicySpec, Verified, DENY_WRITE};
pub use process::OUTPUT_CAP;
pub use run::{parse as parse_run_outcome, Envelope};

/// The transition documents this plugin ships, by file name.
const TRANSITIONS: [(&str, &str); 5] = [
    (
        "ailang-check.json",
        include_str!("../../../transitions/se-tools/ailang-check.json"),
    ),
    (
        "ailang-run.json",
        include_str!("../../../transitions/se-tools/ailang-run.json"),
    ),
    (
        "builtins-search.json",
        include_str!("../../../transitions/se-tools/builtins-search.json"),
    ),
    (
        "examples-search.json",
        include_str!("../../../transitions/se-tools/examples-search.json"),
    ),
    (
        "ailang-cli.json",
        include_str!("../../../transitions/se-tools/ailang-cli.json"),
    ),
];

/// The plugin (see the crate docs).
pub struct AilangPlugin;

impl Plugin for AilangPlugin {
    type Handler = AilangHandler;

    fn manifest() -> Result<Manifest, String> {
        let transitions = embedded_transitions(&TRANSITIONS)?;
        Ok(Manifest {
            name: "ailang".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            abi: handler_kit::ABI_VERSION,
            description: "Type-checks, runs and searches AILANG in the episode's worktree with the operator's ailang binary (ailang-check, ailang-run, builtins-search, examples-search, ailang-cli).".into(),
            effects: handler_kit::declared_effects!(),
            transitions,
            finish: vec![CHECK_REPORT.into(), BUILTINS_INVENTORY.into()],
            config_schema: config_schema(),
        })
    }

    fn new(config: Value, host: Host) -> Result<AilangHandler, String> {
        AilangHandler::new(Config::parse(&config)?, host)
    }
}

export_plugin!(AilangPlugin);
