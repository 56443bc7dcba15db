//! The failover timeline, drawn server-side as SVG from the core's history of the log
//! ([`HistoryEntry`], the entries `GET /v1/history` lists): per address, who held it when (a band
//! per owner, coloured by node, labelled with its ownershipEpoch) over stream time, the
//! hand-overs marked, and the faults and operator actions as vertical lines across every lane —
//! the picture an operator wants after an incident. The loop picks the lanes and hands their
//! entries over ([`crate::agent::status::timeline_lanes`]); this file only draws.
//!
//! What an entry draws: an `ownership` entry starts a band of its new owner (`to`); a `capture`
//! entry starts a band of the same owner with its new captureEpoch. Marks: a move caused by
//! `liveness`, `health`, `vrrp` or drift repair (`re-capture`), and a `failed` action, are faults
//! (red); a move caused by `drain`, `undrain`, `desire`, `undesire`, `pool-applied` or
//! `pool-deleted`, an `approval` and a `tokens-raised` are operator actions (blue); one mark per
//! log record and kind. Times read as UTC: the axis in stream time (an agent's is the largest
//! host clock it has applied, ms since the Unix epoch), the tooltips add each entry's own wall
//! time and log index.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use tenure_core::federation::history::{Cause, EntryKind, HistoryEntry};
use tenure_core::input::canonical_address;

use super::html::{age, escape};
use crate::agent::status::{Lane, TIMELINE_LANES_MAX, TimelineLanes};
use crate::cli::history::utc_text;

/// Most fault and operator marks drawn (the latest in the window).
pub const MARKS_MAX: usize = 40;

/// Width of the drawing, in pixels.
const WIDTH_PX: u64 = 1_000;
/// Width of the address labels on the left.
const LABEL_PX: u64 = 190;
/// Height of one lane.
const LANE_PX: u64 = 30;
/// Height of the band above the lanes where marks are labelled, and of the axis below.
const MARGIN_PX: u64 = 46;
/// Stream times from here on are read as ms since the Unix epoch (2000-01-01T00:00:00Z) and the
/// axis shows them as UTC times of day; smaller ones (a scenario's) as time before now.
const UNIX_MS_FROM: u64 = 946_684_800_000;

/// One band: an owner from a stream time on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Band<'a> {
    /// The entry that started it.
    entry: &'a HistoryEntry,
    /// Its owner (`None`: nobody).
    holder: Option<&'a str>,
}

/// The bands of `lane`, oldest first. A `capture` entry keeps the owner: the owner after it is
/// the one before the next `ownership` entry (its `from`), or the owner now when none follows.
fn bands(lane: &Lane) -> Vec<Band<'_>> {
    let mut owner_after = lane.owner.as_deref();
    let mut bands: Vec<Band<'_>> = lane
        .entries
        .iter()
        .rev()
        .filter_map(|entry| match entry.kind {
            EntryKind::Ownership => {
                let band = Band { entry, holder: entry.to.as_deref() };
                owner_after = entry.from.as_deref();
                Some(band)
            }
            EntryKind::Capture => Some(Band { entry, holder: owner_after }),
            _ => None,
        })
        .collect();
    bands.reverse();
    bands
}

/// What a mark on the timeline is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum MarkKind {
    /// Something went wrong: a liveness, health or VRRP move, a re-capture, a failed action.
    Fault,
    /// An operator acted: drain, undrain, desire, undesire, a pool applied or deleted, an
    /// approval, a restore's raise.
    Operator,
}

impl MarkKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Fault => "fault",
            Self::Operator => "operator",
        }
    }
}

