//! Step 2: fact rows read back → the decision's input types ([`BillFacts`] parts). A
//! row that does not hold what its table promises is an error, never a default; a
//! missing optional row (`Option<&MemRow>`) has a documented meaning per reader.
//!
//! [`BillFacts`]: crate::bill::BillFacts

use super::cells::parse_code;
use crate::bill::tables::{LINES, OPENING_DEDUCTIONS, OPENING_PAID, PARTNER_REPUSHES};
use crate::bill::{
    parse_month, AccountRoute, BillLine, BillLock, CustomerAccount, Diff, LineKind, LineStatus,
    LockStatus, OpeningDeduction, OpeningPaidBalance, OrderStatus, PartnerAccount, PartnerBill,
    PartnerBillDeduction, PartnerProfile, PaymentCycle, PaymentOrder, PaymentResult, RecordWay,
    RentPayMethod, ResultSource, ResultStatus, ResultType, ShareRule, SmallBill, SmallBillRent,
    StationFacts, UnqualifiedConclusion, YearMonth,
};
use crate::table::{Cell, MemRow, TableDef};
use chrono::{DateTime, Utc};
use factledger_aggregates::bill::{
    AccountRouteCode, LineKindCode, LineStatusCode, OrderStatusCode, RecordWayCode,
    ResultSourceCode, ResultStatusCode, ResultTypeCode,
};

fn cell<'a>(row: &'a MemRow, column: &str) -> Result<&'a Cell, String> {
    row.get(column)
        .ok_or_else(|| format!("column {column} missing"))
}

pub fn int_of(row: &MemRow, column: &str) -> Result<i64, String> {
    match cell(row, column)? {
        Cell::Int(i) => Ok(*i),
        other => Err(format!("{column}: not an integer: {other:?}")),
    }
}

pub fn opt_int_of(row: &MemRow, column: &str) -> Result<Option<i64>, String> {
    match cell(row, column)? {
        Cell::Null => Ok(None),
        Cell::Int(i) => Ok(Some(*i)),
        other => Err(format!("{column}: not an integer: {other:?}")),
    }
}

pub fn text_of<'a>(row: &'a MemRow, column: &str) -> Result<&'a str, String> {
    match cell(row, column)? {
        Cell::Text(s) => Ok(s),
        other => Err(format!("{column}: not text: {other:?}")),
    }
}

pub fn opt_text_of<'a>(row: &'a MemRow, column: &str) -> Result<Option<&'a str>, String> {
    match cell(row, column)? {
        Cell::Null => Ok(None),
        Cell::Text(s) => Ok(Some(s)),
        other => Err(format!("{column}: not text: {other:?}")),
    }
}

fn bool_of(row: &MemRow, column: &str) -> Result<bool, String> {
    Ok(int_of(row, column)? != 0)
}

pub fn month_of(row: &MemRow, column: &str) -> Result<YearMonth, String> {
    parse_month(text_of(row, column)?).map_err(|e| e.to_string())
}

fn opt_month_of(row: &MemRow, column: &str) -> Result<Option<YearMonth>, String> {
    opt_text_of(row, column)?
        .map(|s| parse_month(s).map_err(|e| e.to_string()))
        .transpose()
}

pub(super) fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("time {s}: {e}"))
}

fn time_of(row: &MemRow, column: &str) -> Result<DateTime<Utc>, String> {
    parse_time(text_of(row, column)?)
}

fn opt_time_of(row: &MemRow, column: &str) -> Result<Option<DateTime<Utc>>, String> {
    opt_text_of(row, column)?.map(parse_time).transpose()
}

pub fn small_bill_of(row: &MemRow) -> Result<SmallBill, String> {
    Ok(SmallBill {
        id: int_of(row, "bill_id")?,
        account_id: int_of(row, "account_id")?,
        rent_minor: int_of(row, "rent")?,
    })
}

pub fn small_bill_rent_of(row: &MemRow) -> Result<SmallBillRent, String> {
    Ok(SmallBillRent {
        account_id: int_of(row, "account_id")?,
        month: month_of(row, "bill_yearmonth")?,
        rent_minor: int_of(row, "rent")?,
    })
}

