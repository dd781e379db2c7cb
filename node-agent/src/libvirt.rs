//! A thin, blocking client of one libvirt daemon (a launcher pod's, at `launcher::SocketDir::on_node(pod_uid).libvirt_uri()`) over the
//! `virt` crate: connect, define, look up, start, read the state, ACPI shutdown, destroy, undefine. No libvirt
//! type leaks out: states and reasons are this module's enums ([`DomainState`], [`StateReason`]), errors are
//! [`Error`] with a [`ErrorKind`] to branch on.
//!
//! ```text
//! Libvirt::connect(uri) ─► define(xml) ─► Domain ─► start ─► state() ─► shutdown (ACPI) / destroy ─► undefine
//!                      └─► lookup(name) ─► Option<Domain>
//! ```
//!
//! **Blocking.** Every call is a libvirt RPC that blocks the calling thread (up to libvirt's keepalive timeout
//! when the daemon hangs); from async code call it inside `tokio::task::spawn_blocking`. [`Libvirt`] and
//! [`Domain`] are `Send + Sync`.
//!
//! **No events, no panics, no `unsafe`.** State changes are observed by polling [`Domain::state`] (the `virt`
//! crate has no safe event API). `virt`'s `Connect` and `Domain` panic in `Drop` only when libvirt rejects the
//! object as invalid (`virConnectClose`/`virDomainFree` fail on nothing else, also not when the daemon is gone:
//! `tests/libvirt.rs` drops both after killing libvirtd); the objects here come only from successful opens and
//! lookups and are never cloned, so those paths are unreachable. URIs, names and XML with NUL bytes are refused
//! before they reach `virt` (which would panic on a URI). libvirt's default error printer (stderr) is switched
//! off once per process ([`virt::error::clear_error_callback`]); errors are returned instead.

use std::ffi::CString;
use std::fmt;
use std::sync::Once;

use virt::connect::Connect;
use virt::domain::{
    DomainCrashedReason, DomainPausedReason, DomainRunningReason, DomainShutdownReason, DomainShutoffReason,
    DomainState as VirtState, DomainStateReason as VirtReason,
};
use virt::enumutil::Enum;
use virt::error::{Error as VirtError, ErrorNumber};

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The operation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `virConnectOpen`.
    Connect,
    /// `virDomainDefineXMLFlags(VALIDATE)`.
    Define,
    /// `virDomainLookupByName`.
    Lookup,
    /// `virConnectListAllDomains`.
    List,
    /// `virDomainCreate`.
    Start,
    /// `virDomainGetState`.
    State,
    /// `virDomainShutdownFlags(ACPI_POWER_BTN)`.
    Shutdown,
    /// `virDomainDestroy`.
    Destroy,
    /// `virDomainUndefine`.
    Undefine,
    /// `virDomainGetXMLDesc`.
    XmlDesc,
    /// `virDomainSuspend`.
    Suspend,
    /// `virDomainResume`.
    Resume,
    /// `virDomainScreenshot` and reading its stream.
    Screenshot,
    /// `virDomainMigrateToURI3` (peer to peer).
    Migrate,
    /// `virDomainGetJobInfo`.
    JobInfo,
    /// `virDomainSetVcpusFlags(LIVE | CONFIG)`.
    SetVcpus,
    /// `virDomainAttachDeviceFlags`, `virDomainDetachDeviceFlags`, `virDomainUpdateDeviceFlags`.
    Device,
    /// `virDomainGetInfo`, `virDomainMemoryStats`, `virDomainGetCPUStats`, `virDomainBlockStats`,
    /// `virDomainInterfaceStats`, `virDomainGetJobInfo`.
    Stats,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Connect => "connecting to",
            Operation::Define => "defining a domain on",
            Operation::Lookup => "looking up a domain on",
            Operation::List => "listing the domains of",
            Operation::Start => "starting",
            Operation::Suspend => "pausing",
            Operation::Resume => "resuming",
            Operation::State => "reading the state of",
            Operation::Shutdown => "shutting down (ACPI)",
            Operation::Destroy => "destroying",
            Operation::Undefine => "undefining",
            Operation::XmlDesc => "reading the XML of",
            Operation::Screenshot => "taking a screenshot of",
            Operation::Migrate => "live-migrating",
            Operation::JobInfo => "reading the job of",
            Operation::SetVcpus => "changing the vCPUs of",
            Operation::Device => "changing a device of",
            Operation::Stats => "reading the statistics of",
        })
    }
}

/// What kind of failure, for callers to branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The domain does not exist (`VIR_ERR_NO_DOMAIN`).
    NoDomain,
    /// Not possible in the domain's state, e.g. destroying a domain that is not running
    /// (`VIR_ERR_OPERATION_INVALID`).
    InvalidState,
    /// The daemon cannot be reached or the connection broke (`VIR_ERR_NO_CONNECT`, `VIR_ERR_SYSTEM_ERROR`,
    /// `VIR_ERR_RPC`, `VIR_ERR_INVALID_CONN`): the launcher is gone or not ready.
    Unavailable,
    /// libvirt refused the domain XML or its devices (`VIR_ERR_XML_*`, `VIR_ERR_CONFIG_UNSUPPORTED`, …) or an
    /// argument (a NUL byte in a name, the URI or the XML).
    Rejected,
    /// Anything else.
    Other,
}

