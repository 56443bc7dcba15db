//! Strict MobilityPool parsing and validation (SPEC 10, 12, 13).
//!
//! Unknown fields are errors (`kubectl --validate=strict`), every error names `line:column`, and
//! a set of pools is checked together: duplicate names, addresses listed twice, and addresses in
//! two pools of one capture domain.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::claims::AddressClaims;
use crate::input::{
    InputError, POOL_ADDRESSES_MAX, Position, check_name, expand_addresses, parse_duration_ms,
};
use crate::model::{Approval, Authority, PoolSpec};

/// The only accepted `apiVersion`.
pub const API_VERSION: &str = "tenure.dev/v1alpha1";
/// The only accepted `kind`.
pub const KIND_MOBILITY_POOL: &str = "MobilityPool";

/// Default `deprovisionHoldDuration`.
pub const DEPROVISION_HOLD_DEFAULT_MS: u64 = 5_000;
/// Default `heartbeatTTL`.
pub const HEARTBEAT_TTL_DEFAULT_MS: u64 = 3_000;
/// Default `promotionHold`.
pub const PROMOTION_HOLD_DEFAULT_MS: u64 = 1_000;

/// A MobilityPool document as written, before validation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RawPoolDocument {
    api_version: Spanned<String>,
    kind: Spanned<String>,
    metadata: RawMetadata,
    spec: RawPoolSpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetadata {
    name: Spanned<String>,
    // Accepted so that pool files can carry Kubernetes-style metadata; tenure does not read them.
    #[serde(default)]
    #[allow(dead_code)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    #[allow(dead_code)]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawPoolSpec {
    addresses: Spanned<Vec<Spanned<String>>>,
    provider: Spanned<String>,
    placement_group: Spanned<String>,
    members: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    authority: Authority,
    #[serde(default)]
    approval: Approval,
    deprovision_hold_duration: Option<Spanned<String>>,
    #[serde(rename = "heartbeatTTL")]
    heartbeat_ttl: Option<Spanned<String>>,
    promotion_hold: Option<Spanned<String>>,
    ip_ownership_policy: Option<RawOwnershipPolicy>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawOwnershipPolicy {
    #[serde(rename = "type", default)]
    policy_type: PolicyType,
    epoch_locking: Option<bool>,
    prefer_nodes: Option<Vec<Spanned<String>>>,
    preempt: Option<bool>,
    auto_failover: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
enum PolicyType {
    #[default]
    Centralized,
}

/// Where the parts of a validated pool were written, for errors found later (overlaps,
/// references to undeclared nodes or providers).
#[derive(Clone, Debug, Default)]
pub struct PoolSource {
    /// Position of `metadata.name`.
    pub name: Position,
    /// Position of `spec.provider`.
    pub provider: Position,
    /// Position of each `spec.members` entry, in the order of [`PoolSpec::members`].
    pub members: Vec<Position>,
    /// Each expanded address with the position of the entry it came from.
    pub addresses: BTreeMap<IpAddr, Position>,
}

/// Parses every MobilityPool document in `text` (several may be separated by `---`) and checks
/// them together. Returns every error found, or the pools. A text without any document (empty,
/// or only comments) is an error: it is almost always the wrong file.
pub fn parse_pool_documents(text: &str) -> Result<Vec<(PoolSpec, PoolSource)>, Vec<InputError>> {
    let raws: Vec<RawPoolDocument> =
        serde_saphyr::from_multiple(text).map_err(|e| vec![InputError::from_yaml_in(text, &e)])?;
    if raws.is_empty() {
        return Err(vec![InputError::at(
            Position { line: 1, column: 1 },
            format!("no {KIND_MOBILITY_POOL} document here (the file is empty or only comments)"),
        )]);
    }
    let pools = validate_pool_documents(raws)?;
    Ok(pools)
}

/// Validates parsed documents one by one, then checks them together.
pub fn validate_pool_documents(
    raws: Vec<RawPoolDocument>,
) -> Result<Vec<(PoolSpec, PoolSource)>, Vec<InputError>> {
    let mut errors = Vec::new();
    let mut pools = Vec::new();
    for raw in raws {
        match validate_pool(raw) {
            Ok(pool) => pools.push(pool),
            Err(mut e) => errors.append(&mut e),
        }
    }
    errors.extend(check_pool_set(&pools, &[]).into_iter().map(|(_, e)| e));
    if errors.is_empty() { Ok(pools) } else { Err(errors) }
}

/// Validates one document, filling in defaults and expanding address ranges.
pub fn validate_pool(raw: RawPoolDocument) -> Result<(PoolSpec, PoolSource), Vec<InputError>> {
    let mut errors = Vec::new();
    let mut err = |spanned_position: Position, message: String| {
        errors.push(InputError::at(spanned_position, message));
    };
    if raw.api_version.value != API_VERSION {
        err(
            Position::of_spanned(&raw.api_version),
            format!("apiVersion must be `{API_VERSION}`, not `{}`", raw.api_version.value),
        );
    }
    if raw.kind.value != KIND_MOBILITY_POOL {
        err(
            Position::of_spanned(&raw.kind),
            format!("kind must be `{KIND_MOBILITY_POOL}`, not `{}`", raw.kind.value),
        );
    }
    let name = raw.metadata.name.value.clone();
    if let Err(m) = check_name("metadata.name", &name) {
        err(Position::of_spanned(&raw.metadata.name), m);
    }
    let spec = raw.spec;
    if let Err(m) = check_name("spec.provider", &spec.provider.value) {
        err(Position::of_spanned(&spec.provider), m);
    }
    if let Err(m) = check_name("spec.placementGroup", &spec.placement_group.value) {
        err(Position::of_spanned(&spec.placement_group), m);
    }

    let mut source = PoolSource {
        name: Position::of_spanned(&raw.metadata.name),
        provider: Position::of_spanned(&spec.provider),
        ..PoolSource::default()
    };
    if spec.addresses.value.is_empty() {
        err(Position::of_spanned(&spec.addresses), "spec.addresses must list at least one address".into());
    }
    let mut total: u64 = 0;
    for entry in &spec.addresses.value {
        let position = Position::of_spanned(entry);
        match expand_addresses(entry.value.trim()) {
            Err(m) => err(position, m),
            Ok(expanded) => {
                total += expanded.len() as u64;
                if total > POOL_ADDRESSES_MAX {
                    err(
                        position,
                        format!("pool `{name}` would hold more than {POOL_ADDRESSES_MAX} addresses"),
                    );
                    break;
                }
                // One error per entry, at its first address listed before: a /18 listed twice
                // is one mistake, not 16,384 lines.
                let mut twice: Option<(IpAddr, Position, usize)> = None;
                for address in expanded {
                    if let Some(first) = source.addresses.get(&address) {
                        match twice.as_mut() {
                            Some((_, _, more)) => *more += 1,
                            None => twice = Some((address, *first, 0)),
                        }
                    } else {
                        source.addresses.insert(address, position);
                    }
                }
                if let Some((address, first, more)) = twice {
                    let more = match more {
                        0 => String::new(),
                        1 => " (and 1 more address of this entry)".to_owned(),
                        n => format!(" (and {n} more addresses of this entry)"),
                    };
                    err(
                        position,
                        format!(
                            "address {address} is listed twice in pool `{name}` (first at line {} column {}){more}",
                            first.line, first.column
                        ),
                    );
                }
            }
        }
    }

    let mut members = Vec::new();
    if spec.members.value.is_empty() {
        err(Position::of_spanned(&spec.members), "spec.members must list at least one node".into());
    }
    for member in &spec.members.value {
        let position = Position::of_spanned(member);
        if let Err(m) = check_name("member", &member.value) {
            err(position, m);
        } else if members.contains(&member.value) {
            err(position, format!("member `{}` is listed twice", member.value));
        } else {
            members.push(member.value.clone());
            source.members.push(position);
        }
    }

    let mut duration_errors: Vec<InputError> = Vec::new();
    let deprovision_hold_ms = duration_with(
        &mut duration_errors,
        "deprovisionHoldDuration",
        &spec.deprovision_hold_duration,
        DEPROVISION_HOLD_DEFAULT_MS,
    );
    let heartbeat_ttl_ms =
        duration_with(&mut duration_errors, "heartbeatTTL", &spec.heartbeat_ttl, HEARTBEAT_TTL_DEFAULT_MS);
    let promotion_hold_ms =
        duration_with(&mut duration_errors, "promotionHold", &spec.promotion_hold, PROMOTION_HOLD_DEFAULT_MS);
    if heartbeat_ttl_ms == 0
        && let Some(ttl) = &spec.heartbeat_ttl
    {
        duration_errors.push(InputError::at(
            Position::of_spanned(ttl),
            "spec.heartbeatTTL must be longer than 0".to_owned(),
        ));
    }
    errors.append(&mut duration_errors);

    let policy = spec.ip_ownership_policy.unwrap_or(RawOwnershipPolicy {
        policy_type: PolicyType::Centralized,
        epoch_locking: None,
        prefer_nodes: None,
        preempt: None,
        auto_failover: None,
    });
    let PolicyType::Centralized = policy.policy_type;
    let mut prefer_nodes = Vec::new();
    for preferred in policy.prefer_nodes.unwrap_or_default() {
        let position = Position::of_spanned(&preferred);
        if !members.contains(&preferred.value) {
            errors.push(InputError::at(
                position,
                format!("preferNodes entry `{}` is not a member of pool `{name}`", preferred.value),
            ));
        } else if prefer_nodes.contains(&preferred.value) {
            errors.push(InputError::at(position, format!("preferNodes lists `{}` twice", preferred.value)));
        } else {
            prefer_nodes.push(preferred.value);
        }
    }

    if !errors.is_empty() {
        return Err(errors);
    }
    let pool = PoolSpec {
        name,
        addresses: source.addresses.keys().copied().collect(),
        provider: spec.provider.value,
        placement_group: spec.placement_group.value,
        members,
        authority: spec.authority,
        approval: spec.approval,
        deprovision_hold_ms,
        heartbeat_ttl_ms,
        promotion_hold_ms,
        epoch_locking: policy.epoch_locking.unwrap_or(true),
        prefer_nodes,
        preempt: policy.preempt.unwrap_or(false),
        auto_failover: policy.auto_failover.unwrap_or(true),
    };
    Ok((pool, source))
}

fn duration_with(
    errors: &mut Vec<InputError>,
    field: &str,
    value: &Option<Spanned<String>>,
    default: u64,
) -> u64 {
    match value {
        None => default,
        Some(text) => parse_duration_ms(text.value.trim()).unwrap_or_else(|m| {
            errors.push(InputError::at(Position::of_spanned(text), format!("spec.{field}: {m}")));
            default
        }),
    }
}

/// Checks pools against each other: unique names, and no address in two pools of one capture
/// domain. Errors point at the later of the two places and carry the index of its pool.
/// `files`: the file each pool came from, when they came from several (empty: one text); an
/// error names the other place's file when it is not the one the error is rendered in.
#[must_use]
pub fn check_pool_set(pools: &[(PoolSpec, PoolSource)], files: &[&str]) -> Vec<(usize, InputError)> {
    let mut errors = Vec::new();
    let mut names: BTreeMap<&str, (usize, Position)> = BTreeMap::new();
    let mut claims = AddressClaims::new();
    // The file of pool `other` when it is not the file of pool `index`.
    let elsewhere = |index: usize, other: usize| match (files.get(index), files.get(other)) {
        (Some(here), Some(there)) if here != there => Some(*there),
        _ => None,
    };
    for (index, (pool, source)) in pools.iter().enumerate() {
        if let Some((first_index, first)) = names.get(pool.name.as_str()) {
            errors.push((
                index,
                InputError::at(
                    source.name,
                    format!(
                        "pool `{}` is defined twice (first at line {} column {}{})",
                        pool.name,
                        first.line,
                        first.column,
                        elsewhere(index, *first_index).map(|file| format!(" of {file}")).unwrap_or_default()
                    ),
                ),
            ));
            continue;
        }
        names.insert(&pool.name, (index, source.name));
        // One error per pool it overlaps, at the first shared address: two pools that share a
        // /18 are one mistake, not 16,384 lines.
        let mut groups: Vec<(crate::claims::Overlap, usize)> = Vec::new();
        for overlap in claims.overlaps(pool) {
            match groups.iter_mut().find(|(first, _)| first.other == overlap.other) {
                Some((_, more)) => *more += 1,
                None => groups.push((overlap, 0)),
            }
        }
        for (first, more) in groups {
            let position = source.addresses.get(&first.address).copied().unwrap_or(source.name);
            let mut message = match more {
                0 => first.to_string(),
                1 => format!("{first} (and 1 more address of `{}` is in `{}`)", first.pool, first.other),
                n => format!("{first} (and {n} more addresses of `{}` are in `{}`)", first.pool, first.other),
            };
            if let Some(there) =
                names.get(first.other.as_str()).and_then(|(other, _)| elsewhere(index, *other))
            {
                message.push_str(&format!(" (pool `{}` is defined in {there})", first.other));
            }
            errors.push((index, InputError::at(position, message)));
        }
        claims.apply(pool);
    }
    errors
}

/// Checks pools written now (`tenure validate`, the agent's pool files) for addresses that cannot
/// float ([`crate::input::check_floating`]): one error per pool, at its first such address (a
/// /24 of them is one mistake), with the index of its pool. Not part of the pool parser: a pool
/// stored before this rule is read back by it ([`crate::codec`]) and must stay readable.
#[must_use]
pub fn check_new_pools(pools: &[(PoolSpec, PoolSource)]) -> Vec<(usize, InputError)> {
    pools
        .iter()
        .enumerate()
        .filter_map(|(index, (_, source))| {
            source.addresses.iter().find_map(|(address, position)| {
                let refused = crate::input::check_floating(&address.to_string(), *address).err();
                refused.map(|message| (index, InputError::at(*position, message)))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
apiVersion: tenure.dev/v1alpha1
kind: MobilityPool
metadata: {name: edge-vips}
spec:
  addresses: [10.0.0.10/32, 10.0.0.16/29]
  provider: aws-use1
  placementGroup: g1
  members: [aws-router-a, aws-router-b, aws-router-c]
  heartbeatTTL: 3s
  ipOwnershipPolicy:
    type: centralized
    preferNodes: [aws-router-a]
";

    #[test]
    fn a_pool_set_with_an_address_that_cannot_float_is_refused_where_it_is_written() {
        let text = GOOD.replace("[10.0.0.10/32, 10.0.0.16/29]", "[10.0.0.10/32, \"::ffff:10.0.0.1\"]");
        // The pool parser (what reads a stored pool back too) takes it ...
        let pools = parse_pool_documents(&text).expect("it parses");
        // ... and the check of what is written now refuses it, where it is written.
        let errors = check_new_pools(&pools);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].1.message.contains("write the IPv4 address `10.0.0.1`"), "{errors:?}");
        assert_eq!(errors[0].1.position.line, 5, "at the addresses' line");
        assert!(check_new_pools(&parse_pool_documents(GOOD).expect("good")).is_empty());
    }

    #[test]
    fn a_good_pool_gets_its_defaults() {
        let pools = parse_pool_documents(GOOD).expect("valid");
        let (pool, _) = &pools[0];
        assert_eq!(pool.addresses.len(), 9);
        assert_eq!(pool.deprovision_hold_ms, 5_000);
        assert_eq!(pool.promotion_hold_ms, 1_000);
        assert!(pool.epoch_locking);
        assert!(!pool.preempt);
        assert!(pool.auto_failover);
        assert_eq!(pool.authority, Authority::None);
        assert_eq!(pool.approval, Approval::Auto);
        assert_eq!(pool.prefer_nodes, vec!["aws-router-a".to_owned()]);
    }

    fn first_error(text: &str) -> InputError {
        parse_pool_documents(text).expect_err("must be refused")[0].clone()
    }

    #[test]
    fn a_typo_is_an_error_at_its_line() {
        let e = first_error(&GOOD.replace("members:", "membres:"));
        assert_eq!(e.position.line, 8);
        assert!(e.message.contains("membres"), "{}", e.message);
    }

    #[test]
    fn semantic_errors_name_their_line() {
        let e = first_error(&GOOD.replace("10.0.0.16/29", "10.0.0.10"));
        assert_eq!(e.position.line, 5);
        assert!(e.message.contains("listed twice"), "{}", e.message);
        let e = first_error(&GOOD.replace("heartbeatTTL: 3s", "heartbeatTTL: 3 seconds"));
        assert_eq!(e.position.line, 9);
        let e = first_error(&GOOD.replace("preferNodes: [aws-router-a]", "preferNodes: [zed]"));
        assert_eq!(e.position.line, 12);
    }

    #[test]
    fn a_file_without_documents_is_refused() {
        for text in ["", "# only a comment\n", "---\n"] {
            let e = first_error(text);
            assert_eq!(e.position.line, 1, "{text:?}");
            assert!(e.message.contains("no MobilityPool document"), "{}", e.message);
        }
    }

    #[test]
    fn a_missing_field_names_its_mapping() {
        let e = first_error(&GOOD.replace("  provider: aws-use1\n", ""));
        assert_eq!((e.position.line, e.position.column), (5, 3));
        assert_eq!(e.message, "missing field `provider` in `spec`");
    }

    #[test]
    fn overlapping_pools_of_one_domain_are_refused() {
        let two =
            format!("{GOOD}---\n{}", GOOD.replace("edge-vips", "other").replace("10.0.0.10/32", "10.0.0.99"));
        let e = first_error(&two);
        assert!(e.message.contains("also in pool"), "{}", e.message);
        assert_eq!(e.position.line, 18);
        let other_domain = two.replacen("placementGroup: g1", "placementGroup: g2", 1);
        assert!(parse_pool_documents(&other_domain).is_ok());
    }

    /// A range listed twice is one mistake: one error at the second entry, with how many more
    /// addresses it repeats.
    #[test]
    fn a_range_listed_twice_is_one_error() {
        let e =
            parse_pool_documents(&GOOD.replace("10.0.0.10/32, 10.0.0.16/29", "10.0.0.16/29, 10.0.0.16/30"))
                .expect_err("listed twice");
        let messages: Vec<&str> = e.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages,
            ["address 10.0.0.16 is listed twice in pool `edge-vips` (first at line 5 column 15) \
              (and 3 more addresses of this entry)"],
        );
    }

    /// Two pools that share a range are one mistake: one error per pool overlapped, at its first
    /// shared address, with how many more it shares — not one line per address (two /18s would
    /// print 16,384).
    #[test]
    fn an_overlap_of_many_addresses_is_one_error_per_pool_overlapped() {
        let shares_range =
            GOOD.replace("edge-vips", "wide").replace("10.0.0.10/32, 10.0.0.16/29", "10.0.0.16/28");
        let shares_one = GOOD.replace("edge-vips", "one").replace("10.0.0.10/32, 10.0.0.16/29", "10.0.0.10");
        let errors = parse_pool_documents(&format!("{GOOD}---\n{shares_range}---\n{shares_one}"))
            .expect_err("overlaps are refused");
        let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "address 10.0.0.16 of pool `wide` is also in pool `edge-vips` of capture domain provider:aws-use1:placement:g1 \
                 (and 7 more addresses of `wide` are in `edge-vips`)",
                "address 10.0.0.10 of pool `one` is also in pool `edge-vips` of capture domain provider:aws-use1:placement:g1",
            ],
        );
    }
}
