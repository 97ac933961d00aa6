//! Checks of an SVG the plots write: it parses as XML with an `<svg>` root, its text holds
//! the given labels, and it draws one curve per named series (a series is a colour of the
//! 2-pixel polylines: its curve in each panel and its legend line).

use std::collections::BTreeMap;

/// Panics unless `svg` is an SVG document with every one of `labels` in its text and exactly
/// `series` (legend names) drawn, each in a colour of its own. Returns its text.
pub fn check(svg: &str, labels: &[&str], series: &[&str]) -> String {
    let doc = parse(svg);
    let root = doc.root_element();
    assert!(root.attribute("width").is_some() && root.attribute("height").is_some());
    let text = texts(&doc);
    let joined = text.join("\n");
    assert_labels(&text, labels);
    for s in series {
        assert!(text.contains(s), "no legend entry {s:?} in {joined}");
    }
    // Curves: 2-pixel polylines, by colour (count of polylines per colour).
    let mut colours: BTreeMap<&str, usize> = BTreeMap::new();
    for n in doc.descendants().filter(|n| n.has_tag_name("polyline")) {
        if n.attribute("stroke-width") == Some("2") {
            *colours
                .entry(n.attribute("stroke").unwrap_or(""))
                .or_default() += 1;
        }
    }
    assert_eq!(
        colours.len(),
        series.len(),
        "curve colours {colours:?}, series {series:?}"
    );
    // Each: its legend line and at least one curve.
    assert!(colours.values().all(|&c| c >= 2), "{colours:?}");
    joined
}

#[allow(dead_code)] // (not every test binary that includes this file draws categories)
/// Like `check`, for plots of markers without curves (categories): an SVG document with every
/// one of `labels` in its text and every one of `series` in its legend. Returns its text.
pub fn check_markers(svg: &str, labels: &[&str], series: &[&str]) -> String {
    let doc = parse(svg);
    let text = texts(&doc);
    assert_labels(&text, labels);
    assert_labels(&text, series);
    text.join("\n")
}

/// `svg` parsed, its root element checked to be `<svg>`.
fn parse(svg: &str) -> roxmltree::Document<'_> {
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not XML ({e}): {svg}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg", "root element");
    doc
}

/// The trimmed contents of every `<text>` element, in document order.
fn texts<'a>(doc: &'a roxmltree::Document<'_>) -> Vec<&'a str> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect()
}

/// Panics unless each of `labels` is within one of the `text` elements.
fn assert_labels(text: &[&str], labels: &[&str]) {
    for l in labels {
        assert!(
            text.iter().any(|t| t.contains(l)),
            "no label {l:?} in {}",
            text.join("\n")
        );
    }
}
