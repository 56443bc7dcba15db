//! A reload (SIGHUP) of a running agent: the config file is read again; its `pools` list is
//! taken (pool files added and removed, as edited pool files are), every other key stays as the
//! agent started with it, and each one that changed is named as needing a restart.
//!
//! The pool files are checked against the running config (its nodes, providers, intervals,
//! `vrrp`), not the edited one: a pool that needs an edited key (a provider added to
//! `providers`) is refused until the restart that applies that key.

use tenure_core::model::PoolSpec;
use tracing::warn;

use super::{AgentConfig, load_config, load_pools};

/// The pools a reload applies: the config file at `running.path` read again, its `pools` list
/// (with the rest of `running`) read and checked by [`load_pools`]. Logs one warning naming the
/// other keys that changed (they need a restart and are not applied). A config that cannot be
/// read or parsed is one error line, and nothing is applied; a bad pool file is one line per
/// error, as at start.
pub fn reload_pools(running: &AgentConfig) -> Result<Vec<PoolSpec>, Vec<String>> {
    let edited = load_config(&running.path).map_err(|lines| {
        vec![format!("config {} not reloaded: {}", running.path.display(), lines.join("; "))]
    })?;
    let restart = changed_keys(running, &edited);
    let mut reloaded = running.clone();
    reloaded.pool_files = edited.pool_files;
    reloaded.source.pools = edited.source.pools;
    let pools = load_pools(&reloaded);
    if !restart.is_empty() {
        // Said after the pool files were read, so that a refused reload does not claim first
        // that the pools list was reloaded.
        let pools_list = if pools.is_ok() { "the pools list was reloaded" } else { "nor was the pools list" };
        warn!(
            config = %running.path.display(),
            keys = %restart.join(", "),
            "config keys changed that only a restart applies; not applied ({pools_list})"
        );
    }
    pools
}

/// The keys of `edited` whose value differs from `running`'s, except `pools` (which a reload
/// applies), in the order of the configuration reference (`docs/operations.md`).
#[must_use]
pub fn changed_keys(running: &AgentConfig, edited: &AgentConfig) -> Vec<&'static str> {
    // Every field, by name: a field added to the config without a word here does not compile.
    let AgentConfig {
        path: _,
        nodes,
        peers,
        store,
        identity_file,
        providers,
        vrrp,
        pool_files: _,
        listen,
        heartbeat_interval_ms,
        requeue_interval_ms,
        action_timeout_ms,
        api_token_file,
        journal_retention,
        source,
    } = edited;
    let nodes_key = |s: &super::ConfigSource| if s.keys.contains_key("nodes") { "nodes" } else { "node" };
    let compared: [(&'static str, bool); 12] = [
        (nodes_key(source), running.nodes != *nodes || nodes_key(&running.source) != nodes_key(source)),
        ("peers", running.peers != *peers),
        ("store", running.store != *store),
        ("identityFile", running.identity_file != *identity_file),
        ("providers", running.providers != *providers),
        ("vrrp", running.vrrp != *vrrp),
        ("listen", running.listen != *listen),
        ("heartbeatInterval", running.heartbeat_interval_ms != *heartbeat_interval_ms),
        ("requeueInterval", running.requeue_interval_ms != *requeue_interval_ms),
        ("actionTimeout", running.action_timeout_ms != *action_timeout_ms),
        ("apiTokenFile", running.api_token_file != *api_token_file),
        ("journalRetention", running.journal_retention != *journal_retention),
    ];
    compared.into_iter().filter(|(_, changed)| *changed).map(|(key, _)| key).collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::parse_config;

    const RUNNING: &str = "\
node: {name: a, provider: sim1, placementGroup: g1, nic: eni-a}
store: {kind: embedded, path: ./data}
providers: [{name: sim1, kind: sim-cloud}]
pools: [x.yaml]
listen: 127.0.0.1:9464
";

    fn parse(text: &str) -> AgentConfig {
        parse_config(text, Path::new("/etc/tenure/agent.yaml")).expect("valid")
    }

    #[test]
    fn only_keys_other_than_pools_are_named_for_a_restart() {
        let running = parse(RUNNING);
        assert!(changed_keys(&running, &parse(RUNNING)).is_empty());
        let pools_only = RUNNING.replace("pools: [x.yaml]", "pools: [x.yaml, y.yaml]");
        assert!(changed_keys(&running, &parse(&pools_only)).is_empty(), "the pools list is reloaded");
        // The same values written otherwise change nothing.
        let respelled = RUNNING.replace("store: {kind: embedded, path: ./data}", "store: {path: data}");
        assert!(changed_keys(&running, &parse(&respelled)).is_empty());
        let edited = RUNNING
            .replace("listen: 127.0.0.1:9464", "listen: 127.0.0.1:9465\nheartbeatInterval: 200ms")
            .replace("kind: sim-cloud}]", "kind: sim-cloud}, {name: hook, kind: exec, command: [x]}]")
            .replace("node: {name: a,", "nodes:\n  - {name: a,");
        assert_eq!(
            changed_keys(&running, &parse(&edited)),
            ["nodes", "providers", "listen", "heartbeatInterval"]
        );
    }

    #[test]
    fn a_reload_takes_the_edited_pools_list_and_checks_it_against_the_running_config() {
        let dir = std::env::temp_dir().join(format!("tenure-config-reload-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let pool = |name: &str, address: &str, provider: &str| {
            format!(
                "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {{name: {name}}}\nspec:\n  \
                 addresses: [{address}]\n  provider: {provider}\n  placementGroup: g1\n  members: [a]\n"
            )
        };
        std::fs::write(dir.join("x.yaml"), pool("x", "10.0.0.1", "sim1")).expect("write");
        std::fs::write(dir.join("y.yaml"), pool("y", "10.0.0.2", "sim1")).expect("write");
        std::fs::write(dir.join("z.yaml"), pool("z", "10.0.0.3", "hook")).expect("write");
        let path = dir.join("agent.yaml");
        std::fs::write(&path, RUNNING).expect("write");
        let running = load_config(&path).expect("valid");
        let names = |pools: Vec<PoolSpec>| pools.into_iter().map(|p| p.name).collect::<Vec<_>>();
        assert_eq!(names(reload_pools(&running).expect("loads")), ["x"]);

        // y added and x removed, and a key that needs a restart: the pools list is taken.
        std::fs::write(&path, RUNNING.replace("pools: [x.yaml]", "pools: [y.yaml]").replace("9464", "9465"))
            .expect("write");
        assert_eq!(names(reload_pools(&running).expect("loads")), ["y"]);

        // A pool on a provider only the edited config has: refused until a restart applies it.
        let text = RUNNING
            .replace("pools: [x.yaml]", "pools: [x.yaml, z.yaml]")
            .replace("kind: sim-cloud}]", "kind: sim-cloud}, {name: hook, kind: exec, command: [x]}]");
        std::fs::write(&path, text).expect("write");
        let refused = reload_pools(&running).expect_err("refused");
        assert!(refused.iter().any(|l| l.contains("z.yaml") && l.contains("`hook`")), "{refused:?}");

        // A config that does not parse: one line, naming it.
        std::fs::write(&path, "node: {name: a\n").expect("write");
        let refused = reload_pools(&running).expect_err("refused");
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].starts_with(&format!(
            "config {} not reloaded: {}:",
            path.display(),
            path.display()
        )));
        let _ = std::fs::remove_dir_all(dir);
    }
}
