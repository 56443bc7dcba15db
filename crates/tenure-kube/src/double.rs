//! [`LeaseApiDouble`]: a **test double** of the Kubernetes API server, limited to the Lease
//! endpoints that kube's `Api<Lease>` calls. No API server can run on the machines this project is
//! tested on, so the backend is tested against this double over real HTTP on 127.0.0.1, with the
//! very same client code it uses against a cluster.
//!
//! It is a double, not a fake cluster: one process, memory only, no authentication, no watch, no
//! list, no patch, no admission, no garbage collection. What it reproduces is what leader election
//! depends on, as the API server does it for `coordination.k8s.io/v1` Leases:
//!
//! | request | answer |
//! |---|---|
//! | `GET …/namespaces/{ns}/leases/{name}` | `200` and the Lease, or `404 NotFound` |
//! | `POST …/namespaces/{ns}/leases` | `201` and the stored Lease (new `uid`, `creationTimestamp`, `resourceVersion`); `409 AlreadyExists` if present; `500` if the body sets `resourceVersion` ("should not be set on objects to be created") |
//! | `POST`/`PUT` naming a Lease that is not a DNS-1123 subdomain, or a namespace that is not a DNS-1123 label | `422 Invalid` ("metadata.name: Invalid value", "metadata.namespace: Invalid value") |
//! | `PUT …/namespaces/{ns}/leases/{name}` | `200` and the stored Lease when `metadata.resourceVersion` equals the stored one; `409 Conflict` ("the object has been modified") when it differs; `422 Invalid` when it is empty (Leases forbid unconditional updates); `409 Conflict` ("Precondition failed: UID …") when the body's `uid` is not the stored object's; `201` (create on update, allowed for Leases) when absent and the body has no `uid` |
//! | `DELETE …/namespaces/{ns}/leases/{name}` | `200` and a `Success` `Status`, or `404 NotFound` |
//!
//! Every error is a JSON `Status` (`kind: Status`, `status: Failure`, `reason`, `code`, `details`),
//! which is what kube parses into `kube::Error::Api`. One `resourceVersion` counter is shared by
//! all Leases (like etcd's revision) and moves on every write, deletion included. The server keeps
//! `uid` and `creationTimestamp` on update, whatever the body says, as the API server does.
//!
//! Hooks exist for tests only: [`LeaseApiDouble::rendezvous_next_gets`] makes contenders read the
//! same version so that their writes really race; [`LeaseApiDouble::cut_next_write_answers`] and
//! [`LeaseApiDouble::delay_write_answers`] lose the answer to a write that was applied (a cut
//! connection, an answer slower than the caller's patience); [`LeaseApiDouble::stats`] counts the
//! rejections and lost answers served.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use crate::names;
use tokio::net::TcpListener;
use tokio::sync::Barrier;
use tokio::task::{JoinHandle, JoinSet};

/// The largest request body the double reads (the API server's own limit is 3 MiB).
pub const REQUEST_BODY_BYTES_MAX: usize = 1024 * 1024;

/// How long the accept loop pauses after a failed accept (e.g. out of file descriptors).
const ACCEPT_RETRY_PAUSE: Duration = Duration::from_millis(10);

/// The API group and version the double serves.
const GROUP: &str = "coordination.k8s.io";
const PREFIX: &str = "/apis/coordination.k8s.io/v1/namespaces/";
/// The API server's text for a stale `resourceVersion`.
const OPTIMISTIC_LOCK_MESSAGE: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// Why the double could not start.
#[derive(Debug, thiserror::Error)]
pub enum DoubleError {
    /// Binding 127.0.0.1 on an ephemeral port failed.
    #[error("Lease API double: cannot listen on 127.0.0.1: {0}")]
    Bind(#[source] std::io::Error),
}

/// What the double has served so far (for assertions in tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoubleStats {
    /// `409 Conflict` answers (stale `resourceVersion` or `uid` precondition) to `PUT`.
    pub conflicts: u64,
    /// `409 AlreadyExists` answers to `POST`.
    pub already_exists: u64,
    /// Accepted writes (create, update, delete).
    pub writes: u64,
    /// Answers to `POST` and `PUT` lost on purpose ([`LeaseApiDouble::cut_next_write_answers`],
    /// [`LeaseApiDouble::delay_write_answers`]).
    pub answers_lost: u64,
}

