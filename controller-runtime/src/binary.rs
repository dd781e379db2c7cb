//! What every binary's `main` does the same way: logging to stderr, a runtime whose failure is one `error: …`
//! line and exit 1, the termination signals, and the pod's identity and namespace.

use std::future::Future;
use std::process::ExitCode;

/// Logs to stderr, filtered by the environment variable `filter_env` (default directives `default`, e.g.
/// `info` or `info,kube=warn`).
pub fn init_logging(filter_env: &str, default: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env(filter_env)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Runs `main` on a new multi-threaded runtime: exit 0 when it returns `Ok`, else `error: <chain>` on stderr and
/// exit 1.
pub fn run(main: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(main) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Resolves when the process receives SIGTERM or SIGINT. Our binaries run as PID 1 of their containers, where
/// a signal without a handler is ignored: without this, every pod deletion waits out the grace period and ends
/// with SIGKILL. (Go binaries, as upstream's, exit on SIGTERM by default.) If the handlers cannot be installed
/// it never resolves.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM"),
                _ = int.recv() => tracing::info!("SIGINT"),
            }
        }
        _ => std::future::pending().await,
    }
}

/// This replica's identity for leader election: `POD_NAME` (the downward API), else `HOSTNAME`, else
/// `<fallback>-<pid>`.
pub fn pod_identity(fallback: &str) -> String {
    std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("{fallback}-{}", std::process::id()))
}

/// The namespace this pod runs in (its service account's), else `default`.
pub fn pod_namespace(default: &str) -> String {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| default.into())
}
