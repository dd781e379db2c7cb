//! What every `kubevirt.io` type shares: the map that carries fields this version does not model ([`Extra`]), the
//! field-less marker object ([`Marker`]), and `string_enum!`, which defines the enums of upstream's closed string
//! sets.
//!
//! **Unknown fields survive.** Every object type of this group ends with
//!
//! ```text
//! #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
//! #[schemars(skip)]
//! pub extra: Extra,
//! ```
//!
//! and carries `#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]`: a field we do not model
//! survives a `serde_json` round trip through our types (it lands in `extra` and is written back in place), and the
//! API server does not prune it (the object's schema lists the known properties *and* preserves unknown ones, which a
//! structural schema allows; the flattened map itself never reaches the schema, so there is no
//! `additionalProperties` next to `properties`).
//!
//! **Enums keep unknown values.** Upstream's closed sets (disk bus, interface model, phase, …) are enums whose
//! serialised form is upstream's exact string, plus an `Other(String)` variant for any other value: a VMI written by
//! a newer upstream or by hand still deserialises (a typed watch does not break on one odd object), round-trips
//! unchanged, and the admission webhook can refuse it with upstream's own message. The CRD schema types them as plain
//! strings, as upstream's does, so the API server's schema check does not pre-empt those messages.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Fields of an object that this version does not model, kept verbatim (see the [module docs](self)).
pub type Extra = BTreeMap<String, serde_json::Value>;

/// An object upstream defines without fields, written `{}` (`masquerade: {}`, `rng: {}`, `pod: {}`'s siblings, …).
/// Fields a later upstream adds are kept in [`Marker::extra`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Marker {
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A `status.conditions[]` entry of any `kubevirt.io` object (VMI, VM, VMIRS: upstream's condition structs have
/// the same fields); `T` is the object's condition type enum. Upstream writes `lastProbeTime: null` /
/// `lastTransitionTime: null` for unset times; those read as `None` and are omitted when written back.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Condition<T> {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: T,
    /// `True`, `False` or `Unknown`.
    pub status: super::vmi::ConditionStatus,
    /// When the condition was last probed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// When the status last changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Machine-readable reason (see `consts::reason`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

impl<T: PartialEq> Condition<T> {
    /// A condition with this content and no times yet ([`set_condition`] sets them).
    pub fn new(type_: T, status: super::vmi::ConditionStatus, reason: &str, message: &str) -> Self {
        Condition {
            type_,
            status,
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            last_probe_time: None,
            last_transition_time: None,
            extra: Extra::default(),
        }
    }
}

/// Sets `c` in `conditions` (a `status.conditions`), replacing the condition of its type. Setting the same status,
/// reason and message again changes nothing; otherwise the transition time moves to `now` only when the status
/// changes, and a condition that carries its own times (copied from a pod) keeps them.
pub fn set_condition<T: PartialEq>(
    conditions: &mut Option<Vec<Condition<T>>>,
    mut c: Condition<T>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) {
    let conditions = conditions.get_or_insert_default();
    match conditions.iter_mut().find(|old| old.type_ == c.type_) {
        Some(old) => {
            if old.status == c.status && old.reason == c.reason && old.message == c.message {
                return;
            }
            if c.last_transition_time.is_none() {
                c.last_transition_time =
                    if old.status == c.status { old.last_transition_time.clone() } else { Some(now.clone()) };
            }
            c.last_probe_time.get_or_insert_with(|| now.clone());
            *old = c;
        }
        None => {
            c.last_transition_time.get_or_insert_with(|| now.clone());
            c.last_probe_time.get_or_insert_with(|| now.clone());
            conditions.push(c);
        }
    }
}

/// Removes the condition of type `t` from `conditions` (and an emptied list).
pub fn remove_condition<T: PartialEq>(conditions: &mut Option<Vec<Condition<T>>>, t: &T) {
    if let Some(list) = conditions.as_mut() {
        list.retain(|c| &c.type_ != t);
        if list.is_empty() {
            *conditions = None;
        }
    }
}

/// Defines an enum over upstream's exact strings plus `Other(String)`, with `as_str`, `KNOWN`, `From<&str>`,
/// `From<String>`, `Display`, `Default` (the empty string, Go's zero value), serde as a plain string and a
/// `{"type": "string"}` schema.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* #[doc = concat!("`", $wire, "`")] $variant, )+
            /// A value this version does not know, kept verbatim (admission refuses what upstream refuses).
            Other(String),
        }

        impl $name {
            /// Every value upstream defines, in its order.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),+];

            /// The wire string.
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $wire, )+
                    Self::Other(s) => s.as_str(),
                }
            }

            /// Whether this is one of upstream's values (not [`Self::Other`]).
            pub fn is_known(&self) -> bool {
                !matches!(self, Self::Other(_))
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $( $wire => Self::$variant, )+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                match Self::from(s.as_str()) {
                    Self::Other(_) => Self::Other(s),
                    known => known,
                }
            }
        }

        impl Default for $name {
            /// The empty string (Go's zero value for the field).
            fn default() -> Self {
                Self::from("")
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
                ser.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
                String::deserialize(de).map(Self::from)
            }
        }

        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string" })
            }
        }
    };
}
pub(crate) use string_enum;

#[cfg(test)]
mod tests {
    use super::*;

    string_enum! {
        /// Test enum.
        pub enum Sample {
            /// One.
            One = "one",
            /// Empty.
            Unset = "",
        }
    }

    #[test]
    fn known_values_map_to_variants_and_others_are_kept() {
        assert_eq!(Sample::from("one"), Sample::One);
        assert_eq!(Sample::from(String::from("one")), Sample::One);
        assert_eq!(Sample::default(), Sample::Unset);
        assert_eq!(Sample::from("two"), Sample::Other("two".into()));
        let v: Sample = serde_json::from_str("\"two\"").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(serde_json::to_string(&v).unwrap_or_default(), "\"two\"");
        assert!(!v.is_known());
        assert_eq!(Sample::KNOWN, &[Sample::One, Sample::Unset]);
    }

    #[test]
    fn marker_keeps_unknown_fields() {
        let m: Marker = serde_json::from_str(r#"{"future":{"a":1}}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(serde_json::to_string(&m).unwrap_or_default(), r#"{"future":{"a":1}}"#);
        assert_eq!(serde_json::to_string(&Marker::default()).unwrap_or_default(), "{}");
    }
}
