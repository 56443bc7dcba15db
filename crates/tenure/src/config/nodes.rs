//! `node:`/`nodes:` and `peers:`: which of them a config may give, and the nodes checked against
//! the providers and each other.

use serde_saphyr::Spanned;
use tenure_core::fleet_spec::validate_nodes;
use tenure_core::input::{InputError, Position};
use tenure_core::model::NodeSpec;

use super::ProviderConfig;
use super::raw::{self, RawConfig};

/// `node:` or `nodes:`, exactly one of them, and `peers:` (with an etcd store only), validated
/// against the providers and each other (names and NICs unique across all of them).
pub(super) fn validate_node_keys(
    raw: &RawConfig,
    text: &str,
    providers: &[ProviderConfig],
    errors: &mut Vec<InputError>,
) -> (Vec<NodeSpec>, Vec<NodeSpec>) {
    let raws: Vec<&Spanned<tenure_core::fleet_spec::RawNode>> = match (&raw.node, &raw.nodes) {
        (Some(_), Some(nodes)) => {
            errors.push(InputError::at(
                Position::of_spanned(nodes),
                "give `node` (this host's node) or `nodes` (several nodes in one process, for demos \
                 and tests), not both"
                    .to_owned(),
            ));
            return (Vec::new(), Vec::new());
        }
        (None, None) => {
            errors.push(InputError::at(
                first_content(text),
                "missing `node`: the node this agent runs, like `node: {name: a, provider: sim1, \
                 placementGroup: g1, nic: eni-a}` (or `nodes:` for several in one process)"
                    .to_owned(),
            ));
            return (Vec::new(), Vec::new());
        }
        (Some(node), None) => vec![node],
        (None, Some(nodes)) => {
            if nodes.value.is_empty() {
                errors.push(InputError::at(
                    Position::of_spanned(nodes),
                    "nodes must list at least one node".to_owned(),
                ));
            }
            nodes.value.iter().collect()
        }
    };
    let own = raws.len();
    let mut raws = raws;
    if let Some(peers) = &raw.peers {
        if raw.store.value.kind.as_ref().map(|k| k.value) != Some(raw::RawStoreKind::Etcd) {
            errors.push(InputError::at(
                Position::of_spanned(peers),
                "peers are the other nodes of a fleet sharing one log: they need `store: {kind: etcd, …}`"
                    .to_owned(),
            ));
        }
        raws.extend(peers.value.iter());
    }
    let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
    let (nodes, mut node_errors) = validate_nodes(raws.iter().map(|n| &n.value), &names);
    errors.append(&mut node_errors);
    // A provider kind's own rule for its NIC ids (an ARM resource id, an OCID), at the `nic`.
    for (node, source) in &nodes {
        if let Some(provider) = providers.iter().find(|p| p.name == node.provider)
            && let Some(message) = provider.settings.check_nic(&node.nic)
        {
            errors.push(InputError::at(source.nic, format!("node `{}`: {message}", node.name)));
        }
    }
    // One NIC spelled two ways (an ARM id in another case) is still one NIC for two nodes (the
    // same spelling is refused with the node checks).
    for (i, (node, source)) in nodes.iter().enumerate() {
        let Some(provider) = providers.iter().find(|p| p.name == node.provider) else { continue };
        if let Some((earlier, _)) = nodes[..i].iter().find(|(other, _)| {
            other.provider == node.provider
                && other.nic != node.nic
                && provider.settings.same_nic(&other.nic, &node.nic)
        }) {
            errors.push(InputError::at(
                source.nic,
                format!(
                    "nic `{}` of provider `{}` belongs to two nodes (node `{}` has it as `{}`: {} NIC ids compare without regard to case)",
                    node.nic,
                    node.provider,
                    earlier.name,
                    earlier.nic,
                    provider.kind.as_str()
                ),
            ));
        }
    }
    let mut nodes: Vec<NodeSpec> = nodes.into_iter().map(|(node, _)| node).collect();
    let peers = nodes.split_off(own.min(nodes.len()));
    // A provider that answers on one interface of this host (`onprem`: its proxy entries, and so
    // its inventory, cannot tell two of this agent's nodes apart) takes one node per agent.
    for provider in providers.iter().filter(|p| p.settings.one_node_per_agent()) {
        let on_it: Vec<&NodeSpec> = nodes.iter().filter(|n| n.provider == provider.name).collect();
        if let [first, second, ..] = on_it.as_slice() {
            errors.push(InputError::at(
                raw.nodes.as_ref().map_or_else(|| first_content(text), Position::of_spanned),
                format!(
                    "nodes `{}` and `{}` both run here on {kind} provider `{}`: an {kind} provider \
                     answers on one interface of this host, so one node per agent (one per router)",
                    first.name,
                    second.name,
                    provider.name,
                    kind = provider.kind.as_str(),
                ),
            ));
        }
    }
    // A maintenance notice names the host the agent runs on (its metadata service), not a node:
    // with two of this agent's nodes on a provider that drains on notices, one host's notice
    // would drain both (and acknowledge its event twice); so would two draining providers.
    let draining: Vec<(&NodeSpec, &ProviderConfig)> = nodes
        .iter()
        .filter_map(|n| {
            let provider = providers.iter().find(|p| p.name == n.provider)?;
            provider.settings.maintenance_notices().map(|_| (n, provider))
        })
        .collect();
    if let [(first, one), (second, other), ..] = draining.as_slice() {
        let on = if one.name == other.name {
            format!("on {} provider `{}`", one.kind.as_str(), one.name)
        } else {
            format!("on providers `{}` and `{}`", one.name, other.name)
        };
        errors.push(InputError::at(
            raw.nodes.as_ref().map_or_else(|| first_content(text), Position::of_spanned),
            format!(
                "nodes `{}` and `{}` both run here {on} with `maintenanceNotices: drain`: a notice names this \
                 host, not a node, so one node per agent (one per instance)",
                first.name, second.name,
            ),
        ));
    }
    (nodes, peers)
}

/// Where the first key of a text is (its first line that is not blank, a comment or a document
/// marker), for errors about something missing from the whole file.
fn first_content(text: &str) -> Position {
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty()
            || trimmed.starts_with('#')
            || trimmed.starts_with("---")
            || trimmed.starts_with('%')
        {
            continue;
        }
        let column = line.chars().count() - trimmed.chars().count() + 1;
        return Position {
            line: u64::try_from(index + 1).unwrap_or(u64::MAX),
            column: u64::try_from(column).unwrap_or(u64::MAX),
        };
    }
    Position { line: 1, column: 1 }
}
