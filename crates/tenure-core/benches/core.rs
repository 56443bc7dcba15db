//! Core benchmarks (arbitration, drain, fence gate); see docs/benchmarks.md.
fn main() {}
