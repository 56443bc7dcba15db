//! Snapshots are exact: restoring the snapshot taken after any prefix of a log, then applying
//! the rest, gives the projection that applied the whole log — the same snapshot bytes, so the
//! same map, tokens, liveness, approvals, observations and counters. Checked on every example
//! scenario at every split, and on simulated runs (every fault, both modes) at many splits.

use std::path::Path;

use tenure_core::federation::Federation;
use tenure_core::log::{Event, EventKind};
use tenure_core::scenario::{StepKind, parse_scenario};
use tenure_sim::replay::Replay;
use tenure_sim::world::World;
use tenure_sim::{Mode, SimConfig};

/// Applies `log` to `registry`, snapshotting at each of `splits`: the run that restored at a
/// split must end where the straight run ends.
fn check(registry: &Federation, log: &[Event], splits: impl Iterator<Item = usize>, what: &str) {
    let mut straight = registry.clone();
    for event in log {
        let _ = straight.apply(event);
    }
    let expected = straight.snapshot();
    for split in splits {
        let mut first = registry.clone();
        for event in &log[..split] {
            let _ = first.apply(event);
        }
        let snapshot = first.snapshot();
        let mut restored = registry.restore(&snapshot).unwrap_or_else(|e| panic!("{what} @{split}: {e}"));
        assert_eq!(
            restored.snapshot(),
            snapshot,
            "{what} @{split}: a restored snapshot reads back as written"
        );
        for event in &log[split..] {
            let _ = restored.apply(event);
        }
        assert!(
            restored.snapshot() == expected,
            "{what}: restored after event {split} of {}, the end differs:\n{}\nvs\n{}",
            log.len(),
            String::from_utf8_lossy(&restored.snapshot()),
            String::from_utf8_lossy(&expected)
        );
    }
}

#[test]
fn every_example_scenario_at_every_split() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/scenarios");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/scenarios") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        let Ok(scenario) = parse_scenario(&text) else { continue };
        let mut replay = Replay::new(&scenario, false);
        for pool in &scenario.pools {
            let _ = replay
                .append(Event { at_ms: 0, kind: EventKind::PoolApplied { spec: Box::new(pool.clone()) } });
        }
        for step in &scenario.timeline {
            match &step.kind {
                StepKind::Log(event) => {
                    let _ = replay.append(event.clone());
                }
                StepKind::Local { at_ms, node, step } => replay.local(*at_ms, node, *step),
            }
        }
        let registry =
            Federation::new(&scenario.nodes, &scenario.providers).with_drift_repair(scenario.drift_repair);
        let log = replay.log().to_vec();
        check(&registry, &log, 0..=log.len(), &path.display().to_string());
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} example scenarios were read");
}

#[test]
fn simulated_runs_with_every_fault_at_many_splits() {
    for mode in [Mode::Cloud, Mode::Onprem] {
        for seed in 0..6 {
            let config = SimConfig { mode, ..SimConfig::default() };
            let (registry, log) = World::new(seed, &config, false).run_log();
            assert!(log.len() > 100, "seed {seed} made a log of {}", log.len());
            let step = (log.len() / 25).max(1);
            check(&registry, &log, (0..=log.len()).step_by(step), &format!("{mode:?} seed {seed}"));
        }
    }
}

#[test]
fn a_snapshot_of_another_version_or_registry_is_refused() {
    let registry = Federation::new(&[], &[]);
    let snapshot = String::from_utf8(registry.snapshot()).expect("utf-8");
    assert!(snapshot.starts_with("{\"v\":4,"), "this build writes format 4: {snapshot}");
    let newer = snapshot.replacen("{\"v\":4", "{\"v\":5", 1);
    let e = registry.restore(newer.as_bytes()).expect_err("refused");
    assert!(e.to_string().contains("format version 5 is not 1 to 4"), "{e}");
    let stranger = snapshot.replacen("\"nodes\":[]", "\"nodes\":[{\"name\":\"zed\",\"lastHeartbeatMs\":null,\"heartbeatStampMs\":null,\"drained\":false,\"healthy\":true,\"vrrp\":null}]", 1);
    let e = registry.restore(stranger.as_bytes()).expect_err("refused");
    assert!(e.to_string().contains("node `zed` has no spec (format 4 needs one)"), "{e}");
    // Format 3 named nodes only, over the agent's registry: one it lacks is refused.
    let older = stranger.replacen("{\"v\":4", "{\"v\":3", 1).replacen(",\"providers\":[]", "", 1);
    let e = registry.restore(older.as_bytes()).expect_err("refused");
    assert!(e.to_string().contains("node `zed` is not in this registry"), "{e}");
    assert!(registry.restore(b"{\"v\":1}").is_err(), "a truncated snapshot is refused");
}

/// A format-1 snapshot (observations as whole views: holders and one `atMs` per address) restores
/// to the projection a format-2 snapshot of the same run holds: the node NICs missing from the
/// holders were observed not holding the address at that `at`.
#[test]
fn a_format_1_snapshot_restores_to_the_same_projection() {
    let config = SimConfig { mode: Mode::Cloud, ..SimConfig::default() };
    let (registry, log) = World::new(7, &config, false).run_log();
    let mut straight = registry.clone();
    for event in &log {
        let _ = straight.apply(event);
    }
    let current = straight.snapshot();
    let mut wire: serde_json::Value = serde_json::from_slice(&current).expect("JSON");
    let observed = wire["observed"].as_array_mut().expect("observations");
    assert!(!observed.is_empty(), "the run observed inventory");
    for o in observed.iter_mut() {
        let nics = o["nics"].as_array().expect("per NIC").clone();
        let holders: Vec<&serde_json::Value> =
            nics.iter().filter(|n| n["held"] == serde_json::Value::Bool(true)).map(|n| &n["nic"]).collect();
        let at = nics.iter().filter_map(|n| n["atMs"].as_u64()).max().expect("observed");
        let object = o.as_object_mut().expect("object");
        object.insert("holders".into(), serde_json::json!(holders));
        object.insert("atMs".into(), serde_json::json!(at));
        object.remove("nics");
    }
    for node in wire["nodes"].as_array_mut().expect("nodes") {
        node.as_object_mut().expect("object").remove("spec");
    }
    wire.as_object_mut().expect("object").remove("providers");
    wire["v"] = serde_json::json!(1);
    let old = serde_json::to_vec(&wire).expect("JSON");
    let restored = registry.restore(&old).expect("format 1 is read");
    assert!(restored.snapshot() == current, "a format-1 snapshot restores to the same projection");
}
