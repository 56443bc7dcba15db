//! `tenure validate FILE…`: pool specs (several documents per file, all files checked together),
//! replay scenarios, and agent configs (with everything `tenure agent` checks before it opens its
//! store: the pool files they name, the API token file, an etcd store's secret files, the parts
//! this build lacks — `preflight.rs`). Exit 0 when valid; 2 with one `file:line:column: message`
//! per error; 3 when the only refusals are parts this build lacks (a provider kind without an
//! executor here, an etcd store without `--features etcd`), as `tenure agent` exits.
//!
//! # Which kind of file
//!
//! Told apart by the top-level keys of the file's first document, in this order:
//! 1. `timeline` → a scenario (only scenarios have one);
//! 2. a key only agent configs have (`node`, `store`, `identityFile`, `vrrp`, `listen`, …, see
//!    [`CONFIG_KEYS`]) → an agent config; every valid config has one, since `store` is required;
//! 3. `pools` listing file names (strings) → an agent config (a scenario's `pools` are documents),
//!    so that a config missing its `store` is still reported as a config;
//! 4. `nodes` or `providers` → a scenario;
//! 5. anything else → pool documents.
//!
//! A file that is not valid YAML is told apart by its unindented `key:` lines with rules 1, 2 and
//! 4, so that its syntax error is reported by the right parser, at the right place.
//!
//! An agent config's pool files are checked with that config (against its providers and nodes),
//! not with the pool files named on the command line: `tenure validate agent.yaml pools/edge.yaml`
//! checks `pools/edge.yaml` once as part of the config, once on its own, never against itself.
//! A file given twice, or by two paths (`dir/../file`, a link), is checked and counted once; but a
//! config given from another folder (a link to it) is another config, since its relative paths
//! are read from the folder it was given in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

use serde::Deserialize;
use serde::de::IgnoredAny;
use tenure_core::input::InputError;
use tenure_core::scenario::parse_scenario;
use tenure_core::spec::{check_new_pools, check_pool_set, parse_pool_documents};

use super::preflight::check_before_store;
use super::{EXIT_BAD_INPUT, EXIT_NOT_BUILT};
use crate::config::check_record_size;

/// Keys only a scenario has at its top level.
const SCENARIO_ONLY_KEYS: [&str; 1] = ["timeline"];
/// Keys a scenario has at its top level (agent configs may have `nodes` and `providers` too).
const SCENARIO_KEYS: [&str; 2] = ["nodes", "providers"];
/// Keys only an agent config has at its top level.
const CONFIG_KEYS: [&str; 10] = [
    "node",
    "store",
    "identityFile",
    "vrrp",
    "listen",
    "heartbeatInterval",
    "requeueInterval",
    "actionTimeout",
    "apiTokenFile",
    "journalRetention",
];

/// What a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileKind {
    /// MobilityPool documents.
    Pools,
    /// A replay scenario.
    Scenario,
    /// An agent config.
    Config,
}

/// A top-level value, as far as telling files apart needs: a list of strings, or anything else.
#[derive(Deserialize)]
#[serde(untagged)]
enum TopValue {
    Strings(Vec<String>),
    #[allow(dead_code)]
    Other(IgnoredAny),
}

/// Tells a file's kind by its top-level keys (see the module documentation).
fn file_kind(text: &str) -> FileKind {
    let has = |keys: &[&str], present: &dyn Fn(&str) -> bool| keys.iter().any(|k| present(k));
    let parsed: Result<Vec<BTreeMap<String, TopValue>>, _> = serde_saphyr::from_multiple(text);
    match parsed {
        Ok(documents) => {
            let Some(first) = documents.first() else { return FileKind::Pools };
            let present = |key: &str| first.contains_key(key);
            let pool_file_names =
                matches!(first.get("pools"), Some(TopValue::Strings(files)) if !files.is_empty());
            if has(&SCENARIO_ONLY_KEYS, &present) {
                FileKind::Scenario
            } else if has(&CONFIG_KEYS, &present) || pool_file_names {
                FileKind::Config
            } else if has(&SCENARIO_KEYS, &present) {
                FileKind::Scenario
            } else {
                FileKind::Pools
            }
        }
        Err(_) => {
            let present = |key: &str| {
                text.lines().any(|line| line.strip_prefix(key).is_some_and(|rest| rest.starts_with(':')))
            };
            if has(&SCENARIO_ONLY_KEYS, &present) {
                FileKind::Scenario
            } else if has(&CONFIG_KEYS, &present) {
                FileKind::Config
            } else if has(&SCENARIO_KEYS, &present) {
                FileKind::Scenario
            } else {
                FileKind::Pools
            }
        }
    }
}

/// Validates an agent config with every check `tenure agent` makes before it opens its store
/// (`preflight.rs`: the config, the parts this build lacks, the token and store secret files, the
/// pool files); prints every refusal. The config's pool files when it would start, else the
/// refusal's exit code.
fn validate_config(path: &std::path::Path) -> Result<Vec<PathBuf>, u8> {
    match check_before_store(path) {
        Ok(checked) => Ok(checked.config.pool_files),
        Err(refusal) => {
            for line in &refusal.lines {
                eprintln!("{line}");
            }
            Err(refusal.code)
        }
    }
}

