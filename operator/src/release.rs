//! Which images an installation runs: [`Release`] (registry, tag, pull policy), resolved from the custom
//! resource's `imageRegistry` / `imageTag` / `imagePullPolicy` over the operator's own defaults, as upstream's
//! operator does ("defaults to the same registry/tag as the operator's container image").

/// Where the components' images come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// Registry and repository prefix (`127.0.0.1:35000/kubevirt-rs`): images are `<registry>/<name>:<tag>`.
    pub registry: String,
    /// The version: every component's image tag.
    pub tag: String,
    /// `imagePullPolicy` of every container.
    pub pull_policy: String,
}

/// The pull policy when the custom resource names none (upstream's operator default).
pub const DEFAULT_PULL_POLICY: &str = "IfNotPresent";

impl Release {
    /// The image of component `name` (`virt-api`, `node-agent`, `importer`, …).
    pub fn image(&self, name: &str) -> String {
        format!("{}/{name}:{}", self.registry, self.tag)
    }

    /// The release a custom resource asks for: each of its settings when present and non-empty, else `defaults`'.
    pub fn resolve(
        defaults: &Release,
        registry: Option<&str>,
        tag: Option<&str>,
        pull_policy: Option<&str>,
    ) -> Release {
        let pick = |v: Option<&str>, d: &str| v.filter(|s| !s.is_empty()).unwrap_or(d).to_owned();
        Release {
            registry: pick(registry, &defaults.registry).trim_end_matches('/').to_owned(),
            tag: pick(tag, &defaults.tag),
            pull_policy: pick(pull_policy, &defaults.pull_policy),
        }
    }

    /// The release of the operator's own image reference (`<registry>/virt-operator:<tag>`), if it has a tag.
    pub fn of_operator_image(image: &str) -> Option<Release> {
        let (repo, tag) = image.rsplit_once(':').filter(|(_, t)| !t.contains('/'))?;
        let (registry, _name) = repo.rsplit_once('/')?;
        Some(Release { registry: registry.to_owned(), tag: tag.to_owned(), pull_policy: DEFAULT_PULL_POLICY.into() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Release {
        Release { registry: "reg:5000/kubevirt-rs".into(), tag: "v1".into(), pull_policy: "IfNotPresent".into() }
    }

    #[test]
    fn the_resource_overrides_each_default_it_sets() {
        assert_eq!(Release::resolve(&base(), None, None, None), base());
        assert_eq!(Release::resolve(&base(), Some(""), Some(""), None), base());
        let r = Release::resolve(&base(), Some("other:1/x/"), Some("v2"), Some("Always"));
        assert_eq!(r.image("virt-api"), "other:1/x/virt-api:v2");
        assert_eq!(r.pull_policy, "Always");
        assert_eq!(base().image("node-agent"), "reg:5000/kubevirt-rs/node-agent:v1");
    }

    #[test]
    fn the_operator_image_gives_registry_and_tag() {
        assert_eq!(Release::of_operator_image("reg:5000/kubevirt-rs/virt-operator:v1"), Some(base()));
        assert_eq!(Release::of_operator_image("reg:5000/kubevirt-rs/virt-operator"), None);
        assert_eq!(Release::of_operator_image("virt-operator:v1"), None);
    }
}
