//! The fenced sink (SPEC 8): stale epochs rejected, equal admitted, a durable high-water mark that
//! survives a restart, made once and never silently remade, signed stamps bound to their election
//! and key, implausible epochs refused, and a corrupt mark refused rather than reset.

use std::path::{Path, PathBuf};

use tenure_lead::sink::{
    EpochCeiling, FencedSink, PreviousMark, ReceivedSignature, Rejected, RejectionCounts, SinkError, Stamp,
    StampKey, StampSigner, StampVerifier, read_mark, reset_mark,
};
use tenure_lead::{LeaderEpoch, LeaderState, LeadershipHandle};

const KEY: &[u8] = b"the shared stamp key, 32+ bytes long";
const OTHER_KEY: &[u8] = b"an attacker's key, also 32+ bytes long";
const ELECTION: &str = "pipeline";

fn key(id: &str, secret: &[u8]) -> StampKey {
    StampKey::new(id, secret).expect("a good key")
}

fn signer(election: &str, key_id: &str, secret: &[u8]) -> StampSigner {
    StampSigner::new(election, key(key_id, secret)).expect("a good election name")
}

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
    let mut sink = FencedSink::create(&path).expect("opens");
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
        let mut sink = FencedSink::create(&path).expect("opens");
        admit(&mut sink, 7, "a").expect("admitted");
    }
    let mut sink = FencedSink::open_existing(&path).expect("reopens");
    assert_eq!(sink.high_water(), epoch(7), "read back from the file");
    assert!(matches!(admit(&mut sink, 6, "b"), Err(Rejected::StaleEpoch { .. })));
    assert!(!admit(&mut sink, 7, "c").expect("equal"));
    assert_eq!(sink.mark_writes_total(), 0, "reopening and admitting an equal epoch wrote nothing");
    assert_eq!(sink.rejected_total(), 1, "counters start again with the process");
}

/// A deleted mark file must not quietly reopen fencing at epoch 0: `open_existing` refuses it,
/// naming the path, and creates nothing; `create` refuses to replace a mark that is there.
#[test]
fn a_missing_mark_is_refused_and_an_existing_one_is_never_recreated() {
    let path = scratch("missing").join("mark");
    let missing = FencedSink::open_existing(&path).expect_err("no mark yet");
    assert!(matches!(missing, SinkError::Missing { .. }), "{missing}");
    let message = missing.to_string();
    assert!(message.starts_with(&path.display().to_string()), "names the path: {message}");
    assert!(message.contains("reopen fencing") && !message.contains('\n'), "one clear line: {message}");
    assert!(!path.exists(), "refusing created nothing");

    {
        let mut sink = FencedSink::create(&path).expect("a new mark");
        admit(&mut sink, 9, "a").expect("admitted");
    }
    let before = std::fs::read(&path).expect("readable");
    let exists = FencedSink::create(&path).expect_err("a mark is there");
    assert!(matches!(exists, SinkError::AlreadyExists { .. }), "{exists}");
    assert!(exists.to_string().starts_with(&path.display().to_string()), "{exists}");
    assert_eq!(std::fs::read(&path).expect("readable"), before, "create left the mark alone");
    assert_eq!(FencedSink::open_existing(&path).expect("reopens").high_water(), epoch(9));

    std::fs::remove_file(&path).expect("an operator deletes the mark");
    assert!(matches!(FencedSink::open_existing(&path), Err(SinkError::Missing { .. })), "still refused");
    assert!(!path.exists());
}

