//! What both reconcilers do with rendered stages: roll them out ([`roll`]: observe every workload, apply as far as
//! `plan::progress` allows) and remove them ([`remove`]: CRDs first, then the rest in reverse).

use serde_json::Value;

use crate::Context;
use crate::manifests;
use crate::plan::{self, Progress};

/// Observes every workload of `stages`, and applies the stages [`plan::progress`] allows.
pub(crate) async fn roll(ctx: &Context, stages: &[manifests::Stage]) -> Result<(Progress, bool), crate::apply::Error> {
    let mut observed = Vec::new();
    for stage in stages {
        let mut rollouts = Vec::new();
        for w in stage.objects.iter().filter(|o| manifests::is_workload(o)) {
            let live = ctx.applier.get(w).await?;
            rollouts.push(plan::rollout(w, live.as_ref()));
        }
        observed.push((stage.name, rollouts));
    }
    let progress = plan::progress(&observed);
    for stage in &stages[..=progress.apply_through.min(stages.len().saturating_sub(1))] {
        for obj in &stage.objects {
            ctx.applier.apply(obj).await?;
        }
    }
    if let Some((stage, why)) = &progress.waiting {
        tracing::info!(stage, why, "rolling out");
    }
    Ok((progress.clone(), progress.apply_through + 1 == stages.len()))
}

/// Deletes what `stages` installed: CRDs first (their objects are finalized by the still running controllers),
/// then the rest in reverse order. `Ok(true)` once everything is gone.
pub(crate) async fn remove(
    ctx: &Context,
    stages: &[manifests::Stage],
    extra: &[Value],
) -> Result<bool, crate::apply::Error> {
    let all: Vec<&Value> = stages.iter().flat_map(|s| &s.objects).chain(extra).collect();
    let (crds, rest): (Vec<&Value>, Vec<&Value>) =
        all.into_iter().partition(|o| o["kind"] == "CustomResourceDefinition");
    let mut gone = true;
    for o in &crds {
        gone &= ctx.applier.delete(o).await?;
    }
    if !gone {
        return Ok(false);
    }
    for o in rest.iter().rev() {
        if o["kind"] == "Namespace" && o["metadata"]["name"] == ctx.namespace.as_str() {
            continue; // the operator's own namespace
        }
        gone &= ctx.applier.delete(o).await?;
    }
    Ok(gone)
}
