//! Strict node declarations and provider names (SPEC 1, 10, 11): the one rule for what a valid
//! node is, shared by replay scenarios (`nodes:`) and agent configs (`node:` / `nodes:`).
//!
//! A node names a provider, a placement group, a NIC, a priority and a capacity. Names are
//! key-safe ([`check_name`]), a node is declared once, its provider is a declared one, and one NIC
//! of one provider belongs to one node. Every error names the place of the offending value.

use std::collections::BTreeSet;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::input::{InputError, Position, check_name};
use crate::model::{NodeSpec, ProviderSpec};

/// A node as written (`{name, provider, placementGroup, nic, priority, capacity}`), before
/// validation. Unknown fields are errors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawNode {
    name: Spanned<String>,
    provider: Spanned<String>,
    placement_group: Spanned<String>,
    #[serde(default)]
    priority: i64,
    nic: Spanned<String>,
    capacity: Option<u64>,
}

/// Where a validated node's parts were written, for errors found later (a pool naming the node).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeSource {
    /// Position of `name`.
    pub name: Position,
    /// Position of `provider`.
    pub provider: Position,
    /// Position of `nic`.
    pub nic: Position,
}

/// Checks a provider's name: key-safe, and not one of `earlier` (the names declared before it).
/// The error points at the name.
pub fn check_provider_name(name: &Spanned<String>, earlier: &[&str]) -> Result<(), InputError> {
    let position = Position::of_spanned(name);
    check_name("provider name", &name.value).map_err(|m| InputError::at(position, m))?;
    if earlier.contains(&name.value.as_str()) {
        return Err(InputError::at(position, format!("provider `{}` is declared twice", name.value)));
    }
    Ok(())
}

/// Validates node declarations in order against the declared provider names. Returns every node
/// (also those with errors, so that later checks still know their names) with where it was
/// written, and every error found.
pub fn validate_nodes<'a>(
    raws: impl IntoIterator<Item = &'a RawNode>,
    providers: &[&str],
) -> (Vec<(NodeSpec, NodeSource)>, Vec<InputError>) {
    let mut errors = Vec::new();
    let mut nodes: Vec<(NodeSpec, NodeSource)> = Vec::new();
    let mut nics: BTreeSet<(&str, &str)> = BTreeSet::new();
    for n in raws {
        for (what, field) in [("node name", &n.name), ("placementGroup", &n.placement_group)] {
            if let Err(m) = check_name(what, &field.value) {
                errors.push(InputError::at(Position::of_spanned(field), m));
            }
        }
        if n.nic.value.trim().is_empty() {
            errors.push(InputError::at(Position::of_spanned(&n.nic), "nic must be non-empty".to_owned()));
        }
        if nodes.iter().any(|(m, _)| m.name == n.name.value) {
            errors.push(InputError::at(
                Position::of_spanned(&n.name),
                format!("node `{}` is declared twice", n.name.value),
            ));
        }
        if !providers.contains(&n.provider.value.as_str()) {
            errors.push(InputError::at(
                Position::of_spanned(&n.provider),
                format!("node `{}` names undeclared provider `{}`", n.name.value, n.provider.value),
            ));
        }
        if !nics.insert((&n.provider.value, &n.nic.value)) {
            errors.push(InputError::at(
                Position::of_spanned(&n.nic),
                format!("nic `{}` of provider `{}` belongs to two nodes", n.nic.value, n.provider.value),
            ));
        }
        let spec = NodeSpec {
            name: n.name.value.clone(),
            provider: n.provider.value.clone(),
            placement_group: n.placement_group.value.clone(),
            priority: n.priority,
            nic: n.nic.value.clone(),
            capacity: n.capacity,
        };
        let source = NodeSource {
            name: Position::of_spanned(&n.name),
            provider: Position::of_spanned(&n.provider),
            nic: Position::of_spanned(&n.nic),
        };
        nodes.push((spec, source));
    }
    (nodes, errors)
}