#[test]
fn signatures_are_required_checked_and_survive_a_restart() {
    let signer = signer(ELECTION, "k1", KEY);
    let verifier = StampVerifier::of(&signer);
    let path = scratch("signed").join("mark");
    {
        let mut sink = FencedSink::create(&path).expect("opens").requiring_signatures(verifier.clone());
        let signature = signer.sign(epoch(5), b"m-1");
        assert!(sink.admit(&Stamp::signed(epoch(5), b"m-1", signature.received())).expect("valid").raised);
    }
    let mut sink = FencedSink::open_existing(&path).expect("reopens").requiring_signatures(verifier);
    assert_eq!(sink.high_water(), epoch(5));

    let forger = StampSigner::new(ELECTION, key("k1", OTHER_KEY)).expect("good");
    let forged = forger.sign(epoch(9), b"m-2");
    let refused = sink.admit(&Stamp::signed(epoch(9), b"m-2", forged.received()));
    assert!(matches!(refused, Err(Rejected::BadSignature { .. })), "forged with another key");
    assert_eq!(sink.high_water(), epoch(5), "a forged stamp never moves the mark");

    let genuine = signer.sign(epoch(5), b"m-3");
    let altered_epoch = sink.admit(&Stamp::signed(epoch(6), b"m-3", genuine.received()));
    assert!(matches!(altered_epoch, Err(Rejected::BadSignature { .. })), "epoch altered");
    let altered_id = sink.admit(&Stamp::signed(epoch(5), b"m-4", genuine.received()));
    assert!(matches!(altered_id, Err(Rejected::BadSignature { .. })), "message id altered");
    let mut flipped = *genuine.mac();
    flipped[31] ^= 1;
    let flipped = ReceivedSignature { key_id: "k1", mac: &flipped };
    let one_bit = sink.admit(&Stamp::signed(epoch(5), b"m-3", flipped));
    assert!(matches!(one_bit, Err(Rejected::BadSignature { .. })), "one bit flipped");
    let truncated = ReceivedSignature { key_id: "k1", mac: &genuine.mac()[..16] };
    let truncated = sink.admit(&Stamp::signed(epoch(5), b"m-3", truncated));
    assert!(matches!(truncated, Err(Rejected::BadSignature { .. })), "truncated signature");
    let missing = sink.admit(&Stamp::unsigned(epoch(5), b"m-3"));
    assert!(matches!(missing, Err(Rejected::MissingSignature { .. })), "unsigned");

    assert!(!sink.admit(&Stamp::signed(epoch(5), b"m-3", genuine.received())).expect("genuine").raised);
    let stale = signer.sign(epoch(4), b"m-5");
    let refused = sink.admit(&Stamp::signed(epoch(4), b"m-5", stale.received()));
    assert!(matches!(refused, Err(Rejected::StaleEpoch { .. })), "validly signed but stale");
    assert_eq!(
        sink.rejections(),
        RejectionCounts {
            stale_epoch: 1,
            bad_signature: 5,
            missing_signature: 1,
            ..RejectionCounts::default()
        }
    );
    assert_eq!(sink.rejected_total(), 7);
    assert_eq!(sink.high_water(), epoch(5));
}

#[test]
fn an_unsigned_sink_ignores_signatures() {
    let path = scratch("unsigned").join("mark");
    let mut sink = FencedSink::create(&path).expect("opens");
    let nonsense = ReceivedSignature { key_id: "no such key", mac: b"not a signature" };
    assert!(sink.admit(&Stamp::signed(epoch(2), b"m", nonsense)).is_ok());
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
        let mut sink = FencedSink::create(&path).expect("opens");
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
        let error = FencedSink::open_existing(&path).expect_err(what);
        assert!(matches!(error, SinkError::Corrupt { .. }), "{what}: {error}");
        assert_eq!(std::fs::read(&path).expect("readable"), bytes, "{what}: the file was not rewritten");
    }
    write(&path, good.as_bytes());
    assert_eq!(FencedSink::open_existing(&path).expect("the good mark opens").high_water(), epoch(12));

    let unreadable = dir.join("a-directory");
    std::fs::create_dir_all(&unreadable).expect("dir");
    let error = FencedSink::open_existing(&unreadable).expect_err("a directory is no mark");
    assert!(matches!(error, SinkError::Io { .. }), "unreadable is an error: {error}");
}

#[test]
fn two_sinks_never_share_a_mark() {
    let path = scratch("locked").join("mark");
    let first = FencedSink::create(&path).expect("opens");
    assert!(matches!(FencedSink::open_existing(&path), Err(SinkError::InUse { .. })));
    drop(first);
    FencedSink::open_existing(&path).expect("free again once the first is dropped");
}

#[test]
fn a_rise_that_cannot_be_persisted_is_rejected_and_the_mark_stays() {
    let dir = scratch("unwritable");
    let path = dir.join("mark");
    let mut sink = FencedSink::create(&path).expect("opens");
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
    let mut sink = FencedSink::create(scratch("zero").join("mark")).expect("open");
    assert!(matches!(admit(&mut sink, 0, "m-1"), Err(Rejected::StaleEpoch { .. })));
    assert!(admit(&mut sink, 1, "m-1").is_ok());
}

