//! A tiny XML element tree and its writer, enough for libvirt domain XML: elements with attributes (in the order
//! given), child elements or one text child, `'`-quoted attributes, two-space indentation. Deterministic output,
//! so golden files compare as text.

use std::fmt::Write as _;

/// One element.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Element {
    name: &'static str,
    attrs: Vec<(&'static str, String)>,
    content: Content,
}

#[derive(Debug, Clone, PartialEq)]
enum Content {
    Children(Vec<Element>),
    Text(String),
}

impl Element {
    /// An empty element.
    pub(crate) fn new(name: &'static str) -> Element {
        Element { name, attrs: Vec::new(), content: Content::Children(Vec::new()) }
    }

    /// An element holding `text`.
    pub(crate) fn text(name: &'static str, text: impl Into<String>) -> Element {
        Element { name, attrs: Vec::new(), content: Content::Text(text.into()) }
    }

    /// Adds an attribute.
    pub(crate) fn attr(mut self, name: &'static str, value: impl Into<String>) -> Element {
        self.attrs.push((name, value.into()));
        self
    }

    /// Adds an attribute when `value` is `Some`.
    pub(crate) fn attr_opt(self, name: &'static str, value: Option<impl Into<String>>) -> Element {
        match value {
            Some(v) => self.attr(name, v),
            None => self,
        }
    }

    /// Adds a child element (replacing text content, which elements here never mix with children).
    pub(crate) fn child(mut self, child: Element) -> Element {
        self.push(child);
        self
    }

    /// Adds a child element when `child` is `Some`.
    pub(crate) fn child_opt(self, child: Option<Element>) -> Element {
        match child {
            Some(c) => self.child(c),
            None => self,
        }
    }

    /// Adds child elements.
    pub(crate) fn children(mut self, children: impl IntoIterator<Item = Element>) -> Element {
        for c in children {
            self.push(c);
        }
        self
    }

    /// Adds a child element in place.
    pub(crate) fn push(&mut self, child: Element) {
        match &mut self.content {
            Content::Children(c) => c.push(child),
            Content::Text(_) => self.content = Content::Children(vec![child]),
        }
    }

    /// The document: this element, indented, with a final newline.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out
    }

    fn write(&self, out: &mut String, depth: usize) {
        let indent = "  ".repeat(depth);
        let _ = write!(out, "{indent}<{}", self.name);
        for (k, v) in &self.attrs {
            let _ = write!(out, " {k}='{}'", escape(v));
        }
        match &self.content {
            Content::Children(c) if c.is_empty() => out.push_str("/>\n"),
            Content::Children(c) => {
                out.push_str(">\n");
                for child in c {
                    child.write(out, depth + 1);
                }
                let _ = writeln!(out, "{indent}</{}>", self.name);
            }
            Content::Text(t) => {
                let _ = writeln!(out, ">{}</{}>", escape(t), self.name);
            }
        }
    }
}

/// Escapes text and `'`-quoted attribute values.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_nested_elements_text_and_escaped_attributes() {
        let doc = Element::new("domain")
            .attr("type", "qemu")
            .child(Element::text("name", "ns_<a&b>"))
            .child(Element::new("devices").child(Element::new("disk").attr("x", "it's \"q\"")))
            .child(Element::new("features"))
            .child_opt(None)
            .attr_opt("missing", None::<String>);
        assert_eq!(
            doc.render(),
            "<domain type='qemu'>\n  <name>ns_&lt;a&amp;b&gt;</name>\n  <devices>\n    \
             <disk x='it&apos;s &quot;q&quot;'/>\n  </devices>\n  <features/>\n</domain>\n"
        );
    }
}
