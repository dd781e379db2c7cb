//! `importer`: the standalone CLI over the import pipeline. Parses arguments and the environment into an
//! [`ImportRequest`], runs it on a blocking thread, renders progress, prints the result.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use contracts::cdi::env::var;
use importer::ImportRequest;
use importer::checksum::ExpectedChecksum;
use importer::plan::SizeRule;
use importer::progress::Progress;
use importer::serve::{self, ServeConfig};
use importer::source::{SourceLocation, SourceOptions, http::parse_header};

#[derive(Parser)]
#[command(name = "importer", version, about = "Import disk images into files or block devices, CDI-compatible")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(clap::Args)]
struct HttpArgs {
    /// Directory of PEM CA certificates to trust (every file in it).
    #[arg(long, value_name = "DIR")]
    cert_dir: Option<PathBuf>,
    /// Do not verify TLS certificates.
    #[arg(long)]
    insecure: bool,
    /// Extra request header, `Name: value` (repeatable).
    #[arg(long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    /// Basic-auth user (also IMPORTER_ACCESS_KEY_ID).
    #[arg(long, env = var::IMPORTER_ACCESS_KEY_ID, hide_env_values = true)]
    access_key_id: Option<String>,
    /// Basic-auth password (also IMPORTER_SECRET_KEY).
    #[arg(long, env = var::IMPORTER_SECRET_KEY, hide_env_values = true)]
    secret_key: Option<String>,
    /// Seconds without data before a transfer is retried.
    #[arg(long, default_value_t = 60, hide = true)]
    stall_timeout: u64,
    /// Retries per request and per stalled/reset transfer.
    #[arg(long, default_value_t = 5)]
    retries: u32,
    /// S3 endpoint for `s3://bucket/key` sources, e.g. http://127.0.0.1:9000 (default: AWS).
    #[arg(long, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// Registry images: the architecture to pick from a manifest list, Go naming (default: this machine's).
    #[arg(long, value_name = "ARCH")]
    architecture: Option<String>,
    /// OVA sources: the disk to import, by ovf:diskId or file name (default: the OVF's first disk).
    #[arg(long, env = var::IMPORTER_OVA_DISK, value_name = "DISK")]
    ova_disk: Option<String>,
}

impl HttpArgs {
    /// Parses SOURCE; `--s3-endpoint` applies to `s3://` sources.
    fn location(&self, source: &str) -> anyhow::Result<SourceLocation> {
        let mut loc = SourceLocation::parse(source)?;
        if let (SourceLocation::S3 { endpoint, .. }, Some(ep)) = (&mut loc, &self.s3_endpoint) {
            *endpoint =
                Some(reqwest::Url::parse(ep).map_err(|e| anyhow::anyhow!("invalid --s3-endpoint {ep:?}: {e}"))?);
        }
        Ok(loc)
    }

    fn options(&self) -> anyhow::Result<SourceOptions> {
        let headers = self.headers.iter().map(|h| parse_header(h)).collect::<Result<Vec<_>, _>>()?;
        let basic_auth = match (&self.access_key_id, &self.secret_key) {
            (Some(u), Some(p)) if !u.is_empty() => Some((u.clone(), p.clone())),
            (Some(u), None) if !u.is_empty() => Some((u.clone(), String::new())),
            _ => None,
        };
        Ok(SourceOptions {
            cert_dir: self.cert_dir.clone(),
            insecure: self.insecure,
            headers,
            basic_auth,
            stall_timeout: Duration::from_secs(self.stall_timeout.max(1)),
            max_retries: self.retries,
            platform_architecture: self.architecture.clone(),
            ova_disk: self.ova_disk.clone().filter(|d| !d.trim().is_empty()),
            ..SourceOptions::default()
        })
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Pod mode: import as CDI's importer pod, configured by CDI's environment (IMPORTER_SOURCE, …).
    Run,
    /// Import SOURCE (path, file://, http://, https://) into DEST (file or block device) as raw.
    Import {
        /// The image source.
        source: String,
        /// The target file (created or replaced) or block device.
        dest: PathBuf,
        /// Expected checksum of the source bytes as served, `md5|sha1|sha256|sha512:HEX`.
        #[arg(long)]
        checksum: Option<String>,
        /// Final size of DEST (grown with zeroes; smaller than the image is an error), e.g. 10G.
        #[arg(long)]
        size: Option<String>,
        /// Allocate the whole target.
        #[arg(long)]
        preallocate: bool,
        /// Scratch directory, used only when the format and source need one [default: $TMPDIR or /tmp].
        #[arg(long, value_name = "DIR")]
        scratch: Option<PathBuf>,
        /// Continue an interrupted import into the same DEST from where its durable data ends (HTTP sources
        /// with Range, uncompressed raw/ISO; anything else starts over), and leave checkpoints for the next.
        #[arg(long)]
        resume: bool,
        /// Result format on stdout.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Do not draw a progress bar.
        #[arg(long)]
        no_progress: bool,
        #[command(flatten)]
        http: HttpArgs,
    },
    /// Serve a volume's disk image read-only over HTTPS at /disk.img (bearer token; the source side of a
    /// host-assisted clone).
    Serve {
        /// The image, a file or block device [default: /dev/cdi-block-volume if a block device, else /data/disk.img].
        #[arg(long, env = var::SERVE_PATH, value_name = "PATH")]
        path: Option<PathBuf>,
        /// File holding the bearer token clients must send (trimmed; must be non-empty).
        #[arg(long, env = var::SERVE_TOKEN_FILE, value_name = "FILE", default_value = serve::DEFAULT_TOKEN_FILE)]
        token_file: PathBuf,
        /// Listen address.
        #[arg(long, env = "SERVE_ADDR", value_name = "ADDR", default_value = serve::DEFAULT_ADDR)]
        addr: std::net::SocketAddr,
        /// Exit 0 after this many seconds without an active image request (0: never).
        #[arg(long, env = "SERVE_IDLE_EXIT", value_name = "SECONDS", default_value_t = serve::DEFAULT_IDLE_EXIT_SECS)]
        idle_exit: u64,
    },
    /// Describe an image (format, compression, virtual size, cluster size, refused features).
    Info {
        /// The image source.
        source: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
        #[command(flatten)]
        http: HttpArgs,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("IMPORTER_LOG").unwrap_or_else(|_| "importer=warn".into()),
        )
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    // CDI starts its importer with `-v=N -alsologtostderr` and configures it by environment: with
    // IMPORTER_SOURCE set and no subcommand, run as the pod.
    let args: Vec<String> = std::env::args().skip(1).collect();
    if std::env::var_os(var::IMPORTER_SOURCE).is_some()
        && args.iter().all(|a| a.starts_with('-') && a != "--help" && a != "-h")
    {
        return pod_main();
    }
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = match e.downcast_ref::<importer::Error>() {
                Some(ie) => ie.one_line(),
                None => format!("{e:#}"),
            };
            eprintln!("error: {}", msg.replace('\n', " "));
            ExitCode::FAILURE
        }
    }
}

