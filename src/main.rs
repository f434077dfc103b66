//! The `apf-monitor` binary: everything lives in the library; see `cli/mod.rs`.
fn main() -> std::process::ExitCode {
    apf_monitor::cli::main()
}
