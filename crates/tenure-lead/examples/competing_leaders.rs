//! Two competing leaders against etcd; one is killed mid-flight; its in-flight messages die at
//! the sink.
//!
//! ```sh
//! scripts/etcd-cluster start /tmp/tenure-demo 24600     # a 3-member etcd cluster on loopback
//! cargo run -p tenure-lead --features etcd --example competing_leaders -- \
//!     http://127.0.0.1:24601,http://127.0.0.1:24602,http://127.0.0.1:24603
//! scripts/etcd-cluster stop /tmp/tenure-demo
//! ```
//!
//! Leader A wins the election and its producer sends through an epoch bridge to a fenced sink.
//! Then A freezes (a GC pause, a hung VM) with five messages in flight, and its election task is
//! killed: its etcd lease runs out, B takes over under the next epoch and sends. When A's frozen
//! messages finally arrive, they carry the old epoch and the sink rejects every one of them.

use std::time::Duration;

use tenure_lead::bridge::{BridgeOptions, Stamped, spawn_epoch_bridge};
use tenure_lead::config::ElectionConfig;
use tenure_lead::elector;
use tenure_lead::etcd::EtcdBackend;
use tenure_lead::sink::FencedSink;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const ELECTION: &str = "demo-pipeline";

fn timing() -> ElectionConfig {
    ElectionConfig {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1_200),
        retry_period: Duration::from_millis(200),
        jitter: 0.1,
    }
}

fn admit_all(sink: &mut FencedSink, batch: Vec<Stamped<String>>) -> (usize, usize) {
    let (mut accepted, mut rejected) = (0, 0);
    for stamped in batch {
        match sink.admit(&stamped.stamp()) {
            Ok(_) => {
                accepted += 1;
                println!(
                    "  sink: accepted {} ({}: {})",
                    stamped.message,
                    stamped.header,
                    stamped.header_value()
                );
            }
            Err(why) => {
                rejected += 1;
                println!(
                    "  sink: REJECTED {} ({}: {}): {why}",
                    stamped.message,
                    stamped.header,
                    stamped.header_value()
                );
            }
        }
    }
    (accepted, rejected)
}

async fn lead(
    endpoints: &[String],
    name: &str,
) -> Result<
    (
        tenure_lead::LeadershipHandle,
        CancellationToken,
        tokio::task::JoinHandle<Result<(), tenure_lead::backend::BackendError>>,
    ),
    Box<dyn std::error::Error>,
> {
    let backend =
        EtcdBackend::connect(endpoints, "/tenure-demo", ELECTION, name, timing().lease_duration).await?;
    let stop = CancellationToken::new();
    let (handle, task) = elector::spawn(backend, timing(), stop.clone());
    Ok((handle, stop, task))
}

/// Sends `count` messages named `<name>-<i>` through a bridge stamped with `epoch`; returns what
/// reached the bridge's output.
async fn send(
    name: &str,
    from: u32,
    count: u32,
    epoch: tenure_lead::LeaderEpoch,
) -> Result<Vec<Stamped<String>>, Box<dyn std::error::Error>> {
    let (producer, source) = mpsc::channel(128);
    let (pipeline, mut output) = mpsc::channel(128);
    let bridge =
        spawn_epoch_bridge(source, pipeline, epoch, BridgeOptions::default(), CancellationToken::new())?;
    for i in from..from + count {
        producer.send(format!("{name}-{i}")).await?;
    }
    drop(producer);
    let exit = bridge.stop().await;
    println!("  {name}'s bridge (epoch {epoch}) exited: {exit:?}");
    let mut out = Vec::new();
    while let Ok(stamped) = output.try_recv() {
        out.push(stamped);
    }
    Ok(out)
}

/// How long the example waits for a leader before giving up (etcd unreachable, for instance).
const WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoints: Vec<String> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "http://127.0.0.1:2379".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect();
    let mark = std::env::temp_dir().join(format!("tenure-demo-sink-{}", std::process::id()));
    // A new sink's mark is made once; a restarted sink would reopen it with
    // `FencedSink::open_existing`, which refuses a missing mark rather than start at epoch 0.
    let mut sink = FencedSink::create(&mark)?;

    println!("1. A campaigns first.");
    let (a, _a_stop, a_task) = lead(&endpoints, "leader-a").await?;
    tokio::time::timeout(WAIT_LIMIT, a.watch().wait_for(|s| s.leader)).await.map_err(|_| "A never led")??;
    let a_epoch = a.leader_epoch().ok_or("A leads without an epoch")?;
    println!("   A leads under epoch {a_epoch}.");
    let (b, b_stop, b_task) = lead(&endpoints, "leader-b").await?;

    println!("2. A sends five messages; they reach the sink.");
    let first = send("A", 1, 5, a_epoch).await?;
    admit_all(&mut sink, first);

    println!("3. A freezes with five more messages stamped in flight, and its election task is killed.");
    let in_flight = send("A", 6, 5, a_epoch).await?;
    a_task.abort();

    println!("4. A's lease runs out in etcd; B takes over.");
    tokio::time::timeout(WAIT_LIMIT, b.watch().wait_for(|s| s.leader))
        .await
        .map_err(|_| "B never took over")??;
    let b_epoch = b.leader_epoch().ok_or("B leads without an epoch")?;
    println!("   B leads under epoch {b_epoch} (A had {a_epoch}).");
    let from_b = send("B", 1, 5, b_epoch).await?;
    admit_all(&mut sink, from_b);

    println!("5. A wakes up: its in-flight messages finally arrive.");
    let (accepted, rejected) = admit_all(&mut sink, in_flight);
    println!(
        "   the deposed leader's in-flight messages: {accepted} accepted, {rejected} rejected; the sink's mark is epoch {}.",
        sink.high_water()
    );

    b_stop.cancel();
    b_task.await??;
    drop(sink);
    let _ = std::fs::remove_file(&mark);
    let _ = std::fs::remove_file(mark.with_extension("lock"));
    if accepted > 0 {
        return Err("a deposed leader's message reached the pipeline".into());
    }
    Ok(())
}
