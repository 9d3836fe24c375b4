//! The reference-data aggregate: one stream per entity (`customer_account:<id>`,
//! `partner_account:<id>`, `partner_profile:<partner_org_id>`, `station:<station_id>`,
//! `account_route`, `opening_paid:<id>`, `opening_deduction:<id>`). Each event states
//! the entity's whole current value (latest wins); the same value again writes nothing.
//! "Not configured" is a recorded value of a partner profile (R-BILL-1 [dev]). A
//! partner profile's `config_version` only moves forward.

use super::commands::{ReferenceCommand, ShareRule};
use super::error::BillError;
use super::events::{ReferenceEvent, ShareRuleFact, REFERENCE_AGGREGATE_TYPE};
use super::values::BillId;
use crate::decide::{Decide, InvariantViolation, LedgerRef};
use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Reference {
    /// The entity's stream id; empty until the first event.
    pub entity: String,
    /// The latest recorded value.
    pub current: Option<ReferenceEvent>,
    /// A partner profile's last configured version and cycle, kept through "not
    /// configured" answers so a version never goes back.
    pub profile_version: Option<(i64, String)>,
}

/// The stream id an event belongs to (the same rule as `ReferenceCommand::stream_id`).
pub fn reference_stream_id(event: &ReferenceEvent) -> String {
    match event {
        ReferenceEvent::CustomerAccountRecorded { account_id, .. } => {
            format!("customer_account:{account_id}")
        }
        ReferenceEvent::PartnerAccountRecorded {
            partner_account_id, ..
        } => format!("partner_account:{partner_account_id}"),
        ReferenceEvent::PartnerProfileConfigured { partner_org_id, .. }
        | ReferenceEvent::PartnerProfileNotConfigured { partner_org_id, .. } => {
            format!("partner_profile:{partner_org_id}")
        }
        ReferenceEvent::StationFactsRecorded { station_id, .. } => format!("station:{station_id}"),
        ReferenceEvent::AccountRouteSet { .. } => "account_route".to_owned(),
        ReferenceEvent::OpeningPaidBalanceRecorded { opening_id, .. } => {
            format!("opening_paid:{opening_id}")
        }
        ReferenceEvent::OpeningDeductionRecorded { opening_id, .. } => {
            format!("opening_deduction:{opening_id}")
        }
    }
}

/// The event with its time erased: two facts with the same content are the same fact.
fn content(event: &ReferenceEvent) -> ReferenceEvent {
    let epoch = DateTime::<Utc>::UNIX_EPOCH;
    let mut e = event.clone();
    match &mut e {
        ReferenceEvent::CustomerAccountRecorded { recorded_at, .. }
        | ReferenceEvent::PartnerAccountRecorded { recorded_at, .. }
        | ReferenceEvent::PartnerProfileConfigured { recorded_at, .. }
        | ReferenceEvent::PartnerProfileNotConfigured { recorded_at, .. }
        | ReferenceEvent::StationFactsRecorded { recorded_at, .. }
        | ReferenceEvent::AccountRouteSet { recorded_at, .. } => *recorded_at = epoch,
        ReferenceEvent::OpeningPaidBalanceRecorded { updated_at, .. }
        | ReferenceEvent::OpeningDeductionRecorded { updated_at, .. } => *updated_at = epoch,
    }
    e
}

fn share_rule(rule: ShareRule) -> ShareRuleFact {
    ShareRuleFact {
        rent_pay_method: rule.rent_pay_method.as_str().to_owned(),
        change_type: rule.change_type.map(|c| c.as_str().to_owned()),
        latest_generated_bill_month: rule.latest_generated_bill_month.map(|m| m.to_string()),
    }
}