/// The mark an entry makes, if any, and its label.
fn mark_of(entry: &HistoryEntry) -> Option<(MarkKind, String)> {
    let who = |name: &Option<String>| name.clone().unwrap_or_else(|| "nobody".to_owned());
    let moved = || format!("{} → {}", who(&entry.from), who(&entry.to));
    match entry.kind {
        EntryKind::Ownership | EntryKind::Capture => {
            let cause = entry.cause?;
            let kind = match cause {
                Cause::Liveness | Cause::Health | Cause::Vrrp | Cause::Recapture => MarkKind::Fault,
                Cause::Drain
                | Cause::Undrain
                | Cause::Desire
                | Cause::Undesire
                | Cause::PoolApplied
                | Cause::PoolDeleted
                | Cause::Membership => MarkKind::Operator,
            };
            // A node coming alive is not a fault: only a move away from an owner is.
            if kind == MarkKind::Fault && cause == Cause::Liveness && entry.from.is_none() {
                return None;
            }
            Some((kind, format!("{}: {}", cause.as_str(), moved())))
        }
        EntryKind::Approval => Some((
            MarkKind::Operator,
            format!("approve {} for {}", entry.verb.as_deref().unwrap_or("action"), who(&entry.node)),
        )),
        EntryKind::Failed => Some((
            MarkKind::Fault,
            format!("{}: {} failed", who(&entry.node), entry.verb.as_deref().unwrap_or("action")),
        )),
        EntryKind::TokensRaised => Some((MarkKind::Operator, "tokens raised (a restore)".to_owned())),
        EntryKind::Executed => None,
    }
}

/// A mark: a stream time, its kind, its label and the entry's wall time and log index.
struct Mark<'a> {
    entry: &'a HistoryEntry,
    kind: MarkKind,
    label: String,
}

/// The timeline as an SVG element (inside a `<section>`); `nodes` in the order that picks their
/// colours; `matched` how many addresses the map's filters keep (for the caption).
#[must_use]
pub fn section(timeline: &TimelineLanes, nodes: &[String], matched: usize) -> String {
    let mut out = String::from("<section id=\"timeline\"><h2>Failover timeline</h2>\n");
    let drawn: Vec<(&Lane, Vec<Band<'_>>)> = timeline
        .lanes
        .iter()
        .map(|lane| (lane, bands(lane)))
        .filter(|(_, bands)| !bands.is_empty())
        .collect();
    if drawn.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"muted\">no holder changes of the {matched} addresses the filters keep in the history \
             (it reaches back to log index {})</p></section>",
            timeline.reaches_back_to
        );
        return out;
    }
    let start_ms = drawn.iter().filter_map(|(_, bands)| bands.first()).map(|b| b.entry.stream_time_ms).min();
    let start_ms = start_ms.unwrap_or(0);
    let end_ms = timeline.now_ms.max(start_ms + 1);
    let scale = Scale { start_ms, end_ms };
    let height = MARGIN_PX * 2 + LANE_PX * drawn.len() as u64;
    let _ = writeln!(
        out,
        "<svg id=\"timeline-svg\" width=\"{WIDTH_PX}\" height=\"{height}\" viewBox=\"0 0 {WIDTH_PX} {height}\" \
         role=\"img\" aria-label=\"holders and epochs of {} addresses over stream time\" \
         data-start-ms=\"{start_ms}\" data-end-ms=\"{end_ms}\" data-lanes=\"{}\" data-changed=\"{}\" \
         font-size=\"11\" font-family=\"system-ui,sans-serif\">",
        drawn.len(),
        drawn.len(),
        timeline.changed,
    );
    for (lane, (info, bands)) in drawn.iter().enumerate() {
        draw_lane(&mut out, &scale, lane as u64, info, bands, nodes);
    }
    let mut seen = BTreeSet::new();
    let marks: Vec<Mark<'_>> = drawn
        .iter()
        .flat_map(|(lane, _)| lane.entries.iter())
        .chain(&timeline.unaddressed)
        .filter(|entry| entry.stream_time_ms >= start_ms && entry.stream_time_ms <= end_ms)
        .filter_map(|entry| mark_of(entry).map(|(kind, label)| Mark { entry, kind, label }))
        .filter(|mark| seen.insert((mark.entry.log_index, mark.kind)))
        .collect();
    let mut marks = marks;
    marks.sort_by_key(|mark| (mark.entry.log_index, mark.kind));
    for mark in &marks[marks.len().saturating_sub(MARKS_MAX)..] {
        draw_mark(&mut out, &scale, height, mark);
    }
    draw_axis(&mut out, &scale, height);
    out.push_str("</svg>\n");
    let _ = write!(
        out,
        "<p class=\"muted\" id=\"timeline-note\">{} of {} addresses drawn: of the {matched} addresses the \
         filters keep, {} changed hands in the history, and the {} that changed last are drawn (at most \
         {TIMELINE_LANES_MAX}; filter to an address or a CIDR to see others). Bands: the owner the log \
         arbitrated, labelled with its ownershipEpoch (the tooltip adds the captureEpoch, the cause, the \
         log index and the wall time of the appending host); ▲ a hand-over; red lines faults, blue lines \
         operator actions; the last {} of stream time, times in UTC.",
        drawn.len(),
        timeline.changed,
        timeline.changed,
        drawn.len(),
        age(end_ms - start_ms)
    );
    if timeline.reaches_back_to > 1 {
        let _ = write!(
            out,
            " The history reaches back to log index {} (older records were compacted into a snapshot, or \
             their entries dropped past the agent's bound).",
            timeline.reaches_back_to
        );
    }
    out.push_str("</p></section>\n");
    out
}

