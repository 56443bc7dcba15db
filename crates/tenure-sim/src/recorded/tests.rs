//! Hand-made recorded logs: each check fires on the log that breaks it, and not on its twin that
//! does not.

use super::*;
use tenure_core::journal::Attempts;
use tenure_core::model::{
    Approval, Authority, CaptureEpoch, NodeSpec, OwnershipEpoch, PoolSpec, ProviderKind, ProviderSpec,
    StampedAction, Verb,
};

const ADDRESS: &str = "10.0.0.1";

fn address() -> IpAddr {
    ADDRESS.parse().expect("literal")
}

fn node(name: &str) -> NodeSpec {
    NodeSpec {
        name: name.into(),
        provider: "sim".into(),
        placement_group: "g1".into(),
        priority: 0,
        nic: format!("eni-{name}"),
        capacity: None,
    }
}

fn registry() -> Federation {
    let providers = [ProviderSpec { name: "sim".into(), kind: ProviderKind::SimCloud }];
    Federation::new(&[node("a"), node("b")], &providers).with_drift_repair(true)
}

fn pool() -> PoolSpec {
    PoolSpec {
        name: "p".into(),
        addresses: vec![address()],
        provider: "sim".into(),
        placement_group: "g1".into(),
        members: vec!["a".into(), "b".into()],
        authority: Authority::None,
        approval: Approval::Auto,
        deprovision_hold_ms: 0,
        heartbeat_ttl_ms: 3_000,
        promotion_hold_ms: 0,
        epoch_locking: true,
        prefer_nodes: Vec::new(),
        preempt: false,
        auto_failover: true,
    }
}

/// Pool `p` applied, `a` and `b` alive at 0 (`a` owns), then `a` drained at 10 (`b` owns).
fn records() -> Vec<Record> {
    let kinds = [
        (0, EventKind::PoolApplied { spec: Box::new(pool()) }),
        (0, EventKind::Heartbeat { node: "a".into() }),
        (0, EventKind::Heartbeat { node: "b".into() }),
        (10, EventKind::Drain { node: "a".into() }),
    ];
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, (at_ms, kind))| Record { index: i as u64 + 1, event: Event { at_ms, kind } })
        .collect()
}

/// The head after the first `count` records.
fn head_after(count: usize) -> Federation {
    let mut head = registry();
    for record in &records()[..count] {
        head.apply(&record.event).expect("well formed");
    }
    head
}

/// The acquire `holder` would be stamped with at `head`.
fn acquire(head: &Federation, holder: &str, capture_epoch: Option<u64>) -> StampedAction {
    let domain = CaptureDomain::new("sim", "g1");
    let capture =
        capture_epoch.map_or_else(|| head.capture_epoch("p", address(), &domain), CaptureEpoch::from_stored);
    StampedAction::new(
        "p",
        address(),
        Verb::AssignSecondaryIp,
        holder,
        "sim",
        &format!("eni-{holder}"),
        domain,
        capture,
        OwnershipEpoch::from_stored(head.ownership_epoch("p", address()).get()),
    )
}

/// An executed entry, gated at stream time `gated_at_ms` (`None`: no attempt recorded).
fn executed(seq: u64, action: StampedAction, gated_at_ms: Option<u64>) -> JournalEntry {
    JournalEntry {
        seq: tenure_core::journal::JournalSeq::new(seq),
        action,
        state: EntryState::Executed,
        detail: Some("ok".into()),
        executed_seq: std::num::NonZeroU64::new(seq),
        attempts: gated_at_ms.map_or_else(Attempts::default, |at| Attempts::handed_out(1, at, None, None)),
    }
}

fn replay(journals: BTreeMap<String, Vec<JournalEntry>>) -> RecordedReport {
    let log = RecordedLog { registry: registry(), records: records(), journals };
    replay_recorded(&log, None).expect("replays")
}

#[test]
fn an_action_stale_at_every_head_its_gate_may_have_seen_is_a_violation() {
    let before_drain = head_after(3);
    let after_drain = head_after(4);
    assert_eq!(before_drain.desired_holder("p", address(), &CaptureDomain::new("sim", "g1")), Some("a"));
    // a's acquire, gated at stream time 0 where it was current; the drain at 10 moved the head
    // while it was in flight: no violation. b's acquire gated at 10, current there.
    let current = BTreeMap::from([
        ("a".to_owned(), vec![executed(1, acquire(&before_drain, "a", None), Some(0))]),
        ("b".to_owned(), vec![executed(1, acquire(&after_drain, "b", None), Some(10))]),
    ]);
    let report = replay(current.clone());
    assert_eq!(report.violations, Vec::<String>::new());
    assert_eq!(report.unjudged, 0);
    // The same acquire of a, but gated at stream time 10, when b was the desired holder.
    let mut stale = current;
    stale.get_mut("a").expect("a").push(executed(2, acquire(&before_drain, "a", None), Some(10)));
    let report = replay(stale);
    assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    let line = &report.violations[0];
    assert!(line.starts_with("stale action executed by a: p/10.0.0.1/assign-secondary-ip/a/"), "{line}");
    assert!(line.contains("stale at every head of stream time 10"), "{line}");
    // A gate at a stream time no record has (or none recorded) cannot be judged, and is counted.
    let unknown = BTreeMap::from([(
        "a".to_owned(),
        vec![
            executed(1, acquire(&before_drain, "a", None), Some(5)),
            executed(2, acquire(&before_drain, "a", None), None),
        ],
    )]);
    let report = replay(unknown);
    assert_eq!((report.violations.len(), report.unjudged), (0, 2));
}

