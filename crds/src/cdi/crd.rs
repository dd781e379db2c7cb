//! The CRDs of `cdi.kubevirt.io` (DataVolume, CDIConfig, StorageProfile) with upstream's webhook validation as CEL
//! rules, and the DataVolume admission policy for what the schema cannot express.

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicyBindingSpec, ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{CustomResourceDefinition, ValidationRule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::CustomResourceExt;

use super::{CDI, CDIConfig, DataVolume, StorageProfile};
use crate::crd::{
    Cel, Error, GeneratedFile, Msg, add_spec_validations, expr, fixed, leak, render, render_objects, to_rule,
};

const SOURCES: &str = "[has(self.source.http), has(self.source.s3), has(self.source.gcs), has(self.source.registry), \
                       has(self.source.pvc), has(self.source.snapshot), has(self.source.upload), \
                       has(self.source.blank), has(self.source.imageio), has(self.source.vddk)]";

/// Rules on `DataVolume.spec` (upstream's `validateDataVolumeSpec` and the update check), keyed by the schema path
/// they attach to (relative to `spec`; empty = `spec` itself). Messages are upstream's where it has one.
pub fn datavolume_validations() -> Vec<(&'static str, Vec<ValidationRule>)> {
    let spec = vec![
        fixed("self == oldSelf", "Cannot update DataVolume Spec"),
        fixed("has(self.pvc) || has(self.storage)", "Missing Data volume PVC"),
        fixed(
            "!(has(self.pvc) && has(self.storage))",
            "Duplicate storage definition, both target storage and target pvc defined",
        ),
        fixed("has(self.source) != has(self.sourceRef)", "Data volume should have either Source or SourceRef"),
        fixed(
            "!has(self.sourceRef)",
            "sourceRef (DataSource) is not supported by this CDI implementation; use source.pvc",
        ),
        fixed(
            "!has(self.pvc) || (has(self.pvc.resources) && has(self.pvc.resources.requests) && \
             'storage' in self.pvc.resources.requests)",
            "PVC size is missing",
        ),
        fixed(
            "!has(self.storage) || has(self.sourceRef) || (has(self.source) && (has(self.source.pvc) || \
             has(self.source.snapshot))) || (has(self.storage.resources) && has(self.storage.resources.requests) \
             && 'storage' in self.storage.resources.requests)",
            "Storage size is missing",
        ),
        fixed(
            "!(has(self.source) && has(self.source.blank) && has(self.contentType) && self.contentType == 'archive')",
            "SourceType cannot be blank and the contentType be archive",
        ),
        fixed(
            "!(has(self.contentType) && self.contentType == 'archive' && \
             ((has(self.storage) && has(self.storage.volumeMode) && self.storage.volumeMode == 'Block') || \
             (has(self.pvc) && has(self.pvc.volumeMode) && self.pvc.volumeMode == 'Block')))",
            "contentType archive requires volumeMode Filesystem",
        ),
        fixed(
            "!(has(self.source) && has(self.source.registry) && has(self.contentType) && \
             self.contentType != 'kubevirt')",
            "ContentType must be kubevirt when Source is Registry",
        ),
    ];
    let mut spec = spec;
    spec.push(Cel {
        rule: leak(format!("!has(self.source) || {SOURCES}.exists(x, x)")),
        message: Msg::Fixed("Missing Data volume source"),
    });
    spec.push(Cel {
        rule: leak(format!("!has(self.source) || {SOURCES}.filter(x, x).size() <= 1")),
        message: Msg::Fixed("Multiple Data volume sources"),
    });
    let unsupported = |field: &'static str| Cel {
        rule: leak(format!("!has(self.{field})")),
        message: Msg::Fixed(leak(format!(
            "source {field} is not supported by this CDI implementation (supported: http, s3, registry, pvc, \
                 upload, blank)"
        ))),
    };
    let source = vec![unsupported("gcs"), unsupported("snapshot"), unsupported("imageio"), unsupported("vddk")];
    let url_rules = || {
        vec![
            fixed("self.url != ''", "spec.source source URL is empty"),
            expr("self.url == '' || isURL(self.url)", "'spec.source Invalid source URL: ' + self.url"),
            expr(
                "self.url == '' || !isURL(self.url) || url(self.url).getScheme() in ['http', 'https']",
                "'spec.source Invalid source URL scheme: ' + self.url",
            ),
        ]
    };
    let mut http = url_rules();
    http.push(expr(
        "!has(self.checksum) || self.checksum.matches('^\\\\s*(?i:md5)\\\\s*:[0-9a-fA-F]{32}$') || \
         self.checksum.matches('^\\\\s*(?i:sha1)\\\\s*:[0-9a-fA-F]{40}$') || \
         self.checksum.matches('^\\\\s*(?i:sha256)\\\\s*:[0-9a-fA-F]{64}$') || \
         self.checksum.matches('^\\\\s*(?i:sha512)\\\\s*:[0-9a-fA-F]{128}$')",
        "'Invalid checksum format: expected algorithm:hash (md5, sha1, sha256 or sha512 with a hex hash of 32, \
         40, 64 or 128 digits), got \"' + self.checksum + '\"'",
    ));
    let registry = vec![
        fixed("has(self.url) != has(self.imageStream)", "Source registry should have either url or imageStream"),
        expr(
            "!has(self.url) || self.url.startsWith('docker://')",
            "'Illegal registry source URL scheme ' + self.url + ': only docker:// is supported by this CDI \
             implementation'",
        ),
        fixed(
            "!has(self.pullMethod) || self.pullMethod in ['', 'pod']",
            "pullMethod node is not supported by this CDI implementation; use pod",
        ),
    ];
    let pvc = vec![fixed("self.namespace != '' && self.name != ''", "spec.source.PVC source PVC is not valid")];
    [
        ("", spec),
        ("source", source),
        ("source.http", http),
        ("source.s3", url_rules()),
        ("source.registry", registry),
        ("source.pvc", pvc),
    ]
    .into_iter()
    .map(|(path, rules)| (path, rules.into_iter().map(to_rule).collect()))
    .collect()
}