/// A test double of the Kubernetes API server's Lease endpoints, listening on 127.0.0.1.
///
/// Dropping it stops the server and closes its connections.
#[derive(Debug)]
pub struct LeaseApiDouble {
    address: SocketAddr,
    state: Arc<DoubleState>,
    server: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct DoubleState {
    store: Mutex<Store>,
    rendezvous: Mutex<Option<Rendezvous>>,
    faults: Mutex<AnswerFaults>,
}

/// How answers to writes are lost (test hooks). The write itself is always applied first.
#[derive(Debug, Default)]
struct AnswerFaults {
    /// How many of the next `POST`/`PUT` answers are cut (the connection closed unanswered).
    cut_next: usize,
    /// How long every other `POST`/`PUT` answer is held back after the write is applied.
    delay: Duration,
}

/// What is done with one write's answer.
enum AnswerFate {
    Sent,
    Cut,
    Delayed(Duration),
}

/// The service's error: hyper closes the connection without an answer.
#[derive(Debug, thiserror::Error)]
#[error("Lease API double: the answer to this write was cut on purpose (a test fault)")]
struct AnswerCut;

#[derive(Debug, Default)]
struct Store {
    /// Leases by (namespace, name).
    leases: BTreeMap<(String, String), Lease>,
    /// The last `resourceVersion` issued; 0 before the first write.
    resource_version: u64,
    /// The last `uid` serial issued.
    uid_serial: u64,
    stats: DoubleStats,
}

#[derive(Debug)]
struct Rendezvous {
    barrier: Arc<Barrier>,
    remaining: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // No code path panics while holding these locks; recover the data if one ever did.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LeaseApiDouble {
    /// Starts the double on an ephemeral port of 127.0.0.1. Call it inside a Tokio runtime.
    pub async fn start() -> Result<Self, DoubleError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.map_err(DoubleError::Bind)?;
        let address = listener.local_addr().map_err(DoubleError::Bind)?;
        let state = Arc::new(DoubleState::default());
        let server = tokio::spawn(serve(listener, state.clone()));
        Ok(Self { address, state, server })
    }

    /// The base URL to give a kube client, e.g. `http://127.0.0.1:41234`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The stored Lease `namespace/name`, if any (a snapshot, as `GET` would return it).
    #[must_use]
    pub fn lease(&self, namespace: &str, name: &str) -> Option<Lease> {
        lock(&self.state.store).leases.get(&(namespace.to_owned(), name.to_owned())).cloned()
    }

    /// The last `resourceVersion` issued (0 before the first write).
    #[must_use]
    pub fn resource_version(&self) -> u64 {
        lock(&self.state.store).resource_version
    }

    /// Counts of what was served so far.
    #[must_use]
    pub fn stats(&self) -> DoubleStats {
        lock(&self.state.store).stats
    }

    /// Test hook (fault): the next `count` `POST`s and `PUT`s are applied (or refused) as usual,
    /// then their connection is closed without an answer, as when a network cuts a connection
    /// after the API server committed. The client sees a connection error, not the outcome.
    pub fn cut_next_write_answers(&self, count: usize) {
        lock(&self.state.faults).cut_next = count;
    }

    /// Test hook (fault): from now on, every `POST` and `PUT` is applied (or refused) at once, and
    /// its answer is sent only `delay` later — longer than a caller's patience, the caller gives
    /// up on a write that did commit. `Duration::ZERO` turns it off.
    pub fn delay_write_answers(&self, delay: Duration) {
        lock(&self.state.faults).delay = delay;
    }