pub fn customer_account_of(row: &MemRow) -> Result<CustomerAccount, String> {
    Ok(CustomerAccount {
        id: int_of(row, "account_id")?,
        income_start_month: month_of(row, "income_start_month")?,
        current_payable_cutoff_month: opt_month_of(row, "current_payable_cutoff_month")?,
    })
}

/// A partner bill row, with its last re-push (a row of `bill_fact_partner_repushes`)
/// if there was one: a re-push marks it waiting for re-verification
/// (`last_unqualified_order_id = 0`, R-BILL-5).
pub fn partner_bill_of(row: &MemRow, repush: Option<&MemRow>) -> Result<PartnerBill, String> {
    let repushed_at = repush.map(|r| time_of(r, "repushed_at")).transpose()?;
    Ok(PartnerBill {
        id: int_of(row, "partner_bill_id")?,
        partner_account_id: int_of(row, "partner_account_id")?,
        pre_rent_minor: opt_int_of(row, "pre_rent")?,
        deduction_minor: int_of(row, "deduction")?,
        last_unqualified_order_id: repushed_at.map(|_| 0),
        last_unqualified_at: repushed_at,
        repushed_at,
    })
}

pub fn partner_bill_deduction_of(row: &MemRow) -> Result<PartnerBillDeduction, String> {
    Ok(PartnerBillDeduction {
        partner_account_id: int_of(row, "partner_account_id")?,
        month: month_of(row, "bill_yearmonth")?,
        deduction_minor: int_of(row, "deduction")?,
    })
}

pub fn diff_of(row: &MemRow) -> Result<Diff, String> {
    Ok(Diff {
        id: int_of(row, "diff_id")?,
        partner_bill_id: opt_int_of(row, "partner_bill_id")?,
    })
}

pub fn partner_account_of(row: &MemRow) -> Result<PartnerAccount, String> {
    Ok(PartnerAccount {
        id: int_of(row, "partner_account_id")?,
        partner_org_id: int_of(row, "partner_org_id")?,
        platform_station_id: opt_int_of(row, "platform_station_id")?,
    })
}

/// No row: the profile was never recorded (an error finding once the check needs it).
pub fn partner_profile_of(row: Option<&MemRow>) -> Result<PartnerProfile, String> {
    let Some(row) = row else {
        return Ok(PartnerProfile::Unrecorded);
    };
    if !bool_of(row, "configured")? {
        return Ok(PartnerProfile::NotConfigured);
    }
    let payment_cycle = match text_of(row, "payment_cycle")? {
        "MONTH_PAY_PREVIOUS_MONTH" => PaymentCycle::MonthPayPreviousMonth,
        "MONTHLY" => PaymentCycle::Monthly,
        "QUARTERLY" => PaymentCycle::Quarterly,
        "HALF_YEARLY" => PaymentCycle::HalfYearly,
        "RECORD_WAY_COMPOSITE" => PaymentCycle::RecordWayComposite,
        "SHARE_RULE_COMPOSITE" => PaymentCycle::ShareRuleComposite,
        other => PaymentCycle::Illegal(other.to_owned()),
    };
    Ok(PartnerProfile::Configured {
        payment_cycle,
        config_version: int_of(row, "config_version")?,
    })
}

/// No row: nothing recorded for the station (composite cycles then cannot compute).
pub fn station_of(row: Option<&MemRow>) -> Result<StationFacts, String> {
    let Some(row) = row else {
        return Ok(StationFacts::default());
    };
    let record_way = opt_text_of(row, "record_way")?
        .map(parse_code::<RecordWayCode>)
        .transpose()?
        .map(|c| match c {
            RecordWayCode::NaturalPerson => RecordWay::NaturalPerson,
            RecordWayCode::NonNaturalPerson => RecordWay::NonNaturalPerson,
        });
    let share_rule = if bool_of(row, "has_share_rule")? {
        let method = opt_text_of(row, "rent_pay_method")?.unwrap_or_default();
        Some(ShareRule {
            rent_pay_method: match method {
                "MONTHLY" => RentPayMethod::Monthly,
                "QUARTERLY" => RentPayMethod::Quarterly,
                "HALF_YEARLY" => RentPayMethod::HalfYearly,
                other => RentPayMethod::Other(other.to_owned()),
            },
            change_type: opt_text_of(row, "change_type")?.map(str::to_owned),
            latest_generated_bill_month: opt_month_of(row, "latest_generated_bill_month")?,
        })
    } else {
        None
    };
    Ok(StationFacts {
        record_way,
        share_rule,
    })
}

