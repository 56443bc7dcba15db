//! Azure IMDS Scheduled Events: `GET /metadata/scheduledevents?api-version=2020-07-01` with
//! `Metadata: true`. An event of type `Reboot`, `Redeploy`, `Preempt` or `Terminate` whose
//! `Resources` name this VM (its name from `/metadata/instance/compute/name`, read once) is a
//! notice; its `NotBefore` (RFC 1123; empty once started) is the deadline.
//!
//! `Freeze` is ignored: it pauses the VM for seconds (memory-preserving maintenance), shorter than
//! a hand-over, and the node's heartbeat TTL covers it; draining for it would move every address
//! and leave the node drained for a pause. The platform starts a freeze at its `NotBefore`
//! without our acknowledgement.
//!
//! Acknowledgement: `POST` of `{"StartRequests": [{"EventId": "…"}]}` to the same path, which
//! tells the platform it may start the event now rather than at `NotBefore`.

use http::Method;
use serde::Deserialize;

use super::http::{Metadata, unexpected};
use super::{Notice, parse_time};

const API_VERSION: &str = "2020-07-01";
const NAME_PATH: &str = "/metadata/instance/compute/name?api-version=2021-02-01&format=text";
const HEADERS: [(&str, &str); 1] = [("Metadata", "true")];

fn events_path() -> String {
    format!("/metadata/scheduledevents?api-version={API_VERSION}")
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Document {
    #[serde(default)]
    events: Vec<Event>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Event {
    event_id: String,
    event_type: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    event_status: String,
    #[serde(default)]
    not_before: String,
    #[serde(default)]
    description: String,
}

/// The metric label of an event type this module acts on, `None` for the others (`Freeze`).
fn kind_of(event_type: &str) -> Option<&'static str> {
    match event_type {
        "Reboot" => Some("reboot"),
        "Redeploy" => Some("redeploy"),
        "Preempt" => Some("preempt"),
        "Terminate" => Some("terminate"),
        _ => None,
    }
}

/// The events of this VM Azure schedules now.
pub(super) async fn poll(http: &Metadata, vm_name: &mut Option<String>) -> Result<Vec<Notice>, String> {
    let name = match vm_name {
        Some(name) => name.clone(),
        None => {
            let answer = http.get(NAME_PATH, &HEADERS).await?;
            let name = answer.text().trim().to_owned();
            if answer.status != 200 || name.is_empty() {
                return Err(unexpected("this VM's name (compute/name)", &answer));
            }
            *vm_name = Some(name.clone());
            name
        }
    };
    let path = events_path();
    let answer = http.get(&path, &HEADERS).await?;
    if answer.status != 200 {
        return Err(unexpected(&path, &answer));
    }
    let document: Document = serde_json::from_slice(&answer.body)
        .map_err(|e| format!("{path}: cannot read the scheduled events: {e}"))?;
    let mut notices = Vec::new();
    for event in document.events {
        let Some(kind) = kind_of(&event.event_type) else { continue };
        if !event.resources.iter().any(|r| r.eq_ignore_ascii_case(&name)) {
            continue;
        }
        let deadline = if event.not_before.trim().is_empty() {
            None
        } else {
            Some(parse_time(&event.not_before).map_err(|e| format!("{path} event {}: {e}", event.event_id))?)
        };
        notices.push(Notice {
            kind,
            detail: format!(
                "{} event {} ({}) for {name}, {}{}",
                event.event_type,
                event.event_id,
                event.event_status,
                if event.not_before.trim().is_empty() {
                    "under way".to_owned()
                } else {
                    format!("not before {}", event.not_before)
                },
                if event.description.trim().is_empty() {
                    String::new()
                } else {
                    format!(": {}", event.description)
                }
            ),
            // A started event is under way: it waits for no one.
            acknowledge: event.event_status != "Started",
            id: event.event_id,
            deadline,
        });
    }
    Ok(notices)
}

/// Tells Azure this VM is ready for event `event_id`.
pub(super) async fn acknowledge(http: &Metadata, event_id: &str) -> Result<(), String> {
    let body = serde_json::json!({ "StartRequests": [{ "EventId": event_id }] }).to_string();
    let path = events_path();
    let answer = http.call(Method::POST, &path, &HEADERS, Some(body.into_bytes())).await?;
    if answer.status / 100 != 2 {
        return Err(unexpected(&format!("acknowledging event {event_id}"), &answer));
    }
    Ok(())
}
