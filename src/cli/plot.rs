//! Plots of the command line's measurements as SVG (plotters' SVG backend): latency and
//! bandwidth against message size (`openib bench --svg`, `openib plot` of `bench --json` or of
//! `scripts/anchors --save`), and modex bytes per process against job size (`openib modex size
//! --svg`). Both axes of every panel are logarithmic; every series has its own colour and
//! marker, named in one legend under the panels.
//!
//! `openib plot [--svg FILE] [--title T] [--osc] [INPUT|-]` draws a saved JSON document: the
//! kind is told by its shape (`"summary"` and `"config"`: anchors; `"results"`: bench); the
//! one-sided figures of `scripts/anchors --osc` (its `"osc"` object: latency per operation
//! and put bandwidth) with `--osc`, or by themselves when the document has no point-to-point
//! system; the group-creation measurement of `openib sim group-create --json` (its `"kind"`
//! is `"group-create-sim"`; or `--group-create`): steps and messages per process against p.

use super::exit;
use plotters::coord::combinators::{BindKeyPoints, LogCoord, WithKeyPoints};
use plotters::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// What went wrong making a plot.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The input has nothing to draw (no series with a positive point).
    #[error("nothing to plot: {0}")]
    NoData(String),
    /// The JSON document is not one this module draws.
    #[error("not a plottable document: {0}")]
    Input(String),
    /// plotters failed to draw.
    #[error("drawing failed: {0}")]
    Draw(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How an axis's tick labels read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    /// Bytes: `8 B`, `4 KiB`, `1 MiB` (ticks at powers of two).
    Bytes,
    /// A count: `1`, `64`, `4K`, `64K` (ticks at powers of two).
    Count,
    /// A quantity: `0.5`, `1`, `20`, `1000` (ticks at 1, 2 and 5 times powers of ten).
    Value,
    /// Categories: the i-th label at x = 2^i (evenly spaced on the log axis), e.g. one
    /// operation per label; series on such an axis are drawn as markers, not lines.
    Labels(&'static [&'static str]),
}

/// One curve: a name for the legend and its (x, y) points; points with a non-positive or
/// non-finite coordinate cannot be drawn on log axes and are left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// One chart.
#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub x_desc: String,
    pub y_desc: String,
    pub x_axis: Axis,
    pub y_axis: Axis,
    pub series: Vec<Series>,
}

/// Panels side by side under a title, with one legend: a series keeps its colour and marker
/// in every panel (matched by name).
#[derive(Debug, Clone)]
pub struct Figure {
    pub title: String,
    /// A line of small print under the legend (what was measured, where), if any.
    pub note: Option<String>,
    pub panels: Vec<Panel>,
}

/// Okabe-Ito: distinguishable with the common colour-vision deficiencies.
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

const PANEL_W: u32 = 620;
const PANEL_H: u32 = 470;
const TITLE_H: u32 = 44;
const FONT: &str = "sans-serif";

/// Label of a tick on an axis of kind `a`.
pub fn tick_label(a: Axis, v: f64) -> String {
    let pow2 = |v: f64, units: &[&str], step: f64, sep: &str| {
        let mut v = v;
        let mut u = 0;
        while v >= step && u + 1 < units.len() {
            v /= step;
            u += 1;
        }
        let n = if (v - v.round()).abs() < 1e-9 {
            format!("{}", v.round())
        } else {
            format!("{v:.1}")
        };
        format!("{n}{sep}{}", units[u])
    };
    match a {
        Axis::Bytes => pow2(v, &["B", "KiB", "MiB", "GiB", "TiB"], 1024.0, " "),
        Axis::Count => pow2(v, &["", "K", "M", "G"], 1024.0, ""),
        Axis::Labels(names) => {
            let i = v.log2().round();
            if i >= 0.0 && (v - 2f64.powf(i)).abs() < 1e-6 * v {
                names
                    .get(i as usize)
                    .map_or(String::new(), |n| n.to_string())
            } else {
                String::new()
            }
        }
        Axis::Value => {
            if v >= 1.0 {
                format!("{}", v.round())
            } else {
                let s = format!("{v:.6}");
                s.trim_end_matches('0').trim_end_matches('.').to_string()
            }
        }
    }
}

