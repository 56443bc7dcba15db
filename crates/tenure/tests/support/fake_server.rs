//! The one starter of the tests' fake servers (the ARM fake, the OCI fake, the metadata fake and
//! moto's EC2 server: test doubles of clouds that cannot run here): spawns the script, waits —
//! bounded — for the line announcing its port, kills it on drop, and keeps the last lines of its
//! output for failure messages (printed when a test fails while it runs). A fake that cannot be
//! started, or that exits or stays silent before announcing its port, panics with its command,
//! exit status and output: the tests fail, never skip.
//!
//! Each `support/*_fake.rs` and `support/moto.rs` includes this file as its own submodule.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Lines of a fake's output kept for failure messages.
const KEPT_LINES: usize = 200;

/// A path in the repository.
pub fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(relative)
}

/// `python3 SCRIPT` (a repository path), to add arguments and environment to.
pub fn python(script: &str) -> Command {
    let mut command = Command::new("python3");
    command.arg(repo_path(script));
    command
}

/// The last [`KEPT_LINES`] lines of a fake's stdout and stderr.
#[derive(Clone, Default)]
struct Output(Arc<Mutex<VecDeque<String>>>);

impl Output {
    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if lines.len() == KEPT_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    fn text(&self) -> String {
        let lines = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lines.iter().map(|l| format!("  | {l}\n")).collect()
    }

    /// Keeps every line of `stream` (read to its end on a thread of its own, so the fake never
    /// blocks on a full pipe), handing each to `each` too.
    fn keep(&self, stream: impl Read + Send + 'static, mut each: impl FnMut(&str) + Send + 'static) {
        let output = self.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                each(&line);
                output.push(line);
            }
        });
    }
}

/// A fake server on a loopback port, killed on drop.
pub struct FakeServer {
    what: String,
    child: Child,
    port: u16,
    output: Output,
}

impl FakeServer {
    /// Spawns `command` (`what` names it in messages) and waits at most `bound` for a line of its
    /// stdout starting with `announce` and followed by the port it listens on.
    pub fn start(what: &str, mut command: Command, announce: &str, bound: Duration) -> Self {
        let shown = format!("{command:?}");
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what} ({shown}): {e} (scripts/install-deps)"));
        let output = Output::default();
        output.keep(child.stderr.take().expect("piped"), |_| {});
        let (send, ready) = channel();
        let announce = announce.to_owned();
        output.keep(child.stdout.take().expect("piped"), move |line| {
            if let Some(rest) = line.strip_prefix(&announce) {
                let _ = send.send(rest.trim().parse::<u16>().map_err(|e| format!("{line:?}: {e}")));
            }
        });
        let failure = match ready.recv_timeout(bound) {
            Ok(Ok(port)) => return Self { what: what.to_owned(), child, port, output },
            Ok(Err(line)) => format!("announced no port: {line}"),
            Err(RecvTimeoutError::Timeout) => format!("did not announce its port within {bound:?}"),
            Err(RecvTimeoutError::Disconnected) => "closed its stdout without announcing its port".to_owned(),
        };
        let _ = child.kill();
        let status = child.wait().map_or_else(|e| format!("exit status unknown ({e})"), |s| s.to_string());
        // The readers end with the process; a moment (bounded) for its last lines.
        let grace = Instant::now() + Duration::from_secs(2);
        while Instant::now() < grace && Arc::strong_count(&output.0) > 1 {
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{what} ({shown}) {failure}; {status}; its output:\n{}", output.text());
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The last lines of the fake's stdout and stderr, indented, for a failure message.
    pub fn output(&self) -> String {
        self.output.text()
    }

    /// One plain HTTP/1.0 request with `headers` (a Content-Length is added); the status and
    /// the body of the answer.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("{} does not answer: {e}; its output:\n{}", self.what, self.output()));
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
        let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok());
        let status = status.unwrap_or_else(|| panic!("{method} {path}: no status line in {answer:?}"));
        (status, answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default())
    }

    /// [`FakeServer::request`] of the fake's own API, with a JSON `body`: the body of its answer,
    /// which must be a 200.
    pub fn admin(&self, method: &str, path: &str, body: &str) -> String {
        let (status, answer) = self.request(method, path, &[("Content-Type", "application/json")], body);
        assert_eq!(status, 200, "{method} {path} to {}: {answer}", self.what);
        answer
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- the last output of {} ---\n{}", self.what, self.output());
        }
    }
}
