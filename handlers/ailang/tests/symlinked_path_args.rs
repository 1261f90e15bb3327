//! Attack: symlinks in the worktree (planted by a second process, by an earlier `ailang-run`
//! with FS, or committed in the operator's repository) lead a path argument somewhere else:
//! `lnk_epb -> ../epb` (another episode's worktree), `lnk_etc -> /etc`, `lnk_git -> .git`.
//! The plugin checked its path arguments only as spelled, and the binary follows symlinks, so
//! `ailang-cli fmt lnk_epb/prog.ail` printed episode B's program, `lnk_etc/hostname` the host's
//! file, `lnk_git/config` the git config with its credential, and `ailang-run lnk_epb/prog.ail`
//! ran B's program — where `ailang-read` of the same paths is refused. A path argument is now
//! resolved beneath the worktree (symlinks read, not followed: `handler_kit::beneath`, the
//! workspace plugin's walk) before the binary runs; one that leads out of the worktree or into
//! git's own data is declined by the preflight (nothing spent) in the workspace plugin's words,
//! and refused by the effect if it comes anyway. The binary never runs.

mod common;

use std::fs;

use common::*;
use handler_kit::serde_json::{json, Value};
use handler_kit::{EffectHandler, Preflight};
use worldd_ailang::{CHECK, CLI, DOT_DOT, RUN};

const SECRET: &str = "SECRET-TOKEN";

const GIT_UNREAD: &str =
    ".git/ is git's own data, not worktree content; the lane's tools do not read it";

/// The worktree `ep` beside another episode's `epb` and a directory outside both, with the
/// three kinds of link (and a few more of each) planted in `ep`.
fn planted() -> Fixture {
    let f = Fixture::new();
    let worktrees = f.root.parent().unwrap().to_path_buf();
    fs::create_dir_all(worktrees.join("epb/pkg")).unwrap();
    fs::write(
        worktrees.join("epb/prog.ail"),
        format!("export func main() -> () ! {{IO}} {{\n  println(\"{SECRET}-EPB\")\n}}\n"),
    )
    .unwrap();
    fs::write(worktrees.join("epb/pkg/m.ail"), SECRET).unwrap();
    let outside = f.tmp.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    fs::write(outside.join("secret.ail"), SECRET).unwrap();
    f.put(
        ".git/config",
        &format!("[remote \"origin\"]\n\turl = https://user:{SECRET}@example.com/r.git\n"),
    );
    f.put("sub/.GIT/config", SECRET);
    f.put("inside/hello.ail", HELLO);
    let link = |name: &str, target: &str| {
        std::os::unix::fs::symlink(target, f.root.join(name)).unwrap();
    };
    link("lnk_epb", "../epb");
    link("lnk_etc", "/etc");
    link("lnk_out", "../../outside");
    link("lnk_git", ".git");
    link("lnk_git_config", ".git/config");
    link("lnk_lookalike", "sub/.GIT");
    link("lnk_in", "inside");
    // A chain: the first link stays inside, the second leaves.
    link("lnk_chain", "lnk_epb");
    f
}

fn escapes(key: &str, path: &str) -> String {
    format!("argument \"{key}\" \"{path}\": path \"{path}\" escapes sandbox \"<worktree>\"")
}

fn in_git(key: &str, path: &str) -> String {
    format!("argument \"{key}\" \"{path}\": {GIT_UNREAD}")
}

