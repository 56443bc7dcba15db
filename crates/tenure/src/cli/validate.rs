//! `tenure validate FILE…`: pool specs (several documents per file, all files checked together)
//! and replay scenarios. Exit 0 when valid, 2 with one `file:line:column: message` per error.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use tenure_core::input::InputError;
use tenure_core::spec::{check_pool_set, parse_pool_documents};
use tenure_sim::scenario::parse_scenario;

use super::EXIT_BAD_INPUT;

/// Keys only a scenario has at its top level; pool documents have none of them.
const SCENARIO_KEYS: [&str; 3] = ["nodes", "providers", "timeline"];

/// Whether a file is a scenario (it has `nodes`, `providers` or `timeline` at the top), else pool
/// documents. A file that is not valid YAML is still told apart by its top-level lines, so that
/// its syntax error is reported by the right parser, at the right place.
fn is_scenario(text: &str) -> bool {
    let keys: Result<Vec<BTreeMap<String, serde::de::IgnoredAny>>, _> = serde_saphyr::from_multiple(text);
    match keys {
        Ok(docs) => docs.first().is_some_and(|d| SCENARIO_KEYS.iter().any(|k| d.contains_key(*k))),
        Err(_) => text.lines().any(|line| {
            SCENARIO_KEYS.iter().any(|k| line.strip_prefix(k).is_some_and(|rest| rest.starts_with(':')))
        }),
    }
}

pub fn run(files: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    let mut all_pools = Vec::new();
    let mut pool_files: Vec<(String, usize)> = Vec::new();
    for path in files {
        let file = path.display().to_string();
        let Ok(text) = super::read_input(path) else {
            failed = true;
            continue;
        };
        let errors: Vec<InputError> = if is_scenario(&text) {
            parse_scenario(&text).err().unwrap_or_default()
        } else {
            match parse_pool_documents(&text) {
                Ok(pools) => {
                    pool_files.push((file.clone(), pools.len()));
                    all_pools.extend(pools);
                    Vec::new()
                }
                Err(errors) => errors,
            }
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
        let cross = check_pool_set(&all_pools);
        for (index, e) in cross {
            // Errors point at the later pool; name the file it came from.
            eprintln!("{}", e.render(&owner_file[index]));
            failed = true;
        }
    }
    if failed {
        ExitCode::from(EXIT_BAD_INPUT)
    } else {
        println!("{} file(s) valid", files.len());
        ExitCode::SUCCESS
    }
}