/// A libvirt call that failed.
#[derive(Debug, thiserror::Error)]
#[error("{operation} {target}")]
pub struct Error {
    /// What was tried.
    pub operation: Operation,
    /// On what: the URI, or the domain's name.
    pub target: String,
    /// libvirt's error.
    #[source]
    pub source: VirtError,
}

impl Error {
    fn new(operation: Operation, target: &str, source: VirtError) -> Error {
        Error { operation, target: target.to_owned(), source }
    }

    /// One line with libvirt's own message: "starting ns_vm: <libvirt's text>" (users see it in events).
    pub fn line(&self) -> String {
        format!("{self}: {}", self.source)
    }

    /// The kind of failure, from libvirt's error code.
    pub fn kind(&self) -> ErrorKind {
        match self.source.code() {
            Enum::Known(ErrorNumber::NoDomain) => ErrorKind::NoDomain,
            Enum::Known(ErrorNumber::OperationInvalid) => ErrorKind::InvalidState,
            Enum::Known(
                ErrorNumber::NoConnect | ErrorNumber::SystemError | ErrorNumber::Rpc | ErrorNumber::InvalidConn,
            ) => ErrorKind::Unavailable,
            Enum::Known(
                ErrorNumber::XmlError
                | ErrorNumber::XmlDetail
                | ErrorNumber::XmlInvalidSchema
                | ErrorNumber::ConfigUnsupported
                | ErrorNumber::InvalidArg
                | ErrorNumber::OperationUnsupported
                | ErrorNumber::NoSupport
                | ErrorNumber::CpuIncompatible,
            ) => ErrorKind::Rejected,
            _ => ErrorKind::Other,
        }
    }
}

/// `s` as a C string, or the error `virt` gives for a NUL byte (`VIR_ERR_INVALID_ARG`).
fn no_nul(operation: Operation, target: &str, s: &str) -> Result<()> {
    CString::new(s).map(drop).map_err(|e| Error::new(operation, target, VirtError::from(e)))
}

/// A domain's state (libvirt's `virDomainState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainState {
    /// No state.
    NoState,
    /// Running.
    Running,
    /// Blocked on a resource.
    Blocked,
    /// Paused (by the user, a migration, an I/O error, …).
    Paused,
    /// Being shut down.
    ShuttingDown,
    /// Shut off (also: defined, never started).
    Shutoff,
    /// Crashed.
    Crashed,
    /// Suspended by guest power management.
    PmSuspended,
    /// A state a newer libvirt defines.
    Unrecognised(u32),
}

/// Why a domain is in its state: the union of libvirt's per-state reasons (`virDomainRunningReason`,
/// `virDomainPausedReason`, `virDomainShutoffReason`, …), the same word for the same cause in every state
/// (upstream's `StateChangeReason`); the pair with [`DomainState`] is unambiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateReason {
    /// No reason given (`*_UNKNOWN`).
    Unknown,
    /// Running: normal startup.
    Booted,
    /// Running: migrated in; Shutoff: migrated away.
    Migrated,
    /// Running: restored from a state file.
    Restored,
    /// Running, Paused, Shutoff: restored from a snapshot.
    FromSnapshot,
    /// Running: resumed.
    Unpaused,
    /// Running: a migration was cancelled.
    MigrationCanceled,
    /// Running: a save was cancelled.
    SaveCanceled,
    /// Running: woken up from suspend.
    Wakeup,
    /// Running (resumed after a crash), Paused, Shutoff: the guest crashed.
    Crashed,
    /// Running, Paused: post-copy migration.
    PostCopy,
    /// Running, Paused: post-copy migration failed.
    PostCopyFailed,
    /// Paused, ShuttingDown: by the user.
    User,
    /// Paused: for an offline migration.
    Migration,
    /// Paused: being saved.
    Save,
    /// Paused: being dumped.
    Dump,
    /// Paused: an I/O error.
    IoError,
    /// Paused: the watchdog fired.
    Watchdog,
    /// Paused: shutting down.
    ShuttingDown,
    /// Paused: taking a snapshot.
    Snapshot,
    /// Paused: starting up.
    StartingUp,
    /// Paused: an API error.
    ApiError,
    /// Shutoff: the guest shut down.
    Shutdown,
    /// Shutoff: destroyed.
    Destroyed,
    /// Shutoff: saved to a file.
    Saved,
    /// Shutoff: failed to start (or the domain failed).
    Failed,
    /// Shutoff: the daemon stopped it.
    Daemon,
    /// Crashed: the guest panicked.
    Panicked,
    /// A reason a newer libvirt defines.
    Unrecognised(i64),
}

