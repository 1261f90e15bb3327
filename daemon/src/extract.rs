//! The REST routes' extractors: a request's path segments and its query's parameters, each
//! refused in the REST error envelope (axum's own rejections are plain text, and every `/v1`
//! error is JSON).
//!
//! The query is read strictly: a parameter named twice is refused. A map built from
//! `from=0&from=1` keeps one of the two, and which one depends on the parser: a proxy in front
//! that checked the first would pass a request served from the second. So the routes answer
//! `400 BadRequest` `query parameter "from" is given twice` instead of choosing.

use std::collections::HashMap;

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use crate::rest::ApiError;

/// The query's parameters, each named once.
#[derive(Debug, Default)]
pub struct Params(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Params, Response> {
        let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
            .map_err(|r| refused(r.status(), r.body_text()))?;
        let mut params = HashMap::with_capacity(pairs.len());
        for (name, value) in pairs {
            if params.contains_key(&name) {
                return Err(ApiError::bad_request(format!(
                    "query parameter {} is given twice",
                    dialect::quote::quote(&name)
                ))
                .into_response());
            }
            params.insert(name, value);
        }
        Ok(Params(params))
    }
}

/// The route's path parameters, as axum's `Path` reads them.
#[derive(Debug)]
pub struct Segments<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Segments<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Segments<T>, Response> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(t)) => Ok(Segments(t)),
            Err(r) => Err(refused(r.status(), r.body_text())),
        }
    }
}

/// A rejection of axum's, in the envelope: 400 for what the client sent, 500 for a route that
/// names no such parameter.
fn refused(status: StatusCode, text: String) -> Response {
    let class = if status.is_client_error() {
        "BadRequest"
    } else {
        "Internal"
    };
    ApiError::new(status, class, text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    async fn params(uri: &str) -> Result<HashMap<String, String>, (u16, String)> {
        let (mut parts, ()) = Request::get(uri).body(()).unwrap().into_parts();
        match Params::from_request_parts(&mut parts, &()).await {
            Ok(Params(p)) => Ok(p),
            Err(r) => {
                let status = r.status().as_u16();
                let body = axum::body::to_bytes(r.into_body(), 4096).await.unwrap();
                Err((status, String::from_utf8_lossy(&body).into_owned()))
            }
        }
    }

    #[tokio::test]
    async fn each_parameter_once_or_a_400_naming_the_one_given_twice() {
        let p = params("/v1/log?from=3&limit=10").await.unwrap();
        assert_eq!(p.get("from").map(String::as_str), Some("3"));
        assert_eq!(p.get("limit").map(String::as_str), Some("10"));
        assert!(params("/v1/log").await.unwrap().is_empty());
        for uri in ["/v1/log?from=0&from=1", "/v1/log?from=1&limit=2&%66rom=1"] {
            assert_eq!(
                params(uri).await,
                Err((
                    400,
                    r#"{"error":{"class":"BadRequest","message":"query parameter \"from\" is given twice"}}"#
                        .into()
                )),
                "{uri}"
            );
        }
    }
}