/// A stamp signed for election X does not pass a sink of election Y, even with the same key and
/// key id: the election name is signed.
#[test]
fn a_stamp_of_another_election_sharing_the_key_is_refused() {
    let x = signer("election-x", "k1", KEY);
    let y = signer("election-y", "k1", KEY);
    let path = scratch("election").join("mark");
    let mut sink = FencedSink::create(&path).expect("opens").requiring_signatures(StampVerifier::of(&y));
    let from_x = x.sign(epoch(7), b"m-1");
    let refused = sink.admit(&Stamp::signed(epoch(7), b"m-1", from_x.received())).expect_err("election X");
    assert!(matches!(refused, Rejected::BadSignature { epoch: e } if e == epoch(7)), "{refused}");
    assert_eq!(sink.high_water(), LeaderEpoch::NEVER, "the replay moved nothing");
    let from_y = y.sign(epoch(7), b"m-1");
    assert!(sink.admit(&Stamp::signed(epoch(7), b"m-1", from_y.received())).expect("election Y").raised);
}

/// During a rotation a sink holds the old key and the new one and takes either, chosen by the
/// key id the stamp carries; a key id it does not hold is refused as such.
#[test]
fn a_sink_holding_two_keys_admits_either_and_refuses_an_unknown_key_id() {
    let old = signer(ELECTION, "k-old", KEY);
    let new = signer(ELECTION, "k-new", OTHER_KEY);
    let verifier =
        StampVerifier::new(ELECTION, [key("k-old", KEY), key("k-new", OTHER_KEY)]).expect("two keys");
    let mut sink =
        FencedSink::create(scratch("rotation").join("mark")).expect("opens").requiring_signatures(verifier);
    let by_old = old.sign(epoch(3), b"a");
    assert!(sink.admit(&Stamp::signed(epoch(3), b"a", by_old.received())).expect("old key").raised);
    let by_new = new.sign(epoch(3), b"b");
    assert!(!sink.admit(&Stamp::signed(epoch(3), b"b", by_new.received())).expect("new key").raised);

    let retired = signer(ELECTION, "k-retired", KEY).sign(epoch(3), b"c");
    let refused = sink.admit(&Stamp::signed(epoch(3), b"c", retired.received())).expect_err("unknown id");
    assert!(matches!(&refused, Rejected::UnknownKeyId { key_id, .. } if key_id == "k-retired"), "{refused}");
    assert!(refused.to_string().contains("\"k-retired\""), "names the key id: {refused}");

    // The old key's MAC under the new key's id: the id picks the key, and the MAC fails it.
    let swapped = ReceivedSignature { key_id: "k-new", mac: by_old.mac() };
    let refused = sink.admit(&Stamp::signed(epoch(3), b"a", swapped)).expect_err("wrong key for the id");
    assert!(matches!(refused, Rejected::BadSignature { .. }), "{refused}");
    assert_eq!(
        sink.rejections(),
        RejectionCounts { unknown_key_id: 1, bad_signature: 1, ..RejectionCounts::default() }
    );
}

