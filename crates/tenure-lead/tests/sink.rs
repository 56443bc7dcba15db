//! The fenced sink (SPEC 8): stale epochs rejected, equal admitted, a durable high-water mark that
//! survives a restart, signed stamps, and a corrupt mark refused rather than reset.

use std::path::{Path, PathBuf};

use tenure_lead::LeaderEpoch;
use tenure_lead::sink::{FencedSink, Rejected, RejectionCounts, SinkError, Stamp, StampSigner};

const KEY: &[u8] = b"the shared stamp key, 32+ bytes long";
const OTHER_KEY: &[u8] = b"an attacker's key, also 32+ bytes long";

fn epoch(value: u64) -> LeaderEpoch {
    LeaderEpoch::from_stored(value)
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tenure-sink-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn admit(sink: &mut FencedSink, value: u64, id: &str) -> Result<bool, Rejected> {
    sink.admit(&Stamp::unsigned(epoch(value), id.as_bytes())).map(|admitted| admitted.raised)
}

#[test]
fn a_stale_epoch_is_rejected_and_an_equal_one_admitted() {
    let path = scratch("stale").join("mark");
    let mut sink = FencedSink::open(&path).expect("opens");
    assert_eq!(sink.high_water(), LeaderEpoch::NEVER);
    assert_eq!(sink.mark_writes_total(), 1, "a new mark is written at once");

    assert!(admit(&mut sink, 4, "a").expect("first term"), "raised the mark");
    assert!(!admit(&mut sink, 4, "b").expect("same term"), "equal is admitted");
    assert_eq!(sink.mark_writes_total(), 2, "an equal epoch writes (and fsyncs) nothing");
    let refused = admit(&mut sink, 3, "c").expect_err("older term");
    assert!(
        matches!(refused, Rejected::StaleEpoch { epoch: e, high_water: h } if e == epoch(3) && h == epoch(4)),
        "{refused}"
    );
    assert!(admit(&mut sink, 6, "d").expect("newer term"));
    assert!(admit(&mut sink, 5, "e").is_err(), "the mark moved to 6");
    assert!(admit(&mut sink, 4, "f").is_err());
    assert_eq!(sink.high_water(), epoch(6));
    assert_eq!(sink.admitted_total(), 3);
    assert_eq!(sink.rejected_total(), 3);
    assert_eq!(sink.rejections(), RejectionCounts { stale_epoch: 3, ..RejectionCounts::default() });
}

#[test]
fn a_restarted_sink_keeps_its_mark_and_still_rejects() {
    let path = scratch("restart").join("mark");
    {
        let mut sink = FencedSink::open(&path).expect("opens");
        admit(&mut sink, 7, "a").expect("admitted");
    }
    let mut sink = FencedSink::open_existing(&path).expect("reopens");
    assert_eq!(sink.high_water(), epoch(7), "read back from the file");
    assert!(matches!(admit(&mut sink, 6, "b"), Err(Rejected::StaleEpoch { .. })));
    assert!(!admit(&mut sink, 7, "c").expect("equal"));
    assert_eq!(sink.mark_writes_total(), 0, "reopening and admitting an equal epoch wrote nothing");
    assert_eq!(sink.rejected_total(), 1, "counters start again with the process");
    drop(sink);
    let again = FencedSink::open(&path).expect("`open` reads an existing mark too");
    assert_eq!(again.high_water(), epoch(7));
}

#[test]
fn a_missing_mark_is_an_error_for_open_existing() {
    let path = scratch("missing").join("mark");
    assert!(matches!(FencedSink::open_existing(&path), Err(SinkError::Missing { .. })));
}

#[test]
fn signatures_are_required_checked_and_survive_a_restart() {
    let signer = StampSigner::new(KEY).expect("long enough");
    let path = scratch("signed").join("mark");
    {
        let mut sink = FencedSink::open(&path).expect("opens").requiring_signatures(signer.clone());
        let signature = signer.sign(epoch(5), b"m-1");
        assert!(sink.admit(&Stamp::signed(epoch(5), b"m-1", signature.as_bytes())).expect("valid").raised);
    }
    let mut sink = FencedSink::open_existing(&path).expect("reopens").requiring_signatures(signer.clone());
    assert_eq!(sink.high_water(), epoch(5));

    let forger = StampSigner::new(OTHER_KEY).expect("long enough");
    let forged = forger.sign(epoch(9), b"m-2");
    let refused = sink.admit(&Stamp::signed(epoch(9), b"m-2", forged.as_bytes()));
    assert!(matches!(refused, Err(Rejected::BadSignature { .. })), "forged with another key");
    assert_eq!(sink.high_water(), epoch(5), "a forged stamp never moves the mark");

    let genuine = signer.sign(epoch(5), b"m-3");
    let altered_epoch = sink.admit(&Stamp::signed(epoch(6), b"m-3", genuine.as_bytes()));
    assert!(matches!(altered_epoch, Err(Rejected::BadSignature { .. })), "epoch altered");
    let altered_id = sink.admit(&Stamp::signed(epoch(5), b"m-4", genuine.as_bytes()));
    assert!(matches!(altered_id, Err(Rejected::BadSignature { .. })), "message id altered");
    let mut flipped = *genuine.as_bytes();
    flipped[31] ^= 1;
    let one_bit = sink.admit(&Stamp::signed(epoch(5), b"m-3", &flipped));
    assert!(matches!(one_bit, Err(Rejected::BadSignature { .. })), "one bit flipped");
    let truncated = sink.admit(&Stamp::signed(epoch(5), b"m-3", &genuine.as_bytes()[..16]));
    assert!(matches!(truncated, Err(Rejected::BadSignature { .. })), "truncated signature");
    let missing = sink.admit(&Stamp::unsigned(epoch(5), b"m-3"));
    assert!(matches!(missing, Err(Rejected::MissingSignature { .. })), "unsigned");

    assert!(!sink.admit(&Stamp::signed(epoch(5), b"m-3", genuine.as_bytes())).expect("genuine").raised);
    let stale = signer.sign(epoch(4), b"m-5");
    let refused = sink.admit(&Stamp::signed(epoch(4), b"m-5", stale.as_bytes()));
    assert!(matches!(refused, Err(Rejected::StaleEpoch { .. })), "validly signed but stale");
    assert_eq!(
        sink.rejections(),
        RejectionCounts { stale_epoch: 1, bad_signature: 5, missing_signature: 1, mark_not_persisted: 0 }
    );
    assert_eq!(sink.rejected_total(), 7);
    assert_eq!(sink.high_water(), epoch(5));
}

#[test]
fn an_unsigned_sink_ignores_signatures() {
    let path = scratch("unsigned").join("mark");
    let mut sink = FencedSink::open(&path).expect("opens");
    assert!(sink.admit(&Stamp::signed(epoch(2), b"m", b"not a signature")).is_ok());
    assert!(sink.admit(&Stamp::unsigned(epoch(2), b"m")).is_ok());
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write the test file");
}

#[test]
fn a_corrupt_mark_is_refused_and_left_alone() {
    let dir = scratch("corrupt");
    let path = dir.join("mark");
    {
        let mut sink = FencedSink::open(&path).expect("opens");
        admit(&mut sink, 12, "a").expect("admitted");
    }
    let good = std::fs::read_to_string(&path).expect("readable");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("garbage", b"twelve\n".to_vec()),
        ("a bare number", b"12\n".to_vec()),
        ("a changed digit", good.replacen("high-water-epoch 12", "high-water-epoch 13", 1).into_bytes()),
        ("truncated", good.as_bytes()[..good.len() - 10].to_vec()),
        ("a wrong header", good.replacen("v1", "v9", 1).into_bytes()),
        ("too long", vec![b'x'; 5_000]),
        ("not UTF-8", vec![0xff, 0xfe, b'\n']),
    ];
    for (what, bytes) in cases {
        write(&path, &bytes);
        let error = FencedSink::open(&path).expect_err(what);
        assert!(matches!(error, SinkError::Corrupt { .. }), "{what}: {error}");
        assert_eq!(std::fs::read(&path).expect("readable"), bytes, "{what}: the file was not rewritten");
    }
    write(&path, good.as_bytes());
    assert_eq!(FencedSink::open(&path).expect("the good mark opens").high_water(), epoch(12));

    let unreadable = dir.join("a-directory");
    std::fs::create_dir_all(&unreadable).expect("dir");
    assert!(matches!(FencedSink::open(&unreadable), Err(SinkError::Io { .. })), "unreadable is an error");
}

