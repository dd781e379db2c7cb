//! `virt-operator`: installs, updates and removes the whole stack from two custom resources, as upstream's
//! virt-operator and cdi-operator do.
//!
//! * `KubeVirt` (`kubevirt.io/v1`, in the operator's namespace) → the KubeVirt half ([`kubevirt`]): its CRDs,
//!   cluster roles, certificates ([`certs`]), virt-api and its webhooks, the VMI controller, the node agent
//!   DaemonSet, with images from `imageRegistry`/`imageTag` (default: the operator's own, [`release`]).
//! * `CDI` (`cdi.kubevirt.io/v1beta1`, cluster-scoped) → the CDI half ([`cdi`]): its namespace, CRDs, admission
//!   policy, DataVolume controller, token API, upload proxy, and the CDIConfig from `spec.config`.
//!
//! Both render the `deploy/` manifests compiled into the binary ([`manifests`]) into stages and roll them out
//! one after the other ([`plan::progress`]): a component is updated only once the one before runs its new form,
//! DaemonSets with `maxUnavailable: 1`, Deployments with their rolling update, so that running VMs and imports go
//! on throughout. Status: upstream's phases, conditions, reasons and messages ([`plan`]).
//!
//! The binary runs two replicas; the holder of the `virt-operator` Lease reconciles, every replica serves
//! upstream's uninstall guards ([`webhook`]).

#![deny(missing_docs)]

pub mod apply;
pub mod cdi;
pub mod certs;
pub mod customize;
mod install;
pub mod kubevirt;
pub mod manifests;
pub mod metrics;
mod object;
pub mod pki;
pub mod plan;
pub mod release;
pub mod webhook;

use std::sync::Arc;

use controller_runtime::events::Events;
use controller_runtime::policy::{Classify, ErrorPolicy, Retry};
use crds::cdi::CDI;
use crds::kubevirt::config::KubeVirt;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

/// The field manager of everything the operator applies.
pub const FIELD_MANAGER: &str = "virt-operator";

/// A reconcile failed in a way the status cannot carry (writing the status itself).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Writing the object's status or finalizer.
    #[error("updating the object: {0}")]
    Status(#[source] kube::Error),
    /// A manifest of this build does not render.
    #[error(transparent)]
    Manifests(#[from] manifests::Error),
}

impl Classify for Error {
    fn retry(&self) -> Retry {
        match self {
            Error::Status(e) => controller_runtime::policy::retry_of(e),
            Error::Manifests(_) => Retry::Fatal,
        }
    }
}

/// What both reconcilers share.
pub struct Context {
    /// The API client.
    pub client: kube::Client,
    /// Applies rendered objects.
    pub applier: apply::Applier,
    /// The operator's namespace (the KubeVirt half's).
    pub namespace: String,
    /// The operator's own release: what components run when the custom resources name nothing else.
    pub defaults: release::Release,
    /// The operator's version (`status.operatorVersion`).
    pub operator_version: String,
    /// Every `KubeVirt` object.
    pub kubevirts: Store<KubeVirt>,
    /// Every `CDI` object.
    pub cdis: Store<CDI>,
    /// Events on the custom resources.
    pub events: Events,
    policy: ErrorPolicy,
}

/// Settings of [`run`].
#[derive(Debug, Clone)]
pub struct Settings {
    /// The operator's namespace.
    pub namespace: String,
    /// The operator's release.
    pub defaults: release::Release,
    /// This pod's name (events' reporting instance).
    pub instance: Option<String>,
}

fn error_policy<K: kube::Resource>(obj: Arc<K>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.policy.on_error(&*obj, err)
}

/// Runs both reconcilers until `shutdown` resolves. A change of a Deployment or DaemonSet the operator manages
/// (someone deleted virt-api, a rollout advanced) triggers the installation it belongs to.
/// The leader's upstream metrics ([`metrics`]) are added to `late`.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    late: controller_runtime::metrics::LateRegistry,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let managed = |manager: &str| watcher::Config::default().labels(&format!("{}={manager}", manifests::MANAGED_BY));
    let kv_controller =
        Controller::new(Api::<KubeVirt>::namespaced(client.clone(), &settings.namespace), watcher::Config::default());
    let cdi_controller = Controller::new(Api::<CDI>::all(client.clone()), watcher::Config::default());
    let ctx = Arc::new(Context {
        client: client.clone(),
        applier: apply::Applier::new(client.clone(), FIELD_MANAGER),
        namespace: settings.namespace.clone(),
        defaults: settings.defaults,
        operator_version: env!("CARGO_PKG_VERSION").to_owned(),
        kubevirts: kv_controller.store(),
        cdis: cdi_controller.store(),
        events: Events::new(client.clone(), FIELD_MANAGER, settings.instance),
        policy: ErrorPolicy::new("virt-operator"),
    });
    late.add(metrics::registry(ctx.cdis.clone()));
    let kv_refs = {
        let store = ctx.kubevirts.clone();
        move || store.state().iter().map(|k| ObjectRef::from_obj(&**k)).collect::<Vec<_>>()
    };
    let kv_controller = kv_controller
        .watches(
            Api::<Deployment>::namespaced(client.clone(), &settings.namespace),
            managed(manifests::KUBEVIRT_MANAGER),
            {
                let refs = kv_refs.clone();
                move |_| refs()
            },
        )
        .watches(
            Api::<DaemonSet>::namespaced(client.clone(), &settings.namespace),
            managed(manifests::KUBEVIRT_MANAGER),
            move |_| kv_refs(),
        );
    let cdi_store = ctx.cdis.clone();
    let cdi_controller =
        cdi_controller.watches(Api::<Deployment>::all(client.clone()), managed(manifests::CDI_MANAGER), move |_| {
            cdi_store.state().iter().map(|c| ObjectRef::from_obj(&**c)).collect::<Vec<_>>()
        });
    let shutdown = futures::FutureExt::shared(Box::pin(shutdown));
    tracing::info!(namespace = %settings.namespace, "KubeVirt and CDI reconcilers running");
    let kv = kv_controller
        .graceful_shutdown_on(shutdown.clone())
        .run(kubevirt::reconcile, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let cdi = cdi_controller
        .graceful_shutdown_on(shutdown)
        .run(cdi::reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()));
    futures::join!(kv, cdi);
    Ok(())
}
