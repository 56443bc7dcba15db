//! The HTTP API (SPEC 10, 12) against a test-double agent loop (`support`): shapes of the reads,
//! filters, health, metrics, and every way a mutating call can be refused — each time checking
//! that the double's log did not grow.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, header};
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use support::{Mode, Server, TOKEN, start};
use tenure::api::API_BODY_BYTES_MAX;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Long enough for an answering double on a loaded machine; short enough that a silent loop
/// fails the request quickly.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
const SILENT_TIMEOUT: Duration = Duration::from_millis(300);

/// A planned action of the `gated` pool (approval: manual), as the planner keys it.
const GATED_KEY: &str = "gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1";

#[derive(Debug)]
struct Reply {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("JSON body ({e}): {:?}", self.body))
    }
}

async fn call(server: &Server, method: Method, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut request = Request::builder().method(method).uri(format!("{}{path}", server.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Full::new(Bytes::copy_from_slice(body))).expect("a valid request");
    let response = client.request(request).await.expect("the server answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.expect("a whole body").to_bytes();
    Reply { status, headers, body: String::from_utf8(body.to_vec()).expect("UTF-8 body") }
}

async fn get(server: &Server, path: &str) -> Reply {
    call(server, Method::GET, path, &[], b"").await
}

const BEARER: (&str, &str) = ("authorization", "Bearer test-token-0123456789");
const JSON: (&str, &str) = ("content-type", "application/json");

async fn post(server: &Server, path: &str, body: &str) -> Reply {
    let headers: &[(&str, &str)] = if body.is_empty() { &[BEARER] } else { &[BEARER, JSON] };
    call(server, Method::POST, path, headers, body.as_bytes()).await
}

/// An HTTP/1.1 exchange written by hand (for a chunked body), up to the end of the answer's head.
async fn raw(server: &Server, request: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(server.address).await.expect("connects");
    // The server may answer and close before the whole body is written; that is its right.
    let _ = stream.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

fn good_body() -> String {
    json!({"pool": "edge", "address": "10.0.0.11"}).to_string()
}

/// Every mutating route, with a request that is good but for what each test breaks.
fn mutating_routes() -> Vec<(String, String)> {
    vec![
        ("/v1/drain/b".to_owned(), String::new()),
        ("/v1/undrain/b".to_owned(), String::new()),
        (format!("/v1/approve/{GATED_KEY}"), String::new()),
        ("/v1/desire".to_owned(), good_body()),
        ("/v1/undesire".to_owned(), good_body()),
    ]
}

fn owner_of(ownership: &Value, pool: &str, address: &str) -> (Value, u64, bool) {
    let row = ownership["ownership"]
        .as_array()
        .expect("a list")
        .iter()
        .find(|r| r["pool"] == pool && r["address"] == address)
        .unwrap_or_else(|| panic!("{pool}/{address} is in the map"));
    (row["owner"].clone(), row["ownershipEpoch"].as_u64().expect("a number"), row["desired"] == true)
}

#[tokio::test]
async fn reads_have_the_replay_report_shapes() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let reply = get(&server, "/v1/ownership").await;
    assert_eq!(reply.status, 200);
    assert!(reply.headers[header::CONTENT_TYPE].to_str().expect("ASCII").starts_with("application/json"));
    let ownership = reply.json();
    let rows = ownership["ownership"].as_array().expect("`ownership` is a list");
    assert_eq!(rows.len(), 3, "two edge addresses and one gated");
    let keys: Vec<&str> =
        rows[0].as_object().expect("a row is an object").keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["address", "captureEpoch", "desired", "heldBy", "nics", "owner", "ownershipEpoch", "phase", "pool"]
    );
    assert_eq!(owner_of(&ownership, "edge", "10.0.0.10"), (json!("a"), 1, true));

    // Filters: pool, node (owner or holder), addresses (repeatable); anything else is a 400.
    let only = |path: &'static str| {
        let server = &server;
        async move {
            let reply = get(server, path).await;
            assert_eq!(reply.status, 200, "{path}");
            let rows = reply.json()["ownership"].as_array().expect("a list").clone();
            rows.iter()
                .map(|r| {
                    format!("{}/{}", r["pool"].as_str().unwrap_or(""), r["address"].as_str().unwrap_or(""))
                })
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(only("/v1/ownership?pool=gated").await, ["gated/10.0.0.20"]);
    assert_eq!(
        only("/v1/ownership?address=10.0.0.11&address=10.0.0.20").await,
        ["edge/10.0.0.11", "gated/10.0.0.20"]
    );
    assert_eq!(only("/v1/ownership?node=b").await, Vec::<String>::new(), "b owns and holds nothing");
    assert_eq!(only("/v1/ownership?node=a&pool=edge").await.len(), 2);
    for bad in ["/v1/ownership?address=10.0.0.300", "/v1/ownership?owner=a", "/v1/ownership?pool=a&pool=b"] {
        assert_eq!(get(&server, bad).await.status, 400, "{bad}");
    }

    let actions = get(&server, "/v1/actions").await;
    assert_eq!(actions.status, 200);
    let actions = actions.json();
    let rows = actions["actions"].as_array().expect("`actions` is a list");
    assert!(!rows.is_empty(), "the double's nodes planned their acquires");
    for field in [
        "node",
        "idempotencyKey",
        "verb",
        "pool",
        "address",
        "holder",
        "ownershipEpoch",
        "captureEpoch",
        "state",
    ] {
        assert!(rows[0].get(field).is_some(), "an action row has `{field}`: {}", rows[0]);
    }
    assert!(rows.iter().any(|r| r["idempotencyKey"] == GATED_KEY && r["state"] == "pending"));
}

#[tokio::test]
async fn action_filters_select_and_bad_ones_are_400_naming_them() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let all = get(&server, "/v1/actions").await.json()["actions"].as_array().expect("a list").len();
    let pending = get(&server, "/v1/actions?state=pending&pool=gated&node=a").await;
    assert_eq!(pending.status, 200);
    let pending = pending.json()["actions"].as_array().expect("a list").clone();
    assert!(!pending.is_empty() && pending.len() < all, "the filter selects some, not all");
    assert!(pending.iter().all(|r| r["state"] == "pending" && r["pool"] == "gated" && r["node"] == "a"));
    let none = get(&server, "/v1/actions?node=b").await.json();
    assert_eq!(none["actions"], json!([]), "b holds nothing, so it planned nothing");
    // An empty value filters nothing (docs/decisions.md: a form's empty field, a script's empty
    // variable); an address filter may be a range.
    let empty = get(&server, "/v1/actions?node=&pool=&state=&address=").await;
    assert_eq!(
        (empty.status, empty.json()["actions"].as_array().map(Vec::len)),
        (200, Some(all)),
        "{}",
        empty.body
    );
    let gated = get(&server, "/v1/actions?address=10.0.0.16/28").await.json();
    let gated = gated["actions"].as_array().expect("a list").clone();
    assert!(!gated.is_empty() && gated.iter().all(|r| r["address"] == "10.0.0.20"), "{gated:?}");

    for (query, field) in [
        ("state=bogus", "state"),
        ("colour=red", "colour"),
        ("node=a&node=b", "node"),
        ("pool=a%20b", "pool"),
        ("address=10.0.0.300", "address"),
    ] {
        let reply = get(&server, &format!("/v1/actions?{query}")).await;
        assert_eq!(reply.status, 400, "{query}");
        assert_eq!(reply.json()["field"], field, "{query}: {}", reply.body);
        assert!(reply.json()["error"].as_str().expect("a message").contains(field), "{}", reply.body);
    }
}

#[tokio::test]
async fn health_is_200_when_ok_and_503_with_its_reason_when_not() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let reply = get(&server, "/v1/health").await;
    assert_eq!(reply.status, 200);
    let health = reply.json();
    assert_eq!(health["ok"], true);
    assert_eq!(health["nodes"], json!(["a", "b"]));
    assert_eq!(health["logIndex"], server.state.log_len());
    assert!(health.get("reason").is_none(), "no reason when ok");

    server.state.set_healthy(false);
    let reply = get(&server, "/v1/health").await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.json()["ok"], false);
    assert_eq!(reply.json()["reason"], "cannot read the log head (test double)");
}

