//! What a command line is expected to offer beside its work: shell completions (clap_complete) and man pages
//! (clap_mangen), both generated from the same clap definitions that parse the arguments, and the config file's
//! JSON Schema, generated from the settings types the loader reads it into; none of them can drift.
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use super::output::out;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write every page (apf-monitor.1, apf-monitor-serve.1, ...) into this directory instead of printing
    /// apf-monitor.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The completion script for `shell`, on standard output.
pub fn completions(args: CompletionsArgs) -> Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(
        args.shell,
        &mut super::command(),
        "apf-monitor",
        &mut script,
    );
    let mut script = String::from_utf8_lossy(&script).into_owned();
    if args.shell == clap_complete::Shell::Bash {
        // clap_complete 4.6 spells a hyphenated binary's subcommand states two ways in bash (the loop
        // `apf__monitor__subcmd__check`, the case arms `apf__subcmd__monitor__subcmd__check`), so no subcommand's
        // flags ever complete (clap-rs/clap#6421). One spelling for both, until a release fixes it.
        script = script.replace("apf__subcmd__monitor", "apf__monitor");
    }
    out!("{script}")
}

/// apf-monitor.1 on standard output, or every page into `--dir`.
pub fn man(args: ManArgs) -> Result<()> {
    let command = super::command();
    match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(command, &dir)
                .with_context(|| format!("cannot write the man pages into {}", dir.display()))
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut page)
                .context("cannot render the man page")?;
            out!("{}", String::from_utf8_lossy(&page))
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// The config file's JSON Schema, as strict as the loader (unknown keys refused), for editors: the example
    /// config's first line points yaml-language-server at config/apf-monitor.schema.json.
    Schema,
}

/// The JSON Schema of the config file (draft-07: what yaml-language-server and most editors read).
pub fn config_schema() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft07().into_generator();
    let mut schema = generator.into_root_schema_for::<crate::config::Config>();
    schema.insert("title".into(), "apf-monitor configuration".into());
    schema.to_value()
}

pub fn config(command: ConfigCommand) -> Result<()> {
    match command {
        ConfigCommand::Schema => {
            let text = serde_json::to_string_pretty(&config_schema())
                .context("cannot encode the schema")?;
            out!("{text}\n")
        }
    }
}
