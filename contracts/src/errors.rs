//! How every component renders an error for a person or a termination message: one line, with its causes.

/// An error and its `source()` chain on one line, `outer: inner: innermost`, skipping causes whose text the
/// parent already shows; line breaks become spaces.
pub fn chain_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("reading failed: {0}")]
    struct Repeats(#[source] std::io::Error);

    #[test]
    fn chains_are_one_line_without_repeats() {
        assert_eq!(chain_line(&Outer(std::io::Error::other("inner\ncause"))), "outer: inner cause");
        assert_eq!(chain_line(&Repeats(std::io::Error::other("disk gone"))), "reading failed: disk gone");
    }
}
