//! Contract tests: Apple's published vectors (`fixtures`) in, our verdicts and
//! normalised model out; chains this test mints (through payout-sim's minting) for
//! every refusal.

use super::fixtures as apple;
use super::mapping::{self, Action};
use super::*;
use base64::Engine as _;
use payout_sim::appstore::{
    AppStoreFault, AppStoreSettings, AppStoreSim, NotifySpec, TransactionSpec,
};
use payout_sim::appstore_certs::{Chain, ChainSpec};
use serde_json::{json, Value};

fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

fn sandbox(bundle: &str) -> AppStoreConfig {
    AppStoreConfig::new(bundle, Environment::Sandbox, None).unwrap()
}

#[test]
fn the_pinned_root_is_apple_root_ca_g3_by_its_published_fingerprint() {
    let der = root::apple_root_ca_g3();
    assert_eq!(chain::fingerprint(&der), root::APPLE_ROOT_CA_G3_SHA256);
    assert_eq!(sandbox("com.example").root_der.as_ref(), der.as_slice());
}

#[test]
fn apple_s_real_signing_chain_verifies_up_to_the_pinned_g3_root() {
    let x5c = vec![
        apple::REAL_APPLE_SIGNING_CERTIFICATE_BASE64_ENCODED.to_owned(),
        apple::REAL_APPLE_INTERMEDIATE_BASE64_ENCODED.to_owned(),
        root::APPLE_ROOT_CA_G3_B64.to_owned(),
    ];
    let g3 = root::apple_root_ca_g3();
    let at = apple::EFFECTIVE_DATE_S * 1000;
    assert!(chain::verify(&x5c, &g3, at).is_ok());
    // The leaf expires on 2027-10-13: a payload signed after that is refused.
    let late = chain::verify(&x5c, &g3, 1_830_000_000_000).unwrap_err();
    assert_eq!(late.reason(), "certificate_not_valid", "{late}");
    // Pinned to another root, Apple's own chain is refused.
    let other = b64(apple::ROOT_CA_BASE64_ENCODED);
    assert_eq!(
        chain::verify(&x5c, &other, at).unwrap_err().reason(),
        "wrong_root"
    );
}

#[test]
fn apple_s_test_chains_without_a_marker_oid_are_refused() {
    let root = b64(apple::ROOT_CA_BASE64_ENCODED);
    let at = apple::EFFECTIVE_DATE_S * 1000;
    let chain_of = |leaf: &str, int: &str| {
        vec![
            leaf.to_owned(),
            int.to_owned(),
            apple::ROOT_CA_BASE64_ENCODED.to_owned(),
        ]
    };
    let good = chain_of(
        apple::LEAF_CERT_BASE64_ENCODED,
        apple::INTERMEDIATE_CA_BASE64_ENCODED,
    );
    assert!(chain::verify(&good, &root, at).is_ok());
    for (leaf, int) in [
        (
            apple::LEAF_CERT_INVALID_OID_BASE64_ENCODED,
            apple::INTERMEDIATE_CA_BASE64_ENCODED,
        ),
        (
            apple::LEAF_CERT_FOR_INTERMEDIATE_CA_INVALID_OID_BASE64_ENCODED,
            apple::INTERMEDIATE_CA_INVALID_OID_BASE64_ENCODED,
        ),
    ] {
        let e = chain::verify(&chain_of(leaf, int), &root, at).unwrap_err();
        assert_eq!(e.reason(), "missing_oid", "{e}");
    }
    assert_eq!(
        chain::verify(&good[1..], &root, at).unwrap_err().reason(),
        "bad_chain"
    );
    let garbage = chain_of("abc", apple::INTERMEDIATE_CA_BASE64_ENCODED);
    assert_eq!(
        chain::verify(&garbage, &root, at).unwrap_err().reason(),
        "bad_chain"
    );
}

fn apple_test_verifier(env: Environment, bundle: &str, app: Option<i64>) -> AppStoreVerifier {
    let config = AppStoreConfig::new(bundle, env, app)
        .unwrap()
        .pinning(&b64(apple::ROOT_CA_BASE64_ENCODED))
        .unwrap();
    AppStoreVerifier::new(config)
}

fn body_of(jws: &str) -> Vec<u8> {
    json!({ "signedPayload": jws }).to_string().into_bytes()
}

