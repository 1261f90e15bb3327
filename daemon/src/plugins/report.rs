//! What `worldd handlers` prints: every library in the plugin directory, what it declares,
//! its effective config, and the problems `serve` would stop on, each said as `serve` says it.

use serde_json::Value;

use crate::text::{head, one_line};

use super::checks::{check, Seen};
use super::config::{
    check_selected, effective_config, stray_table_text, stray_tables, unselected_table_text,
    unselected_tables,
};
use super::deadline::Stops;
use super::scan::{scan, Scanned};
use super::{authored, PluginError, PluginOptions};

/// [`one_line`] of `text` cut to at most `max` bytes (at a character's edge), saying how long
/// it was: `worldd handlers` shows what a plugin wrote, even past the bound the checks then
/// refuse it for, without printing megabytes of it.
fn shown(text: &str, max: usize) -> String {
    let start = head(text, max);
    if start.len() == text.len() {
        return one_line(text).into_owned();
    }
    format!("{}… ({} bytes in all)", one_line(start), text.len())
}

/// The text of `worldd handlers`: every library, its effects and tools, or why it would not
/// load.
pub fn report(opts: &PluginOptions) -> Result<String, PluginError> {
    use std::fmt::Write;
    let mut out = String::new();
    let scanned = scan(&opts.dir, opts.limits.plugin_start, Stops::Handlers)?;
    let _ = writeln!(out, "plugin directory {}", opts.dir.display());
    // Exactly the checks `serve` makes before it builds any handler, in its order. A clash
    // (a tool id or an effect two plugins take) is listed under both: the reader of either
    // plugin's lines learns of it, whichever file name sorts first.
    let mut problems = vec![Vec::new(); scanned.len()];
    let mut seen = Seen::default();
    for (i, s) in scanned.iter().enumerate() {
        let Scanned::Plugin(info, _) = s else {
            continue;
        };
        if let Err(e) = check(info, opts, &mut seen) {
            if let Some(other) = &e.clash_with {
                let at = scanned
                    .iter()
                    .position(|s| matches!(s, Scanned::Plugin(o, _) if o.path == *other));
                if let Some(at) = at {
                    problems[at].push(e.cause.clone());
                }
            }
            problems[i].push(e.cause);
        }
    }
    let mut n = 0;
    let mut found = Vec::new();
    let mut broken = Vec::new();
    for (s, problems) in scanned.iter().zip(&problems) {
        match s {
            Scanned::Broken(e) => {
                let _ = writeln!(out, "\n{}\n  not loadable: {}", e.path, e.cause);
                broken.push(e.to_string());
            }
            Scanned::Plugin(info, _) => {
                n += 1;
                let m = &info.manifest;
                found.push(m.name.clone());
                let selected = opts.is_selected(&m.name);
                // What the plugin wrote is printed one line each, whatever it holds: the
                // checks below say what is wrong with it.
                let _ = writeln!(
                    out,
                    "\n{} {} (abi {}){}\n  file {}\n  library {}",
                    shown(&m.name, authored::MAX_VERSION_BYTES),
                    shown(&m.version, authored::MAX_VERSION_BYTES),
                    m.abi,
                    if selected { "" } else { "  [not selected]" },
                    one_line(&info.path.display().to_string()),
                    info.file_ref
                );
                if !m.description.is_empty() {
                    let _ = writeln!(
                        out,
                        "  {}",
                        shown(&m.description, authored::MAX_DESCRIPTION_BYTES)
                    );
                }
                for e in &m.effects {
                    let class = serde_json::to_value(e.class)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default();
                    let _ = writeln!(
                        out,
                        "  effect {} [{}] ops: {}",
                        shown(&e.name, broker_core::plan::MAX_NAME_BYTES),
                        class,
                        shown(&e.ops.join(", "), authored::MAX_DESCRIPTION_BYTES)
                    );
                }
                let ids: Vec<String> = m
                    .transitions
                    .iter()
                    .map(|t| {
                        t.get("id").and_then(Value::as_str).map_or_else(
                            || "?".to_owned(),
                            |id| shown(id, broker_core::plan::MAX_NAME_BYTES),
                        )
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "  tools: {}",
                    if ids.is_empty() {
                        "(none)".into()
                    } else {
                        ids.join(", ")
                    }
                );
                if !m.finish.is_empty() {
                    let _ = writeln!(
                        out,
                        "  finish functions: {}",
                        shown(&m.finish.join(", "), authored::MAX_DESCRIPTION_BYTES)
                    );
                }
                let _ = writeln!(out, "  config {}", effective_config(opts, m));
                for problem in problems {
                    let _ = writeln!(out, "  problem: {problem}");
                }
            }
        }
    }
    if let Err(e) = check_selected(opts, &found, &broken) {
        let _ = writeln!(out, "\nproblem: {}", e.cause);
    }
    for (name, near) in stray_tables(opts, &found) {
        let text = stray_table_text(&name, near.as_deref(), &found);
        let kind = if near.is_some() { "problem" } else { "note" };
        let _ = writeln!(out, "\n{kind}: {text}");
    }
    for name in unselected_tables(opts, &found) {
        let _ = writeln!(out, "\nnote: {}", unselected_table_text(opts, name));
    }
    let _ = writeln!(
        out,
        "\n{n} plugin(s), {} library(ies) not loadable",
        broken.len()
    );
    Ok(out)
}