/// Pod mode: reads the environment, serves metrics, imports, writes the termination message.
fn pod_main() -> ExitCode {
    use importer::pod::{self, PodConfig, PodPaths, Termination, metrics};
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let term_log =
        PodPaths::from_env(&env).map_or_else(|_| PathBuf::from("/dev/termination-log"), |p| p.termination_log);
    let term = match (PodConfig::from_env(&env), runtime()) {
        (Err(e), _) => Termination::failed(&e.to_string()),
        (_, Err(e)) => Termination::failed(&format!("Unable to process data: {e}")),
        (Ok(cfg), Ok(rt)) => {
            let progress = Progress::new();
            let metrics = metrics::Metrics::new(progress.clone(), cfg.owner_uid.clone());
            match rt.block_on(metrics::serve(cfg.paths.metrics_addr, metrics)) {
                Ok(addr) => tracing::info!(%addr, "serving progress metrics"),
                Err(e) => tracing::warn!("progress metrics unavailable: {e}"),
            }
            let handle = rt.handle().clone();
            let p2 = progress.clone();
            let c2 = cfg.clone();
            let r = rt.block_on(async move { tokio::task::spawn_blocking(move || pod::run(&c2, &handle, &p2)).await });
            r.unwrap_or_else(|e| Termination::failed(&format!("Unable to process data: {e}")))
        }
    };
    if let Err(e) = std::fs::write(&term_log, &term.message) {
        eprintln!("cannot write termination message to {}: {e}", term_log.display());
    }
    if term.exit_code == 0 {
        println!("{}", term.message);
    } else {
        eprintln!("{}", term.message);
    }
    ExitCode::from(term.exit_code)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let rt = runtime()?;
    match cli.cmd {
        Cmd::Run => match pod_main() {
            c if c == ExitCode::SUCCESS => Ok(()),
            _ => std::process::exit(1),
        },
        Cmd::Import { source, dest, checksum, size, preallocate, scratch, resume, output, no_progress, http } => {
            let req = ImportRequest {
                source: http.location(&source)?,
                dest,
                checksum: checksum.map(|c| c.parse::<ExpectedChecksum>()).transpose().map_err(anyhow::Error::msg)?,
                size: match size {
                    Some(s) => SizeRule::Exact(parse_size(&s).map_err(anyhow::Error::msg)?),
                    None => SizeRule::Virtual,
                },
                preallocate,
                http: http.options()?,
                scratch: Some(scratch.unwrap_or_else(std::env::temp_dir)),
                resume,
            };
            let progress = Progress::new();
            let bar = (!no_progress && std::io::stderr().is_terminal()).then(|| spawn_bar(progress.clone()));
            let handle = rt.handle().clone();
            let p2 = progress.clone();
            let result =
                rt.block_on(
                    async move { tokio::task::spawn_blocking(move || importer::import(&req, &p2, &handle)).await },
                )?;
            if let Some((stop, t)) = bar {
                let _ = stop.send(());
                let _ = t.join();
            }
            let report = result?;
            match output {
                Output::Json => println!("{}", serde_json::to_string(&report)?),
                Output::Text => println!(
                    "imported {} ({} compression): virtual size {} bytes, target {} bytes, {} bytes read, {} bytes written in {:.2} s{}",
                    report.format,
                    report.compression,
                    report.virtual_size,
                    report.target_size,
                    report.bytes_read,
                    report.bytes_written,
                    report.seconds,
                    report.checksum.as_ref().map(|c| format!(", checksum {c} verified")).unwrap_or_default()
                ),
            }
            Ok(())
        }
        Cmd::Serve { path, token_file, addr, idle_exit } => {
            let cfg = ServeConfig {
                path: path.unwrap_or_else(serve::default_path),
                token: serve::read_token(&token_file)?,
                addr,
                idle_exit: (idle_exit > 0).then(|| Duration::from_secs(idle_exit)),
            };
            let exit =
                rt.block_on(async move { serve::serve(cfg, controller_runtime::binary::shutdown_signal()).await })?;
            tracing::info!(?exit, "serve finished");
            // Readers of abandoned responses stop once their connection is gone; do not wait on them.
            rt.shutdown_timeout(Duration::from_secs(1));
            Ok(())
        }
        Cmd::Info { source, output, http } => {
            let loc = http.location(&source)?;
            let opts = http.options()?;
            let handle = rt.handle().clone();
            let report = rt.block_on(async move {
                tokio::task::spawn_blocking(move || importer::info::info(&loc, &opts, &handle)).await
            })??;
            match output {
                Output::Json => println!("{}", serde_json::to_string(&report)?),
                Output::Text => {
                    let opt = |v: Option<u64>| v.map_or_else(|| String::from("unknown"), |v| v.to_string());
                    let yn = |b: bool| if b { "yes" } else { "no" };
                    println!("format: {}", report.format);
                    println!("compression: {}", report.compression);
                    println!("virtual size: {}", opt(report.virtual_size));
                    println!("cluster size: {}", opt(report.cluster_size));
                    println!("backing file: {}", yn(report.backing_file));
                    println!("data file: {}", yn(report.data_file));
                    println!("encrypted: {}", yn(report.encrypted));
                }
            }
            Ok(())
        }
    }
}

