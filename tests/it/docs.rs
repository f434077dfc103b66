//! The book (docs/, mdBook) and README cannot rot: the generated reference pages are what the code generates, every
//! page is in the book's table of contents, every internal link and anchor resolves, and every `apf-monitor` command
//! line they show parses with the real CLI. `APF_MONITOR_WRITE_DOCS=1 cargo test --test it docs::` rewrites the
//! generated pages.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const REPOSITORY: &str = "https://github.com/apf-monitor/apf-monitor/blob/main/";

fn docs() -> PathBuf {
    Path::new(ROOT).join("docs")
}

/// Every Markdown page of the book, relative to docs/, and README.md (as `../README.md`).
fn pages() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, base, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                let rel = path
                    .strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    walk(&docs(), &docs(), &mut out);
    out.insert(
        "../README.md".into(),
        std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap(),
    );
    out
}

/// The text outside fenced code blocks, and the fenced blocks with their info string.
fn split_code(text: &str) -> (String, Vec<(String, String)>) {
    let mut prose = String::new();
    let mut blocks = Vec::new();
    let mut block: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            match block.take() {
                Some(b) => blocks.push(b),
                None => block = Some((info.trim().to_string(), String::new())),
            }
            continue;
        }
        match &mut block {
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
    }
    (prose, blocks)
}

/// mdBook's (and GitHub's) id of a heading: lower case, spaces to `-`, other punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let (prose, _) = split_code(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose.lines() {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#').trim();
        let id = slug(heading);
        let n = seen.entry(id.clone()).or_default();
        out.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    out
}

/// The `[text](target)` links of the prose (inline code left out).
fn links(text: &str) -> Vec<String> {
    let (prose, _) = split_code(text);
    let mut out = Vec::new();
    for line in prose.lines() {
        // Inline code spans hold no links.
        let mut plain = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                plain.push(c);
            }
        }
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

/// Resolves `target`, written in `page` (relative to docs/), to a path relative to docs/ and an anchor.
fn resolve(page: &str, target: &str) -> (String, Option<String>) {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a.to_string())),
        None => (target, None),
    };
    if path.is_empty() {
        return (page.to_string(), anchor);
    }
    let base = Path::new(page).parent().unwrap_or(Path::new(""));
    let mut parts: Vec<String> = Vec::new();
    for c in base.join(path).components() {
        match c {
            std::path::Component::ParentDir if parts.pop().is_none() => parts.push("..".into()),
            std::path::Component::ParentDir => {}
            std::path::Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            _ => {}
        }
    }
    (parts.join("/"), anchor)
}

#[test]
fn the_generated_reference_pages_are_what_the_code_generates() {
    let write = std::env::var_os("APF_MONITOR_WRITE_DOCS").is_some();
    for (file, text) in [
        (
            "reference/cli.md",
            apf_monitor::cli::reference::cli_reference(),
        ),
        (
            "reference/config-keys.md",
            apf_monitor::cli::reference::config_reference(),
        ),
    ] {
        let path = docs().join(file);
        if write {
            std::fs::write(&path, &text).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == text,
            "docs/{file} is stale: APF_MONITOR_WRITE_DOCS=1 cargo test --test it docs::"
        );
    }
}

#[test]
fn every_page_is_in_the_summary_and_every_link_resolves() {
    let pages = pages();
    let summary = &pages["SUMMARY.md"];
    let listed: BTreeSet<String> = links(summary).into_iter().collect();
    for page in pages.keys() {
        if page == "SUMMARY.md" || page.starts_with("..") {
            continue;
        }
        assert!(
            listed.contains(page),
            "docs/{page} is not in docs/SUMMARY.md"
        );
    }
    let mut broken = Vec::new();
    for (page, text) in &pages {
        for target in links(text) {
            if let Some(path) = target.strip_prefix(REPOSITORY) {
                let path = path.split('#').next().unwrap_or("");
                if !Path::new(ROOT).join(path).exists() {
                    broken.push(format!("{page}: {target} (no {path} in the repository)"));
                }
                continue;
            }
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = resolve(page, &target);
            let file = docs().join(&path);
            if !file.exists() {
                broken.push(format!("{page}: {target} (no {})", file.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let text = pages.get(&path).cloned().unwrap_or_default();
                if !anchors(&text).contains(&anchor) {
                    broken.push(format!("{page}: {target} (no heading #{anchor} in {path})"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Splits a shell line into words: quotes kept together, a comment or a pipe, `&&`, `;`, `&` or redirection ending it.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, '#' | '|' | ';' | '&' | '>' | '<') => break,
            (None, c) if c.is_whitespace() => {
                if !word.is_empty() || any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            (None, c) => word.push(c),
        }
    }
    if !word.is_empty() || any {
        out.push(word);
    }
    out
}

#[test]
fn every_command_line_shown_parses_with_the_real_cli() {
    let mut checked = 0;
    let mut refused = Vec::new();
    for (page, text) in pages() {
        let (_, blocks) = split_code(&text);
        for (info, body) in blocks {
            if !matches!(info.as_str(), "sh" | "bash" | "console" | "shell") {
                continue;
            }
            let joined = body.replace("\\\n", " ");
            for line in joined.lines() {
                let line = line.trim().trim_start_matches("$ ");
                let w = words(line);
                // The program: the first word that is not a variable's assignment.
                let Some(program) = w.iter().position(|x| !x.contains('=')) else {
                    continue;
                };
                let start = if w[program] == "apf-monitor" || w[program].ends_with("/apf-monitor") {
                    program
                } else if w[program] == "cargo" && w.iter().any(|x| x == "run") {
                    // `cargo run --release -- demo`: what follows `--` is the CLI's.
                    match w.iter().position(|x| x == "--") {
                        Some(dashes) => dashes,
                        None => continue,
                    }
                } else {
                    continue;
                };
                let args: Vec<String> = std::iter::once("apf-monitor".to_string())
                    .chain(w[start + 1..].iter().cloned())
                    .collect();
                checked += 1;
                // The command line as the binary parses it (`cli::command()`), not the derived definitions alone.
                let parsed = apf_monitor::cli::command()
                    .try_get_matches_from(&args)
                    .and_then(|m| {
                        <apf_monitor::cli::Cli as clap::FromArgMatches>::from_arg_matches(&m)
                    });
                if let Err(e) = parsed {
                    if matches!(
                        e.kind(),
                        clap::error::ErrorKind::DisplayHelp
                            | clap::error::ErrorKind::DisplayVersion
                    ) {
                        continue;
                    }
                    refused.push(format!(
                        "{page}: {line}\n  {}",
                        e.to_string().lines().next().unwrap_or("")
                    ));
                }
            }
        }
    }
    assert!(checked > 30, "only {checked} command lines found");
    assert!(
        refused.is_empty(),
        "{} command lines the CLI refuses:\n{}",
        refused.len(),
        refused.join("\n")
    );
}
