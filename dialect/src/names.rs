//! Tool names on the wire: how a transition id becomes an MCP tool name.
//!
//! The escape is reversible: `_` → `_u`, `.` → `_d`, `/` → `_s`; so `tools.echo` is
//! `tools_decho`, and ids such as `ailang-read` are their own names. A name longer than
//! [`MAX_MCP_NAME`] bytes refuses the whole tool surface of a session, so a plugin that ships or
//! publishes tools should check it up front.

/// Longest MCP tool name, in bytes.
pub const MAX_MCP_NAME: usize = 64;

/// The MCP name of a transition id.
pub fn mcp_name(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for c in id.chars() {
        match c {
            '_' => out.push_str("_u"),
            '.' => out.push_str("_d"),
            '/' => out.push_str("_s"),
            c => out.push(c),
        }
    }
    out
}

/// The transition id of an MCP name; `None` when the name is not a valid escape.
pub fn transition_id(name: &str) -> Option<String> {
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars();
    while let Some(c) = chars.next() {
        if c == '_' {
            match chars.next()? {
                'u' => out.push('_'),
                'd' => out.push('.'),
                's' => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_escape_reversibly() {
        assert_eq!(mcp_name("tools.echo"), "tools_decho");
        assert_eq!(mcp_name("ailang-read"), "ailang-read");
        assert_eq!(mcp_name("a_b/c.d"), "a_ub_sc_dd");
        for id in ["tools.echo", "a_b/c.d", "x__y", "_._/"] {
            assert_eq!(transition_id(&mcp_name(id)).as_deref(), Some(id));
        }
        assert_eq!(transition_id("bad_x"), None);
        assert_eq!(transition_id("trailing_"), None);
    }
}
