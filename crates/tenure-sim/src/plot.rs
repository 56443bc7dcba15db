//! `--plot FILE.svg`: one seed's timeline — per address, who holds it on the provider (thick
//! band), who should (thin line below), and its captureEpoch — over stream time, with faults
//! marked. People would rather look at a failover than read it.

use std::fmt::Write as _;
use std::net::IpAddr;

use crate::sim_provider::SimProvider;
use tenure_core::federation::Federation;

use crate::topology::Topology;

/// Most addresses drawn.
pub const PLOTTED_ADDRESSES_MAX: usize = 16;
/// Most samples kept.
pub const SAMPLES_MAX: usize = 20_000;

/// One moment of the plotted addresses.
#[derive(Clone, Debug)]
struct Sample {
    stream_time_ms: u64,
    /// Per plotted address: (first NIC holding it, desired holder's NIC, captureEpoch).
    rows: Vec<(Option<String>, Option<String>, u64)>,
}

/// What `--plot` draws.
#[derive(Clone, Debug)]
pub struct Timeline {
    addresses: Vec<(String, IpAddr)>,
    nics: Vec<String>,
    samples: Vec<Sample>,
    marks: Vec<(u64, String)>,
}

impl Timeline {
    /// An empty timeline over the first addresses of the topology.
    #[must_use]
    pub fn new(topology: &Topology) -> Self {
        let addresses = topology
            .pools
            .iter()
            .flat_map(|pool| pool.addresses.iter().map(|a| (pool.name.clone(), *a)))
            .take(PLOTTED_ADDRESSES_MAX)
            .collect();
        let nics = topology.nodes.iter().map(|n| n.nic.clone()).collect();
        Self { addresses, nics, samples: Vec::new(), marks: Vec::new() }
    }

    /// Records a fault at `stream_time_ms`.
    pub fn mark(&mut self, stream_time_ms: u64, fault: &str) {
        self.marks.push((stream_time_ms, fault.to_owned()));
    }

    /// Records the plotted addresses now.
    pub fn sample(&mut self, head: &Federation, provider: &SimProvider) {
        if self.samples.len() >= SAMPLES_MAX {
            return;
        }
        let rows = self
            .addresses
            .iter()
            .map(|(pool, address)| {
                let held = provider.holdings().get(address).and_then(|n| n.iter().next().cloned());
                let state = head.address(pool, *address);
                let desired = state
                    .and_then(|s| s.line.desired_holder.filter(|_| s.active))
                    .map(|id| head.nodes()[id].spec.nic.clone());
                (held, desired, state.map_or(0, |s| s.line.epoch.get()))
            })
            .collect();
        self.samples.push(Sample { stream_time_ms: head.stream_time_ms(), rows });
    }

    fn color(&self, nic: &str) -> String {
        let index = self.nics.iter().position(|n| n == nic).unwrap_or(0);
        let hue = (index * 137) % 360;
        format!("hsl({hue},65%,55%)")
    }

    /// The SVG document.
    #[must_use]
    pub fn to_svg(&self, title: &str) -> String {
        let left = 170.0;
        let width = 1100.0;
        let row_height = 28.0;
        let top = 50.0;
        let end_ms = self.samples.last().map_or(1, |s| s.stream_time_ms.max(1));
        let x = |t: u64| left + width * (t as f64) / (end_ms as f64);
        let height = top + row_height * self.addresses.len() as f64 + 60.0;
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="monospace" font-size="11">"#,
            left + width + 20.0
        );
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(svg, r#"<text x="10" y="20" font-size="14">{}</text>"#, escape(title));
        let _ = writeln!(
            svg,
            r#"<text x="10" y="38">band: NIC holding the address on the provider; thin line: desired holder; numbers: captureEpoch; red: faults</text>"#
        );
        for (row, (pool, address)) in self.addresses.iter().enumerate() {
            let y = top + row_height * row as f64;
            let _ = writeln!(svg, r#"<text x="10" y="{}">{pool}/{address}</text>"#, y + 14.0);
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
                    if i == self.samples.len() { left + width } else { x(self.samples[i].stream_time_ms) };
                let w = (x1 - x0).max(0.5);
                if let Some(nic) = held {
                    let _ = writeln!(
                        svg,
                        r#"<rect x="{x0:.1}" y="{y}" width="{w:.1}" height="14" fill="{}"><title>{nic} (captureEpoch {epoch})</title></rect>"#,
                        self.color(nic)
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
        let bottom = top + row_height * self.addresses.len() as f64;
        for (t, fault) in &self.marks {
            let xm = x(*t);
            let _ = writeln!(
                svg,
                r#"<line x1="{xm:.1}" y1="{top}" x2="{xm:.1}" y2="{bottom}" stroke="red" stroke-opacity="0.35"><title>{}</title></line>"#,
                escape(fault)
            );
        }
        let _ = writeln!(svg, r#"<text x="{left}" y="{}">0 ms</text>"#, bottom + 20.0);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}">{end_ms} ms (stream time)</text>"#,
            left + width - 120.0,
            bottom + 20.0
        );
        for (i, nic) in self.nics.iter().enumerate() {
            let lx = left + 90.0 * i as f64;
            let _ = writeln!(
                svg,
                r#"<rect x="{lx}" y="{}" width="10" height="10" fill="{}"/>"#,
                bottom + 32.0,
                self.color(nic)
            );
            let _ = writeln!(svg, r#"<text x="{}" y="{}">{nic}</text>"#, lx + 14.0, bottom + 41.0);
        }
        svg.push_str("</svg>\n");
        svg
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