/// Ticks and range of a log axis of kind `a` around the data `[lo, hi]`: the range is
/// widened to the ticks next to the data (and by a margin), so no point sits on the frame.
fn log_axis(a: Axis, lo: f64, hi: f64) -> (f64, f64, Vec<f64>) {
    let (lo, hi) = if hi / lo < 1.5 {
        (lo / 1.5, hi * 1.5)
    } else {
        (lo, hi)
    };
    match a {
        Axis::Labels(names) => {
            let ticks = (0..names.len() as i32)
                .map(|i| 2f64.powi(i))
                .filter(|&t| t >= lo && t <= hi)
                .collect();
            (lo, hi, ticks)
        }
        Axis::Bytes | Axis::Count => {
            let e_lo = lo.log2().floor() as i32;
            let e_hi = hi.log2().ceil() as i32;
            // At most 10 ticks: every power of 2, or of 4, 16, 256 (so 1 KiB and 1 MiB
            // are ticks whenever they are in range).
            let span = (e_hi - e_lo).max(1);
            let mut step = 1;
            while span / step > 10 {
                step *= 2;
            }
            let first = e_lo.div_euclid(step) * step;
            let ticks: Vec<f64> = (0..)
                .map(|k| first + k * step)
                .take_while(|&e| e <= e_hi + step)
                .map(|e| 2f64.powi(e))
                .collect();
            let lo_t = ticks
                .iter()
                .copied()
                .filter(|&t| t <= lo)
                .fold(lo, f64::min);
            let lo_t = ticks.iter().copied().rfind(|&t| t <= lo).unwrap_or(lo_t);
            let hi_t = ticks.iter().copied().find(|&t| t >= hi).unwrap_or(hi);
            let ticks = ticks
                .into_iter()
                .filter(|&t| t >= lo_t && t <= hi_t)
                .collect();
            (lo_t, hi_t, ticks)
        }
        Axis::Value => {
            let e_lo = lo.log10().floor() as i32;
            let e_hi = hi.log10().ceil() as i32;
            let decades = e_hi - e_lo;
            let mults: &[f64] = if decades <= 2 {
                &[1.0, 2.0, 5.0]
            } else if decades <= 4 {
                &[1.0, 3.0]
            } else {
                &[1.0]
            };
            let mut all = Vec::new();
            for e in e_lo..=e_hi {
                for m in mults {
                    all.push(m * 10f64.powi(e));
                }
            }
            let lo_t = all.iter().copied().rfind(|&t| t <= lo).unwrap_or(lo);
            let hi_t = all.iter().copied().find(|&t| t >= hi).unwrap_or(hi);
            let ticks = all
                .into_iter()
                .filter(|&t| t >= lo_t * 0.999 && t <= hi_t * 1.001)
                .collect();
            (lo_t, hi_t, ticks)
        }
    }
}

fn drawable(p: &(f64, f64)) -> bool {
    p.0.is_finite() && p.1.is_finite() && p.0 > 0.0 && p.1 > 0.0
}

fn draw_err(e: impl std::fmt::Display) -> PlotError {
    PlotError::Draw(e.to_string())
}

