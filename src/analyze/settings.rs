//! The `analysis:` section of the config file: the sliding window and how many flows are exported.
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
}

impl Default for AnalysisConfig {
    fn default() -> Self {
        Self {
            window: Interval(Duration::from_secs(60)),
            top_flows: 10,
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
        Ok(())
    }
}
