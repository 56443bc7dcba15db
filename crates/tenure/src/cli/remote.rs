//! The verbs that talk to a running agent's HTTP API, in kubectl's manner: `tenure ownership`,
//! `actions`, `history`, `drain`, `undrain`, `approve`, `desire`, `undesire`, each with
//! `-o table|json|yaml` and `--endpoint`; the ones that change something also with `--token-file`.
//!
//! Exit codes: 0 done; 1 refused (the agent answered 401, 403, 404, 409, another 4xx but 400, 413
//! and 415, or a 5xx; or no agent answers; or the TLS handshake with an `https://` endpoint
//! failed; or what answered is not a tenure agent: no JSON); 2 bad input (a filter the verb reads
//! with the agent's own rules, `agent/listing.rs`) (a bad argument, an answer of 400, 413 or 415, a token file or
//! `--ca-file` that cannot be read, a mutating verb without a token file). Errors are one
//! line on stderr: `tenure drain: node "x" not found (404)`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use http::{Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;

mod actions;

use super::EXIT_BAD_INPUT;
use super::client::{Answer, Client, DEFAULT_ENDPOINT, path_segment};
use crate::agent::answers::UNCHANGED_NOTE;
use crate::agent::listing::ListFilter;
use crate::agent::request::no_eligible_member_note;
use crate::api::ApiToken;
use crate::ops::{Input, OperatorCommand};

/// Exit code when the agent refused, failed, or did not answer.
pub const EXIT_REFUSED: u8 = 1;

/// Output formats of the verbs that talk to an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RemoteOutput {
    /// Aligned columns, for people.
    Table,
    /// The table with every column (for `ownership`: who holds the address by the log, the NICs,
    /// whether it is desired, both epochs; for `actions`: when the last call was made, when a
    /// failed one is retried, and the last failure's reason).
    Wide,
    /// The API's JSON, pretty-printed.
    Json,
    /// The API's JSON as YAML.
    Yaml,
}

/// Flags every verb that talks to an agent takes; the verbs that change something add
/// `--token-file` ([`super::change_args::ChangeArgs`]), the read-only ones neither show nor read it.
#[derive(Debug, Args)]
pub struct RemoteArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: RemoteOutput,
    /// The agent's API: http://host:port, or https://host:port for a TLS proxy in front of it
    /// [default: $TENURE_ENDPOINT, else http://127.0.0.1:9464].
    #[arg(long)]
    endpoint: Option<String>,
    /// With an https endpoint: trust only the CA certificates (PEM) in this file, instead of the
    /// system's trust store (a private CA that signed the proxy's certificate)
    /// [default: $TENURE_CA_FILE, for https endpoints only].
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// The file holding the agent's API token: `--token-file` of the verbs that change something.
    #[arg(skip)]
    token_file: Option<PathBuf>,
}

impl RemoteArgs {
    /// The output format asked for.
    pub(super) fn output(&self) -> RemoteOutput {
        self.output
    }

    /// These flags with a mutating verb's `--token-file`.
    pub(super) fn with_token_file(self, token_file: Option<PathBuf>) -> Self {
        Self { token_file, ..self }
    }
}

/// What a reading verb asks of the agent (the verbs that change something are
/// [`crate::ops`]' operator commands, run by [`run_change`]).
#[derive(Debug)]
pub enum Verb {
    /// `GET /v1/ownership` with filters (`?pool=&node=&address=`).
    Ownership {
        /// The filters.
        filter: ListFilter,
    },
    /// `GET /v1/actions` with filters.
    Actions {
        /// `?pool=&node=&address=`.
        filter: ListFilter,
        /// `?state=`.
        state: Option<String>,
    },
    /// `GET /v1/history` with filters (`?pool=&node=&address=`).
    History {
        /// The filters.
        filter: ListFilter,
    },
}

impl Verb {
    fn name(&self) -> &'static str {
        match self {
            Self::Ownership { .. } => "ownership",
            Self::Actions { .. } => "actions",
            Self::History { .. } => "history",
        }
    }

    /// The path of the request (percent-encoded, with the filters as its query), a `GET`.
    fn path(&self) -> String {
        match self {
            Self::Ownership { filter } => with_query("/v1/ownership", filter.query_pairs()),
            Self::Actions { filter, state } => {
                let mut query = filter.query_pairs();
                query.extend(state.iter().map(|state| ("state", state.clone())));
                with_query("/v1/actions", query)
            }
            Self::History { filter } => with_query("/v1/history", filter.query_pairs()),
        }
    }

    /// The answer's list as a table (`wide`: every column).
    fn table(&self, value: &Value, wide: bool) -> Result<Rendered, String> {
        match self {
            Self::Ownership { .. } => ownership_table(value, wide),
            Self::Actions { .. } => actions::actions_table(value, wide, actions::now_ms()),
            Self::History { .. } => super::history::history_table(value),
        }
    }
}