    /// Test hook: the next `count` `GET`s each take their snapshot of the store on arrival but are
    /// answered only once all `count` have arrived, so `count` contenders read the same
    /// `resourceVersion` and their writes race for real. A `GET` waits until the others come.
    pub fn rendezvous_next_gets(&self, count: usize) {
        let rendezvous =
            (count > 0).then(|| Rendezvous { barrier: Arc::new(Barrier::new(count)), remaining: count });
        *lock(&self.state.rendezvous) = rendezvous;
    }
}

impl Drop for LeaseApiDouble {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every open connection.
        self.server.abort();
    }
}

async fn serve(listener: TcpListener, state: Arc<DoubleState>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _peer)) = accepted else {
                    tokio::time::sleep(ACCEPT_RETRY_PAUSE).await;
                    continue;
                };
                let state = state.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request| answer(state.clone(), request));
                    // A connection error only ends that connection.
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// A parsed request path: `namespace`, and `name` unless the path is the collection.
struct Target {
    namespace: String,
    name: Option<String>,
}

fn parse_path(path: &str) -> Option<Target> {
    let rest = path.strip_prefix(PREFIX)?;
    let mut parts = rest.split('/');
    let namespace = parts.next().filter(|n| !n.is_empty())?.to_owned();
    if parts.next()? != "leases" {
        return None;
    }
    let name = match parts.next() {
        None | Some("") => None,
        Some(name) => Some(name.to_owned()),
    };
    parts.next().is_none().then_some(Target { namespace, name })
}

/// [`respond`], then the write-answer faults: the request has been served in full before its
/// answer is cut or held back.
async fn answer(
    state: Arc<DoubleState>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, AnswerCut> {
    let is_write = matches!(*request.method(), Method::POST | Method::PUT);
    let Ok(response) = respond(state.clone(), request).await;
    if !is_write {
        return Ok(response);
    }
    let fate = {
        let mut faults = lock(&state.faults);
        if faults.cut_next > 0 {
            faults.cut_next -= 1;
            AnswerFate::Cut
        } else if faults.delay.is_zero() {
            AnswerFate::Sent
        } else {
            AnswerFate::Delayed(faults.delay)
        }
    };
    if !matches!(fate, AnswerFate::Sent) {
        lock(&state.store).stats.answers_lost += 1;
    }
    match fate {
        AnswerFate::Sent => Ok(response),
        AnswerFate::Cut => Err(AnswerCut),
        AnswerFate::Delayed(delay) => {
            tokio::time::sleep(delay).await;
            Ok(response)
        }
    }
}

async fn respond(
    state: Arc<DoubleState>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = request.method().clone();
    let Some(target) = parse_path(request.uri().path()) else {
        return Ok(failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource",
            None,
        ));
    };
    let body = match Limited::new(request.into_body(), REQUEST_BODY_BYTES_MAX).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            return Ok(failure(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("reading the body: {e}"),
                None,
            ));
        }
    };
    let response = match (method, target.name) {
        (Method::GET, Some(name)) => get(&state, &target.namespace, &name).await,
        (Method::POST, None) => with_lease(&body, |lease| create(&state, &target.namespace, lease)),
        (Method::PUT, Some(name)) => {
            with_lease(&body, |lease| replace(&state, &target.namespace, &name, lease))
        }
        (Method::DELETE, Some(name)) => delete(&state, &target.namespace, &name),
        (method, _) => failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!("the Lease API double does not serve {method} on this path"),
            None,
        ),
    };
    Ok(response)
}

fn with_lease(body: &[u8], then: impl FnOnce(Lease) -> Response<Full<Bytes>>) -> Response<Full<Bytes>> {
    match serde_json::from_slice::<Lease>(body) {
        Ok(lease) => then(lease),
        Err(e) => failure(StatusCode::BAD_REQUEST, "BadRequest", &format!("not a Lease: {e}"), None),
    }
}

