//! The failover timeline, drawn server-side as SVG: per address, who held it when (a band per
//! holder, coloured by node, labelled with its ownershipEpoch) over stream time, the hand-overs
//! marked, and the faults and operator actions as vertical lines across every lane — the
//! picture an operator wants after an incident. What it draws comes from [`Timeline`], which
//! the agent fills from its log ([`crate::agent::timeline`]); this file only draws.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::html::{age, escape};
pub use crate::agent::timeline::{HolderChange, Mark, MarkKind, Timeline};

/// Most addresses drawn (those whose holder changed last, among the filtered ones).
pub const TIMELINE_LANES_MAX: usize = 12;

/// Most holder changes drawn per address (its latest).
pub const CHANGES_PER_LANE_MAX: usize = 16;

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

/// The timeline as an SVG element (inside a `<section>`), for the addresses `shown` keeps (asked
/// with each address's pool, address and changes); `nodes` in the order that picks their colours.
#[must_use]
pub fn section(
    timeline: &Timeline,
    nodes: &[String],
    shown: impl Fn(&str, &str, &[&HolderChange]) -> bool,
) -> String {
    let mut out = String::from("<section id=\"timeline\"><h2>Failover timeline</h2>\n");
    let mut lanes: BTreeMap<(&str, &str), Vec<&HolderChange>> = BTreeMap::new();
    for change in &timeline.changes {
        lanes.entry((&change.pool, &change.address)).or_default().push(change);
    }
    lanes.retain(|(pool, address), changes| shown(pool, address, changes));
    if let Some(why) = &timeline.unavailable {
        let _ = writeln!(out, "<p class=\"muted\">no timeline: {}</p></section>", escape(why));
        return out;
    }
    if lanes.is_empty() {
        out.push_str(
            "<p class=\"muted\">no holder changes of the addresses shown in the log yet</p></section>\n",
        );
        return out;
    }
    // The addresses whose holder changed last; drawn in canonical order.
    let mut latest: Vec<((&str, &str), u64)> =
        lanes.iter().map(|(key, changes)| (*key, changes.last().map_or(0, |c| c.at_ms))).collect();
    latest.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    latest.truncate(TIMELINE_LANES_MAX);
    let mut keys: Vec<(&str, &str)> = latest.into_iter().map(|(key, _)| key).collect();
    keys.sort_unstable();
    let drawn: Vec<((&str, &str), &[&HolderChange])> = keys
        .iter()
        .map(|key| {
            let changes = &lanes[key];
            (*key, &changes[changes.len().saturating_sub(CHANGES_PER_LANE_MAX)..])
        })
        .collect();
    let start_ms = drawn.iter().filter_map(|(_, c)| c.first().map(|c| c.at_ms)).min().unwrap_or(0);
    let end_ms = timeline.now_ms.max(start_ms + 1);
    let scale = Scale { start_ms, end_ms };
    let height = MARGIN_PX * 2 + LANE_PX * drawn.len() as u64;
    let _ = writeln!(
        out,
        "<svg id=\"timeline-svg\" width=\"{WIDTH_PX}\" height=\"{height}\" viewBox=\"0 0 {WIDTH_PX} {height}\" \
         role=\"img\" aria-label=\"holders and epochs of {} addresses over stream time\" \
         data-start-ms=\"{start_ms}\" data-end-ms=\"{end_ms}\" font-size=\"11\" font-family=\"system-ui,sans-serif\">",
        drawn.len()
    );
    for (lane, ((pool, address), changes)) in drawn.iter().enumerate() {
        draw_lane(&mut out, &scale, lane as u64, pool, address, changes, nodes);
    }
    let marks: Vec<&Mark> =
        timeline.marks.iter().filter(|m| m.at_ms >= start_ms && m.at_ms <= end_ms).collect();
    for mark in &marks[marks.len().saturating_sub(MARKS_MAX)..] {
        draw_mark(&mut out, &scale, height, mark);
    }
    draw_axis(&mut out, &scale, height);
    out.push_str("</svg>\n");
    let _ = write!(
        out,
        "<p class=\"muted\">bands: the holder the log arbitrated, labelled with its ownershipEpoch \
         (captureEpoch in the tooltip); ▲ a hand-over; red lines faults, blue lines operator actions; \
         the last {} of stream time, up to {TIMELINE_LANES_MAX} addresses (those whose holder changed last; \
         filter to pick others).",
        age(end_ms - start_ms)
    );
    if let Some(index) = timeline.starts_at_index {
        let _ = write!(
            out,
            " The history starts at log index {index} (older records were compacted into a snapshot)."
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

fn draw_lane(
    out: &mut String,
    scale: &Scale,
    lane: u64,
    pool: &str,
    address: &str,
    changes: &[&HolderChange],
    nodes: &[String],
) {
    let top = MARGIN_PX + lane * LANE_PX;
    let _ = writeln!(
        out,
        "<g class=\"lane\" data-pool=\"{pool}\" data-address=\"{address}\"><text x=\"4\" y=\"{}\">{pool} {address}</text>",
        top + LANE_PX / 2 + 4,
        pool = escape(pool),
        address = escape(address),
    );
    let mut previous: Option<&HolderChange> = None;
    for (i, change) in changes.iter().enumerate() {
        let until_ms = changes.get(i + 1).map_or(scale.end_ms, |next| next.at_ms);
        let (x0, x1) = (scale.x(change.at_ms), scale.x(until_ms).max(scale.x(change.at_ms) + 1));
        let tooltip = format!(
            "{} {}: {} from {} ms to {} ms, ownershipEpoch {}, captureEpoch {} ({})",
            pool,
            address,
            change.holder.as_deref().unwrap_or("no holder"),
            change.at_ms,
            until_ms,
            change.ownership_epoch,
            change.capture_epoch,
            change.cause
        );
        match &change.holder {
            Some(holder) => {
                let _ = write!(
                    out,
                    "<rect class=\"hold\" x=\"{x0}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" data-holder=\"{h}\" \
                     data-ownership-epoch=\"{}\" data-capture-epoch=\"{}\" data-from-ms=\"{}\" data-to-ms=\"{until_ms}\">\
                     <title>{}</title></rect>",
                    top + 5,
                    x1 - x0,
                    LANE_PX - 10,
                    colour(nodes, holder),
                    change.ownership_epoch,
                    change.capture_epoch,
                    change.at_ms,
                    escape(&tooltip),
                    h = escape(holder),
                );
                if x1 - x0 >= 40 {
                    let _ = write!(
                        out,
                        "<text x=\"{}\" y=\"{}\" fill=\"#fff\" pointer-events=\"none\">{} · {}</text>",
                        x0 + 4,
                        top + LANE_PX / 2 + 4,
                        escape(holder),
                        change.ownership_epoch
                    );
                }
            }
            None => {
                let _ = write!(
                    out,
                    "<line class=\"nobody\" x1=\"{x0}\" x2=\"{x1}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#8c959f\" \
                     stroke-dasharray=\"2 3\" data-ownership-epoch=\"{}\" data-from-ms=\"{}\"><title>{}</title></line>",
                    change.ownership_epoch,
                    change.at_ms,
                    escape(&tooltip),
                    y = top + LANE_PX / 2,
                );
            }
        }
        if let Some(before) = previous.filter(|before| before.holder != change.holder) {
            let _ = write!(
                out,
                "<path class=\"handover\" d=\"M{x0} {} l-5 8 h10 z\" fill=\"#1b1f24\" data-from=\"{}\" data-to=\"{}\" \
                 data-ownership-epoch=\"{}\" data-capture-epoch=\"{}\" data-at-ms=\"{}\"><title>{}</title></path>",
                top + LANE_PX - 8,
                escape(before.holder.as_deref().unwrap_or("")),
                escape(change.holder.as_deref().unwrap_or("")),
                change.ownership_epoch,
                change.capture_epoch,
                change.at_ms,
                escape(&format!(
                    "hand-over {} → {} at {} ms ({}): ownershipEpoch {} → {}",
                    before.holder.as_deref().unwrap_or("nobody"),
                    change.holder.as_deref().unwrap_or("nobody"),
                    change.at_ms,
                    change.cause,
                    before.ownership_epoch,
                    change.ownership_epoch
                )),
            );
        }
        previous = Some(change);
        out.push('\n');
    }
    out.push_str("</g>\n");
}

fn draw_mark(out: &mut String, scale: &Scale, height: u64, mark: &Mark) {
    let x = scale.x(mark.at_ms);
    let stroke = match mark.kind {
        MarkKind::Fault => "#cf222e",
        MarkKind::Operator => "#0969da",
    };
    let _ = writeln!(
        out,
        "<g class=\"mark {kind}\" data-kind=\"{kind}\" data-at-ms=\"{}\"><line x1=\"{x}\" x2=\"{x}\" y1=\"{}\" y2=\"{}\" \
         stroke=\"{stroke}\" stroke-dasharray=\"4 3\"/><text x=\"{}\" y=\"{}\" fill=\"{stroke}\" transform=\"rotate(-30 {x} {})\">{}</text>\
         <title>{} at {} ms</title></g>",
        mark.at_ms,
        MARGIN_PX - 4,
        height - MARGIN_PX + 4,
        x + 2,
        MARGIN_PX - 8,
        MARGIN_PX - 8,
        escape(&mark.label),
        escape(&mark.label),
        mark.at_ms,
        kind = mark.kind.as_str(),
    );
}

/// The time axis: the left edge, the right edge (now) and a few ticks, as time before now.
fn draw_axis(out: &mut String, scale: &Scale, height: u64) {
    let y = height - MARGIN_PX + 16;
    let span = scale.end_ms - scale.start_ms;
    for step in 0..=4u64 {
        let at_ms = scale.start_ms + span * step / 4;
        let label = if step == 4 { "now".to_owned() } else { format!("−{}", age(scale.end_ms - at_ms)) };
        let _ = write!(
            out,
            "<text class=\"tick\" x=\"{}\" y=\"{y}\" text-anchor=\"middle\" fill=\"#57606a\">{}</text>",
            scale.x(at_ms),
            escape(&label)
        );
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(address: &str, at_ms: u64, holder: Option<&str>, epoch: u64) -> HolderChange {
        HolderChange {
            pool: "edge".into(),
            address: address.into(),
            at_ms,
            holder: holder.map(str::to_owned),
            ownership_epoch: epoch,
            capture_epoch: epoch,
            cause: "liveness".into(),
        }
    }

    fn nodes() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    #[test]
    fn a_failover_is_a_band_per_holder_with_the_hand_over_marked() {
        let timeline = Timeline {
            changes: vec![change("10.0.0.10", 1_000, Some("a"), 1), change("10.0.0.10", 9_000, Some("b"), 2)],
            marks: vec![Mark { at_ms: 8_500, kind: MarkKind::Fault, label: "a expired".into() }],
            now_ms: 12_000,
            starts_at_index: None,
            unavailable: None,
        };
        let svg = section(&timeline, &nodes(), |_, _, _| true);
        assert!(svg.contains("data-holder=\"a\" data-ownership-epoch=\"1\""), "{svg}");
        assert!(svg.contains("data-holder=\"b\" data-ownership-epoch=\"2\""), "{svg}");
        assert!(svg.contains("class=\"handover\""), "{svg}");
        assert!(svg.contains("data-from=\"a\" data-to=\"b\" data-ownership-epoch=\"2\""), "{svg}");
        assert!(svg.contains("data-kind=\"fault\" data-at-ms=\"8500\""), "{svg}");
        assert_eq!(svg.matches("class=\"handover\"").count(), 1, "{svg}");
    }

    #[test]
    fn only_the_addresses_shown_and_at_most_the_lane_limit_are_drawn() {
        let changes: Vec<HolderChange> =
            (0..30).map(|i| change(&format!("10.0.0.{i}"), 1_000 + i, Some("a"), 1)).collect();
        let timeline = Timeline {
            changes,
            marks: Vec::new(),
            now_ms: 5_000,
            starts_at_index: Some(7),
            unavailable: None,
        };
        let svg = section(&timeline, &nodes(), |_, _, _| true);
        assert_eq!(svg.matches("<g class=\"lane\"").count(), TIMELINE_LANES_MAX);
        // The latest changed are drawn: 10.0.0.29 is, 10.0.0.0 is not.
        assert!(svg.contains("data-address=\"10.0.0.29\"") && !svg.contains("data-address=\"10.0.0.0\""));
        assert!(svg.contains("starts at log index 7"));
        let one = section(&timeline, &nodes(), |_, address, _| address == "10.0.0.3");
        assert_eq!(one.matches("<g class=\"lane\"").count(), 1);
        let none = section(&timeline, &nodes(), |_, _, _| false);
        assert!(!none.contains("<svg"), "{none}");
    }

    #[test]
    fn names_from_the_log_are_escaped_in_the_picture() {
        let mut bad = change("10.0.0.10", 1_000, Some("<b>"), 1);
        bad.pool = "p\"q".into();
        let timeline = Timeline {
            changes: vec![bad],
            marks: vec![Mark { at_ms: 1_000, kind: MarkKind::Operator, label: "drain <b>".into() }],
            now_ms: 2_000,
            starts_at_index: None,
            unavailable: None,
        };
        let svg = section(&timeline, &nodes(), |_, _, _| true);
        assert!(!svg.contains("<b>") && !svg.contains("p\"q"), "{svg}");
        assert!(svg.contains("&lt;b&gt;") && svg.contains("p&quot;q"));
    }
}
