//! The bad-input corpus (`tests/bad-input/` at the workspace root) through the real binary.
//!
//! Every corpus file (`*.pool.yaml`, `*.scenario.yaml`, `*.config.yaml` for agent configs) starts
//! with `# expect: LINE: SUBSTRING`: the line of the first error and a piece of its message.
//! `tenure validate FILE` (and, for `*.scenario.yaml`, `tenure replay FILE -o json`) must exit 2, print nothing on stdout for `replay`, print `FILE:LINE:…SUBSTRING…` as
//! the first line of stderr, one `FILE:…` line per error, and never panic (SPEC 12, 13).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Fewest files the corpus may hold, so that an emptied directory cannot pass.
const CORPUS_FILES_MIN: usize = 15;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `tenure ARGS…` from the workspace root.
fn tenure(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .current_dir(workspace_root())
        .output()
        .expect("the tenure binary runs")
}

struct Case {
    /// Path relative to the workspace root, as passed to the binary.
    path: String,
    line: u64,
    substring: String,
}

/// Reads the `# expect: LINE: SUBSTRING` header of a corpus file.
fn expectation(relative: &str) -> Case {
    let bytes = fs::read(workspace_root().join(relative)).expect("corpus file is readable");
    let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let first = String::from_utf8_lossy(first);
    let rest = first
        .strip_prefix("# expect: ")
        .unwrap_or_else(|| panic!("{relative}: the first line must be `# expect: LINE: SUBSTRING`"));
    let (line, substring) =
        rest.split_once(": ").unwrap_or_else(|| panic!("{relative}: `# expect:` needs `LINE: SUBSTRING`"));
    let line = line.trim().parse().unwrap_or_else(|_| panic!("{relative}: `{line}` is not a line number"));
    assert!(line > 0, "{relative}: lines are 1-based");
    let substring = substring.trim_end().to_owned();
    assert!(!substring.is_empty(), "{relative}: the expected substring must not be empty");
    Case { path: relative.to_owned(), line, substring }
}

fn corpus() -> Vec<Case> {
    let dir = workspace_root().join("tests/bad-input");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in &names {
        assert!(
            [".pool.yaml", ".scenario.yaml", ".config.yaml"].iter().any(|suffix| name.ends_with(suffix)),
            "tests/bad-input/{name}: corpus files are *.pool.yaml, *.scenario.yaml or *.config.yaml"
        );
    }
    names.iter().map(|name| expectation(&format!("tests/bad-input/{name}"))).collect()
}

/// Checks one run against the case; returns a description of what is wrong, if anything.
fn check(case: &Case, command: &str, output: &Output, stdout_must_be_empty: bool) -> Option<String> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut problems = Vec::new();
    if output.status.code() != Some(2) {
        problems.push(format!("exit {:?}, want 2", output.status.code()));
    }
    if stdout_must_be_empty && !stdout.is_empty() {
        problems.push(format!("stdout is not empty: {stdout:?}"));
    }
    if stderr.contains("panicked") {
        problems.push("it panicked".to_owned());
    }
    let first = stderr.lines().next().unwrap_or_default();
    let prefix = format!("{}:{}:", case.path, case.line);
    if !first.starts_with(&prefix) {
        problems.push(format!("first stderr line does not start with `{prefix}`"));
    }
    if !first.contains(&case.substring) {
        problems.push(format!("first stderr line does not contain `{}`", case.substring));
    }
    if let Some(other) = stderr.lines().find(|l| !l.starts_with(&format!("{}:", case.path))) {
        problems.push(format!("a stderr line does not name the file: {other:?}"));
    }
    (!problems.is_empty()).then(|| format!("{command}: {}\n    stderr: {stderr:?}", problems.join("; ")))
}