/// libvirt's state and reason as this module's enums (pure).
pub fn state_of(state: Enum<VirtState, u32>, reason: Enum<VirtReason, i32>) -> (DomainState, StateReason) {
    let state = match state {
        Enum::Known(VirtState::NoState) => DomainState::NoState,
        Enum::Known(VirtState::Running) => DomainState::Running,
        Enum::Known(VirtState::Blocked) => DomainState::Blocked,
        Enum::Known(VirtState::Paused) => DomainState::Paused,
        Enum::Known(VirtState::Shutdown) => DomainState::ShuttingDown,
        Enum::Known(VirtState::Shutoff) => DomainState::Shutoff,
        Enum::Known(VirtState::Crashed) => DomainState::Crashed,
        Enum::Known(VirtState::PMSuspended) => DomainState::PmSuspended,
        Enum::Unknown(raw) => DomainState::Unrecognised(raw),
    };
    fn known<E, I: Into<i64>>(e: Enum<E, I>, f: impl FnOnce(E) -> StateReason) -> StateReason {
        match e {
            Enum::Known(k) => f(k),
            Enum::Unknown(raw) => StateReason::Unrecognised(raw.into()),
        }
    }
    use StateReason as R;
    let reason = match reason {
        Enum::Unknown(raw) => R::Unrecognised(raw.into()),
        Enum::Known(VirtReason::NoState(r)) => known(r, |_| R::Unknown),
        Enum::Known(VirtReason::Blocked(r)) => known(r, |_| R::Unknown),
        Enum::Known(VirtReason::PMSuspended(r)) => known(r, |_| R::Unknown),
        Enum::Known(VirtReason::Running(r)) => known(r, |r| match r {
            DomainRunningReason::Unknown => R::Unknown,
            DomainRunningReason::Booted => R::Booted,
            DomainRunningReason::Migrated => R::Migrated,
            DomainRunningReason::Restored => R::Restored,
            DomainRunningReason::FromSnapshot => R::FromSnapshot,
            DomainRunningReason::Unpaused => R::Unpaused,
            DomainRunningReason::MigrationCancelled => R::MigrationCanceled,
            DomainRunningReason::SaveCancelled => R::SaveCanceled,
            DomainRunningReason::Wakeup => R::Wakeup,
            DomainRunningReason::Crashed => R::Crashed,
            DomainRunningReason::PostCopy => R::PostCopy,
            DomainRunningReason::PostCopyFailed => R::PostCopyFailed,
        }),
        Enum::Known(VirtReason::Paused(r)) => known(r, |r| match r {
            DomainPausedReason::Unknown => R::Unknown,
            DomainPausedReason::User => R::User,
            DomainPausedReason::Migration => R::Migration,
            DomainPausedReason::Save => R::Save,
            DomainPausedReason::Dump => R::Dump,
            DomainPausedReason::IOError => R::IoError,
            DomainPausedReason::Watchdog => R::Watchdog,
            DomainPausedReason::FromSnapshot => R::FromSnapshot,
            DomainPausedReason::ShuttingDown => R::ShuttingDown,
            DomainPausedReason::Snapshot => R::Snapshot,
            DomainPausedReason::Crashed => R::Crashed,
            DomainPausedReason::StartingUp => R::StartingUp,
            DomainPausedReason::PostCopy => R::PostCopy,
            DomainPausedReason::PostCopyFailed => R::PostCopyFailed,
            DomainPausedReason::APIError => R::ApiError,
        }),
        Enum::Known(VirtReason::Shutdown(r)) => known(r, |r| match r {
            DomainShutdownReason::Unknown => R::Unknown,
            DomainShutdownReason::User => R::User,
        }),
        Enum::Known(VirtReason::Shutoff(r)) => known(r, |r| match r {
            DomainShutoffReason::Unknown => R::Unknown,
            DomainShutoffReason::Shutdown => R::Shutdown,
            DomainShutoffReason::Destroyed => R::Destroyed,
            DomainShutoffReason::Crashed => R::Crashed,
            DomainShutoffReason::Migrated => R::Migrated,
            DomainShutoffReason::Saved => R::Saved,
            DomainShutoffReason::Failed => R::Failed,
            DomainShutoffReason::FromSnapshot => R::FromSnapshot,
            DomainShutoffReason::Daemon => R::Daemon,
        }),
        Enum::Known(VirtReason::Crashed(r)) => known(r, |r| match r {
            DomainCrashedReason::Unknown => R::Unknown,
            DomainCrashedReason::Panicked => R::Panicked,
        }),
    };
    (state, reason)
}

static CLEAR_ERROR_CALLBACK: Once = Once::new();

/// A connection to one libvirt daemon.
#[derive(Debug)]
pub struct Libvirt {
    conn: Connect,
    uri: String,
}

