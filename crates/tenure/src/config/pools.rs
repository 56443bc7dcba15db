//! [`load_pools`]: the pool files an agent config names, read, checked together (as
//! `tenure validate` checks several files: names unique, no address in two pools of one capture
//! domain) and checked against the config.
//!
//! Against the config: a pool's provider must be a configured provider. Its members may be nodes
//! this config does not run — they are other hosts' agents (several hosts share pool files) — but
//! a member that this config does run must be on the pool's provider and placement group, must
//! heartbeat more often than the pool's `heartbeatTTL`, must end its provider calls sooner than
//! the pool's `heartbeatTTL + promotionHold` (`actionTimeout`, SPEC 9), and, under
//! `authority: vrrp`, needs the config's `vrrp` section.

use tenure_core::input::{InputError, Position, utf8_text};
use tenure_core::log::{Event, EventKind};
use tenure_core::log_store::{LogError, encode_record};
use tenure_core::model::{Authority, PoolSpec};
use tenure_core::spec::{PoolSource, check_new_pools, check_pool_set, parse_pool_documents};

use super::{AgentConfig, format_ms, read_bounded};

/// Largest pool file read, in bytes. A pool holds at most 65,536 addresses and ranges keep files
/// short; a file this large is the wrong file.
pub const POOL_FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Reads every pool file of `config`, checks the pools together and against the config, and
/// returns them in file order, then document order. Every error is one rendered line naming the
/// pool file (`file:line:column: message`), or the config file's `pools` entry when a pool file
/// cannot be read. Called at start and on every reload (SIGHUP): a bad set changes nothing.
pub fn load_pools(config: &AgentConfig) -> Result<Vec<PoolSpec>, Vec<String>> {
    let config_file = config.path.display().to_string();
    let files: Vec<String> = config.pool_files.iter().map(|f| f.display().to_string()).collect();
    let mut errors: Vec<String> = Vec::new();
    let mut pools: Vec<(PoolSpec, PoolSource)> = Vec::new();
    let mut file_of_pool: Vec<usize> = Vec::new();
    for (index, path) in config.pool_files.iter().enumerate() {
        let shown = &files[index];
        let entry = config.source.pools.get(index).copied().unwrap_or_default();
        let bytes = match read_bounded(path, POOL_FILE_BYTES_MAX) {
            Ok(bytes) => bytes,
            Err(m) => {
                errors.push(InputError::at(entry, format!("pool file `{shown}`: {m}")).render(&config_file));
                continue;
            }
        };
        let text = match utf8_text(&bytes) {
            Ok(text) => text,
            Err(e) => {
                errors.push(e.render(shown));
                continue;
            }
        };
        match parse_pool_documents(text) {
            Ok(parsed) => {
                file_of_pool.extend(std::iter::repeat_n(index, parsed.len()));
                pools.extend(parsed);
            }
            Err(file_errors) => errors.extend(file_errors.iter().map(|e| e.render(shown))),
        }
    }
    // The pools of all files are applied together, so they are checked together; an error points
    // at the later of two places, in the file that pool came from.
    let origins: Vec<&str> = file_of_pool.iter().map(|file| files[*file].as_str()).collect();
    for (index, e) in check_pool_set(&pools, &origins).into_iter().chain(check_new_pools(&pools)) {
        errors.push(e.render(&files[file_of_pool[index]]));
    }
    for (index, (pool, source)) in pools.iter().enumerate() {
        let file = &files[file_of_pool[index]];
        errors.extend(check_against_config(pool, source, config).iter().map(|e| e.render(file)));
        errors.extend(check_record_size(pool, source).iter().map(|e| e.render(file)));
    }
    if errors.is_empty() { Ok(pools.into_iter().map(|(pool, _)| pool).collect()) } else { Err(errors) }
}

/// Whether `pool` fits the one log record that applying it takes (a `pool-applied` event holds
/// the whole spec, its addresses as the fewest CIDR blocks): a pool of tens of thousands of
/// scattered addresses does not, and the store would refuse it at every start and reload. One
/// error at the pool's name when it does not fit (or cannot be encoded at all).
///
/// Not part of the pool parser: the log's decoder reads stored pools through that parser, and
/// the check encodes. `tenure validate` and [`load_pools`] (start and SIGHUP) call it.
pub fn check_record_size(pool: &PoolSpec, source: &PoolSource) -> Option<InputError> {
    // The widest stamp: the record is never larger than this one whenever it is appended.
    let event = Event { at_ms: u64::MAX, kind: EventKind::PoolApplied { spec: Box::new(pool.clone()) } };
    let message = match encode_record(&event) {
        Ok(_) => return None,
        Err(LogError::TooLarge { bytes, limit }) => format!(
            "pool `{}` does not fit one log record: it encodes to {bytes} bytes, more than the {limit} a \
             record holds (write its addresses as CIDR ranges, or split it into several pools)",
            pool.name
        ),
        Err(e) => format!("pool `{}` cannot be written to the log: {e}", pool.name),
    };
    Some(InputError::at(source.name, message))
}