/// The path (percent-encoded) and the JSON body of operator command `C`'s request, from its
/// route and values: the one value in place of the route's path parameter, or the values as the
/// body's fields.
pub(super) fn change_request<C: OperatorCommand>(command: &C) -> (String, Option<Vec<u8>>) {
    let values = command.values();
    match C::INPUT {
        Input::Path(_) => {
            // The route's one parameter, `{…}`, replaced by the value: what is around it stays.
            let (prefix, rest) = C::ROUTE.split_once('{').unwrap_or((C::ROUTE, "}"));
            let suffix = rest.split_once('}').map_or("", |(_, suffix)| suffix);
            let segments: String = values.iter().map(|value| path_segment(value)).collect();
            (format!("{prefix}{segments}{suffix}"), None)
        }
        Input::Body(fields) => {
            let body: serde_json::Map<String, Value> =
                fields.iter().zip(values).map(|(field, value)| ((*field).to_owned(), value.into())).collect();
            (C::ROUTE.to_owned(), Some(Value::Object(body).to_string().into_bytes()))
        }
    }
}

/// A client of the agent `args` name, and a runtime to drive it: what every verb starts with.
pub(super) struct Session {
    /// The client.
    pub(super) client: Client,
    /// The runtime its calls run on.
    pub(super) runtime: tokio::runtime::Runtime,
}