#[tokio::test]
async fn a_loop_that_does_not_answer_is_503_within_the_timeout() {
    for mode in [Mode::Silent, Mode::Stopped] {
        let server = start(mode, Some(TOKEN), SILENT_TIMEOUT).await;
        let reply = get(&server, "/v1/health").await;
        assert_eq!(reply.status, 503, "{mode:?}");
        assert_eq!(reply.json()["ok"], false);
        let reason = reply.json()["reason"].as_str().expect("a reason").to_owned();
        assert!(reason.starts_with("agent loop not answering: "), "{mode:?}: {reason}");
        for path in ["/v1/ownership", "/v1/actions"] {
            let reply = get(&server, path).await;
            assert_eq!(reply.status, 503, "{mode:?} {path}");
            assert!(
                reply.json()["error"].as_str().expect("a message").starts_with("agent loop not answering")
            );
        }
        let reply = post(&server, "/v1/drain/a", "").await;
        assert_eq!(reply.status, 503, "{mode:?}: {}", reply.body);
        let scrape = get(&server, "/metrics").await;
        assert_eq!(scrape.status, 200, "metrics still scrape");
        assert!(scrape.body.contains("\ntenure_healthy 0\n"), "{}", scrape.body);
    }
}

/// A loop busy in long steps (here: one that never reads its requests, and posts its health
/// between them) answers health from the health it posted, and `/metrics`' `tenure_healthy`
/// says the same, not 0 because the loop did not hand over its snapshot: an alert on the gauge
/// and a probe of the route agree. A loop that posts nothing for the handle's timeout (hung)
/// is unhealthy on both.
#[tokio::test]
async fn a_busy_loop_scrapes_as_healthy_as_its_health_says() {
    let server = start(Mode::Silent, Some(TOKEN), SILENT_TIMEOUT).await;
    let scrape_says = async |server: &Server| {
        let scrape = get(server, "/metrics").await;
        assert_eq!(scrape.status, 200);
        assert!(!scrape.body.contains("tenure_ownership_epoch{"), "no snapshot: {}", scrape.body);
        let line = scrape.body.lines().find(|l| l.starts_with("tenure_healthy ")).map(str::to_owned);
        line.unwrap_or_else(|| panic!("tenure_healthy in {}", scrape.body))
    };
    for ok in [true, false] {
        // Posting between its steps, as a busy loop does.
        let state = server.state.clone();
        let posting = tokio::spawn(async move {
            loop {
                state.set_healthy(ok);
                tokio::time::sleep(SILENT_TIMEOUT / 10).await;
            }
        });
        let reply = get(&server, "/v1/health").await;
        assert_eq!(reply.status, if ok { 200 } else { 503 });
        assert_eq!(scrape_says(&server).await, format!("tenure_healthy {}", u8::from(ok)));
        posting.abort();
    }
    // Hung: its last post (ok) grows older than the timeout while the scrape waits.
    server.state.set_healthy(true);
    assert_eq!(scrape_says(&server).await, "tenure_healthy 0");
}