/// Each case: the effect, its payload, the refusal.
fn cases() -> Vec<(&'static str, Value, String)> {
    let mut cases = Vec::new();
    // ailang-cli, ailang-check and ailang-run, each through the three kinds of link.
    for path in [
        "lnk_epb/prog.ail",
        "lnk_etc/hostname",
        "lnk_out/secret.ail",
        "lnk_chain/prog.ail",
    ] {
        cases.push((
            CLI,
            json!({"op": "fmt", "path": path}),
            escapes("path", path),
        ));
        cases.push((
            CHECK,
            json!({"op": "ai_check", "path": path}),
            escapes("path", path),
        ));
        cases.push((
            RUN,
            json!({"op": "run", "path": path}),
            escapes("path", path),
        ));
    }
    for path in ["lnk_git/config", "lnk_git_config"] {
        cases.push((
            CLI,
            json!({"op": "fmt", "path": path}),
            in_git("path", path),
        ));
        cases.push((
            CHECK,
            json!({"op": "ai_check", "path": path}),
            in_git("path", path),
        ));
        cases.push((
            RUN,
            json!({"op": "run", "path": path}),
            in_git("path", path),
        ));
    }
    // A directory argument (test's package, iface's module) and a look-alike of .git.
    cases.push((
        CLI,
        json!({"op": "test", "package": "lnk_epb/pkg"}),
        escapes("package", "lnk_epb/pkg"),
    ));
    cases.push((
        CLI,
        json!({"op": "iface", "module": "lnk_git"}),
        in_git("module", "lnk_git"),
    ));
    cases.push((
        CLI,
        json!({"op": "fmt", "path": "lnk_lookalike/config"}),
        format!(
            "argument \"path\" \"lnk_lookalike/config\": \"sub/.GIT\" is named like .git (names are compared after NFKC and case folding); {GIT_UNREAD}"
        ),
    ));
    // An absolute path is an escape too, as the workspace plugin says.
    cases.push((
        CHECK,
        json!({"op": "ai_check", "path": "/etc/hosts"}),
        escapes("path", "/etc/hosts"),
    ));
    // A `..` segment is refused before any walk (dot_dot_path_args.rs), wherever it leads.
    for path in [
        "lnk_in/../lnk_epb/prog.ail",
        "lnk_in/../lnk_git/hooks/x.ail",
        "missing/../../epb/prog.ail",
    ] {
        cases.push((
            CLI,
            json!({"op": "fmt", "path": path}),
            format!("argument \"path\" \"{path}\": {DOT_DOT}"),
        ));
    }
    cases
}

#[test]
fn a_symlinked_path_argument_out_of_the_worktree_or_into_git_is_declined_and_the_binary_never_runs()
{
    let f = planted();
    for (effect, payload, why) in cases() {
        let request = f.request(effect, payload.clone());
        match f.handler.preflight(&request) {
            Preflight::Decline(answer) => assert_eq!(
                Value::Object(answer),
                json!({"ok": false, "refused": why}),
                "{effect} {payload}"
            ),
            other => panic!("{effect} {payload}: not declined: {other:?}"),
        }
        // A daemon that skips the preflight still runs nothing.
        let failed = f.failed(effect, payload.clone());
        assert_eq!(
            failed,
            format!("broker: {effect} refused: {why}"),
            "{payload}"
        );
        assert!(!failed.contains(SECRET), "{failed}");
    }
    assert!(
        f.log().is_empty(),
        "the binary ran: {:?}",
        f.log()
            .iter()
            .map(|l| l["argv"].clone())
            .collect::<Vec<_>>()
    );
}

/// A link that stays inside the worktree and out of git's data is an ordinary path: the call
/// runs (the binary gets the path as the agent spelled it), as a read of it would.
#[test]
fn a_symlink_that_stays_inside_the_worktree_still_runs() {
    let f = planted();
    let request = f.request(CLI, json!({"op": "fmt", "path": "lnk_in/hello.ail"}));
    assert!(matches!(f.handler.preflight(&request), Preflight::Proceed));
    let out = f.ok(CLI, json!({"op": "fmt", "path": "lnk_in/hello.ail"}));
    assert_eq!(out["ok"], true, "{out:?}");
    assert!(out["stdout"].as_str().unwrap().contains("hello from pi"));
    let out = f.ok(RUN, json!({"op": "run", "path": "lnk_in/hello.ail"}));
    assert_eq!(out["admitted"], true, "{out:?}");
    // A path that does not exist is the binary's to answer.
    let out = f.ok(CHECK, json!({"op": "ai_check", "path": "nope.ail"}));
    assert_eq!(
        out["refused"],
        "ai_check nope.ail: open nope.ail: no such file or directory"
    );
}
