//! The generated OpenAPI document against the error contract (`runtime::http::contract`).
use crate::runtime::http::contract::*;
use utoipa::OpenApi as _;

fn document() -> serde_json::Value {
    serde_json::to_value(super::system::ApiDoc::openapi()).expect("serializable")
}

fn each_operation(doc: &serde_json::Value) -> Vec<(String, &serde_json::Value)> {
    let paths = doc["paths"].as_object().expect("paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            let item = item.as_object().expect("path item");
            item.iter()
                .filter(|(method, _)| *method != "parameters")
                .map(move |(method, op)| (format!("{method} {path}"), op))
        })
        .collect()
}

#[test]
fn fuzz_every_problem_response_is_documented_as_problem_json() {
    let doc = document();
    for (name, op) in each_operation(&doc) {
        for (status, response) in op["responses"].as_object().expect("responses") {
            let content = response["content"].as_object();
            let problem = content.and_then(|c| c.get(PROBLEM_JSON));
            if let Some(c) = content {
                let json_problem = c
                    .get(JSON)
                    .is_some_and(|j| j["schema"]["$ref"] == PROBLEM_SCHEMA);
                assert!(
                    !json_problem,
                    "{name} {status}: Problem as application/json"
                );
            }
            if status.starts_with('4') || status == "500" {
                assert!(problem.is_some(), "{name} {status}: no problem+json body");
            }
        }
    }
}

/// A run still going (or failed) has none of the report's fields: the flattened
/// report's part of `Run` must require none of them (it was `oneOf: [null,
/// Report]`, which no such run matches).
#[test]
fn fuzz_a_running_reconciliation_matches_the_run_schema() {
    let doc = document();
    let parts = doc["components"]["schemas"]["Run"]["allOf"]
        .as_array()
        .expect("Run is the run's fields and the report's, flattened");
    let report = parts
        .iter()
        .find(|p| p["properties"].get("up_to_position").is_some())
        .expect("the report's fields are inline in Run");
    let required = report["required"].as_array().map_or(0, Vec::len);
    assert_eq!(required, 0, "{report}");
    // The run's `repair` stands for the report's: a run carries the key once.
    assert!(report["properties"].get("repair").is_none(), "{report}");
    let run_fields = parts
        .iter()
        .find(|p| p["properties"].get("status").is_some())
        .expect("the run's own fields");
    for field in ["id", "status", "repair", "requested_by", "started_at"] {
        let required = run_fields["required"].as_array().expect("required");
        assert!(required.iter().any(|r| r == field), "{field}: {run_fields}");
    }
}

#[test]
fn fuzz_secured_operations_document_401_and_429_and_every_one_500_and_503() {
    let doc = document();
    for (name, op) in each_operation(&doc) {
        let responses = op["responses"].as_object().expect("responses");
        for status in ["500", "503"] {
            assert!(responses.contains_key(status), "{name}: no {status}");
        }
        if op["security"].as_array().is_some_and(|s| !s.is_empty()) {
            for status in ["401", "429"] {
                assert!(responses.contains_key(status), "{name}: no {status}");
            }
        }
        if op.get("requestBody").is_some() {
            for status in ["413", "422"] {
                assert!(responses.contains_key(status), "{name}: no {status}");
            }
        }
    }
}
