//! The workspace's layout as Cargo resolves it (docs/development/index.md): the arrows between the crates run one way,
//! and the domain crate stays pure. Read with `cargo tree` over Cargo.lock, offline.
use std::collections::BTreeSet;
use std::process::Command;

/// The packages (library names) in the normal dependency tree of `package`, itself included.
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["-f", "{p}", "-p", package])
        .output()
        .unwrap_or_else(|e| panic!("cargo tree -p {package}: {e}"));
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_domain_crate_needs_no_runtime_no_http_and_no_kubernetes_client() {
    let deps = normal_dependencies("apf");
    assert!(deps.contains("apf") && deps.contains("serde"), "{deps:?}");
    for forbidden in [
        "tokio",
        "axum",
        "hyper",
        "reqwest",
        "kube",
        "kube-client",
        "apf-sim",
        "apf-monitor",
    ] {
        assert!(
            !deps.contains(forbidden),
            "crates/apf depends on {forbidden}: {deps:?}"
        );
    }
}

#[test]
fn the_simulator_uses_the_domain_and_never_the_daemon() {
    let deps = normal_dependencies("apf-sim");
    assert!(deps.contains("apf"), "{deps:?}");
    assert!(!deps.contains("apf-monitor"), "{deps:?}");
    // It speaks HTTP as a server, and as a client only where kube-apiserver is one: its audit webhook backend
    // (audit/sink.rs). A Kubernetes client, or HTTP requests elsewhere, would be a sign of daemon code moving in.
    assert!(!deps.contains("kube"), "{deps:?}");
    let clients: Vec<String> = walk(&root().join("crates/apf-sim/src"))
        .into_iter()
        .filter(|p| {
            // Production code: what comes before the unit tests (which may use a client as a dev-dependency).
            let text = std::fs::read_to_string(p).unwrap();
            text.split("#[cfg(test)]")
                .next()
                .unwrap_or("")
                .contains("reqwest")
        })
        .map(|p| p.strip_prefix(root()).unwrap().display().to_string())
        .collect();
    assert_eq!(clients, ["crates/apf-sim/src/audit/sink.rs"]);
    let daemon = normal_dependencies("apf-monitor");
    assert!(
        daemon.contains("apf") && daemon.contains("apf-sim"),
        "{daemon:?}"
    );
}

/// README's test set-up is what CI runs: every command of its "Run the tests" block is a line of `.ci/run`.
#[test]
fn readme_and_ci_run_the_same_test_commands() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let section = readme
        .split("## Run the tests")
        .nth(1)
        .and_then(|s| s.split("```sh").nth(1))
        .and_then(|s| s.split("```").next())
        .unwrap_or_else(|| panic!("README has no sh block under \"Run the tests\""));
    let commands: Vec<&str> = section
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .collect();
    // --no-fail-fast: a failing test binary does not keep the others (the simulator's, the doc tests) from running.
    assert_eq!(
        commands,
        [
            "bash tests/install-deps.sh",
            "cargo test --locked --no-fail-fast"
        ]
    );
    let ci_lines: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for c in &commands {
        assert!(ci_lines.contains(c), ".ci/run does not run `{c}`");
    }
    assert_eq!(
        ci_lines.last(),
        commands.last(),
        ".ci/run ends with README's test command"
    );
}

/// The workspace's top folder.
fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, sorted.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}
