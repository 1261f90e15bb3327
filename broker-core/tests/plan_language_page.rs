//! `docs/plan-language.md`, executed: the examples a transition author copies from the page are
//! run through the interpreter, so the page cannot promise a plan or a refusal text that the
//! interpreter does not give.
//!
//! - the docs-only tool loads, and each row of the table under it plans (or refuses) as shown;
//! - the two plan documents are what the interpreter writes for such calls;
//! - the interpreter identity document is the one every entry names, byte for byte;
//! - `ailang-run`'s annotated arguments are the shipped document's, and its refusal list is
//!   what the interpreter answers, line for line and in check order.

use std::path::PathBuf;

use broker_core::log::interpreter_ref;
use broker_core::plan::{interpreter_document, Plan};
use broker_core::transition::Transition;
use serde_json::{json, Value};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn page() -> String {
    std::fs::read_to_string(repo().join("docs/plan-language.md")).unwrap()
}

/// The text of the section under `title`, up to the next heading of its level or above.
fn section(page: &str, title: &str) -> String {
    let start = page
        .find(&format!("\n{title}\n"))
        .unwrap_or_else(|| panic!("docs/plan-language.md has no heading {title:?}"));
    let rest = &page[start + 1..];
    let level = title.split(' ').next().unwrap();
    let end = rest
        .match_indices('\n')
        .map(|(i, _)| i + 1)
        .find(|&i| {
            let line = &rest[i..];
            line.starts_with('#')
                && line
                    .split(' ')
                    .next()
                    .is_some_and(|h| h.len() <= level.len())
        })
        .unwrap_or(rest.len());
    rest[..end].to_owned()
}

/// The fenced blocks of `text` with this info string, in order.
fn blocks(text: &str, info: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut open: Option<(String, Vec<&str>)> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (open.take(), fence) {
            (None, Some(i)) => open = Some((i.trim().to_owned(), Vec::new())),
            (None, None) => {}
            (Some((i, body)), Some(_)) => {
                if i == info {
                    out.push(body.join("\n"));
                }
            }
            (Some((i, mut body)), None) => {
                body.push(line);
                open = Some((i, body));
            }
        }
    }
    out
}

fn json_block(text: &str, at: usize) -> Value {
    let found = blocks(text, "json");
    let block = found
        .get(at)
        .unwrap_or_else(|| panic!("no ```json block #{at} in:\n{text}"));
    serde_json::from_str(block).unwrap_or_else(|e| panic!("{e}:\n{block}"))
}

/// The text between the first pair of backticks in `cell`, and what follows it.
fn code(cell: &str) -> (&str, &str) {
    let (_, rest) = cell
        .split_once('`')
        .unwrap_or_else(|| panic!("no code in {cell:?}"));
    rest.split_once('`')
        .unwrap_or_else(|| panic!("unclosed code in {cell:?}"))
}

fn shipped(name: &str) -> Value {
    let path = repo()
        .join("transitions/se-tools")
        .join(format!("{name}.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn the_docs_only_tool_plans_each_row_of_its_table_as_the_page_shows() {
    let text = section(&page(), "## A tool with no code: docs-only reads");
    let document = json_block(&text, 0);
    let tool = Transition::from_value(document)
        .unwrap_or_else(|e| panic!("the page's docs-read does not load: {e}"));
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| `")).collect();
    assert_eq!(rows.len(), 4, "{text}");
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
        let args: Value = serde_json::from_str(code(cells[0]).0).unwrap();
        let plan = tool.plan_call(&args);
        match cells[1].strip_prefix("refused: ") {
            Some(refusal) => {
                assert_eq!(plan.refusal(), Some(code(refusal).0), "{args}");
            }
            None => {
                let (effect, rest) = code(cells[1]);
                let (payload, _) = code(rest);
                let payload: Value = serde_json::from_str(payload).unwrap();
                let Plan::Effect {
                    effect: planned, ..
                } = &plan
                else {
                    panic!("{args} should plan {effect}, refused: {plan:?}");
                };
                assert_eq!(planned.effect, effect, "{args}");
                assert_eq!(Value::Object(planned.payload.clone()), payload, "{args}");
            }
        }
    }
}

#[test]
fn the_plan_documents_are_the_interpreters() {
    let text = section(&page(), "## The plan document (`world/effect-plan/v1`)");
    let check = Transition::from_value(shipped("ailang-check")).unwrap();
    let planned = check.plan_call(&json!({"path": "hello.ail"}));
    assert_eq!(planned.to_value(), json_block(&text, 0));
    let read = Transition::from_value(shipped("ailang-read")).unwrap();
    let refused = read.plan_call(&json!({"path": "hello.ail", "limit": 1}));
    assert_eq!(refused.to_value(), json_block(&text, 1));
}

#[test]
fn the_interpreter_identity_is_the_one_every_entry_names() {
    let text = section(&page(), "## Interpreter identity");
    let shown = json_block(&text, 0);
    assert_eq!(shown, interpreter_document());
    assert_eq!(
        broker_core::object::Ref::of_json(&shown).unwrap(),
        interpreter_ref().unwrap()
    );
}

#[test]
fn ailang_runs_annotated_arguments_and_refusals_are_the_shipped_tools() {
    let text = section(&page(), "## The eight se-tools");
    let fragment = &blocks(&text, "json")[0];
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
        .and_then(|after| blocks(after, "").into_iter().next())
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
