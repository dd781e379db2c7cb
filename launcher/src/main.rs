//! `virt-launcher`: the `compute` container's process (see the library's documentation for what it does). The
//! only place the environment is read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use contracts::errors::chain_line;
use contracts::kubevirt::launcher::{LauncherEnv, SocketDir};
use controller_runtime::binary;
use virt_launcher::{Config, Layout};

/// virt-launcher: prepares a VMI's disks and pod network, hosts libvirtd for the node agent.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Where the termination message is written.
    #[arg(long, default_value = "/dev/termination-log")]
    termination_log: PathBuf,
    /// Resolve every contract path under this directory instead of `/` (tests).
    #[arg(long, default_value = "/")]
    root: PathBuf,
    /// The libvirtd program.
    #[arg(long, default_value = "libvirtd")]
    libvirtd: PathBuf,
    /// The virsh program.
    #[arg(long, default_value = "virsh")]
    virsh: PathBuf,
    /// Seconds libvirtd's socket may take to answer.
    #[arg(long, default_value_t = 30)]
    libvirtd_timeout: u64,
    /// Seconds the non-root launcher waits for the node agent's set-up.
    #[arg(long, default_value_t = 120)]
    setup_timeout: u64,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Debug, clap::Subcommand)]
enum Sub {
    /// The pod's privileged set-up, for the node agent (run as root in the pod's network and mount namespaces):
    /// a SetupRequest on stdin, the SetupReply (with the DHCP socket) on stdout, the launcher's connection.
    PodSetup,
}

fn main() -> ExitCode {
    let args = Args::parse();
    binary::init_logging("VIRT_LAUNCHER_LOG", "info");
    if let Some(Sub::PodSetup) = args.command {
        let layout = Layout::under(&args.root);
        return match virt_launcher::setup::serve_request(std::io::stdin().lock(), std::io::stdout(), &layout) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: sending the set-up reply: {e}");
                ExitCode::from(1)
            }
        };
    }
    let vars: BTreeMap<String, String> = std::env::vars().collect();
    let (env, pod_uid) = match LauncherEnv::from_env(&vars) {
        Ok(v) => v,
        Err(e) => {
            // Nothing is prepared yet: the reason goes to the termination log and, when the pod's socket directory
            // is there, to its failed file.
            let line = chain_line(&e);
            let _ = std::fs::write(&args.termination_log, format!("{line}\n"));
            let failed = Layout::under(&args.root).at(SocketDir::in_pod().failed());
            if failed.parent().is_some_and(|d| d.is_dir()) {
                let _ = std::fs::write(failed, format!("{line}\n"));
            }
            eprintln!("error: {line}");
            return ExitCode::from(1);
        }
    };
    let config = Config {
        layout: Layout::under(&args.root),
        termination_log: args.termination_log,
        libvirtd: args.libvirtd,
        virsh: args.virsh,
        libvirtd_start_timeout: Duration::from_secs(args.libvirtd_timeout),
        setup_timeout: Duration::from_secs(args.setup_timeout),
        ..Config::new(env, pod_uid)
    };
    binary::run(async move {
        let outcome = virt_launcher::run(config, binary::shutdown_signal()).await?;
        tracing::info!(?outcome, "virt-launcher done");
        Ok(())
    })
}