impl Libvirt {
    /// Opens a read-write connection to `uri` (e.g. `launcher::SocketDir::on_node(pod_uid).libvirt_uri()`).
    pub fn connect(uri: &str) -> Result<Libvirt> {
        CLEAR_ERROR_CALLBACK.call_once(virt::error::clear_error_callback);
        no_nul(Operation::Connect, uri, uri)?;
        let conn = Connect::open(Some(uri)).map_err(|e| Error::new(Operation::Connect, uri, e))?;
        Ok(Libvirt { conn, uri: uri.to_owned() })
    }

    /// The URI this connection was opened with.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Defines (or redefines, when a domain of that name exists and is not running) a persistent domain. The XML
    /// is validated against libvirt's schema first ([`ErrorKind::Rejected`] with the schema's complaint).
    pub fn define(&self, xml: &str) -> Result<Domain> {
        no_nul(Operation::Define, &self.uri, xml)?;
        let dom = self
            .conn
            .define_domain_xml_flags(xml, virt_sys::VIR_DOMAIN_DEFINE_VALIDATE)
            .map_err(|e| Error::new(Operation::Define, &self.uri, e))?;
        let name = dom.name().map_err(|e| Error::new(Operation::Define, &self.uri, e))?;
        Ok(Domain { dom, name })
    }

    /// The domain named `name`, `None` when there is none.
    pub fn lookup(&self, name: &str) -> Result<Option<Domain>> {
        no_nul(Operation::Lookup, name, name)?;
        match self.conn.lookup_domain_by_name(name) {
            Ok(dom) => Ok(Some(Domain { dom, name: name.to_owned() })),
            Err(e) => {
                let err = Error::new(Operation::Lookup, name, e);
                if err.kind() == ErrorKind::NoDomain { Ok(None) } else { Err(err) }
            }
        }
    }

    /// A screenshot of `dom`'s primary display: libvirt's MIME type and at most `limit + 1` bytes of the image (more
    /// than `limit` bytes: the image was larger and the rest was dropped).
    pub fn screenshot(&self, dom: &Domain, limit: usize) -> Result<(String, Vec<u8>)> {
        let err = |e| Error::new(Operation::Screenshot, &dom.name, e);
        let stream = virt::stream::Stream::new(&self.conn, 0).map_err(err)?;
        let mime = dom.dom.screenshot(&stream, 0, 0).map_err(err)?;
        let mut data = Vec::new();
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = usize::try_from(stream.recv(&mut buf).map_err(err)?).unwrap_or_default();
            if n == 0 {
                break;
            }
            data.extend_from_slice(&buf[..n.min(buf.len())]);
            if data.len() > limit {
                data.truncate(limit + 1);
                let _ = stream.abort();
                return Ok((mime, data));
            }
        }
        stream.finish().map_err(err)?;
        Ok((mime, data))
    }

    /// The names of every domain, running or only defined.
    pub fn domain_names(&self) -> Result<Vec<String>> {
        let doms = self.conn.list_all_domains(0).map_err(|e| Error::new(Operation::List, &self.uri, e))?;
        doms.iter().map(|d| d.name().map_err(|e| Error::new(Operation::List, &self.uri, e))).collect()
    }
}

/// A domain of a [`Libvirt`] daemon (a handle; it stays usable after the domain stops).
#[derive(Debug)]
pub struct Domain {
    dom: virt::domain::Domain,
    name: String,
}

