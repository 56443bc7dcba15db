//! The FAKE instance metadata service (`scripts/metadata-fake/metadata_fake.py`: AWS IMDSv2,
//! Azure Scheduled Events, OCI IMDS v2, written from the published references; not a cloud) for
//! the maintenance notice tests: started on a free loopback port, killed on drop; its admin API
//! posts notices and reads counters. A start that fails panics: the tests fail, never skip.

#[path = "fake_server.rs"]
#[allow(clippy::duplicate_mod, reason = "each fake has the starter as its own submodule")]
mod fake_server;

use std::time::Duration;

use fake_server::FakeServer;

use serde_json::Value;

/// The fake's start-up bound (python3 starts in well under a second; more while cargo builds).
const START_MAX: Duration = Duration::from_secs(30);

/// The fake on a loopback port, killed on drop.
pub struct MetadataFake {
    server: FakeServer,
}

impl MetadataFake {
    pub fn start() -> Self {
        let mut command = fake_server::python("scripts/metadata-fake/metadata_fake.py");
        command.args(["--port", "0"]);
        Self {
            server: FakeServer::start("the metadata fake", command, "metadata-fake listening on ", START_MAX),
        }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// One plain HTTP request; the status and the body of the answer.
    pub fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        self.server.request(method, path, headers, body)
    }

    /// Merges `change` into the fake's state (`awsSpot`, `azureEvents`, …).
    pub fn set(&self, change: &Value) {
        let (status, body) = self.raw("POST", "/_fake/state", &[], &change.to_string());
        assert_eq!(status, 200, "POST /_fake/state: {body}");
    }

    pub fn counters(&self) -> Value {
        let (status, body) = self.raw("GET", "/_fake/counters", &[], "");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("JSON")
    }

    /// The acknowledgements received, their bodies in order.
    pub fn acks(&self) -> Vec<Value> {
        self.counters()["acks"].as_array().expect("a list").clone()
    }

    /// When each acknowledgement was received (the host's clock), in order.
    pub fn ack_times(&self) -> Vec<std::time::SystemTime> {
        self.counters()["ackTimes"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|t| std::time::UNIX_EPOCH + Duration::from_secs_f64(t.as_f64().expect("seconds")))
            .collect()
    }

    pub fn revoke_tokens(&self) {
        assert_eq!(self.raw("POST", "/_fake/revoke-tokens", &[], "").0, 200);
    }
}
