//! OCI IMDS v2: `GET /opc/v2/instance/` with `Authorization: Bearer Oracle`; the instance's
//! `timeMaintenanceRebootDue` (RFC 3339), present and not null while a maintenance reboot is
//! scheduled, is the notice and its deadline.

use serde::Deserialize;

use super::http::{Metadata, unexpected};
use super::{Notice, parse_time};

const INSTANCE_PATH: &str = "/opc/v2/instance/";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Instance {
    #[serde(default)]
    id: String,
    #[serde(default)]
    time_maintenance_reboot_due: Option<String>,
}

/// The notice OCI's IMDS announces now, if any.
pub(super) async fn poll(http: &Metadata) -> Result<Vec<Notice>, String> {
    let answer = http.get(INSTANCE_PATH, &[("Authorization", "Bearer Oracle")]).await?;
    if answer.status != 200 {
        return Err(unexpected(INSTANCE_PATH, &answer));
    }
    let body = answer.text();
    let instance: Instance = serde_json::from_str(&body)
        .map_err(|e| format!("{INSTANCE_PATH}: cannot read the instance metadata: {e}"))?;
    let Some(due) = instance.time_maintenance_reboot_due.filter(|t| !t.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let deadline = parse_time(&due).map_err(|e| format!("{INSTANCE_PATH} timeMaintenanceRebootDue: {e}"))?;
    Ok(vec![Notice {
        kind: "maintenance-reboot",
        id: format!("maintenance-reboot {due}"),
        deadline: Some(deadline),
        detail: format!("maintenance reboot of {} due {due}", instance.id),
        acknowledge: false,
    }])
}
