//! Unit tests of the agent config: defaults, every located mistake, and the pool files.
//!
//! Over 600 lines: one test per located mistake, sharing the parse and error helpers; they test one
//! module.

use std::fs;
use std::path::{Path, PathBuf};

use tenure_core::input::InputError;

use super::*;
use crate::exec::aws::{AWS_INVENTORY_INTERVAL_DEFAULT_MS, AwsSettings};
use crate::exec::hook::ExecSettings;
use crate::exec::notices::MaintenanceNotices;
use crate::exec::onprem::{ONPREM_INVENTORY_INTERVAL_DEFAULT_MS, OnpremSettings};
use crate::exec::sim::SimCloudSettings;

const GOOD: &str = "\
# one node on the simulated cloud
node: {name: a, provider: sim1, placementGroup: g1, nic: eni-a, priority: 5, capacity: 50}
store: {kind: embedded, path: ./data/a}
providers:
  - {name: sim1, kind: sim-cloud}
  - {name: hook, kind: exec, command: [hooks/run.sh, --verbose], timeout: 2s}
pools: [pools/edge.yaml]
";

fn parse(text: &str) -> Result<AgentConfig, Vec<InputError>> {
    parse_config(text, Path::new("/etc/tenure/agent.yaml"))
}

/// Every error as `(line, column, message)`.
fn errors(text: &str) -> Vec<(u64, u64, String)> {
    parse(text)
        .expect_err("must be refused")
        .into_iter()
        .map(|e| (e.position.line, e.position.column, e.message))
        .collect()
}

/// The first error's line, and whether its message contains `needle`.
fn first(text: &str, needle: &str) -> u64 {
    let all = errors(text);
    let (line, _, message) = &all[0];
    assert!(message.contains(needle), "`{message}` does not contain `{needle}` (all: {all:?})");
    *line
}

#[test]
fn a_good_config_gets_its_defaults_and_resolved_paths() {
    let config = parse(GOOD).expect("valid");
    assert_eq!(config.nodes.len(), 1);
    let node = &config.nodes[0];
    assert_eq!((node.name.as_str(), node.priority, node.capacity), ("a", 5, Some(50)));
    assert_eq!(config.store, StoreConfig::Embedded { path: PathBuf::from("/etc/tenure/data/a") });
    assert_eq!(config.identity_file, PathBuf::from("/etc/tenure/a.identity"));
    assert_eq!(config.pool_files, vec![PathBuf::from("/etc/tenure/pools/edge.yaml")]);
    assert_eq!(config.listen.to_string(), "127.0.0.1:9464");
    assert_eq!(config.heartbeat_interval_ms, 500);
    assert_eq!(config.requeue_interval_ms, 5_000);
    assert_eq!(config.action_timeout_ms, 2_000);
    assert_eq!(config.journal_retention, tenure_core::journal::JOURNAL_RETENTION_DEFAULT);
    assert_eq!(config.api_token_file, None);
    assert_eq!(config.vrrp, None);
    assert_eq!(
        config.provider("sim1").map(|p| &p.settings),
        Some(&ProviderSettings::SimCloud(SimCloudSettings {}))
    );
    assert_eq!(
        config.provider("hook").map(|p| &p.settings),
        Some(&ProviderSettings::Exec(ExecSettings {
            command: vec!["/etc/tenure/hooks/run.sh".to_owned(), "--verbose".to_owned()],
            timeout_ms: 2_000,
        }))
    );
}