impl Domain {
    /// The domain's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn err(&self, operation: Operation) -> impl FnOnce(VirtError) -> Error + '_ {
        move |e| Error::new(operation, &self.name, e)
    }

    /// Starts the defined domain (returns once QEMU runs the guest).
    pub fn start(&self) -> Result<()> {
        self.dom.create().map_err(self.err(Operation::Start))
    }

    /// The domain's state and why.
    pub fn state(&self) -> Result<(DomainState, StateReason)> {
        let (state, reason) = self.dom.state().map_err(self.err(Operation::State))?;
        // virt 0.5.0 ignores virDomainGetState's failure and reports the untouched -1 as an unknown state.
        if state == Enum::Unknown(u32::MAX) {
            return Err(Error::new(Operation::State, &self.name, VirtError::last_error()));
        }
        Ok(state_of(state, reason))
    }

    /// Asks the guest to power off through the ACPI power button (returns at once; poll [`Domain::state`]).
    pub fn shutdown(&self) -> Result<()> {
        self.dom.shutdown_flags(virt_sys::VIR_DOMAIN_SHUTDOWN_ACPI_POWER_BTN).map_err(self.err(Operation::Shutdown))
    }

    /// Stops the domain at once (pulls the plug). [`ErrorKind::InvalidState`] when it is not running.
    pub fn destroy(&self) -> Result<()> {
        self.dom.destroy().map_err(self.err(Operation::Destroy))
    }

    /// Pauses the guest's vCPUs (libvirt reports it Paused, reason user).
    pub fn suspend(&self) -> Result<()> {
        self.dom.suspend().map_err(self.err(Operation::Suspend))
    }

    /// Resumes a paused guest.
    pub fn resume(&self) -> Result<()> {
        self.dom.resume().map_err(self.err(Operation::Resume))
    }

    /// Removes the domain's definition (a running domain becomes transient and goes away when it stops).
    pub fn undefine(&self) -> Result<()> {
        self.dom.undefine().map_err(self.err(Operation::Undefine))
    }

    /// The domain's current XML as libvirt has it (with the defaults and addresses it filled in).
    pub fn xml(&self) -> Result<String> {
        self.dom.xml_desc(0).map_err(self.err(Operation::XmlDesc))
    }

    /// Enables vCPUs up to `count` in the running guest and its persistent definition (vCPU hotplug; the guest
    /// onlines them).
    pub fn set_vcpus(&self, count: u32) -> Result<()> {
        let flags = virt_sys::VIR_DOMAIN_VCPU_LIVE | virt_sys::VIR_DOMAIN_VCPU_CONFIG;
        self.dom.set_vcpus_flags(count, flags).map_err(self.err(Operation::SetVcpus))
    }

    /// Replaces a device of the running guest with `xml` (matched by libvirt by its alias / address), e.g. a
    /// virtio-mem device with a new `requested` size.
    pub fn update_device(&self, xml: &str) -> Result<()> {
        self.dom.update_device_flags(xml, virt_sys::VIR_DOMAIN_DEVICE_MODIFY_LIVE).map_err(self.err(Operation::Device))
    }

    /// Attaches the device `xml` to the running guest (and its persistent definition).
    pub fn attach_device(&self, xml: &str) -> Result<()> {
        let flags = virt_sys::VIR_DOMAIN_DEVICE_MODIFY_LIVE | virt_sys::VIR_DOMAIN_DEVICE_MODIFY_CONFIG;
        self.dom.attach_device_flags(xml, flags).map_err(self.err(Operation::Device))
    }

    /// Detaches the device `xml` from the running guest (and its persistent definition); the guest is asked to
    /// release it and libvirt returns before it has.
    pub fn detach_device(&self, xml: &str) -> Result<()> {
        let flags = virt_sys::VIR_DOMAIN_DEVICE_MODIFY_LIVE | virt_sys::VIR_DOMAIN_DEVICE_MODIFY_CONFIG;
        self.dom.detach_device_flags(xml, flags).map_err(self.err(Operation::Device))
    }

    /// Live-migrates the domain peer to peer (blocking until libvirt finished or failed): this daemon connects to
    /// `request.libvirt_uri` (the target's libvirtd) and sends the guest's memory (and the disks in
    /// `request.copy_disks`) over `request.uri` / `request.disks_uri`.
    pub fn migrate(&self, request: &MigrateRequest) -> Result<()> {
        let mut flags = virt_sys::VIR_MIGRATE_LIVE
            | virt_sys::VIR_MIGRATE_PEER2PEER
            | virt_sys::VIR_MIGRATE_PERSIST_DEST
            | virt_sys::VIR_MIGRATE_UNDEFINE_SOURCE;
        if !request.copy_disks.is_empty() {
            flags |= virt_sys::VIR_MIGRATE_NON_SHARED_INC;
        }
        if request.auto_converge {
            flags |= virt_sys::VIR_MIGRATE_AUTO_CONVERGE;
        }
        if request.unsafe_migration {
            flags |= virt_sys::VIR_MIGRATE_UNSAFE;
        }
        let params = virt::domain::MigrateParameters {
            uri: Some(request.uri.clone()),
            disks_uri: (!request.copy_disks.is_empty()).then(|| request.disks_uri.clone()),
            migrate_disks: request.copy_disks.clone(),
            bandwidth: request.bandwidth_mib_per_s.filter(|b| *b > 0),
            ..Default::default()
        };
        self.dom.migrate_to_uri3(Some(&request.libvirt_uri), params, flags).map_err(self.err(Operation::Migrate))
    }

    /// The domain's counters ([`DomainStats`]). Fails only when the domain cannot be read at all; a device or a
    /// statistic libvirt refuses (a CD-ROM without media, CPU times without a cgroup) is left out.
    pub fn stats(&self) -> Result<DomainStats> {
        let info = self.dom.info().map_err(self.err(Operation::Stats))?;
        let xml = self.xml()?;
        let memory = self.dom.memory_stats(0).map(|v| v.into_iter().map(|m| (m.tag, m.val)).collect::<Vec<_>>());
        let ns = |v: Option<u64>| v.map(|ns| ns as f64 / 1e9);
        let cpu = self.dom.cpu_stats(-1, 1, 0).ok().and_then(|v| v.into_iter().next());
        let (disks, nics) = devices(&xml);
        // libvirt's counters are signed; a negative one (not reported) reads as 0.
        let u = |v: i64| u64::try_from(v).unwrap_or(0);
        let disks = disks
            .into_iter()
            .filter_map(|(name, target)| {
                let b = self.dom.block_stats(&target).ok()?;
                Some((
                    name,
                    BlockCounters {
                        read_requests: u(b.rd_req),
                        read_bytes: u(b.rd_bytes),
                        write_requests: u(b.wr_req),
                        write_bytes: u(b.wr_bytes),
                    },
                ))
            })
            .collect();
        let interfaces = nics
            .into_iter()
            .filter_map(|(name, target)| {
                let i = self.dom.interface_stats(&target).ok()?;
                Some((
                    name,
                    InterfaceCounters {
                        rx_bytes: u(i.rx_bytes),
                        rx_packets: u(i.rx_packets),
                        rx_errors: u(i.rx_errs),
                        rx_dropped: u(i.rx_drop),
                        tx_bytes: u(i.tx_bytes),
                        tx_packets: u(i.tx_packets),
                        tx_errors: u(i.tx_errs),
                        tx_dropped: u(i.tx_drop),
                    },
                ))
            })
            .collect();
        // virDomainGetJobInfo, not virDomainGetJobStats: virt 0.5's `job_stats` builds a slice from libvirt's
        // NULL parameter list when no job runs (a panic, and a race with a job ending), and the rates it would
        // add are not worth that.
        let migration = self.dom.job_info().ok().filter(|j| j.r#type != 0).map(|j| MigrationCounters {
            total: j.data_total.unwrap_or_default(),
            processed: j.data_processed.unwrap_or_default(),
            remaining: j.data_remaining.unwrap_or_default(),
        });
        Ok(DomainStats {
            memory_domain: info.max_mem.saturating_mul(1024),
            memory: MemoryStats::from_tags(memory.unwrap_or_default()),
            cpu_total: info.cpu_time as f64 / 1e9,
            cpu_user_system: cpu.and_then(|c| Some((ns(c.user_time)?, ns(c.system_time)?))),
            disks,
            interfaces,
            migration,
        })
    }

    /// The progress of the domain's current job (a migration): bytes processed and remaining, `None` when no job
    /// runs.
    pub fn job_progress(&self) -> Result<Option<JobProgress>> {
        let stats = self.dom.job_info().map_err(self.err(Operation::JobInfo))?;
        if stats.r#type == 0 {
            return Ok(None);
        }
        Ok(Some(JobProgress {
            processed: stats.data_processed.unwrap_or_default(),
            remaining: stats.data_remaining.unwrap_or_default(),
        }))
    }
}