async fn get(state: &DoubleState, namespace: &str, name: &str) -> Response<Full<Bytes>> {
    let snapshot = lock(&state.store).leases.get(&(namespace.to_owned(), name.to_owned())).cloned();
    let barrier = {
        let mut rendezvous = lock(&state.rendezvous);
        let barrier = rendezvous.as_mut().map(|r| {
            r.remaining -= 1;
            r.barrier.clone()
        });
        if rendezvous.as_ref().is_some_and(|r| r.remaining == 0) {
            *rendezvous = None;
        }
        barrier
    };
    if let Some(barrier) = barrier {
        barrier.wait().await;
    }
    match snapshot {
        Some(lease) => object(StatusCode::OK, &lease),
        None => not_found(name),
    }
}

fn create(state: &DoubleState, namespace: &str, mut lease: Lease) -> Response<Full<Bytes>> {
    let Some(name) = lease.metadata.name.clone().filter(|n| !n.is_empty()) else {
        return failure(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            "Lease.coordination.k8s.io \"\" is invalid: metadata.name: Required value: name or generateName is required",
            None,
        );
    };
    if let Some(refusal) = namespace_mismatch(&lease, namespace).or_else(|| invalid_names(namespace, &name)) {
        return refusal;
    }
    if lease.metadata.resource_version.as_deref().is_some_and(|rv| !rv.is_empty()) {
        return failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "Internal error occurred: resourceVersion should not be set on objects to be created",
            Some(&name),
        );
    }
    let mut store = lock(&state.store);
    let key = (namespace.to_owned(), name.clone());
    if store.leases.contains_key(&key) {
        store.stats.already_exists += 1;
        return failure(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("leases.{GROUP} \"{name}\" already exists"),
            Some(&name),
        );
    }
    store.stamp_new(&mut lease, namespace);
    store.leases.insert(key, lease.clone());
    object(StatusCode::CREATED, &lease)
}

fn replace(state: &DoubleState, namespace: &str, name: &str, mut lease: Lease) -> Response<Full<Bytes>> {
    if lease.metadata.name.as_deref() != Some(name) {
        let given = lease.metadata.name.as_deref().unwrap_or_default();
        return failure(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("the name of the object ({given}) does not match the name on the URL ({name})"),
            None,
        );
    }
    if let Some(refusal) = namespace_mismatch(&lease, namespace).or_else(|| invalid_names(namespace, name)) {
        return refusal;
    }
    let mut store = lock(&state.store);
    let key = (namespace.to_owned(), name.to_owned());
    let stored = store.leases.get(&key).cloned();
    let stored_uid = stored.as_ref().and_then(|s| s.metadata.uid.clone()).unwrap_or_default();
    // The API server turns the body's uid into a precondition on the stored object.
    if let Some(uid) = lease.metadata.uid.as_deref().filter(|uid| !uid.is_empty())
        && uid != stored_uid
    {
        store.stats.conflicts += 1;
        let message = format!(
            "Operation cannot be fulfilled on leases.{GROUP} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {stored_uid}"
        );
        return failure(StatusCode::CONFLICT, "Conflict", &message, Some(name));
    }
    let Some(stored) = stored else {
        // Leases allow create on update: the given resourceVersion is ignored then.
        lease.metadata.resource_version = None;
        store.stamp_new(&mut lease, namespace);
        store.leases.insert(key, lease.clone());
        return object(StatusCode::CREATED, &lease);
    };
    let given = lease.metadata.resource_version.clone().unwrap_or_default();
    if given.is_empty() {
        let message = format!(
            "Lease.{GROUP} \"{name}\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update"
        );
        return failure(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &message, Some(name));
    }
    if Some(given.as_str()) != stored.metadata.resource_version.as_deref() {
        store.stats.conflicts += 1;
        let message =
            format!("Operation cannot be fulfilled on leases.{GROUP} \"{name}\": {OPTIMISTIC_LOCK_MESSAGE}");
        return failure(StatusCode::CONFLICT, "Conflict", &message, Some(name));
    }
    // System fields stay the server's.
    lease.metadata.uid = stored.metadata.uid;
    lease.metadata.creation_timestamp = stored.metadata.creation_timestamp;
    lease.metadata.namespace = Some(namespace.to_owned());
    lease.metadata.resource_version = Some(store.next_resource_version().to_string());
    store.stats.writes += 1;
    store.leases.insert(key, lease.clone());
    object(StatusCode::OK, &lease)
}

