//! The error half of the OpenAPI contract, written once for every operation.
//!
//! Every error the service answers is an RFC 9457 problem sent as
//! `application/problem+json` ([`super::Problem`]), and some errors can come from any
//! operation because layers in front of every handler produce them. Writing those into
//! each `#[utoipa::path]` by hand is how the document drifted from the service: the
//! API fuzzer (`tools/fuzz-api.sh`, issue 14 item 10) found 46 operations documenting
//! their problems as `application/json` and 21 answering a status they did not
//! document. [`ErrorContract`] walks the generated document instead and
//!
//! - documents every `Problem` response under `application/problem+json` (the
//!   annotations keep writing `body = ProblemBody`; utoipa files that under
//!   `application/json`), and
//! - adds, where an operation does not document them itself, the answers it can get
//!   without its handler having a say:
//!   - `401` on operations with bearer security: no key, a malformed or unknown one
//!     ([`super::Caller`]);
//!   - `429` on the same: the per-key rate limit (`super::limits`);
//!   - `422` on operations with parameters or a request body: a parameter or body
//!     that does not parse (the problem names the field);
//!   - `413` on operations with a request body: over the body limit;
//!   - `500` everywhere: an internal error, answered with an error id only;
//!   - `503` everywhere: the request timeout and the connection cap.
//!
//! Operation-specific answers (404, 409, 403 for roles) stay in the annotations, next
//! to the handler that decides them.

use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder};

/// The media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";
/// utoipa's media type for `body = …` in an annotation.
pub(crate) const JSON: &str = "application/json";
/// The component name of [`super::ProblemBody`] (`#[schema(as = Problem)]`).
pub(crate) const PROBLEM_SCHEMA: &str = "#/components/schemas/Problem";

/// The statuses added where missing, with when they apply and what they mean.
const STANDARD: &[(&str, Applies, &str)] = &[
    (
        "401",
        Applies::Secured,
        "UNAUTHORIZED: no `Authorization: Bearer <api key>`, or an unknown or revoked key",
    ),
    (
        "413",
        Applies::WithBody,
        "BODY_TOO_LARGE: the request body is over this route's size limit",
    ),
    (
        "422",
        Applies::WithInput,
        "A parameter or the body does not parse or breaks a rule; `field` names it",
    ),
    (
        "429",
        Applies::Secured,
        "RATE_LIMITED: over this key's request rate; retry after `Retry-After` seconds",
    ),
    (
        "500",
        Applies::Always,
        "An internal error; `error_id` names the log entry, the body holds nothing internal",
    ),
    (
        "503",
        Applies::Always,
        "REQUEST_TIMEOUT or TOO_MANY_CONNECTIONS (with `Retry-After`), or the \
         operation's own unavailability",
    ),
];

/// When a standard status applies to an operation.
#[derive(Debug, Clone, Copy)]
enum Applies {
    Always,
    /// The operation asks for a bearer key.
    Secured,
    /// The operation takes a request body.
    WithBody,
    /// The operation takes parameters or a request body.
    WithInput,
}

impl Applies {
    fn to(self, op: &Operation) -> bool {
        let has_body = op.request_body.is_some();
        match self {
            Applies::Always => true,
            Applies::Secured => op.security.as_ref().is_some_and(|s| !s.is_empty()),
            Applies::WithBody => has_body,
            Applies::WithInput => has_body || op.parameters.as_ref().is_some_and(|p| !p.is_empty()),
        }
    }
}

/// The [`utoipa::Modify`] that writes the error contract into the document.
pub struct ErrorContract;

impl utoipa::Modify for ErrorContract {
    fn modify(&self, openapi: &mut OpenApi) {
        for item in openapi.paths.paths.values_mut() {
            for op in operations(item) {
                problems_as_problem_json(op);
                add_standard_responses(op);
            }
        }
    }
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

fn is_problem(content: &utoipa::openapi::Content) -> bool {
    matches!(&content.schema, Some(RefOr::Ref(r)) if r.ref_location == PROBLEM_SCHEMA)
}

/// A documented `Problem` body moves from `application/json` to
/// `application/problem+json`, the type [`super::Problem`] is answered with.
fn problems_as_problem_json(op: &mut Operation) {
    for response in op.responses.responses.values_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        if response.content.get(JSON).is_some_and(is_problem) {
            if let Some(content) = response.content.shift_remove(JSON) {
                response.content.insert(PROBLEM_JSON.to_owned(), content);
            }
        }
    }
}

fn add_standard_responses(op: &mut Operation) {
    for (status, applies, description) in STANDARD {
        if applies.to(op) && !op.responses.responses.contains_key(*status) {
            op.responses.responses.insert(
                (*status).to_owned(),
                RefOr::T(problem_response(description)),
            );
        }
    }
}

fn problem_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(Ref::new(PROBLEM_SCHEMA)))
                .build(),
        )
        .build()
}
