//! The FFI-safe surface: the root module, the host callback table and the
//! handler trait object. Everything here is checked by abi_stable's load-time
//! layout comparison; everything domain-shaped crosses as JSON text instead.
//!
//! Stability rule: fields and methods are only ever *appended* below the
//! `#[sabi(last_prefix_field)]` marker, never reordered, retyped or removed.
//! abi_stable accepts a library whose tables have *more* entries than the host's
//! (an older daemon sees the extra ones as absent) but refuses one with fewer
//! ("too many fields … 5 expected, 4 found"): a daemon that gains an entry cannot
//! load plugins built before it. So every new entry ships in a new minor version
//! of handler-api, and plugins built against the previous one are refused with
//! one line naming both versions.

// `#[sabi_trait]` (abi_stable_derive 0.11) expands to impls inside a generated
// const block, which rustc's `non_local_definitions` lint flags. The code is
// abi_stable's, not ours, and is correct; silence the lint for this module.
#![allow(non_local_definitions)]

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    package_version_strings, sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, ROption, RResult, RStr, RString},
    StableAbi,
};

/// Version of the handler ABI (the meaning of the JSON documents and of the
/// entries below). A plugin whose `abi_version()` differs is refused at load
/// time, in addition to abi_stable's own layout check.
///
/// 2: the host callbacks are `unsafe extern "C" fn` (calling one with a context that is not
/// the table's own is undefined behaviour, so safe plugin code can no longer do it).
/// 3: the handler has a `preflight` entry: it may decline a request before the broker spends
/// budget on it.
pub const ABI_VERSION: u32 = 3;

/// The root module every plugin exports (through [`crate::export_plugin!`]).
///
/// A prefix type: the daemon reaches it through [`PluginModRef`] (fields are only appended:
/// see the module's stability rule).
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
pub struct PluginMod {
    /// The [`ABI_VERSION`] the plugin was built with.
    pub abi_version: extern "C" fn() -> u32,
    /// The plugin's [`crate::Manifest`] as JSON. On failure the plugin returns
    /// `{"error":"…"}` instead (see [`crate::LoadedPlugin::manifest`]).
    pub manifest: extern "C" fn() -> RString,
    /// Builds a handler from the operator's config (JSON text; empty text
    /// means `{}`) and the host's callback table. `RErr` carries a one-line
    /// reason the daemon prints before refusing to start.
    #[sabi(last_prefix_field)]
    pub new_handler:
        extern "C" fn(config: RStr<'_>, host: HostCallbacksRef) -> RResult<HandlerBox, RString>,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "worldd_plugin";
    const NAME: &'static str = "worldd_plugin";
    // handler-api's own package version: abi_stable refuses a plugin built
    // against an incompatible handler-api (for 0.y versions, another minor).
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// Services the daemon offers to a plugin, as a table of C function pointers.
///
/// `context` is opaque host data handed back unchanged to every callback. The
/// host guarantees that the table, `context` and the functions stay valid and
/// are safe to call from any thread for as long as the process lives (plugins
/// are never unloaded, so in practice the table is created once at start-up
/// and leaked). Plugins use the safe [`crate::Host`] wrapper; hosts build the
/// table with [`crate::host_callbacks`].
///
/// The callbacks are `unsafe`: the host dereferences `context`, so calling one
/// with anything but the `context` of the same table is undefined behaviour.
/// Only [`crate::Host`] calls them, always with the table's own context.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HostCallbacksRef)))]
pub struct HostCallbacks {
    /// Opaque host data passed to every callback.
    pub context: *const (),
    /// Log one message at a [`crate::LogLevel`] (as `u8`).
    pub log: unsafe extern "C" fn(context: *const (), level: u8, message: RStr<'_>),
    /// Publish a transition bundle (JSON text) into the registry; returns the
    /// host's answer (JSON text) or an error message. Only the plugin that
    /// handles `Registry.Publish` gets a host that accepts this; every other
    /// plugin gets an error saying publishing is not available to it.
    #[sabi(last_prefix_field)]
    pub publish: unsafe extern "C" fn(
        context: *const (),
        bundle_json: RStr<'_>,
    ) -> RResult<RString, RString>,
}

/// Regression tests: safe plugin code cannot call a host callback with a context of its own
/// making (before ABI 2 it could, and the daemon dereferenced whatever it was given).
///
/// Calling a callback needs `unsafe`:
///
/// ```compile_fail,E0133
/// fn forge(host: handler_api::HostCallbacksRef) {
///     let bogus = 16 as *const ();
///     (host.log())(bogus, 0, handler_api::abi_stable::std_types::RStr::from_str("x"));
/// }
/// ```
///
/// and so does wrapping a table in a [`crate::Host`], whose safe methods call them:
///
/// ```compile_fail,E0133
/// fn forge(table: handler_api::HostCallbacksRef) -> handler_api::Host {
///     handler_api::Host::from_callbacks(table)
/// }
/// ```
///
/// (the same code compiles inside `unsafe`, so these fail for the reason they name):
///
/// ```
/// fn forge(table: handler_api::HostCallbacksRef) -> handler_api::Host {
///     // SAFETY: not called; this only shows what compiles.
///     unsafe { handler_api::Host::from_callbacks(table) }
/// }
/// fn call(host: handler_api::HostCallbacksRef) {
///     // SAFETY: not called; this only shows what compiles.
///     unsafe { (host.log())(host.context(), 0, handler_api::abi_stable::std_types::RStr::from_str("x")) };
/// }
/// ```
#[cfg(doctest)]
pub struct SafeCodeCannotForgeAHostCallbackContext;

/// The handler object a plugin constructs; requests and outputs are JSON text.
///
/// Implementations must never unwind out of a method (a panic crossing the
/// boundary aborts the daemon); the adapter behind [`crate::export_plugin!`]
/// catches every panic.
#[sabi_trait]
pub trait Handler: Send + Sync {
    /// Execute one effect. `request_json` is a [`crate::Request`]; the answer
    /// is an [`crate::Outcome`].
    fn execute(&self, request_json: RStr<'_>) -> RString;

    /// Run the pure finish function `name` on a [`crate::FinishInput`];
    /// `ROk` holds the finish output object.
    #[sabi(last_prefix_field)]
    fn finish(&self, name: RStr<'_>, input_json: RStr<'_>) -> RResult<RString, RString>;

    /// Look at a [`crate::Request`] before the broker spends budget on it (ABI 3). `RNone`
    /// lets the request go on to admission and `execute`; `RSome` holds a
    /// [`crate::Preflight::Decline`] output object (JSON text): the request is committed as
    /// declined and never executed. The default never declines.
    fn preflight(&self, request_json: RStr<'_>) -> ROption<RString> {
        let _ = request_json;
        ROption::RNone
    }
}

/// The owned, type-erased handler object returned by `new_handler`.
pub type HandlerBox = Handler_TO<'static, RBox<()>>;

// abi_stable does not derive Debug for prefix references; a pointer is all
// there is to show.
impl std::fmt::Debug for PluginModRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PluginModRef").field(&self.0).finish()
    }
}

impl std::fmt::Debug for HostCallbacksRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("HostCallbacksRef").field(&self.0).finish()
    }
}