/// The figure as an SVG document.
pub fn render_svg(fig: &Figure) -> Result<String, PlotError> {
    // Series names in first-seen order: the legend, and each name's style.
    let mut names: Vec<&str> = Vec::new();
    for p in &fig.panels {
        for s in &p.series {
            if s.points.iter().any(drawable) && !names.contains(&s.name.as_str()) {
                names.push(&s.name);
            }
        }
    }
    if names.is_empty() || fig.panels.is_empty() {
        return Err(PlotError::NoData(fig.title.clone()));
    }
    let style_of = |name: &str| names.iter().position(|n| *n == name).unwrap_or(0);
    // Legend: as many columns as fit two per panel, one row per column-full.
    let cols = (2 * fig.panels.len()).clamp(1, names.len());
    let rows = names.len().div_ceil(cols) as u32;
    let legend_h = 16 + rows * 26 + if fig.note.is_some() { 26 } else { 0 };
    let w = PANEL_W * fig.panels.len() as u32;
    let h = TITLE_H + PANEL_H + legend_h;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let (top, rest) = root.split_vertically(TITLE_H);
        top.draw(&Text::new(
            fig.title.clone(),
            (w as i32 / 2, 12),
            (FONT, 22)
                .into_font()
                .style(FontStyle::Bold)
                .into_text_style(&top)
                .pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Top,
                )),
        ))
        .map_err(draw_err)?;
        let (charts, legend) = rest.split_vertically(PANEL_H);
        for (area, panel) in charts
            .split_evenly((1, fig.panels.len()))
            .iter()
            .zip(&fig.panels)
        {
            draw_panel(area, panel, &style_of)?;
        }
        draw_legend(&legend, &names, cols, fig.note.as_deref())?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
    style_of: &dyn Fn(&str) -> usize,
) -> Result<(), PlotError> {
    let pts = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(drawable);
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        // An empty panel still shows its axes: a unit range.
        (x0, x1, y0, y1) = (1.0, 2.0, 1.0, 10.0);
    }
    // x: the data and a margin (a point at either end would sit on the frame), ticks inside.
    let (_, _, x_ticks) = log_axis(panel.x_axis, x0 / 2.0, x1 * 2.0);
    let (mut x_lo, mut x_hi) = if x1 / x0 < 1.5 {
        (x0 / 1.5, x1 * 1.5)
    } else {
        (x0 / 1.3, x1 * 1.3)
    };
    // The ticks just outside the data, when near (so the first and last points are read
    // against a labelled tick, e.g. 8 B against 4 B).
    if let Some(t) = x_ticks.iter().copied().rfind(|&t| t <= x0 && x0 / t <= 2.0) {
        x_lo = x_lo.min(t / 1.1);
    }
    if let Some(t) = x_ticks.iter().copied().find(|&t| t >= x1 && t / x1 <= 2.0) {
        x_hi = x_hi.max(t * 1.1);
    }
    let x_ticks: Vec<f64> = x_ticks
        .into_iter()
        .filter(|&t| t >= x_lo && t <= x_hi)
        .collect();
    let (y_lo, y_hi, y_ticks) = log_axis(panel.y_axis, y0 / 1.15, y1 * 1.15);
    let x_range = (x_lo..x_hi).log_scale().with_key_points(x_ticks);
    let y_range = (y_lo..y_hi).log_scale().with_key_points(y_ticks);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, (FONT, 19))
        .margin_left(10)
        .margin_right(24)
        .margin_top(6)
        .x_label_area_size(56)
        .y_label_area_size(74)
        .build_cartesian_2d(x_range, y_range)
        .map_err(draw_err)?;
    let (xa, ya) = (panel.x_axis, panel.y_axis);
    let xf = move |v: &f64| tick_label(xa, *v);
    let yf = move |v: &f64| tick_label(ya, *v);
    chart
        .configure_mesh()
        .x_desc(&panel.x_desc)
        .y_desc(&panel.y_desc)
        .axis_desc_style((FONT, 16))
        .label_style((FONT, 14))
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .bold_line_style(RGBColor(215, 215, 215))
        .light_line_style(WHITE)
        .draw()
        .map_err(draw_err)?;
    for s in &panel.series {
        let k = style_of(&s.name);
        let color = PALETTE[k % PALETTE.len()];
        let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(drawable).collect();
        if pts.is_empty() {
            continue;
        }
        if !matches!(panel.x_axis, Axis::Labels(_)) {
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(draw_err)?;
        }
        draw_markers(&mut chart, &pts, k, color)?;
    }
    Ok(())
}

type LogChart<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<WithKeyPoints<LogCoord<f64>>, WithKeyPoints<LogCoord<f64>>>>;

/// The `k`-th marker shape: circle, triangle, square, cross, diamond-ish (filled circle
/// outline), repeating.
fn draw_markers<DB: DrawingBackend>(
    chart: &mut LogChart<'_, DB>,
    pts: &[(f64, f64)],
    k: usize,
    color: RGBColor,
) -> Result<(), PlotError> {
    let filled = color.filled();
    let r = match k % 5 {
        0 => chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, filled))),
        1 => chart.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 6, filled))),
        2 => chart.draw_series(
            pts.iter()
                .map(|&p| EmptyElement::at(p) + Rectangle::new([(-4, -4), (4, 4)], filled)),
        ),
        3 => chart.draw_series(pts.iter().map(|&p| Cross::new(p, 5, color.stroke_width(2)))),
        _ => chart.draw_series(
            pts.iter()
                .map(|&p| Circle::new(p, 5, color.stroke_width(2))),
        ),
    };
    r.map(|_| ()).map_err(draw_err)
}

