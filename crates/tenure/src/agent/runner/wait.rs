//! The loop's optional `select!` arms: a wait that never ends when there is nothing to wait for
//! (no deadline, no notifier, no channel), so that [`super::run`] keeps one arm per source.

use tokio::sync::mpsc;
use tokio::time::Instant;

/// Sleeps until `at`, or forever when there is nothing to wait for.
pub(super) async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits for `notify`, or forever when there is none.
pub(super) async fn notified_or_never(notify: Option<&tokio::sync::Notify>) {
    match notify {
        Some(notify) => notify.notified().await,
        None => std::future::pending().await,
    }
}

/// The next message of `receiver`, or never when there is none.
pub(super) async fn recv_or_never<T>(receiver: Option<&mut mpsc::Receiver<T>>) -> Option<T> {
    match receiver {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}
