//! `apf-monitor serve`: the daemon, with the process' signals: SIGHUP reloads the config, SIGTERM and SIGINT stop
//! it after delivering what is queued. A config that cannot run is exit status 1.
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::sync::mpsc;

use super::output::outln;
use super::{init_logging, load_config, shutdown_signal, ServeArgs};
use crate::daemon::{self, Loader, Setup};

pub async fn serve(args: ServeArgs) -> Result<ExitCode> {
    // Everything a stage would refuse is refused here, before anything starts.
    let setup = Setup::build(load_config(&args.common, Some(&args.source), args.listen)?).await?;
    let config = &setup.config;
    if args.check_config {
        outln!(
            "config OK: {}, alerts to {}, listen {}",
            setup.targets.describe(),
            setup.alerting.describe_receivers(),
            config.listen
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    init_logging(config.log.format, &config.log.level)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {}: is another process using it? Use --listen",
                config.listen
            )
        })?;
    // A reload reads the file again and applies the same flags: `--target` keeps replacing the file's targets.
    let (common, source) = (Arc::new(args.common), Arc::new(args.source));
    let listen = args.listen;
    let loader: Loader = Arc::new(move || load_config(&common, Some(&source), listen));
    let (reload_tx, reloads) = mpsc::channel(1);
    spawn_sighup(reload_tx)?;
    daemon::run(setup, loader, listener, shutdown_signal(), reloads).await?;
    Ok(ExitCode::SUCCESS)
}

/// SIGHUP, Prometheus' way to say "re-read your config"; without a handler it would kill the process.
fn spawn_sighup(reload: mpsc::Sender<()>) -> Result<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangup = signal(SignalKind::hangup()).context("cannot handle SIGHUP")?;
        tokio::spawn(async move {
            while hangup.recv().await.is_some() {
                tracing::info!("SIGHUP: reloading the config");
                // A reload already waiting covers this one too.
                let _ = reload.try_send(());
            }
        });
    }
    #[cfg(not(unix))]
    drop(reload);
    Ok(())
}
