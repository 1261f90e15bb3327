//! A handler whose `Drop` panics, dropped by a host through the FFI entries (abi_stable's
//! `destroy_box`, an `extern "C"` function). A test binary of its own: the panic hook says a
//! caught panic through the first host a process gives a plugin, which must be this test's.

use std::sync::{Arc, Mutex};

use handler_api::serde_json::Value;
use handler_api::{
    plugin_module, EffectHandler, Host, HostServices, LoadedPlugin, LogLevel, Manifest, Outcome,
    Plugin, Request,
};

/// A handler that panics when it is dropped.
struct Sticky;

/// Where `Sticky`'s drop panics: the line after the next one's.
const DROP_BOOM_LINE: u32 = line!() + 4;

impl Drop for Sticky {
    fn drop(&mut self) {
        panic!("drop boom")
    }
}

impl EffectHandler for Sticky {
    fn execute(&self, _request: Request) -> Outcome {
        Outcome::failed("unused")
    }
}

struct StickyPlugin;

impl Plugin for StickyPlugin {
    type Handler = Sticky;
    fn manifest() -> Result<Manifest, String> {
        Ok(Manifest::default())
    }
    fn new(_config: Value, _host: Host) -> Result<Sticky, String> {
        Ok(Sticky)
    }
}

/// What the plugin logged through its host.
#[derive(Default)]
struct Logged(Mutex<Vec<(LogLevel, String)>>);

impl HostServices for Logged {
    fn log(&self, level: LogLevel, message: &str) {
        self.0.lock().unwrap().push((level, message.to_owned()));
    }
}

/// The panic crossed `destroy_box` and aborted the host: a daemon that dropped such a handler
/// (at shutdown, or when another plugin stopped start-up) died with exit 1 and a backtrace,
/// hiding why it stopped.
#[test]
fn a_panic_in_a_handlers_drop_is_caught_and_said_not_an_abort() {
    let logged = Arc::new(Logged::default());
    let host = Host::from_services(logged.clone());
    let handler = LoadedPlugin::from_module(plugin_module::<StickyPlugin>())
        .new_handler(&Value::Object(Default::default()), host.callbacks())
        .unwrap();
    drop(handler);
    assert_eq!(
        *logged.0.lock().unwrap(),
        [(
            LogLevel::Warn,
            format!(
                "panicked at {}:{DROP_BOOM_LINE}:9: drop boom (the handler is dropped no further)",
                file!()
            )
        )]
    );
}