fn delete(state: &DoubleState, namespace: &str, name: &str) -> Response<Full<Bytes>> {
    let mut store = lock(&state.store);
    let Some(removed) = store.leases.remove(&(namespace.to_owned(), name.to_owned())) else {
        return not_found(name);
    };
    store.next_resource_version();
    store.stats.writes += 1;
    let body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": GROUP, "kind": "leases", "uid": removed.metadata.uid},
    });
    json_response(StatusCode::OK, &body)
}

impl Store {
    fn next_resource_version(&mut self) -> u64 {
        self.resource_version += 1;
        self.resource_version
    }

    /// Fills the system fields of a Lease being created.
    fn stamp_new(&mut self, lease: &mut Lease, namespace: &str) {
        self.uid_serial += 1;
        lease.metadata.uid = Some(format!("00000000-0000-4000-8000-{:012x}", self.uid_serial));
        lease.metadata.namespace = Some(namespace.to_owned());
        lease.metadata.creation_timestamp = Some(Time(Timestamp::now()));
        lease.metadata.resource_version = Some(self.next_resource_version().to_string());
        self.stats.writes += 1;
    }
}

fn namespace_mismatch(lease: &Lease, namespace: &str) -> Option<Response<Full<Bytes>>> {
    let given = lease.metadata.namespace.as_deref().filter(|n| !n.is_empty())?;
    (given != namespace).then(|| {
        failure(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
            None,
        )
    })
}

/// `422 Invalid` for a Lease name that is not a DNS-1123 subdomain or a namespace that is not a
/// DNS-1123 label, as the API server's object-meta validation answers a write.
fn invalid_names(namespace: &str, name: &str) -> Option<Response<Full<Bytes>>> {
    let field = if !names::is_dns1123_subdomain(name) {
        format!(
            "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', must start and end with an alphanumeric character, and must be no more than {} characters",
            names::SUBDOMAIN_CHARS_MAX
        )
    } else if !names::is_dns1123_label(namespace) {
        format!(
            "metadata.namespace: Invalid value: {namespace:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', must start and end with an alphanumeric character, and must be no more than {} characters",
            names::LABEL_CHARS_MAX
        )
    } else {
        return None;
    };
    let message = format!("Lease.{GROUP} {name:?} is invalid: {field}");
    Some(failure(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &message, Some(name)))
}

fn not_found(name: &str) -> Response<Full<Bytes>> {
    failure(StatusCode::NOT_FOUND, "NotFound", &format!("leases.{GROUP} \"{name}\" not found"), Some(name))
}

/// A failure `Status`, shaped as the API server writes it.
fn failure(code: StatusCode, reason: &str, message: &str, name: Option<&str>) -> Response<Full<Bytes>> {
    let mut body = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(name) = name {
        body["details"] = json!({"name": name, "group": GROUP, "kind": "leases"});
    }
    json_response(code, &body)
}

fn object(code: StatusCode, lease: &Lease) -> Response<Full<Bytes>> {
    match serde_json::to_value(lease) {
        Ok(value) => json_response(code, &value),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", &e.to_string(), None),
    }
}

fn json_response(code: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_the_ones_kube_builds() {
        let item = parse_path("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l").expect("item");
        assert_eq!((item.namespace.as_str(), item.name.as_deref()), ("ns", Some("l")));
        let collection = parse_path("/apis/coordination.k8s.io/v1/namespaces/ns/leases").expect("collection");
        assert_eq!((collection.namespace.as_str(), collection.name), ("ns", None));
        assert!(parse_path("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l/status").is_none());
        assert!(parse_path("/api/v1/namespaces/ns/configmaps/l").is_none());
        assert!(parse_path("/apis/coordination.k8s.io/v1/namespaces//leases/l").is_none());
    }
}