/// Stream time to x pixels.
struct Scale {
    start_ms: u64,
    end_ms: u64,
}

impl Scale {
    fn x(&self, at_ms: u64) -> u64 {
        let span = (self.end_ms - self.start_ms).max(1);
        let at = at_ms.clamp(self.start_ms, self.end_ms) - self.start_ms;
        LABEL_PX + at * (WIDTH_PX - LABEL_PX - 10) / span
    }
}

/// A node's colour: its place in `nodes` spread around the hue circle (as `tenure sim --plot`).
fn colour(nodes: &[String], node: &str) -> String {
    let index = nodes.iter().position(|n| n == node).unwrap_or(nodes.len());
    format!("hsl({},60%,52%)", (index * 137) % 360)
}

fn draw_lane(out: &mut String, scale: &Scale, lane: u64, info: &Lane, bands: &[Band<'_>], nodes: &[String]) {
    let top = MARGIN_PX + lane * LANE_PX;
    let pool = escape(&info.pool);
    let address = escape(&canonical_address(info.address));
    let _ = writeln!(
        out,
        "<g class=\"lane\" data-pool=\"{pool}\" data-address=\"{address}\"><text x=\"4\" y=\"{}\">{pool} {address}</text>",
        top + LANE_PX / 2 + 4,
    );
    let mut previous: Option<&Band<'_>> = None;
    for (i, band) in bands.iter().enumerate() {
        let entry = band.entry;
        let at_ms = entry.stream_time_ms;
        let until_ms = bands.get(i + 1).map_or(scale.end_ms, |next| next.entry.stream_time_ms);
        let (x0, x1) = (scale.x(at_ms), scale.x(until_ms).max(scale.x(at_ms) + 1));
        let ownership_epoch = entry.ownership_epoch.unwrap_or(0);
        let capture_epoch = entry.capture_epoch.unwrap_or(0);
        let cause = entry.cause.map_or("", |c| c.as_str());
        let tooltip = format!(
            "{} {}: {} from {} for {}, ownershipEpoch {ownership_epoch}, captureEpoch {capture_epoch} \
             ({} {cause}, log index {}, wall time {})",
            info.pool,
            canonical_address(info.address),
            band.holder.unwrap_or("no holder"),
            clock_text(at_ms),
            age(until_ms.saturating_sub(at_ms)),
            entry.kind.as_str(),
            entry.log_index,
            utc_text(entry.wall_time_ms),
        );
        match band.holder {
            Some(holder) => {
                let _ = write!(
                    out,
                    "<rect class=\"hold\" x=\"{x0}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" data-holder=\"{h}\" \
                     data-ownership-epoch=\"{ownership_epoch}\" data-capture-epoch=\"{capture_epoch}\" \
                     data-from-ms=\"{at_ms}\" data-to-ms=\"{until_ms}\" data-cause=\"{cause}\"><title>{}</title></rect>",
                    top + 5,
                    x1 - x0,
                    LANE_PX - 10,
                    colour(nodes, holder),
                    escape(&tooltip),
                    h = escape(holder),
                );
                if x1 - x0 >= 40 {
                    let _ = write!(
                        out,
                        "<text x=\"{}\" y=\"{}\" fill=\"#fff\" pointer-events=\"none\">{} · {ownership_epoch}</text>",
                        x0 + 4,
                        top + LANE_PX / 2 + 4,
                        escape(holder),
                    );
                }
            }
            None => {
                let _ = write!(
                    out,
                    "<line class=\"nobody\" x1=\"{x0}\" x2=\"{x1}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#8c959f\" \
                     stroke-dasharray=\"2 3\" data-ownership-epoch=\"{ownership_epoch}\" data-from-ms=\"{at_ms}\">\
                     <title>{}</title></line>",
                    escape(&tooltip),
                    y = top + LANE_PX / 2,
                );
            }
        }
        if let Some(before) = previous.filter(|before| before.holder != band.holder) {
            let _ = write!(
                out,
                "<path class=\"handover\" d=\"M{x0} {} l-5 8 h10 z\" fill=\"#1b1f24\" data-from=\"{}\" data-to=\"{}\" \
                 data-ownership-epoch=\"{ownership_epoch}\" data-capture-epoch=\"{capture_epoch}\" data-at-ms=\"{at_ms}\">\
                 <title>{}</title></path>",
                top + LANE_PX - 8,
                escape(before.holder.unwrap_or("")),
                escape(band.holder.unwrap_or("")),
                escape(&format!(
                    "hand-over {} → {} at {} ({cause}, log index {}): ownershipEpoch {} → {ownership_epoch}",
                    before.holder.unwrap_or("nobody"),
                    band.holder.unwrap_or("nobody"),
                    clock_text(at_ms),
                    entry.log_index,
                    before.entry.ownership_epoch.unwrap_or(0),
                )),
            );
        }
        previous = Some(band);
        out.push('\n');
    }
    out.push_str("</g>\n");
}

fn draw_mark(out: &mut String, scale: &Scale, height: u64, mark: &Mark<'_>) {
    let at_ms = mark.entry.stream_time_ms;
    let x = scale.x(at_ms);
    let stroke = match mark.kind {
        MarkKind::Fault => "#cf222e",
        MarkKind::Operator => "#0969da",
    };
    let _ = writeln!(
        out,
        "<g class=\"mark {kind}\" data-kind=\"{kind}\" data-at-ms=\"{at_ms}\" data-log-index=\"{}\"><line x1=\"{x}\" \
         x2=\"{x}\" y1=\"{}\" y2=\"{}\" stroke=\"{stroke}\" stroke-dasharray=\"4 3\"/><text x=\"{}\" y=\"{}\" \
         fill=\"{stroke}\" transform=\"rotate(-30 {x} {})\">{}</text><title>{} at {} (log index {}, wall time {})</title></g>",
        mark.entry.log_index,
        MARGIN_PX - 4,
        height - MARGIN_PX + 4,
        x + 2,
        MARGIN_PX - 8,
        MARGIN_PX - 8,
        escape(&mark.label),
        escape(&mark.label),
        clock_text(at_ms),
        mark.entry.log_index,
        utc_text(mark.entry.wall_time_ms),
        kind = mark.kind.as_str(),
    );
}

/// A stream time as a reader takes it: UTC (`2026-12-02T14:25:42.123Z`) when it is a Unix time
/// in ms, else the ms themselves (a scenario's clock).
pub(super) fn clock_text(at_ms: u64) -> String {
    if at_ms >= UNIX_MS_FROM { utc_text(at_ms) } else { format!("{at_ms} ms") }
}

/// The time axis: the left edge, the right edge (now) and ticks between, as UTC times of day (a
/// Unix stream time) or as time before now.
fn draw_axis(out: &mut String, scale: &Scale, height: u64) {
    let y = height - MARGIN_PX + 16;
    let span = scale.end_ms - scale.start_ms;
    for step in 0..=4u64 {
        let at_ms = scale.start_ms + span * step / 4;
        let label = if at_ms >= UNIX_MS_FROM {
            // `2026-12-02T14:25:42.123Z` → `14:25:42`, or with ms when the span is short.
            let text = utc_text(at_ms);
            let time = &text[11..text.len() - 1];
            if span < 10_000 { time.to_owned() } else { time[..8].to_owned() }
        } else if step == 4 {
            "now".to_owned()
        } else {
            format!("−{}", age(scale.end_ms - at_ms))
        };
        let _ = write!(
            out,
            "<text class=\"tick\" x=\"{}\" y=\"{y}\" text-anchor=\"{anchor}\" fill=\"#57606a\" data-at-ms=\"{at_ms}\">{}</text>",
            scale.x(at_ms),
            escape(&label),
            // The right edge's label ends at it: the drawing does not cut it off.
            anchor = if step == 4 { "end" } else { "middle" },
        );
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    /// 2026-12-02T14:25:42.000Z.
    const T0_MS: u64 = 1_796_221_542_000;

    fn entry(log_index: u64, at_ms: u64, kind: EntryKind, cause: Option<Cause>) -> HistoryEntry {
        HistoryEntry {
            log_index,
            stream_time_ms: at_ms,
            wall_time_ms: at_ms,
            kind,
            pool: Some("edge".into()),
            address: Some("10.0.0.10".parse().expect("an address")),
            cause,
            from: None,
            to: None,
            ownership_epoch: None,
            capture_epoch: None,
            node: None,
            verb: None,
            idempotency_key: None,
            detail: None,
        }
    }

    fn moved(
        log_index: u64,
        at_ms: u64,
        cause: Cause,
        from: Option<&str>,
        to: Option<&str>,
        epochs: (u64, u64),
    ) -> HistoryEntry {
        HistoryEntry {
            from: from.map(str::to_owned),
            to: to.map(str::to_owned),
            ownership_epoch: Some(epochs.0),
            capture_epoch: Some(epochs.1),
            ..entry(log_index, at_ms, EntryKind::Ownership, Some(cause))
        }
    }

    fn lane(entries: Vec<HistoryEntry>, owner: Option<&str>) -> Lane {
        Lane {
            pool: "edge".into(),
            address: "10.0.0.10".parse::<IpAddr>().expect("an address"),
            owner: owner.map(str::to_owned),
            entries,
        }
    }

    fn timeline(lanes: Vec<Lane>, now_ms: u64) -> TimelineLanes {
        TimelineLanes { changed: lanes.len(), lanes, unaddressed: Vec::new(), now_ms, reaches_back_to: 1 }
    }

    fn nodes() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    #[test]
    fn a_failover_is_a_band_per_holder_with_the_hand_over_and_the_fault_marked() {
        let mut failed = entry(5, T0_MS + 9_500, EntryKind::Failed, None);
        failed.node = Some("b".into());
        failed.verb = Some("assign-secondary-ip".into());
        let capture = HistoryEntry {
            kind: EntryKind::Capture,
            ..moved(6, T0_MS + 10_000, Cause::Desire, Some("b"), Some("b"), (2, 3))
        };
        let entries = vec![
            moved(2, T0_MS + 1_000, Cause::PoolApplied, None, Some("a"), (1, 1)),
            moved(4, T0_MS + 9_000, Cause::Liveness, Some("a"), Some("b"), (2, 2)),
            failed,
            capture,
        ];
        let svg = section(&timeline(vec![lane(entries, Some("b"))], T0_MS + 12_000), &nodes(), 3);
        assert!(svg.contains("data-holder=\"a\" data-ownership-epoch=\"1\""), "{svg}");
        assert!(
            svg.contains("data-holder=\"b\" data-ownership-epoch=\"2\" data-capture-epoch=\"2\""),
            "{svg}"
        );
        // The capture entry keeps the owner: a band of b with the new captureEpoch, no hand-over.
        assert!(
            svg.contains("data-holder=\"b\" data-ownership-epoch=\"2\" data-capture-epoch=\"3\""),
            "{svg}"
        );
        assert_eq!(svg.matches("class=\"handover\"").count(), 1, "{svg}");
        assert!(svg.contains("data-from=\"a\" data-to=\"b\" data-ownership-epoch=\"2\""), "{svg}");
        // The liveness move and the failed action are faults; the pool applied and the desire
        // are operator actions.
        let at = |ms: u64| format!("data-at-ms=\"{}\"", T0_MS + ms);
        assert!(svg.contains(&format!("data-kind=\"fault\" {}", at(9_000))), "{svg}");
        assert!(svg.contains(&format!("data-kind=\"fault\" {}", at(9_500))), "{svg}");
        assert!(svg.contains(&format!("data-kind=\"operator\" {}", at(1_000))), "{svg}");
        assert!(svg.contains(&format!("data-kind=\"operator\" {}", at(10_000))), "{svg}");
        assert!(svg.contains("liveness: a → b"), "{svg}");
        // Wall time readable, in UTC.
        assert!(svg.contains("2026-12-02T14:25:51.000Z"), "{svg}");
        assert!(svg.contains(">14:25:"), "the axis in UTC times of day: {svg}");
        assert!(svg.contains("1 of 1 addresses drawn: of the 3 addresses the filters keep"), "{svg}");
    }

    #[test]
    fn a_capture_before_any_hand_over_is_the_owner_of_that_time() {
        let capture = HistoryEntry {
            kind: EntryKind::Capture,
            ..moved(3, 2_000, Cause::Recapture, Some("a"), Some("a"), (1, 2))
        };
        let entries = vec![capture, moved(4, 3_000, Cause::Drain, Some("a"), Some("b"), (2, 3))];
        let svg = section(&timeline(vec![lane(entries, Some("b"))], 4_000), &nodes(), 1);
        assert!(
            svg.contains("data-holder=\"a\" data-ownership-epoch=\"1\" data-capture-epoch=\"2\""),
            "{svg}"
        );
        assert!(svg.contains("data-from=\"a\" data-to=\"b\""), "{svg}");
        // Not a Unix time: the axis counts back from now.
        assert!(svg.contains(">now</text>"), "{svg}");
    }

    #[test]
    fn no_lane_says_so_and_one_mark_per_record_and_kind() {
        let none = section(&timeline(Vec::new(), 5_000), &nodes(), 7);
        assert!(!none.contains("<svg") && none.contains("of the 7 addresses"), "{none}");
        // A drain that moved two addresses in one record is one mark.
        let mut other = lane(vec![moved(4, 3_000, Cause::Drain, Some("a"), Some("b"), (2, 2))], Some("b"));
        other.address = "10.0.0.11".parse().expect("an address");
        let two = timeline(
            vec![lane(vec![moved(4, 3_000, Cause::Drain, Some("a"), Some("b"), (2, 2))], Some("b")), other],
            5_000,
        );
        let svg = section(&two, &nodes(), 2);
        assert_eq!(svg.matches("<g class=\"lane\"").count(), 2, "{svg}");
        assert_eq!(svg.matches("class=\"mark operator\"").count(), 1, "{svg}");
    }

    #[test]
    fn names_from_the_log_are_escaped_in_the_picture() {
        let mut bad =
            lane(vec![moved(1, 1_000, Cause::Drain, Some("<b>"), Some("<b>"), (1, 1))], Some("<b>"));
        bad.pool = "p\"q".into();
        let svg = section(&timeline(vec![bad], 2_000), &nodes(), 1);
        assert!(!svg.contains("<b>") && !svg.contains("p\"q"), "{svg}");
        assert!(svg.contains("&lt;b&gt;") && svg.contains("p&quot;q"));
    }
}
