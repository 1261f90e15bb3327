//! Header fields that are not lists: each is sent once or not at all.
//!
//! A request that carries such a field twice is read two ways, whatever the two say: the
//! daemon would take the first, a proxy in front may act on the last. So every singleton
//! field the daemon reads (`Authorization`, `Content-Type`, `MCP-Protocol-Version`,
//! `A2A-Version`, `Last-Event-ID`, the stateless revision's routing headers) is read through
//! [`single`], and each surface answers a repeated one as it answers a malformed one.
//! A refusal that quotes what was sent quotes every field, through [`texts`].

use std::borrow::Cow;

use axum::http::header::AsHeaderName;
use axum::http::{HeaderMap, HeaderValue};

/// The field appears more than once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repeated;

/// The request's one `name` field: `Ok(None)` without one, [`Repeated`] with more.
pub fn single<K: AsHeaderName>(
    headers: &HeaderMap,
    name: K,
) -> Result<Option<&HeaderValue>, Repeated> {
    let mut fields = headers.get_all(name).iter();
    match (fields.next(), fields.next()) {
        (first, None) => Ok(first),
        (_, Some(_)) => Err(Repeated),
    }
}

/// Every `name` field of the request, in order, as text (bytes that are not UTF-8 replaced).
pub fn texts<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Vec<Cow<'_, str>> {
    headers
        .get_all(name)
        .iter()
        .map(|f| String::from_utf8_lossy(f.as_bytes()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_none_or_repeated() {
        let mut h = HeaderMap::new();
        assert_eq!(single(&h, "last-event-id"), Ok(None));
        h.append("last-event-id", HeaderValue::from_static("3"));
        assert_eq!(
            single(&h, "last-event-id"),
            Ok(Some(&HeaderValue::from_static("3")))
        );
        h.append("last-event-id", HeaderValue::from_static("3"));
        assert_eq!(single(&h, "last-event-id"), Err(Repeated));
    }
}
