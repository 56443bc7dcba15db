//! The "Examples:" section at the end of each verb's `--help` (clap's `after_help`), one constant
//! per verb. Each line that is not a `#` comment is a whole command line that parses as written
//! (`tests/cli_help.rs` parses every one with the command line's own definition); the paths are
//! those of the Debian package (`/etc/tenure/agent.yaml`, `/etc/tenure/token`) or of this
//! repository's `examples/`.

/// `tenure replay`.
pub const REPLAY: &str = "\
Examples:
  # A narrated trace, then the final tables
  tenure replay examples/scenarios/failover.yaml
  # One JSON document with sorted keys, byte-stable (the golden files)
  tenure replay examples/scenarios/failover.yaml -o json
  # After an incident: a store backup's timeline, ownership, actions and violations
  tenure replay incident.backup --config /etc/tenure/agent.yaml
  # The same as JSON, and its timeline drawn as SVG
  tenure replay incident.backup --config /etc/tenure/agent.yaml -o json --plot incident.svg";

/// `tenure validate`.
pub const VALIDATE: &str = "\
Examples:
  # Every check the agent makes before it opens its store (exit 0, or 2 with file:line:column)
  tenure validate /etc/tenure/agent.yaml
  # Pool files and scenarios, checked together
  tenure validate examples/pools/edge.yaml examples/scenarios/failover.yaml";

/// `tenure agent`.
pub const AGENT: &str = "\
Examples:
  # What the packaged unit (tenure-agent.service) runs
  tenure agent --config /etc/tenure/agent.yaml --log-format json
  # One router on the simulated cloud, from this repository
  tenure agent --config examples/agent/single.yaml";

/// `tenure sim`.
pub const SIM: &str = "\
Examples:
  # 1,000 seeded fault runs; the last line is seeds=N violations=V
  tenure sim --seeds 1000
  # One seed's failover timeline as SVG
  tenure sim --seed 11 --plot seed-11.svg
  # A store backup's timeline as SVG (what `tenure replay BACKUP --plot` draws)
  tenure sim --plot incident.svg --backup incident.backup --config /etc/tenure/agent.yaml
  # A documented limit, shown (docs/safety.md)
  tenure sim --mode paused-call --seeds 100";

/// `tenure demo`.
pub const DEMO: &str = "\
Examples:
  # Three routers, a frozen holder, a fenced failover; nothing left behind
  tenure demo
  # Keep the store for inspection
  tenure demo --dir /tmp/tenure-demo";

/// `tenure elect`.
pub const ELECT: &str = "\
Examples:
  # Campaign on this host (state in ~/.local/state/tenure); one JSON line per change
  tenure elect pipeline --name a --backend embedded
  # Against an etcd cluster (a build with --features etcd)
  tenure elect pipeline --name a --backend etcd --endpoints http://10.0.0.1:2379,http://10.0.0.2:2379";

/// `tenure ownership`.
pub const OWNERSHIP: &str = "\
Examples:
  # Every address: POOL ADDRESS OWNER PHASE NICS
  tenure ownership
  # One pool's addresses with every column
  tenure ownership --pool edge-vips -o wide
  # Two addresses, through a TLS proxy in front of the agent
  tenure ownership 10.0.0.10 10.0.0.11 --endpoint https://router-a.example:8443 --ca-file ca.pem";

/// `tenure actions`.
pub const ACTIONS: &str = "\
Examples:
  # The actions this agent executed
  tenure actions --state executed
  # What waits for approval in a manual pool
  tenure actions --state pending --pool edge-vips -o json";

/// `tenure history`.
pub const HISTORY: &str = "\
Examples:
  # What happened to one address: owners, causes, epochs, results
  tenure history 10.0.0.17
  # Node a's part in the last failover, as JSON
  tenure history --node a -o json
  # A pool's entries 50 at a time (the token of the next page is printed on stderr)
  tenure history --pool edge-vips --limit 50";

/// `tenure drain`.
pub const DRAIN: &str = "\
Examples:
  # Before maintenance: node a gives up its addresses
  tenure drain a --token-file /etc/tenure/token";