impl Session {
    /// The client of `args`' agent, with the token when the verb changes something (`mutates`:
    /// needed then; a read-only verb sends none); `Err` is the exit code after the one-line error
    /// `tenure COMMAND: …` was printed.
    pub(super) fn open(command: &str, mutates: bool, args: &RemoteArgs) -> Result<Self, ExitCode> {
        let fail = |code: u8, message: &str| {
            eprintln!("tenure {command}: {message}");
            ExitCode::from(code)
        };
        let endpoint = args
            .endpoint
            .clone()
            .or_else(|| std::env::var("TENURE_ENDPOINT").ok().filter(|e| !e.is_empty()))
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        let token_file = args
            .token_file
            .clone()
            .or_else(|| std::env::var_os("TENURE_TOKEN_FILE").filter(|f| !f.is_empty()).map(PathBuf::from));
        let token = match (&token_file, mutates) {
            (Some(path), true) => match ApiToken::from_file(path) {
                Ok(token) => Some(token.secret().to_owned()),
                Err(e) => return Err(fail(EXIT_BAD_INPUT, &e.to_string())),
            },
            (None, true) => {
                return Err(fail(
                    EXIT_BAD_INPUT,
                    "needs the agent's API token: --token-file FILE or TENURE_TOKEN_FILE (the agent's apiTokenFile)",
                ));
            }
            (_, false) => None,
        };
        // TENURE_CA_FILE is a default for https endpoints: exported in a shell, it must not break
        // the plain http ones (an explicit --ca-file with http is still refused, in Client::new).
        let https = endpoint.trim_start().to_ascii_lowercase().starts_with("https://");
        let ca_file = args.ca_file.clone().or_else(|| {
            https
                .then(|| std::env::var_os("TENURE_CA_FILE").filter(|f| !f.is_empty()).map(PathBuf::from))
                .flatten()
        });
        let client = Client::new(&endpoint, token, ca_file.as_deref())
            .map_err(|e| fail(EXIT_BAD_INPUT, &e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| fail(EXIT_REFUSED, &format!("cannot start the async runtime: {e}")))?;
        Ok(Self { client, runtime })
    }

    /// One exchange: the answer's JSON on a 2xx, else the exit code and the one-line error
    /// (`MESSAGE (STATUS)`) to print.
    pub(super) fn exchange(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Value, (u8, String)> {
        let answer = self
            .runtime
            .block_on(self.client.call(method, path, body))
            .map_err(|e| (EXIT_REFUSED, e.to_string()))?;
        let json: Option<Value> = serde_json::from_slice(&answer.body).ok();
        match json {
            Some(value) if answer.status.is_success() => Ok(value),
            Some(value) => Err((exit_code_of(answer.status), error_line(answer.status, &value))),
            // Every answer of an agent is JSON, its errors included: anything else is another
            // server (a web server, a proxy's own error page) at that endpoint.
            None => Err((EXIT_REFUSED, not_an_agent(self.client.endpoint(), &answer))),
        }
    }
}

/// Runs reading verb `verb` against the agent `args` name, reading the list as `list` asks
/// (every page, or one: `cli/list.rs`); prints the answer or a one-line error.
pub fn run_list(verb: &Verb, args: &RemoteArgs, list: &super::list::ListArgs) -> ExitCode {
    let command = verb.name();
    let fail = |code: u8, message: &str| {
        eprintln!("tenure {command}: {message}");
        ExitCode::from(code)
    };
    let session = match Session::open(command, false, args) {
        Ok(session) => session,
        Err(code) => return code,
    };
    // The list in the answer is under the verb's name.
    let value = match super::list::fetch(&session, &verb.path(), command, list) {
        Ok(value) => value,
        Err((code, message)) => return fail(code, &message),
    };
    match render(args.output, &value, |wide| verb.table(&value, wide)) {
        Ok(Rendered::Out(text)) => super::print_out(&text),
        Ok(Rendered::Empty) => eprintln!("No resources found."),
        Err(message) => return fail(EXIT_REFUSED, &message),
    }
    if let Some(note) = super::list::more_note(&value) {
        eprintln!("tenure {command}: {note}");
    }
    if let Some(warning) = unhealthy_warning(&session) {
        eprintln!("tenure {command}: {warning}");
    }
    ExitCode::SUCCESS
}

/// A line saying that the agent that answered is not healthy (`GET /v1/health` is not `ok`: its
/// store refused its log, it cannot follow the log, …), so what it listed is its view as of
/// the log index it names and may be out of date; `None` when it is healthy or does not say.
fn unhealthy_warning(session: &Session) -> Option<String> {
    let answer = session.runtime.block_on(session.client.call(Method::GET, "/v1/health", None)).ok()?;
    let health: Value = serde_json::from_slice(&answer.body).ok()?;
    if health.get("ok").and_then(Value::as_bool) != Some(false) {
        return None;
    }
    let reason = health.get("reason").and_then(Value::as_str).unwrap_or("no reason given");
    let index = health.get("logIndex").map_or_else(|| "unknown".to_owned(), ToString::to_string);
    Some(format!(
        "warning: this agent is not healthy ({reason}); the above is its view as of log index {index}, which may be out of \
         date: ask a healthy agent"
    ))
}

/// Runs operator command `command` ([`crate::ops`]) against the agent `args` name: its own check,
/// then `POST` its input to its route; prints its done line with the log index
/// (`node/a drained (log index 7)`), or the answer for `-o json|yaml`, or a one-line error.
pub fn run_change<C: OperatorCommand>(command: &C, args: &RemoteArgs) -> ExitCode {
    let fail = |code: u8, message: &str| {
        eprintln!("tenure {}: {message}", C::NAME);
        ExitCode::from(code)
    };
    if let Err(message) = command.check() {
        return fail(EXIT_BAD_INPUT, &message);
    }
    let session = match Session::open(C::NAME, true, args) {
        Ok(session) => session,
        Err(code) => return code,
    };
    let (path, body) = change_request(command);
    let value = match session.exchange(Method::POST, &path, body) {
        Ok(value) => value,
        Err((code, message)) => return fail(code, &message),
    };
    let done = |_wide| {
        let index = value.get("index").and_then(Value::as_u64).ok_or("the agent's answer has no `index`")?;
        // A drain that left addresses with no eligible member says so (older agents answer
        // without the field: nothing to add).
        let note = value
            .get("addressesWithNoEligibleMember")
            .and_then(Value::as_u64)
            .map(no_eligible_member_note)
            .unwrap_or_default();
        // A repeated command (a drain of a drained node…) is appended, and said to change nothing.
        let unchanged = if value.get("unchanged").and_then(Value::as_bool) == Some(true) {
            format!("; {UNCHANGED_NOTE}")
        } else {
            String::new()
        };
        Ok(Rendered::Out(format!("{} (log index {index}){unchanged}{note}\n", command.done())))
    };
    match render(args.output, &value, done) {
        Ok(Rendered::Out(text)) => super::print_out(&text),
        Ok(Rendered::Empty) => eprintln!("No resources found."),
        Err(message) => return fail(EXIT_REFUSED, &message),
    }
    ExitCode::SUCCESS
}

/// 2 for the answers that say the input was bad (400, 413, 415), else 1.
fn exit_code_of(status: StatusCode) -> u8 {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE | StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            EXIT_BAD_INPUT
        }
        _ => EXIT_REFUSED,
    }
}

