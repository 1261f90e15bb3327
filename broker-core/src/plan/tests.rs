//! Unit tests of the plan language.

use super::effect::EffectSpec;
use super::message::{Template, Var, Vars};
use super::payload::{CopyArgs, PayloadSpec};
use super::spec::EffectChoice;
use super::*;

#[test]
fn plan_glob_matching() {
    assert!(glob_match("docs/**", "docs/a/b.md"));
    assert!(glob_match("docs/**", "docs/"));
    assert!(!glob_match("docs/**", "docs"));
    assert!(!glob_match("docs/**", "src/docs/a"));
    assert!(glob_match("docs/*.md", "docs/a.md"));
    assert!(!glob_match("docs/*.md", "docs/x/a.md"));
    assert!(glob_match("docs/**/*.md", "docs/x/y/a.md"));
    // `/**/` matches zero or more directories, as the workspace's deny globs do.
    assert!(glob_match("docs/**/*.md", "docs/a.md"));
    assert!(glob_match("a?c", "abc"));
    assert!(!glob_match("a?c", "a/c"));
    assert!(glob_match("", ""));
    assert!(!glob_match("", "a"));
    assert!(glob_match("**", ""));
    assert!(glob_match("é*", "été"));
    // `?` is one byte, as in globset: one ASCII character.
    assert!(!glob_match("?t\u{e9}", "\u{e9}t\u{e9}"));
}

#[test]
fn plan_relative_path_rule() {
    for p in ["", "/etc/hosts", "-x", "..", "../a", "a/..", "a/../b"] {
        assert!(!relative_path_ok(p), "{p:?} must be refused");
    }
    for p in ["..a", "a/b..c", "./x", "a/-b", "a..", "a/..b/c"] {
        assert!(relative_path_ok(p), "{p:?} must be accepted");
    }
}

#[test]
fn plan_message_escaping() {
    assert_eq!(
        escape_for_message("a\"b\\c\nd\u{1}"),
        "a\\\"b\\\\c\\nd\\u0001"
    );
    let long = "é".repeat(200); // 400 bytes
    let cut = escape_for_message(&long);
    assert!(cut.ends_with('…'));
    assert_eq!(cut.len(), 256 + '…'.len_utf8());
}

#[test]
fn plan_templates() {
    let t = Template::parse("{{x}} {argument}!", &[Var::Argument], "f");
    let t = match t {
        Ok(t) => t,
        Err(e) => panic!("{e:?}"),
    };
    assert_eq!(
        t.render(&Vars {
            argument: "a",
            ..Vars::default()
        }),
        "{x} a!"
    );
    assert!(Template::parse("{nope}", &[Var::Argument], "f").is_err());
    assert!(Template::parse("{value}", &[Var::Argument], "f").is_err());
    assert!(Template::parse("{argument", &[Var::Argument], "f").is_err());
    assert!(Template::parse("a } b", &[Var::Argument], "f").is_err());
}

/// A plan whose chosen triple is not declared refuses instead of panicking. Transition
/// validation makes this unreachable through documents; exercise it directly.
#[test]
fn plan_undeclared_effect_refuses() {
    let spec = PlanSpec {
        arguments: Vec::new(),
        checks: Vec::new(),
        effect: EffectChoice {
            base: EffectSpec {
                effect: "X.Y".into(),
                scope: "worktree".into(),
                cost: 1,
            },
            cases: Vec::new(),
        },
        payload: PayloadSpec {
            arguments: CopyArgs::None,
            fields: Vec::new(),
        },
    };
    let declared = [EffectSpec {
        effect: "X.Y".into(),
        scope: "worktree".into(),
        cost: 2,
    }];
    let got = spec.evaluate("t", &declared, false, &json!({}));
    assert_eq!(
        got,
        Err("transition \"t\" is faulty: its plan chose effect X.Y at scope \"worktree\" cost 1, which its declaredEffects do not list".to_string())
    );
}

#[test]
fn plan_interpreter_document() {
    assert_eq!(
        interpreter_document(),
        json!({"name":"worldd-plan","version":1,"semanticsEpoch":1,"language":"world/plan-language/v1"})
    );
}

/// A plan's bytes written directly are those of its value written canonically: a refusal, an
/// effect whose payload needs escaping and sorting, and payloads nested to the deepest level
/// canonical JSON allows and one past it (refused by both).
#[test]
fn a_plan_written_directly_is_its_value_written_canonically() {
    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!({ "a": inner }))
    }
    fn effect(payload: Value) -> Plan {
        Plan::Effect {
            effect: PlannedEffect {
                id: "e1".into(),
                effect: "Workspace.Read".into(),
                scope: "worktree \"w\"".into(),
                cost: (1 << 53) - 1,
                payload: payload.as_object().unwrap().clone(),
            },
            finish: true,
        }
    }
    let same = |plan: &Plan| {
        let direct = plan.canonical().map(|b| String::from_utf8(b).unwrap());
        let through = crate::canon::to_string(&plan.to_value());
        match (direct, through) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("{a:?} against {b:?}"),
        }
    };
    same(&Plan::refused("no \"path\"\n\u{e000}"));
    same(&effect(
        json!({"op": "read", "path": "a.txt", "\u{e000}": [1.5, null], "B": {"z": 1, "y": "é"}}),
    ));
    // The payload is the fourth level of the plan: a payload 125 levels deep (itself
    // included) makes 128 in all and fits; 126 does not.
    let deepest = effect(nested(125));
    assert!(deepest.canonical().is_ok());
    same(&deepest);
    let too_deep = effect(nested(126));
    assert!(too_deep.canonical().is_err());
    same(&too_deep);
}