#[test]
fn apple_s_published_test_notification_verifies_and_normalises() {
    let v = apple_test_verifier(Environment::Sandbox, "com.example", None);
    let ok = v.verify_body(&body_of(apple::TEST_NOTIFICATION)).unwrap();
    assert_eq!(
        ok.notification.notification_uuid,
        "9ad56bd2-0bc6-42e0-af24-fd996d87a1e6"
    );
    assert_eq!(ok.notification.event_type(), "TEST");
    assert_eq!(ok.notification.signed_date, 1_681_314_324_000);
    assert_eq!(ok.decoded["data"]["bundleId"], "com.example");
    assert_eq!(
        mapping::action(&ok.notification).unwrap(),
        Action::NoEffect {
            why: "a notification type that moves no money here (TEST, metadata, external \
                  purchase tokens, …)"
        }
    );
    // Apple's own expectations (test_payload_verification.py).
    let prod = apple_test_verifier(Environment::Production, "com.example", Some(1234));
    let e = prod
        .verify_body(&body_of(apple::TEST_NOTIFICATION))
        .unwrap_err();
    assert_eq!(e.failure.reason(), "wrong_environment");
    let wrong_app = apple_test_verifier(Environment::Production, "com.example", Some(1235));
    let e = wrong_app
        .verify_body(&body_of(apple::TEST_NOTIFICATION))
        .unwrap_err();
    assert_eq!(e.failure.reason(), "wrong_app_apple_id");
    let other = apple_test_verifier(Environment::Sandbox, "com.examplex", None);
    let e = other
        .verify_body(&body_of(apple::TEST_NOTIFICATION))
        .unwrap_err();
    assert_eq!(e.failure.reason(), "wrong_bundle_id");
    let e = v
        .verify_body(&body_of(apple::MISSING_X5C_HEADER_CLAIM))
        .unwrap_err();
    assert_eq!(e.failure.reason(), "bad_chain");
    for garbage in ["a.b.c.d", "a.b.c"] {
        let e = v.verify_body(&body_of(garbage)).unwrap_err();
        assert_eq!(e.failure.reason(), "malformed", "{garbage}");
    }
    let t = v.decode_signed(apple::TRANSACTION_INFO).unwrap();
    assert_eq!(t["environment"], "Sandbox");
    let r = v.decode_signed(apple::RENEWAL_INFO).unwrap();
    assert_eq!(r["environment"], "Sandbox");
}

const BUNDLE: &str = "com.example.factledger";
const TOKEN: &str = "7e3fb20b-4cdb-47cc-936d-99d65f608138";

fn sim() -> AppStoreSim {
    AppStoreSim::new(AppStoreSettings::default()).unwrap()
}

fn verifier_for(sim: &AppStoreSim) -> AppStoreVerifier {
    AppStoreVerifier::new(sandbox(BUNDLE).pinning(&sim.root_der()).unwrap())
}

fn purchase(kind: &str, subtype: Option<&str>, txn: &str, original: &str) -> NotifySpec {
    NotifySpec {
        notification_type: kind.into(),
        subtype: subtype.map(str::to_owned),
        notification_uuid: None,
        transaction: Some(TransactionSpec {
            transaction_id: txn.into(),
            original_transaction_id: Some(original.into()),
            app_account_token: Some(TOKEN.into()),
            product_id: "com.example.factledger.premium".into(),
            price: 9_990,
            currency: "USD".into(),
            purchase_date: Some(1_700_000_000_000),
            expires_date: None,
            kind: "Auto-Renewable Subscription".into(),
            bundle_id: None,
        }),
        renewal_info: true,
        fault: None,
    }
}

#[test]
fn a_notification_the_simulator_signs_verifies_with_decoded_transaction_and_renewal_info() {
    let sim = sim();
    let (body, uuid) = sim.body(&purchase("SUBSCRIBED", Some("INITIAL_BUY"), "1000", "1000"));
    let v = verifier_for(&sim).verify_body(body.as_bytes()).unwrap();
    assert_eq!(v.notification.notification_uuid, uuid);
    assert_eq!(v.notification.event_type(), "SUBSCRIBED.INITIAL_BUY");
    let data = v.decoded["data"].as_object().unwrap();
    assert!(!data.contains_key("signedTransactionInfo") && !data.contains_key("signedRenewalInfo"));
    assert_eq!(data["transactionInfo"]["price"], 9_990);
    assert_eq!(data["renewalInfo"]["autoRenewStatus"], 1);
    let Action::Pay(p) = mapping::action(&v.notification).unwrap() else {
        panic!("a purchase pays")
    };
    assert_eq!((p.amount_minor, p.currency.as_str()), (999, "USD"));
    assert_eq!(p.tx.order_no, TOKEN);
    assert!(p.tx.first);
}

/// A body whose outer JWS is `payload` signed by `chain` under `header`.
fn forged(chain: &Chain, header: Value, payload: &Value) -> Vec<u8> {
    body_of(&chain.sign_with_header(&header, payload))
}

