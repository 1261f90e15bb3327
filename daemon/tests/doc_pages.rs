//! Reference pages whose examples are data, checked against the code: `docs/plan-language.md`
//! and `docs/data-model.md`. A transition author copies the first page's examples, and a
//! reader checking a store by hand recomputes the second's hashes; neither may promise what
//! the interpreter or the store does not do. The pages are read with the executed-docs reader
//! (`common/transcript.rs`).
//!
//! - plan language: the docs-only tool loads, and each row of the table under it plans (or
//!   refuses) as shown; the two plan documents are what the interpreter writes for such calls;
//!   the interpreter identity document is the one every entry names, byte for byte;
//!   `ailang-run`'s annotated arguments are the shipped document's, and its refusal list is
//!   what the interpreter answers, line for line and in check order.
//! - data model: its examples of stored objects are one call's, and every ref the page gives
//!   for bytes it shows is checked against those bytes, every ref one example names in another
//!   against that example, and the plans against what the interpreter writes.

#[allow(dead_code)]
#[path = "common/transcript.rs"]
mod transcript;

use std::collections::BTreeMap;
use std::path::PathBuf;

use broker_core::canon::canonicalize;
use broker_core::log::{genesis_document, interpreter_ref};
use broker_core::plan::{interpreter_document, Plan};
use broker_core::transition::Transition;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The bodies of the fenced blocks of `text` with this info string, in order.
fn blocks_of(text: &str, info: &str) -> Vec<String> {
    transcript::blocks(text)
        .into_iter()
        .filter(|b| b.info == info)
        .map(|b| b.body.join("\n"))
        .collect()
}

/// One fenced block: its info string, its bytes (lines joined by `\n`), and the prose on
/// either side of it (up to the neighbouring blocks).
struct Prosed {
    info: String,
    body: String,
    before: String,
    after: String,
}