/// Draws a progress bar on stderr until told to stop.
fn spawn_bar(progress: Progress) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        let bar = indicatif::ProgressBar::new(0);
        let bytes = indicatif::ProgressStyle::with_template(
            "{msg:>22} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> ");
        let pct = indicatif::ProgressStyle::with_template("{msg:>22} [{bar:30}] {percent}% ETA {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> ");
        let spin = indicatif::ProgressStyle::with_template("{msg:>22} {spinner} {bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
        let mut phase = None;
        loop {
            let s = progress.snapshot();
            if phase != Some(s.phase) {
                phase = Some(s.phase);
                bar.reset();
                bar.set_message(s.phase.label());
                bar.set_style(match (s.phase, s.total) {
                    (importer::progress::Phase::Convert, _) => pct.clone(),
                    (_, Some(_)) => bytes.clone(),
                    (_, None) => spin.clone(),
                });
            }
            match s.total {
                Some(t) => {
                    bar.set_length(t);
                    bar.set_position(s.done.min(t));
                }
                None => bar.set_position(s.done),
            }
            if rx.recv_timeout(Duration::from_millis(200)).is_ok() {
                break;
            }
        }
        bar.finish_and_clear();
    });
    (tx, t)
}

// `--size`: plain bytes, binary suffixes (`Ki`, `Mi`, `Gi`, `Ti`, and qemu-style `K`, `M`, `G`, `T` meaning the
// same) and decimal SI suffixes in Kubernetes quantity form (`k`, `M` is ambiguous: we follow qemu-img, where `M`
// is MiB; Kubernetes quantities like `1Gi` work as written).
/// Parses a size such as `1073741824`, `10G`, `10Gi`, `512M`, `1.5G`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("invalid size {s:?}"));
    }
    let mult: u64 = match suffix.trim() {
        "" | "B" | "b" => 1,
        "k" | "K" | "Ki" | "KiB" | "KB" => 1 << 10,
        "M" | "Mi" | "MiB" | "MB" => 1 << 20,
        "G" | "Gi" | "GiB" | "GB" => 1 << 30,
        "T" | "Ti" | "TiB" | "TB" => 1 << 40,
        "P" | "Pi" | "PiB" | "PB" => 1 << 50,
        other => return Err(format!("invalid size suffix {other:?} in {s:?}")),
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(|| format!("size {s:?} overflows"));
    }
    let f: f64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    let v = f * mult as f64;
    if !v.is_finite() || v < 0.0 || v >= u64::MAX as f64 {
        return Err(format!("size {s:?} out of range"));
    }
    Ok(v.ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("10Gi"), Ok(10 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert!(parse_size("G").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000P").is_err());
    }
}
