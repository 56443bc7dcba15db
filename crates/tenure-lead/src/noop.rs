//! The `noop` backend: always leader, epoch 1. For one node, where there is no split brain.

use tenure_core::model::LeaderEpoch;

use crate::backend::{Attempt, BackendError, LeaseBackend};

/// Always leader under epoch 1.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoopBackend;

impl LeaseBackend for NoopBackend {
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, BackendError> {
        Ok(Attempt::Leader { term: LeaderEpoch::NEVER.next() })
    }

    async fn release(&mut self) -> Result<(), BackendError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "noop"
    }
}
