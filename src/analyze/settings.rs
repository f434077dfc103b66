//! The `analysis:` section of the config file: the sliding window, the longer lookback of recurring saturation, and
//! how many flows are exported.
use std::time::Duration;

use serde::Deserialize;

use crate::values::Interval;

#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct AnalysisConfig {
    /// Rates, percentiles, trends and flow means cover this sliding window.
    pub window: Interval,
    /// Flows exported per priority level and replica (`apf_flow_*`).
    pub top_flows: usize,
    /// The episodes in which a level was full (95 % of its limit in use or more) are counted over this longer
    /// lookback: the `APFSaturationRecurring` rule and `apf_priority_level_saturated_ratio` read them. At least
    /// `window`.
    pub lookback: Interval,
    /// Replay each remediation's change in the simulator and end the remediation with its predicted effect (about
    /// a second of one core per level under pressure, each at most once a minute, off the scrape path). `false`:
    /// the remediations carry no prediction (`plan --load` still makes one on demand).
    pub predictions: bool,
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        Self {
            window: Interval(Duration::from_secs(60)),
            top_flows: 10,
            lookback: Interval(Duration::from_secs(300)),
            predictions: true,
        }
    }
}

impl AnalysisConfig {
    /// A window must hold at least two scrapes for a rate or a trend; `at` says on which line a key is.
    pub fn validate(
        &self,
        scrape_interval: Duration,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(), String> {
        if self.window.0 < scrape_interval * 2 {
            return Err(format!(
                "analysis.window ({}) must cover at least two scrape intervals ({}){}",
                humantime::format_duration(self.window.0),
                humantime::format_duration(scrape_interval),
                at("analysis.window")
            ));
        }
        if self.lookback.0 < self.window.0 {
            return Err(format!(
                "analysis.lookback ({}) must be at least analysis.window ({}): recurring saturation is counted over \
                 several windows{}",
                humantime::format_duration(self.lookback.0),
                humantime::format_duration(self.window.0),
                at("analysis.lookback")
            ));
        }
        Ok(())
    }
}