/// `tenure node`.
pub const NODE: &str = "\
Examples:
  # A router gone for good leaves the fleet (a router joins by starting its agent)
  tenure node retire r3 --token-file /etc/tenure/token";

/// `tenure node retire`.
pub const NODE_RETIRE: &str = "\
Examples:
  # Router r3 is gone for good: stop its agent, wait until its addresses moved, then
  tenure node retire r3 --token-file /etc/tenure/token
  # Its host is gone with what it held (the log still says it holds an address)
  tenure node retire r3 --force --token-file /etc/tenure/token";

/// `tenure undrain`.
pub const UNDRAIN: &str = "\
Examples:
  # After maintenance: node a may hold addresses again
  tenure undrain a --token-file /etc/tenure/token";

/// `tenure approve`.
pub const APPROVE: &str = "\
Examples:
  # One action, by the key `tenure actions --state pending` shows
  tenure approve edge-vips/10.0.0.10/assign-secondary-ip/b/sim1/eni-b/owner:2:epoch:2 --token-file /etc/tenure/token
  # Every action of one address waiting for approval
  tenure approve --pool edge-vips --address 10.0.0.10 --token-file /etc/tenure/token";

/// `tenure desire`.
pub const DESIRE: &str = "\
Examples:
  # The address should be held again
  tenure desire edge-vips 10.0.0.10 --token-file /etc/tenure/token";

/// `tenure undesire`.
pub const UNDESIRE: &str = "\
Examples:
  # Nobody should hold the address (its holder releases it)
  tenure undesire edge-vips 10.0.0.10 --token-file /etc/tenure/token";

/// `tenure store`.
pub const STORE: &str = "\
Examples:
  # A running agent's store, through its API (its config's listen and apiTokenFile)
  tenure store backup /tmp/a.backup --config /etc/tenure/agent.yaml
  # Back into a stopped agent's store; every token is raised above anything issued since
  tenure store restore /tmp/a.backup --config /etc/tenure/agent.yaml";

/// `tenure store backup`.
pub const STORE_BACKUP: &str = "\
Examples:
  # A running agent is backed up through its API (its config's listen and apiTokenFile)
  tenure store backup /tmp/a.backup --config /etc/tenure/agent.yaml
  # A stopped agent's store, named directly
  tenure store backup /tmp/a.backup --store-dir /var/lib/tenure/store --identity-file /var/lib/tenure/store.identity";

/// `tenure store restore`.
pub const STORE_RESTORE: &str = "\
Examples:
  # Into a stopped agent's store; every token is raised above anything issued since the backup
  tenure store restore /tmp/a.backup --config /etc/tenure/agent.yaml";

/// `tenure sink-mark`.
pub const SINK_MARK: &str = "\
Examples:
  # The durable high-water mark a fenced sink keeps
  tenure sink-mark show /var/lib/pipeline/sink.mark
  # Recovery only: back to the highest term the backend really issued
  tenure sink-mark reset /var/lib/pipeline/sink.mark --to 42 --yes-i-know-this-reopens-fencing";

/// `tenure sink-mark show`.
pub const SINK_MARK_SHOW: &str = "\
Examples:
  tenure sink-mark show /var/lib/pipeline/sink.mark";

/// `tenure sink-mark reset`.
pub const SINK_MARK_RESET: &str = "\
Examples:
  # Back to the highest term the backend really issued (reopens fencing; no sink may hold the mark)
  tenure sink-mark reset /var/lib/pipeline/sink.mark --to 42 --yes-i-know-this-reopens-fencing";

/// `tenure completion`.
pub const COMPLETION: &str = "\
Examples:
  # bash, for the current user (bash-completion loads it on demand)
  tenure completion bash > ~/.local/share/bash-completion/completions/tenure
  # zsh: a file named _tenure in a folder of $fpath
  tenure completion zsh > ~/.zfunc/_tenure
  tenure completion fish > ~/.config/fish/completions/tenure.fish";
