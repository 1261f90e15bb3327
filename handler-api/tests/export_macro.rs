//! `export_plugin!` in a crate of its own: the header it exports is the one
//! abi_stable's loader reads, and the module behind it catches panics.

use handler_api::serde_json::{json, Value};
use handler_api::{
    export_plugin, EffectClass, EffectDecl, EffectHandler, Host, LoadedPlugin, Manifest, Outcome,
    Plugin, PluginModRef, Request,
};

struct Boom;

impl EffectHandler for Boom {
    fn execute(&self, request: Request) -> Outcome {
        panic!("exploded on {}", request.effect)
    }
}

struct BoomPlugin;

impl Plugin for BoomPlugin {
    type Handler = Boom;
    fn manifest() -> Result<Manifest, String> {
        Ok(Manifest {
            name: "boom".into(),
            version: "0.0.0".into(),
            effects: vec![EffectDecl {
                name: "Boom.Go".into(),
                class: EffectClass::Unknown,
                ops: vec!["go".into()],
                description: String::new(),
            }],
            ..Manifest::default()
        })
    }
    fn new(_config: Value, _host: Host) -> Result<Boom, String> {
        Ok(Boom)
    }
}

export_plugin!(BoomPlugin);

#[test]
fn exported_header_initialises_and_its_module_catches_panics() {
    // What the daemon does after dlopen + dlsym, minus the dlopen.
    let module: PluginModRef = __WORLDD_PLUGIN_ROOT_MODULE
        .init_root_module::<PluginModRef>()
        .expect("the exported header passes abi_stable's checks");
    let plugin = LoadedPlugin::from_module(module);
    assert_eq!(plugin.manifest().unwrap().name, "boom");
    let handler = plugin
        .new_handler(&json!({}), Host::noop().callbacks())
        .unwrap();
    let outcome = handler.execute(&Request {
        invocation_id: "i".into(),
        episode: "e".into(),
        worktree: None,
        effect: "Boom.Go".into(),
        scope: "none".into(),
        cost: 1,
        payload: json!({"op": "go"}),
        deadline_ms: 0,
    });
    assert_eq!(
        outcome,
        Outcome::failed("handler panicked: exploded on Boom.Go")
    );
}
