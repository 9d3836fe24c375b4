//! The adapter against the payout simulator (spawned in-process on loopback, speaking
//! Xendit's Payouts API), one test per row of the mapping table.

use super::*;
use crate::payouts::provider::ProviderStatus;
use factledger_aggregates::Currency;
use payout_sim::{Fault, SimConfig, SimHandle, Status};

const SECRET: &str = "xnd_development_adapter_test";

async fn sim(complete_after_ms: u64) -> SimHandle {
    payout_sim::spawn(SimConfig {
        secret: SECRET.into(),
        complete_after_ms,
        ..SimConfig::default()
    })
    .await
    .unwrap()
}

fn provider(sim: &SimHandle, timeout: Duration) -> XenditProvider {
    XenditProvider::new(XenditConfig {
        base_url: sim.base_url(),
        secret_key: SECRET.into(),
        timeout,
    })
    .unwrap()
}

fn request(reference: &str) -> PayoutRequest {
    PayoutRequest {
        reference: reference.into(),
        amount_minor: 250_000,
        currency: Currency::parse("IDR").unwrap(),
        channel_code: "ID_BCA".into(),
        account_number: "1234567890".into(),
        account_holder: "Ani".into(),
        description: "affiliate payout".into(),
    }
}

/// A simulator that never settles by itself, and the adapter in front of it.
async fn pending_setup() -> (SimHandle, XenditProvider) {
    let sim = sim(600_000).await;
    let p = provider(&sim, TIMEOUT_DEFAULT);
    (sim, p)
}

fn created(outcome: CreateOutcome) -> ProviderPayout {
    match outcome {
        CreateOutcome::Created(p) => p,
        other => panic!("expected Created, got {other:?}"),
    }
}

fn is_unknown(outcome: &CreateOutcome) -> bool {
    matches!(outcome, CreateOutcome::Unknown { .. })
}