#[test]
fn every_forgery_and_misconfiguration_is_refused_with_its_reason() {
    let sim = sim();
    let v = verifier_for(&sim);
    let spec = purchase("DID_RENEW", None, "1001", "1000");
    let (_, uuid) = sim.body(&spec);
    let payload = sim.payload(&spec, &uuid, sim.chain());
    let x5c = sim.chain().x5c();
    let reason = |body: &[u8]| v.verify_body(body).unwrap_err().failure.reason();

    let rogue = Chain::mint(&ChainSpec {
        name: "Rogue".into(),
        ..ChainSpec::default()
    })
    .unwrap();
    let (wrong_chain, _) = sim.body(&NotifySpec {
        fault: Some(AppStoreFault::WrongChain),
        ..spec.clone()
    });
    assert_eq!(reason(wrong_chain.as_bytes()), "wrong_root");
    let (bad_sig, _) = sim.body(&NotifySpec {
        fault: Some(AppStoreFault::BadSignature),
        ..spec.clone()
    });
    assert_eq!(reason(bad_sig.as_bytes()), "bad_signature");
    // The chain is sim's, the signature another key's.
    let header = json!({"alg": "ES256", "x5c": x5c});
    assert_eq!(reason(&forged(&rogue, header, &payload)), "bad_signature");
    for alg in ["none", "HS256", "RS256", "ES384"] {
        let header = json!({"alg": alg, "x5c": x5c});
        assert_eq!(
            reason(&forged(sim.chain(), header, &payload)),
            "bad_alg",
            "{alg}"
        );
    }
    let no_marker = Chain::mint(&ChainSpec {
        leaf_marker: false,
        ..ChainSpec::default()
    })
    .unwrap();
    let no_int_marker = Chain::mint(&ChainSpec {
        intermediate_marker: false,
        ..ChainSpec::default()
    })
    .unwrap();
    let expired = Chain::mint(&ChainSpec {
        leaf_valid_from_days: -30,
        leaf_valid_until_days: -1,
        ..ChainSpec::default()
    })
    .unwrap();
    for (c, want) in [
        (&no_marker, "missing_oid"),
        (&no_int_marker, "missing_oid"),
        (&expired, "certificate_not_valid"),
    ] {
        let v = AppStoreVerifier::new(sandbox(BUNDLE).pinning(&c.root_der).unwrap());
        let e = v.verify_body(&body_of(&c.sign(&payload))).unwrap_err();
        assert_eq!(e.failure.reason(), want, "{e}");
    }
    // Apple's pinned root by default: the simulator's chain is not Apple's.
    let e =
        AppStoreVerifier::new(sandbox(BUNDLE)).verify_body(&body_of(&sim.chain().sign(&payload)));
    assert_eq!(e.unwrap_err().failure.reason(), "wrong_root");
    // The app it names.
    let prod = AppStoreVerifier::new(
        AppStoreConfig::new(BUNDLE, Environment::Production, Some(1_234_567_890))
            .unwrap()
            .pinning(&sim.root_der())
            .unwrap(),
    );
    let good = body_of(&sim.chain().sign(&payload));
    assert_eq!(
        prod.verify_body(&good).unwrap_err().failure.reason(),
        "wrong_environment"
    );
    let other_app = AppStoreVerifier::new(
        sandbox("com.example.other")
            .pinning(&sim.root_der())
            .unwrap(),
    );
    assert_eq!(
        other_app.verify_body(&good).unwrap_err().failure.reason(),
        "wrong_bundle_id"
    );
    assert!(v.verify_body(&good).is_ok());
    // A nested transaction of another app, or signed under another root.
    let mut other_tx = spec.clone();
    if let Some(t) = other_tx.transaction.as_mut() {
        t.bundle_id = Some("com.example.other".into());
    }
    let (body, _) = sim.body(&other_tx);
    let e = v.verify_body(body.as_bytes()).unwrap_err();
    assert_eq!(
        (e.at, e.failure.reason()),
        ("data.signedTransactionInfo", "wrong_bundle_id")
    );
    let mut nested = payload.clone();
    nested["data"]["signedTransactionInfo"] =
        json!(rogue.sign(&json!({"transactionId": "1", "signedDate": 1, "bundleId": BUNDLE, "environment": "Sandbox"})));
    let e = v
        .verify_body(&body_of(&sim.chain().sign(&nested)))
        .unwrap_err();
    assert_eq!(
        (e.at, e.failure.reason()),
        ("data.signedTransactionInfo", "wrong_root")
    );
    // Not a notification body at all.
    assert_eq!(reason(b"{\"signedPayload\": 5}"), "malformed");
    assert_eq!(
        reason(b"{\"signedPayload\":\"a\",\"signedPayload\":\"b\"}"),
        "malformed"
    );
}

