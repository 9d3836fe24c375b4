//! The payment gateway's state, below both the [`crate::Sim`] that holds it (and
//! forgets it at a reset, together with the payouts') and the [`crate::gateway`]
//! that serves it: its settings, payments, refunds, scripted faults, held callbacks,
//! request counts and callback log, behind their own mutex (locked after the
//! payouts' one, never before). Plain data: what is done with it is in
//! [`crate::gateway`].

use crate::gateway::model::{Course, GatewayFault, Payment, Refund};
use crate::plumbing::Plan;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

/// Where pay callbacks go and what signs them (`POST /control/gateway/settings`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewaySettings {
    /// `None`: no callbacks.
    pub callback_url: Option<String>,
    pub callback_secret: String,
}

/// Calls the gateway API served.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayCounts {
    /// `POST /gateway/payments`.
    pub payment: u64,
    /// `POST /gateway/refunds`, answered or not.
    pub refund: u64,
    /// `GET /gateway/refunds/{refund_no}`.
    pub query: u64,
    /// Calls refused 401 (counted in their endpoint too).
    pub unauthorized: u64,
}

/// One attempt at delivering a pay callback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayCallbackAttempt {
    pub event_id: String,
    pub order_no: String,
    pub transaction_no: String,
    /// 1, or 2 for a duplicate's second delivery.
    pub copy: u32,
    /// 1-based attempt number of this copy.
    pub attempt: u32,
    pub http_status: Option<u16>,
    pub error: Option<String>,
    pub delivered: bool,
    /// Signed with the callback secret (false for `bad_signature_callback`).
    pub signed: bool,
    /// When the attempt ended (epoch ms).
    pub at_ms: i64,
}

/// The gateway's state (behind [`Shared`]'s mutex).
#[derive(Debug)]
pub(crate) struct State {
    pub settings: GatewaySettings,
    pub payments: Vec<Payment>,
    pub by_transaction: HashMap<String, usize>,
    pub refunds: Vec<Refund>,
    pub by_refund_no: HashMap<String, usize>,
    pub create_requests: BTreeMap<String, u64>,
    pub create_faults: HashMap<String, VecDeque<GatewayFault>>,
    pub query_faults: HashMap<String, VecDeque<GatewayFault>>,
    /// Courses scripted for refunds not made yet.
    pub courses: HashMap<String, Course>,
    pub callback_faults: HashMap<String, VecDeque<GatewayFault>>,
    /// Held callbacks per order number.
    pub held: HashMap<String, Vec<Plan>>,
    pub counts: GatewayCounts,
    pub callbacks: VecDeque<GatewayCallbackAttempt>,
}

impl State {
    fn new(settings: GatewaySettings) -> State {
        State {
            settings,
            payments: Vec::new(),
            by_transaction: HashMap::new(),
            refunds: Vec::new(),
            by_refund_no: HashMap::new(),
            create_requests: BTreeMap::new(),
            create_faults: HashMap::new(),
            query_faults: HashMap::new(),
            courses: HashMap::new(),
            callback_faults: HashMap::new(),
            held: HashMap::new(),
            counts: GatewayCounts::default(),
            callbacks: VecDeque::new(),
        }
    }
}

/// The gateway's part of the simulator (held by [`crate::Sim`]).
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    initial: GatewaySettings,
    /// Speaking Alipay's wire format (`gateway::alipay`), for the simulator's life.
    pub alipay: Option<crate::gateway::alipay::AlipayMode>,
    pub next_transaction: AtomicU64,
    pub next_refund: AtomicU64,
    pub next_event: AtomicU64,
    /// The WeChat Pay mode's keys when on (configuration: kept across resets).
    wechatpay: Mutex<Option<std::sync::Arc<crate::gateway::wechatpay::WechatPayMode>>>,
}

impl Shared {
    /// A gateway with no payments, set up as `initial` (and so again at every reset).
    pub(crate) fn new(
        initial: GatewaySettings,
        alipay: Option<crate::gateway::alipay::AlipayMode>,
    ) -> Shared {
        Shared {
            state: Mutex::new(State::new(initial.clone())),
            initial,
            alipay,
            next_transaction: AtomicU64::new(0),
            next_refund: AtomicU64::new(0),
            next_event: AtomicU64::new(0),
            wechatpay: Mutex::new(None),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind: keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn wechatpay_slot(
        &self,
    ) -> MutexGuard<'_, Option<std::sync::Arc<crate::gateway::wechatpay::WechatPayMode>>> {
        self.wechatpay.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets everything but the ids handed out (they stay unique).
    pub(crate) fn reset_locked(&self, s: &mut State) {
        *s = State::new(self.initial.clone());
    }
}