#[test]
fn two_sinks_never_share_a_mark() {
    let path = scratch("locked").join("mark");
    let first = FencedSink::open(&path).expect("opens");
    assert!(matches!(FencedSink::open(&path), Err(SinkError::InUse { .. })));
    drop(first);
    FencedSink::open(&path).expect("free again once the first is dropped");
}

#[test]
fn a_rise_that_cannot_be_persisted_is_rejected_and_the_mark_stays() {
    let dir = scratch("unwritable");
    let path = dir.join("mark");
    let mut sink = FencedSink::open(&path).expect("opens");
    admit(&mut sink, 3, "a").expect("admitted");
    std::fs::remove_dir_all(&dir).expect("pull the directory away");
    let refused = admit(&mut sink, 4, "b").expect_err("cannot persist");
    assert!(matches!(refused, Rejected::MarkNotPersisted { .. }), "{refused}");
    assert_eq!(sink.high_water(), epoch(3), "not raised in memory either");
    assert!(!admit(&mut sink, 3, "c").expect("equal needs no write"));
    assert_eq!(sink.rejections().mark_not_persisted, 1);
}

#[test]
fn epoch_zero_is_never_admitted_even_by_a_fresh_sink() {
    let mut sink = FencedSink::open(scratch("zero").join("mark")).expect("open");
    assert!(matches!(admit(&mut sink, 0, "m-1"), Err(Rejected::StaleEpoch { .. })));
    assert!(admit(&mut sink, 1, "m-1").is_ok());
}
