//! What a new connection has sent by the time it is accepted, read without consuming it.
//!
//! At the connection limit the places to wait for room are handed out by what a connection
//! has sent ([`super::connections::Arrived`]): nothing, bytes, or a request head that carries
//! a credential the daemon knows. The look is a `MSG_PEEK` of the first [`PEEK_BYTES`]: hyper
//! reads the same bytes afterwards, and nothing here decides how the request is answered. The
//! credential is checked again, in full, when the request is.

use std::mem::MaybeUninit;

use broker_core::session::Session;
use tokio::net::TcpStream;

use super::connections::Arrived;

/// How much of a new connection's first bytes the look reads. A request head whose
/// `Authorization` field ends past this counts as bytes only.
pub const PEEK_BYTES: usize = 4096;

/// The live session a credential (an `Authorization` field's value) names, if any.
pub type KnownCredential =
    std::sync::Arc<dyn Fn(&str) -> Option<std::sync::Arc<Session>> + Send + Sync>;

/// What `stream`'s peer has sent and not yet had read; `known` is asked about the head's
/// credential, if it carries one. The socket is non-blocking, so a peer that sent nothing
/// answers at once.
pub fn arrived(stream: &TcpStream, known: &KnownCredential) -> Arrived {
    let mut buf = [MaybeUninit::<u8>::uninit(); PEEK_BYTES];
    let n = match socket2::SockRef::from(stream).peek(&mut buf) {
        Ok(n) if n > 0 => n.min(PEEK_BYTES),
        _ => return Arrived::Nothing,
    };
    // SAFETY: `peek` initialised the first `n` bytes of `buf`, and `n` is at most its length.
    let head = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
    let Some(credential) = credential_field(head) else {
        return Arrived::Bytes;
    };
    known(credential).map_or(Arrived::Bytes, |session| {
        Arrived::Credential(session.credential_id.clone())
    })
}

/// The value of the one `Authorization` field among the complete header lines of `head` (the
/// start of a request head; the request line is skipped): `None` without one, with two, or
/// when it is not visible ASCII. Only lines ended by CRLF count, so a value cut off by the
/// end of what arrived is never taken for a shorter one.
pub fn credential_field(head: &[u8]) -> Option<&str> {
    let mut lines = head.split(|b| *b == b'\n');
    lines.next()?;
    let mut found = None;
    for line in lines {
        // The last piece has no LF after it: incomplete, or empty after a final LF.
        let Some(line) = line.strip_suffix(b"\r") else {
            break;
        };
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        if !line[..colon].eq_ignore_ascii_case(b"authorization") {
            continue;
        }
        if found.is_some() {
            return None;
        }
        let value = line[colon + 1..].trim_ascii();
        // What the edge reads as a header value: visible ASCII, spaces and tabs.
        if !value
            .iter()
            .all(|b| (0x20..0x7f).contains(b) || *b == b'\t')
        {
            return None;
        }
        found = Some(std::str::from_utf8(value).ok()?);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::credential::session_of;
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn the_credential_is_read_from_complete_header_lines_only() {
        let head =
            b"POST /mcp/ HTTP/1.1\r\nHost: 127.0.0.1\r\nauthorization:  Bearer abc \r\n\r\n{";
        assert_eq!(credential_field(head), Some("Bearer abc"));
        // Cut off before its CRLF: it may go on, so it is not taken.
        assert_eq!(
            credential_field(b"GET / HTTP/1.1\r\nAuthorization: Bearer ab"),
            None
        );
        assert_eq!(
            credential_field(b"GET / HTTP/1.1\r\nAuthorization: Bearer ab\r\nHost: x"),
            Some("Bearer ab")
        );
        // Twice, or not visible ASCII: none.
        assert_eq!(
            credential_field(b"GET / HTTP/1.1\r\nAuthorization: a\r\nAUTHORIZATION: a\r\n\r\n"),
            None
        );
        assert_eq!(
            credential_field(b"GET / HTTP/1.1\r\nAuthorization: Bearer \xff\r\n\r\n"),
            None
        );
        assert_eq!(
            credential_field(b"GET / HTTP/1.1\r\nAuthorization: Bearer\x7fa\r\n\r\n"),
            None
        );
        // Past the head, in the body, is not a field; nor is the request line.
        assert_eq!(
            credential_field(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nAuthorization: b\r\n"),
            None
        );
        assert_eq!(credential_field(b"Authorization: b\r\n\r\n"), None);
        // A bare LF ends no line here: the field is not taken.
        assert_eq!(
            credential_field(b"GET / HTTP/1.1\nAuthorization: b\n\n"),
            None
        );
    }

    #[tokio::test]
    async fn a_new_connection_is_told_apart_by_what_it_sent_and_the_look_consumes_nothing() {
        let (live, gone) = ("1".repeat(64), "2".repeat(64));
        let known: KnownCredential = Arc::new({
            let (credential, session) = (format!("Bearer {live}"), session_of(&live));
            move |c: &str| (c == credential).then(|| session.clone())
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let head = |token: &str| format!("GET / HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\r\n");
        let mut clients = Vec::new();
        for (bytes, expected) in [
            (String::new(), Arrived::Nothing),
            ("GET".to_owned(), Arrived::Bytes),
            (head(&gone), Arrived::Bytes),
            (head(&live), Arrived::Credential(live.clone())),
        ] {
            let mut client = TcpStream::connect(addr).await.unwrap();
            let (mut accepted, _) = listener.accept().await.unwrap();
            if !bytes.is_empty() {
                client.write_all(bytes.as_bytes()).await.unwrap();
                accepted.readable().await.unwrap();
            }
            assert_eq!(arrived(&accepted, &known), expected, "{bytes:?}");
            assert_eq!(arrived(&accepted, &known), expected, "looked at twice");
            let mut got = vec![0u8; bytes.len()];
            accepted.read_exact(&mut got).await.unwrap();
            assert_eq!(got, bytes.as_bytes(), "the look consumed nothing");
            clients.push(client);
        }
    }
}