/// The marker of style `k` at backend point `c` (for the legend).
fn legend_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    c: (i32, i32),
    k: usize,
) -> Result<(), PlotError> {
    let color = PALETTE[k % PALETTE.len()];
    let filled = color.filled();
    let r = match k % 5 {
        0 => area.draw(&Circle::new(c, 4, filled)),
        1 => area.draw(&TriangleMarker::new(c, 6, filled)),
        2 => area.draw(&Rectangle::new(
            [(c.0 - 4, c.1 - 4), (c.0 + 4, c.1 + 4)],
            filled,
        )),
        3 => area.draw(&Cross::new(c, 5, color.stroke_width(2))),
        _ => area.draw(&Circle::new(c, 5, color.stroke_width(2))),
    };
    r.map_err(draw_err)
}

fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    names: &[&str],
    cols: usize,
    note: Option<&str>,
) -> Result<(), PlotError> {
    let (w, _) = area.dim_in_pixel();
    let col_w = (w as i32 - 40) / cols as i32;
    for (k, name) in names.iter().enumerate() {
        let x = 20 + (k % cols) as i32 * col_w;
        let y = 14 + (k / cols) as i32 * 26;
        let color = PALETTE[k % PALETTE.len()];
        area.draw(&PathElement::new(
            vec![(x, y + 8), (x + 36, y + 8)],
            color.stroke_width(2),
        ))
        .map_err(draw_err)?;
        legend_marker(area, (x + 18, y + 8), k)?;
        area.draw(&Text::new(name.to_string(), (x + 44, y), (FONT, 16)))
            .map_err(draw_err)?;
    }
    if let Some(note) = note {
        let y = 14 + names.len().div_ceil(cols) as i32 * 26 + 2;
        area.draw(&Text::new(
            note.to_string(),
            (20, y),
            (FONT, 13).into_font().color(&RGBColor(80, 80, 80)),
        ))
        .map_err(draw_err)?;
    }
    Ok(())
}

