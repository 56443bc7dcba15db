//! Shared names: the pool, node, provider and NIC names a journal entry, a capture record or a
//! capture domain carries, as one `Arc<str>` per distinct name instead of a `String` per copy.
//!
//! A node holding a million addresses has two million journal entries naming the same few pools,
//! nodes, providers and NICs; as owned strings they were a quarter of its memory
//! (docs/benchmarks.md, "Where the memory goes"). [`shared`] returns the name this thread
//! already holds, or keeps a new one. It is a cache, not a registry: two equal names compare
//! equal whether or not they are shared, so nothing but memory depends on it. The set is per
//! thread (no lock on the planner's path) and forgets the names nothing else holds any more once
//! it grows past [`NAMES_KEPT_MAX`], so a stream of new names (pools renamed, NICs replaced)
//! cannot grow it without bound.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::Arc;

/// How many names a thread's set holds before it forgets the unused ones.
pub const NAMES_KEPT_MAX: usize = 4096;

thread_local! {
    static NAMES: RefCell<HashSet<Arc<str>>> = RefCell::new(HashSet::new());
}

/// `name` as the shared copy this thread holds (a reference count, no allocation), or a new
/// copy it keeps from now on.
#[must_use]
pub fn shared(name: &str) -> Arc<str> {
    NAMES.with_borrow_mut(|names| {
        if let Some(kept) = names.get(name) {
            return Arc::clone(kept);
        }
        if names.len() >= NAMES_KEPT_MAX {
            names.retain(|kept| Arc::strong_count(kept) > 1);
        }
        let kept: Arc<str> = Arc::from(name);
        names.insert(Arc::clone(&kept));
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
        assert!(Arc::ptr_eq(&a, &b), "one copy per name");
        assert!(!Arc::ptr_eq(&a, &shared("core-vips")));
    }

    #[test]
    fn unused_names_are_forgotten_once_the_set_is_full() {
        let held = shared("held-name");
        for i in 0..NAMES_KEPT_MAX * 3 {
            let _ = shared(&format!("transient-{i}"));
        }
        let kept = NAMES.with_borrow(HashSet::len);
        assert!(kept <= NAMES_KEPT_MAX, "the set stays bounded: {kept} names");
        assert!(Arc::ptr_eq(&held, &shared("held-name")), "a name still held is kept");
    }
}
