//! The input parsers never panic, whatever they are given (SPEC 12): arbitrary bytes (lossily
//! decoded) and random mutations of a valid pool file and a valid scenario (byte flips, YAML
//! punctuation inserted, truncations, lines deleted or repeated). When they refuse an input, every
//! error renders as exactly one line.

use proptest::prelude::*;
use tenure_core::input::{InputError, expand_addresses, parse_duration_ms};
use tenure_core::scenario::parse_scenario;
use tenure_core::spec::parse_pool_documents;

/// Two pools in one file, in the shape of the SPEC 10 example.
const POOLS: &str = "\
apiVersion: tenure.dev/v1alpha1
kind: MobilityPool
metadata: {name: edge-vips, labels: {team: net}}
spec:
  addresses: [10.0.0.10/32, 10.0.0.16/29, 2001:db8::1/128]
  provider: sim1
  placementGroup: g1
  members: [a, b, c]
  authority: none
  approval: auto
  deprovisionHoldDuration: 5s
  heartbeatTTL: 3s
  promotionHold: 1m30s
  ipOwnershipPolicy:
    type: centralized
    epochLocking: true
    preferNodes: [a]
    preempt: false
    autoFailover: true
---
apiVersion: tenure.dev/v1alpha1
kind: MobilityPool
metadata:
  name: other
spec:
  addresses:
    - 10.0.1.0/30
    - 10.0.2.1
  provider: sim1
  placementGroup: g2
  members:
    - a
    - b
";

/// A scenario that uses every kind of timeline entry.
const SCENARIO: &str = "\
nodes:
  - {name: a, provider: sim1, placementGroup: g1, priority: 10, nic: eni-a}
  - {name: b, provider: sim1, placementGroup: g1, nic: eni-b, capacity: 2}
  - name: c
    provider: lan
    placementGroup: g1
    nic: eth0
providers:
  - {name: sim1, kind: sim-cloud}
  - {name: lan, kind: sim-onprem}
pools:
  - apiVersion: tenure.dev/v1alpha1
    kind: MobilityPool
    metadata: {name: edge}
    spec:
      addresses: [10.0.0.10/32, 10.0.0.11]
      provider: sim1
      placementGroup: g1
      members: [a, b]
      heartbeatTTL: 3s
timeline:
  - {at: 0, event: heartbeat, node: a}
  - {at: 0, event: heartbeat, node: b}
  - {at: 5, event: reconcile, node: a}
  - {at: 6, event: execute, node: a}
  - {at: 7, event: pause, node: a}
  - {at: 50, event: resume, node: a}
  - {at: 60, event: restart, node: a}
  - {at: 70, event: partition, node: a}
  - {at: 80, event: heal, node: a}
  - {at: 90, event: drain, node: b}
  - {at: 91, event: undrain, node: b}
  - {at: 92, event: health, node: b, healthy: false}
  - {at: 93, event: vrrp, node: b, state: master}
  - {at: 94, event: undesire, pool: edge, address: 10.0.0.11}
  - {at: 95, event: desire, pool: edge, address: 10.0.0.11}
  - {at: 96, event: approve, idempotencyKey: k1}
  - {at: 97, event: action-result, node: a, idempotencyKey: k1, outcome: failed, detail: boom}
  - {at: 98, event: inventory, provider: sim1, address: 10.0.0.10, holders: [eni-a]}
  - {at: 99, event: pool-deleted, pool: edge}
  - at: 100
    event: pool-applied
    spec:
      apiVersion: tenure.dev/v1alpha1
      kind: MobilityPool
      metadata: {name: late}
      spec:
        addresses: ['fd00::/126']
        provider: lan
        placementGroup: g1
        members: [c]
";

/// Pieces of text that matter to YAML or to the parsers, for insertion.
const TOKENS: &[&str] = &[
    ":",
    ": ",
    "- ",
    "[",
    "]",
    "{",
    "}",
    ",",
    "\t",
    "\"",
    "'",
    "#",
    "&x ",
    "*x",
    "!!str ",
    "---\n",
    "\n",
    "  ",
    "0",
    "-1",
    "1.5",
    "/15",
    "/0",
    "::",
    "~",
    "null",
    "true",
    "<<: ",
    "|\n",
    ">-\n",
    "\u{0}",
    "\u{feff}",
    "\u{1F600}",
    "membres",
    "9999999999999999999999",
    "ms",
    "µs",
    "1h1m1s",
    "255.255.255.255",
    "/",
];

