//! The console's search, wallet, stream and event pages over HTTP (issue 20): the
//! buckets on the page are the API's, every "why" link lands on the event that moved
//! the figure, as-of an earlier position shows the older balance, the stream page
//! shows its chain verified, and the search sends each kind to its page or names the
//! field it cannot read.

use crate::common::app::{spawn_app, App};
use crate::common::console::ConsoleClient;
use crate::common::TestDb;
use factledger::infra::auth::Role;
use serde_json::{json, Value};

const WALLET: &str = "user-7:IDR";
const WALLET_ENC: &str = "user-7%3AIDR";

/// The value of the first `attr="…"` after `anchor` in `html`.
fn attr_after(html: &str, anchor: &str, attr: &str) -> Option<String> {
    let at = html.find(anchor)? + anchor.len();
    let key = format!("{attr}=\"");
    let from = at + html[at..].find(&key)? + key.len();
    Some(html[from..].split('"').next()?.to_owned())
}

fn minor(html: &str, id: &str) -> i64 {
    attr_after(html, &format!("id=\"{id}\""), "data-minor")
        .unwrap_or_else(|| panic!("no data-minor after #{id} in {html}"))
        .parse()
        .unwrap()
}

/// Post a wallet command as admin; the event it appended (position, sequence, body).
async fn command(app: &App, body: Value) -> Value {
    let (status, answer) = app
        .post(&format!("/v1/wallets/{WALLET}/commands"), body)
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

fn moving(kind: &str, ref_id: &str, amount: i64) -> Value {
    json!({"type": kind, "ref_type": "COMMISSION", "ref_id": ref_id, "amount_minor": amount})
}

both_backends!(
    the_wallet_page_shows_the_apis_buckets_each_explained_by_its_event_and_as_of_an_earlier_position,
    |db: TestDb| async move {
        let app = spawn_app(&db).role_keys(&[Role::Operator, Role::Auditor]).spawn().await;
        command(&app, json!({"type": "Open", "user_id": "user-7", "currency": "IDR"})).await;
        let credit = command(&app, moving("CreditPending", "c-1", 10_000)).await;
        let release = command(&app, moving("ReleasePending", "c-1", 7_000)).await;
        let credit2 = command(&app, moving("CreditPending", "c-2", 500)).await;
        let last = credit2["position"].as_i64().unwrap();
        let (status, view) = app.get(&format!("/v1/wallets/{WALLET}?min_position={last}")).await;
        assert_eq!(status, 200, "{view}");
        // The ledger projection has applied it too (the same wait).
        let (status, _) = app.get(&format!("/v1/wallets/{WALLET}/ledger?min_position={last}")).await;
        assert_eq!(status, 200);

        // An auditor sees the page: the buckets are the API's.
        let au = ConsoleClient::sign_in(&app.base, &app.auditor).await;
        let page = au.get(&format!("/console/wallets/{WALLET_ENC}")).await;
        assert_eq!(page.status, 200, "{}", page.html);
        for b in ["pending", "available", "frozen", "risk_hold"] {
            assert_eq!(minor(&page.html, &format!("bucket-{b}")), view[format!("{b}_minor")].as_i64().unwrap(), "{b}");
        }
        assert_eq!(minor(&page.html, "bucket-available"), 7_000);
        assert_eq!(minor(&page.html, "bucket-pending"), 3_500);
        assert!(!page.html.contains("id=\"as-of\""), "no as-of without one asked");
        // Every ledger line is on the page with its position and its "why".
        for e in [&credit, &release, &credit2] {
            let pos = e["position"].as_i64().unwrap();
            assert!(page.html.contains(&format!("data-position=\"{pos}\"")), "ledger line at {pos}");
        }

        // The ledger pages: two lines, then the third, and back.
        let first = au.get(&format!("/console/wallets/{WALLET_ENC}?limit=2")).await;
        let next = attr_after(&first.html, "id=\"next-page\"", "href").unwrap().replace("&amp;", "&");
        assert!(first.html.contains("data-sequence=\"3\"") && !first.html.contains("data-sequence=\"4\""));
        let second = au.get(&next).await;
        assert!(second.html.contains("data-sequence=\"4\"") && !second.html.contains("data-sequence=\"2\""));
        let prev = attr_after(&second.html, "id=\"prev-page\"", "href").unwrap().replace("&amp;", "&");
        let back = au.get(&prev).await;
        assert!(
            back.html.contains("data-sequence=\"2\"") && back.html.contains("data-sequence=\"3\"")
                && !back.html.contains("data-sequence=\"4\""),
            "{prev}"
        );
        assert!(!back.html.contains("id=\"prev-page\""), "no page before the first");
        // "why" of available: the release that made it, with before/after.
        let why = attr_after(&page.html, "id=\"why-available\"", "href").unwrap();
        let seq = release["events"][0]["sequence"].as_i64().unwrap();
        assert_eq!(why, format!("/console/streams/wallet/{WALLET_ENC}/events/{seq}"));
        let event = au.get(&why).await;
        assert_eq!(event.status, 200, "{}", event.html);
        let pos = release["position"].as_i64().unwrap();
        assert_eq!(attr_after(&event.html, "id=\"event\"", "data-position").unwrap(), pos.to_string());
        assert!(event.html.contains("PendingReleased"), "{}", event.html);
        assert!(event.html.contains("id=\"prev-event\"") && event.html.contains("id=\"next-event\""));
        assert_eq!(minor(&event.html, "before-available"), 0);
        assert_eq!(minor(&event.html, "after-available"), 7_000);
        assert_eq!(minor(&event.html, "diff-available"), 7_000);
        assert_eq!(minor(&event.html, "diff-pending"), -7_000);
        // Its metadata: the actor and the correlation id, linked to its search.
        let correlation = release["events"][0]["metadata"]["correlation_id"].as_str().unwrap().to_owned();
        assert!(event.html.contains(&format!("/console/events?correlation_id={correlation}")), "{}", event.html);
        assert!(event.html.contains(&format!("key:{}", app.admin_key_id)), "actor shown: {}", event.html);
        // "why" of pending: the last credit; frozen never moved: the opening event.
        let why = attr_after(&page.html, "id=\"why-pending\"", "href").unwrap();
        assert!(why.ends_with(&format!("/events/{}", credit2["events"][0]["sequence"])), "{why}");
        let why = attr_after(&page.html, "id=\"why-frozen\"", "href").unwrap();
        assert!(why.ends_with("/events/1"), "{why}");
        // A position links to its event page through its stream.
        let newest = au.get(&format!("/console/streams/wallet/{WALLET_ENC}/events/4")).await;
        assert!(!newest.html.contains("id=\"next-event\""), "no next after the newest event");
        assert_eq!(au.get(&format!("/console/streams/wallet/{WALLET_ENC}/events/5")).await.status, 404);
        let p = au.get(&format!("/console/events/{pos}")).await;
        assert_eq!((p.status, p.location.as_deref()), (303, Some(format!("/console/streams/wallet/{WALLET_ENC}/events/{seq}").as_str())));
        let p = au.get("/console/events/0").await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("position"), "{}", p.html);
        let p = au.get("/console/events/999999999").await;
        assert_eq!(p.status, 404, "{}", p.html);
        // The event's schema versions: written and served.
        assert!(event.html.contains("stored and served as v"), "{}", event.html);

        // As of the first credit: the older balance, and the page says so.
        let at = credit["position"].as_i64().unwrap();
        let old = au.get(&format!("/console/wallets/{WALLET_ENC}?as_of_position={at}")).await;
        assert_eq!(old.status, 200, "{}", old.html);
        assert_eq!(attr_after(&old.html, "id=\"as-of\"", "data-position").unwrap(), at.to_string());
        assert!(old.html.contains(&format!("As of position {at}")), "{}", old.html);
        assert_eq!(minor(&old.html, "bucket-pending"), 10_000);
        assert_eq!(minor(&old.html, "bucket-available"), 0);
        let why = attr_after(&old.html, "id=\"why-pending\"", "href").unwrap();
        assert!(why.ends_with(&format!("/events/{}", credit["events"][0]["sequence"])), "{why}");
        // The slider spans the stream's positions; the time picker reads datetime-local.
        assert!(old.html.contains("data-autosubmit"));
        assert!(old.html.contains("name=\"as_of_position\""));
        let future = au.get(&format!("/console/wallets/{WALLET_ENC}?as_of=2999-01-01T00:00")).await;
        assert_eq!(future.status, 200, "{}", future.html);
        assert_eq!(minor(&future.html, "bucket-available"), 7_000);
        let past = au.get(&format!("/console/wallets/{WALLET_ENC}?as_of=2000-01-01T00:00:00Z")).await;
        assert_eq!(past.status, 200, "{}", past.html);
        assert_eq!(minor(&past.html, "bucket-pending"), 0);
        let bad = au.get(&format!("/console/wallets/{WALLET_ENC}?as_of=yesterday")).await;
        assert_eq!(bad.status, 422, "{}", bad.html);
        assert!(bad.html.contains("as_of"), "{}", bad.html);
        let bad = au.get(&format!("/console/wallets/{WALLET_ENC}?as_of_position=-3")).await;
        assert_eq!(bad.status, 422);
        assert!(bad.html.contains("as_of_position"), "{}", bad.html);
        // An unknown wallet: the API's 404.
        assert_eq!(au.get("/console/wallets/nobody%3AIDR").await.status, 404);
    }
);

