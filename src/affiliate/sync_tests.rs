//! The sync's windows, keys, lookback arithmetic and configuration.

use super::*;

#[test]
fn the_business_key_names_platform_country_and_task() {
    let pair = SyncPair {
        platform: Platform::TikTok,
        country: CountryCode::parse("ID").unwrap(),
    };
    assert_eq!(
        business_key(pair, SyncTask::Lookback),
        "platform_sync:TIKTOK:ID:lookback"
    );
    assert!(PLATFORM_SYNC
        .code(&business_key(pair, SyncTask::Incremental))
        .starts_with("PSYNC:"));
    assert!(crate::infra::jobs::check_kinds([&PLATFORM_SYNC]).is_ok());
}

#[test]
fn the_incremental_window_starts_an_overlap_before_the_watermark() {
    let now = 1_000 * DAY_MS;
    assert_eq!(
        incremental_window(Some(now - HOUR_MS), now),
        (now - HOUR_MS - OVERLAP_MS, now - SAFETY_LAG_MS)
    );
    assert_eq!(
        incremental_window(None, now),
        (now - SAFETY_LAG_MS - FIRST_PULL_MS, now - SAFETY_LAG_MS)
    );
}

/// R-COM-4 by simulation: firings every 15 minutes for three days; for late orders
/// of every age up to 120 days arriving at many moments of the second day, some
/// lookback slice swept after the arrival covers the order's update time, within
/// 24 hours of the arrival.
#[test]
fn the_lookback_covers_the_last_120_days_within_24_hours() {
    let start = 1_000 * DAY_MS;
    let mut cursor = None;
    let mut slices = Vec::new();
    for i in 0..(3 * DAY_MS / SYNC_INTERVAL_MS) {
        let now = start + i * SYNC_INTERVAL_MS;
        let (from, to) = lookback_slice(cursor, now);
        assert!(from < to && to - from <= LOOKBACK_SLICE_MS);
        slices.push((now, from, to));
        cursor = Some(from);
    }
    let mut worst = 0;
    // Arrivals every 7 minutes of day 2, ages every 5 hours up to 120 days (and the
    // edges): about 120k cases, each answered by a scan of 288 slices.
    for arrival in (start + DAY_MS..start + 2 * DAY_MS).step_by(7 * MINUTE_MS as usize) {
        let ages = (0..=LATE_ORDER_AGE_MAX_MS)
            .step_by(5 * HOUR_MS as usize)
            .chain([SAFETY_LAG_MS, LATE_ORDER_AGE_MAX_MS]);
        for age in ages {
            let updated = arrival - age;
            let caught = slices
                .iter()
                .find(|(now, from, to)| *now >= arrival && (*from..*to).contains(&updated))
                .map(|(now, _, _)| now - arrival)
                .unwrap_or_else(|| panic!("age {age} ms at {arrival} never swept"));
            worst = worst.max(caught);
        }
    }
    assert!(worst <= LOOKBACK_LATENCY_MAX_MS, "worst latency {worst} ms");
    // The bound is not vacuous: some order waits more than one cycle.
    assert!(worst > LOOKBACK_CYCLE_MS, "worst latency {worst} ms");
}

#[test]
fn the_lookback_cursor_wraps_and_survives_a_clock_step_back() {
    let now = 1_000 * DAY_MS;
    let top = now - SAFETY_LAG_MS;
    assert_eq!(lookback_slice(None, now), (top - LOOKBACK_SLICE_MS, top));
    let bottom = top - LOOKBACK_SPAN_MS;
    assert_eq!(
        lookback_slice(Some(bottom + DAY_MS), now),
        (bottom, bottom + DAY_MS)
    );
    assert_eq!(lookback_slice(Some(bottom), now).1, top);
    assert_eq!(lookback_slice(Some(now + DAY_MS), now).1, top);
}

#[test]
fn the_config_takes_countries_for_every_platform_or_single_pairs() {
    let env = |k: &str| match k {
        "FACTLEDGER_PLATFORM_TIKTOK_URL" => Some("http://127.0.0.1:9100/tiktok".into()),
        "FACTLEDGER_PLATFORM_SHOPEE_URL" => Some("http://127.0.0.1:9100/shopee".into()),
        "FACTLEDGER_PLATFORM_TIKTOK_APP_KEY" => Some("k".into()),
        "FACTLEDGER_PLATFORM_TIKTOK_APP_SECRET" => Some("s".into()),
        "FACTLEDGER_PLATFORM_TIKTOK_ACCESS_TOKEN_ID" => Some("t".into()),
        "FACTLEDGER_PLATFORM_SHOPEE_APP_ID_ID" | "FACTLEDGER_PLATFORM_SHOPEE_APP_ID_MY" => {
            Some("123".into())
        }
        "FACTLEDGER_PLATFORM_SHOPEE_APP_SECRET_ID" | "FACTLEDGER_PLATFORM_SHOPEE_APP_SECRET_MY" => {
            Some("s".into())
        }
        _ => None,
    };
    let c = SyncConfig::parse("ID, SHOPEE:MY", env).unwrap();
    let names: Vec<String> = c
        .pairs
        .iter()
        .map(|p| format!("{}:{}", p.platform, p.country))
        .collect();
    assert_eq!(names, ["TIKTOK:ID", "SHOPEE:ID", "SHOPEE:MY"]);
    assert!(SyncConfig::parse("", env).unwrap().pairs.is_empty());
    for bad in ["LAZADA:ID", "id", "EBAY:ID", "TIKTOK:IDN"] {
        assert!(SyncConfig::parse(bad, env).is_err(), "{bad}");
    }
    assert!(SyncConfig::parse("ID", |_| None).is_err());
    // A synced platform without its credentials is refused, naming the variable.
    let e = SyncConfig::parse("TIKTOK:MY", env).unwrap_err().to_string();
    assert!(
        e.contains("FACTLEDGER_PLATFORM_TIKTOK_ACCESS_TOKEN_MY"),
        "{e}"
    );
    assert!(matches!(
        c.protocols.get(&Platform::TikTok),
        Some(Protocol::TikTok(_))
    ));
}