#[tokio::test]
async fn mutating_calls_need_the_right_bearer_token() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let before = server.state.log_len();
    for (path, body) in mutating_routes() {
        let with = |auth: &'static str| {
            let mut headers = vec![JSON];
            if !auth.is_empty() {
                headers.push(("authorization", auth));
            }
            headers
        };
        for (auth, status) in [
            ("", 401),
            ("Basic dGVzdDp0ZXN0", 401),
            ("Bearer", 401),
            ("Bearer test-token-012345678", 403),
            ("Bearer test-token-01234567890", 403),
            ("Bearer TEST-TOKEN-0123456789", 403),
        ] {
            let reply = call(&server, Method::POST, &path, &with(auth), body.as_bytes()).await;
            assert_eq!(reply.status, status, "{path} with {auth:?}: {}", reply.body);
            assert!(reply.json()["error"].is_string(), "{}", reply.body);
            if status == 401 {
                assert_eq!(reply.headers[header::WWW_AUTHENTICATE], "Bearer");
            }
            assert_eq!(server.state.log_len(), before, "{path} with {auth:?} appended nothing");
        }
    }

    let closed = start(Mode::Answering, None, ANSWER_TIMEOUT).await;
    let before = closed.state.log_len();
    for (path, body) in mutating_routes() {
        let reply = post(&closed, &path, &body).await;
        assert_eq!(reply.status, 403, "{path} on an agent without a token");
        assert!(
            reply.json()["error"].as_str().expect("a message").contains("apiTokenFile"),
            "{}",
            reply.body
        );
    }
    assert_eq!(closed.state.log_len(), before);
}