#[test]
fn every_key_is_read() {
    let text = "\
nodes:
  - {name: a, provider: lan, placementGroup: g1, nic: eth0}
  - {name: b, provider: cloud, placementGroup: g1, nic: eni-b}
store: {kind: etcd, endpoints: ['http://10.0.0.1:2379', 'http://etcd:2379'], path: /var/lib/tenure, snapshotEvery: 500}
identityFile: /var/lib/tenure.identity
providers:
  - {name: lan, kind: onprem, interface: eth0, garpCount: 5, garpInterval: 50ms}
  - {name: cloud, kind: aws, region: us-east-1, endpointUrl: 'http://127.0.0.1:5000'}
  - {name: logger, kind: exec, command: [logger, -t, tenure]}
vrrp: {notifyFifo: /run/tenure/keepalived.fifo, instance: VI_1}
pools: []
listen: '[::1]:9000'
heartbeatInterval: 250ms
requeueInterval: 1m
actionTimeout: 3s
apiTokenFile: token
journalRetention: 20
";
    let config = parse_config(text, Path::new("agent.yaml")).expect("valid");
    assert_eq!(config.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), vec!["a", "b"]);
    assert_eq!(
        config.store,
        StoreConfig::Etcd {
            endpoints: vec!["http://10.0.0.1:2379".to_owned(), "http://etcd:2379".to_owned()],
            prefix: ETCD_PREFIX_DEFAULT.to_owned(),
            path: PathBuf::from("/var/lib/tenure"),
            snapshot_every: 500,
            tls: None,
            user: None,
        }
    );
    assert_eq!(config.identity_file, PathBuf::from("/var/lib/tenure.identity"), "beside, not inside");
    assert_eq!(
        config.providers.iter().map(|p| p.settings.clone()).collect::<Vec<_>>(),
        vec![
            ProviderSettings::Onprem(OnpremSettings {
                interface: "eth0".to_owned(),
                garp_count: 5,
                garp_interval_ms: 50
            }),
            ProviderSettings::Aws(AwsSettings {
                region: "us-east-1".to_owned(),
                endpoint_url: Some("http://127.0.0.1:5000".to_owned()),
                maintenance_notices: MaintenanceNotices::Ignore,
            }),
            // A bare program name stays for PATH; the default timeout is bounded by actionTimeout.
            ProviderSettings::Exec(ExecSettings {
                command: vec!["logger".to_owned(), "-t".to_owned(), "tenure".to_owned()],
                timeout_ms: 3_000
            }),
        ]
    );
    assert_eq!(
        config.vrrp,
        Some(VrrpConfig {
            notify_fifo: PathBuf::from("/run/tenure/keepalived.fifo"),
            instance: "VI_1".to_owned()
        })
    );
    assert!(config.pool_files.is_empty(), "an agent without pools just heartbeats");
    assert_eq!(config.listen.to_string(), "[::1]:9000");
    assert_eq!(
        (config.heartbeat_interval_ms, config.requeue_interval_ms, config.action_timeout_ms),
        (250, 60_000, 3_000)
    );
    assert_eq!(config.api_token_file, Some(PathBuf::from("token")), "relative to the config's folder");
    assert_eq!(config.journal_retention, 20);
    assert_eq!(config.identity_file, PathBuf::from("/var/lib/tenure.identity"));
}

#[test]
fn the_default_identity_file_follows_the_store_not_the_config_file() {
    // The same store under configs of two names: one identity file, named after the store.
    for name in ["single.yaml", "router.yaml"] {
        let config = parse_config(GOOD, Path::new(name)).expect("valid");
        assert_eq!(config.identity_file, PathBuf::from("a.identity"), "{name}");
        assert_eq!(config.store.path(), Path::new("data/a"));
    }
    let here = GOOD.replace("path: ./data/a", "path: .");
    let here = parse_config(
        &here.replace("pools: [pools/edge.yaml]", "identityFile: ../x.identity"),
        Path::new("agent.yaml"),
    );
    assert_eq!(here.expect("valid").store.path(), Path::new("."), "never an empty path");
}

#[test]
fn a_typo_is_refused_where_it_is_written() {
    assert_eq!(first(&format!("{GOOD}heartbeatIntreval: 1s\n"), "heartbeatIntreval"), 8);
    let nested = GOOD.replace("priority: 5", "priorty: 5");
    assert_eq!(first(&nested, "priorty"), 2);
    let store = GOOD.replace("path: ./data/a", "paht: ./data/a");
    assert_eq!(first(&store, "paht"), 3);
}

#[test]
fn node_and_nodes_exactly_one() {
    let both = format!("{GOOD}nodes: [{{name: b, provider: sim1, placementGroup: g1, nic: eni-b}}]\n");
    assert_eq!(first(&both, "not both"), 8);
    let neither = GOOD.replace(
        "node: {name: a, provider: sim1, placementGroup: g1, nic: eni-a, priority: 5, capacity: 50}\n",
        "",
    );
    let (line, column, message) = errors(&neither).remove(0);
    assert_eq!((line, column), (2, 1), "the first key of the file, after the comment");
    assert!(message.starts_with("missing `node`"), "{message}");
    let empty = GOOD.replace(
        "node: {name: a, provider: sim1, placementGroup: g1, nic: eni-a, priority: 5, capacity: 50}",
        "nodes: []",
    );
    assert_eq!(first(&empty, "at least one node"), 2);
}

#[test]
fn nodes_follow_the_shared_node_rule() {
    let text = GOOD.replace(
        "node: {name: a, provider: sim1, placementGroup: g1, nic: eni-a, priority: 5, capacity: 50}",
        "nodes:\n  - {name: a, provider: sim1, placementGroup: g1, nic: eni-a}\n  - {name: a, provider: sim9, placementGroup: g1, nic: eni-b}",
    );
    let all = errors(&text);
    let messages: Vec<&str> = all.iter().map(|(_, _, m)| m.as_str()).collect();
    assert_eq!(
        messages,
        vec!["node `a` is declared twice", "node `a` names undeclared provider `sim9`"],
        "{all:?}"
    );
    assert!(all.iter().all(|(line, _, _)| *line == 4), "{all:?}");
}

