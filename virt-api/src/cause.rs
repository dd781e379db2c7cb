//! What a refused request carries: status causes (upstream's `metav1.StatusCause`), the field paths they name
//! (Kubernetes' `field.Path` spelling: `spec.domain.devices.disks[0].name`), and the `Status` upstream's webhooks
//! answer with (`webhookutils.ToAdmissionResponse`): the first ten causes' messages joined by `", "`, reason
//! `Invalid`, code 422, the causes as details. The API server prefixes the message with
//! `admission webhook "<name>" denied the request: `, which is what `kubectl` prints.

use std::fmt;

use kube::core::Status;
use kube::core::response::{StatusCause, StatusDetails};

/// At most this many causes are reported (upstream's cap); the rest are counted in the message.
pub const MAX_CAUSES: usize = 10;

/// A cause's machine-readable type (Kubernetes' `metav1.CauseType`; the `reason` of a JSON status cause).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CauseType {
    /// `FieldValueNotFound`.
    NotFound,
    /// `FieldValueRequired`.
    Required,
    /// `FieldValueDuplicate`.
    Duplicate,
    /// `FieldValueInvalid`.
    Invalid,
    /// `FieldValueNotSupported`.
    NotSupported,
    /// `FieldValueForbidden`.
    Forbidden,
}

impl CauseType {
    /// The wire string.
    pub fn as_str(&self) -> &'static str {
        match self {
            CauseType::NotFound => "FieldValueNotFound",
            CauseType::Required => "FieldValueRequired",
            CauseType::Duplicate => "FieldValueDuplicate",
            CauseType::Invalid => "FieldValueInvalid",
            CauseType::NotSupported => "FieldValueNotSupported",
            CauseType::Forbidden => "FieldValueForbidden",
        }
    }
}

/// One reason a VMI is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The cause's type.
    pub type_: CauseType,
    /// Upstream's exact message.
    pub message: String,
    /// The field, as upstream names it (may be empty).
    pub field: String,
}

impl Cause {
    /// A cause of `type_` on `field`.
    pub fn new(type_: CauseType, message: impl Into<String>, field: impl fmt::Display) -> Cause {
        Cause { type_, message: message.into(), field: field.to_string() }
    }

    /// A `FieldValueInvalid` cause.
    pub fn invalid(message: impl Into<String>, field: impl fmt::Display) -> Cause {
        Cause::new(CauseType::Invalid, message, field)
    }

    /// As a Kubernetes status cause.
    pub fn to_status_cause(&self) -> StatusCause {
        StatusCause { reason: self.type_.as_str().into(), message: self.message.clone(), field: self.field.clone() }
    }
}

/// A field path in Kubernetes' spelling: `.child`, `[index]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    /// A root path (`spec`, `metadata`).
    pub fn new(root: &str) -> Path {
        Path(root.to_owned())
    }

    /// `self.name` (each of `names` appended in turn).
    pub fn child(&self, name: &str) -> Path {
        Path(format!("{}.{name}", self.0))
    }

    /// `self.a.b.c`.
    pub fn children(&self, names: &[&str]) -> Path {
        names.iter().fold(self.clone(), |p, n| p.child(n))
    }

    /// `self[i]`.
    pub fn index(&self, i: usize) -> Path {
        Path(format!("{}[{i}]", self.0))
    }

    /// The path as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The status of a refusal (upstream's `ToAdmissionResponse`): at most [`MAX_CAUSES`] causes, their messages joined
/// by `", "` (plus `", and N more validation errors"`), reason `Invalid`, code 422.
pub fn invalid_status(causes: &[Cause]) -> Status {
    let shown = &causes[..causes.len().min(MAX_CAUSES)];
    let mut message = shown.iter().map(|c| c.message.as_str()).collect::<Vec<_>>().join(", ");
    if causes.len() > MAX_CAUSES {
        message = format!("{message}, and {} more validation errors", causes.len() - MAX_CAUSES);
    }
    Status {
        status: None,
        code: 422,
        message,
        metadata: None,
        reason: "Invalid".into(),
        details: Some(StatusDetails {
            name: String::new(),
            group: String::new(),
            kind: String::new(),
            uid: String::new(),
            causes: shown.iter().map(Cause::to_status_cause).collect(),
            retry_after_seconds: 0,
        }),
    }
}

/// The status of a request that cannot be processed (upstream's `ToAdmissionResponseError`): the message, code 400.
pub fn error_status(message: impl Into<String>) -> Status {
    Status { status: None, code: 400, message: message.into(), metadata: None, reason: String::new(), details: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_spelled_like_kubernetes() {
        let p = Path::new("spec").children(&["domain", "devices", "disks"]).index(3).child("name");
        assert_eq!(p.to_string(), "spec.domain.devices.disks[3].name");
    }

    #[test]
    fn the_status_joins_at_most_ten_messages() {
        let causes: Vec<Cause> = (0..12).map(|i| Cause::invalid(format!("m{i}"), format!("f{i}"))).collect();
        let s = invalid_status(&causes);
        assert_eq!(s.message, "m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, and 2 more validation errors");
        assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
        let details = s.details.unwrap_or_else(|| panic!("details"));
        assert_eq!(details.causes.len(), 10);
        assert_eq!(details.causes[0].reason, "FieldValueInvalid");
        assert_eq!(invalid_status(&causes[..2]).message, "m0, m1");
        assert_eq!(
            serde_json::to_value(error_status("x")).ok(),
            Some(serde_json::json!({"code": 400, "message": "x"}))
        );
    }
}
