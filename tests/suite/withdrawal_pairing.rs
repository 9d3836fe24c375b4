//! Issue 17 item 2 over HTTP: frozen money leaves a wallet only through the
//! withdrawal that froze it — an unfreeze or payout names an open freeze of the same
//! reference and its exact amount, each at most once, never both. What would break it
//! is refused with 409 and a stable code, and nothing is written. Both backends.

use crate::common;

use common::TestDb;
use serde_json::{json, Value};

/// Wallet `wallet` with 1,000 released and 400 of it frozen by `wd-{wallet}` (ledger
/// references are unique across wallets).
async fn funded(app: &common::Server, wallet: &str) {
    let path = format!("/v1/wallets/{wallet}/commands");
    for body in [
        json!({"type": "Open", "user_id": "u-1", "currency": "IDR"}),
        json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": format!("c-{wallet}"), "amount_minor": 1000}),
        json!({"type": "ReleasePending", "ref_type": "COMMISSION", "ref_id": format!("c-{wallet}"), "amount_minor": 1000}),
        moving("FreezeForWithdrawal", &format!("wd-{wallet}"), 400),
    ] {
        let (status, answer) = app.post(&path, body).await;
        assert_eq!(status, 200, "{answer}");
    }
}

fn moving(kind: &str, ref_id: &str, amount: i64) -> Value {
    json!({"type": kind, "ref_type": "WITHDRAWAL", "ref_id": ref_id, "amount_minor": amount})
}

both_backends!(
    direct_wallet_commands_that_break_the_pairing_are_refused_with_409,
    |db: TestDb| async move {
        let app = common::spawn_app(&db).spawn().await;
        funded(&app, "w-1").await;
        let path = "/v1/wallets/w-1/commands";
        let refused = [
            (moving("Unfreeze", "wd-9", 400), "FREEZE_NOT_OPEN", "ref_id"),
            (
                moving("PayOutFrozen", "wd-9", 400),
                "FREEZE_NOT_OPEN",
                "ref_id",
            ),
            (
                moving("Unfreeze", "wd-w-1", 100),
                "FREEZE_AMOUNT_MISMATCH",
                "amount_minor",
            ),
            (
                moving("PayOutFrozen", "wd-w-1", 401),
                "FREEZE_AMOUNT_MISMATCH",
                "amount_minor",
            ),
            (
                moving("FreezeForWithdrawal", "wd-w-1", 50),
                "FREEZE_ALREADY_OPEN",
                "ref_id",
            ),
        ];
        for (body, code, field) in refused {
            let (status, answer) = app.post(path, body.clone()).await;
            assert_eq!(
                (status, answer["code"].as_str(), answer["field"].as_str()),
                (409, Some(code), Some(field)),
                "{body} → {answer}"
            );
        }
        let (status, paid) = app.post(path, moving("PayOutFrozen", "wd-w-1", 400)).await;
        assert_eq!(status, 200, "{paid}");
        // Paid out: neither an unfreeze nor a second payout of wd-1 is possible.
        for body in [
            moving("Unfreeze", "wd-w-1", 400),
            moving("PayOutFrozen", "wd-w-1", 400),
        ] {
            let (status, answer) = app.post(path, body).await;
            assert_eq!(
                (status, answer["code"].as_str()),
                (409, Some("FREEZE_NOT_OPEN")),
                "{answer}"
            );
        }
        let head = paid["position"].as_i64().unwrap();
        let (_, wallet) = app
            .get(&format!("/v1/wallets/w-1?min_position={head}"))
            .await;
        assert_eq!(
            (
                wallet["available_minor"].as_i64(),
                wallet["frozen_minor"].as_i64()
            ),
            (Some(600), Some(0)),
            "{wallet}"
        );
    }
);

both_backends!(
    an_unfreeze_racing_a_payout_of_one_withdrawal_lets_exactly_one_through,
    |db: TestDb| async move {
        let app = common::spawn_app(&db).spawn().await;
        for round in 0..5 {
            let wallet = format!("w-race-{round}");
            funded(&app, &wallet).await;
            let path = format!("/v1/wallets/{wallet}/commands");
            let (a, b) = tokio::join!(
                app.post(&path, moving("Unfreeze", &format!("wd-{wallet}"), 400)),
                app.post(&path, moving("PayOutFrozen", &format!("wd-{wallet}"), 400)),
            );
            let statuses = [a.0, b.0];
            assert_eq!(
                statuses.iter().filter(|s| **s == 200).count(),
                1,
                "round {round}: {a:?} {b:?}"
            );
            let loser = if a.0 == 200 { &b.1 } else { &a.1 };
            assert_eq!(loser["code"], "FREEZE_NOT_OPEN", "round {round}: {loser}");
            let head = [&a.1, &b.1]
                .iter()
                .filter_map(|v| v["position"].as_i64())
                .max()
                .unwrap();
            let (_, w) = app
                .get(&format!("/v1/wallets/{wallet}?min_position={head}"))
                .await;
            let (available, frozen) = (
                w["available_minor"].as_i64().unwrap(),
                w["frozen_minor"].as_i64().unwrap(),
            );
            assert_eq!(frozen, 0, "round {round}: {w}");
            // Unfrozen: all 1,000 back; paid out: 600 left. Never both.
            assert!(available == 1000 || available == 600, "round {round}: {w}");
        }
    }
);