#[tokio::test]
async fn bad_inputs_are_400_naming_the_field_and_change_nothing() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let before = server.state.log_len();
    let cases: Vec<(String, String, Option<&str>)> = vec![
        // desire / undesire bodies
        ("/v1/desire".into(), r#"{"pool": "a b", "address": "10.0.0.11"}"#.into(), Some("pool")),
        ("/v1/desire".into(), r#"{"pool": 7, "address": "10.0.0.11"}"#.into(), Some("pool")),
        ("/v1/desire".into(), r#"{"address": "10.0.0.11"}"#.into(), Some("pool")),
        ("/v1/desire".into(), r#"{"pool": "edge", "address": "10.0.0.16/29"}"#.into(), Some("address")),
        ("/v1/desire".into(), r#"{"pool": "edge", "address": "10.0.0.300"}"#.into(), Some("address")),
        ("/v1/desire".into(), r#"{"pool": "edge", "address": " 10.0.0.11"}"#.into(), Some("address")),
        ("/v1/desire".into(), r#"{"pool": "edge", "address": ["10.0.0.11"]}"#.into(), Some("address")),
        ("/v1/desire".into(), r#"{"pool": "edge"}"#.into(), Some("address")),
        (
            "/v1/desire".into(),
            r#"{"pool": "edge", "address": "10.0.0.11", "force": true}"#.into(),
            Some("force"),
        ),
        (
            "/v1/desire".into(),
            r#"{"pool": "edge", "pool": "gated", "address": "10.0.0.11"}"#.into(),
            Some("pool"),
        ),
        ("/v1/desire".into(), r#"{"pool": "edge", "address": "10.0.0.11""#.into(), None),
        ("/v1/desire".into(), r#"["edge", "10.0.0.11"]"#.into(), None),
        ("/v1/desire".into(), String::new(), Some("pool")),
        ("/v1/undesire".into(), r#"{"pool": "edge", "address": "fe80::/64"}"#.into(), Some("address")),
        ("/v1/undesire".into(), r#"{"pool": "edge/x", "address": "10.0.0.11"}"#.into(), Some("pool")),
        ("/v1/undesire".into(), r#"{"pool": "edge", "adress": "10.0.0.11"}"#.into(), Some("adress")),
        ("/v1/undesire".into(), "not json".into(), None),
        // drain / undrain: the node in the path, no body fields
        ("/v1/drain/a%20b".into(), String::new(), Some("node")),
        ("/v1/drain/a".into(), r#"{"node": "a"}"#.into(), Some("node")),
        ("/v1/drain/a".into(), "{".into(), None),
        ("/v1/undrain/a%0Ab".into(), String::new(), Some("node")),
        ("/v1/undrain/a".into(), r#"{"force": true}"#.into(), Some("force")),
        // approve: the key in the path
        ("/v1/approve/not-a-key".into(), String::new(), Some("key")),
        (
            "/v1/approve/gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-a/owner:01:epoch:1".into(),
            String::new(),
            Some("key"),
        ),
        (
            "/v1/approve/gated/10.0.0.20/no-such-verb/a/sim1/eni-a/owner:1:epoch:1".into(),
            String::new(),
            Some("key"),
        ),
        (format!("/v1/approve/{GATED_KEY}"), r#"{"key": "x"}"#.into(), Some("key")),
        // a query string: refused, not ignored
        (format!("/v1/approve/{GATED_KEY}?force=true"), String::new(), Some("force")),
        ("/v1/drain/a?dry-run".into(), String::new(), Some("dry-run")),
        ("/v1/undrain/a?for%63e=1".into(), String::new(), Some("force")),
        ("/v1/undrain/a?=1".into(), String::new(), Some("query")),
        ("/v1/desire?pool=edge".into(), r#"{"pool": "edge", "address": "10.0.0.11"}"#.into(), Some("pool")),
    ];
    for (path, body, field) in cases {
        let reply = post(&server, &path, &body).await;
        assert_eq!(reply.status, 400, "{path} {body}: {}", reply.body);
        let answer = reply.json();
        assert_eq!(answer["field"].as_str(), field, "{path} {body}: {}", reply.body);
        let message = answer["error"].as_str().expect("a message");
        assert!(!message.contains('\n'), "one line: {message:?}");
        if let Some(field) = field {
            assert!(message.contains(field), "{message} names {field}");
        }
        assert_eq!(server.state.log_len(), before, "{path} {body} appended nothing");
    }
}

#[tokio::test]
async fn oversized_bodies_are_413_and_change_nothing() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let before = server.state.log_len();
    let padding = " ".repeat(API_BODY_BYTES_MAX);
    for (path, _) in mutating_routes() {
        let body = format!(r#"{{"pool": "edge", "address": "10.0.0.11"{padding}}}"#);
        let reply = call(&server, Method::POST, &path, &[BEARER, JSON], body.as_bytes()).await;
        assert_eq!(reply.status, 413, "{path}: {}", reply.body);
        assert!(reply.json()["error"].as_str().expect("a message").contains(&API_BODY_BYTES_MAX.to_string()));

        // Without a declared length the limit holds while reading.
        let chunk = "x".repeat(API_BODY_BYTES_MAX + 1);
        let request = format!(
            "POST {path} HTTP/1.1\r\nhost: test\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\n\
             transfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
            chunk.len()
        );
        let answer = raw(&server, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{path} chunked: {answer:?}");
        assert_eq!(server.state.log_len(), before, "{path} appended nothing");
    }
    // Just under the limit is read (and then judged on its content).
    let body =
        format!(r#"{{"pool": "edge", "address": "10.0.0.11"}}{}"#, " ".repeat(API_BODY_BYTES_MAX - 64));
    assert_eq!(
        call(&server, Method::POST, "/v1/undesire", &[BEARER, JSON], body.as_bytes()).await.status,
        200
    );
}

#[tokio::test]
async fn wrong_content_types_are_415_and_change_nothing() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let before = server.state.log_len();
    for (path, _) in mutating_routes() {
        let body = good_body();
        for content_type in ["text/plain", "application/x-www-form-urlencoded", "application/jsonx"] {
            let reply = call(
                &server,
                Method::POST,
                &path,
                &[BEARER, ("content-type", content_type)],
                body.as_bytes(),
            )
            .await;
            assert_eq!(reply.status, 415, "{path} as {content_type}: {}", reply.body);
            assert!(reply.json()["error"].as_str().expect("a message").contains("application/json"));
        }
        let reply = call(&server, Method::POST, &path, &[BEARER], body.as_bytes()).await;
        assert_eq!(reply.status, 415, "{path} without a content type: {}", reply.body);
        assert_eq!(server.state.log_len(), before, "{path} appended nothing");
    }
}

#[tokio::test]
async fn unknown_names_are_404_and_change_nothing() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let before = server.state.log_len();
    let reply = post(&server, "/v1/drain/zzz", "").await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["error"], "node \"zzz\" not found");
    let reply = post(&server, "/v1/desire", r#"{"pool": "edge", "address": "10.9.9.9"}"#).await;
    assert_eq!(reply.status, 404);
    assert_eq!(server.state.log_len(), before);
}

#[tokio::test]
async fn a_good_drain_moves_ownership_and_returns_its_index() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let (owner, epoch, _) = owner_of(&get(&server, "/v1/ownership").await.json(), "edge", "10.0.0.10");
    assert_eq!(owner, "a");
    let before = server.state.log_len();

    let reply = post(&server, "/v1/drain/a", "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // b takes everything: no address is left without an eligible member (a field added to the
    // receipt of a drain; `index` is where it always was).
    assert_eq!(reply.json(), json!({"index": before + 1, "addressesWithNoEligibleMember": 0}));
    assert_eq!(server.state.log_len(), before + 1, "exactly one event appended");
    let (owner, after, _) = owner_of(&get(&server, "/v1/ownership").await.json(), "edge", "10.0.0.10");
    assert_eq!((owner, after), (json!("b"), epoch + 1), "drained: b owns it, the epoch moved once");

    // An empty JSON object is as good as no body.
    let reply = call(&server, Method::POST, "/v1/undrain/a", &[BEARER, JSON], b"{}").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json(), json!({"index": before + 2}));
}

#[tokio::test]
async fn a_drain_that_leaves_addresses_with_no_eligible_member_says_how_many() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    assert_eq!(post(&server, "/v1/drain/a", "").await.json()["addressesWithNoEligibleMember"], 0);
    // b was the last eligible member of every pool: its three addresses have none now.
    let reply = post(&server, "/v1/drain/b", "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["addressesWithNoEligibleMember"], 3);
}

#[tokio::test]
async fn an_approve_of_a_key_not_pending_is_409_and_of_an_unknown_pool_404() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let before = server.state.log_len();
    let reply = post(
        &server,
        "/v1/approve/nosuchpool/10.9.9.9/assign-secondary-ip/zz/sim9/eni-q/owner:1:epoch:1",
        "",
    )
    .await;
    assert_eq!(reply.status, 404, "{}", reply.body);
    assert_eq!(reply.json()["error"], "pool \"nosuchpool\" is not applied");
    let reply =
        post(&server, "/v1/approve/edge/10.0.0.10/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:1", "")
            .await;
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert_eq!(
        reply.json()["error"],
        "not pending approval: pool \"edge\" approves automatically (approval: auto)"
    );
    let reply =
        post(&server, "/v1/approve/gated/10.0.0.20/assign-secondary-ip/a/sim1/eni-a/owner:1:epoch:2", "")
            .await;
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert!(reply.json()["error"].as_str().expect("a message").contains("above what the log has issued"));
    assert_eq!(server.state.log_len(), before, "nothing appended");
}

#[tokio::test]
async fn desire_undesire_and_approve_change_what_they_name() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let reply = post(&server, "/v1/undesire", &good_body()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let (_, _, desired) = owner_of(&get(&server, "/v1/ownership").await.json(), "edge", "10.0.0.11");
    assert!(!desired, "undesired");
    let reply = post(&server, "/v1/desire", &good_body()).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let (_, _, desired) = owner_of(&get(&server, "/v1/ownership").await.json(), "edge", "10.0.0.11");
    assert!(desired, "desired again");

    // The key's `/`s may travel as they are or percent-encoded.
    let encoded = GATED_KEY.replace('/', "%2F");
    let reply = post(&server, &format!("/v1/approve/{encoded}"), "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let actions = get(&server, "/v1/actions?pool=gated&node=a").await.json();
    let entry = actions["actions"]
        .as_array()
        .expect("a list")
        .iter()
        .find(|r| r["idempotencyKey"] == GATED_KEY)
        .cloned()
        .expect("the gated entry");
    assert_eq!(entry["state"], "approved", "the approval reached the journal at the next reconcile");
}

#[tokio::test]
async fn metrics_are_openmetrics_text_with_the_families() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    // One rejection to count.
    assert_eq!(call(&server, Method::POST, "/v1/drain/a", &[], b"").await.status, 401);
    let reply = get(&server, "/metrics").await;
    assert_eq!(reply.status, 200);
    let content_type = reply.headers[header::CONTENT_TYPE].to_str().expect("ASCII");
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    for family in [
        "tenure_ownership_epoch",
        "tenure_capture_epoch",
        "tenure_address_owner",
        "tenure_address_desired",
        "tenure_actions",
        "tenure_actions_fenced",
        "tenure_events_rejected",
        "tenure_log_index",
        "tenure_log_lag",
        "tenure_addresses",
        "tenure_address_series_omitted",
        "tenure_healthy",
        "tenure_reconcile_duration_seconds",
        "tenure_requests_rejected",
    ] {
        assert!(reply.body.contains(&format!("# TYPE {family} ")), "{family} declared");
    }
    assert!(reply.body.contains(r#"tenure_address_owner{pool="edge",address="10.0.0.10",owner="a"} 1"#));
    assert!(reply.body.contains(&format!("\ntenure_log_index {}\n", server.state.log_len())));
    assert!(
        reply.body.contains(r#"tenure_requests_rejected_total{reason="unauthenticated"} 1"#),
        "{}",
        reply.body
    );
    assert!(reply.body.ends_with("# EOF\n"));
}

/// `?addresses=` chooses the per-address series; the counts by pool and phase are always
/// written; anything else in the query is a 400 naming it.
#[tokio::test]
async fn a_scrape_writes_the_per_address_series_as_asked() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let samples = |body: &str, family: &str| {
        body.lines().filter(|line| line.starts_with(&format!("{family}{{"))).count()
    };
    let all = get(&server, "/metrics?addresses=all").await;
    assert_eq!(all.status, 200);
    let addresses = samples(&all.body, "tenure_ownership_epoch");
    assert!(addresses > 0, "{}", all.body);
    assert!(all.body.contains("\ntenure_address_series_omitted 0\n"), "{}", all.body);
    let counted: usize = all
        .body
        .lines()
        .filter(|line| line.starts_with("tenure_addresses{"))
        .map(|line| line.rsplit(' ').next().and_then(|n| n.parse::<usize>().ok()).expect("a count"))
        .sum();
    assert_eq!(counted, addresses, "every address counted once by pool and phase");
    assert!(all.body.contains(r#"tenure_addresses{pool="edge",phase="#), "{}", all.body);
    // The default writes them for a map this small.
    assert_eq!(samples(&get(&server, "/metrics").await.body, "tenure_address_owner"), addresses);
    let none = get(&server, "/metrics?addresses=none").await;
    assert_eq!(none.status, 200);
    assert!(!none.body.contains("tenure_ownership_epoch"), "{}", none.body);
    assert!(!none.body.contains("tenure_address_owner"), "{}", none.body);
    assert!(none.body.contains(&format!("\ntenure_address_series_omitted {addresses}\n")), "{}", none.body);
    assert_eq!(samples(&none.body, "tenure_addresses"), samples(&all.body, "tenure_addresses"));
    for (query, field) in [
        ("addresses=ALL", "addresses"),
        ("addresses=", "addresses"),
        ("addresses=all&addresses=none", "addresses"),
        ("limit=5", "limit"),
    ] {
        let reply = get(&server, &format!("/metrics?{query}")).await;
        assert_eq!(reply.status, 400, "{query}: {}", reply.body);
        assert_eq!(reply.json()["field"], field, "{query}");
    }
}

#[tokio::test]
async fn unknown_routes_and_methods_get_json_errors() {
    let server = start(Mode::Answering, Some(TOKEN), ANSWER_TIMEOUT).await;
    let reply = get(&server, "/v1/nothing").await;
    assert_eq!(reply.status, 404);
    assert!(reply.json()["error"].as_str().expect("a message").contains("/v1/nothing"));
    let reply = get(&server, "/v1/drain/a").await;
    assert_eq!(reply.status, 405);
    assert!(reply.json()["error"].is_string());
    let reply = post(&server, "/v1/ownership", "").await;
    assert_eq!(reply.status, 405);
}
