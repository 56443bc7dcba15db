//! What the loop reports about itself (to metrics, and to benchmarks and tests).

use std::time::Duration;

/// What the loop reports about itself to metrics. Every method has a no-op default.
pub trait Observe: Send + Sync {
    /// One slice of planning of one node (a pass's slice, or a whole reconcile) took `duration`.
    fn reconcile(&self, _duration: Duration) {}
    /// One provider call of `provider` took `duration`.
    fn executor_call(&self, _provider: &str, _duration: Duration) {}
    /// A step of the loop began.
    fn step(&self) {}
}

/// An observer that records nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObserver;

impl Observe for NoObserver {}
