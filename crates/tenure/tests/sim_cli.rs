//! `tenure sim` from the command line: byte-identical output for the same arguments, the summary
//! as the last line, failing seeds reported with their reproduction command, bad arguments refused.

use std::process::Command;

fn sim(args: &[&str]) -> (String, String, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure")).arg("sim").args(args).output().expect("run tenure");
    (
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
        out.status.code().expect("exit code"),
    )
}

#[test]
fn same_arguments_give_byte_identical_output() {
    let args = ["--seed", "40", "--seeds", "12", "--faults", "all", "-o", "json"];
    let (first, _, code) = sim(&args);
    let (second, _, _) = sim(&args);
    assert_eq!(code, 0);
    assert_eq!(first, second, "a seed's run is a pure function of its arguments");
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(lines.len(), 13, "one report per seed, then the summary");
    assert_eq!(lines.last(), Some(&"seeds=12 violations=0"));
    for line in &lines[..12] {
        let report: serde_json::Value = serde_json::from_str(line).expect("a JSON report");
        assert!(report["convergedAfterRounds"].is_u64());
    }
}

#[test]
fn documented_limits_are_reported_as_predicted_not_as_failures() {
    let (out, _, code) = sim(&["--seed", "0", "--seeds", "20", "--mode", "paused-call"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("predicted violations"), "{out}");
    assert!(out.ends_with("seeds=20 violations=0\n"));
}

#[test]
fn bad_arguments_are_refused_with_one_line() {
    for args in [
        vec!["--faults", "crash,bogus"],
        vec!["--mode", "quantum"],
        vec!["--nodes", "0"],
        vec!["--addresses", "100000"],
        vec!["--seeds", "0"],
        vec!["-o", "yaml"],
    ] {
        let (out, err, code) = sim(&args);
        assert_eq!(code, 2, "{args:?}");
        assert!(out.is_empty(), "{args:?}: nothing on stdout");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("tenure sim: "), "{err}");
    }
}

#[test]
fn plot_writes_an_svg_timeline() {
    let dir = std::env::temp_dir().join(format!("tenure-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("seed.svg");
    let (_, _, code) = sim(&["--seed", "3", "--plot", path.to_str().expect("utf-8")]);
    assert_eq!(code, 0);
    let svg = std::fs::read_to_string(&path).expect("svg written");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("pool0/10.0.0.0"), "addresses are labelled");
    // Legible: how many are drawn of how many, round time ticks, faults labelled in text (not
    // only hover titles) with the node they hit, in a colour no NIC has, and a node legend.
    let drawn = svg.lines().find(|l| l.contains(r#"class="drawn""#)).expect("the drawn-of-total line");
    assert!(drawn.contains("addresses drawn: 16 of "), "{drawn}");
    assert!(svg.matches(r#"class="tick""#).count() >= 4, "time ticks");
    let labels = svg.matches(r#"class="fault-label""#).count();
    let items: Vec<&str> = svg.lines().filter(|l| l.contains(r#"class="fault-item""#)).collect();
    assert!(
        labels > 0 && labels == items.len(),
        "each drawn fault cluster is listed: {labels} vs {}",
        items.len()
    );
    assert!(
        items.iter().any(|l| (0..5).any(|n| l.contains(&format!(" n{n:02}")))),
        "faults name the node they hit: {items:?}"
    );
    for fill in svg.lines().filter(|l| l.contains(r#"class="legend""#)) {
        assert!(!fill.contains("#222222"), "no node has the fault colour: {fill}");
    }
    assert!(svg.matches(r#"class="legend""#).count() >= 2, "a node legend");
    std::fs::remove_dir_all(&dir).ok();
}
