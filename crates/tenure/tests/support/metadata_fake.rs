//! The FAKE instance metadata service (`scripts/metadata-fake/metadata_fake.py`: AWS IMDSv2,
//! Azure Scheduled Events, OCI IMDS v2, written from the published references; not a cloud) for
//! the maintenance notice tests: started on a free loopback port, killed on drop; its admin API
//! posts notices and reads counters. A start that fails panics: the tests fail, never skip.

use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

use serde_json::Value;

/// The fake's start-up bound (python3 starts in well under a second; more while cargo builds).
const START_MAX: Duration = Duration::from_secs(30);

/// The fake on a loopback port, killed on drop.
pub struct MetadataFake {
    child: Child,
    port: u16,
}

impl MetadataFake {
    pub fn start() -> Self {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/metadata-fake/metadata_fake.py");
        let mut child = Command::new("python3")
            .arg(&script)
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs scripts/metadata-fake/metadata_fake.py");
        let stdout = child.stdout.take().expect("piped");
        let (send, ready) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line.strip_prefix("metadata-fake listening on ") {
                    let _ = send.send(port.trim().parse::<u16>().expect("a port"));
                }
            }
        });
        let Ok(port) = ready.recv_timeout(START_MAX) else {
            let _ = child.kill();
            panic!("the metadata fake did not start within {START_MAX:?} (see its stderr above)");
        };
        Self { child, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// One plain HTTP request; the status and the body of the answer.
    pub fn raw(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("the fake answers");
        let mut request =
            format!("{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n", body.len());
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).expect("request");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("answer");
        let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
        (status, answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
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

impl Drop for MetadataFake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
