//! A worldd plugin author's kit: everything beyond the ABI that worldd's own plugins share.
//!
//! [`handler_api`] is the ABI: the root module abi_stable checks at load time, the JSON
//! documents, the [`Plugin`] and [`EffectHandler`] traits and [`export_plugin!`]. This crate is
//! compiled into a plugin on top of it and re-exports what a plugin needs, so a plugin depends
//! on this crate alone. Nothing here crosses the plugin boundary: it changes no layout,
//! [`ABI_VERSION`] does not move with it, and a plugin built against one version of the kit
//! loads in every daemon of the same ABI.
//!
//! | module | what |
//! |---|---|
//! | [`effect`](mod@effect) | effects declared once next to their code ([`effect!`]), collected into the manifest ([`declared_effects!`]) with `inventory` |
//! | [`request`] | the checks a worktree-scoped request goes through before anything runs, with worldd's texts |
//! | [`output`] | outputs stamped with `tool` and `policy_digest`, `{"ok":false,"refused":…}`, Go-style errno texts |
//! | [`config`] | the operator's config object (`null` = `{}`, unknown keys refused) |
//! | [`manifest`] | embedded transition documents, parsed |
//! | [`file_identity`] (Unix) | `FileIdentity::of(&Metadata)`: whether a file is still the one that was read (device, inode, size, mtime, ctime); cap-std's `Metadata` too with feature `cap-std` |
//! | `identity` (feature `identity`) | the `tool` ref of the plugin's own library via `dladdr` (`tool_ref!`), SHA-256 helpers |
//! | `protect` (feature `protect`) | when two path names count as the same name (NFKC, case folding) |
//! | `beneath` (feature `protect`) | where a relative path really leads beneath a root: symlinks read, not followed; escapes and a changing tree said as such |
//! | `child` (feature `child`, Linux) | child processes in a process group that die with the call and with the daemon |
//! | `worktree` (feature `worktree`, Linux) | the worktree opened once by descriptor, never through a symlink at its place; programs started in it by that descriptor |
//!
//! plus [`dialect`], the conventions plugins share with the daemon: the glob dialect, JSON
//! string quoting, MCP tool names.
//!
//! # Write your first handler
//!
//! A plugin that serves one effect, `Hello.Greet`, answering
//! `{"ok":true,"greeting":"hello, <name>"}`.
//!
//! **1. A crate.** `Cargo.toml`:
//!
//! ```toml
//! [package]
//! name = "worldd-handler-hello"
//! version = "0.1.0"
//! edition = "2021"
//!
//! [lib]
//! name = "worldd_hello"
//! # cdylib: the file the daemon loads. rlib: lets your tests call the
//! # handler directly.
//! crate-type = ["cdylib", "rlib"]
//!
//! [dependencies]
//! # handler-kit is not on crates.io: point at a checkout of the worldd
//! # repository (inside that tree, e.g. "../../handler-kit").
//! handler-kit = { path = "/path/to/worldd/handler-kit" }
//!
//! # Only if this crate sits inside another Cargo workspace's directory
//! # but is not a member of it:
//! [workspace]
//! ```
//!
//! **2. The code.** `src/lib.rs`: the effect, declared once with [`effect!`] next to the
//! [`EffectHandler`] that executes it; a [`Plugin`] whose manifest collects the declared
//! effects with [`declared_effects!`]; and [`export_plugin!`]:
//!
//! ```rust
//! use handler_kit::request::{op_not_allowed, Quote};
//! use handler_kit::serde_json::{json, Value};
//! use handler_kit::{
//!     export_plugin, EffectHandler, Host, JsonObject, LogLevel, Manifest, Outcome, Plugin,
//!     Request,
//! };
//!
//! handler_kit::effect! {
//!     /// Return a greeting.
//!     pub const GREET = "Hello.Greet" { class: Read, ops: &["greet"] }
//! }
//!
//! pub struct HelloPlugin;
//!
//! pub struct Greeter {
//!     greeting: String,
//!     host: Host,
//! }
//!
//! impl Plugin for HelloPlugin {
//!     type Handler = Greeter;
//!
//!     fn manifest() -> Result<Manifest, String> {
//!         Ok(Manifest {
//!             name: "hello".into(),
//!             version: env!("CARGO_PKG_VERSION").into(),
//!             description: "Greets people.".into(),
//!             effects: handler_kit::declared_effects!(),
//!             config_schema: json!({
//!                 "type": "object",
//!                 "additionalProperties": false,
//!                 "properties": {"greeting": {"type": "string", "default": "hello"}}
//!             }),
//!             ..Manifest::default()
//!         })
//!     }
//!
//!     fn new(config: Value, host: Host) -> Result<Greeter, String> {
//!         // Validate the operator's config yourself, refusing unknown keys.
//!         let config = handler_kit::config::object(&config, "hello", &["greeting"])?;
//!         let greeting = match config.get("greeting") {
//!             None => "hello".to_string(),
//!             Some(Value::String(s)) => s.clone(),
//!             Some(_) => return Err("hello config: \"greeting\" must be a string".into()),
//!         };
//!         Ok(Greeter { greeting, host })
//!     }
//! }
//!
//! impl EffectHandler for Greeter {
//!     fn execute(&self, request: Request) -> Outcome {
//!         let Some(effect) = handler_kit::declared!(&request.effect) else {
//!             return Outcome::failed(format!("hello does not handle {}", request.effect));
//!         };
//!         // The plan sent something this effect never accepts: failed.
//!         let op = request.payload.get("op").and_then(Value::as_str).unwrap_or_default();
//!         if !effect.ops.contains(&op) {
//!             return op_not_allowed(effect.name, op, Quote::Json);
//!         }
//!         let Some(name) = request.payload.get("name").and_then(Value::as_str) else {
//!             return Outcome::failed("payload lacks string \"name\"");
//!         };
//!         let mut output = JsonObject::new();
//!         if name.is_empty() {
//!             // A policy refusal: the effect ran and said no. Still `ok`.
//!             output.insert("ok".into(), json!(false));
//!             output.insert("refused".into(), json!("greet: the name is empty"));
//!             return Outcome::ok(output);
//!         }
//!         self.host.log(LogLevel::Debug, "greeting someone");
//!         output.insert("ok".into(), json!(true));
//!         output.insert("greeting".into(), json!(format!("{}, {name}", self.greeting)));
//!         Outcome::ok(output)
//!     }
//! }
//!
//! export_plugin!(HelloPlugin);
//! #
//! # fn main() {
//! #     // The same entry points the daemon calls, driven in-process.
//! #     let plugin = handler_kit::LoadedPlugin::from_module(handler_kit::plugin_module::<HelloPlugin>());
//! #     let manifest = plugin.manifest().unwrap();
//! #     assert_eq!(manifest.name, "hello");
//! #     assert_eq!(manifest.effects.len(), 1);
//! #     assert_eq!(manifest.effects[0].name, "Hello.Greet");
//! #     assert_eq!(manifest.effects[0].description, "Return a greeting.");
//! #     let handler = plugin.new_handler(&json!({}), Host::noop().callbacks()).unwrap();
//! #     let mut request = Request {
//! #         invocation_id: "inv-1".into(), episode: "demo".into(), worktree: Some("/w/demo".into()),
//! #         effect: "Hello.Greet".into(), scope: "worktree".into(), cost: 1,
//! #         payload: json!({"op": "greet", "name": "Ada"}), deadline_ms: 10_000,
//! #     };
//! #     let Outcome::Ok { output } = handler.execute(&request) else { panic!() };
//! #     assert_eq!(output["greeting"], "hello, Ada");
//! #     request.payload = json!({"op": "shout", "name": "Ada"});
//! #     assert_eq!(handler.execute(&request), Outcome::failed(
//! #         "broker: Hello.Greet refuses op \"shout\": not in this effect's op allowlist"));
//! #     assert!(plugin.new_handler(&json!({"greting": "hi"}), Host::noop().callbacks()).is_err());
//! # }
//! ```
//!
//! The daemon checks every request's `op` against the manifest's allowlist before it calls
//! `execute`; the handler checks again (it must not trust its host), with the same list.
//!
//! **3. Build it.** `cargo build --release` writes `target/release/libworldd_hello.so`
//! (`.dylib` on macOS; `lib` + the `[lib] name` + the platform suffix). Inside the worldd
//! workspace a plain `cargo build` builds every plugin next to the `worldd` binary.
//!
//! **4. Load it.** The daemon scans `--plugin-dir` (default: the directory holding the `worldd`
//! executable) and loads every plugin library there; `--handler NAME` (repeatable, NAME =
//! [`Manifest::name`]) selects which ones a deployment enables. The operator's config for
//! your plugin is the `[plugins.NAME]` table of the daemon's TOML file (`worldd serve --config
//! world.toml`), with `--plugin-config NAME.KEY=VALUE` over it; it reaches [`Plugin::new`] as a
//! JSON object. `worldd handlers` lists what would load, with the effective config, and why not.
//!
//! **5. Test it.** Call your handler directly (the rlib), or go through the exact FFI entry
//! points without `dlopen`: `LoadedPlugin::from_module(plugin_module::<HelloPlugin>())` (as the
//! hidden `main` of the example above does). To test the real library, load the built file with
//! [`LoadedPlugin::load`].
//!
//! The ABI itself, the JSON documents, outcomes, panics and the stability promise are documented
//! in [`handler_api`].

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
// A crate third-party plugin authors build on: every public item is documented.
#![deny(missing_docs)]

pub mod config;
pub mod effect;
#[cfg(unix)]
pub mod file_identity;
pub mod manifest;
pub mod output;
pub mod request;

#[cfg(feature = "protect")]
pub mod beneath;
#[cfg(feature = "child")]
pub mod child;
#[cfg(feature = "identity")]
pub mod identity;
#[cfg(feature = "protect")]
pub mod protect;
#[cfg(feature = "worktree")]
pub mod worktree;

pub use dialect;
pub use handler_api;
pub use handler_api::serde_json;
pub use handler_api::{
    export_plugin, host_callbacks, plugin_module, EffectClass, EffectDecl, EffectHandler,
    FinishInput, Host, HostServices, JsonObject, LoadedHandler, LoadedPlugin, LogLevel, Manifest,
    Outcome, Plugin, Preflight, Request, ABI_VERSION, NO_PUBLISH,
};

/// Items the kit's macros need; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use inventory;
}

#[cfg(test)]
mod tests;
