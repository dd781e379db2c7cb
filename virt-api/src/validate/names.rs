//! Kubernetes' name rules with its exact messages (`k8s.io/apimachinery/pkg/util/validation`): DNS-1123 labels
//! and subdomains, qualified names and label values, port names.

const LABEL_MAX: usize = 63;
const SUBDOMAIN_MAX: usize = 253;
const LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// Kubernetes' `RegexError`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    // Go appends "'<example>', " per example, with " or " before all but the first (hence the double space).
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!("{msg} (e.g. {}regex used for validation is '{fmt}')", ex.join(" or "))
}

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => alnum(f) && alnum(l) && b.iter().all(|c| alnum(c) || *c == b'-'),
        _ => false,
    }
}

fn is_subdomain(s: &str) -> bool {
    s.split('.').all(is_label)
}

/// Kubernetes' `IsDNS1123Label`: the messages of what is wrong (none when valid).
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > LABEL_MAX {
        errs.push(max_len_error(LABEL_MAX));
    }
    if !is_label(s) {
        if is_subdomain(s) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(LABEL_MSG, LABEL_FMT, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// Kubernetes' `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > SUBDOMAIN_MAX {
        errs.push(max_len_error(SUBDOMAIN_MAX));
    }
    if !is_subdomain(s) {
        errs.push(regex_error(SUBDOMAIN_MSG, &format!("{LABEL_FMT}(\\.{LABEL_FMT})*"), &["example.com"]));
    }
    errs
}

const QUALIFIED_NAME_MAX: usize = 63;
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let ext = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => f.is_ascii_alphanumeric() && l.is_ascii_alphanumeric() && b.iter().all(ext),
        _ => false,
    }
}

/// Kubernetes' `IsQualifiedName` (label keys: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// characters): the messages of what is wrong (none when valid).
pub fn qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            let regex = regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"]);
            errs.push(format!(
                "a qualified name {regex} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX)));
    }
    if !is_qualified_name_part(name) {
        let regex = regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"]);
        errs.push(format!("name part {regex}"));
    }
    errs
}

/// Kubernetes' `IsValidLabelValue`: empty, or a qualified name part of at most 63 characters.
pub fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > QUALIFIED_NAME_MAX {
        errs.push(max_len_error(QUALIFIED_NAME_MAX));
    }
    if !s.is_empty() && !is_qualified_name_part(s) {
        errs.push(regex_error(LABEL_VALUE_MSG, &format!("({QUALIFIED_NAME_FMT})?"), &["MyValue", "my_value", "12345"]));
    }
    errs
}

/// Kubernetes' `IsValidPortName`: whether `s` is a valid port (IANA service) name.
pub fn is_valid_port_name(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() <= 15
        && !b.is_empty()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.iter().any(u8::is_ascii_lowercase)
        && !s.contains("--")
        && b.first() != Some(&b'-')
        && b.last() != Some(&b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_messages_are_kubernetes() {
        assert!(dns1123_label("my-disk-1").is_empty());
        assert_eq!(
            dns1123_label("My_Disk"),
            vec!["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_owned()]
        );
        assert_eq!(dns1123_label("a.b"), vec!["must not contain dots".to_owned()]);
        assert_eq!(dns1123_label(&"a".repeat(64)), vec!["must be no more than 63 characters".to_owned()]);
        assert!(dns1123_subdomain("a.b-c").is_empty());
        assert_eq!(dns1123_subdomain("A").len(), 1);
        assert!(is_valid_port_name("http") && !is_valid_port_name("80") && !is_valid_port_name("a--b"));
    }

    #[test]
    fn qualified_names_and_label_values_are_kubernetes() {
        for ok in ["kubernetes.io/hostname", "zone", "a_b.c-d", "example.com/X9"] {
            assert_eq!(qualified_name(ok), Vec::<String>::new(), "{ok}");
        }
        let regex = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        assert_eq!(qualified_name("a b"), [format!("name part {regex}")]);
        assert_eq!(qualified_name("/x"), ["prefix part must be non-empty".to_owned()]);
        assert_eq!(qualified_name("x/"), ["name part must be non-empty".to_owned(), format!("name part {regex}")]);
        assert_eq!(
            qualified_name("a/b/c"),
            [format!(
                "a qualified name {regex} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )]
        );
        assert_eq!(qualified_name(&"a".repeat(64)), ["name part must be no more than 63 characters".to_owned()]);
        assert_eq!(qualified_name("Ex.com/a").len(), 1, "the prefix is a lowercase subdomain");
        assert!(qualified_name("Ex.com/a")[0].starts_with("prefix part a lowercase RFC 1123 subdomain"));
        assert!(label_value("").is_empty() && label_value("my_value.1").is_empty());
        assert_eq!(
            label_value("-x"),
            ["a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_owned()]
        );
        assert_eq!(label_value(&"v".repeat(64)), ["must be no more than 63 characters".to_owned()]);
    }
}
