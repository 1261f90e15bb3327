//! `worldd quickstart`: a working deployment in one command.
//!
//! Checks that it can listen before it touches anything, then creates `./.world` (store,
//! worktrees), a `demo` episode with its worktree, mints a demo credential after confirmation
//! at the terminal, prints the MCP client configuration on stdout (everything else goes to
//! stderr, so `worldd quickstart > mcp.json` captures just the configuration) and serves with
//! the shipped plugins. `--print-only` does the same without serving.

use std::path::PathBuf;

use clap::Args;

use super::serve::{self, ServeArgs};
use super::{CliResult, Failure};

#[derive(Args, Debug)]
pub struct QuickstartArgs {
    /// Where to put the store, worktrees and credential.
    #[arg(long, default_value = ".world")]
    pub dir: PathBuf,
    /// The demo episode.
    #[arg(long, default_value = "demo")]
    pub episode: String,
    /// Loopback address to listen on.
    #[arg(long, default_value = serve::DEFAULT_BIND)]
    pub bind: String,
    /// Budget for each se-tools grant (at most 9007199254740991).
    #[arg(long, default_value_t = 50, value_parser = super::session::budget_arg)]
    pub budget: u64,
    /// Set up (store, episode, credential) and print the client configuration, without
    /// serving.
    #[arg(long)]
    pub print_only: bool,
    #[command(flatten)]
    pub plugins: serve::PluginArgs,
}

pub fn run(a: QuickstartArgs) -> CliResult {
    if a.bind.ends_with(":0") {
        return Err(Failure::usage(
            "quickstart prints a client configuration, so it needs a fixed port (not :0)",
        ));
    }
    // The port first: a taken port must not leave a store and a credential behind.
    let listener = if a.print_only {
        None
    } else {
        let addr = serve::resolve_bind(&a.bind)?;
        crate::server::check_loopback(&addr)
            .map_err(|e| Failure::fatal(format!("daemon startup failed at bind-policy: {e}")))?;
        Some(serve::bind_now(addr)?)
    };
    let db = a.dir.join("db");
    let root = a.dir.join("worktrees");
    let token_file = a.dir.join(format!("{}.session", a.episode));
    std::fs::create_dir_all(root.join(&a.episode))
        .map_err(|e| Failure::usage(format!("{}: {e}", root.display())))?;
    broker_core::store::Store::create(&db)
        .map_err(|e| Failure::fatal(format!("cannot create {}: {e}", db.display())))?;
    if !credential_is_live(&db, &token_file) {
        let grants: Vec<String> = super::session::SE_TOOLS_EFFECTS
            .iter()
            .map(|e| format!("{e}=worktree:{}", a.budget))
            .collect();
        super::session::run(super::session::SessionCommand::Mint(
            super::session::MintArgs {
                db: super::DbArg { db: db.clone() },
                episode: a.episode.clone(),
                grants,
                operator: false,
                workspace_root: Some(root.clone()),
                credential: super::session::CredentialArgs {
                    ttl: super::session::DEFAULT_TTL,
                    out: Some(token_file.clone()),
                },
            },
        ))?;
    }
    let token = super::input::file_text(
        &token_file,
        super::input::SESSION_FILE_BYTES,
        &token_file.display().to_string(),
    )?
    .trim()
    .to_owned();
    let config = serde_json::json!({
        "mcpServers": {
            "worldd": {
                "type": "http",
                "url": format!("http://{}/mcp/", a.bind),
                "headers": {"Authorization": format!("Bearer {token}")},
            }
        }
    });
    errln!(
        "worldd quickstart: episode {} with worktree {}; credential in {}\nworldd quickstart: the MCP client configuration follows on stdout; A2A clients POST http://{}/a2a/ with the same Authorization header",
        a.episode,
        root.join(&a.episode).display(),
        token_file.display(),
        a.bind
    );
    outln!(
        "{}",
        serde_json::to_string_pretty(&config).unwrap_or_default()
    );
    if a.print_only {
        return Ok(());
    }
    let launch = serve::Launch {
        listener,
        ready_on_stderr: true,
    };
    serve::run_with(
        ServeArgs {
            db: Some(db),
            workspace_root: Some(root),
            bind: Some(a.bind),
            open_reads: false,
            plugins: a.plugins,
            ..ServeArgs::default()
        },
        launch,
    )
}

/// True when the credential file holds a session that exists and has not expired.
fn credential_is_live(db: &std::path::Path, token_file: &std::path::Path) -> bool {
    let Ok(token) = super::input::file_text(
        token_file,
        super::input::SESSION_FILE_BYTES,
        "the credential file",
    ) else {
        return false;
    };
    let Ok(store) = broker_core::store::Store::open(db, Default::default()) else {
        return false;
    };
    let id = broker_core::session::credential_id(token.trim());
    matches!(
        broker_core::session::lookup(&store, &id),
        Ok(Some(s)) if s.is_valid(super::now())
    )
}