/// Writes the figure to `path`.
pub fn write_svg(fig: &Figure, path: &Path) -> Result<(), PlotError> {
    let svg = render_svg(fig)?;
    std::fs::write(path, svg).map_err(|source| PlotError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A number field of `v`, if present and numeric.
fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// Latency and bandwidth panels from rows of `rows`, each with a `"size"`, one series per
/// `(name, latency key, bandwidth key)`.
fn lat_bw_figure(
    title: String,
    note: Option<String>,
    rows: &[Value],
    systems: &[(String, String, String)],
) -> Figure {
    let curve = |name: &str, key: &str| Series {
        name: name.to_string(),
        points: rows
            .iter()
            .filter_map(|r| Some((num(r, "size")?, num(r, key)?)))
            .collect(),
    };
    let keep = |s: Series| (!s.points.is_empty()).then_some(s);
    Figure {
        title,
        note,
        panels: vec![
            Panel {
                title: "Latency (half round trip)".into(),
                x_desc: "message size".into(),
                y_desc: "latency (µs)".into(),
                x_axis: Axis::Bytes,
                y_axis: Axis::Value,
                series: systems
                    .iter()
                    .filter_map(|(n, l, _)| keep(curve(n, l)))
                    .collect(),
            },
            Panel {
                title: "Bandwidth (streamed)".into(),
                x_desc: "message size".into(),
                y_desc: "bandwidth (MB/s, 10⁶ B/s)".into(),
                x_axis: Axis::Bytes,
                y_axis: Axis::Value,
                series: systems
                    .iter()
                    .filter_map(|(n, _, b)| keep(curve(n, b)))
                    .collect(),
            },
        ],
    }
}

/// The series of one `openib bench` run (its `--json` document, or the `results` rows).
/// Latency is the trimmed mean (perftest's t_avg rule, as the anchors plot uses for every
/// system); `send` for every size, `send_region` (zero copy) where it ran.
pub fn bench_figure(doc: &Value, title: Option<&str>) -> Result<Figure, PlotError> {
    let rows = doc
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| PlotError::Input("no \"results\" array (openib bench --json)".into()))?;
    let eager = doc.get("eager_limit").and_then(Value::as_u64);
    let systems = [
        (
            "openib send".to_string(),
            "latency_trimmed_us".to_string(),
            "bandwidth_mb_s".to_string(),
        ),
        (
            "openib send_region (zero copy)".to_string(),
            "latency_zero_copy_trimmed_us".to_string(),
            "bandwidth_zero_copy_mb_s".to_string(),
        ),
    ];
    let fig = lat_bw_figure(
        title.map_or_else(|| "openib bench: 2 ranks".to_string(), str::to_string),
        Some(format!(
            "latency: mean half round trip without the 2 slowest (ib_send_lat's t_avg rule){}",
            eager.map_or(String::new(), |e| format!(
                "; eager limit {}, zero copy above it",
                tick_label(Axis::Bytes, e as f64)
            ))
        )),
        rows,
        &systems,
    );
    check_drawable(fig)
}

/// The legend name of an anchors system.
fn anchor_name(system: &str) -> String {
    match system {
        "openib" => "openib send".into(),
        "perftest" => "perftest (ib_send_lat, ib_write_bw)".into(),
        "ompi-openib" => "Open MPI 4.1 openib BTL".into(),
        "ucx" => "Open MPI 4.1 + UCX (rc_verbs)".into(),
        "ompi-oib" => "Open MPI 4.1 ob1 + oib (this transport)".into(),
        other => other.into(),
    }
}

/// The series of a `scripts/anchors --save` document: one per system it measured (the
/// `summary` rows' `<system>_latency_trimmed_us` and `<system>_bandwidth_mb_s`, medians over
/// the rounds), and openib's zero-copy run where it has one.
pub fn anchors_figure(doc: &Value, title: Option<&str>) -> Result<Figure, PlotError> {
    let rows = doc
        .get("summary")
        .and_then(Value::as_array)
        .ok_or_else(|| PlotError::Input("no \"summary\" array (scripts/anchors --save)".into()))?;
    let cfg = doc.get("config").unwrap_or(&Value::Null);
    let systems: Vec<String> = cfg
        .get("systems")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .ok_or_else(|| PlotError::Input("no \"config\".\"systems\" list".into()))?;
    let mut series: Vec<(String, String, String)> = Vec::new();
    for s in &systems {
        let key = s.replace('-', "_");
        series.push((
            anchor_name(s),
            format!("{key}_latency_trimmed_us"),
            format!("{key}_bandwidth_mb_s"),
        ));
        if s == "openib" {
            series.push((
                "openib send_region (zero copy)".into(),
                "openib_zero_copy_latency_trimmed_us".into(),
                "openib_zero_copy_bandwidth_mb_s".into(),
            ));
        }
    }
    let rounds = cfg.get("rounds").and_then(Value::as_u64).unwrap_or(1);
    let fig = lat_bw_figure(
        title.map_or_else(
            || "openib and its anchors, one SoftRoCE guest run".to_string(),
            str::to_string,
        ),
        Some(format!(
            "rxe (SoftRoCE) in a TCG guest: compare within the run only; {rounds} round(s){}; latency: mean without the 2 slowest round trips",
            if rounds > 1 { ", medians" } else { "" }
        )),
        rows,
        &series,
    );
    check_drawable(fig)
}

/// The one-sided operations of `scripts/anchors --osc` with a latency, in its order, and
/// their axis labels.
const OSC_LAT_OPS: [&str; 4] = ["put", "get", "fop", "cas"];
const OSC_LAT_LABELS: [&str; 4] = ["Put+flush", "Get+flush", "Fetch_and_op", "Compare_and_swap"];

/// The one-sided figures of a `scripts/anchors --osc --save` document (its `"osc"` object):
/// the latency of each 8-byte operation (`<system>_latency_trimmed_us` of the `osc.summary`
/// rows, medians over the rounds; one marker per system, side by side within an operation)
/// and the put bandwidth (`<system>_bandwidth_mb_s` of the `put_bw` row). An operation that
/// failed has no marker; the note names the failures (`osc.failures`).
pub fn osc_figure(doc: &Value, title: Option<&str>) -> Result<Figure, PlotError> {
    let osc = doc.get("osc").ok_or_else(|| {
        PlotError::Input("no \"osc\" object (scripts/anchors --osc --save)".into())
    })?;
    let rows = osc
        .get("summary")
        .and_then(Value::as_array)
        .ok_or_else(|| PlotError::Input("no \"osc\".\"summary\" array".into()))?;
    let systems: Vec<&str> = osc
        .get("systems")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .ok_or_else(|| PlotError::Input("no \"osc\".\"systems\" list".into()))?;
    let row_of = |op: &str| {
        rows.iter()
            .find(|r| r.get("op").and_then(Value::as_str) == Some(op))
    };
    let n = systems.len() as f64;
    let mut lat = Vec::new();
    let mut bw = Vec::new();
    for (k, sys) in systems.iter().enumerate() {
        let key = sys.replace('-', "_");
        // side by side within a category: a small shift on the log axis per system
        let shift = 2f64.powf((k as f64 - (n - 1.0) / 2.0) * 0.12);
        let points = OSC_LAT_OPS
            .iter()
            .enumerate()
            .filter_map(|(i, op)| {
                let y = num(row_of(op)?, &format!("{key}_latency_trimmed_us"))?;
                Some((2f64.powi(i as i32) * shift, y))
            })
            .collect();
        lat.push(Series {
            name: anchor_name(sys),
            points,
        });
        let points = row_of("put_bw")
            .and_then(|r| Some((num(r, "size")?, num(r, &format!("{key}_bandwidth_mb_s"))?)))
            .into_iter()
            .collect();
        bw.push(Series {
            name: anchor_name(sys),
            points,
        });
    }
    let failed: Vec<String> = osc
        .get("failures")
        .and_then(Value::as_array)
        .map(|a| {
            let mut v: Vec<String> = a
                .iter()
                .filter_map(|f| {
                    Some(format!(
                        "{} in {}",
                        f.get("system")?.as_str()?,
                        f.get("op")?.as_str()?
                    ))
                })
                .collect();
            v.dedup();
            v
        })
        .unwrap_or_default();
    let rounds = osc.get("rounds").and_then(Value::as_u64).unwrap_or(1);
    let flavor = osc
        .get("flavor")
        .and_then(Value::as_str)
        .unwrap_or("create");
    let fig = Figure {
        title: title.map_or_else(
            || "One-sided MPI: ob1 + oib and its anchors, one SoftRoCE guest run".to_string(),
            str::to_string,
        ),
        note: Some(format!(
            "MPI_Win_{flavor}, passive target; {rounds} round(s){}; latency: mean without the 2 slowest{}",
            if rounds > 1 { ", medians" } else { "" },
            if failed.is_empty() {
                String::new()
            } else {
                format!("; failed (no marker): {}", failed.join(", "))
            }
        )),
        panels: vec![
            Panel {
                title: "Latency of one 8-byte operation + MPI_Win_flush".into(),
                x_desc: "operation".into(),
                y_desc: "latency (µs)".into(),
                x_axis: Axis::Labels(&OSC_LAT_LABELS),
                y_axis: Axis::Value,
                series: lat,
            },
            Panel {
                title: "Put bandwidth (MPI_Put, flushed per 8)".into(),
                x_desc: "message size".into(),
                y_desc: "bandwidth (MB/s, 10⁶ B/s)".into(),
                x_axis: Axis::Bytes,
                y_axis: Axis::Value,
                series: bw,
            },
        ],
    };
    check_drawable(fig)
}

/// The legend name of a group-creation series with `f` failures.
fn failures_name(f: u64) -> String {
    match f {
        0 => "group create, no failure".into(),
        1 => "group create, 1 failure".into(),
        f => format!("group create, {f} failures"),
    }
}

/// The figures of an `openib sim group-create --json` document: steps to the decision and
/// messages per process against p, one series per failure count (its `"rows"`' `steps_max`
/// and `messages_per_process`), with the reference lines the rows carry: the failure-free
/// bound `2 ceil(log2 p) + 2` (`steps_bound`), the resilient fence's `4 ceil(log2 p)` steps
/// (`fence_steps`) and the `p log2 p` message bound, `log2 p` per process (`log2_p`).
pub fn group_create_figure(doc: &Value, title: Option<&str>) -> Result<Figure, PlotError> {
    let rows = doc.get("rows").and_then(Value::as_array).ok_or_else(|| {
        PlotError::Input("no \"rows\" array (openib sim group-create --json)".into())
    })?;
    let mut failures: Vec<u64> = rows
        .iter()
        .filter_map(|r| r.get("failures").and_then(Value::as_u64))
        .collect();
    failures.sort_unstable();
    failures.dedup();
    let curve = |name: String, key: &str, f: Option<u64>| Series {
        name,
        points: rows
            .iter()
            .filter(|r| f.is_none_or(|f| r.get("failures").and_then(Value::as_u64) == Some(f)))
            .filter_map(|r| Some((num(r, "p")?, num(r, key)?)))
            .collect(),
    };
    // A reference line once per p (from the failure-free rows, or the first failure count's).
    let reference = |name: &str, key: &str| curve(name.into(), key, failures.first().copied());
    let mut steps: Vec<Series> = failures
        .iter()
        .map(|&f| curve(failures_name(f), "steps_max", Some(f)))
        .collect();
    steps.push(reference("bound 2⌈log2 p⌉ + 2", "steps_bound"));
    steps.push(reference("resilient fence 4⌈log2 p⌉", "fence_steps"));
    let mut msgs: Vec<Series> = failures
        .iter()
        .map(|&f| curve(failures_name(f), "messages_per_process", Some(f)))
        .collect();
    msgs.push(reference("bound p log2 p (log2 p per process)", "log2_p"));
    let seeds = doc
        .get("seeds_with_failures")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let fig = Figure {
        title: title.map_or_else(
            || "Creating a group that survives failures (issue 32), simulated".to_string(),
            str::to_string,
        ),
        note: Some(format!(
            "same group passed by all; victims die at random in the tree, in the agreement or on their first proposal; with failures, steps: the worst of {seeds} seeds, messages: their mean"
        )),
        panels: vec![
            Panel {
                title: "Steps to the last survivor's decision".into(),
                x_desc: "processes p".into(),
                y_desc: "steps (message hops, critical path)".into(),
                x_axis: Axis::Count,
                y_axis: Axis::Value,
                series: steps,
            },
            Panel {
                title: "Messages per process".into(),
                x_desc: "processes p".into(),
                y_desc: "messages / p".into(),
                x_axis: Axis::Count,
                y_axis: Axis::Value,
                series: msgs,
            },
        ],
    };
    check_drawable(fig)
}

fn check_drawable(fig: Figure) -> Result<Figure, PlotError> {
    if fig
        .panels
        .iter()
        .any(|p| p.series.iter().any(|s| s.points.iter().any(drawable)))
    {
        Ok(fig)
    } else {
        Err(PlotError::NoData(format!(
            "{}: no positive values",
            fig.title
        )))
    }
}

/// The figure a saved document makes, told by its shape (an anchors document whose systems
/// were all one-sided: its one-sided figures).
pub fn figure_of(doc: &Value, title: Option<&str>) -> Result<Figure, PlotError> {
    let no_p2p = doc
        .pointer("/config/systems")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty);
    if doc.get("kind").and_then(Value::as_str) == Some("group-create-sim") {
        group_create_figure(doc, title)
    } else if doc.get("osc").is_some() && no_p2p {
        osc_figure(doc, title)
    } else if doc.get("summary").is_some() && doc.get("config").is_some() {
        anchors_figure(doc, title)
    } else if doc.get("results").is_some() {
        bench_figure(doc, title)
    } else {
        Err(PlotError::Input(
            "neither scripts/anchors --save (\"summary\", \"config\"), openib bench --json (\"results\") nor openib sim group-create --json (\"kind\": \"group-create-sim\")"
                .into(),
        ))
    }
}

