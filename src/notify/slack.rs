//! Slack incoming webhook.
//!
//! Message layout: the top-level `text` is the title (`[FIRING:2] APFHeadroomLow workload-low`): what
//! notifications and screen readers show. The body is one attachment `{color, fallback, blocks}` so the colour bar
//! (danger for a firing critical, warning for a firing warning, good when resolved) sits beside the Block Kit
//! content: a header, then per alert a section (status, labels, summary, description, top flows, remediation), a
//! section with the remediation manifest in a code block, and a context line with the runbook link and start time.
//! Slack's limits hold: at most 50 blocks (alerts that do not fit are counted in a last context block that links to
//! apf-monitor), 3000 characters per section text, 150 per header, each cut with "…".
//!
//! The webhook URL is a secret: errors and logs name only its scheme and host.
use std::time::Duration;

// Slack's mrkdwn control characters are exactly `&`, `<` and `>`, which `encode_text` escapes (and nothing else);
// everything user-visible goes through it.
use html_escape::encode_text;
use serde_json::{json, Value};

use super::format::{annotation, identity_labels, rfc3339, severity, title, truncate_chars};
use super::http::{self, UrlSource};
use super::{Notification, NotifyError, Receiver, SendFuture};
use crate::alert::Alert;
use crate::notify::SlackConfig;

pub const MAX_BLOCKS: usize = 50;
pub const MAX_SECTION_CHARS: usize = 3000;
pub const MAX_HEADER_CHARS: usize = 150;
/// Manifests are long YAML: keep the message readable and link to the full text.
const MAX_MANIFEST_CHARS: usize = 1500;

pub struct Slack {
    name: String,
    url: UrlSource,
    channel: Option<String>,
    client: reqwest::Client,
}

impl Slack {
    pub fn new(name: &str, cfg: &SlackConfig, timeout: Duration) -> Result<Self, String> {
        let url = UrlSource::new(
            cfg.webhook_url.as_deref(),
            cfg.webhook_url_file.as_ref(),
            "webhook_url",
        )?;
        Ok(Self {
            name: name.to_string(),
            url,
            channel: cfg.channel.clone(),
            client: http::client(timeout)?,
        })
    }

    async fn post(&self, n: &Notification) -> Result<(), NotifyError> {
        let url = self.url.resolve().await?;
        let shown = http::redact(&url);
        let mut payload = payload(n);
        if let (Some(channel), Some(obj)) = (&self.channel, payload.as_object_mut()) {
            obj.insert("channel".into(), Value::String(channel.clone()));
        }
        let body = serde_json::to_vec(&payload)
            .map_err(|e| NotifyError::Permanent(format!("cannot encode the Slack message: {e}")))?;
        let reply = http::post_json(&self.client, url, &shown, body, None).await?;
        http::classify(&reply, &shown)
    }
}

impl Receiver for Slack {
    fn name(&self) -> &str {
        &self.name
    }

    fn send<'a>(&'a self, notification: &'a Notification) -> SendFuture<'a> {
        Box::pin(self.post(notification))
    }
}

/// Escapes and cuts to `max` characters of escaped text without splitting an entity; a cut ends with "…".
pub fn escape_truncated(text: &str, max: usize) -> String {
    cut_mrkdwn(&encode_text(text), max)
}

/// danger: a critical fires; warning: only warnings fire; good: all resolved.
pub fn color(n: &Notification) -> &'static str {
    if n.firing().any(|a| severity(a) == "critical") {
        "danger"
    } else if n.firing().next().is_some() {
        "warning"
    } else {
        "good"
    }
}

/// The whole message body.
pub fn payload(n: &Notification) -> Value {
    let title = title(n);
    let mut blocks = vec![json!({
        "type": "header",
        "text": {"type": "plain_text", "text": truncate_chars(&title, MAX_HEADER_CHARS), "emoji": true},
    })];
    // Keep one block for the "N more" line.
    let budget = MAX_BLOCKS - 1;
    let mut shown = 0;
    for alert in &n.alerts {
        let alert_blocks = alert_blocks(alert);
        if blocks.len() + alert_blocks.len() > budget {
            break;
        }
        blocks.extend(alert_blocks);
        shown += 1;
    }
    let hidden = n.alerts.len() - shown;
    if hidden > 0 {
        let mut more = format!(
            "…and {hidden} more alert{} not shown here",
            if hidden == 1 { "" } else { "s" }
        );
        if !n.external_url.is_empty() {
            more.push_str(&format!(": <{}|apf-monitor>", encode_text(&n.external_url)));
        }
        blocks.push(json!({
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": truncate_chars(&more, MAX_SECTION_CHARS)}],
        }));
    }
    json!({
        "text": encode_text(&title),
        "attachments": [{
            "color": color(n),
            "fallback": encode_text(&title),
            "blocks": blocks,
        }],
    })
}

