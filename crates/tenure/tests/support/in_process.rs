//! The agent loop run in-process on tokio, as the in-process agent tests start it: `settings`
//! over `store`, no reload signal, stopped by sending on the returned sender.

use std::sync::Arc;

use tenure::agent::request::AgentHandle;
use tenure::agent::runner::{AgentError, NoObserver, RunSummary, run};
use tenure::agent::{AgentStore, Settings};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// The loop's handle, the sender that stops it, and its task.
pub fn spawn_agent<S: AgentStore + Send + Sync + 'static>(
    store: S,
    settings: Settings,
) -> (AgentHandle, oneshot::Sender<()>, JoinHandle<Result<RunSummary, AgentError>>) {
    let (handle, requests) = AgentHandle::channel();
    let (_reload_tx, reload) = mpsc::channel(1);
    let (stop, stopped) = oneshot::channel::<()>();
    let done = tokio::spawn(run(store, settings, requests, reload, Arc::new(NoObserver), async move {
        let _ = stopped.await;
    }));
    (handle, stop, done)
}