#[test]
fn peers_are_the_fleets_other_nodes_and_need_an_etcd_store() {
    let fleet = "node: {name: a, provider: sim1, placementGroup: g1, nic: eni-a}\n\
                 peers:\n  - {name: b, provider: sim1, placementGroup: g1, nic: eni-b, priority: 3}\n\
                 store: {kind: etcd, endpoints: [http://127.0.0.1:2379], path: ./data}\n\
                 providers: [{name: sim1, kind: sim-cloud}]\n";
    let config = parse(fleet).expect("a fleet config");
    assert_eq!(config.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["a"]);
    assert_eq!(config.peers.iter().map(|n| (n.name.as_str(), n.priority)).collect::<Vec<_>>(), [("b", 3)]);
    let embedded =
        fleet.replace("{kind: etcd, endpoints: [http://127.0.0.1:2379], path: ./data}", "{path: ./data}");
    assert_eq!(first(&embedded, "peers are the other nodes of a fleet"), 3);
    let twice = fleet.replace(
        "{name: b, provider: sim1, placementGroup: g1, nic: eni-b",
        "{name: a, provider: sim1, placementGroup: g1, nic: eni-b",
    );
    assert_eq!(first(&twice, "node `a` is declared twice"), 3);
    // A simulated provider is in each agent's memory: its inventory in a fleet contradicts the
    // others' calls (an operator trial saw drift repair re-capture for ever).
    let sim_inventory = fleet.replace("kind: sim-cloud}", "kind: sim-cloud, inventoryInterval: 1s}");
    assert_eq!(first(&sim_inventory, "in each agent's memory"), 5);
    let alone = sim_inventory
        .replace("{kind: etcd, endpoints: [http://127.0.0.1:2379], path: ./data}", "{path: ./data}")
        .replace("peers:\n  - {name: b, provider: sim1, placementGroup: g1, nic: eni-b, priority: 3}\n", "");
    assert!(parse(&alone).is_ok(), "one agent's own simulated provider may be read");
    let same_nic = fleet.replace("nic: eni-b", "nic: eni-a");
    assert!(
        errors(&same_nic).iter().any(|(line, _, m)| *line == 3 && m.contains("eni-a")),
        "{:?}",
        errors(&same_nic)
    );
}

#[test]
fn etcd_tls_and_passwords_come_in_pairs() {
    let base = "node: {name: a, provider: sim1, placementGroup: g1, nic: eni-a}\n\
                providers: [{name: sim1, kind: sim-cloud}]\n";
    let store = |s: &str| format!("{base}store: {s}\n");
    let good = parse(&store(
        "{kind: etcd, endpoints: [https://e1:2379], path: ./d, tls: {ca: ca.pem, cert: c.pem, key: c.key}, user: u, passwordFile: pw}",
    ))
    .expect("valid");
    let StoreConfig::Etcd { tls: Some(tls), user: Some((user, file)), .. } = good.store else {
        panic!("{:?}", good.store)
    };
    assert_eq!(tls.ca, PathBuf::from("/etc/tenure/ca.pem"));
    assert_eq!(
        (tls.cert, tls.key),
        (Some(PathBuf::from("/etc/tenure/c.pem")), Some(PathBuf::from("/etc/tenure/c.key")))
    );
    assert_eq!((user.as_str(), file), ("u", PathBuf::from("/etc/tenure/pw")));
    first(
        &store("{kind: etcd, endpoints: [https://e1:2379], path: ./d}"),
        "is https: give `tls: {ca: FILE}`",
    );
    first(
        &store("{kind: etcd, endpoints: [http://e1:2379], path: ./d, tls: {ca: ca.pem}}"),
        "is plain http, but `tls` is set",
    );
    first(
        &store("{kind: etcd, endpoints: [https://e1:2379], path: ./d, tls: {ca: ca.pem, cert: c.pem}}"),
        "both `cert` and `key`",
    );
    first(
        &store("{kind: etcd, endpoints: [http://e1:2379], path: ./d, user: u}"),
        "store.user needs `passwordFile`",
    );
    first(
        &store("{kind: etcd, endpoints: [http://e1:2379], path: ./d, passwordFile: pw}"),
        "store.passwordFile needs `user`",
    );
    first(&store("{path: ./d, user: u}"), "store kind `embedded` does not take `user`");
}

