//! The epoch bridge (placeholder module; see the bridge issue work).