/// The blocks of `text`, each with the prose around it.
fn with_prose(text: &str) -> Vec<Prosed> {
    let lines: Vec<&str> = text.lines().collect();
    let blocks = transcript::blocks(text);
    // A block's fences, as 0-based line numbers: the opening one, and the closing one after
    // its body.
    let fences: Vec<(usize, usize)> = blocks
        .iter()
        .map(|b| (b.line - 1, b.line + b.body.len()))
        .collect();
    let prose = |from: usize, to: usize| {
        let mut p = lines[from.min(to)..to].join("\n");
        p.push('\n');
        p
    };
    blocks
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            let start = if i == 0 { 0 } else { fences[i - 1].1 + 1 };
            let end = fences.get(i + 1).map_or(lines.len(), |f| f.0);
            Prosed {
                info: b.info,
                body: b.body.join("\n"),
                before: prose(start, fences[i].0),
                after: prose(fences[i].1 + 1, end),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// docs/plan-language.md

/// The text of the plan language page under the heading `title`.
fn plan_language_section(title: &str) -> String {
    let page = transcript::page("docs/plan-language.md");
    transcript::section(&page, title).to_owned()
}

fn json_block(text: &str, at: usize) -> Value {
    let found = blocks_of(text, "json");
    let block = found
        .get(at)
        .unwrap_or_else(|| panic!("no ```json block #{at} in:\n{text}"));
    serde_json::from_str(block).unwrap_or_else(|e| panic!("{e}:\n{block}"))
}

/// The first `n` code spans of a table cell.
fn code(cell: &str, n: usize) -> Vec<String> {
    let spans = transcript::code_spans(cell);
    assert!(spans.len() >= n, "{n} code spans wanted in {cell:?}");
    spans
}

fn shipped(name: &str) -> Value {
    let path = repo()
        .join("transitions/se-tools")
        .join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn the_docs_only_tool_plans_each_row_of_its_table_as_the_page_shows() {
    let text = plan_language_section("## A tool with no code: docs-only reads");
    let document = json_block(&text, 0);
    let tool = Transition::from_value(document)
        .unwrap_or_else(|e| panic!("the page's docs-read does not load: {e}"));
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| `")).collect();
    assert_eq!(rows.len(), 4, "{text}");
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
        let args: Value = serde_json::from_str(&code(cells[0], 1)[0]).unwrap();
        let plan = tool.plan_call(&args);
        match cells[1].strip_prefix("refused: ") {
            Some(refusal) => {
                assert_eq!(plan.refusal(), Some(code(refusal, 1)[0].as_str()), "{args}");
            }
            None => {
                let spans = code(cells[1], 2);
                let (effect, payload) = (&spans[0], &spans[1]);
                let payload: Value = serde_json::from_str(payload).unwrap();
                let Plan::Effect {
                    effect: planned, ..
                } = &plan
                else {
                    panic!("{args} should plan {effect}, refused: {plan:?}");
                };
                assert_eq!(&planned.effect, effect, "{args}");
                assert_eq!(Value::Object(planned.payload.clone()), payload, "{args}");
            }
        }
    }
}

#[test]
fn the_plan_documents_are_the_interpreters() {
    let text = plan_language_section("## The plan document (`world/effect-plan/v1`)");
    let check = Transition::from_value(shipped("ailang-check")).unwrap();
    let planned = check.plan_call(&json!({"path": "hello.ail"}));
    assert_eq!(planned.to_value(), json_block(&text, 0));
    let read = Transition::from_value(shipped("ailang-read")).unwrap();
    let refused = read.plan_call(&json!({"path": "hello.ail", "limit": 1}));
    assert_eq!(refused.to_value(), json_block(&text, 1));
}

#[test]
fn the_interpreter_identity_is_the_one_every_entry_names() {
    let text = plan_language_section("## Interpreter identity");
    let shown = json_block(&text, 0);
    assert_eq!(shown, interpreter_document());
    assert_eq!(
        broker_core::object::Ref::of_json(&shown).unwrap(),
        interpreter_ref().unwrap()
    );
}

#[test]
fn ailang_runs_annotated_arguments_and_refusals_are_the_shipped_tools() {
    let text = plan_language_section("## The eight se-tools");
    let fragment = &blocks_of(&text, "json")[0];
    let shown: Value = serde_json::from_str(&format!("{{{fragment}}}")).unwrap();
    let run = shipped("ailang-run");
    assert_eq!(shown["arguments"], run["plan"]["arguments"]);

    // One call for each line of the page's list, in the same order.
    let path = |more: Value| {
        let mut args = json!({"path": "main.ail"});
        args.as_object_mut()
            .unwrap()
            .extend(more.as_object().unwrap().clone());
        args
    };
    let calls = [
        path(json!({"limit": 1})),
        json!({}),
        json!({"path": 1}),
        json!({"path": "-x"}),
        path(json!({"args_json": 1})),
        path(json!({"args_json": "{"})),
        path(json!({"stdin": 1})),
        path(json!({"stdin": "x".repeat(65_537)})),
        path(json!({"argv": "x"})),
        path(json!({"argv": vec!["a"; 33]})),
        path(json!({"argv": ["x".repeat(1025)]})),
        path(json!({"argv": ["a\u{0}b"]})),
        path(json!({"caps": "IO"})),
        path(json!({"caps": ["Process"]})),
        path(json!({"caps": ["IO", "IO"]})),
        path(json!({"caps": []})),
        path(json!({"caps": ["Env", "Net"]})),
    ];
    let listed = text
        .split("Its refusals, in check order:")
        .nth(1)
        .and_then(|after| blocks_of(after, "").into_iter().next())
        .expect("the refusal list follows its sentence");
    let listed: Vec<&str> = listed.lines().collect();
    let tool = Transition::from_value(run).unwrap();
    let answered: Vec<String> = calls
        .iter()
        .map(|args| match tool.plan_call(args) {
            Plan::Refused { message } => message,
            other => panic!("{args} planned {other:?}"),
        })
        .collect();
    assert_eq!(listed, answered);
}

// ---------------------------------------------------------------------------------------------
// docs/data-model.md

fn data_model_page() -> String {
    transcript::page("docs/data-model.md")
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The first `sha256:<64 hex>` in `text`.
fn first_ref(text: &str) -> Option<String> {
    text.match_indices("sha256:").find_map(|(at, _)| {
        let hex = text.get(at + 7..at + 71)?;
        hex.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            .then(|| format!("sha256:{hex}"))
    })
}

/// The page's claims "these bytes have this ref", by the block's first line: `ref sha256:…`
/// after a block, `(ref sha256:…):` before one, or "Their ref is" after one with the ref in
/// the next block.
fn claims(blocks: &[Prosed]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        let after = b.after.trim_start();
        let before = b.before.trim_end();
        let claimed = if after.starts_with("ref `sha256:") {
            first_ref(after)
        } else if before.ends_with("`):") && before.contains("(ref\n`sha256:") {
            first_ref(&before[before.rfind("(ref\n").unwrap()..])
        } else if after.trim_end().ends_with("Their ref is") {
            blocks.get(i + 1).and_then(|next| first_ref(&next.body))
        } else {
            None
        };
        if let Some(r) = claimed {
            out.push((b.body.clone(), r));
        }
    }
    out
}

#[test]
fn every_ref_the_page_gives_for_bytes_it_shows_is_their_sha256() {
    let blocks = with_prose(&data_model_page());
    let claims = claims(&blocks);
    // The input, the success output, the record, the request, the result, the genesis and the
    // interpreter identity.
    assert_eq!(
        claims.len(),
        7,
        "{:?}",
        claims.iter().map(|c| &c.1).collect::<Vec<_>>()
    );
    for (bytes, claimed) in &claims {
        assert_eq!(&sha256(bytes.as_bytes()), claimed, "the bytes:\n{bytes}");
    }
    // The byte counts the page states for the two documents fixed by the code.
    for (document, count) in [(genesis_document(), 83), (interpreter_document(), 89)] {
        let canonical = canonicalize(document.to_string().as_bytes()).unwrap();
        assert_eq!(canonical.len(), count);
        let shown = blocks
            .iter()
            .find(|b| b.body.as_bytes() == canonical.as_slice())
            .unwrap_or_else(|| panic!("the page does not show {document}"));
        assert!(
            shown.after.contains(&format!("exactly the {count} ")),
            "{}",
            shown.after
        );
    }
    let interpreter = interpreter_ref().unwrap().to_string();
    assert!(claims.iter().any(|(_, r)| *r == interpreter));
}

/// The one call's objects, by what the page calls them.
fn objects(blocks: &[Prosed]) -> BTreeMap<&'static str, String> {
    let json: Vec<&Prosed> = blocks.iter().filter(|b| b.info == "json").collect();
    let find = |what: &'static str, pick: &dyn Fn(&Value) -> bool| -> (&'static str, String) {
        let found: Vec<&&Prosed> = json
            .iter()
            .filter(|b| {
                b.body
                    .lines()
                    .next()
                    .and_then(|l| serde_json::from_str::<Value>(l).ok())
                    .is_some_and(|v| pick(&v))
            })
            .collect();
        assert_eq!(found.len(), 1, "{what}: {} blocks", found.len());
        (what, found[0].body.clone())
    };
    BTreeMap::from([
        find("input", &|v| *v == json!({"path": "hello.ail"})),
        find("output", &|v| {
            v["content"].is_string() && v["world"].is_object()
        }),
        find("refusal output", &|v| {
            v["refused"].is_string() && v["world"].is_object()
        }),
        find("plan", &|v| {
            v["plan"] == "world/effect-plan/v1" && v["result"].is_null()
        }),
        find("refusal plan", &|v| {
            v["plan"] == "world/effect-plan/v1" && v["result"].is_object()
        }),
        find("record", &|v| {
            v["invocationId"] == "mcp:ep1:t1" && v["episodeId"].is_string()
        }),
        find("result", &|v| {
            v["content"].is_string() && v.get("world").is_none()
        }),
        find("effect records", &|v| {
            v["allowed"] == true && v["failed"] == false
        }),
    ])
}