#[derive(clap::Args, Debug)]
pub struct PlotArgs {
    /// Write the SVG here.
    #[arg(long, value_name = "FILE")]
    pub svg: PathBuf,
    /// The figure's title (default: one naming what was measured).
    #[arg(long)]
    pub title: Option<String>,
    /// Draw the one-sided figures of a `scripts/anchors --osc --save` document.
    #[arg(long, conflicts_with = "group_create")]
    pub osc: bool,
    /// Draw the group-creation measurement of an `openib sim group-create --json` document
    /// (steps and messages per process against p; also told by its `"kind"`).
    #[arg(long)]
    pub group_create: bool,
    /// The JSON document: `openib bench --json`, `scripts/anchors --save FILE` or `openib sim
    /// group-create --json`; - for stdin.
    #[arg(value_name = "INPUT|-", default_value = "-")]
    pub input: String,
}

/// `openib plot`: draws a saved document; exit 0, 1 (unreadable or unplottable input, a
/// file that cannot be written).
pub fn run(a: &PlotArgs) -> i32 {
    let r = (|| -> Result<(), PlotError> {
        let text = if a.input == "-" {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map_err(|source| {
                PlotError::Io {
                    path: "-".into(),
                    source,
                }
            })?;
            s
        } else {
            std::fs::read_to_string(&a.input).map_err(|source| PlotError::Io {
                path: a.input.clone().into(),
                source,
            })?
        };
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| PlotError::Input(format!("{}: {e}", a.input)))?;
        let fig = if a.osc {
            osc_figure(&doc, a.title.as_deref())?
        } else if a.group_create {
            group_create_figure(&doc, a.title.as_deref())?
        } else {
            figure_of(&doc, a.title.as_deref())?
        };
        write_svg(&fig, &a.svg)
    })();
    match r {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("openib plot: {e}");
            exit::ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_read_as_units() {
        assert_eq!(tick_label(Axis::Bytes, 8.0), "8 B");
        assert_eq!(tick_label(Axis::Bytes, 4096.0), "4 KiB");
        assert_eq!(tick_label(Axis::Bytes, 1048576.0), "1 MiB");
        assert_eq!(tick_label(Axis::Count, 65536.0), "64K");
        assert_eq!(tick_label(Axis::Count, 2.0), "2");
        assert_eq!(tick_label(Axis::Value, 0.5), "0.5");
        assert_eq!(tick_label(Axis::Value, 2000.0), "2000");
    }

    #[test]
    fn log_axes_cover_the_data_with_few_ticks() {
        let (lo, hi, t) = log_axis(Axis::Bytes, 8.0, 1048576.0);
        assert!(lo <= 8.0 && hi >= 1048576.0, "{lo} {hi}");
        assert!(t.len() <= 10 && t.len() >= 4, "{t:?}");
        let (lo, hi, t) = log_axis(Axis::Value, 3.0, 40.0);
        assert!(lo <= 3.0 && hi >= 40.0);
        assert!(t.contains(&10.0) && t.contains(&20.0), "{t:?}");
        // One value: still a range.
        let (lo, hi, _) = log_axis(Axis::Value, 5.0, 5.0);
        assert!(lo < 5.0 && hi > 5.0);
    }

    #[test]
    fn label_axes_name_their_categories_at_powers_of_two() {
        const L: [&str; 3] = ["put", "get", "fop"];
        assert_eq!(tick_label(Axis::Labels(&L), 1.0), "put");
        assert_eq!(tick_label(Axis::Labels(&L), 4.0), "fop");
        assert_eq!(tick_label(Axis::Labels(&L), 3.0), "");
        assert_eq!(tick_label(Axis::Labels(&L), 8.0), "");
        let (_, _, t) = log_axis(Axis::Labels(&L), 0.5, 5.0);
        assert_eq!(t, vec![1.0, 2.0, 4.0]);
    }

    #[test]
    fn nothing_to_draw_is_an_error() {
        let fig = Figure {
            title: "t".into(),
            note: None,
            panels: vec![Panel {
                title: "p".into(),
                x_desc: "x".into(),
                y_desc: "y".into(),
                x_axis: Axis::Bytes,
                y_axis: Axis::Value,
                series: vec![Series {
                    name: "s".into(),
                    points: vec![(0.0, 1.0), (f64::NAN, 2.0)],
                }],
            }],
        };
        assert!(matches!(render_svg(&fig), Err(PlotError::NoData(_))));
    }
}
