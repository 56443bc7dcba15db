//! The scenario form against the log's vocabulary: every kind of event, written as a timeline
//! entry from its stored record (the one difference: a `pool-applied`'s spec is a MobilityPool
//! document), reads as the same event; the entry's fields are the vocabulary's; what the scenario
//! maps ([`LEFT_OUT_READS_EMPTY`]) reads as documented.

use std::collections::BTreeSet;

use serde_json::Value;

use super::*;
use crate::codec::tests::golden_events;
use crate::log::EVENT_KINDS;

/// The MobilityPool document of the codec's golden pool, as a flow mapping.
const POOL_DOCUMENT: &str = r#"{"apiVersion": "tenure.dev/v1alpha1", "kind": "MobilityPool", "metadata": {"name": "edge"},
  "spec": {"addresses": ["10.0.0.10/32", "10.0.0.16/29", "2001:db8::1"], "provider": "sim1",
  "placementGroup": "g1", "members": ["a", "b"], "ipOwnershipPolicy": {"preferNodes": ["a"]}}}"#;

/// A scenario whose timeline is `entry`, with the nodes and providers the golden events name.
fn scenario_of(entry: &str) -> String {
    format!(
        "nodes:
  - {{name: a, provider: sim1, placementGroup: g1, nic: eni-a}}
  - {{name: b, provider: sim1, placementGroup: g1, nic: eni-b}}
providers:
  - {{name: sim1, kind: sim-cloud}}
  - {{name: lan, kind: sim-onprem}}
timeline:
  - {entry}
"
    )
}

/// The one entry of `text`'s timeline.
fn only_entry(text: &str) -> StepKind {
    let mut scenario = parse_scenario(text).unwrap_or_else(|e| panic!("{text}: {e:?}"));
    assert_eq!(scenario.timeline.len(), 1);
    scenario.timeline.remove(0).kind
}

#[test]
fn every_kind_reads_from_its_stored_record() {
    let mut read = BTreeSet::new();
    for (event, json) in golden_events() {
        let Ok(Value::Object(mut entry)) = serde_json::from_str::<Value>(&json) else { panic!("{json}") };
        entry.remove("v");
        if entry.contains_key("spec") {
            entry.insert("spec".into(), serde_json::from_str(POOL_DOCUMENT).expect("a JSON document"));
        }
        let entry = serde_json::to_string(&entry).expect("a map writes");
        assert_eq!(only_entry(&scenario_of(&entry)), StepKind::Log(event.clone()), "{entry}");
        read.insert(event.kind.wire_name());
    }
    let every: BTreeSet<&str> = EVENT_KINDS.iter().map(|kind| kind.name).collect();
    assert_eq!(read, every, "every kind of the vocabulary");
}

#[test]
fn an_entry_takes_every_field_of_the_vocabulary_and_no_other() {
    let entry = format!(
        "{{at: 0, event: heartbeat, node: a, healthy: true, state: master, spec: {POOL_DOCUMENT}, pool: p,
    address: 10.0.0.1, idempotencyKey: k, outcome: executed, detail: d, provider: sim1, holders: [],
    scope: [], by: 1, providerKind: sim-cloud, placementGroup: g1, nic: eni-c, priority: 1, capacity: 2, force: true}}"
    );
    let raw: RawStep = serde_saphyr::from_str(&entry).expect("every field reads");
    let positions = raw.positions();
    assert!(positions.iter().all(|(_, position)| position.is_some()), "{positions:?}");
    let named: BTreeSet<&str> = positions.iter().map(|(name, _)| *name).collect();
    assert_eq!(named.len(), positions.len(), "a field named twice");
    let vocabulary: BTreeSet<&str> =
        EVENT_KINDS.iter().flat_map(|kind| kind.fields.iter().copied()).collect();
    assert_eq!(named, vocabulary);
    for field in LOCAL_STEP_FIELDS.iter().chain(LEFT_OUT_READS_EMPTY) {
        assert!(vocabulary.contains(field), "`{field}`");
    }
}

#[test]
fn what_the_scenario_maps_reads_as_documented() {
    // `detail` left out reads as empty; written, it is kept.
    let key = crate::codec::tests::KEY;
    let result = |detail: &str| {
        only_entry(&scenario_of(&format!(
            "{{at: 7, event: action-result, node: a, idempotencyKey: {key}, outcome: failed{detail}}}"
        )))
    };
    let with = |detail: &str| {
        StepKind::Log(Event {
            at_ms: 7,
            kind: EventKind::ActionResult {
                node: "a".into(),
                idempotency_key: key.into(),
                outcome: ActionOutcome::Failed,
                detail: detail.into(),
            },
        })
    };
    assert_eq!(result(""), with(""));
    assert_eq!(result(", detail: refused"), with("refused"));
    // `address` is text, any form of one address; the event holds it.
    assert_eq!(
        only_entry(&scenario_of("{at: 1, event: desire, pool: edge, address: 10.0.0.7/32}")),
        StepKind::Log(Event {
            at_ms: 1,
            kind: EventKind::Desire { pool: "edge".into(), address: "10.0.0.7".parse().expect("literal") },
        })
    );
    // Every field the stored record must carry, the scenario needs, but what it maps.
    for kind in EVENT_KINDS {
        let entry = format!("{{at: 1, event: {}}}", kind.name);
        let Err(errors) = parse_scenario(&scenario_of(&entry)) else { panic!("{entry} reads") };
        let needed: Vec<&str> = errors
            .iter()
            .filter_map(|e| e.message.strip_prefix(&format!("event `{}` needs field `", kind.name)))
            .map(|rest| rest.trim_end_matches('`'))
            .collect();
        let expected: Vec<&str> = kind
            .fields
            .iter()
            .copied()
            .filter(|f| kind.needs(f) && !LEFT_OUT_READS_EMPTY.contains(f))
            .collect();
        assert_eq!(needed, expected, "{entry}: {errors:?}");
        assert_eq!(needed.len(), errors.len(), "{entry}: only missing fields: {errors:?}");
    }
}

#[test]
fn a_local_step_is_named_apart_from_every_event_kind() {
    for step in LocalStep::ALL {
        let name = step.as_str();
        assert_eq!(LocalStep::from_wire(name), Some(step));
        assert_eq!(EventKind::named(name), None, "`{name}` is both a local step and an event kind");
        let entry = format!("{{at: 3, event: {name}, node: b}}");
        assert_eq!(only_entry(&scenario_of(&entry)), StepKind::Local { at_ms: 3, node: "b".into(), step });
    }
}
