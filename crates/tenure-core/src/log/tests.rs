//! The vocabulary of events against the forms that speak it: every kind of [`EVENT_KINDS`] has a
//! golden record (`codec/tests.rs`), whose stored form names the kind and its fields exactly as
//! the vocabulary does, and whose `Display` starts with the same name. The scenario form is checked
//! in `scenario/tests.rs`.

use std::collections::BTreeSet;

use serde_json::Value;

use super::*;
use crate::codec::tests::golden_events;
use crate::codec::{decode_event, encode_event};

/// One event of every kind (two `inventory`, with and without `scope`).
fn samples() -> Vec<Event> {
    golden_events().into_iter().map(|(event, _)| event).collect()
}

/// A record as a JSON object.
fn object(bytes: &[u8]) -> serde_json::Map<String, Value> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(map)) => map,
        other => panic!("a record is a JSON object, got {other:?}"),
    }
}

/// A record with its version first (as the codec reads it), then `fields` in any order.
fn record_of(fields: &serde_json::Map<String, Value>) -> Vec<u8> {
    let mut fields = fields.clone();
    fields.remove("v");
    let body = serde_json::to_string(&fields).expect("a map writes");
    format!(r#"{{"v":1,{}"#, &body[1..]).into_bytes()
}

/// The top-level keys of a JSON object, in the order written.
struct Keys(Vec<String>);

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeysVisitor;
        impl<'de> serde::de::Visitor<'de> for KeysVisitor {
            type Value = Keys;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(Keys(keys))
            }
        }
        deserializer.deserialize_map(KeysVisitor)
    }
}

#[test]
fn every_kind_has_one_name_and_a_sample() {
    let names: BTreeSet<&str> = EVENT_KINDS.iter().map(|kind| kind.name).collect();
    assert_eq!(names.len(), EVENT_KINDS.len(), "two kinds share a name");
    let sampled: BTreeSet<&str> = samples().iter().map(|event| event.kind.wire_name()).collect();
    assert_eq!(sampled, names, "the samples cover every kind (and the match of `vocabulary` every variant)");
    for event in samples() {
        let vocabulary = event.kind.vocabulary();
        assert_eq!(EventKind::named(vocabulary.name), Some(vocabulary), "{}", vocabulary.name);
        for optional in vocabulary.optional {
            assert!(vocabulary.fields.contains(optional), "{}: `{optional}` is not a field", vocabulary.name);
        }
    }
    assert_eq!(EventKind::named("reconcile"), None, "a local step is not a log event");
}

#[test]
fn the_stored_form_names_each_kind_and_its_fields_as_the_vocabulary_does() {
    for event in samples() {
        let vocabulary = event.kind.vocabulary();
        let name = vocabulary.name;
        let bytes = encode_event(&event).expect("encodes");
        let record = object(&bytes);
        assert_eq!(record.get("event"), Some(&Value::from(name)), "the tag of {name}");
        assert_eq!(decode_event(&record_of(&record)), Ok(event.clone()), "{name} rewritten");
        let Keys(keys) = serde_json::from_slice(&bytes).expect("an object");
        let mut expected = vec!["v", "event", "at"];
        expected.extend(vocabulary.fields.iter().filter(|field| record.contains_key(**field)));
        assert_eq!(keys, expected, "the fields of {name}, in record order");
        for field in vocabulary.fields {
            assert!(
                record.contains_key(*field) || vocabulary.optional.contains(field),
                "{name}: only an optional field may be left out, `{field}` was"
            );
            // Without the field, the record reads only if the vocabulary says it may be left out.
            let mut without = record.clone();
            without.remove(*field);
            match decode_event(&record_of(&without)) {
                Ok(_) => assert!(vocabulary.optional.contains(field), "{name} reads without `{field}`"),
                Err(e) => {
                    assert!(!vocabulary.optional.contains(field), "{name} needs optional `{field}`: {e}");
                    assert!(e.to_string().contains(&format!("missing field `{field}`")), "{name}: {e}");
                }
            }
        }
    }
}

#[test]
fn display_names_each_kind_by_its_wire_name() {
    for event in samples() {
        let line = event.kind.to_string();
        assert!(line.starts_with(&format!("{} ", event.kind.wire_name())), "{line}");
        assert_eq!(line.lines().count(), 1, "{line}");
    }
    let lines: Vec<String> = samples().iter().map(|event| event.kind.to_string()).collect();
    let key = crate::codec::tests::KEY;
    assert_eq!(
        lines,
        [
            "heartbeat a".to_owned(),
            "drain a".into(),
            "undrain a".into(),
            "health a healthy=false".into(),
            "vrrp a master".into(),
            "pool-applied edge (10 addresses)".into(),
            "pool-deleted edge".into(),
            "desire edge/10.0.0.10".into(),
            "undesire edge/10.0.0.10".into(),
            format!("approve {key}"),
            format!("action-result a {key}"),
            "inventory sim1 2001:db8::1".into(),
            "inventory lan 10.0.0.10".into(),
            "tokens-raised by 1000000".into(),
            "node-registered c nic=eni-c".into(),
            "node-retired b force".into(),
        ]
    );
}