/// A validly signed stamp at `u64::MAX` would raise the durable mark past every real term and
/// block the sink for good; a sink with a ceiling refuses it and keeps its mark, on disk too.
#[test]
fn an_epoch_above_the_ceiling_is_refused_without_raising_the_mark() {
    let signer = signer(ELECTION, "k1", KEY);
    let path = scratch("ceiling").join("mark");
    let observed_term = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(4));
    let ceiling = {
        let observed_term = observed_term.clone();
        EpochCeiling::from_fn(move || {
            Some(LeaderEpoch::from_stored(observed_term.load(std::sync::atomic::Ordering::SeqCst)))
        })
    };
    let mut sink = FencedSink::create(&path)
        .expect("opens")
        .requiring_signatures(StampVerifier::of(&signer))
        .with_epoch_ceiling(ceiling);
    let genuine = signer.sign(epoch(4), b"a");
    assert!(sink.admit(&Stamp::signed(epoch(4), b"a", genuine.received())).expect("term 4").raised);
    let absurd = signer.sign(epoch(u64::MAX), b"b");
    let refused = sink.admit(&Stamp::signed(epoch(u64::MAX), b"b", absurd.received())).expect_err("absurd");
    assert!(
        matches!(refused, Rejected::ImplausibleEpoch { epoch: e, highest_plausible: h }
            if e == epoch(u64::MAX) && h == epoch(4)),
        "{refused}"
    );
    assert_eq!(sink.high_water(), epoch(4), "the mark did not move");
    assert_eq!(read_mark(&path).expect("readable"), epoch(4), "nor did the file");
    assert_eq!(sink.rejections(), RejectionCounts { implausible_epoch: 1, ..RejectionCounts::default() });

    let next = signer.sign(epoch(5), b"c");
    assert!(sink.admit(&Stamp::signed(epoch(5), b"c", next.received())).is_err(), "5 is not observed yet");
    observed_term.store(5, std::sync::atomic::Ordering::SeqCst);
    assert!(sink.admit(&Stamp::signed(epoch(5), b"c", next.received())).expect("term 5 observed").raised);
    assert_eq!(sink.high_water(), epoch(5));
}

/// A ceiling that follows a leadership handle: the highest epoch it has reported (remembered
/// after leadership is lost) plus the slack; no bound before it has reported one.
#[test]
fn a_ceiling_following_a_leadership_handle_remembers_its_highest_epoch() {
    let (publisher, leadership) = LeadershipHandle::new();
    let ceiling = EpochCeiling::following(leadership, 1);
    assert_eq!(ceiling.highest(), None, "nothing reported yet: no bound");
    publisher.publish(LeaderState::leading(epoch(6)));
    assert_eq!(ceiling.highest(), Some(epoch(7)));
    publisher.publish(LeaderState::following());
    assert_eq!(ceiling.highest(), Some(epoch(7)), "losing leadership does not lower it");
    let mut sink =
        FencedSink::create(scratch("following").join("mark")).expect("opens").with_epoch_ceiling(ceiling);
    assert!(matches!(admit(&mut sink, 8, "a"), Err(Rejected::ImplausibleEpoch { .. })));
    assert!(admit(&mut sink, 7, "b").expect("within the slack"));
    assert!(matches!(admit(&mut sink, u64::MAX, "c"), Err(Rejected::ImplausibleEpoch { .. })));
    assert_eq!(sink.high_water(), epoch(7));
}

/// The operator's recovery from a mark raised too far: reset refuses while a sink holds the
/// mark, and afterwards the sink admits the real term again.
#[test]
fn reset_mark_lowers_a_poisoned_mark_only_while_no_sink_holds_it() {
    let path = scratch("reset").join("mark");
    let mut sink = FencedSink::create(&path).expect("opens");
    admit(&mut sink, u64::MAX, "poison").expect("no ceiling: admitted");
    assert!(matches!(admit(&mut sink, 12, "real"), Err(Rejected::StaleEpoch { .. })), "blocked");
    let busy = reset_mark(&path, epoch(11)).expect_err("the sink holds the lock");
    assert!(matches!(busy, SinkError::InUse { .. }), "{busy}");
    assert_eq!(read_mark(&path).expect("readable"), epoch(u64::MAX), "left alone");
    drop(sink);

    assert_eq!(reset_mark(&path, epoch(11)).expect("resets"), PreviousMark::Epoch(epoch(u64::MAX)));
    let mut sink = FencedSink::open_existing(&path).expect("reopens");
    assert_eq!(sink.high_water(), epoch(11));
    assert!(admit(&mut sink, 12, "real").expect("the real term again"));
    drop(sink);

    std::fs::write(&path, b"garbage\n").expect("damage it");
    assert!(matches!(reset_mark(&path, epoch(12)), Ok(PreviousMark::Corrupt { .. })));
    std::fs::remove_file(&path).expect("delete it");
    assert!(matches!(read_mark(&path), Err(SinkError::Missing { .. })));
    assert_eq!(reset_mark(&path, epoch(12)).expect("recreates"), PreviousMark::Missing);
    assert_eq!(read_mark(&path).expect("readable"), epoch(12));
}
