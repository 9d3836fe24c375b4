//! The simulator's own tests: paging, faults, tokens, loopback.

use super::*;

fn q(from: i64, to: i64, token: Option<String>, size: usize) -> OrdersQuery {
    OrdersQuery {
        country: Some("ID".into()),
        updated_from: Some(from),
        updated_to: Some(to),
        page_token: token,
        page_size: Some(size),
        by_create_time: false,
    }
}

fn ids(page: &OrdersPage) -> Vec<String> {
    page.orders
        .iter()
        .map(|o| o["order_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Every page of a window, following tokens (at most 100 pages).
fn all(sim: &Sim, from: i64, to: i64, size: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut token = None;
    for _ in 0..100 {
        let page = sim.orders("tiktok", &q(from, to, token, size)).1.unwrap();
        out.extend(ids(&page));
        token = page.next_page_token;
        if token.is_none() {
            return out;
        }
    }
    panic!("more than 100 pages");
}

#[test]
fn the_same_seed_gives_the_same_orders() {
    let a = generate("tiktok", "ID", 7, 20, 0, 1_000_000);
    assert_eq!(a, generate("tiktok", "ID", 7, 20, 0, 1_000_000));
    assert_ne!(a, generate("tiktok", "ID", 8, 20, 0, 1_000_000));
    assert!(a
        .iter()
        .all(|o| (0..1_000_000).contains(&o.update_time_ms) && o.gmv_minor > 0));
}

#[test]
fn pages_follow_update_time_and_cover_the_window_exactly_once() {
    let sim = Sim::new();
    let orders = sim.seed("tiktok", "ID", 1, 23, 1_000, 100_000).unwrap();
    sim.seed("tiktok", "MY", 1, 5, 1_000, 100_000).unwrap();
    let got = all(&sim, 1_000, 100_000, 5);
    let mut expected: Vec<&SimOrder> = orders.iter().collect();
    expected.sort_by_key(|o| (o.update_time_ms, o.order_id.clone()));
    let expected: Vec<String> = expected.iter().map(|o| o.order_id.clone()).collect();
    assert_eq!(got, expected);
    assert_eq!(sim.requests().len(), 5);
    // The window is half-open.
    let first = orders.iter().map(|o| o.update_time_ms).min().unwrap();
    assert!(!all(&sim, first + 1, 100_000, 100).contains(&expected[0]));
}

#[test]
fn a_duplicate_boundary_repeats_the_last_order_of_each_page() {
    let sim = Sim::new();
    sim.seed("tiktok", "ID", 2, 10, 0, 10_000).unwrap();
    sim.set_duplicate_page_boundary(true);
    let got = all(&sim, 0, 10_000, 4);
    let mut unique = got.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 10);
    assert!(got.len() > 10, "{got:?}");
}

#[test]
fn faults_hit_the_nth_request_from_now_once() {
    let sim = Sim::new();
    sim.seed("tiktok", "ID", 3, 3, 0, 10_000).unwrap();
    sim.orders("tiktok", &q(0, 10_000, None, 10)).1.unwrap();
    sim.fault(2, Fault::Status { status: 503 });
    assert!(sim.orders("tiktok", &q(0, 10_000, None, 10)).1.is_ok());
    let (f, r) = sim.orders("tiktok", &q(0, 10_000, None, 10));
    assert_eq!(f, Some(Fault::Status { status: 503 }));
    assert_eq!(r.unwrap_err().0, 503);
    assert!(sim.orders("tiktok", &q(0, 10_000, None, 10)).1.is_ok());
}

#[test]
fn bad_queries_and_tokens_are_refused() {
    let sim = Sim::new();
    assert_eq!(
        sim.orders("tiktok", &q(0, 1, Some("zz".into()), 10))
            .1
            .unwrap_err()
            .0,
        400
    );
    assert_eq!(
        sim.orders("tiktok", &q(0, 1, None, 101)).1.unwrap_err().0,
        400
    );
    assert_eq!(sim.orders("ebay", &q(0, 1, None, 10)).1.unwrap_err().0, 404);
}

#[tokio::test]
async fn it_serves_over_loopback_and_scripts_faults_over_http() {
    assert!(matches!(
        spawn("0.0.0.0:0".parse().unwrap(), Sim::new()).await,
        Err(SimError::NotLoopback(_))
    ));
    let running = spawn("127.0.0.1:0".parse().unwrap(), Sim::new())
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let control = |path: &str| format!("http://{}/control/{path}", running.addr);
    let order = SimOrder {
        order_id: "A1".into(),
        region: "ID".into(),
        order_status: "COMPLETED".into(),
        currency: "IDR".into(),
        gmv_minor: 100_000,
        commission_minor: 5_000,
        create_time_ms: 1_000,
        update_time_ms: 2_000,
        sub_id: None,
    };
    let r = http
        .post(control("orders"))
        .json(&json!({"platform": "lazada", "orders": [order]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .post(control("faults"))
        .json(&json!({"faults": [{"nth": 1, "kind": "status", "status": 502}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let url = format!(
        "{}/orders?country=ID&updated_from=0&updated_to=5000",
        running.base_url("LAZADA")
    );
    assert_eq!(http.get(&url).send().await.unwrap().status(), 502);
    let page: OrdersPage = http.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(page.orders, vec![serde_json::to_value(&order).unwrap()]);
    assert_eq!(page.next_page_token, None);
    let log: Vec<RequestLog> = http
        .get(control("requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        log.iter().map(|l| l.status).collect::<Vec<_>>(),
        vec![502, 200]
    );
}
