//! The migration proxies between two node agents (upstream's migration proxy): in the source pod a unix socket per
//! [`MigrationChannel`] ([`SocketDir::migration_socket`]), each connection forwarded over mutual TLS (the node
//! agents' certificates: virt-api's client certificate, the node API's serving certificate) to a port the target
//! agent opened for that channel, which forwards it to the target pod's socket (its libvirtd, QEMU's incoming
//! migration, libvirt's NBD server). Dropping a [`Proxies`] closes its listeners and every connection through
//! them — which is also how a running migration is cancelled: its streams break and libvirt gives up, the guest
//! going on at the source.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use contracts::kubevirt::consts::QEMU_UID;
use contracts::kubevirt::launcher::{MigrationChannel, SocketDir};
use contracts::kubevirt::node_api;
use controller_runtime::tls;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::task::JoinSet;

/// Buffer size of each direction of a proxied connection.
const PIPE_BUFFER: usize = 256 << 10;

/// How long a TLS handshake between the agents may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A listener could not be set up.
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The target published an address that is not an IP address.
    #[error("the target's address {0:?} is not an IP address")]
    Address(String),
}

fn io(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let action = action.into();
    move |source| Error::Io { action, source }
}

/// The listeners and connections of one migration on one side; dropping it closes them all.
#[derive(Debug)]
pub struct Proxies {
    _tasks: JoinSet<()>,
}

/// Creates `dir`'s migration directory, owned by the `qemu` user (QEMU binds its incoming sockets there on the
/// target; libvirtd and QEMU connect to the proxies' sockets there on the source).
pub fn prepare_dir(dir: &SocketDir) -> Result<(), Error> {
    let path = dir.migration_dir();
    std::fs::create_dir_all(&path).map_err(io(format!("creating {path}")))?;
    chown_qemu(&path)
}

fn chown_qemu(path: &str) -> Result<(), Error> {
    let id = u32::try_from(QEMU_UID).unwrap_or(107);
    rustix::fs::chown(path, Some(rustix::fs::Uid::from_raw(id)), Some(rustix::fs::Gid::from_raw(id)))
        .map_err(|e| Error::Io { action: format!("giving {path} to the qemu user"), source: e.into() })
}

async fn pipe<A, B>(mut a: A, mut b: B)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    // Guest memory streams through here: 256 KiB buffers move it with a fraction of the syscalls (and TLS
    // records) of tokio's 8 KiB default; measured by benches/migration.sh against virsh migrate.
    if let Err(e) = tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, PIPE_BUFFER, PIPE_BUFFER).await {
        tracing::debug!(error = %e, "migration proxy connection ended");
    }
}

/// The target side: one TLS listener per channel on an ephemeral port of `bind` (the agent's pod IP), forwarding to
/// `dir`'s sockets. Returns the proxies and `targetDirectMigrationNodePorts` (port → upstream's channel value).
pub async fn target(
    dir: &SocketDir,
    bind: std::net::IpAddr,
    tls_config: Arc<rustls::ServerConfig>,
) -> Result<(Proxies, BTreeMap<String, i64>), Error> {
    prepare_dir(dir)?;
    let mut tasks = JoinSet::new();
    let mut ports = BTreeMap::new();
    for channel in MigrationChannel::ALL {
        let listener = TcpListener::bind(SocketAddr::new(bind, 0)).await.map_err(io("binding a migration port"))?;
        let port = listener.local_addr().map_err(io("reading a migration port"))?.port();
        ports.insert(port.to_string(), channel.upstream_port());
        let to = match channel {
            MigrationChannel::Libvirt => dir.libvirt_socket(),
            other => dir.migration_socket(other),
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls_config.clone());
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((tcp, peer)) = listener.accept().await else { break };
                let (acceptor, to) = (acceptor.clone(), to.clone());
                conns.spawn(async move {
                    let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => return tracing::warn!(%peer, error = %e, "migration proxy: TLS refused"),
                        Err(_) => return tracing::warn!(%peer, "migration proxy: TLS handshake timed out"),
                    };
                    let cn = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|c| tls::common_name(c));
                    if cn.as_deref() != Some(node_api::CLIENT_COMMON_NAME) {
                        return tracing::warn!(%peer, ?cn, "migration proxy: client certificate refused");
                    }
                    match UnixStream::connect(&to).await {
                        Ok(unix) => pipe(stream, unix).await,
                        Err(e) => {
                            tracing::warn!(socket = %to, error = %e, "migration proxy: target socket unreachable")
                        }
                    }
                });
                // Reap finished connections so the set does not grow.
                while conns.try_join_next().is_some() {}
            }
        });
    }
    Ok((Proxies { _tasks: tasks }, ports))
}

/// The source side: a unix socket per channel in `dir` (owned by the `qemu` user), each connection forwarded over
/// TLS to `address`:`ports[channel]`.
pub async fn source(
    dir: &SocketDir,
    address: &str,
    ports: &BTreeMap<MigrationChannel, u16>,
    tls_config: Arc<rustls::ClientConfig>,
) -> Result<Proxies, Error> {
    let ip: std::net::IpAddr = address.parse().map_err(|_| Error::Address(address.to_owned()))?;
    prepare_dir(dir)?;
    let server = tls::server_name(node_api::SERVER_NAME)
        .map_err(|e| Error::Io { action: "naming the target".into(), source: std::io::Error::other(e.to_string()) })?;
    let mut tasks = JoinSet::new();
    for (channel, port) in ports {
        let path = dir.migration_socket(*channel);
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).map_err(io(format!("binding {path}")))?;
        chown_qemu(&path)?;
        let (to, connector, server) =
            (SocketAddr::new(ip, *port), tokio_rustls::TlsConnector::from(tls_config.clone()), server.clone());
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((unix, _)) = listener.accept().await else { break };
                let (connector, server) = (connector.clone(), server.clone());
                conns.spawn(async move {
                    let tcp = match TcpStream::connect(to).await {
                        Ok(t) => t,
                        Err(e) => return tracing::warn!(%to, error = %e, "migration proxy: target unreachable"),
                    };
                    let _ = tcp.set_nodelay(true);
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(server, tcp)).await {
                        Ok(Ok(tls)) => pipe(unix, tls).await,
                        Ok(Err(e)) => tracing::warn!(%to, error = %e, "migration proxy: TLS with the target failed"),
                        Err(_) => tracing::warn!(%to, "migration proxy: TLS handshake with the target timed out"),
                    }
                });
                while conns.try_join_next().is_some() {}
            }
        });
    }
    Ok(Proxies { _tasks: tasks })
}