/// No row: the default route (seed §4.5: the platform route is an explicit switch).
pub fn account_route_of(row: Option<&MemRow>) -> Result<AccountRoute, String> {
    let Some(row) = row else {
        return Ok(AccountRoute::Default);
    };
    Ok(
        match parse_code::<AccountRouteCode>(text_of(row, "value")?)? {
            AccountRouteCode::Default => AccountRoute::Default,
            AccountRouteCode::Platform => AccountRoute::Platform,
        },
    )
}

pub fn opening_paid_of(row: &MemRow) -> Result<OpeningPaidBalance, String> {
    Ok(OpeningPaidBalance {
        id: int_of(row, "opening_id")?,
        small_station_id: int_of(row, "small_station_id")?,
        platform_station_id: opt_int_of(row, "platform_station_id")?,
        partner_org_id: int_of(row, "partner_org_id")?,
        opening_paid_minor: int_of(row, "opening_paid")?,
        updated_at: time_of(row, "updated_at")?,
    })
}

pub fn opening_deduction_of(row: &MemRow) -> Result<OpeningDeduction, String> {
    Ok(OpeningDeduction {
        id: int_of(row, "opening_id")?,
        partner_account_id: int_of(row, "partner_account_id")?,
        effective: bool_of(row, "effective")?,
        amount_minor: int_of(row, "amount")?,
        updated_at: time_of(row, "updated_at")?,
    })
}

pub fn order_of(row: &MemRow) -> Result<PaymentOrder, String> {
    let status = match parse_code::<OrderStatusCode>(text_of(row, "status")?)? {
        OrderStatusCode::Draft => OrderStatus::Draft,
        OrderStatusCode::InReview => OrderStatus::InReview,
        OrderStatusCode::ReviewRejected => OrderStatus::ReviewRejected,
        OrderStatusCode::WaitPay => OrderStatus::WaitPay,
        OrderStatusCode::Paid => OrderStatus::Paid,
        OrderStatusCode::NoNeedPay => OrderStatus::NoNeedPay,
        OrderStatusCode::Void => OrderStatus::Void,
    };
    Ok(PaymentOrder {
        id: int_of(row, "order_id")?,
        status,
        published: bool_of(row, "published")?,
        publish_version: int_of(row, "publish_version")?,
        submit_round: int_of(row, "submit_round")?,
        treasury: bool_of(row, "treasury")?,
    })
}

/// `None` for a line never published: it belongs to no publish identity, so no rule
/// can count it (R-BILL-2 joins lines to their master's current identity).
pub fn line_of(row: &MemRow) -> Result<Option<BillLine>, String> {
    let (Some(publish_version), Some(submit_round)) = (
        opt_int_of(row, "publish_version")?,
        opt_int_of(row, "submit_round")?,
    ) else {
        return Ok(None);
    };
    let kind = match parse_code::<LineKindCode>(text_of(row, "kind")?)? {
        LineKindCode::Payable => LineKind::Payable,
        LineKindCode::Unqualified => LineKind::Unqualified,
    };
    let status = match text_of(row, "status")? {
        "UNQUALIFIED_EFFECTIVE" => LineStatus::UnqualifiedEffective,
        "UNQUALIFIED_INEFFECTIVE" => LineStatus::UnqualifiedIneffective,
        other => match parse_code::<LineStatusCode>(other)? {
            LineStatusCode::Unpaid => LineStatus::Unpaid,
            LineStatusCode::Paid => LineStatus::Paid,
            LineStatusCode::PartiallyPaid => LineStatus::PartiallyPaid,
            LineStatusCode::Failed => LineStatus::Failed,
        },
    };
    Ok(Some(BillLine {
        id: int_of(row, "line_id")?,
        order_id: int_of(row, "order_id")?,
        publish_version,
        submit_round,
        kind,
        status,
        latest_result_id: opt_int_of(row, "latest_result_id")?,
        planned_amount_minor: int_of(row, "planned_amount")?,
        manual_adjustment_minor: opt_int_of(row, "manual_adjustment")?,
        line_at: time_of(row, "line_at")?,
        deleted: bool_of(row, "deleted")?,
    }))
}

