//! The stable ABI between `worldd` and its effect-handler plugins.
//!
//! An **effect handler** executes the effects the broker admits: it reads a
//! file, writes one, runs a checker, commits a worktree. Handlers live in
//! **plugins**, dynamic libraries (`cdylib`) the daemon loads at start-up. This
//! crate is all a plugin depends on: a root module checked by
//! [abi_stable](https://docs.rs/abi_stable) at load time, JSON documents for
//! everything domain-shaped, a safe trait to implement, and a macro that
//! exports it with every entry point guarded against panics.
//!
//! This crate is the ABI and nothing else. Plugin authors normally depend on **`handler-kit`**
//! instead, which re-exports this crate and adds what worldd's own plugins share beyond the
//! ABI: effects declared once next to their code and collected into the manifest, request
//! checks, output stamps, config parsing and identity. Its crate docs hold the "write your
//! first handler" guide.
//!
//! A plugin on the ABI alone: a [`Plugin`] (manifest + constructor), an [`EffectHandler`]
//! (what the effect does), and [`export_plugin!`]:
//!
//! ```rust
//! use handler_api::serde_json::{json, Value};
//! use handler_api::{
//!     export_plugin, EffectClass, EffectDecl, EffectHandler, Host, JsonObject, Manifest,
//!     Outcome, Plugin, Request,
//! };
//!
//! pub struct HelloPlugin;
//! pub struct Greeter;
//!
//! impl Plugin for HelloPlugin {
//!     type Handler = Greeter;
//!
//!     fn manifest() -> Result<Manifest, String> {
//!         Ok(Manifest {
//!             name: "hello".into(),
//!             version: env!("CARGO_PKG_VERSION").into(),
//!             effects: vec![EffectDecl {
//!                 name: "Hello.Greet".into(),
//!                 class: EffectClass::Read,
//!                 ops: vec!["greet".into()],
//!                 description: "Return a greeting.".into(),
//!             }],
//!             config_schema: json!({"type": "object", "additionalProperties": false}),
//!             ..Manifest::default()
//!         })
//!     }
//!
//!     fn new(config: Value, _host: Host) -> Result<Greeter, String> {
//!         match config.as_object() {
//!             Some(c) if c.is_empty() => Ok(Greeter),
//!             _ => Err("hello takes no config".into()),
//!         }
//!     }
//! }
//!
//! impl EffectHandler for Greeter {
//!     fn execute(&self, request: Request) -> Outcome {
//!         let Some(name) = request.payload.get("name").and_then(Value::as_str) else {
//!             return Outcome::failed("payload lacks string \"name\"");
//!         };
//!         let mut output = JsonObject::new();
//!         output.insert("ok".into(), json!(true));
//!         output.insert("greeting".into(), json!(format!("hello, {name}")));
//!         Outcome::ok(output)
//!     }
//! }
//!
//! export_plugin!(HelloPlugin);
//! #
//! # fn main() {
//! #     // The same entry points the daemon calls, driven in-process.
//! #     let plugin = handler_api::LoadedPlugin::from_module(handler_api::plugin_module::<HelloPlugin>());
//! #     assert_eq!(plugin.manifest().unwrap().name, "hello");
//! #     let handler = plugin.new_handler(&json!({}), Host::noop().callbacks()).unwrap();
//! #     let request = Request {
//! #         invocation_id: "inv-1".into(), episode: "demo".into(), worktree: None,
//! #         effect: "Hello.Greet".into(), scope: "any".into(), cost: 1,
//! #         payload: json!({"op": "greet", "name": "Ada"}), deadline_ms: 10_000,
//! #     };
//! #     let Outcome::Ok { output } = handler.execute(&request) else { panic!() };
//! #     assert_eq!(output["greeting"], "hello, Ada");
//! #     assert!(plugin.new_handler(&json!({"greting": "hi"}), Host::noop().callbacks()).is_err());
//! # }
//! ```
//!
//! # The JSON documents
//!
//! Everything domain-shaped crosses the boundary as UTF-8 JSON text, typed on
//! each side by the serde types of this crate. Unknown fields are ignored on
//! both sides.
//!
//! - [`Manifest`] `{"name", "version", "abi", "description", "effects":
//!   [{"name", "class", "ops", "description"}], "transitions": [documents],
//!   "finish": [names], "configSchema"}`. `transitions` are the default
//!   `world/transition/v1` documents the daemon publishes into its registry
//!   at start-up; `finish` names the functions [`EffectHandler::finish`]
//!   serves.
//! - [`Request`] `{"invocationId", "episode", "worktree"?, "effect", "scope",
//!   "cost", "payload", "deadlineMs"}`. `worktree` is the absolute path of the
//!   episode's worktree, present when the scope is `worktree`; confine
//!   yourself to it.
//! - [`Outcome`] `{"status":"ok","output":{…}}` |
//!   `{"status":"failed","message":"…"}` |
//!   `{"status":"indeterminate","message":"…"}`.
//! - [`FinishInput`] `{"args": {…}, "output": {…}}` → a finish output object.
//! - A [`Preflight`] decline: the declining answer object
//!   (`{"ok":false,"refused":"…",…}`); no text at all means proceed.
//!
//! # Effect classes
//!
//! Each effect declares an [`EffectClass`]: `read` (observes, changes nothing),
//! `write` (changes state) or `unknown` (runs code whose effects the handler
//! cannot bound). The daemon publishes the class to agents (MCP tool
//! annotations) and calls a `read` effect before its intent is durable (a
//! crash then leaves no trace of it), so declare it truthfully.
//!
//! # Outcomes: ok, failed, indeterminate
//!
//! - **ok**: the effect ran. Its output object is what the agent sees. Your
//!   own policy saying no is *also* `ok`, with an output like
//!   `{"ok":false,"refused":"write .git/config: .git/ is read-only to the lane's tools"}`:
//!   the effect ran and refused, the agent can read why and adapt.
//! - **failed**: the effect did not complete and you know it: a payload the
//!   plan should never have built, an op outside the effect's allowlist, an
//!   operator gate, an I/O error part-way. The budget stays debited and the
//!   agent sees only the effect status; the message goes to the daemon's
//!   log (`effect failed: <message>`), not into the effect record.
//! - **indeterminate**: you cannot tell whether the effect happened (a remote
//!   call timed out after the request was sent). The daemon fails closed:
//!   the effect counts as possibly applied and is never retried
//!   automatically. Prefer `failed` whenever you *know* nothing was changed.
//!
//! # Panics
//!
//! A panic must never cross an `extern "C"` boundary: Rust aborts the whole
//! process when it does. [`export_plugin!`] wraps every entry in
//! [`std::panic::catch_unwind`]: a panic in `execute` becomes
//! `failed("handler panicked: <message>")`, in `new`/`finish` an error, in
//! `manifest` a load failure. A malformed request becomes `failed` too. A
//! panic in `preflight`, or a request it cannot read, counts as
//! [`Preflight::Proceed`]: preflight may only spare budget, and `execute`
//! answers for everything.
//! Handler state a panic interrupted is not rolled back, so still avoid
//! panicking on input. Building with `panic = "abort"` disables all of this.
//!
//! # Calls and threads
//!
//! Calls are synchronous. The daemon runs each on a blocking thread with a
//! deadline ([`Request::deadline_ms`]); calls from different episodes may run
//! concurrently on one handler object (it is `Send + Sync`), calls within an
//! episode never do. Log through [`Host::log`]: a plugin has its own copy of
//! every static (loggers, `tracing` subscribers), so the daemon's logger is
//! not visible to it otherwise.
//!
//! # Stability promise
//!
//! - [`ABI_VERSION`] (now 3) names the meaning of the entry points and the
//!   JSON documents. The daemon refuses a plugin reporting another one.
//!   Version 2 (handler-api 0.2) made the host callbacks `unsafe extern "C"
//!   fn`: safe plugin code can no longer call one with a forged context and
//!   crash the daemon. Version 3 (handler-api 0.3) added the handler's
//!   `preflight` entry ([`EffectHandler::preflight`]). Rebuild older plugins
//!   against 0.3; nothing else in the JSON documents changed.
//! - abi_stable checks at load time, before any plugin code runs, that the
//!   plugin's handler-api version is compatible (same `0.y` minor) and that
//!   the layout of every type reachable from [`PluginMod`] matches. A mismatch
//!   stops start-up with one line naming the file and the cause, e.g.
//!   `plugin /x/libfoo.so: incompatible ABI: handler-api 0.3.0 expected, 0.2.0 found;
//!   rebuild the plugin against handler-api 0.3.0, the version this worldd expects`.
//! - The FFI tables ([`PluginMod`], [`HostCallbacks`], [`Handler`]) only ever
//!   grow by *appending* entries after their last prefix field, and every new
//!   entry comes with a new `0.y` minor: abi_stable refuses a plugin whose
//!   tables have fewer entries than the daemon's. The JSON documents only ever
//!   gain optional fields. A plugin built against handler-api 0.3.x loads in
//!   every daemon built against 0.3.y.
//! - handler-api's version is its own (it versions the ABI, not the daemon).
//! - Plugins are trusted code: abi_stable checks layouts, not behaviour, and a
//!   plugin is never unloaded. What the daemon can promise is that provenance
//!   names them: every effect record a plugin ran carries the plugin's name,
//!   version and the sha256 of the library bytes the daemon loaded.
//!
//! # For the daemon
//!
//! [`load_plugin`] / [`LoadedPlugin::load`] load one library (never
//! abi_stable's `RootModule::load_from_*`, which caches one module per type);
//! [`LoadedPlugin`] and [`LoadedHandler`] are safe, typed wrappers over the
//! entries; [`host_callbacks`] turns a [`HostServices`] implementation into the
//! callback table handed to [`LoadedPlugin::new_handler`].