/// `MESSAGE (STATUS)` from an error answer's JSON: its `error` (or, for health-shaped bodies,
/// `reason`), else the status's reason phrase.
fn error_line(status: StatusCode, json: &Value) -> String {
    let message = json
        .get("error")
        .or_else(|| json.get("reason"))
        .and_then(Value::as_str)
        .map_or_else(|| status.canonical_reason().unwrap_or("error").to_owned(), str::to_owned);
    format!("{} ({})", message.replace(char::is_control, " "), status.as_u16())
}

/// Longest piece of a foreign answer quoted in the one line.
const FOREIGN_QUOTE_CHARS_MAX: usize = 60;

/// The one line for an answer that is not JSON: not a tenure agent (or a proxy in front of it
/// answered for itself), with what came back.
fn not_an_agent(endpoint: &str, answer: &Answer) -> String {
    let text = String::from_utf8_lossy(&answer.body);
    let first = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or_default();
    let what = if first.is_empty() {
        "an empty body".to_owned()
    } else if first.starts_with('<') {
        "an HTML page".to_owned()
    } else {
        let quote: String = first
            .chars()
            .take(FOREIGN_QUOTE_CHARS_MAX)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let more = if first.chars().count() > FOREIGN_QUOTE_CHARS_MAX { "…" } else { "" };
        format!("`{quote}{more}`")
    };
    let status = answer.status;
    format!(
        "{endpoint} answered {} {} with {what}, not a tenure agent's JSON; is --endpoint a tenure agent's API \
         (or did a proxy in front of it fail)?",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    )
}

/// What to print.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Rendered {
    /// This text on stdout.
    Out(String),
    /// Nothing on stdout; `No resources found.` on stderr (as kubectl does).
    Empty,
}

/// The answer in the asked format: for `table` and `wide`, as `table` writes it (given whether
/// wide).
fn render(
    output: RemoteOutput,
    value: &Value,
    table: impl FnOnce(bool) -> Result<Rendered, String>,
) -> Result<Rendered, String> {
    match output {
        RemoteOutput::Json => {
            let mut text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
            text.push('\n');
            Ok(Rendered::Out(text))
        }
        RemoteOutput::Yaml => serde_saphyr::to_string(value).map(Rendered::Out).map_err(|e| e.to_string()),
        RemoteOutput::Table | RemoteOutput::Wide => table(output == RemoteOutput::Wide),
    }
}

/// A row of `GET /v1/ownership` (fields the table does not show are ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OwnershipLine {
    pool: String,
    address: String,
    owner: Option<String>,
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    held_by: Option<Vec<String>>,
    #[serde(default)]
    nics: Option<Vec<String>>,
    desired: bool,
    ownership_epoch: u64,
    capture_epoch: u64,
}

/// The list under `key` in the answer, as `T`s.
pub(super) fn rows<T: for<'de> Deserialize<'de>>(value: &Value, key: &str) -> Result<Vec<T>, String> {
    let list = value.get(key).cloned().ok_or_else(|| format!("the agent's answer has no `{key}`"))?;
    serde_json::from_value(list).map_err(|e| format!("the agent's `{key}` is not as expected: {e}"))
}

/// The owner (who should hold the address), the phase and the NICs that do hold it (by the log's
/// results and inventories); `wide` adds the holding nodes, desire and both epochs.
fn ownership_table(value: &Value, wide: bool) -> Result<Rendered, String> {
    let lines: Vec<OwnershipLine> = rows(value, "ownership")?;
    let list = |items: Option<Vec<String>>| match items {
        None => "<unknown>".to_owned(),
        Some(items) if items.is_empty() => "<none>".to_owned(),
        Some(items) => items.join(","),
    };
    let body = lines
        .into_iter()
        .map(|l| {
            let mut row = vec![
                l.pool,
                l.address,
                l.owner.unwrap_or_else(|| "<none>".to_owned()),
                l.phase.unwrap_or_else(|| "<unknown>".to_owned()),
                list(l.nics),
            ];
            if wide {
                row.extend([
                    list(l.held_by),
                    l.desired.to_string(),
                    l.ownership_epoch.to_string(),
                    l.capture_epoch.to_string(),
                ]);
            }
            row
        })
        .collect();
    let mut headers = vec!["POOL", "ADDRESS", "OWNER", "PHASE", "NICS"];
    if wide {
        headers.extend(["HELD-BY", "DESIRED", "OWNERSHIP-EPOCH", "CAPTURE-EPOCH"]);
    }
    Ok(table(&headers, body))
}

/// `path?key=value&…` for the filters given (values percent-encoded); `path` alone without any.
fn with_query(path: &str, pairs: Vec<(&str, String)>) -> String {
    let query: Vec<String> =
        pairs.into_iter().map(|(key, value)| format!("{key}={}", path_segment(&value))).collect();
    if query.is_empty() { path.to_owned() } else { format!("{path}?{}", query.join("&")) }
}

