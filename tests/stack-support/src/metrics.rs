//! Scraping the stack's metrics the way a ServiceMonitor does: every ready endpoint of a Service's port named
//! `metrics` ([`scrape_service`]), and reading one sample out of the Prometheus text ([`sample`]).

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube_test_support::{Error, Result};

/// The `/metrics` text of every ready endpoint behind `service`'s port named `metrics` (plain HTTP), as
/// (pod name, text). Fails when the Service has no ready endpoint or one does not answer.
pub async fn scrape_service(client: &kube::Client, namespace: &str, service: &str) -> Result<Vec<(String, String)>> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let list = slices.list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}"))).await?;
    let mut out = Vec::new();
    for slice in list {
        let port = slice.ports.iter().flatten().find(|p| p.name.as_deref() == Some("metrics")).and_then(|p| p.port);
        let Some(port) = port else { continue };
        for ep in &slice.endpoints {
            if ep.conditions.as_ref().and_then(|c| c.ready) != Some(true) {
                continue;
            }
            let pod = ep.target_ref.as_ref().and_then(|t| t.name.clone()).unwrap_or_default();
            for addr in &ep.addresses {
                out.push((pod.clone(), crate::vmi::http_get_url(&format!("http://{addr}:{port}/metrics")).await?));
            }
        }
    }
    if out.is_empty() {
        return Err(Error::ClusterUp(format!("service {namespace}/{service} has no ready metrics endpoint")));
    }
    Ok(out)
}

/// The labels of one sample line (`name{k="v",…} value`), unescaped.
fn labels(inner: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = inner;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, e)) = chars.next() {
                        value.push(if e == 'n' { '\n' } else { e });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.push((key.trim_start_matches(',').trim().to_owned(), value));
        rest = &after[end..];
    }
    out
}

/// The value of the first sample of `name` in `text` whose labels include every pair of `want`.
pub fn sample(text: &str, name: &str, want: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (inner, value) = match rest.strip_prefix('{') {
            Some(r) => r.rsplit_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        let have = labels(inner);
        let matches = want.iter().all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v));
        if matches { value.split_whitespace().next()?.parse().ok() } else { None }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_found_by_name_and_labels() {
        let text =
            "# TYPE a counter\na_total{node=\"n\",name=\"x,y\",q=\"a\\\"b\"} 3.5\na_total{name=\"z\"} 1\nb 7\nb_c 9\n";
        assert_eq!(sample(text, "a_total", &[("name", "x,y")]), Some(3.5));
        assert_eq!(sample(text, "a_total", &[("q", "a\"b")]), Some(3.5));
        assert_eq!(sample(text, "a_total", &[("name", "z")]), Some(1.0));
        assert_eq!(sample(text, "a_total", &[("name", "w")]), None);
        assert_eq!(sample(text, "b", &[]), Some(7.0));
        assert_eq!(sample(text, "b_c", &[]), Some(9.0));
        assert_eq!(sample(text, "c", &[]), None);
    }
}
