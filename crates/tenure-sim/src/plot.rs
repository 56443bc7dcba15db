//! `--plot FILE.svg`: a timeline — per address, who holds it (thick band), who should (thin line
//! below), and its captureEpoch — over stream time, with marks (faults, operator actions). People
//! would rather look at a failover than read it.
//!
//! The [`Timeline`] is fed data: the addresses and nodes to draw ([`Timeline::over`]), samples
//! ([`Timeline::sample_with`]: the head's desired holders and epochs, the holding NIC from where
//! the caller knows it) and marks. The simulator samples its provider's holdings (`world.rs`);
//! `tenure replay BACKUP --plot` samples the NICs the log's results and inventories say hold each
//! address (`recorded.rs`).
//!
//! Legibility rules: the header says how many addresses are drawn of how many; marks are drawn
//! in one colour no NIC can have (near-black, dashed; NICs are saturated hues) on a lane of their
//! own, with marks closer than [`FAULT_CLUSTER_PX`] merged into one numbered label (`F3 ×4`) and
//! listed in full below the chart; the time axis has ticks at round intervals from the origin;
//! the legend names each node with its NIC's colour.

use std::fmt::Write as _;
use std::net::IpAddr;

use tenure_core::federation::Federation;

/// Most addresses drawn.
pub const PLOTTED_ADDRESSES_MAX: usize = 16;
/// Most samples kept.
pub const SAMPLES_MAX: usize = 20_000;
/// Fault marks closer than this (in pixels) are drawn as one numbered cluster.
pub const FAULT_CLUSTER_PX: f64 = 10.0;
/// Most fault clusters listed under the chart (the rest are counted).
pub const FAULTS_LISTED_MAX: usize = 40;
/// The faults' colour: near-black, which no NIC's hue (65 % saturation) can be.
pub const FAULT_COLOR: &str = "#222222";

const LEFT: f64 = 170.0;
const WIDTH: f64 = 1100.0;
const ROW_HEIGHT: f64 = 28.0;
/// Where the fault lane starts.
const LANE_TOP: f64 = 62.0;
/// The fault lane's height (three staggered label heights).
const LANE_HEIGHT: f64 = 42.0;
const LINE_HEIGHT: f64 = 14.0;

/// Per plotted address at one moment: (first NIC holding it, desired holder's NIC, captureEpoch).
pub type PlotRow = (Option<String>, Option<String>, u64);

/// One moment of the plotted addresses.
#[derive(Clone, Debug)]
struct Sample {
    stream_time_ms: u64,
    rows: Vec<PlotRow>,
}

/// What `--plot` draws.
#[derive(Clone, Debug)]
pub struct Timeline {
    addresses: Vec<(String, IpAddr)>,
    /// How many addresses there are in all.
    addresses_total: usize,
    /// (node name, NIC), in the given order: the colour of a NIC is its index here.
    nodes: Vec<(String, String)>,
    samples: Vec<Sample>,
    marks: Vec<(u64, String)>,
    /// Where the time axis starts (stream time, ms).
    origin_ms: u64,
    /// Whose pools the addresses are (`the topology's pools`), for the header.
    scope: String,
    /// What a mark is (`fault`), for the header and the lane.
    mark_noun: String,
    /// Where the band's NIC holds the address (`on the provider`), for the header.
    held_where: String,
}

/// Fault marks drawn as one label: where, and what (in order).
struct Cluster {
    x: f64,
    first_ms: u64,
    faults: Vec<String>,
}

impl Timeline {
    /// An empty timeline over the first [`PLOTTED_ADDRESSES_MAX`] of `addresses` (pool, address),
    /// with `nodes` (name, NIC) in legend order; the time axis starts at 0, the marks are faults.
    #[must_use]
    pub fn over(addresses: impl IntoIterator<Item = (String, IpAddr)>, nodes: Vec<(String, String)>) -> Self {
        let mut addresses_total = 0;
        let mut plotted = Vec::new();
        for address in addresses {
            addresses_total += 1;
            if plotted.len() < PLOTTED_ADDRESSES_MAX {
                plotted.push(address);
            }
        }
        Self {
            addresses: plotted,
            addresses_total,
            nodes,
            samples: Vec::new(),
            marks: Vec::new(),
            origin_ms: 0,
            scope: "the topology's pools".to_owned(),
            mark_noun: "fault".to_owned(),
            held_where: "on the provider".to_owned(),
        }
    }