/// The event a command records.
fn event_of(command: ReferenceCommand) -> ReferenceEvent {
    match command {
        ReferenceCommand::RecordCustomerAccount(c) => ReferenceEvent::CustomerAccountRecorded {
            account_id: c.account_id.get(),
            income_start_month: c.income_start_month.to_string(),
            current_payable_cutoff_month: c.current_payable_cutoff_month.map(|m| m.to_string()),
            recorded_at: c.recorded_at,
        },
        ReferenceCommand::RecordPartnerAccount(c) => ReferenceEvent::PartnerAccountRecorded {
            partner_account_id: c.partner_account_id.get(),
            partner_org_id: c.partner_org_id.get(),
            platform_station_id: c.platform_station_id.map(BillId::get),
            recorded_at: c.recorded_at,
        },
        ReferenceCommand::ConfigurePartnerProfile(c) => ReferenceEvent::PartnerProfileConfigured {
            partner_org_id: c.partner_org_id.get(),
            payment_cycle: c.payment_cycle.as_str().to_owned(),
            config_version: c.config_version.get(),
            recorded_at: c.recorded_at,
        },
        ReferenceCommand::MarkPartnerProfileNotConfigured(c) => {
            ReferenceEvent::PartnerProfileNotConfigured {
                partner_org_id: c.partner_org_id.get(),
                recorded_at: c.recorded_at,
            }
        }
        ReferenceCommand::RecordStationFacts(c) => ReferenceEvent::StationFactsRecorded {
            station_id: c.station_id.get(),
            record_way: c.record_way,
            share_rule: c.share_rule.map(share_rule),
            recorded_at: c.recorded_at,
        },
        ReferenceCommand::SetAccountRoute(c) => ReferenceEvent::AccountRouteSet {
            route: c.route,
            recorded_at: c.recorded_at,
        },
        ReferenceCommand::RecordOpeningPaidBalance(c) => {
            ReferenceEvent::OpeningPaidBalanceRecorded {
                opening_id: c.opening_id.get(),
                small_station_id: c.small_station_id.get(),
                platform_station_id: c.platform_station_id.map(BillId::get),
                partner_org_id: c.partner_org_id.get(),
                opening_paid_minor: c.opening_paid_minor.get(),
                updated_at: c.updated_at,
            }
        }
        ReferenceCommand::RecordOpeningDeduction(c) => ReferenceEvent::OpeningDeductionRecorded {
            opening_id: c.opening_id.get(),
            partner_account_id: c.partner_account_id.get(),
            effective: c.effective,
            amount_minor: c.amount_minor.get(),
            updated_at: c.updated_at,
        },
    }
}

impl Reference {
    /// Whether `event` may follow the current value (the version rule of profiles).
    fn follows(&self, event: &ReferenceEvent) -> Result<(), BillError> {
        if let ReferenceEvent::PartnerProfileConfigured {
            config_version,
            payment_cycle,
            ..
        } = event
        {
            if let Some((current, cycle)) = &self.profile_version {
                let current = *current;
                if *config_version < current {
                    return Err(BillError::ConfigVersionStale {
                        given: *config_version,
                        current,
                    });
                }
                if *config_version == current && cycle != payment_cycle {
                    return Err(BillError::ConfigVersionReused(current));
                }
            }
        }
        Ok(())
    }
}

impl Decide for Reference {
    const SNAPSHOT_VERSION: i32 = 1;

    fn decide(&self, command: ReferenceCommand) -> Result<Vec<ReferenceEvent>, BillError> {
        let stream = command.stream_id();
        if !self.entity.is_empty() && self.entity != stream {
            return Err(BillError::StreamMismatch {
                field: "id",
                given: stream,
                stream: self.entity.clone(),
            });
        }
        let event = event_of(command);
        if self
            .current
            .as_ref()
            .is_some_and(|c| content(c) == content(&event))
        {
            return Ok(vec![]);
        }
        self.follows(&event)?;
        Ok(vec![event])
    }

    fn check(&self, event: &ReferenceEvent) -> Result<(), InvariantViolation> {
        let stream = reference_stream_id(event);
        if (!self.entity.is_empty() && self.entity != stream) || self.follows(event).is_err() {
            return Err(InvariantViolation(format!(
                "{} of {stream} does not follow from {} ({:?})",
                event.name(),
                self.entity,
                self.current
            )));
        }
        Ok(())
    }

    fn ledger_ref(_event: &ReferenceEvent) -> Option<LedgerRef> {
        None
    }
}

impl Aggregate for Reference {
    const TYPE: &'static str = REFERENCE_AGGREGATE_TYPE;
    type Command = ReferenceCommand;
    type Event = ReferenceEvent;
    type Error = BillError;
    type Services = ();

    async fn handle(
        &mut self,
        command: ReferenceCommand,
        _service: &(),
        sink: &EventSink<Self>,
    ) -> Result<(), BillError> {
        for event in self.decide(command)? {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: ReferenceEvent) {
        debug_assert_eq!(self.check(&event), Ok(()));
        self.entity = reference_stream_id(&event);
        if let ReferenceEvent::PartnerProfileConfigured {
            config_version,
            payment_cycle,
            ..
        } = &event
        {
            self.profile_version = Some((*config_version, payment_cycle.clone()));
        }
        self.current = Some(event);
    }
}
