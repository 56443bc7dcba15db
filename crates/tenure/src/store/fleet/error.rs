//! [`EtcdError`]: what went wrong talking to etcd, or in what it holds — the fleet store's I/O
//! errors, typed. At the store's seam they become the core's [`LogError::Unavailable`] (an
//! append), [`HeadUnconfirmed::Behind`] (a head confirmation) or [`EtcdStoreError::Etcd`] (an
//! open), worded as they always were: one line, shown in health and logs.
//!
//! [`LogError::Unavailable`]: tenure_core::log_store::LogError::Unavailable
//! [`HeadUnconfirmed::Behind`]: crate::agent::HeadUnconfirmed::Behind
//! [`EtcdStoreError::Etcd`]: super::EtcdStoreError::Etcd

use std::time::Duration;

/// What went wrong talking to etcd, or in what it holds.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// A request failed: etcd's account, or the connection's.
    #[error("etcd {what}: {source}")]
    Request {
        /// The request ("append", "head read", "snapshot chunk read", …).
        what: &'static str,
        /// The client's error.
        #[source]
        source: etcd_client::Error,
    },
    /// No answer within the deadline (the request's outcome is unknown).
    #[error("etcd did not answer the {what} within {} ms", .waited.as_millis())]
    Timeout {
        /// The request.
        what: &'static str,
        /// How long it was waited for.
        waited: Duration,
    },
    /// An answer without the header that carries the cluster and the revision.
    #[error("etcd {what}: an answer without a header")]
    NoHeader {
        /// The request.
        what: &'static str,
    },
    /// An append whose transaction failed though neither its batch nor this process's writer
    /// key naming it is there, and the log did not go back.
    #[error("etcd append: {key} {detail}")]
    AppendUnresolved {
        /// The batch's key.
        key: String,
        /// What was found instead.
        detail: String,
    },
    /// What etcd holds under the prefix is not what tenure wrote: a snapshot manifest that does
    /// not decode, a chunk missing or damaged, a listing and a read that disagree.
    #[error("{0}")]
    Damaged(String),
    /// The store was opened outside a multi-thread tokio runtime (a program's mistake, never an
    /// operator's: `tenure agent` opens it on its own).
    #[error(
        "the fleet store must be opened on a multi-thread tokio runtime: its workers drive its etcd requests while \
         a caller's thread waits on one"
    )]
    Runtime,
    /// A node this agent runs is claimed by another agent's store, whose lease is alive.
    #[error(
        "node `{node}` is run by another agent ({by}; claimed at {key}): two agents running one node both send its \
         heartbeats, so it never fails over while either runs, and both act for it; check this config's `node` name, \
         or stop the other agent (the claim of an agent that died lapses within 10 s)"
    )]
    NodeTaken {
        /// The node.
        node: String,
        /// Its claim's key.
        key: String,
        /// Whose claim it is.
        by: String,
    },
    /// This agent's claim of a node is not under its lease any more (the lease lapsed while etcd
    /// was unreachable, or the key was deleted or taken): etcd refused the request, and nothing
    /// is appended or acted on until the claim is made again.
    #[error(
        "this agent's claim of node `{node}` ({key}) is not under its lease any more (lapsed, deleted or taken): \
         nothing is appended or acted on until it is made again"
    )]
    ClaimLost {
        /// The node.
        node: String,
        /// Its claim's key.
        key: String,
    },
    /// The fleet key does not hold a fleet's text.
    #[error("{0}")]
    BadGenesis(String),
}

impl EtcdError {
    /// Wraps a client error with the request it failed.
    pub(crate) fn request(what: &'static str) -> impl Fn(etcd_client::Error) -> Self {
        move |source| Self::Request { what, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_reads_as_the_line_an_operator_read_before_it_was_typed() {
        assert_eq!(
            EtcdError::Timeout { what: "append", waited: Duration::from_millis(2_500) }.to_string(),
            "etcd did not answer the append within 2500 ms"
        );
        assert_eq!(
            EtcdError::NoHeader { what: "head read" }.to_string(),
            "etcd head read: an answer without a header"
        );
        assert_eq!(
            EtcdError::AppendUnresolved {
                key: "/t/log/k".into(),
                detail: "is neither there nor named by /t/w".into()
            }
            .to_string(),
            "etcd append: /t/log/k is neither there nor named by /t/w"
        );
        let request = EtcdError::request("append")(etcd_client::Error::InvalidArgs("no endpoint".into()));
        assert!(request.to_string().starts_with("etcd append: "), "{request}");
        assert!(std::error::Error::source(&request).is_some(), "the client's error is kept as the source");
        assert_eq!(
            EtcdError::Damaged("snapshot chunk k is missing".into()).to_string(),
            "snapshot chunk k is missing"
        );
    }
}