/// The fleet as every agent of it must see it, and as a store backup records the agent that wrote
/// it: one line per node, sorted by name, with what arbitration reads of it, then one line per
/// provider the nodes name, with its kind. Two configs project a log alike when these agree.
#[must_use]
pub fn fleet_text(nodes: &[NodeSpec], providers: &[ProviderSpec]) -> String {
    let mut nodes: Vec<_> = nodes.iter().collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut lines: Vec<String> = nodes
        .iter()
        .map(|n| {
            let capacity = n.capacity.map_or_else(|| "none".to_owned(), |c| c.to_string());
            format!(
                "node {} provider={} placementGroup={} nic={} priority={} capacity={capacity}",
                n.name, n.provider, n.placement_group, n.nic, n.priority
            )
        })
        .collect();
    let mut named: Vec<_> = providers.iter().filter(|p| nodes.iter().any(|n| n.provider == p.name)).collect();
    named.sort_by(|a, b| a.name.cmp(&b.name));
    lines.extend(named.iter().map(|p| format!("provider {} kind={}", p.name, p.kind.as_str())));
    lines.join("\n")
}

/// The nodes and providers of a [`fleet_text`], in its order: the fleet a log began with (the
/// registry the first agent wrote; `node-registered` and `node-retired` change it from there).
/// One line naming the first line it cannot read otherwise.
pub fn parse_fleet_text(text: &str) -> Result<(Vec<NodeSpec>, Vec<ProviderSpec>), String> {
    let mut nodes = Vec::new();
    let mut providers = Vec::new();
    for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let bad = |what: &str| format!("line {}: {what}: `{line}`", number + 1);
        let mut words = line.split_whitespace();
        let (Some(what), Some(name)) = (words.next(), words.next()) else {
            return Err(bad("not `node NAME …` or `provider NAME …`"));
        };
        let fields: Vec<(&str, &str)> = words
            .map(|w| w.split_once('=').ok_or_else(|| bad("a field is not KEY=VALUE")))
            .collect::<Result<_, _>>()?;
        let field = |key: &str| {
            fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v).ok_or_else(|| bad(&format!("no `{key}`")))
        };
        match what {
            "node" => nodes.push(NodeSpec {
                name: name.to_owned(),
                provider: field("provider")?.to_owned(),
                placement_group: field("placementGroup")?.to_owned(),
                nic: field("nic")?.to_owned(),
                priority: field("priority")?.parse().map_err(|_| bad("`priority` is not an integer"))?,
                capacity: match field("capacity")? {
                    "none" => None,
                    c => Some(c.parse().map_err(|_| bad("`capacity` is not `none` or a count"))?),
                },
            }),
            "provider" => providers.push(ProviderSpec {
                name: name.to_owned(),
                kind: serde_json::from_value(serde_json::Value::String(field("kind")?.to_owned()))
                    .map_err(|_| bad("`kind` is not a provider kind"))?,
            }),
            _ => return Err(bad("not `node NAME …` or `provider NAME …`")),
        }
    }
    Ok((nodes, providers))
}

