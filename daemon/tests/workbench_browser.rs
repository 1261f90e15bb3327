//! The workbench in a real headless Chromium (through chromedriver), against the real
//! `worldd` binary and the real plugins over real HTTP: `GET /v1/handlers` as the daemon serves
//! it (the ailang plugin loaded without its binary, so it declines), agent and operator
//! credentials, and a proxy only where a daemon must serve tampered bytes.
//!
//! Screenshots land in `target/workbench/`. Without Chromium these tests skip loudly; with
//! `WORLD_REQUIRE_BROWSER` set (as `.ci/run` does) they fail instead.

mod common;
mod webdriver;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;

use base64::Engine;
use common::*;
use serde_json::{json, Value};
use webdriver::Browser;

const WS: &[&str] = &["worldd_workspace"];
/// The ailang plugin is found but declines to start: no `ailang` binary is configured.
const WS_AILANG: &[&str] = &["worldd_workspace", "worldd_ailang"];
const DECLINED: &str =
    "declined: no ailang binary configured (start worldd serve with --plugin-config ailang.bin=PATH)";
const R8_RUN: &str =
    "transition declares an effect this daemon has no handler for (Ailang.Run, Ailang.RunEnv, Ailang.RunNet)";

fn shots() -> PathBuf {
    target_dir().parent().unwrap().join("workbench")
}

/// Sign in on the page at `base` with `token` and wait for the live timeline.
fn sign_in(b: &Browser, base: &str, token: &str, fragment: &str) {
    b.goto(&format!("{base}/workbench{fragment}"));
    let input = b.wait_for_element("#credential");
    b.type_into(&input, token);
    b.click(&b.find("#login-submit"));
    b.wait_for_element("#entries li[data-index='0']");
    b.wait_for("the live indicator", |b| {
        (b.text_of("#live").as_deref() == Some("live")).then_some(())
    });
}

/// Forget the credential and wait for the sign-in form.
fn sign_out(b: &Browser) {
    b.click(&b.find("#signout"));
    b.wait_for("the sign-in form", |b| {
        b.exec("return !document.getElementById('login').hidden", json!([]))
            .as_bool()
            .filter(|shown| *shown)
    });
}

/// The library ref `GET /v1/handlers` reports for `plugin`.
fn loaded_library(d: &Daemon, token: &str, plugin: &str) -> String {
    let v = get(&d.url("/v1/handlers"), Some(token)).json();
    v["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == plugin)
        .unwrap_or_else(|| panic!("{plugin} not loaded: {v}"))["library"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The plugin row of the effect link: (its check, its text, the full library ref it shows).
fn plugin_row(b: &Browser) -> (String, String, String) {
    let dd = b.find("#links > li[data-kind='effect'] dd.plugin");
    let library = b.find("#links > li[data-kind='effect'] dd.plugin .ref-text");
    (
        b.attr(&dd, "data-plugin-check").unwrap_or_default(),
        b.text(&dd),
        b.attr(&library, "title").unwrap_or_default(),
    )
}

/// The verdict of the open entry, once verification has finished.
fn verdict(b: &Browser) -> String {
    b.wait_for("the verdict", |b| {
        b.text_of("#verdict")
            .filter(|t| t.starts_with('✓') || t.starts_with('✗'))
    })
}

/// `(kind, ok, text)` of each link shown.
fn links(b: &Browser) -> Vec<(String, bool, String)> {
    b.find_all("#links > li.link")
        .iter()
        .map(|e| {
            (
                b.attr(e, "data-kind").unwrap_or_default(),
                b.attr(e, "data-ok").as_deref() == Some("true"),
                b.text(e),
            )
        })
        .collect()
}

fn call_read(d: &Daemon, token: &str, path: &str) -> Value {
    let a = mcp(
        d,
        token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": path}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    a.sse_json()
}

/// The ref of entry `i`'s input object, read over REST.
fn input_ref(d: &Daemon, token: &str, i: u64) -> String {
    let entry = get(&d.url(&format!("/v1/log/{i}")), Some(token)).json();
    let record = get(
        &d.url(&format!(
            "/v1/objects/{}?payload=true",
            entry["transitionRef"].as_str().unwrap()
        )),
        Some(token),
    )
    .json();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(record["payload"].as_str().unwrap())
        .unwrap();
    let rec: Value = serde_json::from_slice(&bytes).unwrap();
    rec["input"].as_str().unwrap().to_owned()
}

/// How a [`TamperProxy`] changes the JSON answer of a request it targets; `Some(status)`
/// answers that status instead of the daemon's.
type Edit = std::sync::Arc<dyn Fn(&mut Value) -> Option<u16> + Send + Sync>;

/// A loopback HTTP proxy in front of the daemon that rewrites the JSON answer of the requests
/// whose path starts with a target (and passes everything else through, streams included):
/// by default one object served with one payload byte flipped, a daemon that serves bytes
/// which do not match their address.
struct TamperProxy {
    addr: String,
}

impl TamperProxy {
    fn start(upstream: &str, tampered: &str) -> TamperProxy {
        let b64 = base64::engine::general_purpose::STANDARD;
        TamperProxy::rewriting(
            upstream,
            &format!("/v1/objects/{tampered}?payload=true"),
            std::sync::Arc::new(move |v: &mut Value| {
                let mut payload = b64.decode(v["payload"].as_str().unwrap_or("")).unwrap();
                payload[1] ^= 0x20;
                v["payload"] = json!(b64.encode(&payload));
                None
            }),
        )
    }

    /// A proxy that applies `edit` to the answers of requests whose path starts with `target`.
    fn rewriting(upstream: &str, target: &str, edit: Edit) -> TamperProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let upstream = upstream.to_owned();
        let target = target.to_owned();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let (upstream, target, edit) = (upstream.clone(), target.clone(), edit.clone());
                std::thread::spawn(move || {
                    let _ = proxy_one(client, &upstream, &target, &*edit);
                });
            }
        });
        TamperProxy { addr }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// One request per connection: forward it with `Connection: close`, then copy the answer
/// back (the target's edited).
fn proxy_one(
    mut client: TcpStream,
    upstream: &str,
    target: &str,
    edit: &(dyn Fn(&mut Value) -> Option<u16> + Send + Sync),
) -> std::io::Result<()> {
    let Some((path, mut server)) = forward_request_head(&mut client, upstream)? else {
        return Ok(());
    };
    if !path.starts_with(target) {
        let mut back = server.try_clone()?;
        let mut to = client.try_clone()?;
        std::io::copy(&mut back, &mut to)?;
        return Ok(());
    }
    let mut answer = Vec::new();
    server.read_to_end(&mut answer)?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(answer.len());
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let mut v: Value = serde_json::from_slice(&answer[split + 4..]).unwrap_or(Value::Null);
    let status = edit(&mut v);
    let body = serde_json::to_vec(&v).unwrap();
    let head: String = head
        .lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("content-length:"))
        .enumerate()
        .map(|(i, l)| match status {
            Some(status) if i == 0 => format!("HTTP/1.1 {status} Edited\r\n"),
            _ => format!("{l}\r\n"),
        })
        .collect();
    client.write_all(format!("{head}content-length: {}\r\n\r\n", body.len()).as_bytes())?;
    client.write_all(&body)
}

#[test]
fn the_workbench_follows_the_log_live_and_verifies_a_chain_in_the_browser() {
    let Some(b) = Browser::start_or_skip(
        "the_workbench_follows_the_log_live_and_verifies_a_chain_in_the_browser",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS_AILANG, &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:10", "Ailang.Run=worktree:5"],
    );
    std::fs::write(d.root().join("ep1/hello.txt"), "hello, workbench\n").unwrap();
    let base = format!("http://{}", d.addr);
    let library = loaded_library(&d, &token, "workspace");

    sign_in(&b, &base, &token, "");
    // Only the genesis so far.
    assert!(b.try_find("#entries li[data-index='1']").is_none());
    assert_eq!(b.text_of("#who").as_deref(), Some("ep1"));

    // A call made elsewhere appears live, without a reload.
    let r = call_read(&d, &token, "hello.txt");
    assert_eq!(r["result"]["structuredContent"]["ok"], true, "{r}");
    let row = b.wait_for_element("#entries li[data-index='1']");
    let text = b.text(&row);
    assert!(
        text.contains("#1") && text.contains("ailang-read") && text.contains("ok"),
        "{text}"
    );

    // Open it: every link recomputed in the page.
    b.click(&b.find("#entries a[data-index='1']"));
    assert_eq!(verdict(&b), "✓ 7 links verified");
    let shown = links(&b);
    let kinds: Vec<&str> = shown.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        ["world", "entry", "record", "input", "plan", "effect", "output"]
    );
    assert!(shown.iter().all(|(_, ok, _)| *ok), "{shown:?}");
    assert!(
        shown[5]
            .2
            .contains("e1 allowed Workspace.Read@worktree cost 1 budget 10→9 request 72 B result")
            && shown[5].2.contains(", ran by workspace 0.1.0"),
        "{}",
        shown[5].2
    );
    // The plugin the record names is the build this daemon loads.
    let (check, text, shown_library) = plugin_row(&b);
    assert_eq!(check, "same", "{text}");
    assert!(
        text.starts_with("workspace 0.1.0 sha256:")
            && text.ends_with("✓ the build this daemon loads"),
        "{text}"
    );
    assert_eq!(shown_library, library);
    // The permalink is the fragment.
    let url = b.exec("return location.hash", json!([]));
    assert_eq!(url, "#entry/1");
    // Once the new entry's highlight has played, the selection shows.
    b.wait_for("the highlight to end", |b| {
        b.try_find("#entries li.fresh").is_none().then_some(())
    });
    b.screenshot(&shots().join("workbench-1280x800.png"));
    b.exec(
        "document.querySelector(\"#links > li[data-kind='effect']\").scrollIntoView({block: 'center'})",
        json!([]),
    );
    b.screenshot(&shots().join("workbench-effect.png"));

    // Episode: the budget spent by that call, and what a budget belongs to.
    b.goto(&format!("{base}/workbench#episode"));
    let budget = b.wait_for_element("#view-episode table");
    assert!(
        b.text(&budget).contains("Workspace.Read @worktree 10 1 9"),
        "{}",
        b.text(&budget)
    );
    let scope = b.text(&b.find("#budget-scope"));
    assert!(
        scope.starts_with("Agent credential of episode ep1: it reads its episode's calls")
            && scope.contains("A budget is granted per credential and spent per episode"),
        "{scope}"
    );
    b.screenshot(&shots().join("workbench-episode.png"));

    // Plugins, from the daemon's own GET /v1/handlers: identity, library ref and path apart,
    // the declined plugin and why, and why a tool cannot run.
    b.goto(&format!("{base}/workbench#plugins"));
    let card = b.wait_for_element("#view-plugins section[data-plugin='workspace']");
    let text = b.text(&card);
    assert!(text.starts_with("workspace 0.1.0\n"), "{text}");
    assert!(
        text.contains(&format!("identity\nworkspace 0.1.0 ({library})")),
        "{text}"
    );
    assert_eq!(
        b.text(&b.find("section[data-plugin='workspace'] dd.library code")),
        library
    );
    // An agent's credential is told the library's file name, not where on the host it lies.
    let path = b.text(&b.find("section[data-plugin='workspace'] dd.path code"));
    assert_eq!(path, "libworldd_workspace.so");
    assert!(text.contains("Workspace.Write write"), "{text}");
    let declined = b.find_all("#declined [data-declined]");
    assert_eq!(declined.len(), 1);
    assert_eq!(
        b.attr(&declined[0], "data-declined").as_deref(),
        Some("ailang")
    );
    let path = b.text(&b.find("#declined [data-declined='ailang'] dd.path code"));
    assert_eq!(path, "libworldd_ailang.so");
    assert_eq!(
        b.text(&b.find("#declined [data-declined='ailang'] dd.why-declined")),
        DECLINED
    );
    let tools = b.text(&b.find("#tools table"));
    assert!(tools.contains("ailang-read Workspace.Read yes"), "{tools}");
    assert!(tools.contains(&format!("no: {R8_RUN}")), "{tools}");
    b.screenshot(&shots().join("workbench-plugins.png"));

    // Metrics.
    b.goto(&format!("{base}/workbench#metrics"));
    let tiles = b.wait_for_element("#view-metrics .tiles");
    assert!(b.text(&tiles).contains("calls since start"));
    b.screenshot(&shots().join("workbench-metrics.png"));

    // A narrow screen: the entry alone, then the timeline alone, the plugins and the episode.
    b.viewport(390, 844);
    b.goto(&format!("{base}/workbench#entry/1"));
    assert_eq!(verdict(&b), "✓ 7 links verified");
    b.screenshot(&shots().join("workbench-narrow-entry.png"));
    b.exec(
        "document.querySelector(\"#links > li[data-kind='effect']\").scrollIntoView({block: 'start'})",
        json!([]),
    );
    b.screenshot(&shots().join("workbench-narrow-effect.png"));
    b.goto(&format!("{base}/workbench#log"));
    b.wait_for_element("#entries li[data-index='1']");
    b.screenshot(&shots().join("workbench-narrow-log.png"));
    b.goto(&format!("{base}/workbench#plugins"));
    b.wait_for_element("#declined [data-declined]");
    b.screenshot(&shots().join("workbench-narrow-plugins.png"));
    b.goto(&format!("{base}/workbench#episode"));
    b.wait_for_element("#view-episode table");
    b.screenshot(&shots().join("workbench-narrow-episode.png"));
    b.viewport(1280, 800);

    // A daemon that serves one object with a flipped byte: the page says ✗ on that link.
    let tampered = input_ref(&d, &token, 1);
    let proxy = TamperProxy::start(&d.addr, &tampered);
    sign_in(&b, &proxy.url(""), &token, "#entry/1");
    assert_eq!(
        verdict(&b),
        "✗ 1 of 7 links broken: the daemon served bytes that do not match their address"
    );
    let shown = links(&b);
    let bad: Vec<_> = shown.iter().filter(|(_, ok, _)| !ok).collect();
    assert_eq!(bad.len(), 1, "{shown:?}");
    assert_eq!(bad[0].0, "input");
    assert!(
        bad[0].2.contains("the bytes served hash to sha256:")
            && bad[0].2.contains("not to their address"),
        "{}",
        bad[0].2
    );
    b.screenshot(&shots().join("workbench-tampered.png"));
}