// No unwrap or expect outside tests: a panic here is a bug, never an answer.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
// A crate third-party plugin authors build on: every public item is documented.
#![deny(missing_docs)]

mod abi;
mod answer;
mod caught;
mod host;
mod plugin;
mod types;

pub use abi::{
    Handler, HandlerBox, Handler_TO, HostCallbacks, HostCallbacksRef, PluginMod, PluginModRef,
    ABI_VERSION,
};
pub use host::{
    host_callbacks, load_plugin, HostServices, LoadError, LoadErrorKind, LoadedHandler,
    LoadedPlugin, MAX_ANSWER_BYTES,
};
pub use plugin::{
    execute_json, finish_json, manifest_json, new_handler_boxed, panic_text, plugin_module,
    preflight_json, EffectHandler, Host, Plugin, NEW_PANICKED, NO_PUBLISH,
};
pub use types::{
    EffectClass, EffectDecl, FinishInput, JsonObject, LogLevel, Manifest, Outcome, Preflight,
    Request,
};

/// The serde_json this crate's types use; plugins should use it (or the same
/// version) so that `Value` and [`JsonObject`] are the same types.
pub use serde_json;

/// abi_stable, for hosts that need its types directly.
pub use abi_stable;

/// Items the export macro needs; not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use abi_stable::library::{
        __call_root_module_loader, CheckTypeLayout, LibHeader, RootModuleResult,
    };

    /// The symbol abi_stable 0.11's loader looks up (its mangled root-module
    /// name). `export_plugin!` must spell it as a literal; a test checks it
    /// against `abi_stable::library::ROOT_MODULE_LOADER_NAME`.
    pub const ROOT_SYMBOL: &str = "_1as_0lib_1header_0root_bmodule_bloader";
}