#[test]
fn every_corpus_file_is_refused_at_the_expected_place() {
    let cases = corpus();
    assert!(
        cases.len() >= CORPUS_FILES_MIN,
        "the corpus holds {} files, fewer than {CORPUS_FILES_MIN}",
        cases.len()
    );
    let scenarios = cases.iter().filter(|c| c.path.ends_with(".scenario.yaml")).count();
    let configs = cases.iter().filter(|c| c.path.ends_with(".config.yaml")).count();
    assert!(
        scenarios > 0 && configs > 0 && scenarios + configs < cases.len(),
        "the corpus holds pool specs, scenarios and agent configs"
    );

    let mut failures = Vec::new();
    for case in &cases {
        let output = tenure(&["validate", &case.path]);
        failures.extend(check(case, &format!("tenure validate {}", case.path), &output, false));
        if case.path.ends_with(".scenario.yaml") {
            let output = tenure(&["replay", &case.path, "-o", "json"]);
            failures.extend(check(case, &format!("tenure replay {} -o json", case.path), &output, true));
        }
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn the_example_pool_is_valid() {
    let output = tenure(&["validate", "examples/pools/edge.yaml"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    assert!(stderr.is_empty(), "stderr: {stderr}");
}

#[test]
fn the_example_agent_configs_and_their_pools_are_valid() {
    let configs: Vec<String> =
        ["examples/agent/single.yaml", "examples/agent/exec.yaml", "examples/agent/onprem.yaml"]
            .into_iter()
            .map(str::to_owned)
            .collect();
    let mut args = vec!["validate"];
    args.extend(configs.iter().map(String::as_str));
    let output = tenure(&args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    assert!(stderr.is_empty(), "stderr: {stderr}");
    // Every config of the examples folder is one of them.
    let mut found: Vec<String> = fs::read_dir(workspace_root().join("examples/agent"))
        .expect("examples/agent")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .map(|name| format!("examples/agent/{name}"))
        .collect();
    found.sort();
    let mut expected = configs;
    expected.sort();
    assert_eq!(found, expected);
}

#[test]
fn a_configs_pool_files_are_checked_with_it_and_named_in_errors() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bad_input_config_pools");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("pools")).expect("temp dir");
    let config = dir.join("agent.yaml");
    fs::write(
        &config,
        "node: {name: a, provider: sim1, placementGroup: g1, nic: eni-a}\n\
         store: {path: ./data}\n\
         providers: [{name: sim1, kind: sim-cloud}]\n\
         pools: [pools/edge.yaml]\n",
    )
    .expect("write config");
    let example =
        fs::read_to_string(workspace_root().join("examples/agent/pools/edge.yaml")).expect("example");
    let pool = dir.join("pools/edge.yaml");
    fs::write(&pool, &example).expect("write pool");
    let config_arg = config.display().to_string();
    let output = tenure(&["validate", &config_arg]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "1 file(s) valid, and the 1 pool file(s) the configs name\n",
        "what was checked, counted"
    );
    // Validating the config and its pool file on one command line does not check the pool against
    // itself.
    let pool_arg = pool.display().to_string();
    let output = tenure(&["validate", &config_arg, &pool_arg]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "2 file(s) valid\n", "each file counted once");
    // A file given twice, or by another path to its folder, is checked and counted once.
    let pool_again = dir.join("pools/../pools/edge.yaml").display().to_string();
    let output = tenure(&["validate", &config_arg, &config_arg, &pool_again, &pool_arg]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "2 file(s) valid\n", "each file counted once");
    // A link to the config from another folder is another config: its relative paths are read
    // from the link's folder (as the agent reads them), where no pool file is, whatever order it
    // is given in.
    fs::create_dir_all(dir.join("sub")).expect("sub folder");
    let link = dir.join("sub/agent.yaml");
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink(&config, &link).expect("a link");
    let link_arg = link.display().to_string();
    for args in [["validate", &config_arg, &link_arg], ["validate", &link_arg, &config_arg]] {
        let output = tenure(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&output.stdout));
    }
    // A link to the pool file is the pool file: its pools are not defined twice.
    let pool_link = dir.join("sub/edge.yaml");
    let _ = fs::remove_file(&pool_link);
    std::os::unix::fs::symlink(&pool, &pool_link).expect("a link");
    let pool_link_arg = pool_link.display().to_string();
    let output = tenure(&["validate", &config_arg, &pool_arg, &pool_link_arg]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "2 file(s) valid\n",
        "a linked pool file counted once"
    );

    // A provider the config does not declare, named in the pool file, at the pool's `provider`.
    fs::write(&pool, example.replace("provider: sim1", "provider: sim9")).expect("write pool");
    let output = tenure(&["validate", &config_arg]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr}");
    assert!(
        stderr.starts_with(&format!(
            "{}/pools/edge.yaml:9:13: pool `edge-vips` names provider `sim9`",
            dir.display()
        )),
        "stderr: {stderr}"
    );

    // A typo inside the pool file, named in the pool file.
    fs::write(&pool, example.replace("members:", "membres:")).expect("write pool");
    let output = tenure(&["validate", &config_arg]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.starts_with(&format!("{}/pools/edge.yaml:11:", dir.display())), "stderr: {stderr}");
    assert!(stderr.contains("membres"), "stderr: {stderr}");
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn a_missing_file_is_one_line_naming_it() {
    let missing = "tests/bad-input/no-such-file.pool.yaml";
    let output = tenure(&["validate", missing]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.starts_with(&format!("{missing}: ")), "stderr: {stderr}");
    assert!(output.stdout.is_empty());

    let output = tenure(&["replay", missing, "-o", "json"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr}");
    assert!(stderr.starts_with(&format!("{missing}: ")), "stderr: {stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn pools_of_two_files_are_checked_together() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bad_input_two_files");
    fs::create_dir_all(&dir).expect("temp dir");
    let first = dir.join("a.yaml");
    let second = dir.join("b.yaml");
    let example =
        fs::read_to_string(workspace_root().join("examples/pools/edge.yaml")).expect("example pool");
    fs::write(&first, &example).expect("write a.yaml");
    // Same capture domain (sim1, g1); 10.0.0.17 is inside edge-vips's 10.0.0.16/29.
    let other = example
        .replace("name: edge-vips", "name: other-vips")
        .replace("[10.0.0.10/32, 10.0.0.16/29]", "[10.0.1.1, 10.0.0.17]");
    assert_ne!(other, example);
    fs::write(&second, &other).expect("write b.yaml");

    // Each file alone is valid.
    for file in [&first, &second] {
        let output = tenure(&["validate", &file.display().to_string()]);
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    }

    let (a, b) = (first.display().to_string(), second.display().to_string());
    let output = tenure(&["validate", &a, &b]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "stderr: {stderr}");
    let line = stderr.lines().next().unwrap_or_default();
    // `addresses:` is line 7 of the example, and 10.0.0.17 its second entry.
    assert!(line.starts_with(&format!("{b}:7:")), "stderr: {stderr}");
    assert!(line.contains("10.0.0.17") && line.contains("also in pool `edge-vips`"), "stderr: {stderr}");

    // In the other order, the later file is the first one.
    let output = tenure(&["validate", &b, &a]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.starts_with(&format!("{a}:7:")), "stderr: {stderr}");
}

/// Writes `agent.yaml` (one sim-cloud node, provider list `providers`, then `extra` lines) in a
/// fresh folder; answers the config's path.
fn agent_config(name: &str, providers: &str, extra: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("agent.yaml");
    fs::write(
        &config,
        format!(
            "node: {{name: a, provider: sim1, placementGroup: g1, nic: eni-a}}\n\
             store: {{kind: embedded, path: ./data}}\n\
             providers: {providers}\n{extra}"
        ),
    )
    .expect("write config");
    config
}

/// `tenure validate CONFIG`: (exit code, stderr lines, stdout).
fn validate(config: &Path) -> (Option<i32>, Vec<String>, String) {
    let output = tenure(&["validate", &config.display().to_string()]);
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).lines().map(str::to_owned).collect(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// What the agent refuses before it opens its store, `validate` refuses too, in the same line:
/// a token file it cannot use (exit 2), at the config's `line:column` (a provider kind without an
/// executor in this build, exit 3, is below).
#[test]
fn validate_refuses_what_the_agent_refuses_before_its_store() {
    let sim = "[{name: sim1, kind: sim-cloud}]";
    // An empty token file (one that cannot be read is in the corpus).
    let config = agent_config("validate_empty_token", sim, "apiTokenFile: ./token\n");
    fs::write(config.with_file_name("token"), " \n").expect("write token");
    let (code, lines, stdout) = validate(&config);
    let file = config.display().to_string();
    let token = config.with_file_name("token").display().to_string();
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines, [format!("{file}:4:15: {token}: the API token is empty")]);
    assert_eq!(stdout, "");
    fs::write(config.with_file_name("token"), "secret\n").expect("write token");
    assert_eq!(validate(&config).0, Some(0), "a good token file");
}

/// A provider kind this build left out by its cargo feature (`azure` here; `aws` and `oci` below):
/// exit 3, one line at its `kind`; with bad input beside it, both are reported and the exit is 2
/// (fixing the build alone would not do). `scripts/test` runs it in a default build.
#[cfg(not(feature = "azure"))]
#[test]
fn validate_refuses_an_azure_provider_in_a_build_without_azure_beside_bad_input() {
    let azure = "[{name: sim1, kind: sim-cloud}, {name: o, kind: azure, subscriptionId: 00000000-0000-0000-0000-000000000001}]";
    let config = agent_config("validate_azure", azure, "");
    let (code, lines, stdout) = validate(&config);
    assert_eq!(code, Some(3), "{lines:?}");
    assert_eq!(
        lines,
        [format!(
            "{}:3:60: provider `o`: this build has no azure executor; rebuild with --features azure",
            config.display()
        )]
    );
    assert_eq!(stdout, "");

    let config = agent_config("validate_azure_and_token", azure, "apiTokenFile: ./missing-token\n");
    let (code, lines, _) = validate(&config);
    assert_eq!(code, Some(2), "{lines:?}");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains(":3:60: provider `o`: this build has no azure executor"), "{lines:?}");
    assert!(lines[1].contains(":4:15: ") && lines[1].contains("cannot read the API token file"), "{lines:?}");
}

/// A provider kind this build left out by its cargo feature: exit 3 and the feature to rebuild
/// with, at the provider's `kind`.
#[cfg(not(feature = "aws"))]
#[test]
fn validate_refuses_an_aws_provider_in_a_build_without_aws() {
    let config = agent_config(
        "validate_no_aws",
        "[{name: sim1, kind: sim-cloud}, {name: cloud, kind: aws, region: us-east-1}]",
        "",
    );
    let (code, lines, _) = validate(&config);
    assert_eq!(code, Some(3), "{lines:?}");
    assert_eq!(
        lines,
        [format!(
            "{}:3:64: provider `cloud`: this build has no aws executor; rebuild with --features aws",
            config.display()
        )]
    );
}

/// An oci provider in a build without the `oci` feature: exit 3, at its `kind`.
#[cfg(not(feature = "oci"))]
#[test]
fn validate_refuses_an_oci_provider_in_a_build_without_oci() {
    let config = agent_config(
        "validate_no_oci",
        "[{name: sim1, kind: sim-cloud}, {name: cloud, kind: oci, region: us-ashburn-1, auth: instancePrincipal}]",
        "",
    );
    let (code, lines, _) = validate(&config);
    assert_eq!(code, Some(3), "{lines:?}");
    assert_eq!(
        lines,
        [format!(
            "{}:3:64: provider `cloud`: this build has no oci executor; rebuild with --features oci",
            config.display()
        )]
    );
}

/// An etcd store in a build without the `etcd` feature: exit 3, at `store.kind`.
#[cfg(not(feature = "etcd"))]
#[test]
fn validate_refuses_an_etcd_store_in_a_build_without_etcd() {
    let config = agent_config("validate_no_etcd", "[{name: sim1, kind: sim-cloud}]", "");
    let text = fs::read_to_string(&config).expect("config").replace(
        "{kind: embedded, path: ./data}",
        "{kind: etcd, endpoints: [http://127.0.0.1:2379], path: ./data}",
    );
    fs::write(&config, text).expect("write config");
    let (code, lines, _) = validate(&config);
    assert_eq!(code, Some(3), "{lines:?}");
    assert_eq!(
        lines,
        [format!(
            "{}:2:15: this build has no etcd store (fleet mode); rebuild with --features etcd",
            config.display()
        )]
    );
}
