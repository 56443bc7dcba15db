//! The `inventory` events of a log, for the agent's drift-repair tests (`agent_drift.rs`,
//! `aws_agent.rs`).

use tenure_core::log::EventKind;
use tenure_core::log_store::{Log, LogIndex};

/// The holders of every `inventory` event in `log`, in log order (read page by page: one read
/// is bounded).
pub fn inventory_holders(log: &impl Log) -> Vec<Vec<String>> {
    let mut holders = Vec::new();
    let mut from = LogIndex::FIRST;
    loop {
        let records = log.read_from(from, usize::MAX).expect("the log reads");
        let Some(last) = records.last() else { break };
        from = last.index.next();
        holders.extend(records.into_iter().filter_map(|record| match record.event.kind {
            EventKind::Inventory { holders, .. } => Some(holders),
            _ => None,
        }));
    }
    holders
}
