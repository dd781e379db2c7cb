//! The aggregated API `subresources.kubevirt.io` (`v1`, `v1alpha3`; APIServices in `deploy/virt-api.yaml`), what
//! upstream's `virtctl` calls (contract §0.2, §8):
//!
//! ```text
//! kube-apiserver (authenticates and authorizes the user, e.g. `update virtualmachines/start`)
//!   ──mTLS, front-proxy client certificate (controller_runtime::aggregated)──► server ─► route
//!   GET  /apis/subresources.kubevirt.io[/{v}]                        discovery
//!   GET  …/{v}/version | healthz                                     (guestfs: 501, not supported)
//!   PUT  …/{v}/namespaces/{ns}/virtualmachines/{vm}/start|stop|restart
//!        ─► read the VM and its VMI ─► lifecycle::plan (pure) ─► JSON patches (VMI, VM, VM status) ─► 202
//!   PUT  …/{v}/namespaces/{ns}/virtualmachines/{vm}/migrate   (MigrateOptions{dryRun, addedNodeSelector})
//!        ─► read the VM and its VMI ─► migrate::plan (pure: Running, else 409) ─► create the VMIM
//!        `kubevirt-migrate-vm-…` as virt-api (its webhooks admit it) ─► 202
//!   GET  …/{v}/namespaces/{ns}/virtualmachineinstances/{vmi}/console|vnc   websocket ─► vmi_ops ─► node agent
//!   GET  …/{v}/namespaces/{ns}/virtualmachineinstances/{vmi}/vnc/screenshot ─► vmi_ops ─► node agent ─► the PNG
//!   GET  …/{v}/namespaces/{ns}/virtualmachines/{vm}/expand-spec      ─► lookup::expansion ─► expand (pure) ─► 200
//!   PUT  …/{v}/namespaces/{ns}/expand-vm-spec   (the VM in the body)  ─► the same, errors 400
//!   PUT  …/{v}/namespaces/{ns}/virtualmachineinstances/{vmi}/pause|unpause ─► vmi_ops ─► node agent ─► 200
//!   GET  …/{v}/namespaces/{ns}/virtualmachine[instance]s/{name}/portforward/{port}[/{protocol}]
//!        websocket ─► portforward ─► the guest's address over the pod network
//!   GET guestosinfo|userlist|filesystemlist, PUT freeze|unfreeze: upstream's 409 without a guest agent
//!   PUT  …/{v}/namespaces/{ns}/virtualmachine[instance]s/{name}/addvolume|removevolume
//!        ─► read the VM or VMI ─► volumes::plan_vm|plan_vmi (pure) ─► merge patch of its volumes and disks ─► 202
//!   other subresources (memorydump, …): 501 with the subresource's name
//! ```
//!
//! The kube-apiserver has authorized the user before it proxies; this server only checks that the request comes
//! through the front proxy (its client certificate) and names a user.

use std::sync::Arc;