#[test]
fn the_refs_each_example_names_are_the_other_examples() {
    let page = data_model_page();
    let blocks = with_prose(&page);
    let objects = objects(&blocks);
    let value = |what: &str| -> Value {
        let first = objects[what].lines().next().unwrap();
        serde_json::from_str(first).unwrap()
    };
    let hash = |what: &str| sha256(objects[what].lines().next().unwrap().as_bytes());
    let request = blocks
        .iter()
        .find(|b| b.body.starts_with("14:Workspace.Read"))
        .expect("the effect request's bytes");

    let output = value("output");
    assert_eq!(output["world"]["plan"], hash("plan"));
    assert_eq!(
        value("refusal output")["world"]["plan"],
        hash("refusal plan")
    );
    let records = &objects["effect records"];
    let allowed = records.lines().next().unwrap();
    assert_eq!(
        output["world"]["effects"][0]["record"],
        sha256(allowed.as_bytes())
    );

    let record = value("record");
    assert_eq!(record["input"], hash("input"));
    assert_eq!(record["output"], hash("output"));
    assert_eq!(record["plan"], hash("plan"));
    assert_eq!(record["effects"], json!([sha256(allowed.as_bytes())]));
    assert_eq!(
        record["interpreter"],
        interpreter_ref().unwrap().to_string()
    );

    let allowed: Value = serde_json::from_str(allowed).unwrap();
    assert_eq!(allowed["requestRef"], sha256(request.body.as_bytes()));
    assert_eq!(allowed["resultRef"], hash("result"));
    // The output is the handler's result with the world block, and the result its body.
    let mut body = output.clone();
    body.as_object_mut().unwrap().remove("world");
    assert_eq!(body, value("result"));
}

#[test]
fn the_plans_shown_are_what_the_interpreter_writes() {
    let page = data_model_page();
    let objects = objects(&with_prose(&page));
    let path = repo().join("transitions/se-tools/ailang-read.json");
    let read = Transition::from_slice(&std::fs::read(path).unwrap()).unwrap();
    for (args, shown) in [
        (json!({"path": "hello.ail"}), "plan"),
        (json!({"path": "../x"}), "refusal plan"),
    ] {
        let written = read.plan_call(&args).canonical().unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            objects[shown],
            "{args}"
        );
    }
}