/// Export a [`Plugin`] as this library's worldd root module.
///
/// Use it once, at the top level of a `cdylib` crate: `export_plugin!(MyPlugin);`.
/// It emits the static abi_stable's loader looks up, whose constructor returns
/// [`plugin_module::<MyPlugin>()`](plugin_module). Every entry of that module
/// (manifest, new_handler, preflight, execute, finish) catches panics; see the crate
/// docs. The plugin crate needs no direct abi_stable dependency.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        /// The abi_stable root-module header that worldd's loader looks up.
        #[doc(hidden)]
        // Must equal `$crate::__private::ROOT_SYMBOL` (an attribute needs a
        // literal); handler-api's tests pin it.
        #[unsafe(export_name = "_1as_0lib_1header_0root_bmodule_bloader")]
        pub static __WORLDD_PLUGIN_ROOT_MODULE: $crate::__private::LibHeader = {
            extern "C" fn __worldd_plugin_root_module() -> $crate::__private::RootModuleResult {
                // Catches a panic of the constructor and reports it as an error.
                $crate::__private::__call_root_module_loader($crate::plugin_module::<$plugin>)
            }
            // SAFETY: this is exactly what abi_stable's `#[export_root_module]`
            // expands to: the header describes `PluginModRef`, the type the
            // constructor returns, and asks the loader to check its layout.
            unsafe {
                $crate::__private::LibHeader::from_constructor::<$crate::PluginModRef>(
                    __worldd_plugin_root_module,
                    $crate::__private::CheckTypeLayout::Yes,
                )
            }
        };
    };
}

#[cfg(test)]
mod tests;
