//! How an error is told to a person: the chain of its causes, outermost first, each cause said once.
//!
//! Many errors repeat their cause in their own message and return it as their source too (ours and the libraries'
//! alike): printed with `{:#}` the cause appears two or three times. Here a cause already said is left out, and a
//! message that an inner one repeats with more detail gives way to it.

/// `outer: inner: innermost`, each text once.
pub fn chain(error: &anyhow::Error) -> String {
    tell(error.chain().map(|e| e.to_string()))
}

/// The same for any error and its sources.
pub fn chain_of(error: &dyn std::error::Error) -> String {
    let mut texts = vec![error.to_string()];
    let mut next = error.source();
    while let Some(e) = next {
        texts.push(e.to_string());
        next = e.source();
    }
    tell(texts)
}

fn tell(texts: impl IntoIterator<Item = String>) -> String {
    let mut said: Vec<String> = Vec::new();
    for text in texts {
        let text = text.trim().to_string();
        if text.is_empty() || said.iter().any(|s| has_part(s, &text)) {
            continue;
        }
        // An inner message that repeats an outer one whole, with more around it, says it better.
        said.retain(|s| !has_part(&text, s));
        said.push(text);
    }
    said.join(": ")
}

/// Whether `part` is one of the `: `-separated parts of `text`, or a run of them: a word inside a message does not
/// count.
fn has_part(text: &str, part: &str) -> bool {
    text == part
        || text.starts_with(&format!("{part}: "))
        || text.ends_with(&format!(": {part}"))
        || text.contains(&format!(": {part}: "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("target {target}: cannot read ca_file {path}: {source}")]
    struct ReadFile {
        target: String,
        path: String,
        source: std::io::Error,
    }

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let inner = ReadFile {
            target: "apiserver-a".into(),
            path: "/ca.crt".into(),
            source: io,
        };
        let e = anyhow::Error::new(inner).context("cannot read ca_file /ca.crt");
        // `{:#}` says the file and its cause three times.
        assert_eq!(format!("{e:#}").matches("No such file").count(), 2);
        assert_eq!(
            chain(&e),
            "target apiserver-a: cannot read ca_file /ca.crt: No such file or directory"
        );
    }

    #[test]
    fn distinct_causes_are_all_kept_in_order() {
        let e = anyhow::anyhow!("connection refused")
            .context("cannot list FlowSchemas")
            .context("check");
        assert_eq!(
            chain(&e),
            "check: cannot list FlowSchemas: connection refused"
        );
        // A word of an outer message inside an inner one is not a repetition.
        let e = anyhow::anyhow!("cannot serve on 127.0.0.1:9864").context("serve");
        assert_eq!(chain(&e), "serve: cannot serve on 127.0.0.1:9864");
        let io = std::io::Error::other("disk full");
        assert_eq!(chain_of(&io), "disk full");
    }
}
