//! AWS IMDSv2 (the instance metadata service, session-token version): a token from
//! `PUT /latest/api/token`, then three reads with it:
//!
//! - `GET /latest/meta-data/spot/instance-action`: 404 while none; `{"action": "terminate" |
//!   "stop" | "hibernate", "time": RFC 3339}` once the spot instance is to be interrupted (two
//!   minutes' notice).
//! - `GET /latest/meta-data/events/recommendations/rebalance`: 404 while none; `{"noticeTime":
//!   RFC 3339}` once the instance is at elevated risk of interruption (no deadline: the time is
//!   when it was said).
//! - `GET /latest/meta-data/events/maintenance/scheduled`: a JSON list of events (`Code`,
//!   `EventId`, `NotBefore`, `State`, …); an event not `completed` or `canceled` is a notice
//!   whose deadline is its `NotBefore`.
//!
//! A 401 (the token expired) drops the token: the next poll asks for a new one.

use std::time::Duration;

use http::Method;
use serde::Deserialize;
use tokio::time::Instant;

use super::http::{Metadata, unexpected};
use super::{Notice, parse_time};

/// The token's lifetime asked for (the service's maximum is six hours).
const TOKEN_TTL_SECONDS: u64 = 21_600;
/// A token is asked for again after this much of its lifetime.
const TOKEN_RENEW_AFTER: Duration = Duration::from_secs(TOKEN_TTL_SECONDS / 2);

const TOKEN_PATH: &str = "/latest/api/token";
const SPOT_PATH: &str = "/latest/meta-data/spot/instance-action";
const REBALANCE_PATH: &str = "/latest/meta-data/events/recommendations/rebalance";
const SCHEDULED_PATH: &str = "/latest/meta-data/events/maintenance/scheduled";
const TOKEN_HEADER: &str = "X-aws-ec2-metadata-token";

#[derive(Deserialize)]
struct InstanceAction {
    action: String,
    time: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rebalance {
    notice_time: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Scheduled {
    code: String,
    #[serde(default)]
    event_id: String,
    #[serde(default)]
    not_before: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    description: String,
}

/// The notices IMDSv2 announces now.
pub(super) async fn poll(
    http: &Metadata,
    token: &mut Option<(String, Instant)>,
) -> Result<Vec<Notice>, String> {
    let session = match token {
        Some((value, at)) if at.elapsed() < TOKEN_RENEW_AFTER => value.clone(),
        _ => {
            let ttl = TOKEN_TTL_SECONDS.to_string();
            let answer = http
                .call(Method::PUT, TOKEN_PATH, &[("X-aws-ec2-metadata-token-ttl-seconds", &ttl)], None)
                .await?;
            if answer.status != 200 {
                return Err(unexpected("IMDSv2 token", &answer));
            }
            let value = answer.text().trim().to_owned();
            *token = Some((value.clone(), Instant::now()));
            value
        }
    };
    let headers = [(TOKEN_HEADER, session.as_str())];
    let mut notices = Vec::new();
    for path in [SPOT_PATH, REBALANCE_PATH, SCHEDULED_PATH] {
        let answer = http.get(path, &headers).await?;
        match answer.status {
            200 => {}
            404 => continue,
            401 => {
                *token = None;
                return Err(unexpected(
                    &format!("{path} (the session token was refused; a new one next time)"),
                    &answer,
                ));
            }
            _ => return Err(unexpected(path, &answer)),
        }
        let body = answer.text();
        let unreadable = |e: serde_json::Error| format!("{path}: cannot read `{}`: {e}", body.trim());
        match path {
            SPOT_PATH => {
                let action: InstanceAction = serde_json::from_str(&body).map_err(unreadable)?;
                notices.push(Notice {
                    kind: "spot-interruption",
                    id: "spot-interruption".into(),
                    deadline: Some(parse_time(&action.time).map_err(|e| format!("{path}: {e}"))?),
                    detail: format!("spot instance-action {} at {}", action.action, action.time),
                    acknowledge: false,
                });
            }
            REBALANCE_PATH => {
                let rebalance: Rebalance = serde_json::from_str(&body).map_err(unreadable)?;
                notices.push(Notice {
                    kind: "rebalance-recommendation",
                    id: "rebalance-recommendation".into(),
                    deadline: None,
                    detail: format!("rebalance recommendation of {}", rebalance.notice_time),
                    acknowledge: false,
                });
            }
            _ => {
                let events: Vec<Scheduled> = serde_json::from_str(&body).map_err(unreadable)?;
                for event in events.into_iter().filter(pending) {
                    let deadline = if event.not_before.is_empty() {
                        None
                    } else {
                        Some(parse_time(&event.not_before).map_err(|e| format!("{path}: {e}"))?)
                    };
                    notices.push(Notice {
                        kind: "scheduled-event",
                        id: format!("scheduled-event {}", event.event_id),
                        deadline,
                        detail: format!(
                            "scheduled event {} ({}) not before {}: {}",
                            event.event_id, event.code, event.not_before, event.description
                        ),
                        acknowledge: false,
                    });
                }
            }
        }
    }
    Ok(notices)
}

/// Whether a scheduled event is still to come: not `completed` or `canceled` (IMDS also marks
/// them in the description, `[Completed]` / `[Canceled]`).
fn pending(event: &Scheduled) -> bool {
    let state = event.state.to_ascii_lowercase();
    let description = event.description.to_ascii_lowercase();
    !event.code.is_empty()
        && state != "completed"
        && state != "canceled"
        && !description.starts_with("[completed]")
        && !description.starts_with("[canceled]")
}