#[test]
fn prices_in_milliunits_become_minor_units_exactly_by_the_currency_s_digits() {
    // (milliunits, currency) → minor units, or refused
    let table: [(i64, &str, Option<i64>); 9] = [
        (9_990, "USD", Some(999)),
        (990, "USD", Some(99)),
        (10_990, "EUR", Some(1_099)),
        (120_000, "JPY", Some(120)),
        (120_500, "JPY", None), // half a yen: never rounded
        (1_234, "KWD", Some(1_234)),
        (15_000_000, "IDR", Some(15_000)), // whole rupiah (money::minor_digits)
        (0, "USD", None),
        (1_000, "XTS", None), // not a circulating currency
    ];
    for (milli, cur, want) in table {
        let got = mapping::price_minor(milli, cur).ok().map(|(m, _)| m);
        assert_eq!(got, want, "{milli} {cur}");
    }
    assert!(mapping::price_minor(9, "USD")
        .unwrap_err()
        .0
        .contains("whole"));
}

#[test]
fn a_renewal_pays_its_own_order_and_types_that_move_no_money_have_no_effect() {
    let sim = sim();
    let v = verifier_for(&sim);
    let notification = |spec: &NotifySpec| {
        let (body, _) = sim.body(spec);
        v.verify_body(body.as_bytes()).unwrap().notification
    };
    let Action::Pay(renewal) =
        mapping::action(&notification(&purchase("DID_RENEW", None, "1001", "1000"))).unwrap()
    else {
        panic!("a renewal pays")
    };
    assert_eq!(
        (renewal.tx.order_no.as_str(), renewal.tx.first),
        ("AP-1001", false)
    );
    assert_eq!(renewal.tx.named_order_no, TOKEN);
    let Action::Refund(r) =
        mapping::action(&notification(&purchase("REFUND", None, "1001", "1000"))).unwrap()
    else {
        panic!("a refund refunds")
    };
    assert_eq!(r.order_no, "AP-1001");
    assert_eq!(
        mapping::action(&notification(&purchase(
            "EXPIRED",
            Some("VOLUNTARY"),
            "1001",
            "1000"
        )))
        .unwrap(),
        Action::Expire {
            order_no: TOKEN.into()
        }
    );
    for kind in [
        "DID_CHANGE_RENEWAL_STATUS",
        "DID_FAIL_TO_RENEW",
        "REFUND_DECLINED",
        "REVOKE",
        "PRICE_INCREASE",
    ] {
        let a = mapping::action(&notification(&purchase(kind, None, "1001", "1000"))).unwrap();
        assert!(matches!(a, Action::NoEffect { .. }), "{kind}: {a:?}");
    }
    let mut no_token = purchase("ONE_TIME_CHARGE", None, "2000", "2000");
    if let Some(t) = no_token.transaction.as_mut() {
        t.app_account_token = None;
    }
    let e = mapping::action(&notification(&no_token)).unwrap_err();
    assert!(e.0.contains("appAccountToken"), "{e}");
}

#[test]
fn the_configuration_is_refused_at_start_naming_the_variable() {
    let read = |_: &str| -> Result<Vec<u8>, String> { Err("no such file".into()) };
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert_eq!(AppStoreConfig::from_lookup(env(&[]), read), Ok(None));
    let cases: [(&'static [(&'static str, &'static str)], &str); 5] = [
        (
            &[(config::ENV_BUNDLE_ID, "com.example")],
            config::ENV_ENVIRONMENT,
        ),
        (
            &[
                (config::ENV_BUNDLE_ID, "com example"),
                (config::ENV_ENVIRONMENT, "Sandbox"),
            ],
            config::ENV_BUNDLE_ID,
        ),
        (
            &[
                (config::ENV_BUNDLE_ID, "com.example"),
                (config::ENV_ENVIRONMENT, "Staging"),
            ],
            config::ENV_ENVIRONMENT,
        ),
        (
            &[
                (config::ENV_BUNDLE_ID, "com.example"),
                (config::ENV_ENVIRONMENT, "Production"),
            ],
            config::ENV_APP_APPLE_ID,
        ),
        (
            &[
                (config::ENV_BUNDLE_ID, "com.example"),
                (config::ENV_ENVIRONMENT, "sandbox"),
                (config::ENV_ROOT_CERT_FILE, "/nope"),
            ],
            config::ENV_ROOT_CERT_FILE,
        ),
    ];
    for (vars, names) in cases {
        let e = AppStoreConfig::from_lookup(env(vars), read).unwrap_err();
        assert_eq!(e.var, names, "{e}");
    }
    let ok = AppStoreConfig::from_lookup(
        env(&[
            (config::ENV_BUNDLE_ID, "com.example"),
            (config::ENV_ENVIRONMENT, "Production"),
            (config::ENV_APP_APPLE_ID, "42"),
        ]),
        read,
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        (ok.environment, ok.app_apple_id),
        (Environment::Production, Some(42))
    );
    assert!(format!("{ok:?}").contains(root::APPLE_ROOT_CA_G3_SHA256));
}
