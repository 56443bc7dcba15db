//! The codec's tests: golden bytes for one record of each kind (an accidental rename fails here),
//! round trips of random values, one test per [`CodecError`] case, and decoding of damaged bytes,
//! which must be an error and never a panic.
//!
//! Over 600 lines: golden bytes, round trips and one test per `CodecError` case, sharing the golden
//! values; they test one module.

use std::net::IpAddr;

use proptest::prelude::*;

use super::*;
use crate::fence::StaleReason;
use crate::journal::{Attempts, EntryState, JournalSeq};
use crate::log::{ActionOutcome, EventKind};
use crate::model::{Approval, Authority, CaptureDomain, CaptureEpoch, OwnershipEpoch, Verb, VrrpState};

fn ip(text: &str) -> IpAddr {
    text.parse().expect("literal address")
}

/// The pool of the golden `pool-applied`, parsed from its MobilityPool document.
fn golden_pool() -> PoolSpec {
    let yaml = "\
apiVersion: tenure.dev/v1alpha1
kind: MobilityPool
metadata: {name: edge}
spec:
  addresses: [10.0.0.10/32, 10.0.0.16/29, 2001:db8::1]
  provider: sim1
  placementGroup: g1
  members: [a, b]
  ipOwnershipPolicy: {preferNodes: [a]}
";
    let mut pools = crate::spec::parse_pool_documents(yaml).expect("a valid pool");
    pools.remove(0).0
}

fn golden_action(capture: u64, ownership: u64) -> StampedAction {
    StampedAction::new(
        "edge",
        ip("10.0.0.10"),
        Verb::AssignSecondaryIp,
        "a",
        "sim1",
        "eni-a",
        CaptureDomain::new("sim1", "g1"),
        CaptureEpoch::from_stored(capture),
        OwnershipEpoch::from_stored(ownership),
    )
}

pub(crate) const KEY: &str = "edge/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1";
const ACTION_JSON: &str = r#"{"pool":"edge","address":"10.0.0.10","verb":"assign-secondary-ip","holder":"a","provider":"sim1","nic":"eni-a","captureDomain":"provider:sim1:placement:g1","captureEpoch":1,"ownershipEpoch":1,"idempotencyKey":"edge/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1"}"#;
const POOL_JSON: &str = r#"{"name":"edge","addresses":["10.0.0.10","10.0.0.16/29","2001:db8::1"],"provider":"sim1","placementGroup":"g1","members":["a","b"],"authority":"none","approval":"auto","deprovisionHoldMs":5000,"heartbeatTtlMs":3000,"promotionHoldMs":1000,"epochLocking":true,"preferNodes":["a"],"preempt":false,"autoFailover":true}"#;

fn event(at_ms: u64, kind: EventKind) -> Event {
    Event { at_ms, kind }
}