/// A domain's counters as libvirt reports them, in plain units (bytes, seconds, counts): what upstream's
/// `kubevirt_vmi_*` domain metrics are made of (`crate::domainstats`). A counter libvirt does not report (a
/// memory statistic without a balloon driver in the guest, CPU times without a cgroup) is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DomainStats {
    /// The domain's `<memory>` (bytes).
    pub memory_domain: u64,
    /// Memory statistics (`virDomainMemoryStats`; the guest's own need its balloon driver).
    pub memory: MemoryStats,
    /// CPU time of the whole QEMU process (vCPUs and emulator), seconds.
    pub cpu_total: f64,
    /// CPU time in user and in system mode, seconds (`virDomainGetCPUStats`; needs the cpuacct cgroup).
    pub cpu_user_system: Option<(f64, f64)>,
    /// Block devices by the VMI's disk name (alias `ua-<name>`; else libvirt's target).
    pub disks: Vec<(String, BlockCounters)>,
    /// Network interfaces by the VMI's interface name (alias `ua-<name>`; else libvirt's target).
    pub interfaces: Vec<(String, InterfaceCounters)>,
    /// The running migration job, seen from the source.
    pub migration: Option<MigrationCounters>,
}

/// `virDomainMemoryStats`, in bytes (faults: counts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Swapped in by the guest.
    pub swap_in: Option<u64>,
    /// Swapped out by the guest.
    pub swap_out: Option<u64>,
    /// Major page faults in the guest.
    pub major_faults: Option<u64>,
    /// Minor page faults in the guest.
    pub minor_faults: Option<u64>,
    /// Memory the guest leaves unused.
    pub unused: Option<u64>,
    /// Memory the guest sees.
    pub available: Option<u64>,
    /// The balloon's current size.
    pub actual_balloon: Option<u64>,
    /// Resident set of the QEMU process.
    pub rss: Option<u64>,
    /// Memory the balloon could reclaim without swapping (`MemAvailable`).
    pub usable: Option<u64>,
    /// Memory in the guest's caches.
    pub disk_caches: Option<u64>,
}

