//! `tenure approve --pool P --address A`: approves every action of one address that waits for
//! approval on the agent asked — `GET /v1/actions?state=pending&pool=P`, then
//! `POST /v1/approve/{key}` for each of the address's keys ([`Approve`]'s route and done
//! line), in journal order (an address's verbs in one stamp are a sequence). One line per key; a
//! clear line when none waits.
//!
//! Exit codes as the other verbs (`remote.rs`): 0 when every key was approved or none waited; 1
//! when the agent refused one (the others are still tried) or did not answer; 2 for bad input.

use std::net::IpAddr;
use std::process::ExitCode;

use http::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use tenure_core::input::check_name;

use super::EXIT_BAD_INPUT;
use super::client::path_segment;
use super::remote::{EXIT_REFUSED, RemoteArgs, RemoteOutput, Session, change_request, rows};
use crate::agent::listing::parse_address;
use crate::ops::{Approve, OperatorCommand as _};

/// What the verb is called in messages.
const COMMAND: &str = Approve::NAME;

/// A row of `GET /v1/actions` (the fields this verb reads).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PendingLine {
    address: String,
    idempotency_key: String,
}

/// What became of one key.
enum Outcome {
    /// Appended at this log index.
    Approved(u64),
    /// Refused: the exit code it calls for, and the one-line error.
    Refused(u8, String),
}

/// Approves every action of `pool`'s `address` that waits for approval on the agent `args` name.
pub fn run(pool: &str, address: &str, args: &RemoteArgs) -> ExitCode {
    let fail = |code: u8, message: &str| {
        eprintln!("tenure {COMMAND}: {message}");
        ExitCode::from(code)
    };
    // The one reading of an address filter (`agent/listing.rs`), but one address: this verb
    // changes something, and names its target exactly. Empty names nothing: refused.
    if let Err(message) = check_name("--pool", pool) {
        return fail(EXIT_BAD_INPUT, &message);
    }
    let wanted = match parse_address("--address", address) {
        Ok(range) if range.prefix_len() == range.max_prefix_len() => range.addr(),
        Ok(range) => {
            return fail(
                EXIT_BAD_INPUT,
                &format!(
                    "--address `{address}` is a range; approve one address at a time (to list them: tenure \
                     actions --state pending --address {range})"
                ),
            );
        }
        Err(message) => return fail(EXIT_BAD_INPUT, &message),
    };
    let session = match Session::open(COMMAND, true, args) {
        Ok(session) => session,
        Err(code) => return code,
    };
    let path = format!("/v1/actions?state=pending&pool={}", path_segment(pool));
    let listed = match session.exchange(Method::GET, &path, None) {
        Ok(value) => value,
        Err((code, message)) => return fail(code, &message),
    };
    let pending: Vec<PendingLine> = match rows(&listed, "actions") {
        Ok(lines) => lines,
        Err(message) => return fail(EXIT_REFUSED, &message),
    };
    let mut keys: Vec<String> = Vec::new();
    for line in pending {
        if line.address.parse::<IpAddr>() == Ok(wanted) && !keys.contains(&line.idempotency_key) {
            keys.push(line.idempotency_key);
        }
    }
    if keys.is_empty() {
        // Nothing waits: a name the agent does not know is refused as a key naming it would be
        // (404), not answered as if the address were simply settled.
        if let Some(message) = unknown(&session, pool, wanted) {
            return fail(EXIT_REFUSED, &message);
        }
        eprintln!("No action of pool \"{pool}\" address {wanted} is waiting for approval on this agent.");
    }
    let outcomes: Vec<(Approve, Outcome)> = keys
        .into_iter()
        .map(|key| {
            let approve = Approve { key };
            let (path, body) = change_request(&approve);
            let outcome = match session.exchange(Method::POST, &path, body) {
                Ok(value) => match value.get("index").and_then(Value::as_u64) {
                    Some(index) => Outcome::Approved(index),
                    None => Outcome::Refused(EXIT_REFUSED, "the agent's answer has no `index`".to_owned()),
                },
                Err((code, message)) => Outcome::Refused(code, message),
            };
            (approve, outcome)
        })
        .collect();
    print(&outcomes, args.output());
    let worst = outcomes
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Refused(code, _) => Some(*code),
            Outcome::Approved(_) => None,
        })
        .max();
    worst.map_or(ExitCode::SUCCESS, ExitCode::from)
}

/// Why `pool`/`address` names nothing on the agent (the message of a 404), or `None` when the
/// pool lists the address (or the agent could not say: the "none waits" line then stands).
fn unknown(session: &Session, pool: &str, address: IpAddr) -> Option<String> {
    let count = |path: String| -> Option<usize> {
        let listed = session.exchange(Method::GET, &path, None).ok()?;
        Some(listed.get("ownership")?.as_array()?.len())
    };
    let pool_segment = path_segment(pool);
    if count(format!("/v1/ownership?pool={pool_segment}"))? == 0 {
        return Some(format!("pool \"{pool}\" is not applied (404)"));
    }
    let address_segment = path_segment(&address.to_string());
    (count(format!("/v1/ownership?pool={pool_segment}&address={address_segment}"))? == 0)
        .then(|| format!("pool \"{pool}\" has no address {address} (404)"))
}

/// One line per key (approved on stdout, refused on stderr), or for `-o json|yaml` one document
/// `{"approved": [{idempotencyKey, index}], "refused": [{idempotencyKey, error}]}` on stdout.
fn print(outcomes: &[(Approve, Outcome)], output: RemoteOutput) {
    if matches!(output, RemoteOutput::Table | RemoteOutput::Wide) {
        for (approve, outcome) in outcomes {
            match outcome {
                Outcome::Approved(index) => println!("{} (log index {index})", approve.done()),
                Outcome::Refused(_, message) => eprintln!("tenure {COMMAND}: {}: {message}", approve.key),
            }
        }
        return;
    }
    let approved: Vec<Value> = outcomes
        .iter()
        .filter_map(|(approve, o)| match o {
            Outcome::Approved(index) => Some(json!({"idempotencyKey": approve.key, "index": index})),
            Outcome::Refused(..) => None,
        })
        .collect();
    let refused: Vec<Value> = outcomes
        .iter()
        .filter_map(|(approve, o)| match o {
            Outcome::Refused(_, message) => Some(json!({"idempotencyKey": approve.key, "error": message})),
            Outcome::Approved(_) => None,
        })
        .collect();
    let document = json!({"approved": approved, "refused": refused});
    let text = match output {
        RemoteOutput::Yaml => serde_saphyr::to_string(&document).unwrap_or_else(|e| format!("{e}\n")),
        _ => format!("{}\n", serde_json::to_string_pretty(&document).unwrap_or_default()),
    };
    super::print_out(&text);
}
