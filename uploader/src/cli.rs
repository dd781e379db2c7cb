//! What the uploader binaries share: logging to stderr with a per-binary filter variable (all three), and for
//! `cdi-apiserver` and `uploadproxy` a multi-threaded runtime, and the `error: …` line with exit 1 on failure.

use std::future::Future;
use std::process::ExitCode;

/// Logs to stderr, filtered by the environment variable `filter_env` (default `info`).
pub fn init_logging(filter_env: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env(filter_env)
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
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
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