/// The checks of one pool against the config (see the module documentation).
fn check_against_config(pool: &PoolSpec, source: &PoolSource, config: &AgentConfig) -> Vec<InputError> {
    let mut errors = Vec::new();
    let provider_declared = config.provider(&pool.provider).is_some();
    if !provider_declared {
        let declared: Vec<String> = config.providers.iter().map(|p| format!("`{}`", p.name)).collect();
        errors.push(InputError::at(
            source.provider,
            format!(
                "pool `{}` names provider `{}`, which the agent config does not declare (it declares {})",
                pool.name,
                pool.provider,
                if declared.is_empty() { "none".to_owned() } else { declared.join(", ") }
            ),
        ));
    }
    let mut runs_a_member = false;
    for (index, member) in pool.members.iter().enumerate() {
        let Some(node) = config.node(member) else { continue };
        runs_a_member = true;
        let position = source.members.get(index).copied().unwrap_or(source.name);
        // Under an undeclared provider every local member would differ: one error says it.
        if provider_declared && node.provider != pool.provider {
            errors.push(InputError::at(
                position,
                format!(
                    "member `{member}` is on provider `{}` in the agent config, not on this pool's provider `{}`",
                    node.provider, pool.provider
                ),
            ));
        }
        if node.placement_group != pool.placement_group {
            errors.push(InputError::at(
                position,
                format!(
                    "member `{member}` is in placement group `{}` in the agent config, not in this pool's `{}`",
                    node.placement_group, pool.placement_group
                ),
            ));
        }
    }
    if runs_a_member {
        check_timing_and_authority(pool, source.name, config, &mut errors);
    }
    errors
}

/// A pool with a member this agent runs: its heartbeats must come faster than its TTL, its calls
/// must end before its members could be declared dead, and VRRP authority needs keepalived's FIFO.
///
/// The call bound (SPEC 9): a call in flight is cancelled as soon as the agent's view fences it,
/// but an agent cut off from the log sees nothing; its call ends at its head confirmation plus
/// `actionTimeout` at the latest. Another node takes the address from a silent one only
/// `heartbeatTTL + promotionHold` after its last *logged* heartbeat, which may precede that head
/// confirmation by up to one `heartbeatInterval` (plus an append's latency, which no config can
/// know: docs/safety.md). So `actionTimeout + heartbeatInterval` must stay below it: a call so
/// bounded has ended (its retries stopped, its hook killed) before the address can move without
/// a drain.
fn check_timing_and_authority(
    pool: &PoolSpec,
    at: Position,
    config: &AgentConfig,
    errors: &mut Vec<InputError>,
) {
    if pool.heartbeat_ttl_ms <= config.heartbeat_interval_ms {
        errors.push(InputError::at(
            at,
            format!(
                "pool `{}` has heartbeatTTL {}, not longer than the agent's heartbeatInterval {}: its \
                 members would expire between heartbeats",
                pool.name,
                format_ms(pool.heartbeat_ttl_ms),
                format_ms(config.heartbeat_interval_ms)
            ),
        ));
    }
    let takeover_ms = pool.heartbeat_ttl_ms.saturating_add(pool.promotion_hold_ms);
    if config.action_timeout_ms.saturating_add(config.heartbeat_interval_ms) >= takeover_ms {
        errors.push(InputError::at(
            at,
            format!(
                "pool `{}` has heartbeatTTL + promotionHold {}, not longer than actionTimeout {} plus \
                 heartbeatInterval {} of the agent config `{}`: a call cut off from the log could land \
                 after another node took the address; lower actionTimeout or heartbeatInterval (or raise \
                 heartbeatTTL)",
                pool.name,
                format_ms(takeover_ms),
                format_ms(config.action_timeout_ms),
                format_ms(config.heartbeat_interval_ms),
                config.path.display()
            ),
        ));
    }
    if pool.authority == Authority::Vrrp && config.vrrp.is_none() {
        errors.push(InputError::at(
            at,
            format!(
                "pool `{}` has `authority: vrrp`, but the agent config has no `vrrp` section (notifyFifo, \
                 instance)",
                pool.name
            ),
        ));
    }
}