#[test]
fn providers_are_checked_by_kind() {
    let twice = GOOD.replace("{name: hook, kind: exec", "{name: sim1, kind: exec");
    assert_eq!(first(&twice, "provider `sim1` is declared twice"), 6);
    let unknown = GOOD.replace("kind: sim-cloud", "kind: sim-cluod");
    assert_eq!(first(&unknown, "unknown variant `sim-cluod`"), 5);
    let no_command = GOOD.replace(", command: [hooks/run.sh, --verbose]", "");
    let (line, column, message) = errors(&no_command).remove(0);
    assert_eq!((line, column), (6, 5), "at the provider entry");
    assert!(message.contains("exec provider `hook` needs `command`"), "{message}");
    let empty_command = GOOD.replace("[hooks/run.sh, --verbose]", "[]");
    assert_eq!(first(&empty_command, "must name at least the program"), 6);
    let empty_program = GOOD.replace("[hooks/run.sh, --verbose]", "['', --verbose]");
    assert_eq!(first(&empty_program, "the program must not be empty"), 6);
    let foreign = GOOD.replace("{name: sim1, kind: sim-cloud}", "{name: sim1, kind: sim-cloud, timeout: 1s}");
    assert_eq!(
        first(&foreign, "provider kind `sim-cloud` does not take `timeout` (it takes `inventoryInterval`)"),
        5
    );
    // A cloud kind parses in every build, whether or not this build has its executor (the
    // agent's start checks refuse a missing one with exit 3, `cli/preflight.rs`); its settings
    // and its NIC ids are checked here.
    let azure = GOOD
        .replace("kind: sim-cloud", "kind: azure, subscriptionId: 00000000-0000-0000-0000-000000000001")
        .replace(
            "nic: eni-a",
            "nic: /subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/a",
        );
    let parsed = parse(&azure).expect("an azure provider with its settings is a good config");
    // One NIC in two spellings (ARM ids ignore case) is one NIC for two nodes: refused at the
    // second, naming the first.
    let twice = format!(
        "{azure}peers:\n  - {{name: b, provider: sim1, placementGroup: g1, nic: /SUBSCRIPTIONS/00000000-0000-0000-0000-000000000001/resourceGroups/RG/providers/Microsoft.Network/networkInterfaces/A}}\n"
    )
    .replace("store: {kind: embedded, path: ./data/a}", "store: {kind: etcd, endpoints: [http://127.0.0.1:2379], path: ./data/a}");
    let all = errors(&twice);
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(
        all[0].2.starts_with("nic `/SUBSCRIPTIONS/")
            && all[0].2.contains("belongs to two nodes (node `a` has it as `/subscriptions/"),
        "{all:?}"
    );
    // A subscriptionId that is no GUID is one line, not one more per NIC.
    let bad_guid =
        azure.replace("subscriptionId: 00000000-0000-0000-0000-000000000001", "subscriptionId: 0000-zzzz");
    let all = errors(&bad_guid);
    assert_eq!(all.len(), 1, "{all:?}");
    assert!(all[0].2.contains("`0000-zzzz` is not a subscription id"), "{all:?}");
    assert_eq!(parsed.source.provider_kinds[0], tenure_core::input::Position { line: 5, column: 24 });
    let azure_setting = azure.replace("kind: azure,", "kind: azure, region: x,");
    assert_eq!(
        first(
            &azure_setting,
            "provider kind `azure` does not take `region` (it takes `subscriptionId`, `resourceGroup`, `endpointUrl`, \
             `ipForwarding`, `inventoryInterval`, `maintenanceNotices`)"
        ),
        5
    );
    let onprem = GOOD.replace("{name: sim1, kind: sim-cloud}", "{name: sim1, kind: onprem}");
    assert_eq!(first(&onprem, "needs `interface`"), 5);
    let bad_interface = GOOD.replace(
        "{name: sim1, kind: sim-cloud}",
        "{name: sim1, kind: onprem, interface: a-very-long-interface}",
    );
    assert_eq!(first(&bad_interface, "1 to 15 bytes"), 5);
    let garp = GOOD.replace(
        "{name: sim1, kind: sim-cloud}",
        "{name: sim1, kind: onprem, interface: eth0, garpCount: 1000}",
    );
    assert_eq!(first(&garp, "garpCount 1000 is more than 100"), 5);
    let region = GOOD.replace("{name: sim1, kind: sim-cloud}", "{name: sim1, kind: aws, region: US East}");
    assert_eq!(first(&region, "not an AWS region"), 5);
    let no_region = GOOD.replace("{name: sim1, kind: sim-cloud}", "{name: sim1, kind: aws}");
    assert_eq!(first(&no_region, "needs `region`"), 5);
}