impl MemoryStats {
    /// From libvirt's (tag, value) pairs: KiB values become bytes, fault counts stay counts; unknown tags are
    /// ignored.
    pub fn from_tags(tags: impl IntoIterator<Item = (u32, u64)>) -> MemoryStats {
        let mut m = MemoryStats::default();
        for (tag, v) in tags {
            let kib = Some(v.saturating_mul(1024));
            match tag {
                virt_sys::VIR_DOMAIN_MEMORY_STAT_SWAP_IN => m.swap_in = kib,
                virt_sys::VIR_DOMAIN_MEMORY_STAT_SWAP_OUT => m.swap_out = kib,
                virt_sys::VIR_DOMAIN_MEMORY_STAT_MAJOR_FAULT => m.major_faults = Some(v),
                virt_sys::VIR_DOMAIN_MEMORY_STAT_MINOR_FAULT => m.minor_faults = Some(v),
                virt_sys::VIR_DOMAIN_MEMORY_STAT_UNUSED => m.unused = kib,
                virt_sys::VIR_DOMAIN_MEMORY_STAT_AVAILABLE => m.available = kib,
                virt_sys::VIR_DOMAIN_MEMORY_STAT_ACTUAL_BALLOON => m.actual_balloon = kib,
                virt_sys::VIR_DOMAIN_MEMORY_STAT_RSS => m.rss = kib,
                virt_sys::VIR_DOMAIN_MEMORY_STAT_USABLE => m.usable = kib,
                virt_sys::VIR_DOMAIN_MEMORY_STAT_DISK_CACHES => m.disk_caches = kib,
                _ => {}
            }
        }
        m
    }
}

/// `virDomainBlockStats` of one disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockCounters {
    /// Read requests.
    pub read_requests: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Write requests.
    pub write_requests: u64,
    /// Bytes written.
    pub write_bytes: u64,
}

/// `virDomainInterfaceStats` of one interface, from the guest's side (libvirt swaps a tap's directions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InterfaceCounters {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Received packets dropped.
    pub rx_dropped: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Send errors.
    pub tx_errors: u64,
    /// Sent packets dropped.
    pub tx_dropped: u64,
}

/// A migration job's progress (`virDomainGetJobInfo`), bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MigrationCounters {
    /// Everything to send so far (memory dirtied again counts again).
    pub total: u64,
    /// Sent.
    pub processed: u64,
    /// Left.
    pub remaining: u64,
}

/// (VMI name, libvirt target) pairs.
type Named = Vec<(String, String)>;

/// The disks and interfaces of a domain's live XML.
fn devices(xml: &str) -> (Named, Named) {
    let (mut disks, mut nics) = (Vec::new(), Vec::new());
    let Ok(doc) = roxmltree::Document::parse(xml) else { return (disks, nics) };
    let Some(devs) = doc.root_element().children().find(|n| n.has_tag_name("devices")) else { return (disks, nics) };
    for dev in devs.children().filter(|n| n.has_tag_name("disk") || n.has_tag_name("interface")) {
        let child_attr = |tag: &str, attr: &str| {
            dev.children().find(|n| n.has_tag_name(tag)).and_then(|n| n.attribute(attr)).map(str::to_owned)
        };
        let Some(target) = child_attr("target", "dev") else { continue };
        let alias = child_attr("alias", "name");
        let name = alias.as_deref().and_then(|a| a.strip_prefix("ua-")).map_or_else(|| target.clone(), str::to_owned);
        if dev.has_tag_name("disk") { disks.push((name, target)) } else { nics.push((name, target)) }
    }
    (disks, nics)
}

/// What [`Domain::migrate`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateRequest {
    /// The target libvirtd, as the source libvirtd reaches it.
    pub libvirt_uri: String,
    /// QEMU's migration stream (`unix:///…`).
    pub uri: String,
    /// The NBD stream of the copied disks (`unix:///…`).
    pub disks_uri: String,
    /// Target names (`vda`, …) of the disks to copy (not shared); empty: none (shared storage only).
    pub copy_disks: Vec<String>,
    /// libvirt's bandwidth cap in MiB/s; `None` or 0: unlimited.
    pub bandwidth_mib_per_s: Option<u64>,
    /// `VIR_MIGRATE_AUTO_CONVERGE` (throttle the vCPUs when the copy does not converge).
    pub auto_converge: bool,
    /// `VIR_MIGRATE_UNSAFE` (skip libvirt's disk cache safety check).
    pub unsafe_migration: bool,
}

/// A running job's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobProgress {
    /// Bytes sent so far.
    pub processed: u64,
    /// Bytes left (memory dirtied again counts again).
    pub remaining: u64,
}

#[cfg(test)]
mod tests {
    use virt::domain::{DomainBlockedReason, DomainNoStateReason};

    use super::*;

