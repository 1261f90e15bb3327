//! worldd's dialect: the few textual conventions that every layer must read and write the
//! same way, whichever side of the plugin boundary it sits on.
//!
//! | module | convention | used by |
//! |---|---|---|
//! | [`glob`] | the one glob dialect (`*`, `?`, `**`; `[ ] { } \` reserved) | the plan language's `path-glob` rule, the workspace plugin's deny globs |
//! | [`quote`] | JSON string literals, values quoted in refusals (escaped, cut at 256 bytes), and where a text shown only in part is cut ([`quote::head`]: never inside a character) | refusal texts of plans, plugins and the daemon; policy digests; every message the daemon, the broker or a plugin cuts |
//! | [`json`] | JSON text as serde_json reads it, but an object naming a member twice is refused; compact JSON as serde_json writes it, its strings quoted by [`quote`] | the daemon's MCP bodies, the registry plugin's bundle files; the requests the daemon sends plugins |
//! | [`names`] | a transition id's MCP tool name and the 64-byte rule | the daemon's MCP surface, the registry plugin's bundle check |
//!
//! It is a crate of its own, depending on serde_json alone, because its users cannot share any
//! other: plugins never depend on broker-core or the daemon, the daemon should not depend on a
//! plugin authoring kit for one function, and the ABI crate holds the ABI only. Two copies of
//! a convention drift; one crate cannot.
//!
//! ```
//! assert!(dialect::glob::matches("docs/**/*.md", "docs/a/b.md"));
//! assert_eq!(dialect::quote::quote("say \"hi\"\n"), r#""say \"hi\"\n""#);
//! assert_eq!(dialect::names::mcp_name("tools.echo"), "tools_decho");
//! ```

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
// A crate third-party plugin authors build on: every public item is documented.
#![deny(missing_docs)]

pub mod glob;
pub mod json;
pub mod names;
pub mod quote;