    /// The same, its time axis starting at `origin_ms`, its addresses described as `scope`'s
    /// (`the backup's pools`), a mark called a `mark_noun` (`event`), and the band's NIC said to
    /// hold the address `held_where` (`by the nodes' reports`).
    #[must_use]
    pub fn described(mut self, origin_ms: u64, scope: &str, mark_noun: &str, held_where: &str) -> Self {
        self.origin_ms = origin_ms;
        self.scope = scope.to_owned();
        self.mark_noun = mark_noun.to_owned();
        self.held_where = held_where.to_owned();
        self
    }

    /// The plotted addresses (pool, address), in row order.
    #[must_use]
    pub fn addresses(&self) -> &[(String, IpAddr)] {
        &self.addresses
    }

    /// Records a mark at `stream_time_ms`, described as it should read on the chart
    /// (`crash b`, `heal c`).
    pub fn mark(&mut self, stream_time_ms: u64, fault: &str) {
        self.marks.push((stream_time_ms, fault.to_owned()));
    }

    /// The rows of the plotted addresses at `head`: the desired holder's NIC and the captureEpoch
    /// from the head, the NIC holding each from `held(pool, address)`.
    pub fn rows_at(&self, head: &Federation, held: impl Fn(&str, IpAddr) -> Option<String>) -> Vec<PlotRow> {
        self.addresses
            .iter()
            .map(|(pool, address)| {
                let state = head.address(pool, *address);
                let desired = state
                    .and_then(|s| s.line.desired_holder.filter(|_| s.active))
                    .map(|id| head.nodes()[id as usize].spec.nic.clone());
                (held(pool, *address), desired, state.map_or(0, |s| s.line.epoch.get()))
            })
            .collect()
    }

    /// Records the plotted addresses now ([`Self::rows_at`]), at the head's stream time. At most
    /// [`SAMPLES_MAX`] samples are kept.
    pub fn sample_with(&mut self, head: &Federation, held: impl Fn(&str, IpAddr) -> Option<String>) {
        if self.samples.len() >= SAMPLES_MAX {
            return;
        }
        let rows = self.rows_at(head, held);
        self.push(head.stream_time_ms(), rows);
    }

    /// Records `rows` (one per plotted address, in order) at `stream_time_ms`; at most
    /// [`SAMPLES_MAX`] samples are kept.
    pub fn push(&mut self, stream_time_ms: u64, rows: Vec<PlotRow>) {
        debug_assert_eq!(rows.len(), self.addresses.len(), "one row per plotted address");
        if self.samples.len() < SAMPLES_MAX {
            self.samples.push(Sample { stream_time_ms, rows });
        }
    }

    /// The rows of the last sample, if any.
    #[must_use]
    pub fn last_rows(&self) -> Option<&[PlotRow]> {
        self.samples.last().map(|s| s.rows.as_slice())
    }

    /// A NIC's colour: a hue per node, spread by the golden angle; never near-black.
    fn color(&self, nic: &str) -> String {
        let index = self.nodes.iter().position(|(_, n)| n == nic).unwrap_or(0);
        nic_color(index)
    }