#[test]
fn a_node_executing_below_a_capture_epoch_it_executed_before_is_a_violation() {
    let head = head_after(3);
    let high = head.capture_epoch("p", address(), &CaptureDomain::new("sim", "g1")).get() + 2;
    // Executed in this order: captureEpoch high, then high - 1 (the journal went backwards).
    let backwards = BTreeMap::from([(
        "a".to_owned(),
        vec![
            executed(1, acquire(&head, "a", Some(high)), None),
            executed(2, acquire(&head, "a", Some(high - 1)), None),
        ],
    )]);
    let report = replay(backwards);
    assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
    assert!(report.violations[0].contains(&format!("below captureEpoch {high} it executed before")));
    // The same two, executed in the other order, go forwards: nothing to say.
    let forwards = BTreeMap::from([(
        "a".to_owned(),
        vec![
            executed(2, acquire(&head, "a", Some(high)), None),
            executed(1, acquire(&head, "a", Some(high - 1)), None),
        ],
    )]);
    assert_eq!(replay(forwards).violations, Vec::<String>::new());
}

#[test]
fn the_timeline_is_the_cores_history_and_the_plot_marks_its_causes() {
    let mut timeline = Timeline::over(
        recorded_addresses(&records()),
        vec![("a".into(), "eni-a".into()), ("b".into(), "eni-b".into())],
    );
    let log = RecordedLog { registry: registry(), records: records(), journals: BTreeMap::new() };
    let report = replay_recorded(&log, Some(&mut timeline)).expect("replays");
    let mut history = History::new(registry());
    for record in &records() {
        history.apply(LogIndex::from_stored(record.index).expect("index"), &record.event);
    }
    assert_eq!(report.timeline, history.entries().cloned().collect::<Vec<_>>(), "the core's own fold");
    let drained = report.timeline.last().expect("the drain moved the owner");
    assert_eq!((drained.kind, drained.cause), (EntryKind::Ownership, Some(Cause::Drain)));
    assert_eq!(mark_text(drained).as_deref(), Some("operator: drain a → b"));
    assert_eq!(report.ownership.len(), 1);
    assert_eq!(report.ownership[0].owner.as_deref(), Some("b"));
    let svg = timeline.to_svg("t");
    assert!(svg.contains("p/10.0.0.1") && svg.contains("operator: drain a → b"), "{svg}");
    assert!(svg.contains("addresses drawn: 1 of 1"), "{svg}");
}

#[test]
fn a_record_the_projection_refuses_stops_the_replay_naming_its_index() {
    let mut records = records();
    records.push(Record {
        index: 9,
        event: Event { at_ms: 20, kind: EventKind::Heartbeat { node: "c".into() } },
    });
    let log = RecordedLog { registry: registry(), records, journals: BTreeMap::new() };
    let error = replay_recorded(&log, None).expect_err("c is not in the registry");
    assert_eq!(error.index, 9);
    assert!(error.to_string().starts_with("log index 9: heartbeat: unknown node `c`"), "{error}");
}

#[test]
fn a_holder_losing_an_address_is_a_fault_and_a_node_taking_a_free_one_is_not() {
    let entry = |cause, from: Option<&str>| HistoryEntry {
        log_index: 1,
        stream_time_ms: 0,
        wall_time_ms: 0,
        kind: EntryKind::Ownership,
        pool: Some("p".into()),
        address: Some(address()),
        cause: Some(cause),
        from: from.map(str::to_owned),
        to: Some("b".into()),
        ownership_epoch: Some(2),
        capture_epoch: Some(2),
        node: None,
        verb: None,
        idempotency_key: None,
        detail: None,
    };
    assert_eq!(mark_text(&entry(Cause::Liveness, Some("a"))).as_deref(), Some("fault: liveness a → b"));
    assert_eq!(mark_text(&entry(Cause::Vrrp, Some("a"))).as_deref(), Some("fault: vrrp a → b"));
    assert_eq!(mark_text(&entry(Cause::Liveness, None)).as_deref(), Some("liveness none → b"));
    assert_eq!(mark_text(&entry(Cause::Desire, None)).as_deref(), Some("operator: desire none → b"));
    let failed = HistoryEntry {
        kind: EntryKind::Failed,
        node: Some("b".into()),
        verb: Some("garp".into()),
        ..entry(Cause::Drain, None)
    };
    assert_eq!(mark_text(&failed).as_deref(), Some("fault: garp by b failed"));
    let executed = HistoryEntry { kind: EntryKind::Executed, ..failed };
    assert_eq!(mark_text(&executed), None, "the bands show what ran");
}
