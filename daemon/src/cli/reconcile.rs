//! `worldd calls get` and `worldd budget`: ask a running daemon whether a call landed and
//! what budget is left (the `/v1/calls`, `/v1/invocations` and `/v1/budget` routes).

use clap::{Args, Subcommand};
use serde_json::Value;

use super::client::ClientArgs;
use super::{CliResult, Failure};

#[derive(Subcommand, Debug)]
pub enum CallsCommand {
    /// What the daemon knows of one of your calls: committed, indeterminate, unrecorded,
    /// withdrawn, queued or not found (exit 1); damaged (exit 3) when the log no longer holds
    /// the entry a committed call names.
    #[command(
        after_help = "Examples:\n  worldd calls get write-7\n  worldd calls get t-2 --surface a2a\n  worldd calls get mcp:demo:write-7 --json"
    )]
    Get(CallsGetArgs),
}

#[derive(Args, Debug)]
pub struct CallsGetArgs {
    /// An idempotency key / task id (e.g. `write-7`), or an invocation id
    /// (`mcp:<episode>:<task>`, `a2a:<episode>:<task>`) as a result's `_meta` names it.
    pub handle: String,
    /// The surface a bare key was sent on.
    #[arg(long, default_value = "mcp", value_parser = ["mcp", "a2a"])]
    pub surface: String,
    /// Print the daemon's JSON answer.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Args, Debug)]
pub struct BudgetArgs {
    /// Another episode's spend (an operator credential only): what it has spent per effect and
    /// scope under any of its credentials, and its indeterminate intents.
    #[arg(long)]
    pub episode: Option<String>,
    /// Print the daemon's JSON answer.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The route that answers for `a.handle`: an invocation id as given; a bare key as sent over
/// `surface`.
fn route(a: &CallsGetArgs, surface: &str) -> Result<String, Failure> {
    Ok(if a.handle.contains(':') {
        format!(
            "/v1/invocations/{}",
            super::client::pieces(&a.handle, "invocation id")?
        )
    } else if matches!(a.handle.as_str(), "." | "..") {
        // Valid keys, but a URL parser takes the segment for a step, encoded or not: asked by
        // the invocation id, in which they are only part of a segment.
        format!(
            "/v1/invocations/{surface}:{}:{}",
            super::client::segment(&own_episode(&a.client)?.0),
            a.handle
        )
    } else if broker_core::task::valid_task_id(&a.handle) {
        format!("/v1/calls/{surface}/{}", super::client::segment(&a.handle))
    } else {
        // Checked here, by the daemon's rule: a `/` in it would otherwise split the route and
        // meet a "no route" answer that names neither the handle nor the rule.
        return Err(Failure::usage(format!(
            "calls get {}: a task id must be 1-128 characters of A-Z a-z 0-9 . _ - (an invocation id is mcp:<episode>:<task id> or a2a:<episode>:<task id>)",
            dialect::quote::quote(&a.handle)
        )));
    })
}

/// What the other surface holds of a call found not on the asked one (`asked`, the daemon's
/// not-found answer `v`): `None` when nothing was journaled under its key there either; else
/// what to say instead of "safe to send", since the key sent again over the asked surface would
/// run the call a second time. The daemon says it (`otherSurface`); a daemon that does not is
/// asked at `other_path`.
fn sent_elsewhere(
    a: &CallsGetArgs,
    v: &Value,
    asked: &str,
    other: &str,
    other_path: &str,
    hint: &str,
) -> Result<Option<String>, Failure> {
    if let Some(o) = v.get("otherSurface").filter(|o| o.is_object()) {
        return Ok(Some(format!(
            "but {} was sent over {other}: do not send it over {asked}, which would run it again; `worldd calls get {hint}` says how it ended",
            super::terminal::one_line(o["invocationId"].as_str().unwrap_or(&a.handle)),
        )));
    }
    let (status, body) = get(&a.client, other_path)?;
    let o: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if status == 404 && o["state"] == "not-found" {
        return Ok(None);
    }
    Ok(Some(if (200..300).contains(&status) {
        format!(
            "but {} was sent over {other}: do not send it over {asked}, which would run it again; `worldd calls get {hint}` says how it ended",
            super::terminal::one_line(o["invocationId"].as_str().unwrap_or(&a.handle)),
        )
    } else {
        format!(
            "and whether it was sent over {other} could not be read ({}): do not send it until `worldd calls get {hint}` answers",
            super::client::refused(&a.client, other_path, status, &body).message
        )
    }))
}

pub fn calls(cmd: CallsCommand) -> CliResult {
    let CallsCommand::Get(a) = cmd;
    let path = route(&a, &a.surface)?;
    let (status, body) = get(&a.client, &path)?;
    let v: Value = serde_json::from_slice(&body).map_err(|_| {
        Failure::usage(format!(
            "{path} returned HTTP {status}: {}",
            String::from_utf8_lossy(&body).trim()
        ))
    })?;
    if status == 404 && v["state"] == "not-found" {
        if a.json {
            outln!("{v}");
        }
        let id = v["invocationId"].as_str().unwrap_or(&a.handle);
        // A key names a call on each surface: one sent over the other surface is not found on
        // this one, and resending it here would run it a second time. Safe to send only once
        // neither holds it, asked by a bare key or by an invocation id alike.
        let (asked, other_path, hint, episode) =
            match broker_core::task::split_invocation_id(&a.handle) {
                Some((surface, episode, task)) => {
                    let other = if surface == "mcp" { "a2a" } else { "mcp" };
                    let other_id = format!("{other}:{episode}:{task}");
                    let path = format!(
                        "/v1/invocations/{}",
                        super::client::pieces(&other_id, "invocation id")?
                    );
                    (surface, path, other_id, Some(episode))
                }
                None => {
                    let other = if a.surface == "mcp" { "a2a" } else { "mcp" };
                    let key = super::terminal::one_line(&a.handle);
                    (
                        a.surface.as_str(),
                        route(&a, other)?,
                        format!("{key} --surface {other}"),
                        None,
                    )
                }
            };
        let other = if asked == "mcp" { "a2a" } else { "mcp" };
        let id = super::terminal::one_line(id);
        // Another episode's call is answered alike whether or not it exists; sending it is
        // not this session's to do. An operator reads every episode's calls.
        let mut theirs = None;
        if let Some(episode) = episode {
            let (own, operator) = own_episode(&a.client)?;
            if episode != own && !operator {
                return Err(Failure::usage(format!(
                    "calls get: not found: {} {}",
                    super::terminal::one_line(&a.handle),
                    not_yours(&own)
                )));
            }
            if episode != own {
                theirs = Some(super::terminal::one_line(episode));
            }
        }
        return Err(Failure::usage(
            match (sent_elsewhere(&a, &v, asked, other, &other_path, &hint)?, theirs) {
                (None, None) => format!(
                    "calls get: not found: {id} (nothing was journaled under it in your episode, over {asked} or over {other}; it is safe to send)"
                ),
                (None, Some(episode)) => format!(
                    "calls get: not found: {id} (nothing was journaled under it in episode {episode}, and the daemon holds no such call: that episode may send it)"
                ),
                (Some(instead), _) => format!(
                    "calls get: not found: {id} (nothing was journaled under it over {asked}), {instead}"
                ),
            },
        ));
    }
    // The store no longer holds the entry the call's task state names: an integrity failure,
    // said as the daemon says it.
    if status == 500 && v["error"]["class"] == "Damaged" {
        if a.json {
            outln!("{v}");
        }
        return Err(Failure::integrity(format!(
            "calls get: {}",
            v["error"]["message"]
                .as_str()
                .unwrap_or("the call is damaged")
        )));
    }
    if !(200..300).contains(&status) {
        return Err(super::client::refused(&a.client, &path, status, &body));
    }
    if a.json {
        outln!("{v}");
        return Ok(());
    }
    let state = v["state"].as_str().unwrap_or("?");
    outln!(
        "{}  {}  {state}",
        v["invocationId"].as_str().unwrap_or("?"),
        v["skillId"].as_str().unwrap_or("?")
    );
    let outcome = &v["outcome"];
    outln!(
        "  outcome   {}{}  retryable: {}",
        outcome["kind"].as_str().unwrap_or("?"),
        outcome["reason"]
            .as_str()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        outcome["retryable"]
    );
    if let Some(i) = v["entryIndex"].as_u64() {
        outln!("  entry     {i}");
    }
    for (label, key) in [("output", "outputRef"), ("world", "worldRef")] {
        if let Some(r) = v[key].as_str() {
            outln!("  {label:<9} {r}");
        }
    }
    for e in v["effects"].as_array().into_iter().flatten() {
        outln!(
            "  effect    {} {} {} budgetAfter {}{}  record {}",
            e["id"].as_str().unwrap_or("?"),
            e["effect"].as_str().unwrap_or("?"),
            e["status"].as_str().unwrap_or("?"),
            e["budgetAfter"],
            e["denial"]
                .as_str()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default(),
            e["record"].as_str().unwrap_or("-"),
        );
    }
    match state {
        "committed" => outln!("committed: resending the same key returns this result; nothing runs again"),
        // In flight, the daemon is still running it: the worktree shows a half-done effect,
        // and the outcome may still come.
        "indeterminate" if outcome["reason"] == "in-flight" => outln!("indeterminate (in-flight): the daemon is still running it; ask again later, and do not resend it"),
        "indeterminate" => outln!("indeterminate: the effect may have run; do not retry, inspect the worktree"),
        "unrecorded" => outln!("unrecorded: the effect ran but the call was not committed; do not retry, read the effect records"),
        "withdrawn" => outln!("withdrawn: the call's deadline passed while its intent was written, so its handler was never started: nothing ran and nothing was spent; send it again under another key"),
        "queued" => outln!("queued: the daemon holds the call behind its episode's running one and has journaled nothing of it yet; ask again later, and do not send it under another key"),
        _ => {}
    }
    Ok(())
}

pub fn budget(a: BudgetArgs) -> CliResult {
    let path = match &a.episode {
        Some(ep) => format!("/v1/budget?episode={}", super::client::segment(ep)),
        None => "/v1/budget".to_owned(),
    };
    let (status, body) = get(&a.client, &path)?;
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        return Err(super::client::refused(&a.client, &path, status, &body));
    }
    if a.json {
        outln!("{v}");
        return Ok(());
    }
    // Another episode's answer holds its spend, not grants: those belong to credentials.
    if let Some(spent) = v["spent"].as_array() {
        outln!("episode {}", v["episode"].as_str().unwrap_or("?"));
        outln!("{:<24} {:<12} {:>8}", "effect", "scope", "spent");
        for g in spent {
            outln!(
                "{:<24} {:<12} {:>8}",
                g["effect"].as_str().unwrap_or("?"),
                g["scope"].as_str().unwrap_or("?"),
                g["spent"].as_u64().unwrap_or(0)
            );
        }
        return print_indeterminate(&v);
    }
    if v["operator"] == Value::Bool(true) && v["grants"].as_array().is_some_and(Vec::is_empty) {
        errln!("worldd budget: an operator credential holds no grants; --episode EP shows what an episode has spent");
    }
    outln!(
        "{:<24} {:<12} {:>8} {:>8} {:>10}  live",
        "effect",
        "scope",
        "granted",
        "spent",
        "remaining"
    );
    for g in v["grants"].as_array().into_iter().flatten() {
        outln!(
            "{:<24} {:<12} {:>8} {:>8} {:>10}  {}",
            g["effect"].as_str().unwrap_or("?"),
            g["scope"].as_str().unwrap_or("?"),
            g["granted"].as_u64().unwrap_or(0),
            g["spent"].as_u64().unwrap_or(0),
            g["remaining"].as_u64().unwrap_or(0),
            if g["live"] == Value::Bool(true) {
                "yes"
            } else {
                "no"
            }
        );
    }
    print_indeterminate(&v)
}

/// The `indeterminate` intents of a budget answer, one line each: a call the daemon is still
/// running (`inFlight`) is said as such, not as one a crash left.
fn print_indeterminate(v: &Value) -> CliResult {
    for p in v["indeterminate"].as_array().into_iter().flatten() {
        let (kind, why) = if p["inFlight"] == Value::Bool(true) {
            (
                "in flight",
                "the daemon is still running it; ask again later, and do not resend it",
            )
        } else {
            (
                "indeterminate",
                "intent without outcome: it may have run; never retried",
            )
        };
        outln!(
            "{kind}: {} {}@{} cost {} ({why})",
            p["invocationId"].as_str().unwrap_or("?"),
            p["effect"].as_str().unwrap_or("?"),
            p["scope"].as_str().unwrap_or("?"),
            p["cost"].as_u64().unwrap_or(0)
        );
    }
    Ok(())
}

/// The episode of the session's credential (`GET /v1/budget`).
/// Why another episode's call is answered as absent to an agent (`calls get`, `why`).
pub(super) fn not_yours(own: &str) -> String {
    format!("is not a call of your episode ({own}); another episode's calls are its own, and this answer is the same whether or not it exists")
}

/// The calling credential's episode, and whether it is an operator's.
pub(super) fn own_episode(c: &ClientArgs) -> Result<(String, bool), Failure> {
    let (status, body) = get(c, "/v1/budget")?;
    if !(200..300).contains(&status) {
        return Err(super::client::refused(c, "/v1/budget", status, &body));
    }
    serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| {
            let episode = v["episode"].as_str()?.to_owned();
            Some((episode, v["operator"] == true))
        })
        .ok_or_else(|| Failure::usage("/v1/budget named no episode".to_owned()))
}

/// GET a route; `Ok((status, body))` for any HTTP answer.
fn get(c: &ClientArgs, path: &str) -> Result<(u16, Vec<u8>), Failure> {
    super::client::send(c, "GET", path, None, &[])
}
