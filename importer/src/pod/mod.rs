//! Pod mode: the importer as CDI's importer pod runs it (`specs/cdi.md` §2).
//!
//! ```text
//! env (ImporterEnv) ─► env::PodConfig ─► run: volume::Volume (block device or /data) ─► sizing
//!     ─► blank image │ archive::extract_tar │ pipeline::import ─► termination::terminate ─► main writes it
//!                      metrics: progress on :8443 while it runs
//! ```
//!
//! * [`env`] — CDI's environment into a validated [`PodConfig`] (pure, table-tested);
//! * [`volume`] — the target volume and CDI's sizing (shared with the upload server);
//! * [`archive`] — content type `archive`: a tar extracted into the volume (shared with the upload server);
//! * [`termination`] — the result as CDI's termination message and exit code;
//! * [`metrics`] — the progress endpoint CDI's controller scrapes.

pub mod archive;
pub mod env;
pub mod metrics;
pub mod termination;
pub mod volume;

pub use env::{PodConfig, PodPaths, PodSource};
pub use termination::{Done, Termination};
pub use volume::Volume;

use contracts::cdi::ContentType;
use contracts::cdi::sizing::usable_space;

use crate::Error;
use crate::checksum::Hasher;
use crate::pipeline::{self, ImportRequest};
use crate::progress::Progress;
use crate::sink::{Sink, TargetSink};
use volume::set_mode;

/// A blank image: a sparse raw file of the usable size (preallocated on request); on a block device nothing
/// to do unless preallocation asks for zeroing.
fn blank(cfg: &PodConfig, vol: &Volume) -> Result<Done, Error> {
    let available = vol.available(cfg.image_size)?;
    match vol {
        Volume::Filesystem(dir) => {
            let size = usable_space(cfg.overhead, available);
            let path = dir.join("disk.img");
            let mut sink = TargetSink::create_file(&path, cfg.preallocation)?;
            let r = sink.finish(size);
            if r.is_err() {
                sink.abort();
            }
            let report = r?;
            set_mode(&path)?;
            Ok(Done { preallocated: report.preallocated, image_env: Vec::new(), blank: true })
        }
        Volume::Block(dev) if cfg.preallocation => {
            let mut sink = TargetSink::open_block(dev, true)?;
            sink.write_zeroes(0, available)?;
            sink.finish(available)?;
            Ok(Done { preallocated: true, image_env: Vec::new(), blank: true })
        }
        Volume::Block(_) => Ok(Done { blank: true, ..Done::default() }),
    }
}

/// Archive content: extract the (decompressed) tar into the data directory; checksum over the bytes served.
fn extract_archive(
    cfg: &PodConfig,
    vol: &Volume,
    rt: &tokio::runtime::Handle,
    progress: &Progress,
) -> Result<Done, Error> {
    let hasher = cfg.checksum.as_ref().map(|c| Hasher::new(c.algorithm));
    archive::extract_tar(
        vol,
        "source",
        progress,
        || pipeline::probe(&cfg.source.location(), &cfg.options, rt, progress, hasher.as_ref()),
        || match (&hasher, &cfg.checksum) {
            (Some(h), Some(want)) => h.verify(want).map(|_| ()),
            _ => Ok(()),
        },
    )?;
    Ok(Done::default())
}

/// Runs the pod: sizes the target, imports. Must run on a blocking thread of `rt`.
pub fn run(cfg: &PodConfig, rt: &tokio::runtime::Handle, progress: &Progress) -> Termination {
    let vol = Volume::detect(&cfg.paths.block_device, &cfg.paths.data_dir);
    let scratch = cfg.paths.scratch_dir.is_dir().then(|| cfg.paths.scratch_dir.clone());
    let result = (|| -> Result<Done, Error> {
        let mut cfg = cfg.clone();
        cfg.options.headers.extend(env::secret_headers(&cfg.paths.extra_headers_dir)?);
        if cfg.source == PodSource::Blank {
            return blank(&cfg, &vol);
        }
        if cfg.content == ContentType::Archive {
            return extract_archive(&cfg, &vol, rt, progress);
        }
        let (dest, size) = vol.import_target(&cfg.paths.data_dir.join("disk.img"), cfg.overhead, cfg.image_size)?;
        let req = ImportRequest {
            source: cfg.source.location(),
            dest: dest.clone(),
            checksum: cfg.checksum.clone(),
            size,
            preallocate: cfg.preallocation,
            http: cfg.options.clone(),
            scratch: scratch.clone(),
            // A killed pod's successor continues a Filesystem volume's import (`crate::resume`).
            resume: matches!(vol, Volume::Filesystem(_)),
        };
        let report = pipeline::import(&req, progress, rt)?;
        if matches!(vol, Volume::Filesystem(_)) {
            set_mode(&dest)?;
        }
        Ok(Done { preallocated: report.preallocated, image_env: report.image_env, blank: false })
    })();
    termination::terminate(result, scratch.is_some())
}