/// Columns as wide as their widest cell, three spaces apart, no trailing spaces (as kubectl
/// prints); [`Rendered::Empty`] without rows.
pub(super) fn table(headers: &[&str], rows: Vec<Vec<String>>) -> Rendered {
    if rows.is_empty() {
        return Rendered::Empty;
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header_row).chain(&rows) {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 3));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Rendered::Out(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops;

    #[test]
    fn tables_align_columns_to_their_widest_cell() {
        let Rendered::Out(text) = table(
            &["A", "LONG-HEADER", "C"],
            vec![vec!["xxxx".into(), "y".into(), "z".into()], vec!["x".into(), "yy".into(), "".into()]],
        ) else {
            panic!("rows were given");
        };
        assert_eq!(text, "A      LONG-HEADER   C\nxxxx   y             z\nx      yy\n");
        assert_eq!(table(&["A"], Vec::new()), Rendered::Empty);
    }

    #[test]
    fn operator_commands_send_their_input_to_their_route() {
        let drain = ops::Drain { node: "a b".into() };
        assert_eq!(change_request(&drain), ("/v1/drain/a%20b".to_owned(), None));
        assert_eq!(change_request(&ops::Undrain { node: "a".into() }), ("/v1/undrain/a".to_owned(), None));
        assert_eq!(
            change_request(&ops::Retire { node: "r 3".into() }),
            ("/v1/nodes/r%203/retire".to_owned(), None)
        );
        let key = "p/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1";
        let (path, body) = change_request(&ops::Approve { key: key.into() });
        assert_eq!(
            path,
            "/v1/approve/p%2F10.0.0.10%2Fassign-secondary-ip%2Fa%2Fsim1%2Feni-a%2Fowner%3A1%3Aepoch%3A1"
        );
        assert_eq!(body, None);
        for (path, body) in [
            change_request(&ops::Desire { pool: "p".into(), address: "10.0.0.10".into() }),
            change_request(&ops::Undesire { pool: "p".into(), address: "10.0.0.10".into() }),
        ] {
            let body: Value = serde_json::from_slice(&body.expect("a body")).expect("JSON");
            assert_eq!(body, serde_json::json!({"pool": "p", "address": "10.0.0.10"}), "{path}");
        }
        assert_eq!(
            change_request(&ops::Undesire { pool: "p".into(), address: "a".into() }).0,
            "/v1/undesire"
        );
    }

    #[test]
    fn bad_input_answers_exit_2_and_refusals_exit_1() {
        for status in [400, 413, 415] {
            assert_eq!(exit_code_of(StatusCode::from_u16(status).expect("valid")), EXIT_BAD_INPUT);
        }
        for status in [401, 403, 404, 405, 408, 409, 500, 503] {
            assert_eq!(exit_code_of(StatusCode::from_u16(status).expect("valid")), EXIT_REFUSED);
        }
    }

    #[test]
    fn error_lines_carry_the_message_and_status() {
        let status = |code: u16| StatusCode::from_u16(code).expect("valid");
        let json = |text: &str| serde_json::from_str::<Value>(text).expect("JSON");
        assert_eq!(
            error_line(status(404), &json(r#"{"error": "node \"x\" not found"}"#)),
            "node \"x\" not found (404)"
        );
        assert_eq!(error_line(status(503), &json(r#"{"ok": false, "reason": "no head"}"#)), "no head (503)");
        assert_eq!(error_line(status(500), &json("{}")), "Internal Server Error (500)");
    }

    #[test]
    fn answers_that_are_not_json_say_the_endpoint_is_not_an_agent() {
        let answer = |code: u16, body: &str| Answer {
            status: StatusCode::from_u16(code).expect("valid"),
            body: bytes::Bytes::from(body.to_owned()),
        };
        let line = not_an_agent("http://h:1", &answer(404, "\n<!DOCTYPE html>\n<html>…"));
        assert!(
            line.starts_with(
                "http://h:1 answered 404 Not Found with an HTML page, not a tenure agent's JSON"
            ),
            "{line}"
        );
        let line = not_an_agent("http://h:1", &answer(502, "bad gateway\nmore"));
        assert!(line.starts_with("http://h:1 answered 502 Bad Gateway with `bad gateway`,"), "{line}");
        let line = not_an_agent("http://h:1", &answer(200, ""));
        assert!(line.contains("200 OK with an empty body") && !line.contains('\n'), "{line}");
        let long = "x".repeat(100);
        assert!(not_an_agent("http://h:1", &answer(200, &long)).contains(&format!("`{}…`", "x".repeat(60))));
    }
}