/// The file at `path`, whatever path names it (its canonical path; as given when it cannot be
/// resolved).
fn same_file(path: &std::path::Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// A config at `path` as its checks read it: the file, and the folder its relative paths are read
/// from — the folder it was given in, so a link to a config in another folder is another config.
fn same_config(path: &std::path::Path) -> (PathBuf, PathBuf) {
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => std::path::Path::new("."),
    };
    (same_file(path), same_file(folder))
}

/// Validates every file; see the module documentation.
pub fn run(files: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    let mut not_built = false;
    let mut all_pools = Vec::new();
    let mut pool_files: Vec<(String, usize)> = Vec::new();
    // The pool files the valid configs name, checked with them (each once, however many configs
    // name it, and not if it was given itself).
    let mut named: BTreeSet<PathBuf> = BTreeSet::new();
    // The files given, each checked once: a pool file or a scenario given twice or by two paths
    // is one file; a config is one config when given from the same folder too.
    let mut given: BTreeSet<PathBuf> = BTreeSet::new();
    let mut given_configs: BTreeSet<(PathBuf, PathBuf)> = BTreeSet::new();
    for path in files {
        let file = path.display().to_string();
        let Ok(text) = super::read_input(path) else {
            failed = true;
            continue;
        };
        let kind = file_kind(&text);
        let new = match kind {
            FileKind::Config => given_configs.insert(same_config(path)),
            FileKind::Pools | FileKind::Scenario => given.insert(same_file(path)),
        };
        if !new {
            continue;
        }
        let errors: Vec<InputError> = match kind {
            FileKind::Scenario => parse_scenario(&text).err().unwrap_or_default(),
            FileKind::Config => {
                match validate_config(path) {
                    Ok(pool_files) => named.extend(pool_files.iter().map(|f| same_file(f))),
                    Err(EXIT_NOT_BUILT) => not_built = true,
                    Err(_) => failed = true,
                }
                continue;
            }
            FileKind::Pools => match parse_pool_documents(&text) {
                Ok(pools) => {
                    let mut refused: Vec<InputError> =
                        check_new_pools(&pools).into_iter().map(|(_, e)| e).collect();
                    refused.extend(pools.iter().filter_map(|(pool, source)| check_record_size(pool, source)));
                    pool_files.push((file.clone(), pools.len()));
                    all_pools.extend(pools);
                    refused
                }
                Err(errors) => errors,
            },
        };
        for e in &errors {
            eprintln!("{}", e.render(&file));
        }
        failed |= !errors.is_empty();
    }
    // Pools of different files are applied together, so they are checked together too.
    if pool_files.len() > 1 {
        let mut owner_file = Vec::new();
        for (file, count) in &pool_files {
            owner_file.extend(std::iter::repeat_n(file.clone(), *count));
        }
        let origins: Vec<&str> = owner_file.iter().map(String::as_str).collect();
        let cross = check_pool_set(&all_pools, &origins);
        for (index, e) in cross {
            // Errors point at the later pool; name the file it came from.
            eprintln!("{}", e.render(&owner_file[index]));
            failed = true;
        }
    }
    if failed {
        ExitCode::from(EXIT_BAD_INPUT)
    } else if not_built {
        ExitCode::from(EXIT_NOT_BUILT)
    } else {
        let named = named.difference(&given).count();
        let checked = given.len() + given_configs.len();
        if named > 0 {
            println!("{checked} file(s) valid, and the {named} pool file(s) the configs name");
        } else {
            println!("{checked} file(s) valid");
        }
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_told_apart_by_their_top_level_keys() {
        let pool = "apiVersion: tenure.dev/v1alpha1\nkind: MobilityPool\nmetadata: {name: p}\n";
        assert_eq!(file_kind(pool), FileKind::Pools);
        assert_eq!(file_kind(""), FileKind::Pools);
        let scenario = "nodes: []\nproviders: []\npools:\n  - {apiVersion: x}\ntimeline: []\n";
        assert_eq!(file_kind(scenario), FileKind::Scenario);
        assert_eq!(file_kind("nodes: []\nproviders: []\ntimelines: []\n"), FileKind::Scenario, "a typo");
        let config = "node: {name: a}\nstore: {path: d}\nproviders: []\n";
        assert_eq!(file_kind(config), FileKind::Config);
        assert_eq!(file_kind("nodes: []\nproviders: []\nlisten: 127.0.0.1:1\n"), FileKind::Config);
        // A config without its config-only keys is still one when its pools are file names.
        assert_eq!(file_kind("nodes: []\nproviders: []\npools: [pools/edge.yaml]\n"), FileKind::Config);
        // Not valid YAML: told apart by its unindented keys.
        assert_eq!(file_kind("store: {path: [\nnode: x\n"), FileKind::Config);
        assert_eq!(file_kind("nodes: [\ntimeline: []\n"), FileKind::Scenario);
        assert_eq!(file_kind("spec: {addresses: [\n"), FileKind::Pools);
    }
}