    /// The SVG document.
    #[must_use]
    pub fn to_svg(&self, title: &str) -> String {
        let origin = self.origin_ms;
        let end_ms = self.samples.last().map_or(1, |s| s.stream_time_ms.saturating_sub(origin).max(1));
        let x = |t: u64| LEFT + WIDTH * (t.saturating_sub(origin) as f64) / (end_ms as f64);
        let top = LANE_TOP + LANE_HEIGHT;
        let bottom = top + ROW_HEIGHT * self.addresses.len() as f64;
        let clusters = self.clusters(&x);
        let listed = clusters.len().min(FAULTS_LISTED_MAX);
        let list_lines = listed + usize::from(clusters.len() > listed);
        let height = bottom + 70.0 + LINE_HEIGHT * (list_lines as f64 + 1.0);
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="monospace" font-size="11">"#,
            LEFT + WIDTH + 20.0
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(svg, r#"<text x="10" y="20" font-size="14">{}</text>"#, escape(title));
        let _ = writeln!(
            svg,
            r#"<text x="10" y="36" class="drawn">addresses drawn: {} of {} (the first {} of {})</text>"#,
            self.addresses.len(),
            self.addresses_total,
            self.addresses.len(),
            escape(&self.scope)
        );
        let _ = writeln!(
            svg,
            r#"<text x="10" y="50">band: NIC holding the address {}; thin line: desired holder; numbers: captureEpoch; dashed dark lines: {}s (listed below)</text>"#,
            escape(&self.held_where),
            escape(&self.mark_noun)
        );
        self.draw_ticks(&mut svg, end_ms, &|t| x(t + origin), top, bottom);
        self.draw_rows(&mut svg, &x, top);
        draw_faults(&mut svg, &self.mark_noun, origin, &clusters[..listed], clusters.len(), bottom);
        self.draw_legend(&mut svg, bottom + 34.0);
        svg.push_str("</svg>\n");
        svg
    }

    /// The time axis: round ticks (1, 2 or 5 × 10ⁿ ms, about eight of them) with faint grid lines.
    fn draw_ticks(&self, svg: &mut String, end_ms: u64, x: &impl Fn(u64) -> f64, top: f64, bottom: f64) {
        let step = tick_step(end_ms);
        let mut t = 0;
        while t <= end_ms {
            let xt = x(t);
            let _ = writeln!(
                svg,
                r##"<line class="tick" x1="{xt:.1}" y1="{top}" x2="{xt:.1}" y2="{}" stroke="#dddddd"/>"##,
                bottom + 4.0
            );
            let _ = writeln!(
                svg,
                r#"<text x="{xt:.1}" y="{}" text-anchor="middle">{}</text>"#,
                bottom + 16.0,
                ms_label(t)
            );
            t += step;
        }
        let _ = writeln!(svg, r#"<text x="10" y="{}">stream time</text>"#, bottom + 16.0);
    }

    fn draw_rows(&self, svg: &mut String, x: &impl Fn(u64) -> f64, top: f64) {
        for (row, (pool, address)) in self.addresses.iter().enumerate() {
            let y = top + ROW_HEIGHT * row as f64;
            let _ = writeln!(svg, r#"<text x="10" y="{}">{}/{address}</text>"#, y + 14.0, escape(pool));
            // Runs of equal state become one shape each.
            let mut run_start = 0usize;
            for i in 1..=self.samples.len() {
                let same =
                    i < self.samples.len() && self.samples[i].rows[row] == self.samples[run_start].rows[row];
                if same {
                    continue;
                }
                let (held, desired, epoch) = &self.samples[run_start].rows[row];
                let x0 = x(self.samples[run_start].stream_time_ms);
                let x1 =
                    if i == self.samples.len() { LEFT + WIDTH } else { x(self.samples[i].stream_time_ms) };
                let w = (x1 - x0).max(0.5);
                if let Some(nic) = held {
                    let _ = writeln!(
                        svg,
                        r#"<rect x="{x0:.1}" y="{y}" width="{w:.1}" height="14" fill="{}"><title>{} (captureEpoch {epoch})</title></rect>"#,
                        self.color(nic),
                        escape(nic)
                    );
                }
                if let Some(nic) = desired {
                    let _ = writeln!(
                        svg,
                        r#"<rect x="{x0:.1}" y="{}" width="{w:.1}" height="3" fill="{}"/>"#,
                        y + 17.0,
                        self.color(nic)
                    );
                }
                if run_start == 0 || self.samples[run_start - 1].rows[row].2 != *epoch {
                    let _ =
                        writeln!(svg, r#"<text x="{x0:.1}" y="{}" font-size="8">{epoch}</text>"#, y + 27.0);
                }
                run_start = i;
            }
        }
    }

    /// One swatch per node: its name and NIC in the NIC's colour.
    fn draw_legend(&self, svg: &mut String, y: f64) {
        let _ = writeln!(svg, r#"<text x="10" y="{}">nodes (NIC)</text>"#, y + 9.0);
        for (i, (name, nic)) in self.nodes.iter().enumerate() {
            let lx = LEFT + 140.0 * i as f64;
            let _ = writeln!(
                svg,
                r#"<rect class="legend" x="{lx}" y="{y}" width="10" height="10" fill="{}"/>"#,
                nic_color(i)
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}">{} ({})</text>"#,
                lx + 14.0,
                y + 9.0,
                escape(name),
                escape(nic)
            );
        }
    }

    /// The fault marks, merged where closer than [`FAULT_CLUSTER_PX`].
    fn clusters(&self, x: &impl Fn(u64) -> f64) -> Vec<Cluster> {
        let mut marks = self.marks.clone();
        marks.sort_by_key(|(t, _)| *t);
        let mut clusters: Vec<Cluster> = Vec::new();
        for (t, fault) in marks {
            let xm = x(t);
            match clusters.last_mut() {
                Some(last) if xm - last.x < FAULT_CLUSTER_PX => last.faults.push(fault),
                _ => clusters.push(Cluster { x: xm, first_ms: t, faults: vec![fault] }),
            }
        }
        clusters
    }
}

/// Draws each listed cluster as a dashed line over the rows and a label `F<n>` (with `×k` when
/// it merges k faults) on the fault lane, staggered over three heights; then the list of them.
fn draw_faults(
    svg: &mut String,
    mark_noun: &str,
    origin_ms: u64,
    listed: &[Cluster],
    total: usize,
    bottom: f64,
) {
    let _ = writeln!(svg, r#"<text x="10" y="{}">{}s</text>"#, LANE_TOP + 18.0, escape(mark_noun));
    for (n, cluster) in listed.iter().enumerate() {
        let label = if cluster.faults.len() > 1 {
            format!("F{} ×{}", n + 1, cluster.faults.len())
        } else {
            format!("F{}", n + 1)
        };
        let ly = LANE_TOP + 12.0 * (n % 3) as f64 + 10.0;
        let _ = writeln!(
            svg,
            r#"<line class="fault" x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{bottom}" stroke="{FAULT_COLOR}" stroke-dasharray="3,3" stroke-opacity="0.6"><title>{}</title></line>"#,
            ly + 2.0,
            escape(&cluster.faults.join("; ")),
            x = cluster.x
        );
        let _ = writeln!(
            svg,
            r#"<text class="fault-label" x="{:.1}" y="{ly}" fill="{FAULT_COLOR}" font-size="9">{label}</text>"#,
            cluster.x + 2.0
        );
    }
    let list_top = bottom + 64.0;
    for (n, cluster) in listed.iter().enumerate() {
        let _ = writeln!(
            svg,
            r#"<text class="fault-item" x="10" y="{}" fill="{FAULT_COLOR}">F{} at {}: {}</text>"#,
            list_top + LINE_HEIGHT * n as f64,
            n + 1,
            ms_label(cluster.first_ms.saturating_sub(origin_ms)),
            escape(&summarize(&cluster.faults))
        );
    }
    if total > listed.len() {
        let _ = writeln!(
            svg,
            r#"<text x="10" y="{}" fill="{FAULT_COLOR}">… and {} more {} marks (first {} listed)</text>"#,
            list_top + LINE_HEIGHT * listed.len() as f64,
            total - listed.len(),
            escape(mark_noun),
            listed.len()
        );
    }
}

/// `crash b; pause c ×2` — equal descriptions counted, in first-seen order.
fn summarize(faults: &[String]) -> String {
    let mut counted: Vec<(&str, usize)> = Vec::new();
    for fault in faults {
        match counted.iter_mut().find(|(f, _)| f == fault) {
            Some((_, n)) => *n += 1,
            None => counted.push((fault, 1)),
        }
    }
    counted
        .iter()
        .map(|(f, n)| if *n > 1 { format!("{f} ×{n}") } else { (*f).to_owned() })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The colour of the node of `index`: golden-angle hues, saturated, mid lightness.
#[must_use]
pub fn nic_color(index: usize) -> String {
    let hue = (index * 137) % 360;
    format!("hsl({hue},65%,55%)")
}

/// A round tick step giving about eight ticks over `end_ms`.
fn tick_step(end_ms: u64) -> u64 {
    let rough = (end_ms / 8).max(1);
    let mut magnitude = 1u64;
    while magnitude.saturating_mul(10) <= rough {
        magnitude *= 10;
    }
    [1, 2, 5, 10].iter().map(|m| m * magnitude).find(|step| *step >= rough).unwrap_or(magnitude * 10)
}

fn ms_label(ms: u64) -> String {
    if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else if ms >= 1000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{ms} ms")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_about_eight() {
        assert_eq!(tick_step(8_000), 1_000);
        assert_eq!(tick_step(10_000), 2_000);
        assert_eq!(tick_step(30_000), 5_000);
        assert_eq!(tick_step(7), 1);
        for end in [1u64, 9, 99, 1_234, 56_789, 3_600_000] {
            let n = end / tick_step(end);
            assert!((1..=10).contains(&n) || end < 8, "{end}: {n} ticks");
        }
    }

    #[test]
    fn equal_faults_are_counted_in_first_seen_order() {
        let faults = ["pause c", "crash b", "pause c"].map(str::to_owned);
        assert_eq!(summarize(&faults), "pause c ×2; crash b");
    }

    #[test]
    fn no_node_colour_is_the_fault_colour_or_near_it() {
        for i in 0..64 {
            let c = nic_color(i);
            assert!(c.contains(",65%,55%)"), "{c}: saturated, mid lightness, never near-black");
            assert_ne!(c, FAULT_COLOR);
        }
    }
}
