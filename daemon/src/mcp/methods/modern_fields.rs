//! The members every 2026-07-28 result carries.

use serde::Serialize;

/// The members every 2026-07-28 result carries: `resultType`, the cache hints of cacheable
/// results, and the `_meta` server identity stamp (plus any of our own `_meta` members).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ModernFields {
    result_type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_scope: Option<&'static str>,
}

impl ModernFields {
    /// A cacheable result. Every answer depends on the caller's credential (its grants pick
    /// the tools), so the scope is `private`; the registry can change at any publish, so the
    /// time-to-live is 0.
    pub(super) fn cacheable() -> ModernFields {
        ModernFields {
            result_type: "complete",
            ttl_ms: Some(0),
            cache_scope: Some("private"),
        }
    }

    pub(super) fn complete() -> ModernFields {
        ModernFields {
            result_type: "complete",
            ttl_ms: None,
            cache_scope: None,
        }
    }
}