use bytes::Bytes;
use contracts::kubevirt::consts::{PLAIN_STREAM_PROTOCOL, SUBRESOURCES_GROUP, VERSION, VERSIONS};
use contracts::kubevirt::node_api::{self, Command};
use controller_runtime::aggregated::{RequestHeaderConfig, identity};
use controller_runtime::api::api_message;
use crds::kubevirt::migration::VirtualMachineInstanceMigration;
use crds::kubevirt::{VirtualMachine, VirtualMachineInstance};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use kube::api::{Api, Patch as KubePatch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::Config;
use crate::expand;
use crate::lifecycle::{self, Lifecycle, Options, Patch, Refusal};
use crate::lookup;
use crate::metrics::{Active, Connection, Metrics};
use crate::migrate::{self, MigrateOptions};
use crate::node::NodeClient;
use crate::portforward;
use crate::server::respond;
use crate::vmi_ops;
use crate::volumes;

/// Largest lifecycle request body accepted (the options are a few fields).
const MAX_BODY: usize = 64 << 10;

/// What the subresource API needs: the front proxy's configuration, a client for the VMs and VMIs, and the
/// node agents' client.
pub struct Subresources {
    /// Who may assert identities (`kube-system/extension-apiserver-authentication`).
    pub auth: RequestHeaderConfig,
    /// Reads and patches VMs and VMIs, creates the migrations of `migrate` (virt-api's ServiceAccount).
    pub client: kube::Client,
    /// Console, VNC, pause and unpause go through the VMI's node agent (`None`: no client certificate; they
    /// answer 503).
    pub nodes: Option<NodeClient>,
    /// The cluster configuration `expand-spec` applies defaults with (the webhooks' own).
    pub config: Arc<Config>,
    /// The connection metrics (served at `/metrics`).
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Subresources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subresources").finish_non_exhaustive()
    }
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /apis/subresources.kubevirt.io`.
    Group,
    /// `GET /apis/subresources.kubevirt.io/{version}`.
    Resources(String),
    /// `GET …/{version}/version`.
    Version,
    /// `GET …/{version}/healthz`.
    Healthz,
    /// A VM lifecycle subresource.
    Lifecycle {
        /// Namespace.
        namespace: String,
        /// VM name.
        name: String,
        /// start, stop or restart.
        action: Lifecycle,
    },
    /// `PUT virtualmachines/{name}/migrate`.
    Migrate {
        /// Namespace.
        namespace: String,
        /// VM name.
        name: String,
    },
    /// A VMI subresource the node agent carries out (console, vnc, pause, unpause).
    Vmi {
        /// Namespace.
        namespace: String,
        /// VMI name.
        name: String,
        /// What to do.
        command: Command,
    },
    /// `portforward/{port}[/{protocol}]` of a VMI, or of a VM's VMI.
    PortForward {
        /// Namespace.
        namespace: String,
        /// VMI or VM name.
        name: String,
        /// Whether `name` is a VM (`virtualmachines/…/portforward`).
        vm: bool,
        /// The path's port, as given (checked when dialling, as upstream).
        port: String,
        /// The path's protocol (`None`: TCP).
        protocol: Option<String>,
    },
    /// A guest agent subresource (`vmi_ops::GUEST_AGENT_SUBRESOURCES`): refused with upstream's texts.
    GuestAgent {
        /// Namespace.
        namespace: String,
        /// VMI name.
        name: String,
        /// Which one.
        sub: String,
    },
    /// `GET virtualmachines/{name}/expand-spec`: the stored VM, expanded.
    ExpandVm {
        /// Namespace.
        namespace: String,
        /// VM name.
        name: String,
    },
    /// `PUT virtualmachine[instance]s/{name}/addvolume|removevolume`.
    Volume {
        /// Namespace.
        namespace: String,
        /// VM or VMI name.
        name: String,
        /// Whether `name` is a VM.
        vm: bool,
        /// [`volumes::ADD`] or [`volumes::REMOVE`].
        sub: &'static str,
    },
    /// `PUT namespaces/{ns}/expand-vm-spec`: the VM in the body, expanded.
    ExpandSpec {
        /// The request's namespace.
        namespace: String,
    },
    /// A subresource upstream has and this server does not serve (yet): `resource/sub`.
    NotImplemented(String),
    /// A known path with another method.
    MethodNotAllowed,
    /// Anything else.
    NotFound,
}

/// The route table (paths under `/apis/subresources.kubevirt.io`; `query` for VNC's `preserveSession`).
pub fn route(method: &Method, path: &str, query: Option<&str>) -> Route {
    let path = path.trim_end_matches('/');
    let Some(rest) = path.strip_prefix("/apis/").and_then(|p| p.strip_prefix(SUBRESOURCES_GROUP)) else {
        return Route::NotFound;
    };
    let get = method == Method::GET;
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    let known = |v: &str| VERSIONS.contains(&v);
    match parts.as_slice() {
        [] if get => Route::Group,
        [v] if known(v) && get => Route::Resources((*v).to_owned()),
        [v, "version"] if known(v) && get => Route::Version,
        [v, "healthz"] if known(v) && get => Route::Healthz,
        [v, "guestfs"] if known(v) => Route::NotImplemented("guestfs".into()),
        [v, "namespaces", ns, "virtualmachines", name, expand::VM_SUBRESOURCE] if known(v) => {
            if !get {
                return Route::MethodNotAllowed;
            }
            Route::ExpandVm { namespace: (*ns).to_owned(), name: (*name).to_owned() }
        }
        [v, "namespaces", ns, expand::SPEC_RESOURCE] if known(v) => {
            if method != Method::PUT {
                return Route::MethodNotAllowed;
            }
            Route::ExpandSpec { namespace: (*ns).to_owned() }
        }
        [v, "namespaces", ns, "virtualmachines", name, migrate::SUBRESOURCE] if known(v) => {
            if method != Method::PUT {
                return Route::MethodNotAllowed;
            }
            Route::Migrate { namespace: (*ns).to_owned(), name: (*name).to_owned() }
        }
        [
            v,
            "namespaces",
            ns,
            resource @ ("virtualmachines" | "virtualmachineinstances"),
            name,
            sub @ (volumes::ADD | volumes::REMOVE),
        ] if known(v) => {
            if method != Method::PUT {
                return Route::MethodNotAllowed;
            }
            let sub = if *sub == volumes::ADD { volumes::ADD } else { volumes::REMOVE };
            Route::Volume {
                namespace: (*ns).to_owned(),
                name: (*name).to_owned(),
                vm: *resource == "virtualmachines",
                sub,
            }
        }
        [v, "namespaces", ns, "virtualmachines", name, sub] if known(v) => match Lifecycle::parse(sub) {
            Some(action) if method == Method::PUT => {
                Route::Lifecycle { namespace: (*ns).to_owned(), name: (*name).to_owned(), action }
            }
            Some(_) => Route::MethodNotAllowed,
            None => Route::NotImplemented(format!("virtualmachines/{sub}")),
        },
        [v, "namespaces", ns, "virtualmachineinstances", name, "vnc", "screenshot"] if known(v) => {
            if !get {
                return Route::MethodNotAllowed;
            }
            Route::Vmi { namespace: (*ns).to_owned(), name: (*name).to_owned(), command: Command::Screenshot }
        }
        [v, "namespaces", ns, "virtualmachineinstances", name, sub @ ("console" | "vnc" | "pause" | "unpause")]
            if known(v) =>
        {
            let node_path = format!("/v1/namespaces/{ns}/virtualmachineinstances/{name}/{sub}");
            match Command::parse(&node_path, query) {
                Some((command, ..))
                    if (command.is_stream() && get) || (!command.is_stream() && method == Method::PUT) =>
                {
                    Route::Vmi { namespace: (*ns).to_owned(), name: (*name).to_owned(), command }
                }
                _ => Route::MethodNotAllowed,
            }
        }
        [
            v,
            "namespaces",
            ns,
            resource @ ("virtualmachines" | "virtualmachineinstances"),
            name,
            portforward::SUBRESOURCE,
            port,
            protocol @ ..,
        ] if known(v) && protocol.len() <= 1 => {
            if !get {
                return Route::MethodNotAllowed;
            }
            Route::PortForward {
                namespace: (*ns).to_owned(),
                name: (*name).to_owned(),
                vm: *resource == "virtualmachines",
                port: (*port).to_owned(),
                protocol: protocol.first().map(|p| (*p).to_owned()),
            }
        }
        [v, "namespaces", ns, "virtualmachineinstances", name, sub]
            if known(v) && vmi_ops::GUEST_AGENT_SUBRESOURCES.contains(sub) =>
        {
            let put = matches!(*sub, "freeze" | "unfreeze");
            if (put && method == Method::PUT) || (!put && get) {
                Route::GuestAgent { namespace: (*ns).to_owned(), name: (*name).to_owned(), sub: (*sub).to_owned() }
            } else {
                Route::MethodNotAllowed
            }
        }
        [v, "namespaces", _, resource @ ("virtualmachines" | "virtualmachineinstances"), _, sub @ ..]
            if known(v) && !sub.is_empty() =>
        {
            Route::NotImplemented(format!("{resource}/{}", sub.join("/")))
        }
        _ => Route::NotFound,
    }
}

fn json_response(status: StatusCode, v: &Value) -> Response<Full<Bytes>> {
    respond(status, "application/json", v.to_string())
}

fn failure(code: u16, reason: &str, message: &str) -> Response<Full<Bytes>> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, &controller_runtime::aggregated::status(code, reason, message))
}

fn group_version(v: &str) -> Value {
    json!({"groupVersion": format!("{SUBRESOURCES_GROUP}/{v}"), "version": v})
}

/// The `APIGroup` of `subresources.kubevirt.io`.
pub fn group_json() -> Value {
    let versions: Vec<Value> = VERSIONS.iter().map(|v| group_version(v)).collect();
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": SUBRESOURCES_GROUP, "versions": versions,
           "preferredVersion": group_version(VERSION)})
}

/// The `APIResourceList` of `version`: what this server serves.
pub fn resources_json(version: &str) -> Value {
    let mut resources: Vec<Value> = [Lifecycle::Start, Lifecycle::Stop, Lifecycle::Restart]
        .iter()
        .map(|l| {
            json!({"name": format!("virtualmachines/{}", l.as_str()), "singularName": "", "namespaced": true,
                   "kind": "", "verbs": ["update"]})
        })
        .collect();
    resources.push(json!({"name": format!("virtualmachines/{}", migrate::SUBRESOURCE), "singularName": "",
                          "namespaced": true, "kind": "", "verbs": ["update"]}));
    resources.push(json!({"name": format!("virtualmachines/{}", expand::VM_SUBRESOURCE), "singularName": "",
                          "namespaced": true, "kind": "", "verbs": ["get"]}));
    resources.push(json!({"name": expand::SPEC_RESOURCE, "singularName": "", "namespaced": true, "kind": "",
                          "verbs": ["update"]}));
    for (name, verbs) in [
        ("console", json!(["get"])),
        ("vnc", json!(["get"])),
        ("vnc/screenshot", json!(["get"])),
        ("pause", json!(["update"])),
        ("unpause", json!(["update"])),
        (portforward::SUBRESOURCE, json!(["get"])),
    ] {
        resources
            .push(json!({"name": format!("virtualmachineinstances/{name}"), "singularName": "", "namespaced": true,
                              "kind": "", "verbs": verbs}));
    }
    for name in ["version", "healthz"] {
        resources.push(json!({"name": name, "singularName": "", "namespaced": false, "kind": "", "verbs": ["get"]}));
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": format!("{SUBRESOURCES_GROUP}/{version}"),
           "resources": resources})
}

/// The server's version as upstream's `version.Info`.
pub fn version_json() -> Value {
    json!({"gitVersion": format!("v{}", env!("CARGO_PKG_VERSION")), "gitCommit": "", "gitTreeState": "clean",
           "buildDate": "", "goVersion": "", "compiler": "rustc", "platform": "linux/amd64"})
}

fn kube_failure(e: &kube::Error) -> Response<Full<Bytes>> {
    match e {
        kube::Error::Api(s) => failure(s.code, &s.reason, &s.message),
        other => failure(500, "InternalError", &other.to_string()),
    }
}

/// Serves one request of the aggregated API; `peer_cn` is the verified client certificate's common name.
pub async fn handle(req: Request<Incoming>, peer_cn: Option<String>, s: Arc<Subresources>) -> Response<Full<Bytes>> {
    let route = route(req.method(), req.uri().path(), req.uri().query());
    if !s.auth.allows(peer_cn.as_deref()) {
        return failure(401, "Unauthorized", "a front-proxy client certificate is required");
    }
    let Some(who) = identity(req.headers(), &s.auth) else {
        return failure(401, "Unauthorized", "no user in the request headers");
    };
    match route {
        Route::Group => json_response(StatusCode::OK, &group_json()),
        Route::Resources(v) => json_response(StatusCode::OK, &resources_json(&v)),
        Route::Version => json_response(StatusCode::OK, &version_json()),
        Route::Healthz => respond(StatusCode::OK, "text/plain", "ok"),
        Route::NotImplemented(sub) => {
            failure(501, "NotImplemented", &format!("the {sub} subresource is not supported by this virt-api"))
        }
        Route::MethodNotAllowed => failure(405, "MethodNotAllowed", "the server does not allow this method"),
        Route::NotFound => failure(404, "NotFound", "the server could not find the requested resource"),
        Route::Vmi { namespace, name, command } => {
            let Some(nodes) = s.nodes.clone() else {
                return failure(503, "ServiceUnavailable", "virt-api has no client certificate for the node agents");
            };
            match vmi_request(req, &s.client, &nodes, &s.metrics, &namespace, &name, command).await {
                Ok(response) => {
                    tracing::info!(user = who.user, vmi = %format!("{namespace}/{name}"), command = command.name(),
                        "VMI subresource");
                    response
                }
                Err(a) => a.response(),
            }
        }
        Route::PortForward { namespace, name, vm, port, protocol } => {
            match port_forward(req, &s, &namespace, &name, vm, &port, protocol.as_deref()).await {
                Ok(response) => {
                    tracing::info!(user = who.user, target = %format!("{namespace}/{name}"), vm, port,
                        "port forward");
                    response
                }
                Err(a) => a.response(),
            }
        }
        Route::GuestAgent { namespace, name, sub } => {
            let r = match read_vmi(&s.client, &namespace, &name).await {
                Ok(vmi) => vmi_ops::guest_agent(&sub, &vmi),
                Err(a) => return a.response(),
            };
            failure(r.code, r.reason, &r.message)
        }
        Route::ExpandVm { namespace, name } => match expand_vm(&s.client, &s.config, &namespace, &name).await {
            Ok(vm) => json_response(StatusCode::OK, &vm),
            Err(a) => a.response(),
        },
        Route::ExpandSpec { namespace } => match expand_spec(req, &s.client, &s.config, &namespace).await {
            Ok(vm) => json_response(StatusCode::OK, &vm),
            Err(a) => a.response(),
        },
        Route::Migrate { namespace, name } => {
            let options = match migrate_options(req).await {
                Ok(o) => o,
                Err(r) => return failure(r.code, r.reason, &r.message),
            };
            match migrate_request(&s.client, &namespace, &name, &options).await {
                Ok(created) => {
                    tracing::info!(user = who.user, vm = %format!("{namespace}/{name}"), migration = created,
                        dry_run = options.dry_run.as_ref().is_some_and(|d| !d.is_empty()), "migrate request");
                    respond(StatusCode::ACCEPTED, "application/json", "")
                }
                Err(a) => a.response(),
            }
        }
        Route::Volume { namespace, name, vm, sub } => {
            match volume_request(req, &s.client, &s.config, &namespace, &name, vm, sub).await {
                Ok(dry_run) => {
                    let resource = if vm { "vm" } else { "vmi" };
                    tracing::info!(user = who.user, %resource, name = %format!("{namespace}/{name}"), sub, dry_run,
                        "volume request");
                    respond(StatusCode::ACCEPTED, "application/json", "")
                }
                Err(a) => a.response(),
            }
        }
        Route::Lifecycle { namespace, name, action } => {
            let options = match options(req).await {
                Ok(o) => o,
                Err(r) => return failure(r.code, r.reason, &r.message),
            };
            match lifecycle_request(&s.client, &namespace, &name, action, &options).await {
                Ok(()) => {
                    tracing::info!(user = who.user, vm = %format!("{namespace}/{name}"), action = action.as_str(),
                        dry_run = !options.dry_run.is_empty(), "lifecycle request");
                    respond(StatusCode::ACCEPTED, "application/json", "")
                }
                Err(a) => a.response(),
            }
        }
    }
}

/// The request body's options (`{}` or empty: the defaults).
async fn options(req: Request<Incoming>) -> Result<Options, Refusal> {
    let Some(body) = body(req, MAX_BODY).await? else { return Ok(Options::default()) };
    serde_json::from_slice(&body).map_err(|e| Refusal::bad_request(unmarshal_error(&e)))
}

/// The `migrate` request body's options (`{}` or empty: the defaults).
async fn migrate_options(req: Request<Incoming>) -> Result<MigrateOptions, Refusal> {
    let Some(body) = body(req, MAX_BODY).await? else { return Ok(MigrateOptions::default()) };
    serde_json::from_slice(&body).map_err(|e| Refusal::bad_request(unmarshal_error(&e)))
}

/// `migrate`: reads the VM and its VMI (upstream's 404s; other read failures are 500 "unable to retrieve …"),
/// plans, and creates the migration as virt-api; `Ok` with the created migration's name.
async fn migrate_request(
    client: &kube::Client,
    ns: &str,
    name: &str,
    options: &MigrateOptions,
) -> Result<String, Answer> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    match vms.get_opt(name).await {
        Ok(Some(_)) => {}
        Ok(None) => return Err(Refusal::vm_not_found(name).into()),
        Err(e) => return Err(Refusal::internal(format!("unable to retrieve vm [{name}]: {}", api_message(&e))).into()),
    }
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let vmi = match vmis.get_opt(name).await {
        Ok(Some(vmi)) => vmi,
        Ok(None) => return Err(vmi_ops::vmi_not_found(name).into()),
        Err(e) => {
            return Err(Refusal::internal(format!("unable to retrieve vmi [{name}]: {}", api_message(&e))).into());
        }
    };
    let plan = migrate::plan(name, options, &vmi)?;
    let migrations: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), ns);
    let params = PostParams { dry_run: plan.dry_run, ..PostParams::default() };
    // Upstream wraps every create failure (a webhook's refusal included) in an internal error.
    let created = migrations.create(&params, &plan.migration).await.map_err(|e| Refusal::internal(api_message(&e)))?;
    Ok(created.metadata.name.unwrap_or_default())
}

/// `addvolume` / `removevolume` of VM (`vm`) or VMI `ns/name`: upstream's gate, body, lookup and verification
/// refusals; the patch sent as virt-api (dryRun honoured). `Ok(dry_run)`.
async fn volume_request(
    req: Request<Incoming>,
    client: &kube::Client,
    config: &Config,
    ns: &str,
    name: &str,
    vm: bool,
    sub: &str,
) -> Result<bool, Answer> {
    if !config.enabled(crate::config::FeatureGate::DeclarativeHotplugVolumes) {
        return Err(Refusal::bad_request(volumes::NOT_ENABLED).into());
    }
    let Some(body) = body(req, MAX_BODY).await? else { return Err(Refusal::bad_request(volumes::NO_BODY).into()) };
    let request = volumes::Request::parse(sub, &body)?;
    let params = PatchParams { dry_run: request.dry_run(), ..PatchParams::default() };
    let sent = if vm {
        let api: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
        let vm = match api.get_opt(name).await {
            Ok(Some(vm)) => vm,
            Ok(None) => return Err(Refusal::vm_not_found(name).into()),
            Err(e) => {
                return Err(Refusal::internal(format!("unable to retrieve vm [{name}]: {}", api_message(&e))).into());
            }
        };
        let patch = volumes::plan_vm(&vm, &request)?;
        api.patch(name, &params, &KubePatch::Merge(&patch)).await.map(drop)
    } else {
        let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
        let vmi = match api.get_opt(name).await {
            Ok(Some(vmi)) => vmi,
            Ok(None) => return Err(vmi_ops::vmi_not_found(name).into()),
            Err(e) => {
                return Err(Refusal::internal(format!("unable to retrieve vmi [{name}]: {}", api_message(&e))).into());
            }
        };
        let patch = volumes::plan_vmi(&vmi, &request)?;
        api.patch(name, &params, &KubePatch::Merge(&patch)).await.map(drop)
    };
    match sent {
        Ok(()) => Ok(request.dry_run()),
        // A refusal of the API server's (the webhooks' Invalid, a conflict) is passed on; anything else is 500.
        Err(e @ kube::Error::Api(_)) if matches!(&e, kube::Error::Api(s) if s.code == 422 || s.code == 409) => {
            Err(Answer::Kube(e))
        }
        Err(e) => {
            let what = if vm { "vm" } else { "vmi" };
            Err(Refusal::internal(format!("unable to patch {what}: {}", api_message(&e))).into())
        }
    }
}

/// The request body, at most `limit` bytes (`None`: empty or only whitespace).
async fn body(req: Request<Incoming>, limit: usize) -> Result<Option<Bytes>, Refusal> {
    let body = Limited::new(req.into_body(), limit)
        .collect()
        .await
        .map_err(|e| Refusal::bad_request(format!("reading the body: {e}")))?
        .to_bytes();
    Ok((!body.iter().all(u8::is_ascii_whitespace)).then_some(body))
}

/// `expand-spec` of the stored VM `ns/name`: upstream's 404 for an unknown VM, a 500 when it cannot be read or
/// expanded.
async fn expand_vm(client: &kube::Client, config: &Config, ns: &str, name: &str) -> Result<Value, Answer> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let vm = match vms.get_opt(name).await {
        Ok(Some(vm)) => vm,
        Ok(None) => return Err(Refusal::vm_not_found(name).into()),
        Err(e) => return Err(Refusal::internal(format!("unable to retrieve vm [{name}]: {e}")).into()),
    };
    expanded(client, config, ns, &vm).await.map_err(|m| Refusal::internal(m).into())
}

/// `expand-vm-spec`: the VM in the request body (its namespace empty or `ns`), expanded; 400 for anything wrong.
async fn expand_spec(
    req: Request<Incoming>,
    client: &kube::Client,
    config: &Config,
    ns: &str,
) -> Result<Value, Answer> {
    let body = body(req, expand::MAX_VM_BODY).await?.ok_or_else(|| Refusal::bad_request("empty request body"))?;
    let mut vm: VirtualMachine =
        serde_json::from_slice(&body).map_err(|e| Refusal::bad_request(unmarshal_error(&e)))?;
    match vm.metadata.namespace.as_deref() {
        None | Some("") => vm.metadata.namespace = Some(ns.to_owned()),
        Some(given) if given == ns => {}
        Some(_) => return Err(Refusal::bad_request(format!("VM namespace must be empty or {ns}")).into()),
    }
    expanded(client, config, ns, &vm).await.map_err(|m| Refusal::bad_request(m).into())
}

/// `vm` with its instancetype and preference read and applied (the error text, as upstream words it).
async fn expanded(client: &kube::Client, config: &Config, ns: &str, vm: &VirtualMachine) -> Result<Value, String> {
    // Reads nothing when the VM names neither.
    let e = lookup::expansion(client, ns, vm).await.map_err(|m| m.message().to_owned())?;
    let out = expand::expand(vm, &e, config)?;
    serde_json::to_value(&out).map_err(|e| e.to_string())
}

/// Upstream's text for a request body that is not the expected JSON.
fn unmarshal_error(e: &serde_json::Error) -> String {
    format!("Can not unmarshal Request body to struct, error: {e}")
}

/// A VMI subresource: read and check the VMI, then the node agent of its node does it (a stream: the client's
/// websocket is bridged to it once the node agent accepted).
async fn vmi_request(
    req: Request<Incoming>,
    client: &kube::Client,
    nodes: &NodeClient,
    metrics: &Metrics,
    ns: &str,
    name: &str,
    command: Command,
) -> Result<Response<Full<Bytes>>, Answer> {
    let handshake = if command.is_stream() { Some(vmi_ops::handshake(req.headers())?) } else { None };
    let vmi = read_vmi(client, ns, name).await?;
    vmi_ops::check(command, &vmi)?;
    let node = vmi.status.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    if command == Command::Screenshot {
        let (mime, image) = nodes.fetch(&node, command, ns, name).await?;
        if mime != node_api::SCREENSHOT_TYPE {
            return Err(Refusal::internal(format!("the node agent answered {mime} instead of a PNG")).into());
        }
        return Ok(respond(StatusCode::OK, node_api::SCREENSHOT_TYPE, image));
    }
    let Some(handshake) = handshake else {
        if !options(req).await?.dry_run.is_empty() {
            return Ok(respond(StatusCode::OK, "application/json", ""));
        }
        nodes.command(&node, command, ns, name).await?;
        return Ok(respond(StatusCode::OK, "application/json", ""));
    };
    let stream = nodes.stream(&node, command, ns, name).await?;
    let kind = if matches!(command, Command::Vnc { .. }) { Connection::Vnc } else { Connection::Console };
    let active = metrics.connected(kind, ns, name);
    switch_to_websocket(req, &handshake, stream, active, format!("{ns}/{name} {}", command.name()))
}

/// `portforward`: the VMI (of the VM's name, when `vm`), upstream's checks, the dial, then the websocket.
async fn port_forward(
    req: Request<Incoming>,
    s: &Subresources,
    ns: &str,
    name: &str,
    vm: bool,
    port: &str,
    protocol: Option<&str>,
) -> Result<Response<Full<Bytes>>, Answer> {
    let client = &s.client;
    let handshake = vmi_ops::handshake(req.headers())?;
    let protocol = portforward::protocol(protocol)?;
    let owner = if vm {
        let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
        let vm = vms
            .get_opt(name)
            .await
            .map_err(Answer::Kube)?
            .ok_or_else(|| Answer::Refused(Refusal::vm_not_found(name)))?;
        portforward::check_vm(&vm)?;
        Some(vm)
    } else {
        None
    };
    let vmi = read_vmi(client, ns, name).await?;
    if let Some(vm) = &owner {
        portforward::check_owner(vm, &vmi)?;
    }
    portforward::check(&vmi)?;
    let addr = portforward::target(&vmi, port, protocol)?;
    let tunnel = portforward::dial(addr, protocol).await?;
    // Counted under the VMI's name (the VM's, for a VM target: they are the same).
    let active = s.metrics.connected(Connection::PortForward, ns, name);
    switch_to_websocket(
        req,
        &handshake,
        tunnel,
        active,
        format!("{ns}/{name} portforward {}/{port}", protocol.as_str()),
    )
}

/// Answers the client's websocket handshake with the 101 and, once hyper has switched the connection, bridges
/// the websocket to `stream` (`what` names it in the log); `active` counts the connection until it ends.
fn switch_to_websocket<R>(
    req: Request<Incoming>,
    handshake: &vmi_ops::Handshake,
    stream: R,
    active: Active,
    what: String,
) -> Result<Response<Full<Bytes>>, Answer>
where
    R: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let on_upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
                    hyper_util::rt::TokioIo::new(upgraded),
                    tokio_tungstenite::tungstenite::protocol::Role::Server,
                    None,
                )
                .await;
                controller_runtime::ws::bridge(ws, stream).await;
                drop(active);
                tracing::info!(stream = what, "stream closed");
            }
            Err(e) => tracing::warn!(stream = what, "the client's upgrade failed: {e}"),
        }
    });
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    let value = |v: &str| hyper::header::HeaderValue::from_str(v).map_err(|e| Refusal::bad_request(e.to_string()));
    h.insert(hyper::header::CONNECTION, value("Upgrade")?);
    h.insert(hyper::header::UPGRADE, value("websocket")?);
    h.insert(hyper::header::SEC_WEBSOCKET_ACCEPT, value(&handshake.accept)?);
    if handshake.plain {
        h.insert(hyper::header::SEC_WEBSOCKET_PROTOCOL, value(PLAIN_STREAM_PROTOCOL)?);
    }
    Ok(r)
}

enum Answer {
    Refused(Refusal),
    Kube(kube::Error),
}

impl From<Refusal> for Answer {
    fn from(r: Refusal) -> Answer {
        Answer::Refused(r)
    }
}

impl Answer {
    /// The `metav1.Status` response (an API error keeps the API server's code, reason and message).
    fn response(&self) -> Response<Full<Bytes>> {
        match self {
            Answer::Refused(r) => failure(r.code, r.reason, &r.message),
            Answer::Kube(e) => kube_failure(e),
        }
    }
}

/// The VMI `ns/name`, or upstream's 404 for an unknown one.
async fn read_vmi(client: &kube::Client, ns: &str, name: &str) -> Result<VirtualMachineInstance, Answer> {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    vmis.get_opt(name).await.map_err(Answer::Kube)?.ok_or_else(|| Answer::Refused(vmi_ops::vmi_not_found(name)))
}

/// Reads the VM and its VMI, plans, and sends the patches.
async fn lifecycle_request(
    client: &kube::Client,
    ns: &str,
    name: &str,
    action: Lifecycle,
    options: &Options,
) -> Result<(), Answer> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);
    let vm =
        vms.get_opt(name).await.map_err(Answer::Kube)?.ok_or_else(|| Answer::Refused(Refusal::vm_not_found(name)))?;
    let vmi = vmis.get_opt(name).await.map_err(Answer::Kube)?;
    let plan = lifecycle::plan(action, options, &vm, vmi.as_ref()).map_err(Answer::Refused)?;
    let params = PatchParams { dry_run: plan.dry_run, ..Default::default() };
    // The patches are built by `lifecycle` from JSON literals: a conversion failure is a bug of ours.
    let json = |ops: Value| {
        serde_json::from_value::<json_patch::Patch>(ops)
            .map(KubePatch::<()>::Json)
            .map_err(|e| Answer::Refused(Refusal { code: 500, reason: "InternalError", message: e.to_string() }))
    };
    for patch in plan.patches {
        let sent = match patch {
            Patch::Vmi(ops) => vmis.patch(name, &params, &json(ops)?).await.map(drop),
            Patch::Vm(ops) => vms.patch(name, &params, &json(ops)?).await.map(drop),
            Patch::Status(ops) => vms.patch_status(name, &params, &json(ops)?).await.map(drop),
        };
        sent.map_err(|e| match e {
            // A failed `test`: the VM changed meanwhile.
            kube::Error::Api(s) if s.code == 422 || s.code == 409 => {
                Answer::Refused(Refusal::conflict(name, &s.message))
            }
            other => Answer::Kube(other),
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let base = "/apis/subresources.kubevirt.io";
        assert_eq!(route(&Method::GET, base, None), Route::Group);
        assert_eq!(route(&Method::GET, &format!("{base}/v1"), None), Route::Resources("v1".into()));
        assert_eq!(route(&Method::GET, &format!("{base}/v1alpha3/"), None), Route::Resources("v1alpha3".into()));
        assert_eq!(route(&Method::GET, &format!("{base}/v2"), None), Route::NotFound);
        assert_eq!(route(&Method::GET, &format!("{base}/v1/version"), None), Route::Version);
        assert_eq!(route(&Method::GET, &format!("{base}/v1/healthz"), None), Route::Healthz);
        assert_eq!(route(&Method::GET, &format!("{base}/v1/guestfs"), None), Route::NotImplemented("guestfs".into()));
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/start"), None),
            Route::Lifecycle { namespace: "ns".into(), name: "vm1".into(), action: Lifecycle::Start }
        );
        assert_eq!(
            route(&Method::GET, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/stop"), None),
            Route::MethodNotAllowed
        );
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/migrate"), None),
            Route::Migrate { namespace: "ns".into(), name: "vm1".into() }
        );
        assert_eq!(
            route(&Method::POST, &format!("{base}/v1alpha3/namespaces/ns/virtualmachines/vm1/migrate"), None),
            Route::MethodNotAllowed
        );
        let volume =
            |vm: bool, sub: &'static str| Route::Volume { namespace: "ns".into(), name: "vm1".into(), vm, sub };
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/addvolume"), None),
            volume(true, "addvolume")
        );
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/removevolume"), None),
            volume(true, "removevolume")
        );
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachineinstances/vm1/addvolume"), None),
            volume(false, "addvolume")
        );
        assert_eq!(
            route(&Method::GET, &format!("{base}/v1/namespaces/ns/virtualmachineinstances/vm1/removevolume"), None),
            Route::MethodNotAllowed
        );
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/memorydump"), None),
            Route::NotImplemented("virtualmachines/memorydump".into())
        );
        assert_eq!(
            route(
                &Method::GET,
                &format!("{base}/v1/namespaces/ns/virtualmachineinstances/vm1/vnc"),
                Some("preserveSession=true")
            ),
            Route::Vmi { namespace: "ns".into(), name: "vm1".into(), command: Command::Vnc { preserve_session: true } }
        );
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachineinstances/vm1/pause"), None),
            Route::Vmi { namespace: "ns".into(), name: "vm1".into(), command: Command::Pause }
        );
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachineinstances/vm1/console"), None),
            Route::MethodNotAllowed
        );
        assert_eq!(
            route(&Method::GET, &format!("{base}/v1/namespaces/ns/virtualmachineinstances/vm1/vnc/screenshot"), None),
            Route::Vmi { namespace: "ns".into(), name: "vm1".into(), command: Command::Screenshot }
        );
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachineinstances/vm1/vnc/screenshot"), None),
            Route::MethodNotAllowed
        );
        assert_eq!(
            route(&Method::GET, &format!("{base}/v1/namespaces/ns/virtualmachineinstances/vm1/guestosinfo"), None),
            Route::GuestAgent { namespace: "ns".into(), name: "vm1".into(), sub: "guestosinfo".into() }
        );
        assert_eq!(
            route(&Method::GET, &format!("{base}/v1/namespaces/ns/virtualmachineinstances/vm1/freeze"), None),
            Route::MethodNotAllowed
        );
        assert_eq!(
            route(&Method::GET, &format!("{base}/v1/namespaces/ns/virtualmachineinstances/vm1/portforward/80"), None),
            Route::PortForward {
                namespace: "ns".into(),
                name: "vm1".into(),
                vm: false,
                port: "80".into(),
                protocol: None
            }
        );
        assert_eq!(
            route(&Method::GET, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/portforward/53/udp"), None),
            Route::PortForward {
                namespace: "ns".into(),
                name: "vm1".into(),
                vm: true,
                port: "53".into(),
                protocol: Some("udp".into())
            }
        );
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/portforward/53"), None),
            Route::MethodNotAllowed
        );
        assert_eq!(
            route(&Method::GET, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/portforward/53/udp/x"), None),
            Route::NotImplemented("virtualmachines/portforward/53/udp/x".into())
        );
        assert_eq!(
            route(&Method::GET, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/expand-spec"), None),
            Route::ExpandVm { namespace: "ns".into(), name: "vm1".into() }
        );
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1/namespaces/ns/virtualmachines/vm1/expand-spec"), None),
            Route::MethodNotAllowed
        );
        assert_eq!(
            route(&Method::PUT, &format!("{base}/v1alpha3/namespaces/ns/expand-vm-spec"), None),
            Route::ExpandSpec { namespace: "ns".into() }
        );
        assert_eq!(
            route(&Method::GET, &format!("{base}/v1/namespaces/ns/expand-vm-spec"), None),
            Route::MethodNotAllowed
        );
        assert_eq!(route(&Method::GET, "/apis/kubevirt.io/v1", None), Route::NotFound);
    }

    #[test]
    fn discovery_lists_the_served_subresources() {
        let r = resources_json("v1");
        let names: Vec<&str> =
            r["resources"].as_array().into_iter().flatten().filter_map(|x| x["name"].as_str()).collect();
        assert_eq!(
            names,
            [
                "virtualmachines/start",
                "virtualmachines/stop",
                "virtualmachines/restart",
                "virtualmachines/migrate",
                "virtualmachines/expand-spec",
                "expand-vm-spec",
                "virtualmachineinstances/console",
                "virtualmachineinstances/vnc",
                "virtualmachineinstances/vnc/screenshot",
                "virtualmachineinstances/pause",
                "virtualmachineinstances/unpause",
                "virtualmachineinstances/portforward",
                "version",
                "healthz"
            ]
        );
        assert_eq!(group_json()["preferredVersion"]["groupVersion"], "subresources.kubevirt.io/v1");
    }
}