fn payouts_of(sim: &SimHandle, reference: &str) -> u64 {
    sim.sim
        .payouts()
        .creates_per_external_id
        .get(reference)
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_2xx_pending_answer_is_created_and_accepted_and_the_record_holds_no_secret() {
    let (sim, p) = pending_setup().await;
    let (outcome, record) = p.create(&request("po-1")).await;
    let payout = created(outcome);
    assert_eq!(payout.status, ProviderStatus::Accepted);
    assert_eq!(
        (
            payout.reference.as_str(),
            payout.amount_minor,
            payout.currency.as_str()
        ),
        ("po-1", 250_000, "IDR")
    );
    assert!(payout.provider_id.starts_with("disb-"));
    assert_eq!(record.operation, "create");
    assert_eq!(record.http_status, Some(200));
    assert_eq!(record.request["idempotency_key"], "po-1");
    assert_eq!(record.request["body"]["amount"], "250000");
    assert_eq!(record.request["body"]["reference_id"], "po-1");
    let recorded = serde_json::to_string(&record).unwrap();
    assert!(!recorded.contains(SECRET));
    assert_eq!(payouts_of(&sim, "po-1"), 1);
}

#[tokio::test]
async fn a_create_retried_with_the_same_reference_yields_one_payout() {
    let (sim, p) = pending_setup().await;
    let first = created(p.create(&request("po-2")).await.0);
    let again = created(p.create(&request("po-2")).await.0);
    assert_eq!(first.provider_id, again.provider_id);
    assert_eq!(payouts_of(&sim, "po-2"), 1);
}

#[tokio::test]
async fn a_completed_answer_is_succeeded_and_a_failed_one_carries_its_code() {
    let (sim, p) = pending_setup().await;
    p.create(&request("po-3")).await;
    sim.sim.complete("po-3", Status::Succeeded, None).unwrap();
    // The replayed create answers the disbursement as it is now.
    assert_eq!(
        created(p.create(&request("po-3")).await.0).status,
        ProviderStatus::Succeeded
    );
    p.create(&request("po-4")).await;
    sim.sim
        .complete("po-4", Status::Failed, Some("INSUFFICIENT_BALANCE".into()))
        .unwrap();
    assert_eq!(
        created(p.create(&request("po-4")).await.0).status,
        ProviderStatus::Failed {
            code: "INSUFFICIENT_BALANCE".into(),
            recoverable: true
        }
    );
}

#[tokio::test]
async fn insufficient_balance_is_refused_and_recoverable() {
    let (sim, p) = pending_setup().await;
    sim.sim
        .add_fault("po-5", Fault::InsufficientBalance)
        .unwrap();
    let (outcome, record) = p.create(&request("po-5")).await;
    match outcome {
        CreateOutcome::Refused {
            code, recoverable, ..
        } => assert_eq!((code.as_str(), recoverable), ("INSUFFICIENT_BALANCE", true)),
        other => panic!("{other:?}"),
    }
    assert_eq!(record.http_status, Some(400));
    assert_eq!(payouts_of(&sim, "po-5"), 0);
}

#[tokio::test]
async fn a_validation_error_is_refused_and_not_recoverable() {
    let (sim, p) = pending_setup().await;
    let mut bad = request("po-6");
    bad.account_number = "12-34".into();
    match p.create(&bad).await.0 {
        CreateOutcome::Refused {
            code,
            message,
            recoverable,
        } => {
            assert_eq!(
                (code.as_str(), recoverable),
                ("API_VALIDATION_ERROR", false)
            );
            assert!(message.contains("account_number"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(payouts_of(&sim, "po-6"), 0);
}

#[tokio::test]
async fn a_wrong_secret_is_unknown_not_refused() {
    let sim = sim(600_000).await;
    let p = XenditProvider::new(XenditConfig::new(
        sim.base_url(),
        "xnd_development_not_the_key",
    ))
    .unwrap();
    let (outcome, record) = p.create(&request("po-7")).await;
    assert!(is_unknown(&outcome), "{outcome:?}");
    assert_eq!(record.http_status, Some(401));
    assert!(matches!(
        p.query("po-7").await.0,
        QueryOutcome::Unknown { .. }
    ));
}

#[tokio::test]
async fn a_5xx_before_or_after_accepting_is_unknown_and_the_query_tells_which() {
    let (sim, p) = pending_setup().await;
    sim.sim
        .add_fault("po-8", Fault::Error5xxBeforeAccept { status: 503 })
        .unwrap();
    sim.sim
        .add_fault("po-9", Fault::Error5xxAfterAccept { status: 502 })
        .unwrap();
    assert!(is_unknown(&p.create(&request("po-8")).await.0));
    assert!(is_unknown(&p.create(&request("po-9")).await.0));
    assert_eq!(p.query("po-8").await.0, QueryOutcome::Absent);
    match p.query("po-9").await.0 {
        QueryOutcome::Found(payout) => assert_eq!(payout.status, ProviderStatus::Accepted),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_timeout_is_unknown_though_the_payout_was_made() {
    let sim = sim(0).await;
    let p = provider(&sim, Duration::from_millis(300));
    sim.sim
        .add_fault("po-10", Fault::AcceptThenTimeout { delay_ms: 10_000 })
        .unwrap();
    let (outcome, record) = p.create(&request("po-10")).await;
    match &outcome {
        CreateOutcome::Unknown { reason } => assert!(reason.contains("300 ms"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!((record.http_status, record.response), (None, None));
    assert!(record.elapsed_ms >= 300);
    assert_eq!(payouts_of(&sim, "po-10"), 1);
    assert!(matches!(p.query("po-10").await.0, QueryOutcome::Found(_)));
}

#[tokio::test]
async fn a_garbage_2xx_body_is_unknown() {
    let (sim, p) = pending_setup().await;
    sim.sim.add_fault("po-11", Fault::GarbageBody).unwrap();
    let (outcome, record) = p.create(&request("po-11")).await;
    assert!(is_unknown(&outcome), "{outcome:?}");
    assert_eq!(record.http_status, Some(200));
    assert!(record.response.unwrap().contains("<html>"));
    assert_eq!(payouts_of(&sim, "po-11"), 1);
}

#[tokio::test]
async fn a_connection_error_is_unknown() {
    let sim = sim(0).await;
    let url = sim.base_url();
    sim.shutdown().await;
    let p = XenditProvider::new(XenditConfig::new(url, SECRET)).unwrap();
    let (outcome, record) = p.create(&request("po-12")).await;
    assert!(is_unknown(&outcome), "{outcome:?}");
    assert_eq!(record.http_status, None);
    assert!(matches!(
        p.query("po-12").await.0,
        QueryOutcome::Unknown { .. }
    ));
}

#[tokio::test]
async fn a_query_finds_the_settled_payout_or_says_absent() {
    let (sim, p) = pending_setup().await;
    let (outcome, record) = p.query("po-13").await;
    assert_eq!(outcome, QueryOutcome::Absent);
    assert_eq!((record.operation, record.http_status), ("query", Some(200)));
    p.create(&request("po-13")).await;
    sim.sim
        .complete("po-13", Status::Failed, Some("INVALID_DESTINATION".into()))
        .unwrap();
    match p.query("po-13").await.0 {
        QueryOutcome::Found(payout) => assert_eq!(
            payout.status,
            ProviderStatus::Failed {
                code: "INVALID_DESTINATION".into(),
                recoverable: false
            }
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_report_lists_the_days_payouts() {
    let (sim, p) = pending_setup().await;
    p.create(&request("po-14")).await;
    p.create(&request("po-15")).await;
    let day = sim.sim.payouts().disbursements[0].created.date_naive();
    let rows = p.report(day).await.unwrap();
    let refs: Vec<&str> = rows.iter().map(|r| r.reference.as_str()).collect();
    assert_eq!(refs, vec!["po-14", "po-15"]);
    assert!(rows.iter().all(|r| r.amount_minor == 250_000));
    let other = chrono::NaiveDate::from_ymd_opt(2001, 1, 1).unwrap();
    assert!(p.report(other).await.unwrap().is_empty());
}

#[tokio::test]
async fn the_report_pages_through_the_transactions_and_sees_a_reversal() {
    let (sim, p) = pending_setup().await;
    // More than one page of transactions.
    let refs: Vec<String> = (0..report::PAGE_LIMIT + 3)
        .map(|i| format!("rp-{i}"))
        .collect();
    for r in &refs {
        p.create(&request(r)).await;
    }
    sim.sim.complete("rp-0", Status::Succeeded, None).unwrap();
    sim.sim.complete("rp-0", Status::Reversed, None).unwrap();
    let day = sim.sim.payouts().disbursements[0].created.date_naive();
    let rows = p.report(day).await.unwrap();
    assert_eq!(rows.len(), refs.len());
    assert_eq!(rows[0].status, ProviderStatus::Reversed);
    assert!(sim.sim.requests().report >= 2, "paged");
}

#[tokio::test]
async fn a_php_payout_goes_out_in_pesos_and_comes_back_in_centavos() {
    let (sim, p) = pending_setup().await;
    let mut php = request("po-php");
    php.currency = Currency::parse("PHP").unwrap();
    php.channel_code = "PH_GCASH".into();
    php.amount_minor = 12_345;
    let (outcome, record) = p.create(&php).await;
    assert_eq!(created(outcome).amount_minor, 12_345);
    assert_eq!(record.request["body"]["amount"], "123.45");
    assert_eq!(
        sim.sim.payouts().disbursements[0].request.amount_minor,
        12_345
    );
    let mut eur = request("po-eur");
    eur.currency = Currency::parse("EUR").unwrap();
    assert!(matches!(
        p.create(&eur).await.0,
        CreateOutcome::Refused {
            recoverable: false,
            ..
        }
    ));
    assert_eq!(payouts_of(&sim, "po-eur"), 0);
}

#[test]
fn a_malformed_secret_key_is_refused_at_start_naming_it() {
    for bad in [
        "",
        " xnd_development_x",
        "xnd_development_a b",
        "sk-test",
        "xnd_public_development_x",
        "xnd_development_",
    ] {
        match XenditProvider::new(XenditConfig::new("http://127.0.0.1:1", bad)) {
            Err(ProviderError::Config(e)) => {
                assert!(e.contains("secret key"), "{bad:?}: {e}");
                // The error repeats no key (only the documented prefixes).
                assert!(bad.len() < 8 || !e.contains(bad.trim()) || bad.ends_with('_'));
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert!(XenditProvider::new(XenditConfig::new("http://x", "xnd_production_abc")).is_ok());
    let debug = format!("{:?}", XenditConfig::new("http://x", "xnd_production_abc"));
    assert!(!debug.contains("xnd_production_abc"), "{debug}");
}