#[derive(Clone, Debug)]
enum Mutation {
    /// XOR one byte (index taken modulo the length).
    Flip(usize, u8),
    /// Insert one of [`TOKENS`].
    Insert(usize, usize),
    /// Keep only the first bytes.
    Truncate(usize),
    /// Delete one line.
    DeleteLine(usize),
    /// Repeat one line.
    RepeatLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 1..=255u8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        3 => (any::<usize>(), 0..TOKENS.len()).prop_map(|(i, t)| Mutation::Insert(i, t)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        2 => any::<usize>().prop_map(Mutation::DeleteLine),
        1 => any::<usize>().prop_map(Mutation::RepeatLine),
    ]
}

fn apply(text: &str, mutations: &[Mutation]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for m in mutations {
        match *m {
            Mutation::Flip(i, b) if !bytes.is_empty() => {
                let i = i % bytes.len();
                bytes[i] ^= b;
            }
            Mutation::Flip(..) => {}
            Mutation::Insert(i, t) => {
                let i = i % (bytes.len() + 1);
                bytes.splice(i..i, TOKENS[t].bytes());
            }
            Mutation::Truncate(i) => bytes.truncate(i % (bytes.len() + 1)),
            Mutation::DeleteLine(n) | Mutation::RepeatLine(n) => {
                let mut lines: Vec<Vec<u8>> = bytes.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
                let n = n % lines.len();
                if matches!(m, Mutation::DeleteLine(_)) {
                    lines.remove(n);
                } else {
                    let line = lines[n].clone();
                    lines.insert(n, line);
                }
                bytes = lines.join(&b'\n');
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A refusal must say something, on one line, at a place inside the text (or at no place).
fn assert_errors_are_one_line(text: &str, errors: &[InputError]) {
    assert!(!errors.is_empty(), "a refusal carries at least one error");
    // YAML ends a line at `\r\n`, `\r` or `\n`.
    let breaks = text.replace("\r\n", "\n").matches(['\r', '\n']).count();
    let lines = u64::try_from(breaks).expect("fits") + 1;
    for e in errors {
        assert!(!e.message.trim().is_empty(), "empty message at {:?}", e.position);
        let rendered = e.render("f.yaml");
        assert_eq!(rendered.lines().count(), 1, "not one line: {rendered:?}");
        assert!(e.position.line <= lines, "{rendered:?} points past the end ({lines} lines)");
    }
}

fn check_pools(text: &str) {
    if let Err(errors) = parse_pool_documents(text) {
        assert_errors_are_one_line(text, &errors);
    }
}

fn check_scenario(text: &str) {
    if let Err(errors) = parse_scenario(text) {
        assert_errors_are_one_line(text, &errors);
    }
}

#[test]
fn the_seeds_are_valid() {
    let pools = parse_pool_documents(POOLS).expect("POOLS is valid");
    assert_eq!(pools.len(), 2);
    let scenario = parse_scenario(SCENARIO).expect("SCENARIO is valid");
    assert_eq!(scenario.timeline.len(), 20);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        check_pools(&text);
        check_scenario(&text);
        let _ = parse_duration_ms(&text);
        let _ = expand_addresses(&text);
    }

    #[test]
    fn arbitrary_strings_never_panic(text in any::<String>()) {
        check_pools(&text);
        check_scenario(&text);
        let _ = parse_duration_ms(&text);
        let _ = expand_addresses(&text);
    }

    #[test]
    fn mutated_pools_never_panic(mutations in proptest::collection::vec(mutation(), 1..6)) {
        check_pools(&apply(POOLS, &mutations));
    }

    #[test]
    fn mutated_scenarios_never_panic(mutations in proptest::collection::vec(mutation(), 1..6)) {
        check_scenario(&apply(SCENARIO, &mutations));
    }

    #[test]
    fn duration_like_text_never_panics(text in "[0-9.]{0,25}(ns|us|µs|ms|s|m|h|x|)[0-9.]{0,25}(ns|us|µs|ms|s|m|h|)") {
        if parse_duration_ms(&text).is_ok() {
            // Only `0` may go without a unit.
            prop_assert!(text == "0" || text.chars().any(|c| c.is_ascii_alphabetic() || c == 'µ'));
        }
    }

    #[test]
    fn address_like_text_never_panics(
        text in "([0-9]{1,4}\\.){0,4}[0-9]{0,4}(/[0-9]{0,3})?|[0-9a-fA-F:]{0,40}(/[0-9]{0,4})?",
    ) {
        if let Ok(addresses) = expand_addresses(&text) {
            prop_assert!(!addresses.is_empty());
            prop_assert!(addresses.len() as u64 <= tenure_core::input::POOL_ADDRESSES_MAX);
        }
    }
}
