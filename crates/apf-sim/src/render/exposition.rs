//! `/metrics` in client_golang's text format: each family with its HELP (stability and deprecation as the
//! version prints them) and TYPE, samples and histograms, families sorted by name as the registry gathers them.
use std::fmt::Write as _;

use super::go::go_float;
use crate::simulator::Histogram;

pub(super) struct Family {
    name: String,
    text: String,
}

pub(super) struct Metrics {
    pub(super) minor: u32,
    pub(super) families: Vec<Family>,
}

impl Metrics {
    /// Starts an APF family: HELP with the version's stability and deprecation text.
    pub(super) fn apf(
        &mut self,
        name: &str,
        typ: &str,
        help: &str,
        beta_from: Option<u32>,
        deprecated: Option<&str>,
    ) -> usize {
        let stab = match beta_from {
            Some(b) if self.minor >= b => "BETA",
            _ => "ALPHA",
        };
        let dep = deprecated
            .map(|d| format!("(Deprecated since {d}) "))
            .unwrap_or_default();
        self.raw(
            &format!("apiserver_flowcontrol_{name}"),
            typ,
            &format!("[{stab}] {dep}{help}"),
        )
    }
    pub(super) fn raw(&mut self, name: &str, typ: &str, help: &str) -> usize {
        self.families.push(Family {
            name: name.to_string(),
            text: format!("# HELP {name} {help}\n# TYPE {name} {typ}\n"),
        });
        self.families.len() - 1
    }
    pub(super) fn sample(&mut self, fam: usize, suffix: &str, labels: &str, v: f64) {
        let f = &mut self.families[fam];
        let _ = if labels.is_empty() {
            writeln!(f.text, "{}{suffix} {}", f.name, go_float(v))
        } else {
            writeln!(f.text, "{}{suffix}{{{labels}}} {}", f.name, go_float(v))
        };
    }
    pub(super) fn histogram(&mut self, fam: usize, labels: &str, bounds: &[f64], h: &Histogram) {
        let mut cum = 0;
        for (i, b) in bounds.iter().enumerate() {
            cum += h.counts[i];
            self.sample(
                fam,
                "_bucket",
                &format!("{labels},le=\"{}\"", go_float(*b)),
                cum as f64,
            );
        }
        cum += h.counts[bounds.len()];
        self.sample(fam, "_bucket", &format!("{labels},le=\"+Inf\""), cum as f64);
        self.sample(fam, "_sum", labels, h.sum);
        self.sample(fam, "_count", labels, h.count as f64);
    }
    pub(super) fn finish(mut self) -> String {
        // The registry gathers families sorted by name.
        self.families.sort_by(|a, b| a.name.cmp(&b.name));
        self.families.into_iter().map(|f| f.text).collect()
    }
}

pub(super) fn fs_labels(pl: &str, fs: &str) -> String {
    format!("flow_schema=\"{fs}\",priority_level=\"{pl}\"")
}
