//! The conveniences of the command line: shell completions that a real bash completes with, and man pages that
//! man(1) renders, both generated from the clap definitions that parse the arguments.
use std::process::{Command, Stdio};

use crate::common;

/// What bash's programmable completion offers after `line` (the cursor at its end), with the generated script.
fn bash_completes(script: &std::path::Path, line: &str) -> Vec<String> {
    let words: Vec<&str> = line.split(' ').collect();
    let program = format!(
        "source {script}\nCOMP_WORDS=({words})\nCOMP_CWORD={cword}\nCOMP_LINE='{line}'\nCOMP_POINT={point}\n\
         _apf__monitor apf-monitor '{cur}' '{prev}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script = script.display(),
        words = words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        cword = words.len() - 1,
        point = line.len(),
        cur = words[words.len() - 1],
        prev = words[words.len().saturating_sub(2)],
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completes_subcommands_and_flags_from_the_generated_script() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("apf-monitor.bash");
    std::fs::write(&script, common::stdout_of(&["completions", "bash"])).unwrap();
    assert_eq!(bash_completes(&script, "apf-monitor se"), ["serve"]);
    let check = bash_completes(&script, "apf-monitor check --out");
    assert_eq!(check, ["--output"], "{check:?}");
    let shells = bash_completes(&script, "apf-monitor completions ");
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        assert!(shells.contains(&shell.to_string()), "{shells:?}");
    }
    // Every other shell gets a script naming every subcommand.
    for shell in ["zsh", "fish", "powershell", "elvish"] {
        let script = common::stdout_of(&["completions", shell]);
        for sub in ["serve", "check", "advise", "completions", "man"] {
            assert!(script.contains(sub), "{shell}: no {sub}");
        }
    }
}

#[test]
fn man_renders_the_page_and_one_per_subcommand() {
    let page = common::stdout_of(&["man"]);
    assert!(
        page.starts_with(".ie") || page.contains(".TH apf-monitor 1"),
        "{page}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("apf-monitor.1");
    std::fs::write(&path, &page).unwrap();
    // man(1) itself renders it (groff underneath), as a user's `apf-monitor man | man -l -` does.
    let rendered = Command::new("man")
        .args(["-l", "-P", "cat"])
        .arg(&path)
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&rendered.stdout);
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    assert!(
        text.contains("Watches Kubernetes API Priority and Fairness"),
        "{text}"
    );
    for sub in ["serve", "check", "advise", "completions"] {
        assert!(text.contains(sub), "no {sub} in:\n{text}");
    }

    let pages = dir.path().join("pages");
    common::stdout_of(&["man", "--dir", pages.to_str().unwrap()]);
    let serve = std::fs::read_to_string(pages.join("apf-monitor-serve.1")).unwrap();
    assert!(serve.contains("\\-\\-config"), "{serve}");
}

/// Every flag that takes a duration or a time, in every command, takes a value starting with '-': a negative
/// duration reaches its parser and is refused by the flag's name and value (not "unexpected argument '-5' found"),
/// and a time such as `-6h` is read as one.
#[test]
fn every_duration_and_time_flag_takes_a_value_that_starts_with_a_hyphen() {
    fn walk(
        command: &clap::Command,
        path: &mut Vec<String>,
        found: &mut Vec<(Vec<String>, String, String)>,
    ) {
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            for name in arg.get_value_names().unwrap_or_default() {
                if *name == "DURATION" || *name == "TIME" {
                    found.push((path.clone(), long.to_string(), name.to_string()));
                }
            }
        }
        for sub in command.get_subcommands() {
            path.push(sub.get_name().to_string());
            walk(sub, path, found);
            path.pop();
        }
    }
    let mut found = Vec::new();
    walk(&apf_monitor::cli::command(), &mut Vec::new(), &mut found);
    let names: Vec<String> = found
        .iter()
        .map(|(path, long, _)| format!("{} --{long}", path.join(" ")))
        .collect();
    for expected in [
        "advise --window",
        "advise --interval",
        "report --step",
        "audit --since",
        "demo --duration",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not in {names:?}"
        );
    }
    for (path, long, kind) in &found {
        let value = if kind == "DURATION" { "-5s" } else { "-6h" };
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        let flag = format!("--{long}");
        args.extend([flag.as_str(), value]);
        let out = Command::new(env!("CARGO_BIN_EXE_apf-monitor"))
            .args(&args)
            .env_remove("APF_MONITOR_CONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
        if kind == "DURATION" {
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(&format!("invalid value '-5s' for '--{long} <DURATION>'")),
                "{args:?}: {err}"
            );
            // Each says how a duration is written, not only that this one is not.
            assert!(err.contains("5s"), "{args:?}: {err}");
        }
    }
}
