//! Keeps the cluster-scoped configuration objects current: the `config` CDIConfig exists and its status shows
//! the effective settings; every StorageClass has a StorageProfile whose status shows what DataVolumes get.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use contracts::cdi::sizing::format_overhead;
use controller_runtime::api::create_if_absent;
use crds::cdi::config::{
    CDI_CONFIG_NAME, CDIConfig, CDIConfigStatus, ClaimPropertySet, FilesystemOverhead, StorageProfile,
    StorageProfileStatus,
};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;

use crate::context::{Context, default_resources};

/// How often the configuration is re-checked.
const PERIOD: Duration = Duration::from_secs(20);

/// The effective CDIConfig status for `cfg` and the known storage classes.
pub fn effective_status(
    cfg: Option<&CDIConfig>,
    classes: &[String],
    overhead: impl Fn(Option<&str>) -> f64,
) -> CDIConfigStatus {
    let spec = cfg.map(|c| c.spec.clone()).unwrap_or_default();
    let fmt = format_overhead;
    CDIConfigStatus {
        upload_proxy_url: spec.upload_proxy_url_override.clone(),
        upload_proxy_ca: None,
        import_proxy: spec.import_proxy.clone(),
        scratch_space_storage_class: spec.scratch_space_storage_class.clone(),
        default_pod_resource_requirements: Some(
            spec.pod_resource_requirements.clone().unwrap_or_else(default_resources),
        ),
        filesystem_overhead: Some(FilesystemOverhead {
            global: Some(fmt(overhead(None))),
            storage_class: Some(classes.iter().map(|c| (c.clone(), fmt(overhead(Some(c))))).collect()),
        }),
        preallocation: Some(spec.preallocation.unwrap_or(false)),
        image_pull_secrets: spec.image_pull_secrets.clone(),
    }
}

async fn sync_once(ctx: &Context) -> Result<(), kube::Error> {
    let configs: Api<CDIConfig> = Api::all(ctx.client.clone());
    if ctx.cdi_config().is_none() && configs.get_opt(CDI_CONFIG_NAME).await?.is_none() {
        create_if_absent(&configs, &CDIConfig::new(CDI_CONFIG_NAME, Default::default())).await?;
    }
    let classes: Vec<String> = ctx.stores.classes.state().iter().map(|c| c.name_any()).collect();
    let cfg = ctx.cdi_config();
    let want = effective_status(cfg.as_deref(), &classes, |c| ctx.overhead(c));
    if let Some(cfg) = &cfg
        && cfg.status.as_ref() != Some(&want)
    {
        configs
            .patch_status(
                CDI_CONFIG_NAME,
                &PatchParams::default(),
                &Patch::Merge(&serde_json::json!({ "status": want })),
            )
            .await?;
    }
    let profiles: Api<StorageProfile> = Api::all(ctx.client.clone());
    for sc in ctx.stores.classes.state() {
        let name = sc.name_any();
        let existing = ctx.stores.profiles.get(&ObjectRef::new(&name));
        let spec_sets = existing.as_ref().and_then(|p| p.spec.claim_property_sets.clone());
        // Unknown provisioners get Kubernetes' own defaults (upstream leaves them empty and refuses DataVolumes
        // that omit accessModes; we prefer the defaults so upstream's `storage:`-only examples work).
        let sets = spec_sets.unwrap_or_else(|| {
            vec![ClaimPropertySet {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                volume_mode: Some("Filesystem".into()),
            }]
        });
        let status = StorageProfileStatus {
            storage_class: Some(name.clone()),
            provisioner: Some(sc.provisioner.clone()),
            claim_property_sets: Some(sets),
            clone_strategy: Some(
                existing.as_ref().and_then(|p| p.spec.clone_strategy.clone()).unwrap_or_else(|| "copy".into()),
            ),
        };
        if existing.is_none() {
            create_if_absent(&profiles, &StorageProfile::new(&name, Default::default())).await?;
        }
        if existing.as_ref().and_then(|p| p.status.as_ref()) != Some(&status) {
            profiles
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&serde_json::json!({ "status": status })))
                .await?;
        }
    }
    Ok(())
}

/// Runs [`sync_once`] now and every 20 s until `stop` resolves.
pub async fn run(ctx: Arc<Context>, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        if let Err(e) = sync_once(&ctx).await {
            tracing::warn!(error = %e, "syncing CDIConfig/StorageProfiles failed");
        }
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep(PERIOD) => {}
        }
    }
}
