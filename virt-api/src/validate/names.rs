//! Kubernetes' name rules with its exact messages (`k8s.io/apimachinery/pkg/util/validation`): DNS-1123 labels
//! and subdomains, port names.

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
}