/// The first line of [`fleet_text`] `stored` has that `mine` lacks, and the first `mine` has that
/// `stored` lacks (`-`: none); `None` when they are the same fleet.
#[must_use]
pub fn fleet_difference(stored: &str, mine: &str) -> Option<(String, String)> {
    if stored == mine {
        return None;
    }
    let theirs: Vec<&str> = stored.lines().collect();
    let ours: Vec<&str> = mine.lines().collect();
    let only_theirs = theirs.iter().find(|l| !ours.contains(l)).copied().unwrap_or("-");
    let only_ours = ours.iter().find(|l| !theirs.contains(l)).copied().unwrap_or("-");
    Some((only_theirs.to_owned(), only_ours.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(text: &str, providers: &[&str]) -> (Vec<(NodeSpec, NodeSource)>, Vec<InputError>) {
        let raws: Vec<RawNode> = serde_saphyr::from_str(text).expect("well-formed YAML");
        validate_nodes(&raws, providers)
    }

    #[test]
    fn a_fleet_text_reads_back_and_a_broken_one_is_named() {
        let node = |name: &str, capacity| NodeSpec {
            name: name.into(),
            provider: "aws1".into(),
            placement_group: "g1".into(),
            priority: -3,
            nic: format!("eni-{name}"),
            capacity,
        };
        let nodes = vec![node("a", Some(4)), node("b", None)];
        let providers = vec![ProviderSpec { name: "aws1".into(), kind: crate::model::ProviderKind::Aws }];
        let text = fleet_text(&nodes, &providers);
        assert_eq!(parse_fleet_text(&text), Ok((nodes, providers)));
        for (broken, says) in [
            (
                "node a provider=p placementGroup=g nic=n priority=x capacity=none",
                "`priority` is not an integer",
            ),
            ("node a provider=p nic=n priority=0 capacity=none", "no `placementGroup`"),
            ("provider p kind=vmware", "`kind` is not a provider kind"),
            ("router a", "line 1: not `node NAME …`"),
        ] {
            let e = parse_fleet_text(broken).expect_err(broken);
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn a_good_node_gets_its_defaults_and_positions() {
        let (nodes, errors) =
            nodes("- {name: a, provider: sim1, placementGroup: g1, nic: eni-a}\n", &["sim1"]);
        assert!(errors.is_empty(), "{errors:?}");
        let (node, source) = &nodes[0];
        assert_eq!((node.priority, node.capacity), (0, None));
        assert_eq!(node.capture_domain().as_str(), "provider:sim1:placement:g1");
        assert_eq!((source.name.line, source.nic.line), (1, 1));
        assert!(source.nic.column > source.name.column);
    }

    #[test]
    fn every_mistake_is_located() {
        let text = "\
- {name: a, provider: sim1, placementGroup: g1, nic: eni-a}
- {name: a, provider: sim2, placementGroup: g1, nic: eni-b}
- {name: b, provider: sim1, placementGroup: 'g 1', nic: eni-a}
- {name: c, provider: sim1, placementGroup: g1, nic: ''}
";
        let (nodes, errors) = nodes(text, &["sim1"]);
        assert_eq!(nodes.len(), 4, "every node is returned");
        let found: Vec<(u64, &str)> = errors.iter().map(|e| (e.position.line, e.message.as_str())).collect();
        assert_eq!(
            found,
            vec![
                (2, "node `a` is declared twice"),
                (2, "node `a` names undeclared provider `sim2`"),
                (3, "placementGroup `g 1` contains ` `; use letters, digits, `.`, `_` and `-`"),
                (3, "nic `eni-a` of provider `sim1` belongs to two nodes"),
                (4, "nic must be non-empty"),
            ]
        );
    }

    #[test]
    fn a_typo_is_refused_by_the_parser() {
        let error = serde_saphyr::from_str::<Vec<RawNode>>(
            "- {name: a, provider: sim1, placementGroup: g1, nic: eni-a, priorty: 3}\n",
        )
        .expect_err("unknown field");
        assert!(error.to_string().contains("priorty"), "{error}");
    }

    #[test]
    fn provider_names_are_key_safe_and_unique() {
        let name = |text: &str| {
            Spanned::new(text.to_owned(), serde_saphyr::Location::UNKNOWN, serde_saphyr::Location::UNKNOWN)
        };
        assert!(check_provider_name(&name("sim1"), &["sim2"]).is_ok());
        let twice = check_provider_name(&name("sim1"), &["sim1"]).expect_err("declared twice");
        assert_eq!(twice.message, "provider `sim1` is declared twice");
        assert!(check_provider_name(&name("a/b"), &[]).is_err());
    }
}