#[test]
fn inventory_intervals_default_by_kind_and_zero_turns_them_off() {
    let interval = |text: &str, name: &str| {
        parse(text)
            .expect("valid")
            .providers
            .into_iter()
            .find(|p| p.name == name)
            .expect("a provider")
            .inventory_interval_ms
    };
    assert_eq!(interval(GOOD, "sim1"), None, "simulated providers are read only when asked");
    assert_eq!(interval(GOOD, "hook"), None);
    let asked = GOOD
        .replace("{name: sim1, kind: sim-cloud}", "{name: sim1, kind: sim-cloud, inventoryInterval: 250ms}");
    assert_eq!(interval(&asked, "sim1"), Some(250));
    let aws = GOOD.replace("{name: sim1, kind: sim-cloud}", "{name: sim1, kind: aws, region: us-east-1}");
    assert_eq!(interval(&aws, "sim1"), Some(AWS_INVENTORY_INTERVAL_DEFAULT_MS));
    let onprem = GOOD.replace("{name: sim1, kind: sim-cloud}", "{name: sim1, kind: onprem, interface: eth0}");
    assert_eq!(interval(&onprem, "sim1"), Some(ONPREM_INVENTORY_INTERVAL_DEFAULT_MS));
    let onprem_fast = onprem.replace("interface: eth0", "interface: eth0, inventoryInterval: 1s");
    assert_eq!(interval(&onprem_fast, "sim1"), Some(1_000));
    let off = aws.replace("region: us-east-1", "region: us-east-1, inventoryInterval: 0s");
    assert_eq!(interval(&off, "sim1"), None, "0s: no reads, no drift repair");
    let bad = aws.replace("region: us-east-1", "region: us-east-1, inventoryInterval: often");
    assert_eq!(first(&bad, "inventoryInterval: `often`"), 5);
    let exec = GOOD.replace("timeout: 2s", "timeout: 2s, inventoryInterval: 1s");
    assert_eq!(first(&exec, "provider kind `exec` does not take `inventoryInterval`"), 6);
}

#[test]
fn garp_refresh_is_off_by_default_on_prem_only_and_at_least_a_second() {
    let refresh = |text: &str| {
        parse(text)
            .expect("valid")
            .providers
            .into_iter()
            .find(|p| p.name == "sim1")
            .expect("sim1")
            .garp_refresh_ms
    };
    let onprem = GOOD.replace("{name: sim1, kind: sim-cloud}", "{name: sim1, kind: onprem, interface: eth0}");
    assert_eq!(refresh(&onprem), None, "off by default");
    let every = onprem.replace("interface: eth0", "interface: eth0, garpRefresh: 1m30s");
    assert_eq!(refresh(&every), Some(90_000));
    let off = onprem.replace("interface: eth0", "interface: eth0, garpRefresh: 0s");
    assert_eq!(refresh(&off), None, "0s: off");
    let sim =
        GOOD.replace("{name: sim1, kind: sim-cloud}", "{name: sim1, kind: sim-onprem, garpRefresh: 1s}");
    assert_eq!(refresh(&sim), Some(1_000), "the simulated on-prem provider has the same key");
    let short = onprem.replace("interface: eth0", "interface: eth0, garpRefresh: 500ms");
    let line = short.lines().nth(4).expect("the provider's line");
    let column = u64::try_from(line.find("500ms").expect("the value") + 1).expect("small");
    assert_eq!(
        errors(&short),
        vec![(
            5,
            column,
            "garpRefresh 500ms is shorter than 1s: use at least that, or 0s to turn the refresh off".into()
        )]
    );
    let long = onprem.replace("interface: eth0", "interface: eth0, garpRefresh: 99999999999h");
    assert_eq!(
        first(&long, "garpRefresh 99999999999h is longer than 3600s: switches forget a MAC in minutes"),
        5
    );
    let bad = onprem.replace("interface: eth0", "interface: eth0, garpRefresh: often");
    assert_eq!(first(&bad, "garpRefresh: `often`"), 5);
    let cloud =
        GOOD.replace("{name: sim1, kind: sim-cloud}", "{name: sim1, kind: sim-cloud, garpRefresh: 30s}");
    assert_eq!(first(&cloud, "provider kind `sim-cloud` does not take `garpRefresh`"), 5);
}

#[test]
fn an_exec_timeout_is_bounded_by_the_action_timeout() {
    let longer = format!("{GOOD}actionTimeout: 1s\n");
    let (line, _, message) = errors(&longer).remove(0);
    assert_eq!(line, 6);
    assert!(message.contains("timeout 2s is longer than actionTimeout 1s"), "{message}");
    let zero = GOOD.replace("timeout: 2s", "timeout: 0s");
    assert_eq!(first(&zero, "timeout must be longer than 0"), 6);
}

#[test]
fn durations_and_numbers_are_checked_where_written() {
    assert_eq!(first(&format!("{GOOD}heartbeatInterval: 5 seconds\n"), "heartbeatInterval: `5 seconds`"), 8);
    assert_eq!(
        first(&format!("{GOOD}heartbeatInterval: 0s\n"), "heartbeatInterval must be longer than 0"),
        8
    );
    assert_eq!(first(&format!("{GOOD}requeueInterval: soon\n"), "requeueInterval: `soon`"), 8);
    assert_eq!(first(&format!("{GOOD}requeueInterval: 100000h\n"), "requeueInterval must be at most 1h"), 8);
    assert_eq!(first(&format!("{GOOD}requeueInterval: 3601s\n"), "not 3601s"), 8);
    assert_eq!(parse(&format!("{GOOD}requeueInterval: 1h\n")).expect("1h").requeue_interval_ms, 3_600_000);
    assert_eq!(first(&format!("{GOOD}actionTimeout: 0\n"), "actionTimeout must be longer than 0"), 8);
    assert_eq!(first(&format!("{GOOD}journalRetention: 0\n"), "journalRetention must be from 1"), 8);
    assert_eq!(first(&format!("{GOOD}journalRetention: -3\n"), "journalRetention must be from 1 to"), 8);
}