    #[test]
    fn libvirt_states_and_reasons_become_ours() {
        type Raw = (Enum<VirtState, u32>, Enum<VirtReason, i32>);
        let table: Vec<(Raw, (DomainState, StateReason))> = vec![
            (
                (
                    Enum::Known(VirtState::Running),
                    Enum::Known(VirtReason::Running(Enum::Known(DomainRunningReason::Booted))),
                ),
                (DomainState::Running, StateReason::Booted),
            ),
            (
                (
                    Enum::Known(VirtState::Running),
                    Enum::Known(VirtReason::Running(Enum::Known(DomainRunningReason::MigrationCancelled))),
                ),
                (DomainState::Running, StateReason::MigrationCanceled),
            ),
            (
                (
                    Enum::Known(VirtState::Paused),
                    Enum::Known(VirtReason::Paused(Enum::Known(DomainPausedReason::IOError))),
                ),
                (DomainState::Paused, StateReason::IoError),
            ),
            (
                (
                    Enum::Known(VirtState::Paused),
                    Enum::Known(VirtReason::Paused(Enum::Known(DomainPausedReason::PostCopyFailed))),
                ),
                (DomainState::Paused, StateReason::PostCopyFailed),
            ),
            (
                (
                    Enum::Known(VirtState::Shutdown),
                    Enum::Known(VirtReason::Shutdown(Enum::Known(DomainShutdownReason::User))),
                ),
                (DomainState::ShuttingDown, StateReason::User),
            ),
            (
                (
                    Enum::Known(VirtState::Shutoff),
                    Enum::Known(VirtReason::Shutoff(Enum::Known(DomainShutoffReason::Shutdown))),
                ),
                (DomainState::Shutoff, StateReason::Shutdown),
            ),
            (
                (
                    Enum::Known(VirtState::Shutoff),
                    Enum::Known(VirtReason::Shutoff(Enum::Known(DomainShutoffReason::Destroyed))),
                ),
                (DomainState::Shutoff, StateReason::Destroyed),
            ),
            (
                (
                    Enum::Known(VirtState::Shutoff),
                    Enum::Known(VirtReason::Shutoff(Enum::Known(DomainShutoffReason::Migrated))),
                ),
                (DomainState::Shutoff, StateReason::Migrated),
            ),
            (
                (
                    Enum::Known(VirtState::Crashed),
                    Enum::Known(VirtReason::Crashed(Enum::Known(DomainCrashedReason::Panicked))),
                ),
                (DomainState::Crashed, StateReason::Panicked),
            ),
            (
                (
                    Enum::Known(VirtState::Blocked),
                    Enum::Known(VirtReason::Blocked(Enum::Known(DomainBlockedReason::Unknown))),
                ),
                (DomainState::Blocked, StateReason::Unknown),
            ),
            (
                (
                    Enum::Known(VirtState::NoState),
                    Enum::Known(VirtReason::NoState(Enum::Known(DomainNoStateReason::Unknown))),
                ),
                (DomainState::NoState, StateReason::Unknown),
            ),
            (
                (Enum::Known(VirtState::Shutoff), Enum::Known(VirtReason::Shutoff(Enum::Unknown(99)))),
                (DomainState::Shutoff, StateReason::Unrecognised(99)),
            ),
            ((Enum::Unknown(12), Enum::Unknown(3)), (DomainState::Unrecognised(12), StateReason::Unrecognised(3))),
        ];
        for ((state, reason), want) in table {
            assert_eq!(state_of(state, reason), want, "{state:?} {reason:?}");
        }
    }

    #[test]
    fn a_nul_byte_is_refused_before_it_reaches_virt() {
        let err = Libvirt::connect("qemu:///system\0").err().unwrap_or_else(|| panic!("connected"));
        assert_eq!((err.operation, err.kind()), (Operation::Connect, ErrorKind::Rejected));
        assert!(err.to_string().starts_with("connecting to qemu:///system"), "{err}");
    }

    #[test]
    fn the_test_driver_defines_starts_stops_and_undefines() {
        // libvirt's built-in test driver (no daemon): the client's calls and error kinds, not QEMU.
        let lv = Libvirt::connect("test:///default").unwrap_or_else(|e| panic!("{e}"));
        assert!(lv.lookup("nothere").unwrap_or_else(|e| panic!("{e}")).is_none());
        let xml = "<domain type='test'><name>t1</name><memory unit='MiB'>64</memory>\
                   <os><type>hvm</type></os></domain>";
        let dom = lv.define(xml).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dom.name(), "t1");
        let state = dom.state().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(state.0, DomainState::Shutoff);
        dom.start().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dom.state().unwrap_or_else(|e| panic!("{e}")), (DomainState::Running, StateReason::Booted));
        dom.destroy().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dom.state().unwrap_or_else(|e| panic!("{e}")), (DomainState::Shutoff, StateReason::Destroyed));
        let again = dom.destroy().err().unwrap_or_else(|| panic!("destroyed twice"));
        assert_eq!(again.kind(), ErrorKind::InvalidState, "{again}: {}", again.source);
        dom.undefine().unwrap_or_else(|e| panic!("{e}"));
        let gone = dom.state().err().unwrap_or_else(|| panic!("state of an undefined domain"));
        assert_eq!((gone.operation, gone.kind()), (Operation::State, ErrorKind::NoDomain), "{}", gone.source);
        assert!(lv.lookup("t1").unwrap_or_else(|e| panic!("{e}")).is_none());
        let bad = lv.define("<domain type='test'><name>x</name>").err().unwrap_or_else(|| panic!("bad XML defined"));
        assert_eq!(bad.kind(), ErrorKind::Rejected, "{}", bad.source);
    }
}
