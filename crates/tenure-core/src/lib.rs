//! tenure-core is the deterministic coordination core of tenure. It is **sans-IO**: it never
//! reads a clock, a socket, a file or an environment variable, and it has no async runtime.
//! Time is the log's stream time, passed in with the events; nothing iterates a hash map in an
//! order that reaches an output. Same log in, same ownership map, epochs and actions out.
//!
//! Everything that decides safety lives here, so that it can be tested exhaustively and
//! simulated: the log projection, eligibility, arbitration, the epoch rules, the planner, the one
//! fence rule and the journal state machine. The runtime crate (`tenure`) drives it.
//!
//! # Layout
//!
//! - [`model`] — fencing tokens (`CaptureEpoch`, `OwnershipEpoch`, `LeaderEpoch`), nodes,
//!   providers, pools, verbs, stamped actions and their idempotency keys.
//! - [`chunked_map`] — an ordered map in shared chunks: a node's journal, cloned in O(1) for readers.
//! - [`names`] — one shared copy of each pool, node, provider and NIC name (memory, not meaning).
//! - [`input`] — located input errors; names, Go-style durations, address ranges.
//! - [`spec`] — strict MobilityPool parsing and validation.
//! - [`fleet_spec`] — strict node declarations and provider names (scenarios and agent configs).
//! - [`log`] — the federation log's events.
//! - [`codec`] — the stable, versioned stored form of events, pool specs, journal records and
//!   high-water marks.
//! - [`log_store`] — the `Log` interface (append, read from an index, head), `MemoryLog` (encoded records) and `EventLog` (the events themselves: replay's and the simulator's).
//! - [`agent`] — the agent's core: the rules of a step the daemon and the simulator both run
//!   (which nodes plan, promotion, head confirmation and its proof, gating, stale calls, what an
//!   operator may append), and the clock-lead rule.
//! - [`anchor`] — how far a follower applied a shared log, and the one check that the log still
//!   holds it (a wiped or restored etcd; the simulator's rolled-back logs).
//! - [`state`] — the state the log builds (nodes, pools, addresses, token lines), as plain data.
//! - [`claims`] — the one overlap rule: an address in at most one applied pool of a domain.
//! - [`federation`] — the state the log builds; the epoch rules (SPEC 1) are enforced here;
//!   [`federation::history`] folds the log into a timeline of what moved and why (SPEC 10).
//! - [`eligibility`] — who may own an address at a stream time (SPEC 3).
//! - [`arbitration`] — who owns each address (SPEC 4).
//! - [`planner`] — the level-triggered acquire and release sets (SPEC 5).
//! - [`pool_changes`] — pool files to ordered `pool-applied` / `pool-deleted` events (the agent's
//!   start and reloads, the simulator's operators).
//! - [`report`] — how an error reads to an operator: one line with its causes.
//! - [`fence`] — the one fence rule and the durable high-water marks (SPEC 6).
//! - [`journal`] — the outbox state machine and the `JournalStore` persistence trait.
//! - [`retry`] — how long a failed action waits before its retry (exponential, capped, jittered).
//! - [`rows`] — the report rows (ownership, actions, conditions) every list and report prints.
//! - [`scenario`] — the replay scenario format (SPEC 11): parsed and checked, for `tenure replay`,
//!   `tenure validate` and the simulator.
//! - [`sim_provider`] — the in-memory `sim-cloud` and `sim-onprem` providers (SPEC 7): run by
//!   the agent's `sim-*` executors, the replay and the simulator.
//! - [`node`] — one node's engine: reconcile (plan, import, sweep, compact) and gated execution.
//! - [`driver`] — the one sans-IO driver of a node (replay, the simulator and the agent use it).
//!
//! # Driving a node (quinn-proto style)
//!
//! Inputs are calls ([`federation::Federation::apply`] for log events,
//! [`node::NodeEngine::reconcile`] for a local reconcile); outputs are drained by
//! [`node::NodeEngine::poll_execution`] until it returns `None`, each answered by
//! [`node::NodeEngine::handle_execution_result`].

pub mod agent;
pub mod anchor;
pub mod arbitration;
pub mod chunked_map;
pub mod claims;
pub mod codec;
pub mod driver;
pub mod eligibility;
pub mod federation;
pub mod fence;
#[cfg(test)]
mod fixtures;
pub mod fleet_spec;
pub mod input;
pub mod journal;
pub mod journal_index;
pub mod log;
pub mod log_store;
pub mod map_index;
pub mod model;
pub mod names;
pub mod node;
pub mod planner;
pub mod pool_changes;
pub mod report;
pub mod retry;
pub mod rows;
pub mod scenario;
pub mod sim_provider;
pub mod spec;
pub mod state;