#[test]
fn a_bad_listen_address_is_refused() {
    for bad in ["localhost:9464", "127.0.0.1", "127.0.0.1:99999", "::1:9464"] {
        let (line, column, message) = errors(&format!("{GOOD}listen: '{bad}'\n")).remove(0);
        assert_eq!((line, column), (8, 9), "{bad}");
        assert!(message.starts_with(&format!("listen: `{bad}` is not an IP address and port")), "{message}");
    }
}

#[test]
fn stores_are_checked_by_kind() {
    let unknown = GOOD.replace("kind: embedded", "kind: etdc");
    assert_eq!(first(&unknown, "unknown variant `etdc`"), 3);
    let no_endpoints = GOOD.replace("kind: embedded", "kind: etcd");
    assert_eq!(first(&no_endpoints, "an etcd store needs `endpoints`"), 3);
    let empty = GOOD.replace("kind: embedded", "kind: etcd, endpoints: []");
    assert_eq!(first(&empty, "at least one etcd URL"), 3);
    let bad_url = GOOD.replace("kind: embedded", "kind: etcd, endpoints: [127.0.0.1:2379]");
    assert_eq!(first(&bad_url, "is not a URL"), 3);
    let prefix = GOOD.replace("kind: embedded", "kind: etcd, endpoints: ['http://e:2379'], prefix: tenure");
    assert_eq!(first(&prefix, "must start with `/`"), 3);
    let embedded_endpoints = GOOD.replace("kind: embedded", "kind: embedded, endpoints: ['http://e:2379']");
    assert_eq!(first(&embedded_endpoints, "store kind `embedded` does not take `endpoints`"), 3);
    let missing_path = GOOD.replace(", path: ./data/a", "");
    assert_eq!(first(&missing_path, "missing field `path`"), 3);
    let empty_path = GOOD.replace("path: ./data/a", "path: ''");
    assert_eq!(first(&empty_path, "store.path must not be empty"), 3);
}

#[test]
fn the_identity_file_must_be_outside_the_store() {
    let inside = format!("{GOOD}identityFile: data/a/../a/tenure.identity\n");
    let (line, column, message) = errors(&inside).remove(0);
    assert_eq!((line, column), (8, 15));
    assert!(message.contains("is inside store.path"), "{message}");
    let beside = format!("{GOOD}identityFile: data/a.identity\n");
    assert!(parse(&beside).is_ok(), "a sibling of the store's folder is outside it");
    // The default identity file sits beside the config file: a store in the config's own folder
    // would hold it; a store path without a folder name has no default.
    let store_here = GOOD.replace("path: ./data/a", "path: .");
    let (line, _, message) = errors(&store_here).remove(0);
    assert_eq!(line, 3);
    assert!(message.contains("the default identityFile `/etc/tenure/tenure.identity`"), "{message}");
    let root = GOOD.replace("path: ./data/a", "path: /");
    let (line, _, message) = errors(&root).remove(0);
    assert_eq!(line, 3);
    assert!(message.contains("store.path `/` has no folder name"), "{message}");
    assert!(parse(&format!("{root}identityFile: /var/lib/tenure.identity\n")).is_err(), "inside `/`");
}

#[test]
fn pool_entries_and_paths_are_checked() {
    let twice = GOOD.replace(
        "pools: [pools/edge.yaml]",
        "pools: [pools/edge.yaml, ./pools/../pools/edge.yaml, pools/edge.yaml]",
    );
    assert_eq!(first(&twice, "pool file `pools/edge.yaml` is listed twice"), 7);
    let empty = format!("{GOOD}apiTokenFile: ''\n");
    assert_eq!(first(&empty, "apiTokenFile must not be empty"), 8);
    let vrrp = format!("{GOOD}vrrp: {{notifyFifo: /run/f, instance: 'VI 1'}}\n");
    assert_eq!(first(&vrrp, "vrrp.instance `VI 1`"), 8);
}

#[test]
fn errors_come_in_file_order_and_all_at_once() {
    let text = GOOD
        .replace("kind: sim-cloud}", "kind: sim-cloud, command: [x]}")
        .replace("priority: 5", "priority: 5, nic: eni-b")
        + "listen: nowhere\n";
    // A duplicate key is a YAML error and stops parsing: fix it to see the rest.
    assert!(first(&text, "duplicate") == 2);
    let text = GOOD.replace("kind: sim-cloud}", "kind: sim-cloud, command: [x]}") + "listen: nowhere\n";
    let lines: Vec<u64> = errors(&text).iter().map(|(line, _, _)| *line).collect();
    assert_eq!(lines, vec![5, 8]);
}

