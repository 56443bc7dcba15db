//! The replay scenario format (SPEC 11, 13): nodes, providers, pools and a timeline of log
//! events and local steps. Parsing is strict; every error names `line:column`.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use serde_saphyr::Spanned;

use crate::claims::AddressClaims;
use crate::fleet_spec::{RawNode, check_provider_name, validate_nodes};
use crate::input::{InputError, Position, canonical_address, parse_one_address};
use crate::log::{ActionOutcome, Event, EventKind};
use crate::model::{NodeSpec, PoolSpec, ProviderKind, ProviderSpec, VrrpState};
use crate::spec::{PoolSource, RawPoolDocument, validate_pool, validate_pool_documents};

/// Most timeline entries one scenario may hold.
pub const TIMELINE_ENTRIES_MAX: usize = 1_000_000;

/// A node-local step of a scenario; it never moves stream time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalStep {
    /// Catch up on the log, plan, import, sweep.
    Reconcile,
    /// Run approved actions through the gate and the provider.
    Execute,
    /// Stop reading the log but keep what was planned.
    Pause,
    /// Gate what was approved before the pause (zombie), then catch up.
    Resume,
    /// Crash: memory lost, durable journal and tokens kept.
    Restart,
    /// Cut off from the log head: the node must not act.
    Partition,
    /// Reconnect to the log head.
    Heal,
}

impl LocalStep {
    /// Every local step.
    pub const ALL: [Self; 7] = [
        Self::Reconcile,
        Self::Execute,
        Self::Pause,
        Self::Resume,
        Self::Restart,
        Self::Partition,
        Self::Heal,
    ];

    fn from_wire(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|step| step.as_str() == text)
    }

    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reconcile => "reconcile",
            Self::Execute => "execute",
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Restart => "restart",
            Self::Partition => "partition",
            Self::Heal => "heal",
        }
    }
}

/// One timeline entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// A log event, appended to the log and applied.
    Log(Event),
    /// A local step of one node.
    Local {
        /// `at` as written (informational: local steps do not move stream time).
        at_ms: u64,
        /// The node.
        node: String,
        /// What it does.
        step: LocalStep,
    },
}

/// One timeline entry and where it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Position of the entry.
    pub position: Position,
    /// The entry.
    pub kind: StepKind,
}

/// A validated scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Declared nodes.
    pub nodes: Vec<NodeSpec>,
    /// Declared providers (simulated kinds only).
    pub providers: Vec<ProviderSpec>,
    /// Pools applied at `at: 0`, in declaration order.
    pub pools: Vec<PoolSpec>,
    /// The timeline, in order.
    pub timeline: Vec<Step>,
    /// `driftRepair: true`: `inventory` events drive drift repair (SPEC 7's re-capture) instead
    /// of only moving stream time. Executing still appends no `action-result`: the scenario
    /// states the confirmations it means, as `action-result` events, when it means them.
    pub drift_repair: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    nodes: Vec<Spanned<RawNode>>,
    providers: Vec<Spanned<RawProvider>>,
    #[serde(default)]
    pools: Vec<RawPoolDocument>,
    #[serde(default)]
    timeline: Vec<Spanned<RawStep>>,
    #[serde(default, rename = "driftRepair")]
    drift_repair: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    name: Spanned<String>,
    kind: Spanned<ProviderKind>,
}

/// A timeline entry as written: `at`, `event`, and every field any kind takes (which kind takes
/// which is the log's vocabulary, [`EVENT_KINDS`](crate::log::EVENT_KINDS)). Serialized, it is the
/// fields a stored record of the event writes, but for `address` and `spec`, read apart
/// ([`wire_fields`]).
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawStep {
    #[serde(skip_serializing)]
    at: Spanned<i64>,
    #[serde(skip_serializing)]
    event: Spanned<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    node: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    healthy: Option<Spanned<bool>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<Spanned<VrrpState>>,
    #[serde(skip_serializing)]
    spec: Option<Spanned<RawPoolDocument>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pool: Option<Spanned<String>>,
    #[serde(skip_serializing)]
    address: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    idempotency_key: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outcome: Option<Spanned<ActionOutcome>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    holders: Option<Spanned<Vec<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scope: Option<Spanned<Vec<String>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<Spanned<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider_kind: Option<Spanned<ProviderKind>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    placement_group: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nic: Option<Spanned<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<Spanned<i64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    capacity: Option<Spanned<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    force: Option<Spanned<bool>>,
}

