//! tenure-kube: the Kubernetes leadership backend of SPEC 8, and a test double of the Lease API.
//!
//! [`KubernetesBackend`] implements [`tenure_lead::backend::LeaseBackend`] on a
//! `coordination.k8s.io/v1` Lease: the holder is `spec.holderIdentity`, liveness is
//! `spec.renewTime` + `spec.leaseDurationSeconds`, and the fencing term is the annotation
//! [`TERM_ANNOTATION`] (`tenure.dev/leader-term`), incremented on every takeover by a write the API
//! server accepts only if the Lease is still at the `resourceVersion` that was read, and kept on
//! renewal. Give it to [`tenure_lead::elector::spawn`] like any other backend.
//!
//! kube is a heavy dependency, so it lives in this crate, built as a plain-HTTP client
//! (`kube` without default features). The `rustls-tls` feature (on in the `tenure` binary's
//! `kubernetes` feature) adds TLS, rustls on ring, for talking to an API server directly, from a
//! kubeconfig or in-cluster ([`client_inferred`]); without it, point the backend at
//! `kubectl proxy` or any plain-HTTP endpoint ([`client_for_url`]).
//!
//! [`LeaseApiDouble`] is a **test double**: a small HTTP server on 127.0.0.1 that answers the
//! Lease requests kube's `Api<Lease>` makes (get, create, replace, delete) in the API server's
//! shapes, for what leader election relies on (`409 Conflict` on a stale `resourceVersion`
//! above all), and can lose the answer to a write it applied. No Kubernetes API server runs on
//! the machines this project is tested on; the double lets the backend's real code, HTTP client
//! included, be tested here. It is not a cluster and never stands in for one outside tests.
//!
//! # Layout
//!
//! - [`backend`] — `KubernetesBackend`: takeover, renewal, release; the expiry rule; adopting a
//!   takeover whose answer was lost; refusing a term that went back.
//! - [`client`] — building the kube client (`client_for_url`, `client_inferred`) and
//!   `SetupError`.
//! - [`record`] — reading a Lease as an election record: term and nonce annotations, holder,
//!   expiry (pure).
//! - [`names`] — the API server's rules for Lease names and namespaces (pure).
//! - [`double`] — `LeaseApiDouble`, the Lease API test double.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use tenure_kube::{KubernetesBackend, LeaseApiDouble};
//! use tenure_lead::backend::{Attempt, LeaseBackend};
//! # tokio::runtime::Runtime::new().expect("runtime").block_on(async {
//! let double = LeaseApiDouble::start().await.expect("listens");
//! let mut a = KubernetesBackend::connect(&double.url(), "default", "vip", "a", Duration::from_secs(15))
//!     .expect("valid");
//! let attempt = a.try_acquire_or_renew().await.expect("reachable");
//! assert!(matches!(attempt, Attempt::Leader { term } if term.get() == 1));
//! # });
//! ```

pub mod backend;
pub mod client;
pub mod double;
pub mod names;
pub mod record;

pub use backend::{KubernetesBackend, SetupError, client_for_url, client_inferred};
pub use double::LeaseApiDouble;
/// The kube client this crate is built against (`kube::Config::infer()`, `kube::Client`), so that
/// callers build clients without depending on kube themselves.
pub use kube;
pub use record::{NONCE_ANNOTATION, TERM_ANNOTATION};
