//! tenure-lead: leadership with a fencing epoch, for leader-only work in pipelines (SPEC 8).
//!
//! A [`LeadershipHandle`] tells whether this process leads and under which [`LeaderEpoch`]; the
//! epoch is a term counter that a backend increments on every takeover and keeps on renewal, so
//! downstream systems can reject a deposed leader's work. The [`bridge`] stamps every message of
//! a leader-only producer with the epoch snapshot taken when it was spawned; the [`sink`] rejects
//! any message whose epoch is below the highest it accepted, durably.
//!
//! # Layout
//!
//! - [`handle`] — `LeadershipHandle`: `is_leader()`, `leader_epoch()`, a watch of changes.
//! - [`config`] — lease duration, renew deadline, retry period, jitter (Kubernetes defaults).
//! - [`backend`] — the `LeaseBackend` trait every election backend implements.
//! - [`elector`] — the campaign loop: acquire, renew, step down before the lease can expire.
//! - [`noop`], [`embedded`], `etcd` — the backends (Kubernetes lives in `tenure-kube`). `etcd` is
//!   built only with the cargo feature `etcd` (etcd-client needs protoc at build time).
//! - `etcd_connection` (feature `etcd`) — how every etcd client of tenure connects: endpoints,
//!   deadlines, keepalive, TLS, authentication (the agent's fleet store uses it too).
//! - [`memory`] — the highest term seen per election, kept in the state directory across
//!   restarts; `Remembering` wraps a backend with it.
//! - [`bridge`] — the epoch bridge between a leader-only producer and the pipeline.
//! - [`sink`] — the fenced sink, with optional HMAC-signed stamps.
//! - [`durable`] — durable small files, for all of tenure: the atomic, fsync'd replace and the
//!   exclusive lock file (the sink's mark, the terms, and in `tenure` the store's files).
//!
//! # Example
//!
//! ```
//! use tenure_lead::{config::ElectionConfig, elector, noop::NoopBackend};
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! let (handle, task) = elector::spawn(NoopBackend, ElectionConfig::default(), shutdown.clone());
//! let mut changes = handle.watch();
//! changes.wait_for(|s| s.leader).await.unwrap();
//! assert_eq!(handle.leader_epoch().map(|e| e.get()), Some(1));
//! shutdown.cancel();
//! task.await.unwrap().unwrap();
//! assert!(!handle.is_leader(), "stepping down is published");
//! # });
//! ```

pub mod backend;
pub mod bridge;
pub mod config;
pub mod durable;
pub mod elector;
pub mod embedded;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "etcd")]
pub mod etcd_connection;
pub mod handle;
pub mod memory;
pub mod noop;
pub mod sink;

pub use handle::{ElectionStats, LeaderState, LeadershipHandle};
pub use tenure_core::model::LeaderEpoch;