impl RawStep {
    /// Each field besides `at` and `event`, by its name as written, and where it was written.
    fn positions(&self) -> [(&'static str, Option<Position>); 19] {
        [
            ("node", self.node.as_ref().map(Position::of_spanned)),
            ("healthy", self.healthy.as_ref().map(Position::of_spanned)),
            ("state", self.state.as_ref().map(Position::of_spanned)),
            ("spec", self.spec.as_ref().map(Position::of_spanned)),
            ("pool", self.pool.as_ref().map(Position::of_spanned)),
            ("address", self.address.as_ref().map(Position::of_spanned)),
            ("idempotencyKey", self.idempotency_key.as_ref().map(Position::of_spanned)),
            ("outcome", self.outcome.as_ref().map(Position::of_spanned)),
            ("detail", self.detail.as_ref().map(Position::of_spanned)),
            ("provider", self.provider.as_ref().map(Position::of_spanned)),
            ("holders", self.holders.as_ref().map(Position::of_spanned)),
            ("scope", self.scope.as_ref().map(Position::of_spanned)),
            ("by", self.by.as_ref().map(Position::of_spanned)),
            ("providerKind", self.provider_kind.as_ref().map(Position::of_spanned)),
            ("placementGroup", self.placement_group.as_ref().map(Position::of_spanned)),
            ("nic", self.nic.as_ref().map(Position::of_spanned)),
            ("priority", self.priority.as_ref().map(Position::of_spanned)),
            ("capacity", self.capacity.as_ref().map(Position::of_spanned)),
            ("force", self.force.as_ref().map(Position::of_spanned)),
        ]
    }
}

/// Parses and validates a scenario. Returns every error found.
pub fn parse_scenario(text: &str) -> Result<Scenario, Vec<InputError>> {
    let raw: RawScenario =
        serde_saphyr::from_str(text).map_err(|e| vec![InputError::from_yaml_in(text, &e)])?;
    let mut errors = Vec::new();

    let mut providers: Vec<ProviderSpec> = Vec::new();
    for raw_provider in &raw.providers {
        let p = &raw_provider.value;
        let earlier: Vec<&str> = providers.iter().map(|q| q.name.as_str()).collect();
        if let Err(e) = check_provider_name(&p.name, &earlier) {
            errors.push(e);
        }
        if !matches!(p.kind.value, ProviderKind::SimCloud | ProviderKind::SimOnprem) {
            errors.push(InputError::at(
                Position::of_spanned(&p.kind),
                format!(
                    "replay runs simulated providers only: kind `{}` must be sim-cloud or sim-onprem",
                    p.kind.value.as_str()
                ),
            ));
        }
        providers.push(ProviderSpec { name: p.name.value.clone(), kind: p.kind.value });
    }

    let provider_names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
    let (validated_nodes, mut node_errors) =
        validate_nodes(raw.nodes.iter().map(|n| &n.value), &provider_names);
    errors.append(&mut node_errors);
    let nodes: Vec<NodeSpec> = validated_nodes.into_iter().map(|(node, _)| node).collect();
    // The nodes a pool or a step may name: the declared ones and those the timeline registers
    // (`node-registered`; the log decides when each is in the registry).
    let mut named = nodes.clone();
    for step in &raw.timeline {
        if step.value.event.value == "node-registered"
            && let Some(node) = &step.value.node
            && !named.iter().any(|n| n.name == node.value)
        {
            named.push(NodeSpec {
                name: node.value.clone(),
                provider: String::new(),
                placement_group: String::new(),
                priority: 0,
                nic: String::new(),
                capacity: None,
            });
        }
    }

    let mut pools = Vec::new();
    match validate_pool_documents(raw.pools) {
        Err(mut e) => errors.append(&mut e),
        Ok(validated) => {
            for (pool, source) in validated {
                errors.extend(check_pool_references(&pool, &source, &named, &providers));
                pools.push(pool);
            }
        }
    }

    if raw.timeline.len() > TIMELINE_ENTRIES_MAX {
        errors.push(InputError::at(
            Position::default(),
            format!("timeline holds more than {TIMELINE_ENTRIES_MAX} entries"),
        ));
    }
    let mut timeline = Vec::new();
    for raw_step in raw.timeline {
        let position = Position::of_spanned(&raw_step);
        match validate_step(raw_step.value, &named, &providers) {
            Ok(kind) => timeline.push(Step { position, kind }),
            Err(mut e) => errors.append(&mut e),
        }
    }

    if errors.is_empty() {
        errors.extend(check_timeline_overlaps(&pools, &timeline));
    }
    if errors.is_empty() {
        Ok(Scenario { nodes, providers, pools, timeline, drift_repair: raw.drift_repair })
    } else {
        errors.sort_by_key(|e| e.position);
        Err(errors)
    }
}

/// SPEC 13: a `pool-applied` is checked against the pools applied at that moment of the
/// timeline (the declared pools first), with the same rule the federation log applies.
fn check_timeline_overlaps(pools: &[PoolSpec], timeline: &[Step]) -> Vec<InputError> {
    let mut claims = AddressClaims::new();
    for pool in pools {
        claims.apply(pool);
    }
    let mut errors = Vec::new();
    for step in timeline {
        match &step.kind {
            StepKind::Log(Event { kind: EventKind::PoolApplied { spec }, .. }) => {
                if let Err(overlap) = claims.check(spec) {
                    errors.push(InputError::at(step.position, format!("pool-applied: {overlap}")));
                }
                claims.apply(spec);
            }
            StepKind::Log(Event { kind: EventKind::PoolDeleted { pool }, .. }) => claims.delete(pool),
            _ => {}
        }
    }
    errors
}

/// Checks that a pool names declared nodes and providers; errors point at the name written.
fn check_pool_references(
    pool: &PoolSpec,
    source: &PoolSource,
    nodes: &[NodeSpec],
    providers: &[ProviderSpec],
) -> Vec<InputError> {
    let mut errors = Vec::new();
    if !providers.iter().any(|p| p.name == pool.provider) {
        errors.push(InputError::at(
            source.provider,
            format!("pool `{}` names undeclared provider `{}`", pool.name, pool.provider),
        ));
    }
    for (index, member) in pool.members.iter().enumerate() {
        if !nodes.iter().any(|n| n.name == *member) {
            errors.push(InputError::at(
                source.members.get(index).copied().unwrap_or(source.name),
                format!("pool `{}` lists undeclared node `{member}` as a member", pool.name),
            ));
        }
    }
    errors
}

/// The fields a local step takes and needs.
const LOCAL_STEP_FIELDS: &[&str] = &["node"];

/// Where a scenario entry of a log event differs from the event's stored record (SPEC 11 against
/// the records of `codec.rs`); everything else — the kind's name, its fields and what each
/// means — is the log's vocabulary ([`EVENT_KINDS`](crate::log::EVENT_KINDS)), and the entry is
/// read through the store's wire types:
/// - `at` is signed in the file, and refused negative here, where its position is known;
/// - `address` is text: one address, a range refused by name ([`parse_one_address`]);
/// - `spec` is a MobilityPool document (SPEC 10), validated as a pool file is and checked
///   against the declared nodes and providers; the pool is handed on in its stored form;
/// - the fields named here may be left out and read as empty (a record always carries them).
const LEFT_OUT_READS_EMPTY: &[&str] = &["detail"];

/// The fields of an entry as the stored record of its event writes them (see
/// [`LEFT_OUT_READS_EMPTY`] for what differs).
fn wire_fields(
    raw: &RawStep,
    address: Option<IpAddr>,
    spec: Option<&PoolSpec>,
    takes: &[&str],
) -> Result<Map<String, Value>, String> {
    let Value::Object(mut fields) = serde_json::to_value(raw).map_err(|e| e.to_string())? else {
        return Err("a timeline entry is not a map".to_owned());
    };
    if let Some(address) = address {
        fields.insert("address".to_owned(), Value::String(canonical_address(address)));
    }
    if let Some(spec) = spec {
        fields.insert("spec".to_owned(), crate::codec::pool_spec_value(spec).map_err(|e| e.to_string())?);
    }
    for field in LEFT_OUT_READS_EMPTY.iter().filter(|f| takes.contains(f)) {
        fields.entry(*field).or_insert_with(|| Value::String(String::new()));
    }
    Ok(fields)
}

fn validate_step(
    mut raw: RawStep,
    nodes: &[NodeSpec],
    providers: &[ProviderSpec],
) -> Result<StepKind, Vec<InputError>> {
    let event_position = Position::of_spanned(&raw.event);
    let event = raw.event.value.as_str();
    let local = LocalStep::from_wire(event);
    let (takes, optional): (&[&str], &[&str]) = match (local, EventKind::named(event)) {
        (Some(_), _) => (LOCAL_STEP_FIELDS, &[]),
        (None, Some(kind)) => (kind.fields, kind.optional),
        (None, None) => {
            return Err(vec![InputError::at(event_position, format!("unknown event kind `{event}`"))]);
        }
    };
    let mut errors = Vec::new();
    let present = raw.positions();
    for (field, position) in present {
        if let Some(position) = position
            && !takes.contains(&field)
        {
            errors.push(InputError::at(position, format!("event `{event}` does not take field `{field}`")));
        }
    }
    let may_leave_out = |field: &&str| optional.contains(field) || LEFT_OUT_READS_EMPTY.contains(field);
    for field in takes.iter().filter(|f| !may_leave_out(f)) {
        if present.iter().any(|(name, position)| name == field && position.is_none()) {
            errors.push(InputError::at(event_position, format!("event `{event}` needs field `{field}`")));
        }
    }
    if let Some(holders) = &raw.holders
        && let Some(outside) =
            crate::log::holder_outside_scope(&holders.value, raw.scope.as_ref().map(|s| s.value.as_slice()))
    {
        errors.push(InputError::at(
            Position::of_spanned(holders),
            format!("holder `{outside}` is not in `scope` (a read sees only the NICs of its scope)"),
        ));
    }
    if raw.at.value < 0 {
        errors.push(InputError::at(
            Position::of_spanned(&raw.at),
            format!("`at` must not be negative (got {})", raw.at.value),
        ));
    }
    if let Some(node) = &raw.node
        && !nodes.iter().any(|n| n.name == node.value)
    {
        errors.push(InputError::at(Position::of_spanned(node), format!("undeclared node `{}`", node.value)));
    }
    if let Some(provider) = &raw.provider
        && !providers.iter().any(|p| p.name == provider.value)
    {
        errors.push(InputError::at(
            Position::of_spanned(provider),
            format!("undeclared provider `{}`", provider.value),
        ));
    }
    let address = match &raw.address {
        Some(text) => match parse_one_address(&text.value) {
            Ok(address) => Some(address),
            Err(m) => {
                errors.push(InputError::at(Position::of_spanned(text), m));
                None
            }
        },
        None => None,
    };
    let spec = match raw.spec.take() {
        Some(doc) if takes.contains(&"spec") => match validate_pool(doc.value) {
            Ok((pool, source)) => {
                errors.extend(check_pool_references(&pool, &source, nodes, providers));
                Some(pool)
            }
            Err(mut e) => {
                errors.append(&mut e);
                None
            }
        },
        _ => None,
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    let at_ms = u64::try_from(raw.at.value).expect("checked not negative");
    if let Some(step) = local {
        let node = raw.node.map(|n| n.value).expect("checked present");
        return Ok(StepKind::Local { at_ms, node, step });
    }
    wire_fields(&raw, address, spec.as_ref(), takes)
        .and_then(|fields| crate::codec::event_from_fields(at_ms, event, fields).map_err(|e| e.to_string()))
        .map(StepKind::Log)
        .map_err(|reason| vec![InputError::at(event_position, format!("event `{event}`: {reason}"))])
}

#[cfg(test)]
mod tests;
