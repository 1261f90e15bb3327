//! A panic whose payload panics again when it is dropped (`std::panic::panic_any` of such a
//! value: plain safe Rust). The adapters caught the first panic, then dropped its payload
//! outside the guard: the second panic unwound out of the adapter, across the `extern "C"`
//! boundary, and aborted the daemon with every episode's calls in flight. Each adapter now
//! drops the payload inside its guard, and answers as for any panic.

use handler_api::serde_json::{json, Value};
use handler_api::{
    execute_json, finish_json, manifest_json, preflight_json, EffectHandler, FinishInput, Host,
    JsonObject, Manifest, Outcome, Plugin, Preflight, Request,
};

/// A panic payload whose drop panics.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("the panic payload's drop panicked")
    }
}

struct Bombing;

impl EffectHandler for Bombing {
    fn execute(&self, _request: Request) -> Outcome {
        std::panic::panic_any(Bomb)
    }
    fn preflight(&self, _request: &Request) -> Preflight {
        std::panic::resume_unwind(Box::new(Bomb))
    }
    fn finish(&self, _name: &str, _input: FinishInput) -> Result<JsonObject, String> {
        std::panic::panic_any(Bomb)
    }
}

impl Plugin for Bombing {
    type Handler = Bombing;
    fn manifest() -> Result<Manifest, String> {
        std::panic::panic_any(Bomb)
    }
    fn new(_config: Value, _host: Host) -> Result<Bombing, String> {
        Ok(Bombing)
    }
}

fn request() -> String {
    json!({
        "invocationId": "i",
        "episode": "e",
        "effect": "Bomb.Go",
        "scope": "none",
        "cost": 1,
        "payload": {"op": "go"},
    })
    .to_string()
}

#[test]
fn a_panic_payload_whose_drop_panics_stays_inside_every_adapter() {
    let out: Value =
        handler_api::serde_json::from_str(&execute_json(&Bombing, &request())).unwrap();
    assert_eq!(out["status"], "failed");
    assert_eq!(
        out["message"],
        "handler panicked: a non-string panic payload"
    );
    assert_eq!(preflight_json(&Bombing, &request()), None);
    let input = json!({"args": {}, "output": {"ok": true}}).to_string();
    assert_eq!(
        finish_json(&Bombing, "f", &input),
        Err("finish function panicked: a non-string panic payload".to_owned())
    );
    let manifest: Value = handler_api::serde_json::from_str(&manifest_json::<Bombing>()).unwrap();
    let error = manifest["error"].as_str().unwrap();
    assert!(
        error.starts_with("manifest panicked at handler-api/tests/panic_payload.rs:")
            && error.ends_with(": a non-string panic payload"),
        "{error}"
    );
}
