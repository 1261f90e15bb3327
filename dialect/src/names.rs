//! Tool names on the wire: how a transition id becomes an MCP tool name.
//!
//! The escape is reversible: `_` → `_u`, `.` → `_d`, `/` → `_s`; so `tools.echo` is
//! `tools_decho`, and ids such as `ailang-read` are their own names. A name longer than
//! [`MAX_MCP_NAME`] bytes refuses the whole tool surface of a session, so a plugin that ships or
//! publishes tools should check it up front.

/// Longest MCP tool name, in bytes.
pub const MAX_MCP_NAME: usize = 64;

/// The escape of one byte of an id, when it has one. The escaped characters are ASCII, so the
/// escape works byte by byte on UTF-8.
const fn escape(b: u8) -> Option<&'static str> {
    match b {
        b'_' => Some("_u"),
        b'.' => Some("_d"),
        b'/' => Some("_s"),
        _ => None,
    }
}

/// The bytes of [`mcp_name`]`(id)`, one at a time.
fn escaped(id: &str) -> impl Iterator<Item = u8> + '_ {
    id.bytes().flat_map(|b| {
        let (one, two) = match escape(b) {
            Some(pair) => (pair.as_bytes()[0], Some(pair.as_bytes()[1])),
            None => (b, None),
        };
        std::iter::once(one).chain(two)
    })
}

/// The MCP name of a transition id.
pub fn mcp_name(id: &str) -> String {
    let mut out = String::with_capacity(mcp_name_len(id));
    for c in id.chars() {
        match u8::try_from(c).ok().and_then(escape) {
            Some(pair) => out.push_str(pair),
            None => out.push(c),
        }
    }
    out
}

/// The length in bytes of [`mcp_name`]`(id)`, without building it.
pub fn mcp_name_len(id: &str) -> usize {
    id.len() + id.bytes().filter(|&b| escape(b).is_some()).count()
}

/// True when `name` is [`mcp_name`]`(id)`, compared without building it: admission looks a
/// call's tool up by its name among the session's tools on every call.
pub fn escapes_to(id: &str, name: &str) -> bool {
    mcp_name_len(id) == name.len() && escaped(id).eq(name.bytes())
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
        } else if c == '.' || c == '/' {
            // `mcp_name` never leaves these unescaped, so no id escapes to this name.
            return None;
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

    /// `transition_id("ok\t.ok")` answered `ok\t.ok`, whose own name is `ok\t_dok`: a name
    /// holding a bare `.` or `/` is the escape of no id, and is now said to be so.
    #[test]
    fn a_name_with_a_bare_dot_or_slash_is_the_escape_of_no_id() {
        for name in ["ok\t.ok", "a.b", "a/b", "tools.echo"] {
            assert_eq!(transition_id(name), None, "{name:?}");
        }
        for name in ["ok\t_dok", "tools_decho", "a-b", "x_uy"] {
            let id = transition_id(name).unwrap();
            assert_eq!(mcp_name(&id), name);
        }
    }

    #[test]
    fn names_are_matched_and_measured_as_if_built() {
        let ids = [
            "tools.echo",
            "ailang-read",
            "a_b/c.d",
            "x__y",
            "_._/",
            "",
            "é.ü",
        ];
        for id in ids {
            assert_eq!(mcp_name_len(id), mcp_name(id).len(), "{id}");
            for other in ids
                .iter()
                .chain(&["tools_decho", "tools.echo_", "a_ub_sc_d", "é_dü"])
            {
                assert_eq!(
                    escapes_to(id, other),
                    mcp_name(id) == *other,
                    "{id} {other}"
                );
                assert_eq!(
                    escapes_to(id, &mcp_name(other)),
                    id == *other,
                    "{id} {other}"
                );
            }
        }
    }
}
