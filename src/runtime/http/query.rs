//! The one way a handler reads its query string.
//!
//! axum's `Query` answers a parameter that does not parse with a `400` in plain text
//! (`Failed to deserialize query string: limit: invalid digit found in string`): not a
//! problem, no `code`, no `field`. The API fuzzer found it on `GET /v1/jobs` and
//! `GET /v1/callbacks` (issue 14 item 10). [`QueryParams`] parses the same way
//! (`serde_urlencoded`) but through `serde_path_to_error`, and answers `422`
//! problem+json `INVALID_QUERY` naming the parameter: the type it did not match, a
//! parameter given twice (`duplicate field`), or one that is unknown where the query
//! type denies unknown fields.

use super::Problem;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// The request's query string parsed into `T`; a `422 INVALID_QUERY` naming the
/// parameter otherwise.
#[derive(Debug, Clone)]
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Problem> {
        parse(parts.uri.query().unwrap_or("")).map(QueryParams)
    }
}

/// Parse a raw query string (without the `?`) into `T`.
pub fn parse<T: DeserializeOwned>(query: &str) -> Result<T, Problem> {
    let pairs = form_urlencoded::parse(query.as_bytes());
    serde_path_to_error::deserialize(serde_urlencoded::Deserializer::new(pairs)).map_err(|e| {
        let (path, message) = (e.path().to_string(), e.into_inner().to_string());
        let field = super::body::field_at_fault(&path, &message);
        Problem::invalid(
            "INVALID_QUERY",
            &field,
            format!("query parameter {field}: {message}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)] // read only through Debug: the tests look at the errors
    struct Page {
        limit: Option<i64>,
        after: Option<i64>,
        status: Option<String>,
    }

    #[test]
    fn fuzz_a_query_parameter_of_the_wrong_type_is_a_422_naming_it() {
        let problem = parse::<Page>("after=1&limit=false").expect_err("not a number");
        assert_eq!(problem.status.as_u16(), 422);
        assert_eq!(problem.code, "INVALID_QUERY");
        assert_eq!(problem.field.as_deref(), Some("limit"));
        assert!(
            problem.detail.contains("invalid digit"),
            "{}",
            problem.detail
        );
    }

    #[test]
    fn fuzz_a_query_parameter_given_twice_is_a_422_naming_it() {
        let problem = parse::<Page>("limit=1&limit=2").expect_err("duplicate");
        assert_eq!(problem.code, "INVALID_QUERY");
        assert_eq!(problem.field.as_deref(), Some("limit"));
    }

    #[test]
    fn fuzz_a_valid_query_parses_and_an_empty_one_is_all_defaults() {
        let page = parse::<Page>("limit=5&status=FAILED").expect("valid");
        assert_eq!((page.limit, page.after), (Some(5), None));
        assert_eq!(page.status.as_deref(), Some("FAILED"));
        let empty = parse::<Page>("").expect("empty");
        assert_eq!((empty.limit, empty.after, empty.status), (None, None, None));
    }
}
