//! The fenced sink (placeholder module; see the sink issue work).
