//! `uploadserver`: CDI's upload server pod. Reads the environment (specs/cdi.md §2.2, §4.3), serves one
//! upload, writes the termination message and exits 0 (`Upload Complete` or `Deadline Passed`); on a setup
//! failure it writes the error line there and exits 1.

use std::process::ExitCode;

fn write_termination(path: &std::path::Path, msg: &str) {
    if let Err(e) = std::fs::write(path, msg) {
        eprintln!("writing termination message to {}: {e}", path.display());
    }
}

fn main() -> ExitCode {
    controller_runtime::binary::init_logging("UPLOADSERVER_LOG", "info");
    let env = std::env::vars().collect();
    let cfg = match uploader::server::Config::from_env(&env) {
        Ok(c) => c,
        Err(e) => {
            let log = env.get("UPLOADSERVER_TERMINATION_LOG").cloned().unwrap_or_else(|| "/dev/termination-log".into());
            write_termination(std::path::Path::new(&log), &e.to_string());
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let log = cfg.termination_log.clone();
    match rt.block_on(async move { uploader::server::start(cfg).await.map(|r| (r.addr, r)) }) {
        Ok((addr, running)) => {
            tracing::info!(%addr, "upload server listening");
            let outcome = rt.block_on(async {
                tokio::select! {
                    o = running.wait() => Some(o),
                    () = controller_runtime::binary::shutdown_signal() => None,
                }
            });
            let Some(outcome) = outcome else {
                // Deleted (SIGTERM): stop at once, as upstream's Go server does; the controller decides what next.
                tracing::info!("terminated");
                return ExitCode::from(143);
            };
            write_termination(&log, &outcome.termination_message());
            tracing::info!(?outcome, "upload server done");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let line = contracts::errors::chain_line(&e);
            write_termination(&log, &line);
            eprintln!("error: {line}");
            ExitCode::from(1)
        }
    }
}