fn alert_blocks(a: &Alert) -> Vec<Value> {
    let status = if a.is_resolved() {
        "RESOLVED"
    } else {
        "FIRING"
    };
    let mut text = format!(
        "*{status}* {} `{}`",
        encode_text(severity(a)),
        encode_text(&identity_labels(a))
    );
    let summary = annotation(a, "summary").unwrap_or_else(|| a.alertname());
    text.push_str(&format!("\n*{}*", encode_text(summary)));
    if let Some(d) = annotation(a, "description") {
        text.push_str(&format!("\n{}", encode_text(d)));
    }
    if let Some(f) = annotation(a, "top_flows") {
        text.push_str(&format!("\n*Top flows*\n{}", encode_text(f)));
    }
    if let Some(r) = annotation(a, "remediation") {
        text.push_str(&format!("\n*Remediation*\n{}", encode_text(r)));
    }
    let mut blocks = vec![section(&cut_mrkdwn(&text, MAX_SECTION_CHARS))];
    if let Some(m) = annotation(a, "remediation_manifest") {
        // "```\n" + "\n```" take 8 characters of the section.
        let inner = escape_truncated(m.trim_end(), MAX_MANIFEST_CHARS.min(MAX_SECTION_CHARS - 8));
        blocks.push(section(&format!("```\n{inner}\n```")));
    }
    let mut context = Vec::new();
    if let Some(url) = annotation(a, "runbook_url") {
        context.push(format!("<{}|Runbook>", encode_text(url)));
    }
    context.push(format!("since {}", rfc3339(a.starts_at)));
    if let Some(end) = a.ends_at {
        context.push(format!("resolved {}", rfc3339(end)));
    }
    blocks.push(json!({
        "type": "context",
        "elements": [{"type": "mrkdwn", "text": truncate_chars(&context.join(" · "), MAX_SECTION_CHARS)}],
    }));
    blocks
}

fn section(text: &str) -> Value {
    json!({"type": "section", "text": {"type": "mrkdwn", "text": text}})
}

/// Cuts already-escaped mrkdwn to `max` characters without leaving half an entity (`&am…`).
fn cut_mrkdwn(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    if let Some(amp) = cut.rfind('&') {
        if !cut[amp..].contains(';') {
            cut.truncate(amp);
        }
    }
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn alert(i: usize, sev: &str, resolved: bool) -> Alert {
        let mut annotations = BTreeMap::new();
        annotations.insert("summary".into(), format!("headroom <20% & falling on {i}"));
        annotations.insert("description".into(), "x".repeat(5000));
        annotations.insert("remediation_manifest".into(), "y: <z>\n".repeat(1000));
        annotations.insert(
            "runbook_url".into(),
            "https://example.com/rb?a=1&b=2".into(),
        );
        Alert {
            labels: [
                ("alertname".to_string(), "APFHeadroomLow".to_string()),
                ("severity".to_string(), sev.to_string()),
                ("priority_level".to_string(), format!("level-{i}")),
            ]
            .into(),
            annotations,
            starts_at: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            ends_at: resolved.then(|| UNIX_EPOCH + Duration::from_secs(1_700_000_100)),
            generator_url: String::new(),
        }
    }

    fn notification(alerts: Vec<Alert>) -> Notification {
        Notification {
            receiver: "slack".into(),
            group_key: "{}".into(),
            group_labels: [("alertname".to_string(), "APFHeadroomLow".to_string())].into(),
            common_labels: BTreeMap::new(),
            common_annotations: BTreeMap::new(),
            alerts,
            external_url: "http://apf-monitor:8080".into(),
        }
    }

    #[test]
    fn escaping() {
        assert_eq!(encode_text("a<b>&c"), "a&lt;b&gt;&amp;c");
        // Quotes mean nothing to mrkdwn and stay as typed.
        assert_eq!(encode_text(r#"say "hi" it's"#), r#"say "hi" it's"#);
        assert_eq!(escape_truncated("<<<<", 9), "&lt;&lt;…");
        assert_eq!(escape_truncated("a<b", 6), "a&lt;b", "fits: not cut");
        assert_eq!(escape_truncated("ab<cd", 5), "ab…", "never half an entity");
        assert_eq!(escape_truncated("é&é&", 8), "é&amp;é…", "counts characters");
        assert_eq!(cut_mrkdwn("ab&amp;cd", 5), "ab…");
        assert_eq!(cut_mrkdwn("ab&amp;cd", 8), "ab&amp;…");
    }

    #[test]
    fn colours() {
        assert_eq!(
            color(&notification(vec![alert(0, "critical", false)])),
            "danger"
        );
        assert_eq!(
            color(&notification(vec![alert(0, "warning", false)])),
            "warning"
        );
        assert_eq!(
            color(&notification(vec![
                alert(0, "critical", true),
                alert(1, "warning", false)
            ])),
            "warning"
        );
        assert_eq!(
            color(&notification(vec![alert(0, "critical", true)])),
            "good"
        );
    }

    #[test]
    fn limits_hold_with_many_long_alerts() {
        let n = notification((0..60).map(|i| alert(i, "warning", false)).collect());
        let p = payload(&n);
        assert_eq!(p["text"], "[FIRING:60] APFHeadroomLow");
        let blocks = p["attachments"][0]["blocks"].as_array().unwrap();
        assert!(blocks.len() <= MAX_BLOCKS);
        for b in blocks {
            if let Some(t) = b["text"]["text"].as_str() {
                assert!(t.chars().count() <= MAX_SECTION_CHARS, "{}", t.len());
                assert!(!t.contains("<20%"), "unescaped: {t}");
            }
        }
        let last = blocks.last().unwrap()["elements"][0]["text"]
            .as_str()
            .unwrap();
        assert!(last.contains("more alerts"), "{last}");
        assert!(blocks[1]["text"]["text"].as_str().unwrap().ends_with('…'));
    }
}
