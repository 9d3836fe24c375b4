//! Multi-stream units of work (SPEC R-ES-3): several streams in one transaction, all
//! or nothing, re-run on fresh state after a conflict. Both backends.

use crate::common;

use common::{meta, run, TestDb};
use factledger::runtime::bus::CommandBus;
use factledger::runtime::unit::{run_unit, UnitError};
use factledger_aggregates::wallet::{Wallet, WalletCommand, WalletError};
use serde_json::json;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

fn cmd(v: serde_json::Value) -> WalletCommand {
    serde_json::from_value(v).expect("valid command")
}

fn credit(ref_id: &str, amount: i64) -> WalletCommand {
    cmd(
        json!({"type": "CreditPending", "ref_type": "COMMISSION", "ref_id": ref_id,
        "amount_minor": amount}),
    )
}

async fn open_two(db: &TestDb) -> CommandBus<Wallet> {
    let bus = CommandBus::<Wallet>::start(db.store.clone());
    for w in ["w-1", "w-2"] {
        run(
            &bus,
            w,
            json!({"type": "Open", "user_id": format!("u-{w}"), "currency": "IDR"}),
        )
        .await;
    }
    bus
}

async fn pending(db: &TestDb, id: &str) -> i64 {
    factledger::runtime::bus::load::<Wallet>(&db.store, id)
        .await
        .unwrap()
        .state
        .balances
        .pending_minor
}

/// Credit `ref_id` to w-1 (twice as much, in two commands on the same stream) and to
/// w-2, in one unit.
async fn credit_both(
    db: &TestDb,
    ref_id: &str,
) -> Result<factledger::runtime::unit::UnitOutcome<()>, UnitError<WalletError>> {
    let ref_id = ref_id.to_owned();
    run_unit(&db.store, &meta(), |mut unit| {
        let ref_id = ref_id.clone();
        async move {
            let mut w1 = unit.load::<Wallet, WalletError>("w-1").await?;
            unit.decide(&mut w1, "w-1", credit(&format!("{ref_id}-a"), 100))?;
            let mut w2 = unit.load::<Wallet, WalletError>("w-2").await?;
            unit.decide(&mut w2, "w-2", credit(&format!("{ref_id}-c"), 70))?;
            unit.decide(&mut w1, "w-1", credit(&format!("{ref_id}-b"), 100))?;
            Ok(((), unit))
        }
    })
    .await
}

both_backends!(
    a_unit_appends_to_several_streams_with_their_ledger_keys,
    |db: TestDb| async move {
        let _bus = open_two(&db).await;
        let done = credit_both(&db, "c-1").await.unwrap();
        assert_eq!(done.attempts, 1);
        // w-1's two events stay one stream part, in decision order; positions are
        // contiguous and the last one is the outcome's position.
        let streams: Vec<(String, i64)> = done
            .events
            .iter()
            .map(|e| (e.aggregate_id.clone(), e.sequence))
            .collect();
        assert_eq!(
            streams,
            vec![("w-1".into(), 2), ("w-1".into(), 3), ("w-2".into(), 2)]
        );
        let positions: Vec<i64> = done.events.iter().map(|e| e.global_position).collect();
        assert_eq!(positions, vec![3, 4, 5]);
        assert_eq!(done.position, 5);
        assert_eq!(
            (pending(&db, "w-1").await, pending(&db, "w-2").await),
            (200, 70)
        );
        // Each ledger key sits on its own event: the same key again is refused by the
        // database for the whole unit, whichever stream it is on.
        let again = credit_both(&db, "c-1").await.unwrap_err();
        assert!(
            matches!(again, UnitError::DuplicateLedgerRef(_)),
            "{again:?}"
        );
        assert_eq!(
            (pending(&db, "w-1").await, pending(&db, "w-2").await),
            (200, 70)
        );
        assert_eq!(db.store.head_position().await.unwrap(), 5);
    }
);

both_backends!(
    a_refused_decision_leaves_nothing_of_the_unit,
    |db: TestDb| async move {
        let _bus = open_two(&db).await;
        let refused = run_unit(&db.store, &meta(), |mut unit| async move {
            let mut w1 = unit.load::<Wallet, WalletError>("w-1").await?;
            unit.decide(&mut w1, "w-1", credit("c-1", 100))?;
            let mut w2 = unit.load::<Wallet, WalletError>("w-2").await?;
            // w-2 has nothing pending to release.
            unit.decide(
                &mut w2,
                "w-2",
                cmd(json!({"type": "ReleasePending", "ref_type": "COMMISSION",
                    "ref_id": "c-1", "amount_minor": 100})),
            )?;
            Ok(((), unit))
        })
        .await
        .unwrap_err();
        assert!(
            matches!(
                refused,
                UnitError::Refused(WalletError::InsufficientBalance { .. })
            ),
            "{refused:?}"
        );
        assert_eq!(pending(&db, "w-1").await, 0);
        assert_eq!(db.store.head_position().await.unwrap(), 2);
        // A unit that decides nothing writes nothing and takes no position.
        let empty = run_unit(&db.store, &meta(), |unit| async move {
            Ok::<_, UnitError<WalletError>>((7, unit))
        })
        .await
        .unwrap();
        assert_eq!((empty.value, empty.position, empty.events.len()), (7, 0, 0));
    }
);

both_backends!(
    a_conflicting_writer_makes_the_unit_run_again_on_fresh_state,
    |db: TestDb| async move {
        let bus = open_two(&db).await;
        let tries = Arc::new(AtomicU32::new(0));
        let done = run_unit(&db.store, &meta(), |mut unit| {
            let (bus, tries) = (bus.clone(), tries.clone());
            async move {
                let mut w1 = unit.load::<Wallet, WalletError>("w-1").await?;
                let mut w2 = unit.load::<Wallet, WalletError>("w-2").await?;
                if tries.fetch_add(1, Ordering::SeqCst) == 0 {
                    // Another writer moves w-2 after this unit loaded it.
                    run(
                        &bus,
                        "w-2",
                        json!({"type": "CreditPending", "ref_type": "BONUS",
                        "ref_id": "b-1", "amount_minor": 5}),
                    )
                    .await;
                }
                unit.decide(&mut w1, "w-1", credit("c-1", 100))?;
                unit.decide(&mut w2, "w-2", credit("c-2", 70))?;
                Ok((w2.state.balances.pending_minor, unit))
            }
        })
        .await
        .unwrap();
        assert_eq!(done.attempts, 2);
        // The second attempt decided on w-2 with the other writer's credit.
        assert_eq!(done.value, 75);
        assert_eq!(
            (pending(&db, "w-1").await, pending(&db, "w-2").await),
            (100, 75)
        );
        // Nothing of the first attempt was written: two opens, the bonus, the unit.
        assert_eq!(db.store.head_position().await.unwrap(), 5);
    }
);