#[test]
fn an_effect_run_by_an_older_plugin_build_is_noted_not_broken() {
    let Some(b) = Browser::start_or_skip(
        "an_effect_run_by_an_older_plugin_build_is_noted_not_broken",
        1280,
        800,
    ) else {
        return;
    };
    // The first daemon loads another build of the workspace plugin: the same code with bytes
    // appended, so its library ref differs.
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let lib = plugin_library("worldd_workspace");
    let mut older = std::fs::read(&lib).unwrap();
    older.extend_from_slice(b"\nan older build\n");
    std::fs::write(plugins.join(lib.file_name().unwrap()), &older).unwrap();
    let d = Daemon::start_in(dir, &[], &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:1"]);
    let older_library = loaded_library(&d, &token, "workspace");
    call_read(&d, &token, "nothing-here.txt");

    // The daemon restarts with the current build; the next call is denied (no budget left),
    // so nothing runs and its record names no plugin.
    let d = Daemon::start_in(d.halt(), WS, &[]);
    let library = loaded_library(&d, &token, "workspace");
    assert_ne!(library, older_library);
    let denied = call_read(&d, &token, "nothing-here.txt");
    assert_eq!(
        denied["result"]["_meta"]["world/outcome"]["kind"], "denied",
        "{denied}"
    );

    sign_in(&b, &format!("http://{}", d.addr), &token, "#entry/1");
    // The record's bytes are what they were: every link verifies.
    assert_eq!(verdict(&b), "✓ 7 links verified");
    let (check, text, shown_library) = plugin_row(&b);
    assert_eq!(check, "other-build", "{text}");
    assert_eq!(shown_library, older_library);
    let now = &library["sha256:".len()..][..8];
    assert!(
        text.starts_with("workspace 0.1.0 sha256:")
            && text.contains(&format!(
                "ℹ ran by a build this daemon no longer loads: it loads sha256:{now}… (0.1.0) now"
            )),
        "{text}"
    );
    assert!(!text.contains('✗'), "{text}");

    b.goto(&format!("http://{}/workbench#entry/2", d.addr));
    b.wait_for("entry 2", |b| {
        b.text_of("#detail h2")
            .filter(|t| t.starts_with("Entry #2"))
            .map(|_| ())
    });
    assert_eq!(verdict(&b), "✓ 7 links verified");
    let dd = b.find("#links > li[data-kind='effect'] dd.plugin");
    assert_eq!(b.attr(&dd, "data-plugin-check").as_deref(), Some("none"));
    assert_eq!(
        b.text(&dd),
        "none: the broker denied the effect, nothing ran"
    );

    // A daemon with no workspace plugin at all: the record still names the build that ran it.
    let dir = d.halt();
    std::fs::remove_file(dir.path().join("plugins").join(lib.file_name().unwrap())).unwrap();
    let d = Daemon::start_in(dir, &[], &[]);
    sign_in(&b, &format!("http://{}", d.addr), &token, "#entry/1");
    assert_eq!(verdict(&b), "✓ 7 links verified");
    let (check, text, _) = plugin_row(&b);
    assert_eq!(check, "other-build", "{text}");
    assert!(
        text.ends_with(
            "ℹ ran by a build this daemon no longer loads: no plugin named workspace is loaded now"
        ),
        "{text}"
    );
}

#[test]
fn a_read_the_plugin_declined_verifies_and_names_the_plugin_that_declined() {
    let Some(b) = Browser::start_or_skip(
        "a_read_the_plugin_declined_verifies_and_names_the_plugin_that_declined",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:1"]);
    std::fs::write(d.root().join("ep1/big.txt"), "a".repeat(2_000_000)).unwrap();
    let declined = call_read(&d, &token, "big.txt");
    assert_eq!(
        declined["result"]["_meta"]["world/outcome"]["reason"], "denied:handler",
        "{declined}"
    );

    sign_in(&b, &format!("http://{}", d.addr), &token, "#entry/1");
    assert_eq!(verdict(&b), "✓ 7 links verified");
    let (check, text, _) = plugin_row(&b);
    assert_eq!(check, "same", "{text}");
    assert!(
        text.starts_with("workspace 0.1.0 sha256:")
            && text.contains("declined the request before admission; nothing ran"),
        "{text}"
    );
    let effect = links(&b)
        .into_iter()
        .find(|(kind, _, _)| kind == "effect")
        .unwrap();
    assert!(
        effect.2.contains(
            "e1 denied:handler Workspace.Read@worktree cost 1 budget 1→1 request 70 B, declined by workspace 0.1.0"
        ),
        "{}",
        effect.2
    );
    b.exec(
        "document.querySelector(\"#links > li[data-kind='effect']\").scrollIntoView({block: 'start'})",
        json!([]),
    );
    b.screenshot(&shots().join("workbench-declined.png"));
}

#[test]
fn an_operator_sees_every_episodes_entries_and_an_agent_only_its_own() {
    let Some(b) = Browser::start_or_skip(
        "an_operator_sees_every_episodes_entries_and_an_agent_only_its_own",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:10"]);
    let ep2 = d.session("ep2", &["Workspace.Read=worktree:10"]);
    let ops = d.operator_session("ops", &[]);
    std::fs::write(d.root().join("ep2/secret.txt"), "ep2's own\n").unwrap();
    call_read(&d, &ep1, "a.txt");
    call_read(&d, &ep2, "secret.txt");
    let base = format!("http://{}", d.addr);
    let episodes = |b: &Browser| {
        b.exec(
            "return [...document.querySelectorAll('#entries li')].map((li) => \
             [Number(li.dataset.index), li.querySelector('.sub').textContent.split(' · ')[0]])",
            json!([]),
        )
    };

    // The operator: both episodes' calls, and the genesis.
    sign_in(&b, &base, &ops, "");
    let rows = episodes(&b);
    assert_eq!(rows.as_array().unwrap().len(), 3, "{rows}");
    assert_eq!(rows[0], json!([2, "ep2"]), "{rows}");
    assert_eq!(rows[1], json!([1, "ep1"]), "{rows}");
    assert_eq!(rows[2][0], 0, "{rows}");
    assert_eq!(b.text_of("#who").as_deref(), Some("ops · operator"));
    b.click(&b.find("#entries a[data-index='2']"));
    assert_eq!(verdict(&b), "✓ 7 links verified");
    b.screenshot(&shots().join("workbench-operator-log.png"));

    // Its episode view: what its credential is, and each episode's spend.
    b.goto(&format!("{base}/workbench#episode"));
    let scope = b.wait_for_element("#budget-scope");
    assert!(
        b.text(&scope)
            .starts_with("Operator credential of episode ops: it reads every episode's entries"),
        "{}",
        b.text(&scope)
    );
    let listed = b.text(&b.find("#episodes table"));
    assert!(
        listed.contains("ep1 1 spend →") && listed.contains("ep2 1 spend →"),
        "{listed}"
    );
    b.screenshot(&shots().join("workbench-operator-episodes.png"));
    b.click(&b.find("#episodes a[href='#episode/ep2']"));
    let spent = b.wait_for_element("#spent table");
    assert_eq!(b.text(&spent), "effect spent\nWorkspace.Read @worktree 1");
    assert!(b
        .text(&b.find("#budget-scope"))
        .starts_with("What episode ep2 has spent, under any of its credentials"));
    b.screenshot(&shots().join("workbench-operator-episode.png"));

    // An agent of ep1 in the same tab: its own calls and the genesis, never ep2's.
    sign_out(&b);
    sign_in(&b, &base, &ep1, "#log");
    let rows = episodes(&b);
    assert_eq!(rows.as_array().unwrap().len(), 2, "{rows}");
    assert_eq!(rows[0], json!([1, "ep1"]), "{rows}");
    assert_eq!(rows[1][0], 0, "{rows}");
    let options = b.exec(
        "return [...document.getElementById('filter-episode').options].map((o) => o.value)",
        json!([]),
    );
    assert_eq!(options, json!(["", "ep1"]));
    assert_eq!(b.text_of("#who").as_deref(), Some("ep1"));
    // Live too: ep2's next call does not reach it, ep1's does.
    call_read(&d, &ep2, "secret.txt");
    call_read(&d, &ep1, "b.txt");
    b.wait_for_element("#entries li[data-index='4']");
    assert!(b.try_find("#entries li[data-index='3']").is_none());
    // Another episode's budget is not its to read.
    b.goto(&format!("{base}/workbench#episode/ep2"));
    let error = b.wait_for_element("#episode-error");
    assert_eq!(
        b.text(&error),
        "Could not read the budget: only an operator credential reads another episode's budget; this credential's episode is ep1"
    );
}

#[test]
fn hostile_tool_input_renders_as_text_in_the_workbench() {
    let Some(b) = Browser::start_or_skip(
        "hostile_tool_input_renders_as_text_in_the_workbench",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    let hostile =
        "<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>";
    call_read(&d, &token, hostile);
    let base = format!("http://{}", d.addr);
    sign_in(&b, &base, &token, "#entry/1");
    let v = verdict(&b);
    assert!(v.starts_with('✓'), "{v}");
    let input = b.find("#links > li[data-kind='input']");
    assert!(b.text(&input).contains("<img src=x"), "{}", b.text(&input));
    // Shown as text: no element was made from it, and no script of it ran.
    let found = b.exec(
        "return [document.querySelectorAll('#detail img, #detail script').length, document.title]",
        json!([]),
    );
    assert_eq!(found, json!([0, "worldd workbench"]));

    // The keyboard: Esc closes the entry, j selects the newest row, Enter opens it, 2 shows
    // the episode.
    let hash = |b: &Browser| b.exec("return location.hash", json!([]));
    b.keys("\u{E00C}");
    b.wait_for("#log after Esc", |b| (hash(b) == "#log").then_some(()));
    b.keys("j");
    let focused = b.exec("return document.activeElement.dataset.index", json!([]));
    assert_eq!(focused, "1");
    b.keys("\u{E007}");
    b.wait_for("#entry/1 after Enter", |b| {
        (hash(b) == "#entry/1").then_some(())
    });
    assert!(verdict(&b).starts_with('✓'));
    b.keys("2");
    b.wait_for("#episode after 2", |b| {
        (hash(b) == "#episode").then_some(())
    });
}

#[test]
fn the_pages_canonical_json_and_sha256_agree_with_the_daemons() {
    let Some(b) = Browser::start_or_skip(
        "the_pages_canonical_json_and_sha256_agree_with_the_daemons",
        800,
        600,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    b.goto(&d.url("/workbench"));
    b.wait_for_element("#credential");
    let vectors = [
        r#"{"b":2,"a":1,"c":{"z":[3,2,1],"y":null}}"#,
        r#"{"entryIndex":42,"semanticsEpoch":1,"writtenBy":"coordinator:mcp","prevEntryHash":"sha256:00"}"#,
        r#"{"\u20ac":"euro","\r":"cr","1":"one","\ud83d\ude00":"emoji","\ufb33":"hebrew","":"empty"}"#,
        r#"["\u0000\u001f\b\t\n\f\r\"\\/","\u007f\u2028\u2029","é ✓ 😀 </script>"]"#,
        r#"[0,-0,1,-1,0.5,1e21,1e-7,123456789012,9007199254740991,-9007199254740991,3.14159,0.000001,5e-324,1.7976931348623157e308]"#,
        r#"{"numbers":[1.0,2.50,100e-2,-0.0],"nested":{"deep":{"deeper":[{"k":true},{"k":false}]}}}"#,
        r#"{"path":"hello.txt"}"#,
        r#"[]"#,
        r#"{}"#,
        r#""just a string""#,
        // Prints as an integer beyond 2^53: the daemon refuses it.
        r#"[1e20]"#,
    ];
    let texts: Vec<&str> = vectors.to_vec();
    let got = b.exec_async(
        "const done = arguments[arguments.length - 1];
         import('/workbench/canon.js').then(async (m) => {
           const out = [];
           for (const t of arguments[0]) {
             const c = m.canonicalize(JSON.parse(t));
             out.push([c, await m.refOf(c)]);
           }
           done(out);
         }).catch((e) => done(String(e)));",
        json!([texts]),
    );
    let got = got
        .as_array()
        .unwrap_or_else(|| panic!("the page failed: {got}"));
    assert_eq!(got.len(), vectors.len());
    for (text, pair) in vectors.iter().zip(got) {
        let value: Value = serde_json::from_str(text).unwrap();
        let rust = broker_core::canon::to_string(&value);
        let page = pair[0].as_str().unwrap();
        match rust {
            Ok(rust) => {
                assert_eq!(page, rust, "canonical form of {text}");
                assert_eq!(
                    pair[1].as_str().unwrap(),
                    broker_core::object::Ref::of(rust.as_bytes()).to_string(),
                    "sha256 of {text}"
                );
            }
            // The daemon refuses what it cannot hold exactly (1e20 prints as an unsafe
            // integer); such a document is never hashed, so the page need not agree.
            Err(e) => assert_eq!(*text, "[1e20]", "the daemon refused {text}: {e}"),
        }
    }
}

/// A page on one loopback origin (`localhost`) calls the daemon on another (`127.0.0.1`), as
/// a browser-based MCP client connecting directly does: Chromium sends its preflight, then the
/// call, and hands the page the answer, a refusal's included. The daemon answered preflights
/// 405, so such a page got only `Failed to fetch`.
#[test]
fn a_page_on_another_loopback_origin_calls_the_daemon_over_mcp() {
    let Some(b) = Browser::start_or_skip(
        "a_page_on_another_loopback_origin_calls_the_daemon_over_mcp",
        800,
        600,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:5"]);
    std::fs::write(d.root().join("ep1/hello.txt"), "hi from the worktree").unwrap();
    let port = d.addr.rsplit(':').next().unwrap();
    // A page of the daemon's own without the workbench's content security policy (which lets
    // the workbench fetch from its own origin only): the health answer, shown as a document.
    b.goto(&format!("http://localhost:{port}/v1/health"));
    let got = b.exec_async(
        "const [url, token] = arguments;
         const done = arguments[arguments.length - 1];
         const call = (auth) => fetch(url, {
           method: 'POST',
           headers: Object.assign({
             'content-type': 'application/json',
             'accept': 'application/json, text/event-stream',
             'mcp-protocol-version': '2025-06-18',
           }, auth ? {'authorization': 'Bearer ' + token} : {}),
           body: JSON.stringify({jsonrpc: '2.0', id: 1, method: 'tools/call',
             params: {name: 'ailang-read', arguments: {path: 'hello.txt'}}}),
         }).then(async (r) => [r.status, await r.text()]);
         Promise.all([location.origin, call(true), call(false)])
           .then(done).catch((e) => done(String(e)));",
        json!([format!("http://127.0.0.1:{port}/mcp/"), token]),
    );
    let got = got
        .as_array()
        .unwrap_or_else(|| panic!("the page's calls failed: {got}"));
    assert_eq!(got[0], format!("http://localhost:{port}"));
    assert_eq!(got[1][0], 200, "{got:?}");
    assert!(
        got[1][1].as_str().unwrap().contains("hi from the worktree"),
        "{got:?}"
    );
    assert_eq!(got[2][0], 401, "{got:?}");
    assert!(
        got[2][1]
            .as_str()
            .unwrap()
            .contains("session credential is absent"),
        "{got:?}"
    );
}

/// An operator signed in on a daemon's page; the daemon stopped, a [`squat`]ter took its port,
/// and the page said it is disconnected.
struct Squatted {
    /// The stopped daemon's directory (its store), to start it again.
    dir: tempfile::TempDir,
    /// Every request head the squatter received.
    heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

fn signed_in_then_squatted(b: &Browser) -> Squatted {
    let d = Daemon::start(WS, &[]);
    let token = d.operator_session("ops", &[]);
    let addr = d.addr.clone();
    sign_in(b, &format!("http://{addr}"), &token, "#log");
    let dir = d.halt();
    let heads = squat(&addr);
    b.wait_for("the page to say it is disconnected", |b| {
        (b.text_of("#live").as_deref() == Some("disconnected")).then_some(())
    });
    Squatted { dir, heads }
}

/// A process that takes over a stopped daemon's port: it records every request's head and
/// answers each `503`.
fn squat(addr: &str) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = (0..200)
        .find_map(|_| {
            TcpListener::bind(addr).ok().or_else(|| {
                std::thread::sleep(std::time::Duration::from_millis(25));
                None
            })
        })
        .expect("the stopped daemon's port never came free");
    let seen = heads.clone();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            seen.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&head).into_owned());
            let _ = s.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    heads
}

/// When its daemon stops, the page stops: whatever binds the port next is never sent the
/// credential (it retried the log stream with it every few seconds, to anyone), and the page
/// says it is disconnected and offers to reconnect.
#[test]
fn a_page_whose_daemon_stopped_sends_its_credential_to_nothing_that_takes_the_port() {
    let Some(b) = Browser::start_or_skip(
        "a_page_whose_daemon_stopped_sends_its_credential_to_nothing_that_takes_the_port",
        1280,
        800,
    ) else {
        return;
    };
    let Squatted { dir, heads } = signed_in_then_squatted(&b);
    let offered = b.exec(
        "return !document.getElementById('reconnect').hidden",
        json!([]),
    );
    assert_eq!(offered, json!(true));
    // Asked to reconnect while the port is still another's, it still sends nothing.
    b.click(&b.find("#reconnect"));
    b.wait_for("the page to say it is disconnected again", |b| {
        (b.text_of("#live").as_deref() == Some("disconnected")).then_some(())
    });
    // Long enough for the retries it used to make.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let heads = heads.lock().unwrap().clone();
    assert!(!heads.is_empty(), "the page asked nothing of the port");
    for head in &heads {
        assert!(
            !head.to_ascii_lowercase().contains("authorization"),
            "the credential went to the squatter: {head}"
        );
        assert!(head.starts_with("GET /v1/health "), "{head}");
    }
    b.screenshot(&shots().join("workbench-disconnected.png"));
    drop(dir);
}

/// A log stream the daemon refuses (every place taken) is said on the page with the daemon's
/// reason, not only retried behind a "reconnecting…" pill; once a place is free, the page
/// follows the log again and the notice goes.
#[test]
fn a_log_stream_refused_for_want_of_a_place_is_said_on_the_page_with_the_daemons_reason() {
    let Some(b) = Browser::start_or_skip(
        "a_log_stream_refused_for_want_of_a_place_is_said_on_the_page_with_the_daemons_reason",
        1280,
        800,
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, "[server]\nlog_streams = 1\n").unwrap();
    let config = path_str(&config).to_owned();
    let d = Daemon::start_in(dir, WS, &["--config", &config]);
    let token = d.operator_session("ops", &[]);
    // The one place, held by another reader.
    let mut held = TcpStream::connect(&d.addr).unwrap();
    write!(
        held,
        "GET /v1/log/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        d.addr
    )
    .unwrap();
    let mut head = [0u8; 12];
    held.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");

    b.goto(&format!("http://{}/workbench#log", d.addr));
    let input = b.wait_for_element("#credential");
    b.type_into(&input, &token);
    b.click(&b.find("#login-submit"));
    b.wait_for_element("#entries li[data-index='0']");
    let said = b.wait_for("the page to say why the log is not followed", |b| {
        let shown = b.exec(
            "return !document.getElementById('stream-problem').hidden",
            json!([]),
        );
        (shown == json!(true))
            .then(|| b.text_of("#stream-problem"))
            .flatten()
    });
    assert!(
        said.starts_with(
            "The live log is not followed: HTTP 503 Unavailable: too many open log streams: the limit is 1. Trying again in "
        ),
        "{said}"
    );
    assert_ne!(b.text_of("#live").as_deref(), Some("live"));
    b.screenshot(&shots().join("workbench-stream-refused.png"));

    // The place freed: the page follows again, and says nothing more.
    drop(held);
    b.wait_for("the live indicator", |b| {
        (b.text_of("#live").as_deref() == Some("live")).then_some(())
    });
    let shown = b.exec(
        "return !document.getElementById('stream-problem').hidden",
        json!([]),
    );
    assert_eq!(shown, json!(false));
}

/// The workbench re-verifies like `worldd why`: an agent that stored another episode's next
/// plan first as its own call's input (objects are deduplicated by content, first writer wins)
/// made the victim's genuine call show a broken plan link in the page. The kind is the record's
/// word: for the operator, who reads the stored object, the link verifies with a note that the
/// bytes were first stored as another kind. The victim reads its plan as its plan, so its page
/// verifies every link without a note, and says nothing of the other episode.
#[test]
fn an_agent_storing_another_calls_plan_first_as_its_input_does_not_break_it_in_the_page() {
    let Some(b) = Browser::start_or_skip(
        "an_agent_storing_another_calls_plan_first_as_its_input_does_not_break_it_in_the_page",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let (victim, _, index) = a_plan_stored_first_as_another_calls_input(&d);
    let base = format!("http://{}", d.addr);
    sign_in(&b, &base, &victim, "#log");
    b.click(&b.wait_for_element(&format!("#entries a[data-index='{index}']")));
    assert_eq!(verdict(&b), "✓ 7 links verified");
    assert!(b.find_all("li.link .link-note").is_empty());
    sign_out(&b);

    let operator = d.operator_session("ops", &[]);
    sign_in(&b, &base, &operator, "#log");
    b.click(&b.wait_for_element(&format!("#entries a[data-index='{index}']")));
    assert_eq!(verdict(&b), "✓ 7 links verified");
    let note = b
        .text_of("li.link[data-kind='plan'] .link-note")
        .expect("the plan link's note");
    assert!(
        note.contains(" was first stored as world/invocation-input/v1 (objects are deduplicated by content); it reads as world/effect-plan/v1, the kind its record gives it"),
        "{note}"
    );
    b.exec(
        "document.querySelector(\"li.link[data-kind='plan']\").scrollIntoView()",
        json!([]),
    );
    b.screenshot(&shots().join("workbench-note.png"));
}

/// What the page says of a request it did not send, its daemon gone.
const NOT_SENT: &str = "not sent: the daemon this page signed in to no longer answers here (disconnected); Reconnect once it is back";

/// After the page says "disconnected", a click on Metrics, Log or an entry sent
/// `Authorization: Bearer` to whatever had taken the port: only the live stream asked
/// `/v1/health` first. Now nothing goes out with the credential until the check passes.
#[test]
fn clicks_after_disconnected_send_the_credential_to_nothing_that_took_the_port() {
    let Some(b) = Browser::start_or_skip(
        "clicks_after_disconnected_send_the_credential_to_nothing_that_took_the_port",
        1280,
        800,
    ) else {
        return;
    };
    let Squatted { dir, heads } = signed_in_then_squatted(&b);
    b.click(&b.find("#nav a[data-view='metrics']"));
    let said = b.wait_for("the metrics view's error", |b| {
        b.text_of("#view-metrics .error")
    });
    assert_eq!(said, format!("Could not read the metrics: {NOT_SENT}"));
    b.click(&b.find("#nav a[data-view='log']"));
    b.click(&b.wait_for_element("#entries a[data-index='0']"));
    let said = b.wait_for("the entry's refusal", |b| {
        b.text_of("#verdict").filter(|t| t.starts_with("Could not"))
    });
    assert_eq!(said, format!("Could not read entry #0: {NOT_SENT}"));
    b.click(&b.find("#nav a[data-view='plugins']"));
    let said = b.wait_for("the plugins view's error", |b| {
        b.text_of("#view-plugins .error")
    });
    assert_eq!(said, format!("Could not list the plugins: {NOT_SENT}"));
    assert_eq!(b.text_of("#live").as_deref(), Some("disconnected"));
    b.screenshot(&shots().join("workbench-disconnected-clicks.png"));
    let heads = heads.lock().unwrap().clone();
    assert!(!heads.is_empty(), "the page asked nothing of the port");
    for head in &heads {
        assert!(
            !head.to_ascii_lowercase().contains("authorization"),
            "the credential went to the squatter: {head}"
        );
        assert!(head.starts_with("GET /v1/health "), "{head}");
    }
    drop(dir);
}

/// `worldd serve` in `dir` with its store given relative to it (`--db db`, as a default
/// `.world/db` is), bound to `bind`: its `/v1/health` says `db_path: "db"`, as every such
/// daemon's does.
fn serve_relative(dir: tempfile::TempDir, bind: &str) -> Daemon {
    if let Some(port) = bind.strip_prefix("127.0.0.1:").filter(|p| *p != "0") {
        // The port of a daemon just killed: wait until it is free.
        let free = (0..200).any(|_| {
            TcpListener::bind(format!("127.0.0.1:{port}")).is_ok() || {
                std::thread::sleep(std::time::Duration::from_millis(25));
                false
            }
        });
        assert!(free, "port {port} never came free");
    }
    let plugins = plugin_dir_with(dir.path(), WS);
    let mut cmd = std::process::Command::new(WORLDD);
    cmd.current_dir(dir.path())
        .args(["serve", "--db", "db", "--workspace-root"])
        .arg(dir.path().join("worktrees"))
        .args(["--bind", bind, "--plugin-dir"])
        .arg(plugins)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    Daemon::spawn(dir, cmd)
}

/// Two daemons, each started in its own directory on a store named relative to it, report
/// the same `db_path` in `/v1/health`: a page whose daemon stopped sent its credential to the
/// other when it took the port. The page compares the absolute store path instead: it stays
/// disconnected from the other, and reconnects to its own store when that is back.
#[test]
fn another_daemon_on_the_port_with_the_same_relative_store_path_is_not_sent_the_credential() {
    let Some(b) = Browser::start_or_skip(
        "another_daemon_on_the_port_with_the_same_relative_store_path_is_not_sent_the_credential",
        1280,
        800,
    ) else {
        return;
    };
    let a = serve_relative(tempfile::tempdir().unwrap(), "127.0.0.1:0");
    let token = a.operator_session("ops", &[]);
    let addr = a.addr.clone();
    let health = get(&a.url("/v1/health"), None).json();
    assert_eq!(health["db_path"], "db", "{health}");
    sign_in(&b, &format!("http://{addr}"), &token, "#log");
    let dir_a = a.halt();
    let other = serve_relative(tempfile::tempdir().unwrap(), &addr);
    assert_eq!(get(&other.url("/v1/health"), None).json()["db_path"], "db");
    b.wait_for("the page to say it is disconnected", |b| {
        (b.text_of("#live").as_deref() == Some("disconnected")).then_some(())
    });
    // Asked to reconnect, it still sends nothing to the other daemon.
    b.click(&b.find("#reconnect"));
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(b.text_of("#live").as_deref(), Some("disconnected"));
    let login = b.exec("return document.getElementById('login').hidden", json!([]));
    assert_eq!(
        login,
        json!(true),
        "the page was signed out: the other daemon saw the credential"
    );
    b.screenshot(&shots().join("workbench-other-store.png"));

    // Its own store back on the port: Reconnect follows the log again.
    drop(other.halt());
    let a = serve_relative(dir_a, &addr);
    b.click(&b.find("#reconnect"));
    b.wait_for("the live indicator", |b| {
        (b.text_of("#live").as_deref() == Some("live")).then_some(())
    });
    drop(a);
}

/// The credential was kept in `sessionStorage`, where a page served on the same origin after
/// a reload (by a process that took the port) could read it. It is kept in the page's memory
/// only: a reload asks for it again, and finds nothing stored.
#[test]
fn a_reloaded_page_finds_no_credential_stored_for_whatever_serves_it() {
    let Some(b) = Browser::start_or_skip(
        "a_reloaded_page_finds_no_credential_stored_for_whatever_serves_it",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.operator_session("ops", &[]);
    sign_in(&b, &format!("http://{}", d.addr), &token, "#log");
    let stored = b.exec(
        "return [sessionStorage.length, localStorage.length]",
        json!([]),
    );
    assert_eq!(stored, json!([0, 0]));
    b.exec("location.reload()", json!([]));
    b.wait_for("the sign-in form", |b| {
        b.exec(
            "return document.readyState === 'complete' && !!document.getElementById('credential') \
             && !document.getElementById('login').hidden",
            json!([]),
        )
        .as_bool()
        .filter(|shown| *shown)
    });
    let stored = b.exec(
        "return [sessionStorage.length, localStorage.length, document.getElementById('signout').hidden]",
        json!([]),
    );
    assert_eq!(stored, json!([0, 0, true]));
}

/// Every `details` in the entry open, and the text of each invisible character shown.
fn open_all_and_list_invisibles(b: &Browser) -> Value {
    b.exec(
        "document.querySelectorAll('#detail details').forEach((d) => { d.open = true; }); \
         return [...document.querySelectorAll('#detail .invisible')].map((e) => e.textContent)",
        json!([]),
    )
}

/// A path `"\u202Esr.niam\u202C"` showed as `main.rs`, and `"ma\u200Bin.rs"` as `main.rs`, in
/// the JSON of a verified call: bidi controls and zero-width characters are shown escaped, in
/// a style of their own, and the verdict is unchanged.
#[test]
fn bidi_and_zero_width_characters_cannot_disguise_a_path_under_a_verified_call() {
    let Some(b) = Browser::start_or_skip(
        "bidi_and_zero_width_characters_cannot_disguise_a_path_under_a_verified_call",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    call_read(&d, &token, "\u{202E}sr.niam\u{202C}");
    call_read(&d, &token, "ma\u{200B}in.rs");
    call_read(
        &d,
        &token,
        "a\u{2066}b\u{E0041}c\u{00AD}d\u{FEFF}e\u{061C}f\u{200F}",
    );
    let base = format!("http://{}", d.addr);
    let input_doc = |b: &Browser| {
        b.text_of("#links > li[data-kind='input'] .json")
            .unwrap_or_default()
    };

    sign_in(&b, &base, &token, "#entry/1");
    assert!(verdict(&b).starts_with('✓'));
    let shown = open_all_and_list_invisibles(&b);
    assert!(
        shown.as_array().unwrap().contains(&json!("\\u202e"))
            && shown.as_array().unwrap().contains(&json!("\\u202c")),
        "{shown}"
    );
    assert!(
        input_doc(&b).contains("\"path\": \"\\u202esr.niam\\u202c\""),
        "{}",
        input_doc(&b)
    );
    let raw = b.exec(
        "return /[\\u202a-\\u202e\\u200b-\\u200f]/.test(document.getElementById('detail').innerText)",
        json!([]),
    );
    assert_eq!(raw, json!(false));
    b.exec(
        "document.querySelector(\"#links > li[data-kind='input']\").scrollIntoView({block: 'center'})",
        json!([]),
    );
    b.screenshot(&shots().join("workbench-bidi.png"));

    b.goto(&format!("{base}/workbench#entry/2"));
    b.wait_for("entry 2", |b| {
        b.text_of("#detail h2")
            .filter(|t| t.starts_with("Entry #2"))
    });
    assert!(verdict(&b).starts_with('✓'));
    open_all_and_list_invisibles(&b);
    assert!(
        input_doc(&b).contains("\"path\": \"ma\\u200bin.rs\""),
        "{}",
        input_doc(&b)
    );

    b.goto(&format!("{base}/workbench#entry/3"));
    b.wait_for("entry 3", |b| {
        b.text_of("#detail h2")
            .filter(|t| t.starts_with("Entry #3"))
    });
    assert!(verdict(&b).starts_with('✓'));
    let shown = open_all_and_list_invisibles(&b);
    for escaped in [
        "\\u2066",
        "\\u{e0041}",
        "\\u00ad",
        "\\ufeff",
        "\\u061c",
        "\\u200f",
    ] {
        assert!(
            shown.as_array().unwrap().contains(&json!(escaped)),
            "{escaped}: {shown}"
        );
    }
    assert!(
        input_doc(&b).contains("\"path\": \"a\\u2066b\\u{e0041}c\\u00add\\ufeffe\\u061cf\\u200f\""),
        "{}",
        input_doc(&b)
    );
}

/// The entry's header (outcome, tool, episode, invocation) came from `/v1/log/summaries`, read
/// as stored and not verified, and was shown above "✓ 7 links verified" as it came: a proxy
/// that rewrote one summary made a denied ep1 read show as an ok ep2 write. The header is
/// checked against the verified record once the links are: the page names each field the
/// summary got wrong with both values, and shows the verified ones.
#[test]
fn a_rewritten_summary_cannot_put_a_forged_header_above_a_verified_chain() {
    let Some(b) = Browser::start_or_skip(
        "a_rewritten_summary_cannot_put_a_forged_header_above_a_verified_chain",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:1"]);
    let ops = d.operator_session("ops", &[]);
    std::fs::write(d.root().join("ep1/a.txt"), "a\n").unwrap();
    call_read(&d, &ep1, "a.txt");
    let denied = call_read(&d, &ep1, "a.txt");
    assert_eq!(
        denied["result"]["_meta"]["world/outcome"]["reason"], "denied:budget",
        "{denied}"
    );
    let page = get(&d.url("/v1/log/summaries?from=2&limit=1"), Some(&ops)).json();
    let invocation = page["items"][0]["invocationId"]
        .as_str()
        .unwrap()
        .to_owned();
    let proxy = TamperProxy::rewriting(
        &d.addr,
        "/v1/log/summaries",
        std::sync::Arc::new(|v: &mut Value| {
            for s in v["items"].as_array_mut().into_iter().flatten() {
                if s["header"]["entryIndex"] == 2 {
                    s["outcome"] = json!("ok");
                    s["reason"] = Value::Null;
                    s["tool"] = json!("ailang-write");
                    s["episode"] = json!("ep2");
                    s["invocationId"] = json!("mcp:ep2:forged");
                }
            }
            None
        }),
    );

    sign_in(&b, &proxy.url(""), &ops, "#entry/2");
    assert_eq!(verdict(&b), "✓ 7 links verified");
    let check = b.find("#header-check");
    assert_eq!(b.attr(&check, "data-check").as_deref(), Some("mismatch"));
    assert_eq!(
        b.text(&check),
        format!(
            "⚠ The daemon's summary of entry #2 does not match its verified record; shown above are the verified values.\n\
             outcome: the summary says ok, the verified record says denied (denied:budget)\n\
             tool: the summary says ailang-write, the verified record says ailang-read\n\
             episode: the summary says ep2, the verified record says ep1\n\
             invocation: the summary says mcp:ep2:forged, the verified record says {invocation}"
        )
    );
    assert_eq!(b.text_of("#detail h2").as_deref(), Some("Entry #2\ndenied"));
    let meta = b.text_of("#detail dl.meta").unwrap();
    assert!(
        meta.starts_with(&format!(
            "tool\nailang-read\nepisode\nep1\ninvocation\n{invocation}"
        )) && meta.contains("outcome\ndenied (denied:budget)\n"),
        "{meta}"
    );
    assert!(
        !meta.contains("ep2") && !meta.contains("ailang-write"),
        "{meta}"
    );
    let row = b.text_of("#entries li[data-index='2']").unwrap();
    assert!(row.contains("⚠ not as verified"), "{row}");
    b.screenshot(&shots().join("workbench-forged-header.png"));

    // An entry whose summary is as stored: the header is said to match.
    b.goto(&format!("{}#entry/1", proxy.url("/workbench")));
    b.wait_for("entry 1", |b| {
        b.text_of("#detail h2")
            .filter(|t| t.starts_with("Entry #1"))
    });
    assert_eq!(verdict(&b), "✓ 7 links verified");
    assert_eq!(
        b.text_of("#header-check").as_deref(),
        Some("✓ The header matches the verified record.")
    );
}

/// How long a click on the first "show all" button of `css` takes to render, in ms (the click,
/// a layout, and the next frame).
fn time_show_all(b: &Browser, css: &str) -> Value {
    b.exec_async(
        "const [css] = arguments; const done = arguments[arguments.length - 1];
         const li = document.querySelector(css);
         li.querySelectorAll('details').forEach((d) => { d.open = true; });
         const t = performance.now();
         li.querySelector('button.more').click();
         document.body.getBoundingClientRect();
         requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - t)));",
        json!([css]),
    )
}

/// `"a"` and 400000 combining acute accents, folded, still painted ~107 stacked marks over the
/// neighbouring links; opened, it hung the renderer for minutes; a key of 100000 marks (keys
/// were never folded) froze the tab. Runs of marks are counted (`a◌́×400000`), keys fold as
/// strings do, and each line clips what it draws. The key comes from a proxy that adds it to
/// the entry's JSON (a field the entry hash does not cover, so the entry still verifies).
#[test]
fn combining_marks_neither_paint_over_the_page_nor_freeze_it() {
    let Some(b) = Browser::start_or_skip(
        "combining_marks_neither_paint_over_the_page_nor_freeze_it",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    let marks = format!("a{}", "\u{0301}".repeat(400_000));
    call_read(&d, &token, &marks);
    let proxy = TamperProxy::rewriting(
        &d.addr,
        "/v1/log/1",
        std::sync::Arc::new(|v: &mut Value| {
            v[format!("k{}", "\u{0301}".repeat(100_000))] = json!(1);
            None
        }),
    );
    let input = "#links > li[data-kind='input']";

    sign_in(&b, &proxy.url(""), &token, "#entry/1");
    assert!(verdict(&b).starts_with('✓'));
    // Folded: the detail line and the document show a count, not 400000 stacked marks.
    let shown = b.exec(
        "const li = document.querySelector(arguments[0]);
         li.querySelectorAll('details').forEach((d) => { d.open = true; });
         return [li.querySelector('.why').innerText, li.querySelector('.json .s').innerText];",
        json!([input]),
    );
    assert_eq!(shown, json!(["path: \"a◌́×400000\"", "\"a◌́×158…"]));
    // Opened: within a couple of seconds, still counted.
    let took = time_show_all(&b, input);
    assert!(took.as_f64().is_some_and(|ms| ms < 2000.0), "{took}");
    assert_eq!(
        b.text_of(&format!("{input} .json .s")).as_deref(),
        Some("\"a◌́×400000\"")
    );
    let clipped = b.exec(
        "return getComputedStyle(document.querySelector(arguments[0] + ' .json li')).overflowY",
        json!([input]),
    );
    assert_eq!(clipped, "clip");
    b.exec(
        "document.querySelector(arguments[0]).scrollIntoView({block: 'center'})",
        json!([input]),
    );
    b.screenshot(&shots().join("workbench-marks.png"));

    // A key of 100000 marks the daemon served beside the entry: not in its document (the hash
    // does not cover it), named in the link's note, counted.
    let entry = "#links > li[data-kind='entry']";
    assert_eq!(
        b.text_of(&format!("{entry} .link-note")).as_deref(),
        Some("note: the daemon also served \"k◌́×100000\", which the entry hash does not cover: not shown")
    );
    b.exec(
        "document.querySelector(arguments[0]).scrollIntoView({block: 'start'})",
        json!([entry]),
    );
    b.screenshot(&shots().join("workbench-marks-key.png"));
    // No line of the entry draws more than a few marks on one character.
    let most = b.exec(
        "return Math.max(...(document.getElementById('detail').innerText.match(/\\p{M}+/gu) || ['']).map((m) => m.length))",
        json!([]),
    );
    assert!(most.as_u64().is_some_and(|n| n <= 4), "{most}");
}

/// The input's line was its canonical JSON cut at 120 UTF-16 units with no "…": a write's
/// `content` (sorted before `path`) hid the path, an emoji at the cut was split into a lone
/// surrogate, and a run of marks was counted of the cut. Every argument now shows, each long
/// string cut on code points with "…" and its length.
#[test]
fn the_input_line_names_every_argument_and_cuts_whole_characters_with_an_ellipsis() {
    let Some(b) = Browser::start_or_skip(
        "the_input_line_names_every_argument_and_cuts_whole_characters_with_an_ellipsis",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session(
        "ep1",
        &["Workspace.Read=worktree:10", "Workspace.Write=worktree:10"],
    );
    let write = |path: &str, content: &str| {
        let a = mcp(
            &d,
            &token,
            "tools/call",
            json!({"name": "ailang-write", "arguments": {"path": path, "content": content}}),
        );
        assert_eq!(a.status, 200, "{}", a.text());
        let v = a.sse_json();
        v["result"]["_meta"]["world/entryIndex"]
            .as_u64()
            .unwrap_or_else(|| panic!("{v}"))
    };
    let long = write("notes.md", &"x".repeat(200));
    let emoji = write("e.md", &"\u{1F600}".repeat(60));
    let marks = write("m.md", &format!("a{}", "\u{0301}".repeat(3_000)));
    let base = format!("http://{}", d.addr);
    // The line's text, and whether it holds a lone surrogate (read in the page: the driver's
    // JSON would replace one).
    sign_in(&b, &base, &token, "#log");
    let line = |b: &Browser, i: u64| {
        open_entry(b, &base, i);
        b.exec(
            "const t = document.querySelector(\"#links > li[data-kind='input'] .why\").innerText;
             return [t, /[\\ud800-\\udfff]/u.test(t)];",
            json!([]),
        )
    };
    assert_eq!(
        line(&b, long),
        json!([
            format!(
                "path: \"notes.md\", content (200 chars): \"{}\"…",
                "x".repeat(24)
            ),
            false
        ])
    );
    assert_eq!(
        line(&b, emoji),
        json!([
            format!(
                "path: \"e.md\", content (60 chars): \"{}\"…",
                "\u{1F600}".repeat(24)
            ),
            false
        ])
    );
    // The run reaches the cut, so it is kept whole and counted whole.
    assert_eq!(
        line(&b, marks),
        json!(["path: \"m.md\", content: \"a◌́×3000\"", false])
    );
}

/// Every broken link was called tampering: "✗ 1 of 7 links broken: the daemon served bytes
/// that do not match their address", even when the object was not served at all (HTTP 404).
/// The verdict is worded by cause.
#[test]
fn an_object_the_daemon_does_not_serve_is_not_called_bytes_that_do_not_match() {
    let Some(b) = Browser::start_or_skip(
        "an_object_the_daemon_does_not_serve_is_not_called_bytes_that_do_not_match",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    call_read(&d, &token, "hello.txt");
    let missing = input_ref(&d, &token, 1);
    let proxy = TamperProxy::rewriting(
        &d.addr,
        &format!("/v1/objects/{missing}"),
        std::sync::Arc::new(|v: &mut Value| {
            *v = json!({"error": {"class": "NotFound", "message": "no such object"}});
            Some(404)
        }),
    );
    sign_in(&b, &proxy.url(""), &token, "#entry/1");
    assert_eq!(
        verdict(&b),
        "✗ 1 of 7 links broken: not served by the daemon (an error or no answer), so not checked; nothing served was found altered"
    );
    let input = b.find("#links > li[data-kind='input']");
    assert_eq!(b.attr(&input, "data-failure").as_deref(), Some("unserved"));
    let why = b.text_of("#links > li[data-kind='input'] .why").unwrap();
    assert_eq!(why, "not served: HTTP 404 NotFound: no such object");
    b.screenshot(&shots().join("workbench-not-served.png"));
}

/// The entry link's document showed the whole JSON the daemon served for `/v1/log/N`, members
/// the entry hash does not cover included: a daemon (or a proxy) could add a member, and it sat
/// under the ✓ as if verified. The document is now what the hash covers, and a note names what
/// else was served.
#[test]
fn members_the_entry_hash_does_not_cover_are_not_shown_under_its_verified_mark() {
    let Some(b) = Browser::start_or_skip(
        "members_the_entry_hash_does_not_cover_are_not_shown_under_its_verified_mark",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    call_read(&d, &token, "hello.txt");
    let proxy = TamperProxy::rewriting(
        &d.addr,
        "/v1/log/1",
        std::sync::Arc::new(|v: &mut Value| {
            v["approvedBy"] = json!("security team");
            // Named as what every JavaScript object inherits: not taken for a covered member.
            v["constructor"] = json!("security team");
            v["header"]["reviewed"] = json!(true);
            v["header"]["toString"] = json!("security team");
            None
        }),
    );
    sign_in(&b, &proxy.url(""), &token, "#entry/1");
    assert_eq!(verdict(&b), "✓ 7 links verified");
    let note = b
        .text_of("li.link[data-kind='entry'] .link-note")
        .expect("the entry link's note");
    assert_eq!(
        note,
        "note: the daemon also served \"approvedBy\", \"constructor\", \"header.reviewed\", \"header.toString\", which the entry hash does not cover: not shown"
    );
    let shown = b.exec(
        "return document.querySelector(\"li.link[data-kind='entry']\").innerText",
        json!([]),
    );
    b.click(&b.find("li.link[data-kind='entry'] summary"));
    let opened = b.exec(
        "return document.querySelector(\"li.link[data-kind='entry']\").innerText",
        json!([]),
    );
    for text in [&shown, &opened] {
        let text = text.as_str().unwrap();
        assert!(
            !text.contains("security team") && !text.contains("reviewed\":"),
            "{text}"
        );
    }
    assert!(
        opened.as_str().unwrap().contains("transitionRef"),
        "{opened}"
    );
}

/// An agent's argument key of 2,000 combining marks: the input's document folds the key as it
/// folds a long string, and draws the marks as a count, folded and opened.
#[test]
fn a_long_argument_key_folds_like_a_long_string_and_its_marks_are_counted() {
    let Some(b) = Browser::start_or_skip(
        "a_long_argument_key_folds_like_a_long_string_and_its_marks_are_counted",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    let key = format!("k{}", "\u{0301}".repeat(2_000));
    let mut args = serde_json::Map::new();
    args.insert("path".into(), json!("hello.txt"));
    args.insert(key, json!(1));
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": args}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.sse_json();
    assert_eq!(v["result"]["_meta"]["world/entryIndex"], json!(1), "{v}");
    sign_in(&b, &format!("http://{}", d.addr), &token, "#entry/1");
    assert!(verdict(&b).starts_with('✓'));
    let input = "#links > li[data-kind='input']";
    let key = "const li = document.querySelector(arguments[0]);
         li.querySelectorAll('details').forEach((d) => { d.open = true; });
         const k = [...li.querySelectorAll('.json .k')].find((k) => k.innerText.startsWith('\"k'));";
    let folded = b.exec(
        &format!(
            "{key} return [k.innerText, k.parentElement.querySelector('button.more').innerText];"
        ),
        json!([input]),
    );
    assert_eq!(folded, json!(["\"k◌́×158…", "show all 2003 chars"]));
    let took = time_show_all(&b, input);
    assert!(took.as_f64().is_some_and(|ms| ms < 2000.0), "{took}");
    let opened = b.exec(&format!("{key} return k.innerText;"), json!([input]));
    assert_eq!(opened, "\"k◌́×2000\"");
}

/// A browser probe reported that a 100-level array, fully opened, ran off the right edge of the
/// entry column (`#detail` scrollWidth equal to its clientWidth). The document's box scrolls
/// sideways (`.json { overflow-x: auto }`), so the column does not grow: this pins it (without
/// that rule the column grows and this fails).
#[test]
fn a_deeply_nested_document_scrolls_sideways_in_its_box() {
    let Some(b) = Browser::start_or_skip(
        "a_deeply_nested_document_scrolls_sideways_in_its_box",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let a = mcp(
        &d,
        &token,
        "tools/call",
        json!({"name": "ailang-read", "arguments": {"path": "hello.txt", "deep": deep}}),
    );
    assert_eq!(a.status, 200, "{}", a.text());
    let v = a.sse_json();
    assert_eq!(v["result"]["_meta"]["world/entryIndex"], json!(1), "{v}");
    sign_in(&b, &format!("http://{}", d.addr), &token, "#entry/1");
    assert!(verdict(&b).starts_with('✓'));
    let measured = b.exec(
        "const li = document.querySelector(\"#links > li[data-kind='input']\");
         li.querySelectorAll('details').forEach((d) => { d.open = true; });
         const box = li.querySelector('.json');
         const detail = document.getElementById('detail');
         const inner = [...box.querySelectorAll('.n')].at(-1).getBoundingClientRect();
         return [box.scrollWidth > box.clientWidth, getComputedStyle(box).overflowX,
           detail.scrollWidth === detail.clientWidth,
           inner.left > box.getBoundingClientRect().right];",
        json!([]),
    );
    // The box scrolls; the column does not grow; the innermost value is past the box's edge,
    // reached by scrolling it.
    assert_eq!(measured, json!([true, "auto", true, true]));
    let reached = b.exec(
        "const box = document.querySelector(\"#links > li[data-kind='input'] .json\");
         box.scrollLeft = box.scrollWidth;
         const inner = [...box.querySelectorAll('.n')].at(-1).getBoundingClientRect();
         const edge = box.getBoundingClientRect();
         return inner.left >= edge.left && inner.right <= edge.right;",
        json!([]),
    );
    assert_eq!(reached, json!(true));
    b.exec(
        "document.querySelector(\"#links > li[data-kind='input']\").scrollIntoView({block: 'start'})",
        json!([]),
    );
    b.screenshot(&shots().join("workbench-deep-document.png"));
}

/// Which requests a [`HoldProxy`] holds: those whose path starts with `.0` sent with the
/// credential `.1`.
type HoldRule = Option<(String, String)>;

/// What a [`HoldProxy`] has done with the requests it holds.
#[derive(Default)]
struct Held {
    rule: HoldRule,
    /// Held requests whose answer the daemon has given and the proxy keeps.
    waiting: usize,
    /// Held answers passed on to the page.
    answered: usize,
    /// Let the held answers go.
    open: bool,
    /// Pass this on instead of the daemon's answer.
    instead: Option<Vec<u8>>,
}

/// A loopback proxy in front of the daemon that keeps the daemon's answer to the requests its
/// rule names until [`HoldProxy::release`], and passes everything else through (streams
/// included): a daemon slow to answer one request, made deterministic.
struct HoldProxy {
    addr: String,
    held: std::sync::Arc<(std::sync::Mutex<Held>, std::sync::Condvar)>,
}

impl HoldProxy {
    fn start(upstream: &str) -> HoldProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let held = std::sync::Arc::new((
            std::sync::Mutex::new(Held::default()),
            std::sync::Condvar::new(),
        ));
        let upstream = upstream.to_owned();
        let shared = held.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let (upstream, held) = (upstream.clone(), shared.clone());
                std::thread::spawn(move || {
                    let _ = hold_one(client, &upstream, &held);
                });
            }
        });
        HoldProxy { addr, held }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Hold, from now on, the answers to the requests for `path…` sent with `token`.
    fn hold(&self, path: &str, token: &str) {
        let (lock, _) = &*self.held;
        *lock.lock().unwrap() = Held {
            rule: Some((path.to_owned(), token.to_owned())),
            ..Held::default()
        };
    }

    /// Wait until the daemon has answered a held request (the answer is kept).
    fn wait_held(&self) {
        let (lock, cv) = &*self.held;
        let (_guard, timeout) = cv
            .wait_timeout_while(lock.lock().unwrap(), webdriver::WAIT, |h| h.waiting == 0)
            .unwrap();
        assert!(!timeout.timed_out(), "no request was held");
    }

    /// Pass the held answers on, and wait until they are written to the page.
    fn release(&self) {
        self.answer(None);
    }

    /// Pass `answer` on instead of the held answers, and wait until it is written to the page.
    fn release_instead(&self, answer: &str) {
        self.answer(Some(answer.as_bytes().to_vec()));
    }

    fn answer(&self, instead: Option<Vec<u8>>) {
        let (lock, cv) = &*self.held;
        let mut held = lock.lock().unwrap();
        held.open = true;
        held.instead = instead;
        cv.notify_all();
        let (_guard, timeout) = cv
            .wait_timeout_while(held, webdriver::WAIT, |h| h.answered < h.waiting)
            .unwrap();
        assert!(!timeout.timed_out(), "the held answers were not passed on");
    }
}

fn hold_one(
    mut client: TcpStream,
    upstream: &str,
    held: &(std::sync::Mutex<Held>, std::sync::Condvar),
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte)? == 0 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let path = text.split(' ').nth(1).unwrap_or("").to_owned();
    let (lock, cv) = held;
    let hold = lock.lock().unwrap().rule.as_ref().is_some_and(|(p, t)| {
        path.starts_with(p.as_str())
            && text
                .to_ascii_lowercase()
                .contains(&format!("authorization: bearer {}", t.to_ascii_lowercase()))
    });
    let forwarded: String = text
        .lines()
        .filter(|l| !l.is_empty() && !l.to_ascii_lowercase().starts_with("connection:"))
        .map(|l| format!("{l}\r\n"))
        .chain(["Connection: close\r\n\r\n".to_owned()])
        .collect();
    let mut server = TcpStream::connect(upstream)?;
    server.write_all(forwarded.as_bytes())?;
    if !hold {
        std::io::copy(&mut server, &mut client)?;
        return Ok(());
    }
    let mut answer = Vec::new();
    server.read_to_end(&mut answer)?;
    let mut h = lock.lock().unwrap();
    h.waiting += 1;
    cv.notify_all();
    let mut h = cv.wait_while(h, |h| !h.open).unwrap();
    let written = client.write_all(h.instead.as_deref().unwrap_or(&answer));
    h.answered += 1;
    cv.notify_all();
    written
}

/// Sign in with `token` on the page as it is (no reload: what the page had in flight stays in
/// flight) and wait for the live timeline.
fn sign_in_here(b: &Browser, token: &str) {
    let input = b.wait_for_element("#credential");
    b.type_into(&input, token);
    b.click(&b.find("#login-submit"));
    b.wait_for("the live indicator", |b| {
        (b.text_of("#live").as_deref() == Some("live")).then_some(())
    });
}

/// Let the page act on the answers a [`HoldProxy`] just passed on (all written to its
/// socket): a second, then a frame.
fn let_the_page_act(b: &Browser) {
    b.exec_async(
        "const done = arguments[arguments.length - 1]; \
         setTimeout(() => requestAnimationFrame(() => done(null)), 1000);",
        json!([]),
    );
}

/// Signing out did not forget what was still in flight: an operator's **Load older entries**
/// that answered after the operator signed out and an agent signed in put the operator's
/// entries (another episode's) in the agent's timeline and its Episode filter; an operator's
/// `GET /v1/budget` put `ops · operator` on the agent's badge; an operator's `GET
/// /v1/handlers` painted the operator's plugins view (library paths on the host) over the
/// agent's. Each answer is held by a proxy until the agent is signed in.
#[test]
fn an_answer_in_flight_when_signing_out_never_shows_under_the_next_credential() {
    let Some(b) = Browser::start_or_skip(
        "an_answer_in_flight_when_signing_out_never_shows_under_the_next_credential",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:100"]);
    let ep3 = d.session("ep3", &["Workspace.Read=worktree:100"]);
    let ops = d.operator_session("ops", &[]);
    // Entries 1–59 are ep3's, 60 is ep1's: the newest page of 50 is 11–60, and the older
    // page (0–10) holds only the genesis and ep3's calls.
    for _ in 0..59 {
        call_read(&d, &ep3, "hello.txt");
    }
    call_read(&d, &ep1, "hello.txt");
    let proxy = HoldProxy::start(&d.addr);
    let agent_sees = |b: &Browser| {
        b.exec(
            "return [[...document.querySelectorAll('#entries li')].map((li) => li.dataset.index), \
             [...document.getElementById('filter-episode').options].map((o) => o.value), \
             document.getElementById('timeline-status').innerText, \
             document.getElementById('who').innerText]",
            json!([]),
        )
    };
    let agent_timeline = json!([
        ["60"],
        ["", "ep1"],
        "1 shown of 1 loaded · entries 11–60 scanned",
        "ep1"
    ]);

    // Load older entries, held; sign out, sign in as the agent; the answer comes.
    b.goto(&proxy.url("/workbench#log"));
    sign_in_here(&b, &ops);
    b.wait_for_element("#entries li[data-index='60']");
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("50 shown of 50 loaded · entries 11–60 scanned")
    );
    proxy.hold("/v1/log/summaries?from=0", &ops);
    b.click(&b.find("#older"));
    proxy.wait_held();
    sign_out(&b);
    sign_in_here(&b, &ep1);
    b.wait_for_element("#entries li[data-index='60']");
    assert_eq!(agent_sees(&b), agent_timeline);
    proxy.release();
    let_the_page_act(&b);
    assert_eq!(agent_sees(&b), agent_timeline);
    b.screenshot(&shots().join("workbench-signout-in-flight.png"));

    // Who the credential is, held at the operator's sign-in.
    sign_out(&b);
    proxy.hold("/v1/budget", &ops);
    let input = b.wait_for_element("#credential");
    b.type_into(&input, &ops);
    b.click(&b.find("#login-submit"));
    proxy.wait_held();
    sign_out(&b);
    assert_eq!(
        b.text_of("#login-error").as_deref(),
        Some(""),
        "a sign-out is not a refusal"
    );
    sign_in_here(&b, &ep1);
    b.wait_for("the agent's badge", |b| {
        (b.text_of("#who").as_deref() == Some("ep1")).then_some(())
    });
    proxy.release();
    let_the_page_act(&b);
    assert_eq!(agent_sees(&b), agent_timeline);
    assert_eq!(
        b.exec(
            "return document.getElementById('who').classList.contains('operator')",
            json!([])
        ),
        json!(false)
    );

    // The plugins view, held for the operator.
    sign_out(&b);
    b.goto(&proxy.url("/workbench#plugins"));
    sign_in_here(&b, &ops);
    b.wait_for_element("section[data-plugin='workspace'] dd.path code");
    let operator_path = b.text(&b.find("section[data-plugin='workspace'] dd.path code"));
    assert!(operator_path.starts_with('/'), "{operator_path}");
    proxy.hold("/v1/handlers", &ops);
    b.click(&b.find("#nav a[data-view='log']"));
    b.click(&b.find("#nav a[data-view='plugins']"));
    proxy.wait_held();
    sign_out(&b);
    sign_in_here(&b, &ep1);
    let agent_path = || {
        b.wait_for_element("section[data-plugin='workspace'] dd.path code");
        b.text(&b.find("section[data-plugin='workspace'] dd.path code"))
    };
    assert_eq!(agent_path(), "libworldd_workspace.so");
    proxy.release();
    let_the_page_act(&b);
    assert_eq!(agent_path(), "libworldd_workspace.so");
    assert_eq!(b.text_of("#who").as_deref(), Some("ep1"));
}

/// Under `--open-reads` a credential the daemon does not know reads the log, then is refused
/// `GET /v1/budget`: the page showed the sign-in form with the refusal and, below it, the log
/// view, `disconnected` and **Reconnect**. A sign-in refused midway stops at the sign-in form.
#[test]
fn a_credential_refused_after_the_log_loaded_leaves_only_the_sign_in_form() {
    let Some(b) = Browser::start_or_skip(
        "a_credential_refused_after_the_log_loaded_leaves_only_the_sign_in_form",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &["--open-reads"]);
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:10"]);
    call_read(&d, &ep1, "hello.txt");
    let unknown = "ab".repeat(32);
    assert_eq!(
        get(&d.url("/v1/log/summaries?limit=50"), Some(&unknown)).status,
        200
    );
    b.goto(&format!("http://{}/workbench", d.addr));
    let input = b.wait_for_element("#credential");
    b.type_into(&input, &unknown);
    b.click(&b.find("#login-submit"));
    b.wait_for("the refusal", |b| {
        b.text_of("#login-error")
            .filter(|t| t.starts_with("The daemon refused"))
    });
    // Long enough for the log stream the page would have followed to find no daemon.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let page = b.exec(
        "const shown = (id) => !document.getElementById(id).hidden; \
         return [shown('login'), document.getElementById('login-error').innerText, \
         ['view-log', 'view-episode', 'view-plugins', 'view-metrics', 'signout', 'reconnect', 'nav', 'who'].filter(shown), \
         document.getElementById('live').innerText, document.querySelectorAll('#entries li').length]",
        json!([]),
    );
    assert_eq!(
        page,
        json!([
            true,
            "The daemon refused the credential: unknown session credential",
            [],
            "offline",
            0
        ])
    );
    b.screenshot(&shots().join("workbench-refused-midway.png"));
}

/// `call_read`, again after a moment while the daemon refuses it for capacity (a refused call
/// spends the credential's refusal rate by the 16 KiB it stores): the index of the entry it
/// made.
fn call_read_recorded(d: &Daemon, token: &str, path: &str) -> u64 {
    for _ in 0..20 {
        let a = mcp(
            d,
            token,
            "tools/call",
            json!({"name": "ailang-read", "arguments": {"path": path}}),
        );
        assert_eq!(a.status, 200, "{}", a.text());
        let r = if a.content_type.starts_with("application/json") {
            a.json()
        } else {
            a.sse_json()
        };
        if let Some(i) = r["result"]["_meta"]["world/entryIndex"].as_u64() {
            return i;
        }
        assert_eq!(
            r["error"]["message"], "host callback capacity exceeded",
            "{r}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!("the call was refused for capacity twenty times");
}

/// Open entry `i` and wait for its verdict.
fn open_entry(b: &Browser, base: &str, i: u64) {
    b.goto(&format!("{base}/workbench#entry/{i}"));
    b.wait_for(&format!("entry {i}"), |b| {
        b.text_of("#detail h2")
            .filter(|t| t.starts_with(&format!("Entry #{i}\n")))
    });
    assert!(verdict(b).starts_with('✓'));
}

/// How the page escapes code point `cp`: `\u034f`, or `\u{e0100}` beyond the BMP.
fn escaped(cp: u32) -> String {
    if cp > 0xffff {
        format!("\\u{{{cp:x}}}")
    } else {
        format!("\\u{cp:04x}")
    }
}

/// Every `details` of the input link open, and the text of each invisible character its
/// document shows.
fn input_invisibles(b: &Browser) -> Value {
    b.exec(
        "const li = document.querySelector(\"#links > li[data-kind='input']\"); \
         li.querySelectorAll('details').forEach((d) => { d.open = true; }); \
         return [...li.querySelectorAll('.json .invisible')].map((e) => e.textContent)",
        json!([]),
    )
}

/// One code point of each range the page escapes (the first): Unicode 16.0's
/// Default_Ignorable_Code_Point, the format characters outside it that draw nothing, DEL and
/// the C1 controls, and the line and paragraph separators.
const INVISIBLE_SAMPLES: &[u32] = &[
    0x007f, 0x0085, 0x00ad, 0x034f, 0x061c, 0x115f, 0x1160, 0x17b4, 0x180b, 0x180e, 0x180f, 0x200b,
    0x200e, 0x2028, 0x2029, 0x202a, 0x202e, 0x2060, 0x2064, 0x2065, 0x2066, 0x2069, 0x206a, 0x3164,
    0xfe00, 0xfe0f, 0xfeff, 0xffa0, 0xfff0, 0xfff9, 0x13430, 0x1bca0, 0x1d173, 0xe0001, 0xe0041,
    0xe0100, 0xe01f0,
];

/// Only a hand list of invisible characters was escaped: `"ma\u034Fin.rs"` (a combining
/// grapheme joiner), a variation selector, a Khmer inherent vowel, a Mongolian variation
/// selector, a musical format control, the unassigned U+2065 drew as nothing under ✓, and a
/// line separator as a break. Every Default_Ignorable_Code_Point, every format character
/// that draws nothing, DEL, the C1 controls and the line and paragraph separators are shown
/// escaped: a sample of each range of the page's table, then every such code point the
/// browser's own Unicode data knows. A run of marks no longer swallows a variation selector,
/// and a run of one invisible character is counted.
#[test]
fn every_default_ignorable_or_format_character_is_shown_escaped_not_drawn_as_nothing() {
    let Some(b) = Browser::start_or_skip(
        "every_default_ignorable_or_format_character_is_shown_escaped_not_drawn_as_nothing",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    let base = format!("http://{}", d.addr);
    let input_doc = |b: &Browser| {
        b.text_of("#links > li[data-kind='input'] .json")
            .unwrap_or_default()
    };

    // What the browser's Unicode data calls default-ignorable, or a format character (less
    // the prepended concatenation marks, which are drawn), and the separators and controls.
    b.goto(&format!("{base}/workbench"));
    b.wait_for_element("#credential");
    let all: Vec<u32> = serde_json::from_value(b.exec(
        "const pcm = (cp) => (cp >= 0x600 && cp <= 0x605) || [0x6dd, 0x70f, 0x890, 0x891, 0x8e2, 0x110bd, 0x110cd].includes(cp);
         const out = [];
         for (let cp = 0; cp <= 0x10ffff; cp++) {
           if (cp >= 0xd800 && cp <= 0xdfff) continue;
           const c = String.fromCodePoint(cp);
           if (/\\p{Default_Ignorable_Code_Point}/u.test(c) || (/\\p{Cf}/u.test(c) && !pcm(cp))
               || cp === 0x2028 || cp === 0x2029 || (cp >= 0x7f && cp <= 0x9f)) out.push(cp);
         }
         return out;",
        json!([]),
    ))
    .unwrap();
    assert!(all.len() > 4000, "{}", all.len());
    for cp in INVISIBLE_SAMPLES {
        assert!(
            all.contains(cp),
            "U+{cp:04X} is not invisible to this browser"
        );
    }

    let ch = |cp: u32| char::from_u32(cp).unwrap();
    let samples: String = INVISIBLE_SAMPLES
        .iter()
        .map(|&cp| format!("x{}", ch(cp)))
        .collect();
    let every: String = all.iter().map(|&cp| format!("x{}", ch(cp))).collect();
    let cgj = call_read_recorded(&d, &token, "ma\u{34F}in.rs");
    let lsep = call_read_recorded(&d, &token, "main.rs\u{2028}\"evil\": true");
    let sampled = call_read_recorded(&d, &token, &samples);
    let runs = call_read_recorded(
        &d,
        &token,
        &format!(
            "a\u{301}\u{301}\u{301}\u{FE0F}\u{301}\u{301}\u{301}|b{}",
            "\u{200B}".repeat(6)
        ),
    );
    let everything = call_read_recorded(&d, &token, &every);

    sign_in(&b, &base, &token, &format!("#entry/{cgj}"));
    assert!(verdict(&b).starts_with('✓'));
    assert_eq!(input_invisibles(&b), json!(["\\u034f"]));
    assert!(
        input_doc(&b).contains("\"path\": \"ma\\u034fin.rs\""),
        "{}",
        input_doc(&b)
    );
    let title = b.exec(
        "return document.querySelector(\"#links > li[data-kind='input'] .json .invisible\").title",
        json!([]),
    );
    assert_eq!(
        title,
        "U+034F COMBINING GRAPHEME JOINER: shown escaped; the bytes hold the character itself"
    );
    b.exec(
        "document.querySelector(\"#links > li[data-kind='input']\").scrollIntoView({block: 'center'})",
        json!([]),
    );
    b.screenshot(&shots().join("workbench-invisible-cgj.png"));

    open_entry(&b, &base, lsep);
    assert_eq!(input_invisibles(&b), json!(["\\u2028"]));
    assert!(
        input_doc(&b).contains("\"path\": \"main.rs\\u2028\\\"evil\\\": true\""),
        "{}",
        input_doc(&b)
    );

    open_entry(&b, &base, sampled);
    let want: Vec<String> = INVISIBLE_SAMPLES.iter().map(|&cp| escaped(cp)).collect();
    assert_eq!(input_invisibles(&b), json!(want));
    let shown: String = want.iter().map(|e| format!("x{e}")).collect();
    assert!(
        input_doc(&b).contains(&format!("\"path\": \"{shown}\"")),
        "{}",
        input_doc(&b)
    );
    b.exec(
        "document.querySelector(\"#links > li[data-kind='input']\").scrollIntoView({block: 'center'})",
        json!([]),
    );
    b.screenshot(&shots().join("workbench-invisible-samples.png"));

    open_entry(&b, &base, runs);
    assert_eq!(input_invisibles(&b), json!(["\\ufe0f", "\\u200b×6"]));
    assert!(
        input_doc(&b).contains(
            "\"path\": \"a\u{301}\u{301}\u{301}\\ufe0f\u{301}\u{301}\u{301}|b\\u200b×6\""
        ),
        "{}",
        input_doc(&b)
    );

    // Every one the browser knows, opened: each escaped, none drawn as itself.
    open_entry(&b, &base, everything);
    let shown = b.exec(
        "const li = document.querySelector(\"#links > li[data-kind='input']\");
         li.querySelectorAll('details').forEach((d) => { d.open = true; });
         li.querySelector('.json button.more').click();
         const text = document.getElementById('detail').innerText;
         return [[...li.querySelectorAll('.json .invisible')].map((e) => e.textContent),
           /[\\p{Default_Ignorable_Code_Point}\\u2028\\u2029\\x7f-\\x9f\\ufff9-\\ufffb\\u{13430}-\\u{1343f}]/u.test(text)];",
        json!([]),
    );
    let want: Vec<String> = all.iter().map(|&cp| escaped(cp)).collect();
    assert_eq!(shown, json!([want, false]));
}

/// **show all N chars** on a string of many invisible characters threw `RangeError: Maximum
/// call stack size exceeded` (one node per character spread into one call) and the string
/// stayed folded. It opens: 150000 escaped characters between letters, and a run of 300000 of
/// one shown counted.
#[test]
fn show_all_opens_a_string_of_150000_invisible_characters() {
    let Some(b) = Browser::start_or_skip(
        "show_all_opens_a_string_of_150000_invisible_characters",
        1280,
        800,
    ) else {
        return;
    };
    // The plan refuses these paths, and a refusal of a megabyte would spend the credential's
    // refusal rate: off here.
    let d = Daemon::start(WS, &["--refusals-per-minute", "0"]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    let base = format!("http://{}", d.addr);
    let between = call_read_recorded(&d, &token, &"x\u{200B}".repeat(150_000));
    let run = call_read_recorded(&d, &token, &format!("a{}", "\u{200B}".repeat(300_000)));
    let input = "#links > li[data-kind='input']";
    let opened = |b: &Browser| {
        b.exec(
            "const li = document.querySelector(arguments[0]);
             return [li.querySelector('.json button.more').innerText,
               li.querySelectorAll('.json .invisible').length,
               li.querySelector('.json .s').innerText.slice(0, 36)];",
            json!([input]),
        )
    };

    sign_in(&b, &base, &token, &format!("#entry/{between}"));
    assert!(verdict(&b).starts_with('✓'));
    let took = time_show_all(&b, input);
    assert!(took.as_f64().is_some_and(|ms| ms < 15_000.0), "{took}");
    assert_eq!(
        opened(&b),
        json!([
            "fold",
            150_000,
            "\"x\\u200bx\\u200bx\\u200bx\\u200bx\\u200b"
        ])
    );
    b.exec(
        "document.querySelector(arguments[0]).scrollIntoView({block: 'center'})",
        json!([input]),
    );
    b.screenshot(&shots().join("workbench-invisible-show-all.png"));

    open_entry(&b, &base, run);
    b.exec(
        "document.querySelector(arguments[0]).querySelectorAll('details').forEach((d) => { d.open = true; })",
        json!([input]),
    );
    assert_eq!(
        opened(&b),
        json!(["show all 300003 chars", 1, "\"a\\u200b×158…"])
    );
    let took = time_show_all(&b, input);
    assert!(took.as_f64().is_some_and(|ms| ms < 2000.0), "{took}");
    assert_eq!(opened(&b), json!(["fold", 1, "\"a\\u200b×300000\""]));
}

/// Poll `probe` every 100 ms for up to `secs` seconds (longer than [`webdriver::WAIT`]: what
/// it waits for takes the page's own timeouts).
fn wait_long<T>(
    b: &Browser,
    what: &str,
    secs: u64,
    mut probe: impl FnMut(&Browser) -> Option<T>,
) -> T {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(v) = probe(b) {
            return v;
        }
        if std::time::Instant::now() > until {
            let body = b.exec("return document.body.innerText", json!([]));
            panic!("timed out waiting {secs} s for {what}; the page says:\n{body}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A probe for [`Browser::wait_for`] and [`wait_long`]: whether the live indicator says
/// `state` (`live`, `reconnecting…`, `disconnected`).
fn live_says(state: &str) -> impl Fn(&Browser) -> Option<()> + '_ {
    move |b| (b.text_of("#live").as_deref() == Some(state)).then_some(())
}

/// A daemon whose log holds one read by ep1 (entry 1), and an operator's credential.
fn one_read_and_an_operator() -> (Daemon, String) {
    let d = Daemon::start(WS, &[]);
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:10"]);
    let ops = d.operator_session("ops", &[]);
    call_read(&d, &ep1, "a.txt");
    (d, ops)
}

/// The rows of the timeline: `[index, the .sub line's title]` (the invocation id of a call).
fn timeline_rows(b: &Browser) -> Value {
    b.exec(
        "return [...document.querySelectorAll('#entries li')].map((li) => \
         [Number(li.dataset.index), li.querySelector('.sub').title])",
        json!([]),
    )
}

/// What `GET /v1/log/summaries` lists for `token`, as [`timeline_rows`] shows it.
fn summaries_as_rows(d_url: &str, token: &str) -> Value {
    let page = get(
        &format!("{d_url}/v1/log/summaries?from=0&limit=500"),
        Some(token),
    )
    .json();
    let mut rows: Vec<Value> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            json!([
                s["header"]["entryIndex"],
                s["invocationId"].as_str().or(s["entryHash"].as_str())
            ])
        })
        .collect();
    rows.reverse();
    json!(rows)
}

/// A daemon whose log holds `ep1_reads` reads by ep1, then `ep3_reads` by ep3; ep1's
/// credential.
fn ep1_calls_then_ep3_calls(ep1_reads: usize, ep3_reads: usize) -> (Daemon, String) {
    let d = Daemon::start(WS, &[]);
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:10"]);
    let ep3 = d.session("ep3", &["Workspace.Read=worktree:1000"]);
    std::fs::write(d.root().join("ep1/a.txt"), "a\n").unwrap();
    std::fs::write(d.root().join("ep3/b.txt"), "b\n").unwrap();
    for _ in 0..ep1_reads {
        call_read(&d, &ep1, "a.txt");
    }
    for _ in 0..ep3_reads {
        call_read_recorded(&d, &ep3, "b.txt");
    }
    (d, ep1)
}

/// An agent whose calls are older than the newest 50 entries of a busy log (another episode
/// made 560 calls since) was told "No entries you can see yet", and found its calls only after
/// one click of Load older entries per 50 entries. The page scans back (pages of 500) until it
/// has something to show: the agent's calls appear at sign-in, on the Log and the Episode view.
#[test]
fn an_agent_whose_calls_are_older_than_the_newest_page_sees_them_not_none() {
    let Some(b) = Browser::start_or_skip(
        "an_agent_whose_calls_are_older_than_the_newest_page_sees_them_not_none",
        1280,
        800,
    ) else {
        return;
    };
    // ep1's calls are entries 1 and 2, ep3's 3–562.
    let (d, ep1) = ep1_calls_then_ep3_calls(2, 560);
    let base = format!("http://{}", d.addr);
    // Signed in, the timeline holds ep1's calls and the genesis, without a click.
    sign_in(&b, &base, &ep1, "#log");
    let rows = b.exec(
        "return [...document.querySelectorAll('#entries li')].map((li) => Number(li.dataset.index))",
        json!([]),
    );
    assert_eq!(rows, json!([2, 1, 0]));
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("3 shown of 3 loaded · entries 0–562 scanned")
    );
    assert_eq!(
        b.exec("return document.getElementById('older').hidden", json!([])),
        json!(true),
        "the whole log was scanned"
    );
    b.screenshot(&shots().join("workbench-agent-older-calls.png"));
    b.click(&b.find("#nav a[data-view='episode']"));
    let episodes = b.wait_for_element("#episodes table");
    assert_eq!(
        b.text(&episodes),
        "episode entries loaded\nep1 (this credential's) 2"
    );
    // The whole log was scanned: the card names it, and no older entries are left.
    assert_eq!(
        b.text_of("#episodes-range").as_deref(),
        Some("Counted in the loaded part of the log: entries 0–562.")
    );
}

/// The Episodes card named the part of the log it counts only when it listed nothing: an
/// operator on a large log saw `ep3 50` and no word that older entries (and any episode only
/// they hold) were not loaded. It names the range always, and the way to load older entries.
#[test]
fn the_episodes_card_names_the_part_of_the_log_it_counts() {
    let Some(b) = Browser::start_or_skip(
        "the_episodes_card_names_the_part_of_the_log_it_counts",
        1280,
        800,
    ) else {
        return;
    };
    // ep1's call is entry 1, ep3's 2–61: the newest page (12–61) holds only ep3's.
    let (d, _ep1) = ep1_calls_then_ep3_calls(1, 60);
    let ops = d.operator_session("ops", &[]);
    b.goto(&format!("http://{}/workbench#log", d.addr));
    sign_in_here(&b, &ops);
    b.wait_for_element("#entries li[data-index='61']");
    b.click(&b.find("#nav a[data-view='episode']"));
    let episodes = b.wait_for_element("#episodes table");
    assert_eq!(b.text(&episodes), "episode entries loaded\nep3 50 spend →");
    assert_eq!(
        b.text_of("#episodes-range").as_deref(),
        Some(
            "Counted in the loaded part of the log: entries 12–61. Older entries are not loaded: \
             Load older entries, on the Log, scans further back."
        )
    );
}

/// While the page scans back for an agent's calls it says so, with the part of the log
/// scanned; it never says there are none when only a window of the log was scanned.
#[test]
fn the_timeline_says_none_only_once_the_whole_log_was_scanned() {
    let Some(b) = Browser::start_or_skip(
        "the_timeline_says_none_only_once_the_whole_log_was_scanned",
        1280,
        800,
    ) else {
        return;
    };
    // ep1's call is entry 1, ep3's 2–61.
    let (d, ep1) = ep1_calls_then_ep3_calls(1, 60);
    let proxy = HoldProxy::start(&d.addr);
    // The newest page (12–61) holds nothing of ep1's; the scan further back is held.
    proxy.hold("/v1/log/summaries?from=", &ep1);
    b.goto(&proxy.url("/workbench#log"));
    sign_in_here(&b, &ep1);
    proxy.wait_held();
    let said = b.wait_for("the scan's notice", |b| b.text_of("#timeline-empty"));
    assert_eq!(
        said,
        "Scanning older entries for ones you can see… (entries 12–61 scanned so far)"
    );
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("0 shown of 0 loaded · entries 12–61 scanned")
    );
    b.screenshot(&shots().join("workbench-agent-scanning.png"));
    proxy.release();
    b.wait_for_element("#entries li[data-index='1']");
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("2 shown of 2 loaded · entries 0–61 scanned")
    );
}

/// A store restored from a backup (docs/operators.md: stop the daemon, put the copy at
/// `--db`, start it) is the same store path with another history. The page held entries the
/// restore rolled back, resumed the stream after them (missing the new calls at the same
/// indices) and served its stale summaries to the entry view. On reconnecting it checks that
/// its last entry is still in the daemon's log with the same hash; it is not, so the page drops
/// what it loaded, reloads the log, and says so.
#[test]
fn a_page_open_across_a_restore_from_backup_drops_the_rolled_back_log_and_reloads() {
    let Some(b) = Browser::start_or_skip(
        "a_page_open_across_a_restore_from_backup_drops_the_rolled_back_log_and_reloads",
        1280,
        800,
    ) else {
        return;
    };
    let d = serve_relative(tempfile::tempdir().unwrap(), "127.0.0.1:0");
    let addr = d.addr.clone();
    let base = format!("http://{addr}");
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:20"]);
    let ops = d.operator_session("ops", &[]);
    std::fs::write(d.root().join("ep1/a.txt"), "a\n").unwrap();
    call_read(&d, &ep1, "a.txt"); // 1
    let backup = d.dir.path().join("backup");
    let (code, _, err) = worldd(
        &["backup", "--db", path_str(&d.db()), path_str(&backup)],
        None,
    );
    assert_eq!(code, 0, "{err}");

    sign_in(&b, &base, &ops, "#log");
    for name in ["gone-2.txt", "gone-3.txt", "gone-4.txt"] {
        call_read(&d, &ep1, name);
    }
    b.wait_for_element("#entries li[data-index='4']");
    let before = timeline_rows(&b);

    // Stopped: the page finds nothing answering and says it is disconnected.
    let dir = d.halt();
    b.wait_for(
        "the page to say it is disconnected",
        live_says("disconnected"),
    );
    // Restored, as the operator's guide says, and started again on the same port.
    std::fs::remove_dir_all(dir.path().join("db")).unwrap();
    std::fs::rename(&backup, dir.path().join("db")).unwrap();
    let d = serve_relative(dir, &addr);
    for name in ["new-2.txt", "new-3.txt", "new-4.txt"] {
        call_read(&d, &ep1, name);
    }
    let restored = summaries_as_rows(&base, &ops);
    assert_ne!(restored, before, "entries 2–4 are other calls now");

    b.click(&b.find("#reconnect"));
    let notice = b.wait_for("the notice of the reload", |b| {
        b.text_of("#log-notice").filter(|t| !t.is_empty())
    });
    assert_eq!(
        notice,
        "The daemon's log is not the one this page had loaded: entry #4 is another entry now \
         (the store was restored from a backup?). What was loaded is dropped and the log \
         reloaded: its newest entry is #4."
    );
    b.wait_for("the live indicator", live_says("live"));
    assert_eq!(timeline_rows(&b), restored);
    b.screenshot(&shots().join("workbench-restored-log.png"));
    // The new entry 4 verifies, under the summary the daemon serves now.
    b.click(&b.find("#entries a[data-index='4']"));
    assert_eq!(verdict(&b), "✓ 7 links verified");
    assert_eq!(
        b.text_of("#header-check").as_deref(),
        Some("✓ The header matches the verified record.")
    );
    // And the stream follows the restored log: the next call appears.
    call_read(&d, &ep1, "new-5.txt");
    b.wait_for_element("#entries li[data-index='5']");
    assert_eq!(timeline_rows(&b), summaries_as_rows(&base, &ops));
}

/// Stops a daemon with SIGSTOP (a hung daemon, one stuck on its store, a paused machine) and
/// lets it go on again when dropped, whatever the test did meanwhile.
struct Frozen<'d>(&'d Daemon);

impl<'d> Frozen<'d> {
    fn freeze(d: &'d Daemon) -> Frozen<'d> {
        d.signal(libc::SIGSTOP);
        Frozen(d)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        self.0.signal(libc::SIGCONT);
    }
}

/// A daemon that stops answering left the page `live` and the entry `Verifying…` for ever.
/// A stream silent for two keep-alive intervals (30 s) has dropped: the page says
/// `reconnecting…` and why; a request with no answer in 30 s ends as not served, and the
/// verdict says so.
#[test]
fn a_daemon_that_stops_answering_is_said_to_be_gone_and_its_links_end_as_not_served() {
    let Some(b) = Browser::start_or_skip(
        "a_daemon_that_stops_answering_is_said_to_be_gone_and_its_links_end_as_not_served",
        1280,
        800,
    ) else {
        return;
    };
    let (d, ops) = one_read_and_an_operator();
    let base = format!("http://{}", d.addr);
    sign_in(&b, &base, &ops, "#log");

    let frozen = Frozen::freeze(&d);
    b.click(&b.find("#entries a[data-index='1']"));
    wait_long(&b, "reconnecting…", 40, live_says("reconnecting…"));
    assert_eq!(
        b.text_of("#stream-problem").as_deref(),
        Some("The daemon sent nothing on the live log for 30 s, not even its keep-alive: reconnecting.")
    );
    let said = wait_long(&b, "the verdict", 60, |b| {
        b.text_of("#verdict").filter(|t| t.starts_with('✗'))
    });
    // The entry's own link had no answer: the chain goes no further.
    assert_eq!(
        said,
        "✗ 1 of 1 link broken: not served by the daemon (an error or no answer), so not checked; \
         nothing served was found altered"
    );
    let reasons: Vec<String> = links(&b).into_iter().map(|(_, _, t)| t).collect();
    assert!(
        reasons
            .iter()
            .any(|t| t.contains("not served: no answer from the daemon within 30 s")),
        "{reasons:?}"
    );
    wait_long(&b, "disconnected", 20, live_says("disconnected"));
    b.screenshot(&shots().join("workbench-frozen-daemon.png"));

    // Going on again, the daemon is followed once asked.
    drop(frozen);
    b.click(&b.find("#reconnect"));
    b.wait_for("the live indicator", live_says("live"));
    b.click(&b.find("#entries a[data-index='0']"));
    b.click(&b.find("#entries a[data-index='1']"));
    // Entry 0's own verdict ("✓ 3 links verified") may still be shown for a moment after the
    // click on entry 1: its verdict is waited for, not the first one shown.
    b.wait_for("entry 1's verdict", |b| {
        b.text_of("#verdict").filter(|t| t == "✓ 7 links verified")
    });
}

/// Whether the element `css` is drawn whole: inside the viewport, not clipped by an ancestor
/// (the point at its centre hits it) and not cut short by an ellipsis.
fn drawn_whole(b: &Browser, css: &str) -> Value {
    b.exec(
        "const el = document.querySelector(arguments[0]); if (!el) return 'absent';
         const r = el.getBoundingClientRect();
         if (r.width === 0 || r.right > innerWidth || r.left < 0) return `outside: ${r.left}–${r.right} of ${innerWidth}`;
         let p = el.parentElement;
         while (p) {
           const s = getComputedStyle(p);
           if (s.overflow !== 'visible' || s.overflowX !== 'visible') {
             const q = p.getBoundingClientRect();
             if (r.left < q.left - 0.5 || r.right > q.right + 0.5) return `clipped by ${p.className}: ${r.left}–${r.right} in ${q.left}–${q.right}`;
           }
           p = p.parentElement;
         }
         if (el.scrollWidth > el.clientWidth + 1) return `cut: ${el.scrollWidth} > ${el.clientWidth}`;
         const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
         return el.contains(hit) ? 'whole' : `covered by ${hit && hit.className}`;",
        json!([css]),
    )
}

/// The timeline's `⚠ not as verified` mark sat inside the tool name's box, and a long name's
/// ellipsis cut it off: the row's only sign that its summary lied was not shown. It is beside
/// the name now, whole at any width; and it stays when the list is drawn again (a filter).
#[test]
fn the_not_as_verified_mark_is_shown_whole_beside_a_long_tool_name() {
    let Some(b) = Browser::start_or_skip(
        "the_not_as_verified_mark_is_shown_whole_beside_a_long_tool_name",
        1280,
        800,
    ) else {
        return;
    };
    let (d, ops) = one_read_and_an_operator();
    let long = format!("docs-read-{}", "x".repeat(54));
    let name = long.clone();
    let proxy = TamperProxy::rewriting(
        &d.addr,
        "/v1/log/summaries",
        std::sync::Arc::new(move |v: &mut Value| {
            for s in v["items"].as_array_mut().into_iter().flatten() {
                if s["header"]["entryIndex"] == 1 {
                    s["tool"] = json!(name);
                }
            }
            None
        }),
    );
    sign_in(&b, &proxy.url(""), &ops, "#entry/1");
    assert_eq!(verdict(&b), "✓ 7 links verified");
    let row = "#entries li[data-index='1'] .differs";
    b.wait_for_element(row);
    assert_eq!(drawn_whole(&b, row), json!("whole"));
    assert_eq!(
        b.text_of("#entries li[data-index='1'] .tool").as_deref(),
        Some(long.as_str())
    );
    b.screenshot(&shots().join("workbench-differs-long-name.png"));
    // Redrawn by a filter, the row keeps its mark.
    b.exec(
        "const s = document.getElementById('filter-episode'); s.value = 'ep1'; \
         s.dispatchEvent(new Event('change'));",
        json!([]),
    );
    assert_eq!(
        b.exec(
            "return document.querySelectorAll('#entries li').length",
            json!([])
        ),
        json!(1)
    );
    assert_eq!(drawn_whole(&b, row), json!("whole"));
    // At a phone's width, the list alone.
    b.viewport(390, 844);
    b.exec("location.hash = '#log'", json!([]));
    b.wait_for("the list", |b| {
        b.exec(
            "return document.body.classList.contains('entry-open') ? null : true",
            json!([]),
        )
        .as_bool()
    });
    assert_eq!(drawn_whole(&b, row), json!("whole"));
    b.screenshot(&shots().join("workbench-differs-long-name-390.png"));
}

/// Whether `word`, in the text of the element `css`, is drawn inside that element's box (an
/// ellipsis cuts off what lies past its right edge).
fn word_drawn_whole(b: &Browser, css: &str, word: &str) -> Value {
    b.exec(
        "const [css, word] = arguments; const el = document.querySelector(css);
         const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
         let node; while ((node = walk.nextNode()) && !node.data.includes(word));
         if (!node) return 'absent';
         const range = document.createRange(); const at = node.data.indexOf(word);
         range.setStart(node, at); range.setEnd(node, at + word.length);
         const r = range.getBoundingClientRect(); const box = el.getBoundingClientRect();
         const pad = parseFloat(getComputedStyle(el).paddingRight);
         if (r.right > box.right - pad + 0.5 || r.right > innerWidth) return `cut: ${word} ends at ${r.right}, the box at ${box.right - pad}`;
         return 'whole';",
        json!([css, word]),
    )
}

/// An operator credential of an episode with a long name (64 characters, the most allowed)
/// lost the word `operator` from its badge: the name was cut short with the role after it. The
/// name is cut, the role shown whole, at a desktop's width and a phone's.
#[test]
fn an_operator_badge_keeps_the_word_operator_beside_a_long_episode_name() {
    let Some(b) = Browser::start_or_skip(
        "an_operator_badge_keeps_the_word_operator_beside_a_long_episode_name",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let episode = format!("release-audit-team-{}", "a".repeat(45));
    assert_eq!(episode.len(), 64);
    let ops = d.operator_session(&episode, &[]);
    let base = format!("http://{}", d.addr);
    sign_in(&b, &base, &ops, "#log");
    assert_eq!(b.text_of("#who"), Some(format!("{episode} · operator")));
    assert_eq!(word_drawn_whole(&b, "#who", "operator"), json!("whole"));
    b.screenshot(&shots().join("workbench-who-long-1280.png"));
    b.viewport(390, 844);
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(word_drawn_whole(&b, "#who", "operator"), json!("whole"));
    b.screenshot(&shots().join("workbench-who-long-390.png"));
}

/// How a [`SlowProxy`] passes the answer to a request it targets.
#[derive(Clone, Copy)]
enum Pace {
    /// The head at once, then the body a few bytes every 2 s, for about 36 s in all.
    Trickle,
    /// The head and half the body at once, then nothing for 40 s.
    Stall,
}

/// A loopback proxy in front of the daemon that passes the answers of the requests whose path
/// starts with one of its targets at that target's pace, and everything else as it comes.
fn slow_proxy(upstream: &str, targets: Vec<(String, Pace)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let upstream = upstream.to_owned();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let (upstream, targets) = (upstream.clone(), targets.clone());
            std::thread::spawn(move || -> std::io::Result<()> {
                let Some((path, mut server)) = forward_request_head(&mut client, &upstream)? else {
                    return Ok(());
                };
                let pace = targets
                    .iter()
                    .find(|(t, _)| path.starts_with(t.as_str()))
                    .map(|(_, p)| *p);
                let Some(pace) = pace else {
                    std::io::copy(&mut server, &mut client)?;
                    return Ok(());
                };
                let mut answer = Vec::new();
                server.read_to_end(&mut answer)?;
                let split = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                let (head, body) = answer.split_at(split);
                client.write_all(head)?;
                match pace {
                    Pace::Trickle => {
                        for piece in body.chunks(body.len().div_ceil(18)) {
                            client.write_all(piece)?;
                            client.flush()?;
                            std::thread::sleep(std::time::Duration::from_secs(2));
                        }
                    }
                    Pace::Stall => {
                        client.write_all(&body[..body.len() / 2])?;
                        client.flush()?;
                        std::thread::sleep(std::time::Duration::from_secs(40));
                    }
                }
                Ok(())
            });
        }
    });
    addr
}

/// The workbench's 30 s request timeout counted the whole download: an object the daemon
/// answered at once but that took longer than 30 s to arrive over a slow link was shown as
/// "not served by the daemon". Only the wait for the answer to begin is timed, and then the
/// wait for more of its body: a body that keeps arriving is read to its end and verified, one
/// that stops arriving for 30 s ends as not served, and says so.
#[test]
fn a_slow_answer_that_keeps_arriving_is_verified_and_only_a_stalled_one_is_not_served() {
    let Some(b) = Browser::start_or_skip(
        "a_slow_answer_that_keeps_arriving_is_verified_and_only_a_stalled_one_is_not_served",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    call_read(&d, &token, "a.txt");
    let entry = get(&d.url("/v1/log/1"), Some(&token)).json();
    let record = get(
        &d.url(&format!(
            "/v1/objects/{}?payload=true",
            entry["transitionRef"].as_str().unwrap()
        )),
        Some(&token),
    )
    .json();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(record["payload"].as_str().unwrap())
        .unwrap();
    let rec: Value = serde_json::from_slice(&bytes).unwrap();
    let (input, output) = (
        rec["input"].as_str().unwrap(),
        rec["output"].as_str().unwrap(),
    );
    let proxy = slow_proxy(
        &d.addr,
        vec![
            (format!("/v1/objects/{input}"), Pace::Trickle),
            (format!("/v1/objects/{output}"), Pace::Stall),
        ],
    );
    sign_in(&b, &format!("http://{proxy}"), &token, "#entry/1");
    let said = wait_long(&b, "the verdict", 120, |b| {
        b.text_of("#verdict")
            .filter(|t| !t.starts_with("Verifying"))
    });
    b.screenshot(&shots().join("workbench-slow-answer.png"));
    assert_eq!(
        said,
        "✗ 1 of 7 links broken: not served by the daemon (an error or no answer), so not checked; \
         nothing served was found altered"
    );
    let shown = links(&b);
    let input_link = shown.iter().find(|(k, _, _)| k == "input").unwrap();
    assert!(input_link.1, "{shown:?}");
    let why = b
        .text_of("#links > li[data-kind='output'] .why")
        .unwrap_or_default();
    assert_eq!(
        why,
        "not served: the daemon's answer stopped arriving for 30 s"
    );
    b.exec(
        "document.querySelector(\"#links > li[data-kind='output']\").scrollIntoView({block: 'center'})",
        json!([]),
    );
    b.screenshot(&shots().join("workbench-stalled-answer.png"));
}

/// With `[server] metrics_for = "operators"` the Metrics view, signed in with an agent's
/// credential, says that metrics are for operators and shows the daemon's 403, without signing
/// the page out; an operator's credential shows the figures.
#[test]
fn the_metrics_view_says_metrics_are_for_operators_when_an_agent_is_refused_them() {
    let Some(b) = Browser::start_or_skip(
        "the_metrics_view_says_metrics_are_for_operators_when_an_agent_is_refused_them",
        1280,
        800,
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("world.toml");
    std::fs::write(&config, "[server]\nmetrics_for = \"operators\"\n").unwrap();
    let mut cmd = Daemon::serve_command(&dir, WS);
    cmd.arg("--config").arg(&config);
    let d = Daemon::spawn(dir, cmd);
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:10"]);
    let ops = d.operator_session("ops", &[]);
    call_read(&d, &ep1, "a.txt");
    let base = format!("http://{}", d.addr);

    sign_in(&b, &base, &ep1, "#metrics");
    let said = b.wait_for("the metrics view's refusal", |b| {
        b.text_of("#metrics-for-operators")
    });
    assert_eq!(
        said,
        "Metrics are for operators on this daemon: sign in with an operator credential to see them."
    );
    assert_eq!(
        b.text_of("#view-metrics .muted").as_deref(),
        Some(
            "GET /v1/metrics: GET /v1/metrics is for operators on this daemon ([server] \
             metrics_for = \"operators\"): this session credential is not an operator \
             credential (mint one with worldd session mint --operator)"
        )
    );
    assert!(b.try_find("#view-metrics .tiles").is_none());
    assert_eq!(b.text_of("#who").as_deref(), Some("ep1"), "still signed in");
    b.screenshot(&shots().join("workbench-metrics-for-operators.png"));

    sign_out(&b);
    sign_in(&b, &base, &ops, "#metrics");
    let tiles = b.wait_for_element("#view-metrics .tiles");
    assert!(
        b.text(&tiles).starts_with("1\ncalls since start"),
        "{}",
        b.text(&tiles)
    );
}

/// The page resumes its live log with the index and entry hash of the last entry it has, and a
/// `rewound` answer (the daemon's log was rolled back between the page's check of its tip and
/// the stream) makes it drop what it loaded, reload the log and say so, then follow again. A
/// proxy records each stream request's `Last-Event-ID`, drops the open stream on demand, and
/// answers one resumption with `rewound`.
#[test]
fn a_rewound_answer_to_the_pages_resumed_stream_reloads_the_log_and_says_so() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let Some(b) = Browser::start_or_skip(
        "a_rewound_answer_to_the_pages_resumed_stream_reloads_the_log_and_says_so",
        1280,
        800,
    ) else {
        return;
    };
    let (d, ops) = one_read_and_an_operator();
    let tip = get(&d.url("/v1/log/1"), Some(&ops)).json()["entryHash"]
        .as_str()
        .unwrap()
        .to_owned();
    let resumed_with = Arc::new(Mutex::new(Vec::<String>::new()));
    let open_stream = Arc::new(Mutex::new(None::<TcpStream>));
    let rewind = Arc::new(AtomicBool::new(false));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = listener.local_addr().unwrap().to_string();
    {
        let (upstream, resumed_with, open_stream, rewind) = (
            d.addr.clone(),
            resumed_with.clone(),
            open_stream.clone(),
            rewind.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(mut client) = client else { return };
                let (upstream, resumed_with, open_stream, rewind) = (
                    upstream.clone(),
                    resumed_with.clone(),
                    open_stream.clone(),
                    rewind.clone(),
                );
                std::thread::spawn(move || -> std::io::Result<()> {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if client.read(&mut byte)? == 0 {
                            return Ok(());
                        }
                        head.push(byte[0]);
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    if text.starts_with("GET /v1/log/stream") {
                        let id = text
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("last-event-id").then(|| v.trim())
                            })
                            .unwrap_or("")
                            .to_owned();
                        resumed_with.lock().unwrap().push(id);
                        if rewind.swap(false, Ordering::SeqCst) {
                            let data = json!({"entryIndex": 1, "seen": "sha256:…",
                                "now": format!("sha256:{}", "ab".repeat(32)), "head": 1,
                                "message": "entry 1 is no longer the one this client saw"});
                            client.write_all(
                                format!(
                                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                     connection: close\r\n\r\nevent: rewound\ndata: {data}\n\n"
                                )
                                .as_bytes(),
                            )?;
                            return Ok(());
                        }
                        *open_stream.lock().unwrap() = Some(client.try_clone()?);
                    }
                    let forwarded: String = text
                        .lines()
                        .filter(|l| {
                            !l.is_empty() && !l.to_ascii_lowercase().starts_with("connection:")
                        })
                        .map(|l| format!("{l}\r\n"))
                        .collect();
                    let mut server = TcpStream::connect(&upstream)?;
                    server.write_all(format!("{forwarded}Connection: close\r\n\r\n").as_bytes())?;
                    std::io::copy(&mut server, &mut client)?;
                    Ok(())
                });
            }
        });
    }
    let base = format!("http://{proxy}");
    sign_in(&b, &base, &ops, "#log");
    let streams = |n: usize| {
        b.wait_for("the page's stream requests", |_| {
            let seen = resumed_with.lock().unwrap().clone();
            (seen.len() >= n).then_some(seen)
        })
    };
    // Following from the newest page: after its tip, named by index and hash.
    assert_eq!(streams(1), [format!("1 {tip}")]);

    // The stream drops; the page checks its tip (still there), resumes, and is told rewound.
    rewind.store(true, Ordering::SeqCst);
    let open = open_stream.lock().unwrap().take().unwrap();
    open.shutdown(std::net::Shutdown::Both).unwrap();
    let notice = b.wait_for("the notice of the reload", |b| {
        b.text_of("#log-notice").filter(|t| !t.is_empty())
    });
    assert_eq!(
        notice,
        "The daemon's log is not the one this page had loaded: entry #1 is another entry now \
         (the store was restored from a backup?). What was loaded is dropped and the log \
         reloaded: its newest entry is #1."
    );
    // And it follows the log again, from the page it reloaded.
    assert_eq!(
        streams(3),
        [format!("1 {tip}"), format!("1 {tip}"), format!("1 {tip}")]
    );
    b.wait_for("the live indicator", live_says("live"));
    let ep1 = d.session("ep1b", &["Workspace.Read=worktree:10"]);
    call_read(&d, &ep1, "b.txt");
    b.wait_for_element("#entries li[data-index='2']");
}

/// The sign-in took a credential only as bare hex: pasted as an MCP client's configuration
/// shows it (`Bearer <hex>`, as quickstart prints it), it got the browser's bare "Please match
/// the requested format." in a masked field where the person cannot see the `Bearer `. It is
/// taken with or without it now, and a wrong value is told what the field wants.
#[test]
fn a_credential_pasted_with_its_bearer_prefix_signs_in() {
    let Some(b) = Browser::start_or_skip(
        "a_credential_pasted_with_its_bearer_prefix_signs_in",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.operator_session("ops", &[]);
    let base = format!("http://{}", d.addr);
    b.goto(&format!("{base}/workbench"));
    let input = b.wait_for_element("#credential");
    let checked = b.exec(
        "const i = document.getElementById('credential'); \
         return [arguments[0], 'abc', 'Bearer abc'].map(v => { i.value = v; return i.checkValidity(); }) \
           .concat([i.title]);",
        json!([format!("Bearer {token}")]),
    );
    assert_eq!(
        checked,
        json!([true, false, false, "64 hexadecimal digits: a session file's content, or what follows Bearer in an MCP client's configuration"])
    );
    b.exec(
        "document.getElementById('credential').value = ''",
        json!([]),
    );
    b.screenshot(&shots().join("workbench-sign-in.png"));
    b.type_into(&input, &format!("  bearer {token} "));
    b.click(&b.find("#login-submit"));
    b.wait_for_element("#entries li[data-index='0']");
    b.wait_for("the live indicator", |b| {
        (b.text_of("#live").as_deref() == Some("live")).then_some(())
    });
}

/// Open entry `i` on the signed-in page and answer its verdict, whichever it is.
fn entry_verdict(b: &Browser, base: &str, i: u64) -> String {
    b.goto(&format!("{base}/workbench#entry/{i}"));
    b.wait_for(&format!("entry {i}"), |b| {
        b.text_of("#detail h2")
            .filter(|t| t.starts_with(&format!("Entry #{i}\n")) || t == &format!("Entry #{i}"))
    });
    verdict(b)
}

/// The `.why` text of the open entry's link of `kind`.
fn link_why(b: &Browser, kind: &str) -> String {
    b.text_of(&format!("#links > li[data-kind='{kind}'] .why"))
        .unwrap_or_else(|| panic!("no {kind} link shown"))
}

/// `n` reads by one agent in a daemon that is then stopped: its directory, and the token.
fn reads_then_halted(n: usize) -> (tempfile::TempDir, String) {
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:100"]);
    for _ in 0..n {
        call_read(&d, &token, "hello.txt");
    }
    (d.halt(), token)
}

/// Row `from` of `table` in the stopped store under `dir`, changed by `change`, written at
/// `to` (as a tamper, a flipped bit or a bad partial restore leaves it).
fn rewrite_row(
    dir: &tempfile::TempDir,
    table: broker_core::store::RawTable,
    (from, to): (u64, u64),
    change: impl FnOnce(&mut Vec<u8>),
) {
    let store =
        broker_core::store::Store::open(&dir.path().join("db"), Default::default()).unwrap();
    let mut row = store.raw_get(table, &from.to_be_bytes()).unwrap().unwrap();
    change(&mut row);
    store
        .raw_overwrite(table, to.to_be_bytes().to_vec(), row)
        .unwrap();
}

/// The page linked `prevEntryHash` to the previous entry's *claimed* `entryHash`: one damaged
/// hex digit in entry 1's `entryHash` text marked the intact entry 2 ✗ ("bytes that do not
/// match their address"), while `worldd why` verifies it. Entry 1's hash is what its header
/// recomputes to.
#[test]
fn an_intact_entry_after_one_whose_entry_hash_text_is_damaged_verifies() {
    let Some(b) = Browser::start_or_skip(
        "an_intact_entry_after_one_whose_entry_hash_text_is_damaged_verifies",
        1280,
        800,
    ) else {
        return;
    };
    let (dir, token) = reads_then_halted(2);
    rewrite_row(&dir, broker_core::store::RawTable::Log, (1, 1), |row| {
        let marker = b"\"entryHash\":\"sha256:";
        let at = row.windows(marker.len()).position(|w| w == marker).unwrap() + marker.len();
        row[at] = if row[at] == b'0' { b'1' } else { b'0' };
    });
    let d = Daemon::start_in(dir, WS, &[]);
    let (code, out, err) = worldd(&["why", "2", "--db", path_str(&d.db())], None);
    assert_eq!(code, 0, "{out}{err}");
    sign_in(&b, &d.url(""), &token, "#entry/2");
    assert_eq!(verdict(&b), "✓ 7 links verified");
    // Entry 1 itself is broken, at its entry link only, in `why`'s words; the world selecting
    // it names its recomputed hash, so that link holds.
    let (code, out, err) = worldd(&["why", "1", "--db", path_str(&d.db())], None);
    assert_eq!(code, 3, "{out}{err}");
    assert_eq!(
        entry_verdict(&b, &d.url(""), 1),
        "✗ 1 of 7 links broken: the daemon served bytes that do not match their address"
    );
    let broken: Vec<String> = links(&b)
        .into_iter()
        .filter(|(_, ok, _)| !ok)
        .map(|(kind, _, _)| kind)
        .collect();
    assert_eq!(broken, ["entry"]);
    let why = link_why(&b, "entry");
    assert!(
        out.contains(&format!("✗ entry   -  {why}\n")),
        "{out}\n{why}"
    );
    assert_eq!(entry_verdict(&b, &d.url(""), 2), "✓ 7 links verified");
    b.screenshot(&shots().join("workbench-prev-entry-hash-text.png"));
}

/// A log row holding a byte copy of entry 5 at position 6 was shown as "Entry #6 does not
/// exist or is not visible to this credential", as if it were another episode's; `worldd why
/// 6` calls it broken. The page now shows the row broken, in `why`'s words.
#[test]
fn a_row_holding_a_copy_of_another_entry_is_shown_broken_not_absent() {
    let Some(b) = Browser::start_or_skip(
        "a_row_holding_a_copy_of_another_entry_is_shown_broken_not_absent",
        1280,
        800,
    ) else {
        return;
    };
    let (dir, token) = reads_then_halted(7);
    rewrite_row(&dir, broker_core::store::RawTable::LogRow, (5, 6), |_| {});
    let d = Daemon::start_in(dir, WS, &[]);
    let copy = "this row holds a copy of entry 5 (its header says index 5 at position 6)";
    let (code, out, err) = worldd(&["why", "6", "--db", path_str(&d.db())], None);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains(copy), "{out}");
    sign_in(&b, &d.url(""), &token, "#entry/5");
    assert_eq!(verdict(&b), "✓ 7 links verified");
    assert_eq!(
        entry_verdict(&b, &d.url(""), 6),
        "✗ 1 of 1 link broken: the daemon served records that do not read as, or fit, what refers to them"
    );
    let entry = b.find("#links > li[data-kind='entry']");
    assert_eq!(b.attr(&entry, "data-ok").as_deref(), Some("false"));
    assert_eq!(b.attr(&entry, "data-failure").as_deref(), Some("invalid"));
    assert_eq!(link_why(&b, "entry"), copy);
    b.screenshot(&shots().join("workbench-copied-row.png"));
}

/// An object the daemon refuses as `500 Damaged` (its stored bytes altered) was counted "not
/// served … nothing served was found altered", the opposite of what the daemon said; `worldd
/// why` calls it a broken link (exit 3). The verdict counts it as damage, in its own words.
#[test]
fn an_object_the_daemon_reports_damaged_is_counted_as_damage_not_as_unserved() {
    let Some(b) = Browser::start_or_skip(
        "an_object_the_daemon_reports_damaged_is_counted_as_damage_not_as_unserved",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    call_read(&d, &token, "hello.txt");
    let input = input_ref(&d, &token, 1);
    let dir = d.halt();
    flip_object_byte(&dir.path().join("db"), &input.parse().unwrap(), 0, true);
    let d = Daemon::start_in(dir, WS, &[]);
    let refused = get(
        &d.url(&format!("/v1/objects/{input}?payload=true")),
        Some(&token),
    );
    assert_eq!(refused.status, 500, "{}", refused.text());
    let refused = refused.json();
    assert_eq!(refused["error"]["class"], "Damaged", "{refused}");
    sign_in(&b, &d.url(""), &token, "#entry/1");
    assert_eq!(
        verdict(&b),
        "✗ 1 of 7 links broken: the daemon reports its stored bytes damaged and did not serve them"
    );
    let link = b.find("#links > li[data-kind='input']");
    assert_eq!(b.attr(&link, "data-failure").as_deref(), Some("damaged"));
    assert_eq!(
        link_why(&b, "input"),
        format!(
            "not served: HTTP 500 Damaged: {}",
            refused["error"]["message"].as_str().unwrap()
        )
    );
    b.screenshot(&shots().join("workbench-damaged.png"));
}

/// A log row that no longer decodes (`"header"` renamed `"headeR"`, one flipped bit): the
/// summaries page names it under `damaged`, and the page showed "does not exist or is not
/// visible to this credential". Its entry is shown broken, in the daemon's words.
#[test]
fn a_log_row_the_daemon_names_damaged_is_shown_broken_not_absent() {
    let Some(b) = Browser::start_or_skip(
        "a_log_row_the_daemon_names_damaged_is_shown_broken_not_absent",
        1280,
        800,
    ) else {
        return;
    };
    let (dir, token) = reads_then_halted(2);
    rewrite_row(&dir, broker_core::store::RawTable::LogRow, (1, 1), |row| {
        let at = row.windows(8).position(|s| s == b"\"header\"").unwrap();
        row[at + 6] = b'R';
    });
    let d = Daemon::start_in(dir, WS, &[]);
    let refused = get(&d.url("/v1/log/1"), Some(&token));
    assert_eq!(refused.status, 500, "{}", refused.text());
    let refused = refused.json();
    assert_eq!(refused["error"]["class"], "Damaged", "{refused}");
    let page = get(&d.url("/v1/log/summaries?from=1&limit=1"), Some(&token)).json();
    assert_eq!(page["damaged"][0]["index"], 1, "{page}");
    sign_in(&b, &d.url(""), &token, "#entry/2");
    // Entry 2's link to entry 1 cannot be checked: broken, and why, not verified.
    assert_eq!(
        verdict(&b),
        "✗ 1 of 7 links broken: the daemon reports its stored bytes damaged and did not serve them"
    );
    assert_eq!(
        link_why(&b, "entry"),
        format!(
            "entry 1 not served: HTTP 500 Damaged: {}",
            refused["error"]["message"].as_str().unwrap()
        )
    );
    assert_eq!(
        entry_verdict(&b, &d.url(""), 1),
        "✗ 1 of 1 link broken: the daemon reports its stored bytes damaged and did not serve them"
    );
    let entry = b.find("#links > li[data-kind='entry']");
    assert_eq!(b.attr(&entry, "data-failure").as_deref(), Some("damaged"));
    assert_eq!(
        link_why(&b, "entry"),
        format!(
            "not served: HTTP 500 Damaged: {}",
            refused["error"]["message"].as_str().unwrap()
        )
    );
    let listed = b
        .text_of("#entries li[data-index='1']")
        .expect("the damaged row in the timeline");
    assert_eq!(
        listed,
        format!(
            "#1\ndamaged\ndamaged row\n{}",
            refused["error"]["message"].as_str().unwrap()
        )
    );
    b.screenshot(&shots().join("workbench-damaged-row.png"));
}

/// Rename log row `i`'s `"header"` member `"headeR"` (one flipped bit) in the stopped store
/// under `dir`: the row no longer decodes, and the daemon names it damaged.
fn damage_row(dir: &tempfile::TempDir, i: u64) {
    rewrite_row(dir, broker_core::store::RawTable::LogRow, (i, i), |row| {
        let at = row.windows(8).position(|s| s == b"\"header\"").unwrap();
        row[at + 6] = b'R';
    });
}

/// What the daemon says of damaged log row `i` (`log entry I is damaged: …; run worldd
/// doctor`), from its `500 Damaged` answer.
fn damage_said(d: &Daemon, token: &str, i: u64) -> String {
    let refused = get(&d.url(&format!("/v1/log/{i}")), Some(token));
    assert_eq!(refused.status, 500, "{}", refused.text());
    let refused = refused.json();
    assert_eq!(refused["error"]["class"], "Damaged", "{refused}");
    refused["error"]["message"].as_str().unwrap().to_owned()
}

/// The indices of the timeline's rows, newest first.
fn timeline_indices(b: &Browser) -> Value {
    b.exec(
        "return [...document.querySelectorAll('#entries li')].map((li) => Number(li.dataset.index))",
        json!([]),
    )
}

/// The live stream's requests that have ended since the page's resource timings were cleared.
fn ended_streams(b: &Browser) -> Value {
    b.exec(
        "return performance.getEntriesByType('resource')\
         .filter((e) => new URL(e.name).pathname === '/v1/log/stream').length",
        json!([]),
    )
}

/// A damaged row after the page's last entry ended the live stream with a `Damaged` error
/// event: the page took the stream's end for the daemon gone, reconnected every second with the
/// same error for good, and never listed the row nor said why. It lists the row as a summaries
/// page names it, says so above the list, and follows the log on after the row.
#[test]
fn a_damaged_row_reached_by_the_live_log_is_listed_and_said_and_the_log_followed_past_it() {
    let Some(b) = Browser::start_or_skip(
        "a_damaged_row_reached_by_the_live_log_is_listed_and_said_and_the_log_followed_past_it",
        1280,
        800,
    ) else {
        return;
    };
    let d = serve_relative(tempfile::tempdir().unwrap(), "127.0.0.1:0");
    let addr = d.addr.clone();
    let base = format!("http://{addr}");
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:20"]);
    let ops = d.operator_session("ops", &[]);
    std::fs::write(d.root().join("ep1/a.txt"), "a\n").unwrap();
    call_read(&d, &ep1, "a.txt"); // 1
    sign_in(&b, &base, &ops, "#log");
    assert_eq!(timeline_indices(&b), json!([1, 0]));

    // Entries 2–4 are written while the page is disconnected, and row 3 is then damaged.
    let dir = d.halt();
    b.wait_for(
        "the page to say it is disconnected",
        live_says("disconnected"),
    );
    let d = serve_relative(dir, &addr);
    for _ in 2..=4 {
        call_read(&d, &ep1, "a.txt");
    }
    let dir = d.halt();
    damage_row(&dir, 3);
    let d = serve_relative(dir, &addr);
    let said = damage_said(&d, &ops, 3);

    b.exec("performance.clearResourceTimings()", json!([]));
    b.click(&b.find("#reconnect"));
    b.wait_for_element("#entries li[data-index='4']");
    assert_eq!(timeline_indices(&b), json!([4, 3, 2, 1, 0]));
    assert_eq!(
        b.text_of("#entries li[data-index='3']").as_deref(),
        Some(format!("#3\ndamaged\ndamaged row\n{said}").as_str())
    );
    assert_eq!(
        b.text_of("#stream-problem"),
        Some(format!(
            "Entry #3 is damaged in the daemon's store, and the live log goes on after it: {said}"
        ))
    );
    // Followed past it, not reconnecting: one stream ended (at row 3), and the next one stays.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(b.text_of("#live").as_deref(), Some("live"));
    assert_eq!(ended_streams(&b), json!(1));
    b.screenshot(&shots().join("workbench-damaged-row-live.png"));
    // And the next call appears live.
    call_read(&d, &ep1, "a.txt"); // 5
    b.wait_for_element("#entries li[data-index='5']");
    assert_eq!(timeline_indices(&b), json!([5, 4, 3, 2, 1, 0]));
    assert_eq!(ended_streams(&b), json!(1));
}

/// Rename row `i`'s `"header"` member `"headeR"` in the store at `db` of a running daemon (a
/// flipped bit on its disk: it checks its newest row when it starts, so a damaged newest row
/// is met only so), or, given `undo`, put the member's name back. LMDB serialises this write
/// with the daemon's own across processes; no store handle of this process is open on `db`.
fn flip_header_live(db: &std::path::Path, i: u64, undo: bool) {
    let (from, to): (&[u8], u8) = if undo {
        (b"\"headeR\"", b'r')
    } else {
        (b"\"header\"", b'R')
    };
    common::why::tamper(db, "entries", |w, table| {
        let key = i.to_be_bytes();
        let mut row = table.get(w, &key).unwrap().unwrap().to_vec();
        let at = row.windows(8).position(|s| s == from).unwrap();
        row[at + 6] = to;
        table.put(w, &key, &row).unwrap();
    });
}

/// The newest row of the log damaged: the page fetched it for its tip (`GET /v1/log/{last}`),
/// got `500 Damaged`, and sign-in failed with "Could not reach the daemon". And a tip damaged
/// once the page had loaded it made the check on reconnecting take the daemon for gone. The
/// page takes the newest intact entry for its tip, and a damaged tip from the summaries page's
/// `damaged` list.
#[test]
fn a_damaged_newest_row_neither_stops_the_sign_in_nor_the_reconnection() {
    let Some(b) = Browser::start_or_skip(
        "a_damaged_newest_row_neither_stops_the_sign_in_nor_the_reconnection",
        1280,
        800,
    ) else {
        return;
    };
    let d = serve_relative(tempfile::tempdir().unwrap(), "127.0.0.1:0");
    let addr = d.addr.clone();
    let base = format!("http://{addr}");
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:20"]);
    let ep3 = d.session("ep3", &["Workspace.Read=worktree:20"]);
    let ops = d.operator_session("ops", &[]);
    std::fs::write(d.root().join("ep1/a.txt"), "a\n").unwrap();
    std::fs::write(d.root().join("ep3/b.txt"), "b\n").unwrap();
    call_read(&d, &ep1, "a.txt"); // 1
    call_read(&d, &ep1, "a.txt"); // 2

    // The newest row, damaged under the running daemon.
    flip_header_live(&d.db(), 2, false);
    let said = damage_said(&d, &ops, 2);
    sign_in(&b, &base, &ops, "#log");
    assert_eq!(timeline_indices(&b), json!([2, 1, 0]));
    assert_eq!(
        b.text_of("#entries li[data-index='2']").as_deref(),
        Some(format!("#2\ndamaged\ndamaged row\n{said}").as_str())
    );
    assert_eq!(
        b.exec(
            "return ['login-error', 'stream-problem', 'log-notice'].map((id) => document.getElementById(id).hidden)",
            json!([])
        ),
        json!([true, true, true])
    );
    sign_out(&b);
    flip_header_live(&d.db(), 2, true);

    // An agent's page: its tip is entry 2, its last call; another episode's calls follow.
    sign_in(&b, &base, &ep1, "#log");
    assert_eq!(timeline_indices(&b), json!([2, 1, 0]));
    call_read(&d, &ep3, "b.txt"); // 3
    call_read(&d, &ep3, "b.txt"); // 4
    let dir = d.halt();
    b.wait_for(
        "the page to say it is disconnected",
        live_says("disconnected"),
    );
    damage_row(&dir, 2);
    let d = serve_relative(dir, &addr);
    damage_said(&d, &ops, 2);
    b.click(&b.find("#reconnect"));
    b.wait_for("the live indicator", live_says("live"));
    // The same log: nothing dropped nor reloaded, and the stream goes on after the tip.
    assert_eq!(
        b.exec(
            "return document.getElementById('log-notice').hidden",
            json!([])
        ),
        json!(true)
    );
    assert_eq!(timeline_indices(&b), json!([2, 1, 0]));
    call_read(&d, &ep1, "a.txt"); // 5
    b.wait_for_element("#entries li[data-index='5']");
    assert_eq!(timeline_indices(&b), json!([5, 2, 1, 0]));
    assert_eq!(b.text_of("#live").as_deref(), Some("live"));
}

/// An entry after entry 0 that says `writtenBy world:genesis` (its entry hash recomputed, so
/// its entry link holds) was checked as a genesis: its output link ✓ on a genesis document
/// alone. `worldd why` holds that writer to entry 0; so does the page, in `why`'s words.
#[test]
fn the_genesis_writer_on_an_entry_after_entry_0_breaks_its_output_link() {
    let Some(b) = Browser::start_or_skip(
        "the_genesis_writer_on_an_entry_after_entry_0_breaks_its_output_link",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let token = d.session("ep1", &["Workspace.Read=worktree:10"]);
    call_read(&d, &token, "hello.txt");
    let proxy = TamperProxy::rewriting(
        &d.addr,
        "/v1/log/1",
        std::sync::Arc::new(|v: &mut Value| {
            let mut entry: broker_core::log::Entry = serde_json::from_value(v.clone()).unwrap();
            entry.header.written_by = "world:genesis".into();
            entry.entry_hash =
                broker_core::log::Entry::compute_hash(&entry.header, &entry.transition_ref)
                    .unwrap();
            *v = serde_json::from_slice(&entry.to_bytes().unwrap()).unwrap();
            None
        }),
    );
    sign_in(&b, &proxy.url(""), &token, "#entry/1");
    assert_eq!(
        verdict(&b),
        "✗ 2 of 3 links broken: the daemon served records that do not read as, or fit, what refers to them"
    );
    assert_eq!(
        links(&b)
            .into_iter()
            .map(|(kind, ok, _)| (kind, ok))
            .collect::<Vec<_>>(),
        [
            ("world".to_owned(), false),
            ("entry".to_owned(), true),
            ("output".to_owned(), false)
        ]
    );
    assert_eq!(
        link_why(&b, "output"),
        "writtenBy world:genesis belongs to entry 0 only"
    );
    // The world the summary names selects the entry the daemon wrote, not this one.
    assert_eq!(
        link_why(&b, "world"),
        "the world does not select this entry"
    );
}

/// A tab left open kept every entry the live log sent it, in its memory and its list, and
/// redrew them all on each filter change. It holds the newest 2,000: past them the oldest are
/// dropped, and Load older entries fetches them again (and holds them beside the newest).
#[test]
fn a_long_open_timeline_holds_at_most_2000_entries_and_loads_the_dropped_ones_again() {
    let Some(b) = Browser::start_or_skip(
        "a_long_open_timeline_holds_at_most_2000_entries_and_loads_the_dropped_ones_again",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:3000"]);
    let ops = d.operator_session("ops", &[]);
    std::fs::write(d.root().join("ep1/a.txt"), "a\n").unwrap();
    call_read_recorded(&d, &ep1, "a.txt"); // 1
    sign_in(&b, &d.url(""), &ops, "#log");
    // 2,010 entries arrive live: entries 2–2011.
    for _ in 2..=2011 {
        call_read_recorded(&d, &ep1, "a.txt");
    }
    wait_long(&b, "entry 2011 in the timeline", 120, |b| {
        b.try_find("#entries li[data-index='2011']")
    });
    let rows = || {
        b.exec(
            "const rows = [...document.querySelectorAll('#entries li')].map((li) => Number(li.dataset.index)); \
             return [rows.length, rows[0], rows.at(-1)]",
            json!([]),
        )
    };
    assert_eq!(rows(), json!([2000, 2011, 12]));
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("2000 shown of 2000 loaded · entries 12–2011 scanned")
    );
    // The dropped ones are fetched again, and held beside the newest.
    b.click(&b.find("#older"));
    b.wait_for_element("#entries li[data-index='0']");
    assert_eq!(rows(), json!([2012, 2011, 0]));
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("2012 shown of 2012 loaded · entries 0–2011 scanned")
    );
    // The window is as wide as that now, and slides: the next entry drops the oldest.
    call_read_recorded(&d, &ep1, "a.txt"); // 2012
    b.wait_for_element("#entries li[data-index='2012']");
    assert_eq!(rows(), json!([2012, 2012, 1]));
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("2012 shown of 2012 loaded · entries 1–2012 scanned")
    );
}

/// Load older entries raced the 2,000-entry window: entries the live log brought while its
/// request was out dropped the oldest held (12 and 13) and moved the scanned range up, then the
/// answer (0–11) set it back down to 0. The timeline lacked 12 and 13 for good while saying
/// `entries 0–2013 scanned`, with Load older entries hidden. The request is held by a proxy
/// while two calls commit.
#[test]
fn entries_arriving_while_load_older_entries_is_out_leave_no_gap_in_the_timeline() {
    let Some(b) = Browser::start_or_skip(
        "entries_arriving_while_load_older_entries_is_out_leave_no_gap_in_the_timeline",
        1280,
        800,
    ) else {
        return;
    };
    let d = Daemon::start(WS, &[]);
    let ep1 = d.session("ep1", &["Workspace.Read=worktree:3000"]);
    let ops = d.operator_session("ops", &[]);
    std::fs::write(d.root().join("ep1/a.txt"), "a\n").unwrap();
    call_read_recorded(&d, &ep1, "a.txt"); // 1
    let proxy = HoldProxy::start(&d.addr);
    b.goto(&proxy.url("/workbench#log"));
    sign_in_here(&b, &ops);
    b.wait_for_element("#entries li[data-index='1']");
    // 2,010 entries arrive live: entries 2–2011, of which the newest 2,000 are held.
    for _ in 2..=2011 {
        call_read_recorded(&d, &ep1, "a.txt");
    }
    wait_long(&b, "entry 2011 in the timeline", 120, |b| {
        b.try_find("#entries li[data-index='2011']")
    });
    // The rows listed: how many, the first, the last, and the indices missing between them
    // (or out of order).
    let rows = || {
        b.exec(
            "const rows = [...document.querySelectorAll('#entries li')].map((li) => Number(li.dataset.index)); \
             const missing = []; \
             for (let k = 1; k < rows.length; k++) \
               for (let i = rows[k - 1] - 1; i !== rows[k] && i >= 0; i--) missing.push(i); \
             return [rows.length, rows[0], rows.at(-1), missing]",
            json!([]),
        )
    };
    let older_hidden = || b.exec("return document.getElementById('older').hidden", json!([]));
    let newest_first = |top: u64, bottom: u64| json!([top - bottom + 1, top, bottom, []]);
    assert_eq!(rows(), newest_first(2011, 12));
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("2000 shown of 2000 loaded · entries 12–2011 scanned")
    );

    // Load older entries asks for 0–11; two calls commit before it is answered.
    proxy.hold("/v1/log/summaries?from=0", &ops);
    b.click(&b.find("#older"));
    proxy.wait_held();
    call_read_recorded(&d, &ep1, "a.txt"); // 2012
    call_read_recorded(&d, &ep1, "a.txt"); // 2013
    b.wait_for_element("#entries li[data-index='2013']");
    assert_eq!(rows(), newest_first(2013, 12), "nothing dropped mid-scan");
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("2002 shown of 2002 loaded · entries 12–2013 scanned")
    );
    proxy.release();
    b.wait_for_element("#entries li[data-index='0']");
    let_the_page_act(&b);
    assert_eq!(rows(), newest_first(2013, 0));
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("2014 shown of 2014 loaded · entries 0–2013 scanned")
    );
    assert_eq!(older_hidden(), json!(true));

    // The window holds all it had when the scan ended, and slides at that width.
    call_read_recorded(&d, &ep1, "a.txt"); // 2014
    b.wait_for_element("#entries li[data-index='2014']");
    assert_eq!(rows(), newest_first(2014, 1));
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("2014 shown of 2014 loaded · entries 1–2014 scanned")
    );
    assert_eq!(older_hidden(), json!(false));

    // A scan that fails: what arrived while it was out was held, and the window slides once it
    // ends (1 and 2 dropped, the scanned range from 3).
    proxy.hold("/v1/log/summaries?from=0", &ops);
    b.click(&b.find("#older"));
    proxy.wait_held();
    call_read_recorded(&d, &ep1, "a.txt"); // 2015
    call_read_recorded(&d, &ep1, "a.txt"); // 2016
    b.wait_for_element("#entries li[data-index='2016']");
    assert_eq!(rows(), newest_first(2016, 1), "nothing dropped mid-scan");
    let failed = r#"{"error":{"class":"Internal","message":"held back"}}"#;
    proxy.release_instead(&format!(
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{failed}",
        failed.len()
    ));
    b.wait_for("the failed scan said", |b| {
        b.text_of("#timeline-status")
            .filter(|t| t.starts_with("Could not load older entries"))
    });
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("Could not load older entries: HTTP 500 Internal: held back")
    );
    assert_eq!(rows(), newest_first(2016, 3));
    assert_eq!(older_hidden(), json!(false));
    // Loaded again, with nothing held: the whole log, with no gap.
    proxy.hold("/nothing", &ops); // no request goes there
    b.click(&b.find("#older"));
    b.wait_for_element("#entries li[data-index='0']");
    let_the_page_act(&b);
    assert_eq!(rows(), newest_first(2016, 0));
    assert_eq!(
        b.text_of("#timeline-status").as_deref(),
        Some("2017 shown of 2017 loaded · entries 0–2016 scanned")
    );
    assert_eq!(older_hidden(), json!(true));
}