/// One event of each kind and its documented bytes (the module doc of `codec.rs`).
pub(crate) fn golden_events() -> Vec<(Event, String)> {
    let node = || "a".to_owned();
    let pool = || "edge".to_owned();
    vec![
        (
            event(1000, EventKind::Heartbeat { node: node() }),
            r#"{"v":1,"event":"heartbeat","at":1000,"node":"a"}"#.into(),
        ),
        (event(1000, EventKind::Drain { node: node() }), r#"{"v":1,"event":"drain","at":1000,"node":"a"}"#.into()),
        (
            event(1000, EventKind::Undrain { node: node() }),
            r#"{"v":1,"event":"undrain","at":1000,"node":"a"}"#.into(),
        ),
        (
            event(1000, EventKind::Health { node: node(), healthy: false }),
            r#"{"v":1,"event":"health","at":1000,"node":"a","healthy":false}"#.into(),
        ),
        (
            event(1000, EventKind::Vrrp { node: node(), state: VrrpState::Master }),
            r#"{"v":1,"event":"vrrp","at":1000,"node":"a","state":"master"}"#.into(),
        ),
        (
            event(0, EventKind::PoolApplied { spec: Box::new(golden_pool()) }),
            format!(r#"{{"v":1,"event":"pool-applied","at":0,"spec":{POOL_JSON}}}"#),
        ),
        (
            event(1000, EventKind::PoolDeleted { pool: pool() }),
            r#"{"v":1,"event":"pool-deleted","at":1000,"pool":"edge"}"#.into(),
        ),
        (
            event(1000, EventKind::Desire { pool: pool(), address: ip("10.0.0.10") }),
            r#"{"v":1,"event":"desire","at":1000,"pool":"edge","address":"10.0.0.10"}"#.into(),
        ),
        (
            event(1000, EventKind::Undesire { pool: pool(), address: ip("10.0.0.10") }),
            r#"{"v":1,"event":"undesire","at":1000,"pool":"edge","address":"10.0.0.10"}"#.into(),
        ),
        (
            event(1000, EventKind::Approve { idempotency_key: KEY.into() }),
            format!(r#"{{"v":1,"event":"approve","at":1000,"idempotencyKey":"{KEY}"}}"#),
        ),
        (
            event(
                1000,
                EventKind::ActionResult {
                    node: node(),
                    idempotency_key: KEY.into(),
                    outcome: ActionOutcome::Executed,
                    detail: "ok".into(),
                },
            ),
            format!(
                r#"{{"v":1,"event":"action-result","at":1000,"node":"a","idempotencyKey":"{KEY}","outcome":"executed","detail":"ok"}}"#
            ),
        ),
        (
            event(
                1000,
                EventKind::Inventory {
                    provider: "sim1".into(),
                    address: ip("2001:db8::1"),
                    holders: vec!["eni-a".into()],
                    scope: None,
                },
            ),
            r#"{"v":1,"event":"inventory","at":1000,"provider":"sim1","address":"2001:db8::1","holders":["eni-a"]}"#
                .into(),
        ),
        (
            event(
                1000,
                EventKind::Inventory {
                    provider: "lan".into(),
                    address: ip("10.0.0.10"),
                    holders: vec![],
                    scope: Some(vec!["lan-a".into()]),
                },
            ),
            r#"{"v":1,"event":"inventory","at":1000,"provider":"lan","address":"10.0.0.10","holders":[],"scope":["lan-a"]}"#
                .into(),
        ),
        (
            event(1000, EventKind::TokensRaised { by: 1_000_000 }),
            r#"{"v":1,"event":"tokens-raised","at":1000,"by":1000000}"#.into(),
        ),
        (
            event(
                1000,
                EventKind::NodeRegistered {
                    spec: crate::model::NodeSpec {
                        name: "c".into(),
                        provider: "sim1".into(),
                        placement_group: "g1".into(),
                        priority: 5,
                        nic: "eni-c".into(),
                        capacity: Some(10),
                    },
                    provider_kind: crate::model::ProviderKind::SimCloud,
                },
            ),
            r#"{"v":1,"event":"node-registered","at":1000,"node":"c","provider":"sim1","providerKind":"sim-cloud","placementGroup":"g1","nic":"eni-c","priority":5,"capacity":10}"#
                .into(),
        ),
        (
            event(1000, EventKind::NodeRetired { node: "b".into(), force: true }),
            r#"{"v":1,"event":"node-retired","at":1000,"node":"b","force":true}"#.into(),
        ),
    ]
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("JSON is UTF-8")
}

#[test]
fn golden_events_have_their_documented_bytes() {
    let golden = golden_events();
    let mut kinds: Vec<&str> = golden.iter().map(|(e, _)| e.kind.wire_name()).collect();
    kinds.dedup();
    assert_eq!(
        kinds.len(),
        15,
        "one golden event of each of the 12 kinds of SPEC 2, tokens-raised, node-registered and node-retired"
    );
    for (value, json) in golden {
        let bytes = encode_event(&value).expect("encodes");
        assert_eq!(text(&bytes), json, "{}", value.kind.wire_name());
        assert_eq!(decode_event(json.as_bytes()), Ok(value));
    }
}

#[test]
fn golden_records_have_their_documented_bytes() {
    let action = golden_action(1, 1);
    assert_eq!(action.idempotency_key(), KEY);
    let bytes = encode_stamped_action(&action).expect("encodes");
    assert_eq!(text(&bytes), format!(r#"{{"v":1,{}"#, &ACTION_JSON[1..]));
    assert_eq!(decode_stamped_action(&bytes), Ok(action.clone()));

    let executed = JournalEntry {
        seq: JournalSeq::new(1),
        action: action.clone(),
        state: EntryState::Executed,
        detail: Some("ok".into()),
        executed_seq: std::num::NonZeroU64::new(1),
        attempts: Attempts::default(),
    };
    let bytes = encode_journal_entry(&executed).expect("encodes");
    assert_eq!(
        text(&bytes),
        format!(
            r#"{{"v":1,"seq":1,"action":{ACTION_JSON},"state":"executed","detail":"ok","executedSeq":1}}"#
        )
    );
    assert_eq!(decode_journal_entry(&bytes), Ok(executed));

    let skipped = JournalEntry {
        seq: JournalSeq::new(2),
        action: action.clone(),
        state: EntryState::Skipped(StaleReason::StaleEpoch),
        detail: None,
        executed_seq: None,
        attempts: Attempts::default(),
    };
    let bytes = encode_journal_entry(&skipped).expect("encodes");
    assert_eq!(
        text(&bytes),
        format!(r#"{{"v":1,"seq":2,"action":{ACTION_JSON},"state":"skipped","reason":"stale-epoch"}}"#)
    );
    assert_eq!(decode_journal_entry(&bytes), Ok(skipped));

    let failed = JournalEntry {
        seq: JournalSeq::new(3),
        action: action.clone(),
        state: EntryState::Failed,
        detail: Some("exit status 1: no route".into()),
        executed_seq: None,
        attempts: Attempts::handed_out(
            2,
            1_000,
            Some(1_700_000_000_000),
            Some("exit status 1: no route".into()),
        ),
    };
    let bytes = encode_journal_entry(&failed).expect("encodes");
    assert_eq!(
        text(&bytes),
        format!(
            r#"{{"v":1,"seq":3,"action":{ACTION_JSON},"state":"failed","detail":"exit status 1: no route","attempts":2,"lastAttemptMs":1000,"lastAttemptWallMs":1700000000000,"lastError":"exit status 1: no route"}}"#
        )
    );
    assert_eq!(decode_journal_entry(&bytes), Ok(failed.clone()));
    // A stored wall time of 0 (the epoch's own millisecond, which no clock gives) reads as none,
    // and the entry is written back without it; the stream time 0 is a time.
    let at_epoch = format!(
        r#"{{"v":1,"seq":3,"action":{ACTION_JSON},"state":"failed","detail":"exit status 1: no route","attempts":2,"lastAttemptMs":0,"lastAttemptWallMs":0,"lastError":"exit status 1: no route"}}"#
    );
    let read = decode_journal_entry(at_epoch.as_bytes()).expect("decodes");
    assert_eq!(
        (read.attempts.count, read.attempts.last_at_ms(), read.attempts.last_wall_ms()),
        (2, Some(0), None)
    );
    assert_eq!(
        text(&encode_journal_entry(&read).expect("encodes")),
        at_epoch.replace(r#","lastAttemptWallMs":0"#, "")
    );

    let domain = CaptureDomain::new("sim1", "g1");
    let changes = [
        (
            JournalChange::Append(JournalEntry {
                seq: JournalSeq::new(1),
                action,
                state: EntryState::Approved,
                detail: None,
                executed_seq: None,
                attempts: Attempts::default(),
            }),
            format!(r#"{{"v":1,"change":"append","seq":1,"action":{ACTION_JSON},"state":"approved"}}"#),
        ),
        (
            JournalChange::Attempt { seq: JournalSeq::new(1), at_ms: 1_000, wall_ms: Some(1_700_000_000_000) },
            r#"{"v":1,"change":"attempt","seq":1,"atMs":1000,"wallMs":1700000000000}"#.into(),
        ),
        (
            JournalChange::Attempt { seq: JournalSeq::new(1), at_ms: 1_000, wall_ms: None },
            r#"{"v":1,"change":"attempt","seq":1,"atMs":1000}"#.into(),
        ),
        (
            JournalChange::SetState {
                seq: JournalSeq::new(1),
                state: EntryState::Executed,
                detail: Some("ok".into()),
                executed_seq: Some(1),
            },
            r#"{"v":1,"change":"set-state","seq":1,"state":"executed","detail":"ok","executedSeq":1}"#.into(),
        ),
        (
            JournalChange::RaiseHighWater {
                pool: "edge".into(),
                address: ip("10.0.0.10"),
                capture_domain: domain.clone(),
                capture_epoch: CaptureEpoch::from_stored(2),
                ownership_epoch: OwnershipEpoch::from_stored(1),
            },
            r#"{"v":1,"change":"raise-high-water","pool":"edge","address":"10.0.0.10","captureDomain":"provider:sim1:placement:g1","captureEpoch":2,"ownershipEpoch":1}"#.into(),
        ),
        (JournalChange::Compact { seqs: vec![JournalSeq::new(3), JournalSeq::new(4)] }, r#"{"v":1,"change":"compact","seqs":[3,4]}"#.into()),
    ];
    for (change, json) in changes {
        let bytes = encode_journal_change(&change).expect("encodes");
        assert_eq!(text(&bytes), json);
        assert_eq!(decode_journal_change(&bytes), Ok(change));
    }

    let mut high_water = HighWater::default();
    high_water.raise(
        "edge",
        ip("10.0.0.10"),
        &domain,
        CaptureEpoch::from_stored(2),
        OwnershipEpoch::from_stored(1),
    );
    let bytes = encode_high_water(&high_water).expect("encodes");
    assert_eq!(
        text(&bytes),
        r#"{"v":1,"marks":[{"pool":"edge","address":"10.0.0.10","captureDomain":"provider:sim1:placement:g1","captureEpoch":2,"ownershipEpoch":1}]}"#
    );
    assert_eq!(decode_high_water(&bytes), Ok(high_water));

    let bytes = encode_pool_spec(&golden_pool()).expect("encodes");
    assert_eq!(text(&bytes), format!(r#"{{"v":1,{}"#, &POOL_JSON[1..]));
    assert_eq!(decode_pool_spec(&bytes), Ok(golden_pool()));
}

#[test]
fn an_entry_written_before_attempts_were_kept_reads_as_never_attempted() {
    // The bytes a build before attempts wrote for a failed entry (version 1, no attempt fields).
    let old = format!(
        r#"{{"v":1,"seq":7,"action":{ACTION_JSON},"state":"failed","detail":"exit status 1: no route"}}"#
    );
    let entry = decode_journal_entry(old.as_bytes()).expect("an old record still reads");
    assert_eq!(entry.state, EntryState::Failed);
    assert_eq!(entry.detail.as_deref(), Some("exit status 1: no route"));
    assert_eq!(entry.attempts, Attempts::default(), "never attempted, as far as it says");
    assert_eq!(
        encode_journal_entry(&entry).expect("encodes"),
        old.as_bytes(),
        "and is written back the same"
    );
}

#[test]
fn a_full_pool_is_one_block() {
    let yaml = crate::spec::parse_pool_documents(
        "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {name: big}\n\
         spec: {addresses: [10.1.0.0/16], provider: p, placementGroup: g, members: [a]}\n",
    );
    let spec = yaml.expect("valid").remove(0).0;
    assert_eq!(spec.addresses.len(), 65_536);
    let bytes = encode_pool_spec(&spec).expect("encodes");
    assert!(text(&bytes).contains(r#""addresses":["10.1.0.0/16"]"#), "{}", text(&bytes));
    assert!(bytes.len() < 400, "{} bytes", bytes.len());
    assert_eq!(decode_pool_spec(&bytes), Ok(spec));
}

// ---- one test per CodecError case ----

#[test]
fn truncated_bytes_are_malformed() {
    let (value, _) = golden_events().remove(5);
    let bytes = encode_event(&value).expect("encodes");
    for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
        match decode_event(&bytes[..cut]) {
            Err(CodecError::Malformed { record: "event", reason }) => {
                assert!(reason.contains("EOF") || reason.contains("line 1"), "{reason}");
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

#[test]
fn garbage_is_malformed_and_names_what_is_wrong() {
    let cases: [(&[u8], &str); 10] = [
        (b"\xff\xfe\x00garbage", "expected value"),
        (b"[1,2,3]", "a record: a JSON object"),
        (b"{}", "its first key must be the format version"),
        (
            br#"{"event":"heartbeat","v":1,"at":1,"node":"a"}"#,
            "the first key must be the format version `v`, not `event`",
        ),
        (br#"{"v":"1","event":"heartbeat","at":1,"node":"a"}"#, "invalid type"),
        (br#"{"v":1,"event":"heartbeat","at":1,"node":"a","extra":2}"#, "unknown field `extra`"),
        (br#"{"v":1,"event":"hearbeat","at":1,"node":"a"}"#, "unknown variant `hearbeat`"),
        (br#"{"v":1,"event":"heartbeat","at":1,"node":"a"} trailing"#, "trailing characters"),
        (br#"{"v":1,"event":"tokens-raised","at":1,"by":-1}"#, "invalid value"),
        (br#"{"v":1,"event":"tokens-raised","at":1}"#, "missing field `by`"),
    ];
    for (bytes, expected) in cases {
        match decode_event(bytes) {
            Err(CodecError::Malformed { record: "event", reason }) => {
                assert!(reason.contains(expected), "{:?}: {reason}", String::from_utf8_lossy(bytes));
            }
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
        }
    }
    let wrong_kind = encode_event(&golden_events()[0].0).expect("encodes");
    assert!(matches!(
        decode_journal_entry(&wrong_kind),
        Err(CodecError::Malformed { record: "journal entry", .. })
    ));
}

#[test]
fn an_unknown_version_is_refused_before_its_fields_are_read() {
    let future = br#"{"v":2,"event":"teleport","at":1,"whatever":{"nested":[1,2]}}"#;
    assert_eq!(decode_event(future), Err(CodecError::UnknownVersion { record: "event", version: 2 }));
    assert_eq!(
        decode_journal_entry(br#"{"v":0}"#),
        Err(CodecError::UnknownVersion { record: "journal entry", version: 0 })
    );
    let message = decode_high_water(br#"{"v":7,"marks":[]}"#).expect_err("refused").to_string();
    assert_eq!(message, "a stored high-water marks is in format version 7; this build reads version 1");
}

#[test]
fn an_invalid_pool_inside_a_valid_envelope_is_refused() {
    let event_with = |spec: String| format!(r#"{{"v":1,"event":"pool-applied","at":0,"spec":{spec}}}"#);
    let cases = [
        (POOL_JSON.replace(r#""preferNodes":["a"]"#, r#""preferNodes":["zed"]"#), "is not a member"),
        (
            POOL_JSON.replace(r#""heartbeatTtlMs":3000"#, r#""heartbeatTtlMs":0"#),
            "heartbeatTTL must be longer than 0",
        ),
        (POOL_JSON.replace(r#""members":["a","b"]"#, r#""members":["a","a"]"#), "listed twice"),
        (POOL_JSON.replace(r#""members":["a","b"]"#, r#""members":[]"#), "at least one node"),
        (POOL_JSON.replace(r#""provider":"sim1""#, r#""provider":"sim 1""#), "contains ` `"),
        (POOL_JSON.replace(r#""10.0.0.16/29""#, r#""10.0.0.0/8""#), "more than 65536 addresses"),
        (POOL_JSON.replace(r#""10.0.0.16/29""#, r#""10.0.0.8/29""#), "listed twice"),
        (POOL_JSON.replace(r#""10.0.0.16/29""#, r#""10.0.0.17/29""#), "bits set below its prefix"),
        (POOL_JSON.replace(r#""10.0.0.16/29""#, r#""ten""#), "not an IPv4/IPv6 address"),
        (POOL_JSON.replace(r#""placementGroup":"g1""#, r#""placementGroup":"""#), "must not be empty"),
    ];
    for (spec, expected) in cases {
        match decode_event(event_with(spec.clone()).as_bytes()) {
            Err(CodecError::InvalidPool { pool, reason }) => {
                assert_eq!(pool, "edge");
                assert!(reason.contains(expected), "{spec}: {reason}");
            }
            other => panic!("{spec}: {other:?}"),
        }
        let alone = format!(r#"{{"v":1,{}"#, &spec[1..]);
        assert!(matches!(decode_pool_spec(alone.as_bytes()), Err(CodecError::InvalidPool { .. })), "{spec}");
    }
}

#[test]
fn an_invalid_pool_is_not_written() {
    let valid = golden_pool();
    let cases = [
        (PoolSpec { prefer_nodes: vec!["zed".into()], ..valid.clone() }, "is not a member"),
        (PoolSpec { addresses: vec![ip("10.0.0.2"), ip("10.0.0.1")], ..valid.clone() }, "canonical order"),
        (PoolSpec { addresses: vec![], ..valid.clone() }, "at least one address"),
        (PoolSpec { heartbeat_ttl_ms: 0, ..valid.clone() }, "longer than 0"),
        (PoolSpec { name: "two words".into(), ..valid.clone() }, "contains ` `"),
    ];
    for (spec, expected) in cases {
        let applied = event(0, EventKind::PoolApplied { spec: Box::new(spec.clone()) });
        for result in [encode_event(&applied).map(drop), encode_pool_spec(&spec).map(drop)] {
            match result {
                Err(CodecError::InvalidPool { reason, .. }) => assert!(reason.contains(expected), "{reason}"),
                other => panic!("{spec:?}: {other:?}"),
            }
        }
    }
}

#[test]
fn records_that_contradict_themselves_are_inconsistent() {
    let action_with = |from: &str, to: &str| ACTION_JSON.replace(from, to);
    let entry = |action: &str, tail: &str| format!(r#"{{"v":1,"seq":1,"action":{action},{tail}}}"#);
    let cases = [
        (
            entry(&action_with(r#""captureEpoch":1"#, r#""captureEpoch":2"#), r#""state":"approved""#),
            "not the one its fields give",
        ),
        (
            entry(&action_with(r#""holder":"a""#, r#""holder":"b""#), r#""state":"approved""#),
            "not the one its fields give",
        ),
        (
            entry(&action_with("provider:sim1:placement:g1", "sim1/g1"), r#""state":"approved""#),
            "capture domain `sim1/g1`",
        ),
        (
            entry(
                &action_with("provider:sim1:placement:g1", "provider:sim1:placement:g 1"),
                r#""state":"approved""#,
            ),
            "contains ` `",
        ),
        (entry(ACTION_JSON, r#""state":"skipped""#), "without its `reason`"),
        (entry(ACTION_JSON, r#""state":"failed","reason":"holder-mismatch""#), "with a skip reason"),
        (entry(ACTION_JSON, r#""state":"executed""#), "without its `executedSeq`"),
        (entry(ACTION_JSON, r#""state":"executed","executedSeq":0"#), "starts at 1"),
        (entry(ACTION_JSON, r#""state":"approved","executedSeq":3"#), "`executedSeq` on a `approved`"),
        (entry(ACTION_JSON, r#""state":"failed","attempts":2"#), "`attempts` without its `lastAttemptMs`"),
        (entry(ACTION_JSON, r#""state":"failed","lastAttemptMs":5"#), "without `attempts`"),
        (
            entry(ACTION_JSON, r#""state":"failed","attempts":1,"lastAttemptWallMs":5"#),
            "`attempts` without its `lastAttemptMs`",
        ),
        (
            entry(ACTION_JSON, r#""state":"approved""#).replace(r#""seq":1"#, r#""seq":0"#),
            "sequence number 0",
        ),
    ];
    for (json, expected) in cases {
        match decode_journal_entry(json.as_bytes()) {
            Err(CodecError::Inconsistent { record: "journal entry", reason }) => {
                assert!(reason.contains(expected), "{json}: {reason}");
            }
            other => panic!("{json}: {other:?}"),
        }
    }
    let cases = [
        (r#"{"v":1,"change":"compact","seqs":[4,3]}"#, "4 then 3 are not ascending"),
        (r#"{"v":1,"change":"compact","seqs":[3,3]}"#, "3 then 3 are not ascending"),
        (r#"{"v":1,"change":"compact","seqs":[0,3]}"#, "sequence number 0"),
        (r#"{"v":1,"change":"set-state","seq":0,"state":"approved"}"#, "sequence number 0"),
        (r#"{"v":1,"change":"attempt","seq":0,"atMs":5}"#, "sequence number 0"),
    ];
    for (json, expected) in cases {
        match decode_journal_change(json.as_bytes()) {
            Err(CodecError::Inconsistent { record: "journal change", reason }) => {
                assert!(reason.contains(expected), "{json}: {reason}");
            }
            other => panic!("{json}: {other:?}"),
        }
    }
    for change in [
        JournalChange::Compact { seqs: vec![JournalSeq::new(2), JournalSeq::new(1)] },
        JournalChange::Compact { seqs: vec![JournalSeq::new(0)] },
    ] {
        assert!(
            matches!(encode_journal_change(&change), Err(CodecError::Inconsistent { .. })),
            "refused before it is written: {change:?}"
        );
    }
    let row = |pool: &str, address: &str, capture: u64, ownership: u64| {
        format!(
            r#"{{"pool":"{pool}","address":"{address}","captureDomain":"provider:sim1:placement:g1","captureEpoch":{capture},"ownershipEpoch":{ownership}}}"#
        )
    };
    let marks = |rows: &[String]| format!(r#"{{"v":1,"marks":[{}]}}"#, rows.join(","));
    let cases = [
        (marks(&[row("p", "10.0.0.2", 1, 1), row("p", "10.0.0.1", 1, 1)]), "out of order or repeated"),
        (marks(&[row("p", "10.0.0.1", 1, 1), row("p", "10.0.0.1", 2, 1)]), "out of order or repeated"),
        (marks(&[row("p q", "10.0.0.1", 1, 1)]), "contains ` `"),
    ];
    for (json, expected) in cases {
        match decode_high_water(json.as_bytes()) {
            Err(CodecError::Inconsistent { record: "high-water marks", reason }) => {
                assert!(reason.contains(expected), "{json}: {reason}");
            }
            other => panic!("{json}: {other:?}"),
        }
    }
    let two_lines = marks(&[
        row("p", "10.0.0.1", 1, 1),
        row("p", "10.0.0.1", 1, 2).replace("placement:g1", "placement:g2"),
    ]);
    match decode_high_water(two_lines.as_bytes()) {
        Err(CodecError::Inconsistent { reason, .. }) => {
            assert!(reason.contains("two ownershipEpochs"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_value_the_serializer_refuses_is_unwritable() {
    struct Refused;
    impl Serialize for Refused {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("no wire form"))
        }
    }
    assert_eq!(
        seal("test record", &Refused),
        Err(CodecError::Unwritable { record: "test record", reason: "no wire form".into() })
    );
}

// ---- round trips of random values ----

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9._-]{0,6}"
}

/// Free text: any Unicode, control characters and quotes included.
fn free_text() -> impl Strategy<Value = String> {
    any::<String>()
}

/// Addresses from two small ranges, so that random sets have runs that become CIDR blocks.
fn address() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        (0u32..96).prop_map(|offset| IpAddr::from((0x0a00_0000 + offset).to_be_bytes())),
        (0u128..40).prop_map(|offset| IpAddr::from((0x2001_0db8_u128 << 96 | offset).to_be_bytes())),
    ]
}

fn verb() -> impl Strategy<Value = Verb> {
    prop::sample::select(Verb::ALL.to_vec())
}

fn stale_reason() -> impl Strategy<Value = StaleReason> {
    prop::sample::select(vec![
        StaleReason::StaleEpoch,
        StaleReason::StaleOwnerEpoch,
        StaleReason::HolderMismatch,
        StaleReason::ReleaseOfCurrent,
    ])
}

/// A valid pool spec: what the parser can produce.
fn pool_spec() -> impl Strategy<Value = PoolSpec> {
    let members = prop::collection::btree_set(name(), 1..5)
        .prop_map(|set| set.into_iter().collect::<Vec<_>>())
        .prop_shuffle();
    let policy = members.prop_flat_map(|members| {
        let count = members.len();
        (Just(members.clone()), prop::sample::subsequence(members, 0..=count).prop_shuffle())
    });
    (
        (name(), prop::collection::btree_set(address(), 1..40), name(), name(), policy),
        (
            prop::sample::select(vec![Authority::None, Authority::Vrrp]),
            prop::sample::select(vec![Approval::Auto, Approval::Manual]),
            0u64..10_000_000,
            1u64..10_000_000,
            0u64..10_000_000,
            any::<(bool, bool, bool)>(),
        ),
    )
        .prop_map(
            |(
                (name, addresses, provider, placement_group, (members, prefer_nodes)),
                (authority, approval, deprovision_hold_ms, heartbeat_ttl_ms, promotion_hold_ms, flags),
            )| PoolSpec {
                name,
                addresses: addresses.into_iter().collect(),
                provider,
                placement_group,
                members,
                authority,
                approval,
                deprovision_hold_ms,
                heartbeat_ttl_ms,
                promotion_hold_ms,
                epoch_locking: flags.0,
                prefer_nodes,
                preempt: flags.1,
                auto_failover: flags.2,
            },
        )
}

fn event_kind() -> impl Strategy<Value = EventKind> {
    let text = free_text;
    prop_oneof![
        text().prop_map(|node| EventKind::Heartbeat { node }),
        text().prop_map(|node| EventKind::Drain { node }),
        text().prop_map(|node| EventKind::Undrain { node }),
        (text(), any::<bool>()).prop_map(|(node, healthy)| EventKind::Health { node, healthy }),
        (text(), prop::sample::select(vec![VrrpState::Master, VrrpState::Backup, VrrpState::Fault]))
            .prop_map(|(node, state)| EventKind::Vrrp { node, state }),
        pool_spec().prop_map(|spec| EventKind::PoolApplied { spec: Box::new(spec) }),
        text().prop_map(|pool| EventKind::PoolDeleted { pool }),
        (text(), address()).prop_map(|(pool, address)| EventKind::Desire { pool, address }),
        (
            text(),
            address(),
            prop::collection::vec(text(), 0..4),
            prop::option::of(prop::collection::vec(text(), 0..3))
        )
            .prop_map(|(provider, address, holders, others)| {
                // A scope holds the holders (and maybe more NICs).
                let scope = others.map(|others| holders.iter().cloned().chain(others).collect());
                EventKind::Inventory { provider, address, holders, scope }
            }),
        any::<u64>().prop_map(|by| EventKind::TokensRaised { by }),
    ]
}

fn stamped_action() -> impl Strategy<Value = StampedAction> {
    (name(), address(), verb(), name(), name(), name(), name(), any::<u64>(), any::<u64>()).prop_map(
        |(pool, address, verb, holder, provider, nic, placement_group, capture, ownership)| {
            StampedAction::new(
                &pool,
                address,
                verb,
                &holder,
                &provider,
                &nic,
                CaptureDomain::new(&provider, &placement_group),
                CaptureEpoch::from_stored(capture),
                OwnershipEpoch::from_stored(ownership),
            )
        },
    )
}

/// A state with the execution order `NodeEngine` gives it.
fn state_and_seq() -> impl Strategy<Value = (EntryState, Option<u64>)> {
    prop_oneof![
        Just((EntryState::Pending, None)),
        Just((EntryState::Approved, None)),
        (1u64..).prop_map(|seq| (EntryState::Executed, Some(seq))),
        Just((EntryState::Failed, None)),
        stale_reason().prop_map(|reason| (EntryState::Skipped(reason), None)),
    ]
}

fn attempts() -> impl Strategy<Value = Attempts> {
    prop_oneof![
        prop::option::of(free_text()).prop_map(|last_error| Attempts::handed_out(
            0,
            0,
            None,
            last_error.as_deref().map(crate::names::shared)
        )),
        (1u32.., any::<u64>(), prop::option::of(any::<u64>()), prop::option::of(free_text())).prop_map(
            |(count, at, wall, last_error)| {
                Attempts::handed_out(count, at, wall, last_error.as_deref().map(crate::names::shared))
            }
        ),
    ]
}

fn journal_entry() -> impl Strategy<Value = JournalEntry> {
    (1u64.., stamped_action(), state_and_seq(), prop::option::of(free_text()), attempts()).prop_map(
        |(seq, action, (state, executed_seq), detail, attempts)| JournalEntry {
            seq: JournalSeq::new(seq),
            action,
            state,
            detail: detail.as_deref().map(crate::names::shared),
            executed_seq: executed_seq.and_then(std::num::NonZeroU64::new),
            attempts,
        },
    )
}

fn journal_change() -> impl Strategy<Value = JournalChange> {
    prop_oneof![
        journal_entry().prop_map(JournalChange::Append),
        (1u64.., state_and_seq(), prop::option::of(free_text())).prop_map(
            |(seq, (state, executed_seq), detail)| JournalChange::SetState {
                seq: JournalSeq::new(seq),
                state,
                detail: detail.as_deref().map(crate::names::shared),
                executed_seq
            }
        ),
        (name(), address(), name(), name(), any::<u64>(), any::<u64>()).prop_map(
            |(pool, address, provider, group, capture, ownership)| JournalChange::RaiseHighWater {
                pool,
                address,
                capture_domain: CaptureDomain::new(&provider, &group),
                capture_epoch: CaptureEpoch::from_stored(capture),
                ownership_epoch: OwnershipEpoch::from_stored(ownership),
            }
        ),
        (1u64.., any::<u64>(), prop::option::of(any::<u64>())).prop_map(|(seq, at_ms, wall_ms)| {
            JournalChange::Attempt { seq: JournalSeq::new(seq), at_ms, wall_ms }
        }),
        prop::collection::btree_set(1u64.., 0..20).prop_map(|seqs| JournalChange::Compact {
            seqs: seqs.into_iter().map(JournalSeq::new).collect()
        }),
    ]
}

/// High-water marks from random raises over a few pools, addresses and lines.
fn high_water() -> impl Strategy<Value = HighWater> {
    let raise = (
        prop::sample::select(vec!["p", "q", "r"]),
        address(),
        prop::sample::select(vec![("sim1", "g1"), ("sim1", "g2"), ("aws", "g1")]),
        0u64..20,
        0u64..20,
    );
    prop::collection::vec(raise, 0..40).prop_map(|raises| {
        let mut high_water = HighWater::default();
        for (pool, address, (provider, group), capture, ownership) in raises {
            let domain = CaptureDomain::new(provider, group);
            high_water.raise(
                pool,
                address,
                &domain,
                CaptureEpoch::from_stored(capture),
                OwnershipEpoch::from_stored(ownership),
            );
        }
        high_water
    })
}

/// The marks as sorted plain rows: equal rows, equal marks (the interning order may differ).
fn sorted_rows(high_water: &HighWater) -> Vec<(String, IpAddr, String, u64, u64)> {
    let mut rows: Vec<_> = high_water
        .rows()
        .map(|(pool, address, domain, capture, ownership)| {
            (pool.to_owned(), address, domain.to_string(), capture.get(), ownership.get())
        })
        .collect();
    rows.sort();
    rows
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn events_round_trip(at_ms in any::<u64>(), kind in event_kind()) {
        let value = Event { at_ms, kind };
        let bytes = encode_event(&value).expect("a valid event encodes");
        prop_assert_eq!(decode_event(&bytes), Ok(value));
    }

    #[test]
    fn pool_specs_round_trip(spec in pool_spec()) {
        let bytes = encode_pool_spec(&spec).expect("a valid pool encodes");
        prop_assert_eq!(decode_pool_spec(&bytes), Ok(spec));
    }

    #[test]
    fn journal_entries_round_trip(entry in journal_entry()) {
        let bytes = encode_journal_entry(&entry).expect("encodes");
        prop_assert_eq!(decode_journal_entry(&bytes), Ok(entry.clone()));
        let bytes = encode_stamped_action(&entry.action).expect("encodes");
        prop_assert_eq!(decode_stamped_action(&bytes), Ok(entry.action));
    }

    #[test]
    fn journal_changes_round_trip(change in journal_change()) {
        let bytes = encode_journal_change(&change).expect("encodes");
        prop_assert_eq!(decode_journal_change(&bytes), Ok(change));
    }

    #[test]
    fn high_water_marks_round_trip_as_rows(marks in high_water()) {
        let bytes = encode_high_water(&marks).expect("encodes");
        let decoded = decode_high_water(&bytes).expect("decodes");
        prop_assert_eq!(sorted_rows(&decoded), sorted_rows(&marks));
        prop_assert_eq!(encode_high_water(&decoded).expect("encodes"), bytes, "the stored form is canonical");
    }

    #[test]
    fn damaged_records_are_errors_never_panics(
        kind in event_kind(),
        entry in journal_entry(),
        position in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<bool>(),
    ) {
        let damage = |mut bytes: Vec<u8>| {
            let at = position.index(bytes.len());
            if cut { bytes.truncate(at) } else { bytes[at] = byte }
            bytes
        };
        let event_bytes = damage(encode_event(&Event { at_ms: 1, kind }).expect("encodes"));
        let entry_bytes = damage(encode_journal_entry(&entry).expect("encodes"));
        for bytes in [&event_bytes, &entry_bytes] {
            whatever_decodes_is_valid(bytes)?;
        }
    }

    #[test]
    fn arbitrary_bytes_are_errors_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        whatever_decodes_is_valid(&bytes)?;
    }
}

/// Decodes `bytes` as every kind of record. Decoding must return, not panic; and whatever does
/// decode is a valid value: it encodes again (encoding re-checks pools) and reads back equal.
fn whatever_decodes_is_valid(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(value) = decode_event(bytes) {
        prop_assert_eq!(decode_event(&encode_event(&value).expect("a decoded event encodes")), Ok(value));
    }
    if let Ok(value) = decode_pool_spec(bytes) {
        prop_assert_eq!(
            decode_pool_spec(&encode_pool_spec(&value).expect("a decoded pool encodes")),
            Ok(value)
        );
    }
    if let Ok(value) = decode_journal_entry(bytes) {
        let again = encode_journal_entry(&value).expect("a decoded entry encodes");
        prop_assert_eq!(decode_journal_entry(&again), Ok(value));
    }
    if let Ok(value) = decode_journal_change(bytes) {
        let again = encode_journal_change(&value).expect("a decoded change encodes");
        prop_assert_eq!(decode_journal_change(&again), Ok(value));
    }
    if let Ok(value) = decode_high_water(bytes) {
        let again = encode_high_water(&value).expect("decoded marks encode");
        prop_assert_eq!(sorted_rows(&decode_high_water(&again).expect("decodes")), sorted_rows(&value));
    }
    Ok(())
}