/// The line's unqualified conclusion, if it ever had one (whether it still counts is
/// the decision's business: the line's status says so).
pub fn conclusion_of(row: &MemRow) -> Result<Option<UnqualifiedConclusion>, String> {
    let Some(at) = opt_time_of(row, "conclusion_at")? else {
        return Ok(None);
    };
    Ok(Some(UnqualifiedConclusion {
        order_id: int_of(row, "order_id")?,
        line_id: int_of(row, "line_id")?,
        partner_visible: opt_int_of(row, "conclusion_visible")?.unwrap_or(0) != 0,
        reason: opt_text_of(row, "conclusion_reason")?
            .unwrap_or_default()
            .to_owned(),
        at,
    }))
}

pub fn lock_of(row: &MemRow) -> Result<BillLock, String> {
    Ok(BillLock {
        id: int_of(row, "lock_id")?,
        order_id: int_of(row, "order_id")?,
        line_id: int_of(row, "line_id")?,
        publish_version: int_of(row, "publish_version")?,
        submit_round: int_of(row, "submit_round")?,
        status: match text_of(row, "status")? {
            "RESERVED" => LockStatus::Reserved,
            "ACTIVE" => LockStatus::Active,
            "RELEASED" => LockStatus::Released,
            other => return Err(format!("lock status {other}")),
        },
        locked_at: time_of(row, "locked_at")?,
    })
}

pub fn result_of(row: &MemRow) -> Result<PaymentResult, String> {
    Ok(PaymentResult {
        id: int_of(row, "result_id")?,
        small_station_id: int_of(row, "small_station_id")?,
        platform_station_id: opt_int_of(row, "platform_station_id")?,
        partner_org_id: opt_int_of(row, "partner_org_id")?,
        month: month_of(row, "bill_yearmonth")?,
        status: match parse_code::<ResultStatusCode>(text_of(row, "status")?)? {
            ResultStatusCode::Paying => ResultStatus::Paying,
            ResultStatusCode::PaySuccess => ResultStatus::Success,
            ResultStatusCode::PayFail => ResultStatus::Fail,
        },
        kind: match parse_code::<ResultTypeCode>(text_of(row, "kind")?)? {
            ResultTypeCode::NormalPayment => ResultType::NormalPayment,
            ResultTypeCode::Other => ResultType::Other,
        },
        source: match parse_code::<ResultSourceCode>(text_of(row, "source")?)? {
            ResultSourceCode::Treasury => ResultSource::Treasury,
            ResultSourceCode::OfflineImport => ResultSource::OfflineImport,
            ResultSourceCode::FailFallback => ResultSource::FailFallback,
            ResultSourceCode::Other => ResultSource::Other,
        },
        amount_minor: int_of(row, "amount")?,
        paid_at: opt_time_of(row, "paid_at")?,
        voided: bool_of(row, "voided")?,
    })
}

/// The time column of each fact table: the newest one a decision read is its
/// `payment_status_update_time`.
pub fn fact_time_column(table: &TableDef) -> &'static str {
    match table.name {
        n if n == PARTNER_REPUSHES.name => "repushed_at",
        n if n == OPENING_PAID.name || n == OPENING_DEDUCTIONS.name => "updated_at",
        n if n == LINES.name => "line_at",
        _ => "fact_at",
    }
}