/// A fresh folder for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tenure-config-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("pools")).expect("scratch folder");
    dir
}

const POOL: &str = "\
apiVersion: tenure.dev/v1alpha1
kind: MobilityPool
metadata: {name: edge}
spec:
  addresses: [10.0.0.10, 10.0.0.16/30]
  provider: sim1
  placementGroup: g1
  members: [a, b]
";

/// Writes the config and pool files into a scratch folder and loads them.
fn load(
    name: &str,
    config: &str,
    pools: &[(&str, &str)],
) -> (PathBuf, Result<Vec<tenure_core::model::PoolSpec>, Vec<String>>) {
    let dir = scratch(name);
    let path = dir.join("agent.yaml");
    fs::write(&path, config).expect("write config");
    for (file, text) in pools {
        fs::write(dir.join(file), text).expect("write pool");
    }
    let config = load_config(&path).expect("the config is valid");
    let result = load_pools(&config);
    (dir, result)
}

#[test]
fn pool_files_load_and_other_hosts_members_are_allowed() {
    let (dir, pools) = load("good", GOOD, &[("pools/edge.yaml", POOL)]);
    let pools = pools.expect("valid pools");
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0].members, vec!["a".to_owned(), "b".to_owned()], "b runs on another host");
    assert_eq!(pools[0].addresses.len(), 5);
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn a_missing_pool_file_is_reported_at_its_config_entry() {
    let (dir, result) = load("missing", GOOD, &[]);
    let errors = result.expect_err("missing file");
    let config = dir.join("agent.yaml").display().to_string();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with(&format!("{config}:7:9: pool file `")), "{errors:?}");
    assert!(errors[0].contains("cannot read"), "{errors:?}");
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn pools_are_checked_together_and_against_the_config() {
    let config = GOOD.replace("[pools/edge.yaml]", "[pools/edge.yaml, pools/more.yaml]");
    let more = POOL
        .replace("name: edge", "name: more")
        .replace("[10.0.0.10, 10.0.0.16/30]", "[10.0.0.99, 10.0.0.17]");
    let (dir, result) = load("overlap", &config, &[("pools/edge.yaml", POOL), ("pools/more.yaml", &more)]);
    let errors = result.expect_err("overlap across files");
    let more_file = dir.join("pools/more.yaml").display().to_string();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with(&format!("{more_file}:5:")), "{errors:?}");
    assert!(errors[0].contains("10.0.0.17") && errors[0].contains("also in pool `edge`"), "{errors:?}");
    let edge_file = dir.join("pools/edge.yaml").display().to_string();
    assert!(errors[0].ends_with(&format!("(pool `edge` is defined in {edge_file})")), "{errors:?}");
    let _ = fs::remove_dir_all(dir);

    // The same pool name in two files: the error names the first file too.
    let again = POOL.replace("[10.0.0.10, 10.0.0.16/30]", "[10.0.0.99]");
    let (dir, result) = load("twice", &config, &[("pools/edge.yaml", POOL), ("pools/more.yaml", &again)]);
    let errors = result.expect_err("defined twice across files");
    let (more_file, edge_file) = (
        dir.join("pools/more.yaml").display().to_string(),
        dir.join("pools/edge.yaml").display().to_string(),
    );
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with(&format!("{more_file}:")), "{errors:?}");
    assert!(
        errors[0].ends_with(&format!("is defined twice (first at line 3 column 18 of {edge_file})")),
        "{errors:?}"
    );
    let _ = fs::remove_dir_all(dir);

    let unknown_provider = POOL.replace("provider: sim1", "provider: sim9");
    let (dir, result) = load("provider", GOOD, &[("pools/edge.yaml", &unknown_provider)]);
    let errors = result.expect_err("undeclared provider");
    let edge = dir.join("pools/edge.yaml").display().to_string();
    assert!(errors[0].starts_with(&format!("{edge}:6:13: pool `edge` names provider `sim9`")), "{errors:?}");
    assert!(errors[0].contains("it declares `sim1`, `hook`"), "{errors:?}");
    let _ = fs::remove_dir_all(dir);

    let other_group = POOL.replace("placementGroup: g1", "placementGroup: g2");
    let (dir, result) = load("group", GOOD, &[("pools/edge.yaml", &other_group)]);
    let errors = result.expect_err("local member in another placement group");
    assert_eq!(errors.len(), 1, "only the member this config runs: {errors:?}");
    assert!(errors[0].contains(":8:13: member `a` is in placement group `g1`"), "{errors:?}");
    let _ = fs::remove_dir_all(dir);

    let short_ttl = format!("{POOL}  heartbeatTTL: 400ms\n");
    let (dir, result) = load("ttl", GOOD, &[("pools/edge.yaml", &short_ttl)]);
    let errors = result.expect_err("TTL shorter than the heartbeat interval");
    assert!(errors[0].contains(":3:18: pool `edge` has heartbeatTTL 400ms"), "{errors:?}");
    let _ = fs::remove_dir_all(dir);

    let vrrp = format!("{POOL}  authority: vrrp\n");
    let (dir, result) = load("vrrp", GOOD, &[("pools/edge.yaml", &vrrp)]);
    let errors = result.expect_err("vrrp authority without the vrrp section");
    assert!(
        errors[0].contains("has `authority: vrrp`, but the agent config has no `vrrp` section"),
        "{errors:?}"
    );
    let _ = fs::remove_dir_all(dir);
}

