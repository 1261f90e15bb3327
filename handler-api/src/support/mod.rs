//! Helpers for plugin authors: the request checks, output stamps, config
//! parsing and identity (`tool`, `policy_digest`) that worldd's own plugins
//! share.
//!
//! **Not part of the stable ABI.** Nothing here crosses the plugin boundary:
//! it is ordinary Rust code compiled into your plugin, a convenience. The
//! stability promise of the crate docs covers the FFI tables, [`ABI_VERSION`]
//! and the JSON documents only; this module may change in any release, and
//! a plugin built against one version keeps working with a daemon built
//! against another whatever happens here (abi_stable checks only the types
//! reachable from [`PluginMod`]). Use it, copy from it, or ignore it.
//!
//! - [`request`]: the checks a worktree-scoped request goes through before
//!   anything runs (scope, payload object, case-variant key aliases, op
//!   allowlist, the bound worktree), with worldd's texts, e.g.
//!   `broker: Workspace.Read refuses op "write": not in this effect's op allowlist`.
//! - [`output`]: outputs stamped with `tool` and `policy_digest`, the
//!   `{"ok":false,"refused":…}` refusal, Go-style errno texts.
//! - [`config`]: the operator's config object (`null` = `{}`, unknown keys
//!   refused) and JSON string literals for a policy's canonical JSON.
//! - [`manifest`]: embedded transition documents, parsed.
//! - [`names`]: the MCP name of a transition id and the 64-byte rule.
//! - `identity` (cargo feature `identity`, off by default because it adds
//!   the `sha2` and `libc` dependencies): the `tool` ref, the SHA-256 of the
//!   plugin's own library found with `dladdr` (`tool_ref!`),
//!   and the SHA-256 helpers behind `policy_digest`.
//! - `protect` (feature `protect`): when two path names count as the same name (NFKC, case
//!   folding, ignorable characters dropped) and which names are named like `.git`.
//! - `child` (feature `child`, Linux): child processes in a process group of their own, led
//!   by a watchdog, that die with the call and with the daemon.
//!
//! [`ABI_VERSION`]: crate::ABI_VERSION
//! [`PluginMod`]: crate::PluginMod

#[cfg(feature = "child")]
pub mod child;
pub mod config;
#[cfg(feature = "identity")]
pub mod identity;
pub mod manifest;
pub mod names;
pub mod output;
#[cfg(feature = "protect")]
pub mod protect;
pub mod request;

#[cfg(test)]
mod tests;
