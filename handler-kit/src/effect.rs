//! Effects declared once, next to the code that executes them, and collected into the
//! manifest.
//!
//! [`effect!`](macro@crate::effect) declares an effect's name as a constant (for the handler's
//! `match`) and registers its class, op allowlist and description (its doc comment) with
//! [`inventory`]. [`declared_effects!`](crate::declared_effects) collects the calling crate's
//! registrations into [`Manifest::effects`](crate::Manifest::effects), and
//! [`declared!`](crate::declared) finds one by name, so the op allowlist a handler checks is
//! the one its manifest publishes:
//!
//! ```
//! handler_kit::effect! {
//!     /// Return a greeting.
//!     pub const GREET = "Hello.Greet" { class: Read, ops: &["greet"] }
//! }
//!
//! let effects = handler_kit::declared_effects!();
//! assert_eq!(effects.len(), 1);
//! assert_eq!(effects[0].name, GREET);
//! assert_eq!(effects[0].ops, ["greet"]);
//! assert_eq!(effects[0].description, "Return a greeting.");
//! assert_eq!(handler_kit::declared!(GREET).map(|e| e.ops), Some(&["greet"][..]));
//! ```
//!
//! Registration does not cross the plugin boundary: each plugin library has its own registry
//! (a `cdylib` exports nothing but its root module). Where several plugin crates are linked
//! into one program (tests that link their rlibs), each crate still sees only its own
//! declarations: a registration records the module path it was declared in, and the macros
//! keep those of the calling crate.

use handler_api::{EffectClass, EffectDecl};

/// One registered effect (built by [`effect!`](macro@crate::effect); not constructed by hand).
#[derive(Debug)]
pub struct Effect {
    /// `module_path!()` where the effect was declared; its first segment names the crate.
    pub module: &'static str,
    /// `file!()` and `line!()` of the [`effect!`](macro@crate::effect) invocation, and the
    /// declaration's place in it: the manifest lists effects in this order.
    pub file: &'static str,
    /// See [`Effect::file`].
    pub line: u32,
    /// See [`Effect::file`].
    pub index: u32,
    /// The effect name, as in grants and plans (`Workspace.Read`).
    pub name: &'static str,
    /// Whether the effect changes anything (published to agents as MCP tool annotations).
    pub class: EffectClass,
    /// The payload `op` values the effect accepts; empty when its payload has no `op`.
    pub ops: &'static [&'static str],
    /// The lines of the declaration's doc comment: the manifest's description.
    pub doc: &'static [&'static str],
}

inventory::collect!(Effect);

/// The crate a module path belongs to (its first segment).
fn crate_of(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

impl Effect {
    /// The doc comment as one line: each line trimmed, joined with spaces.
    pub fn description(&self) -> String {
        self.doc
            .iter()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The manifest entry.
    pub fn decl(&self) -> EffectDecl {
        EffectDecl {
            name: self.name.to_string(),
            class: self.class,
            ops: self.ops.iter().map(|o| o.to_string()).collect(),
            description: self.description(),
        }
    }
}

/// The effects declared in the crate of `module` (a `module_path!()`), in declaration order.
/// Prefer [`declared_effects!`](crate::declared_effects), which passes the caller's module.
pub fn declared_in(module: &str) -> Vec<&'static Effect> {
    let krate = crate_of(module);
    let mut effects: Vec<&'static Effect> = inventory::iter::<Effect>
        .into_iter()
        .filter(|e| crate_of(e.module) == krate)
        .collect();
    effects.sort_by_key(|e| (e.file, e.line, e.index));
    effects
}

/// The manifest entries of the effects declared in the crate of `module`.
pub fn decls(module: &str) -> Vec<EffectDecl> {
    declared_in(module).into_iter().map(Effect::decl).collect()
}

/// The effect `name` declared in the crate of `module`.
pub fn find(module: &str, name: &str) -> Option<&'static Effect> {
    let krate = crate_of(module);
    inventory::iter::<Effect>
        .into_iter()
        .find(|e| e.name == name && crate_of(e.module) == krate)
}

/// Declare effects: for each, a `&str` constant holding its name, and a registration of its
/// class, op allowlist and description (the doc comment), which
/// [`declared_effects!`](crate::declared_effects) collects into the manifest.
///
/// ```
/// handler_kit::effect! {
///     /// Read one file of the worktree.
///     pub const READ = "Demo.Read" { class: Read, ops: &["read"] }
///     /// Write one file of the worktree.
///     pub const WRITE = "Demo.Write" { class: Write, ops: &["write", "edit"] }
/// }
/// assert_eq!(READ, "Demo.Read");
/// ```
///
/// `class` is an [`EffectClass`] variant (`Read`, `Write`, `Unknown`); `ops` any constant
/// expression of type `&'static [&'static str]`.
#[macro_export]
macro_rules! effect {
    (@at $index:expr;) => {};
    (
        @at $index:expr;
        $(#[doc = $doc:literal])*
        $vis:vis const $ident:ident = $name:literal { class: $class:ident, ops: $ops:expr $(,)? }
        $($rest:tt)*
    ) => {
        $(#[doc = $doc])*
        $vis const $ident: &str = $name;
        $crate::__private::inventory::submit! {
            $crate::effect::Effect {
                module: ::core::module_path!(),
                file: ::core::file!(),
                line: ::core::line!(),
                index: $index,
                name: $name,
                class: $crate::EffectClass::$class,
                ops: $ops,
                doc: &[$($doc),*],
            }
        }
        $crate::effect!(@at $index + 1; $($rest)*);
    };
    ($($effects:tt)*) => {
        $crate::effect!(@at 0; $($effects)*);
    };
}

/// The [`EffectDecl`]s of every effect the calling crate declared with
/// [`effect!`](macro@crate::effect), in declaration order: the manifest's `effects`.
#[macro_export]
macro_rules! declared_effects {
    () => {
        $crate::effect::decls(::core::module_path!())
    };
}

/// The [`Effect`] the calling crate declared under `name` (an expression of type `&str`), if
/// any: `Option<&'static Effect>`.
#[macro_export]
macro_rules! declared {
    ($name:expr) => {
        $crate::effect::find(::core::module_path!(), $name)
    };
}