/// SPEC 9: a call cut off from the log ends at its head confirmation plus `actionTimeout`; it must
/// end before another node may take the address from a silent one (`heartbeatTTL +
/// promotionHold`). The defaults (2 s; 3 s + 1 s) keep it; a pool that breaks it is refused at its
/// name, the line naming the config file whose `actionTimeout` it is.
#[test]
fn a_pool_whose_takeover_is_not_longer_than_the_action_timeout_is_refused() {
    let (dir, result) = load("action-ok", GOOD, &[("pools/edge.yaml", POOL)]);
    assert!(result.is_ok(), "the defaults keep the bound: {result:?}");
    let _ = fs::remove_dir_all(dir);

    let fast = format!("{POOL}  heartbeatTTL: 1500ms\n  promotionHold: 500ms\n");
    let (dir, result) = load("action-equal", GOOD, &[("pools/edge.yaml", &fast)]);
    let errors = result.expect_err("2s is not below 1.5s + 0.5s");
    let config = dir.join("agent.yaml").display().to_string();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains(&format!(
            ":3:18: pool `edge` has heartbeatTTL + promotionHold 2s, not longer than actionTimeout 2s plus \
             heartbeatInterval 500ms of the agent config `{config}`"
        )),
        "{errors:?}"
    );
    let _ = fs::remove_dir_all(dir);

    // The last logged heartbeat may precede the head confirmation by a heartbeat interval
    // (500ms by default): 1.5s + 0.5s is not below 2s either.
    let shorter = format!("{GOOD}actionTimeout: 1500ms\n").replace("timeout: 2s", "timeout: 1s");
    let (dir, result) = load("action-interval", &shorter, &[("pools/edge.yaml", &fast)]);
    let errors = result.expect_err("1.5s + 0.5s is not below 1.5s + 0.5s");
    assert!(
        errors[0].contains("not longer than actionTimeout 1500ms plus heartbeatInterval 500ms of"),
        "{errors:?}"
    );
    let _ = fs::remove_dir_all(dir);

    let shorter = format!("{GOOD}actionTimeout: 1200ms\n").replace("timeout: 2s", "timeout: 1s");
    let (dir, result) = load("action-lower", &shorter, &[("pools/edge.yaml", &fast)]);
    assert!(result.is_ok(), "a shorter actionTimeout keeps it: {result:?}");
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn a_pool_without_a_local_member_is_not_held_to_this_hosts_timing() {
    let others = format!("{}  heartbeatTTL: 400ms\n  authority: vrrp\n", POOL.replace("[a, b]", "[b, c]"));
    let (dir, result) = load("others", GOOD, &[("pools/edge.yaml", &others)]);
    assert!(result.is_ok(), "{result:?}");
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn a_config_file_is_read_with_its_name_in_every_error() {
    let dir = scratch("render");
    let path = dir.join("agent.yaml");
    fs::write(&path, format!("{GOOD}listen: nowhere\nbogus: 1\n")).expect("write");
    let errors = load_config(&path).expect_err("unknown key");
    let file = path.display().to_string();
    assert_eq!(
        errors,
        vec![format!(
            "{file}:9:1: unknown field `bogus`, expected one of node, nodes, peers, store, identityFile, providers, vrrp, pools, listen, heartbeatInterval, requeueInterval, actionTimeout, apiTokenFile, journalRetention"
        )]
    );
    let missing = load_config(&dir.join("nope.yaml")).expect_err("missing file");
    assert_eq!(missing.len(), 1);
    assert!(
        missing[0].starts_with(&format!("{}: cannot read: ", dir.join("nope.yaml").display())),
        "{missing:?}"
    );
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn two_of_this_agent_s_nodes_on_one_onprem_provider_are_refused() {
    let text = "\
nodes:
  - {name: a, provider: lan, placementGroup: g1, nic: lan-a}
  - {name: b, provider: lan, placementGroup: g1, nic: lan-b}
store: {kind: embedded, path: ./data/a}
providers:
  - {name: lan, kind: onprem, interface: eth0}
";
    assert_eq!(first(text, "nodes `a` and `b` both run here on onprem provider `lan`"), 2);
    let one = text.replace("  - {name: b, provider: lan, placementGroup: g1, nic: lan-b}\n", "");
    assert!(parse(&one).is_ok(), "one node on it is fine");
}
