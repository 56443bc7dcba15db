//! Shared names: the pool, node, provider and NIC names a journal entry, a capture record or a
//! capture domain carries, and the executors' details and errors a journal entry keeps
//! (`assigned to eni-a`, the same for a million entries), as one [`Name`] per distinct text
//! instead of a `String` per copy.
//!
//! A node holding a million addresses has two million journal entries naming the same few pools,
//! nodes, providers and NICs; as owned strings they were a quarter of its memory
//! (docs/benchmarks.md, "Where the memory goes"). [`shared`] returns the name this thread
//! already holds, or keeps a new one. It is a cache, not a registry: two equal names compare
//! equal whether or not they are shared, so nothing but memory depends on it. The set is per
//! thread (no lock on the planner's path) and forgets the names nothing else holds any more once
//! it grows past [`NAMES_KEPT_MAX`] (or twice what it kept at its last look), so a stream of new
//! names (pools renamed, NICs replaced) cannot grow it without bound, and a look costs O(1) per
//! name kept since the last.

use std::cell::RefCell;
use std::collections::HashSet;

/// A shared name: a reference-counted string behind one pointer (8 bytes where `Arc<str>` is
/// 16), so the five names an action carries and the name in every `(provider, address)` key
/// take half the room.
pub type Name = arcstr::ArcStr;

/// The fewest names a thread's set holds before it looks for unused ones to forget.
pub const NAMES_KEPT_MAX: usize = 4096;

/// A thread's names, and the size at which it next looks for unused ones.
struct Names {
    kept: HashSet<Name>,
    scan_at: usize,
}

thread_local! {
    static NAMES: RefCell<Names> =
        RefCell::new(Names { kept: HashSet::new(), scan_at: NAMES_KEPT_MAX });
}

/// `name` as the shared copy this thread holds (a reference count, no allocation), or a new
/// copy it keeps from now on.
#[must_use]
pub fn shared(name: &str) -> Name {
    NAMES.with_borrow_mut(|names| {
        if let Some(kept) = names.kept.get(name) {
            return kept.clone();
        }
        if names.kept.len() >= names.scan_at {
            names.kept.retain(|kept| Name::strong_count(kept).is_none_or(|count| count > 1));
            // Names all still in use are not scanned again until the set doubles: a scan per
            // new name would make each O(names).
            names.scan_at = NAMES_KEPT_MAX.max(names.kept.len() * 2);
        }
        let kept = Name::from(name);
        names.kept.insert(kept.clone());
        kept
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_equal_name_is_the_same_copy() {
        let a = shared("edge-vips");
        let b = shared(&String::from("edge-vips"));
        assert!(Name::ptr_eq(&a, &b), "one copy per name");
        assert!(!Name::ptr_eq(&a, &shared("core-vips")));
    }

    #[test]
    fn unused_names_are_forgotten_once_the_set_is_full() {
        let held = shared("held-name");
        for i in 0..NAMES_KEPT_MAX * 3 {
            let _ = shared(&format!("transient-{i}"));
        }
        let kept = NAMES.with_borrow(|names| names.kept.len());
        assert!(kept <= NAMES_KEPT_MAX, "the set stays bounded: {kept} names");
        assert!(Name::ptr_eq(&held, &shared("held-name")), "a name still held is kept");
    }

    /// More names in use than the bound: they are kept, and the next look waits until the set has
    /// doubled (a look per new name would make each O(names)).
    #[test]
    fn names_all_in_use_are_looked_at_again_only_once_the_set_doubled() {
        let held: Vec<Name> = (0..NAMES_KEPT_MAX + 10).map(|i| shared(&format!("held-{i}"))).collect();
        let (kept, scan_at) = NAMES.with_borrow(|names| (names.kept.len(), names.scan_at));
        assert_eq!(kept, held.len(), "every name in use is kept");
        assert_eq!(scan_at, 2 * NAMES_KEPT_MAX, "looked once, at the bound: next at twice what it kept");
        assert!(held.iter().all(|name| Name::ptr_eq(name, &shared(name))));
    }
}