both_backends!(
    the_stream_page_shows_the_timeline_and_its_verified_chain_and_the_search_sends_each_kind_to_its_page,
    |db: TestDb| async move {
        let app = spawn_app(&db).role_keys(&[Role::Operator, Role::Auditor]).spawn().await;
        command(&app, json!({"type": "Open", "user_id": "user-7", "currency": "IDR"})).await;
        let credit = command(&app, moving("CreditPending", "c-1", 2_500)).await;
        let last = credit["position"].as_i64().unwrap();
        let (status, _) = app.get(&format!("/v1/wallets/{WALLET}?min_position={last}")).await;
        assert_eq!(status, 200);
        let op = ConsoleClient::sign_in(&app.base, &app.operator).await;

        // The stream: both events, anchored by sequence, with versions; the chain ok.
        let s = op.get(&format!("/console/streams/wallet/{WALLET_ENC}")).await;
        assert_eq!(s.status, 200, "{}", s.html);
        assert_eq!(attr_after(&s.html, "id=\"chain-status\"", "data-ok").unwrap(), "true", "{}", s.html);
        assert!(s.html.contains("id=\"seq-1\"") && s.html.contains("id=\"seq-2\""), "{}", s.html);
        assert!(s.html.contains(&format!("data-position=\"{last}\"")));
        assert!(s.html.contains("WalletOpened") && s.html.contains("PendingCredited"));
        assert!(s.html.contains("data-version=\"2\""), "movement events are served as v2: {}", s.html);
        assert!(s.html.contains("upcast"), "{}", s.html);
        // Paged: from=2 starts at the credit.
        let s2 = op.get(&format!("/console/streams/wallet/{WALLET_ENC}?from=2")).await;
        assert!(!s2.html.contains("id=\"seq-1\"") && s2.html.contains("id=\"seq-2\""));
        let bad = op.get(&format!("/console/streams/wallet/{WALLET_ENC}?from=zero")).await;
        assert_eq!(bad.status, 422);
        assert!(bad.html.contains("from"), "{}", bad.html);
        assert_eq!(op.get("/console/streams/wallet/nobody").await.status, 404);

        // The home page: the form, what each page is for, the sign-out form's token.
        let home = op.get("/console").await;
        assert_eq!(home.status, 200);
        assert!(home.html.contains("id=\"search\"") && home.html.contains("id=\"page-guide\""));
        assert!(home.html.contains("action=\"/console/sign-out\"") && home.html.contains(&op.csrf));

        // Each kind goes to its page.
        let go = |kind: &'static str, q: String| {
            let op = &op;
            async move { op.get(&format!("/console?kind={kind}&q={}", urlencode(&q))).await }
        };
        let p = go("wallet", WALLET.into()).await;
        assert_eq!((p.status, p.location.as_deref()), (303, Some(format!("/console/wallets/{WALLET_ENC}").as_str())), "{}", p.html);
        let p = go("stream", format!("wallet/{WALLET}")).await;
        assert_eq!(p.location.as_deref(), Some(format!("/console/streams/wallet/{WALLET_ENC}").as_str()));
        let p = go("user", "user-7".into()).await;
        assert_eq!(p.location.as_deref(), Some("/console/users/user-7"));
        let p = go("station_month", "1001/202501".into()).await;
        assert_eq!(p.location.as_deref(), Some("/console/bills/1001/202501"));
        let correlation = credit["events"][0]["metadata"]["correlation_id"].as_str().unwrap().to_owned();
        let p = go("correlation", correlation.clone()).await;
        assert_eq!(p.status, 303);
        let listing = op.get(p.location.as_deref().unwrap()).await;
        assert_eq!(listing.status, 200, "{}", listing.html);
        assert!(listing.html.contains(&format!("data-position=\"{last}\"")), "{}", listing.html);
        assert!(listing.html.contains(&format!("/console/streams/wallet/{WALLET_ENC}/events/2")));
        // The user's page finds the wallet by the {user}:{CURRENCY} convention.
        let user = op.get("/console/users/user-7").await;
        assert_eq!(user.status, 200, "{}", user.html);
        assert!(user.html.contains(&format!("data-wallet=\"{WALLET}\"")), "{}", user.html);
        assert!(user.html.contains("/console/withdrawals?user_id=user-7"));

        // Bad input: the form again, naming the field.
        let p = go("wallet", "".into()).await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("data-field=\"q\"") && p.html.contains("id=\"search\""), "{}", p.html);
        let p = go("station_month", "1001/202513".into()).await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("data-field=\"month\""), "{}", p.html);
        let p = go("station_month", "1001".into()).await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("data-field=\"q\""), "{}", p.html);
        let p = go("wallet", "nobody:IDR".into()).await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("data-field=\"q\""), "{}", p.html);
        let p = go("order", "SHOPEE".into()).await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("data-field=\"q\""), "{}", p.html);
        let p = go("order", "SHOPEE/no-such-order".into()).await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("data-field=\"platform_order_id\""), "{}", p.html);
        let p = go("order", "MARS/1".into()).await;
        assert!(p.html.contains("data-field=\"platform\""), "{}", p.html);
        let p = go("withdrawal", "wd-none".into()).await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("data-field=\"q\""), "{}", p.html);
        let p = go("galaxy", "x".into()).await;
        assert!(p.html.contains("data-field=\"kind\""), "{}", p.html);
        let p = op.get("/console/events?correlation_id=").await;
        assert_eq!(p.status, 422);
        assert!(p.html.contains("data-field=\"correlation_id\""), "{}", p.html);
    }
);

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