/// The DataVolume CRD with its CEL validation.
pub fn datavolume() -> Result<CustomResourceDefinition, Error> {
    let mut crd = DataVolume::crd();
    add_spec_validations(&mut crd, datavolume_validations)?;
    Ok(crd)
}

/// Name of the admission policy (and its binding) that completes the DataVolume validation.
pub const POLICY_NAME: &str = "datavolume-validate.cdi.kubevirt.io";

/// Validation the CRD schema cannot express within the API server's CEL cost budget (quantities inside
/// int-or-string maps) or at all (the requester's authorisation): upstream's size checks and the clone
/// permission check (`create datavolumes/source` in the source namespace), as a ValidatingAdmissionPolicy.
pub fn datavolume_policy() -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let mut validations = Vec::new();
    for (field, name) in [("pvc", "PVC"), ("storage", "Storage")] {
        let q = format!("string(object.spec.{field}.resources.requests.storage)");
        let guard = format!(
            "!has(object.spec.{field}) || !has(object.spec.{field}.resources) || \
             !has(object.spec.{field}.resources.requests) || !('storage' in object.spec.{field}.resources.requests)"
        );
        let check = |expression: String, message: String| Validation {
            expression,
            message: Some(message),
            reason: Some("Invalid".into()),
            ..Default::default()
        };
        validations.push(check(
            format!("{guard} || isQuantity({q})"),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'".into(),
        ));
        validations.push(check(
            format!("{guard} || !isQuantity({q}) || quantity({q}).isGreaterThan(quantity('0'))"),
            format!("{name} size can't be equal or less than zero"),
        ));
        validations.push(check(
            format!(
                "{guard} || !isQuantity({q}) || !quantity({q}).isGreaterThan(quantity('0')) || \
                 quantity({q}).compareTo(quantity('1Mi')) >= 0"
            ),
            format!("{name} size must be at least 1MiB"),
        ));
    }
    validations.push(Validation {
        expression: "!has(object.spec.source) || !has(object.spec.source.pvc) || \
                     authorizer.group('cdi.kubevirt.io').resource('datavolumes').subresource('source')\
                     .namespace(object.spec.source.pvc.namespace).check('create').allowed()"
            .into(),
        message_expression: Some(
            "'User ' + request.userInfo.username + ' has no permission to clone from namespace ' + \
             object.spec.source.pvc.namespace + ' (needs create datavolumes/source there)'"
                .into(),
        ),
        reason: Some("Forbidden".into()),
        ..Default::default()
    });
    let policy = ValidatingAdmissionPolicy {
        metadata: ObjectMeta { name: Some(POLICY_NAME.into()), ..Default::default() },
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec![super::consts::GROUP.into()]),
                    api_versions: Some(vec!["v1beta1".into()]),
                    operations: Some(vec!["CREATE".into()]),
                    resources: Some(vec!["datavolumes".into()]),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            validations: Some(validations),
            ..Default::default()
        }),
        ..Default::default()
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: ObjectMeta { name: Some(POLICY_NAME.into()), ..Default::default() },
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(POLICY_NAME.into()),
            validation_actions: Some(vec!["Deny".into()]),
            ..Default::default()
        }),
    };
    (policy, binding)
}

/// File name of the `CDI` CRD under `deploy/crds/` (part of the operator's manifest, not of what it installs).
pub const CDI_FILE: &str = "cdi.yaml";

/// Every CDI CRD, in apply order, with the file name `crdgen` writes it to.
pub fn all() -> Result<Vec<(&'static str, CustomResourceDefinition)>, Error> {
    Ok(vec![
        ("datavolume.yaml", datavolume()?),
        ("cdiconfig.yaml", CDIConfig::crd()),
        ("storageprofile.yaml", StorageProfile::crd()),
        (CDI_FILE, CDI::crd()),
    ])
}

/// The generated files of this group: the CRDs and the DataVolume admission policy with its binding.
pub fn files() -> Result<Vec<GeneratedFile>, Error> {
    let mut out: Vec<GeneratedFile> =
        all()?.into_iter().map(|(file, crd)| Ok((file, render(&crd)?))).collect::<Result<_, Error>>()?;
    let (policy, binding) = datavolume_policy();
    out.push(("datavolume-policy.yaml", render_objects(POLICY_NAME, &[&policy, &binding])?));
    Ok(out)
}
