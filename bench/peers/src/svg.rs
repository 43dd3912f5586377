//! A log-log line chart as hand-written SVG text: panels side by side sharing one x axis
//! (objects), one line per client, a legend. Written by hand so that the benchmark draws its
//! own figure without a plotting dependency; the figure only has to be read, not styled.

use std::fmt::Write;

/// One line of a panel: `(x, y)` points, drawn in `color`, dashed or not; `end_slope`, when
/// given, is written beside the last point as `n^slope` (the growth rate where it matters most).
pub struct Series {
    pub label: String,
    pub color: &'static str,
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
    pub end_slope: Option<f64>,
}

/// One chart: a title, the y axis's unit, its lines.
pub struct Panel {
    pub title: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

/// A log-scaled axis from `lo` to `hi` (both powers of ten) over `len` pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogAxis {
    pub lo: f64,
    pub hi: f64,
    pub len: f64,
}

impl LogAxis {
    /// The decades that enclose every value in `values` (positive ones; others cannot be drawn
    /// on a log axis and are left out). At least one decade.
    pub fn enclosing(values: impl IntoIterator<Item = f64>, len: f64) -> LogAxis {
        let (mut min, mut max) = (f64::INFINITY, 0.0f64);
        for v in values.into_iter().filter(|v| *v > 0.0 && v.is_finite()) {
            min = min.min(v);
            max = max.max(v);
        }
        if !min.is_finite() {
            return LogAxis {
                lo: 1.0,
                hi: 10.0,
                len,
            };
        }
        let lo = 10f64.powf(min.log10().floor());
        let mut hi = 10f64.powf(max.log10().ceil());
        if hi <= lo {
            hi = lo * 10.0;
        }
        LogAxis { lo, hi, len }
    }

    /// Pixels from the axis's low end.
    pub fn pos(&self, v: f64) -> f64 {
        (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10()) * self.len
    }

    /// Tick values: every decade, and 2× and 5× in between when the axis spans two decades or
    /// fewer (otherwise a panel of small growth would show one or two ticks).
    pub fn ticks(&self) -> Vec<f64> {
        let decades = (self.hi / self.lo).log10().round() as i32;
        let steps: &[f64] = if decades <= 2 {
            &[1.0, 2.0, 5.0]
        } else {
            &[1.0]
        };
        let mut out = Vec::new();
        for d in 0..=decades {
            let base = self.lo * 10f64.powi(d);
            for &s in steps {
                let v = base * s;
                if v <= self.hi * (1.0 + 1e-9) {
                    out.push(v);
                }
            }
        }
        out
    }
}

/// A tick's label: `1k`, `10k`, `1M` for counts; plain decimals otherwise.
pub fn tick_label(v: f64, counts: bool) -> String {
    if counts && v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if counts && v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

/// Shortest plain form of a tick value (ticks are 1, 2 or 5 times a power of ten).
fn trim(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

const PANEL_W: f64 = 300.0;
const PANEL_H: f64 = 240.0;
const MARGIN_L: f64 = 62.0;
const MARGIN_T: f64 = 56.0;
const GAP: f64 = 88.0;
const LEGEND_H: f64 = 24.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The whole figure: `title` above, the panels left to right, `x_label` under each x axis, the
/// legend (every distinct label of the panels' series; series may share one) and a `note` at
/// the bottom (one line of text per line of `note`).
pub fn render(title: &str, x_label: &str, panels: &[Panel], note: &str) -> String {
    let xs = panels
        .iter()
        .flat_map(|p| p.series.iter())
        .flat_map(|s| s.points.iter().map(|p| p.0));
    let x_axis = LogAxis::enclosing(xs, PANEL_W);
    let legend = legend_entries(panels);
    let width = MARGIN_L + panels.len() as f64 * (PANEL_W + GAP);
    let legend_top = MARGIN_T + PANEL_H + 50.0;
    let note_lines: Vec<&str> = note.lines().collect();
    let notes_top = legend_top + LEGEND_H * legend.len().div_ceil(2) as f64 + 12.0;
    let height = notes_top + 16.0 * note_lines.len() as f64 + 8.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        o,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{MARGIN_L}" y="24" font-size="16" font-weight="bold">{}</text>"#,
        esc(title)
    );
    for (i, panel) in panels.iter().enumerate() {
        let left = MARGIN_L + i as f64 * (PANEL_W + GAP);
        write_panel(&mut o, panel, left, x_axis, x_label);
    }
    write_legend(&mut o, &legend, legend_top);
    for (i, line) in note_lines.iter().enumerate() {
        let _ = writeln!(
            o,
            r##"<text x="{MARGIN_L}" y="{:.1}" fill="#555">{}</text>"##,
            notes_top + 16.0 * i as f64 + 4.0,
            esc(line)
        );
    }
    o.push_str("</svg>\n");
    o
}

/// The legend's entries, `(label, colour, dashed)`: one per label; a dashed series is a second
/// figure of the same clients (their colours), so its entry is grey.
fn legend_entries(panels: &[Panel]) -> Vec<(&str, &str, bool)> {
    let mut legend: Vec<(&str, &str, bool)> = Vec::new();
    for s in panels.iter().flat_map(|p| p.series.iter()) {
        if !legend.iter().any(|(l, _, _)| *l == s.label) {
            let color = if s.dashed { "#555" } else { s.color };
            legend.push((&s.label, color, s.dashed));
        }
    }
    legend
}

/// The stroke attribute of a dashed line (empty for a solid one): lines and legend entries must
/// look alike.
fn dash_attr(dashed: bool) -> &'static str {
    if dashed {
        r#" stroke-dasharray="6 4""#
    } else {
        ""
    }
}

/// One panel at `left`: its title, frame, grid with tick labels, axis labels and lines. Each
/// panel gets a y axis of its own (their units differ); the x axis is shared.
fn write_panel(o: &mut String, panel: &Panel, left: f64, x_axis: LogAxis, x_label: &str) {
    let bottom = MARGIN_T + PANEL_H;
    let ys = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1));
    let y_axis = LogAxis::enclosing(ys, PANEL_H);
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="13" font-weight="bold">{}</text>"#,
        left + PANEL_W / 2.0,
        MARGIN_T - 12.0,
        esc(&panel.title)
    );
    let _ = writeln!(
        o,
        r##"<rect x="{left:.1}" y="{MARGIN_T:.1}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#444"/>"##
    );
    for t in x_axis.ticks() {
        let x = left + x_axis.pos(t);
        let _ = writeln!(
            o,
            r##"<line x1="{x:.1}" y1="{MARGIN_T:.1}" x2="{x:.1}" y2="{bottom:.1}" stroke="#ddd"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            bottom + 16.0,
            tick_label(t, true)
        );
    }
    for t in y_axis.ticks() {
        let y = bottom - y_axis.pos(t);
        let _ = writeln!(
            o,
            r##"<line x1="{left:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + PANEL_W,
            left - 6.0,
            y + 4.0,
            tick_label(t, false)
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        left + PANEL_W / 2.0,
        bottom + 34.0,
        esc(x_label)
    );
    let (yx, yy) = (left - 46.0, MARGIN_T + PANEL_H / 2.0);
    let _ = writeln!(
        o,
        r#"<text x="{yx:.1}" y="{yy:.1}" text-anchor="middle" transform="rotate(-90 {yx:.1} {yy:.1})">{}</text>"#,
        esc(&panel.y_label)
    );
    for s in &panel.series {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .map(|&(x, y)| (left + x_axis.pos(x), bottom - y_axis.pos(y)))
            .collect();
        write_series(o, s, &pts);
    }
}

/// One series as a polyline through its points (already in pixels), a dot on each and its
/// end slope beside the last: the dots show where the measurements are.
fn write_series(o: &mut String, s: &Series, pts: &[(f64, f64)]) {
    let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let dash = dash_attr(s.dashed);
    let _ = writeln!(
        o,
        r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
        path.join(" "),
        s.color
    );
    for &(x, y) in pts {
        let _ = writeln!(
            o,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{}"/>"#,
            s.color
        );
    }
    if let (Some(k), Some(&(x, y))) = (s.end_slope, pts.last()) {
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" fill="{}">n<tspan dy="-5" font-size="9">{k:.2}</tspan></text>"#,
            x + 7.0,
            y + 4.0,
            s.color
        );
    }
}

/// The legend in two columns from `top`: a short line in each entry's colour and dash, then
/// its label.
fn write_legend(o: &mut String, legend: &[(&str, &str, bool)], top: f64) {
    for (i, (label, color, dashed)) in legend.iter().enumerate() {
        let x = MARGIN_L + (i % 2) as f64 * 420.0;
        let y = top + (i / 2) as f64 * LEGEND_H;
        let dash = dash_attr(*dashed);
        let _ = writeln!(
            o,
            r#"<line x1="{x:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{color}" stroke-width="2"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
            x + 30.0,
            x + 38.0,
            y + 4.0,
            esc(label)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_encloses_the_values_in_whole_decades() {
        let a = LogAxis::enclosing([0.03, 4.0, -1.0, 0.0], 300.0);
        assert_eq!((a.lo, a.hi), (0.01, 10.0));
        assert!((a.pos(0.01) - 0.0).abs() < 1e-9);
        assert!((a.pos(10.0) - 300.0).abs() < 1e-9);
        assert!((a.pos(0.1) - 100.0).abs() < 1e-9, "one decade of three");
        assert_eq!(a.ticks(), [0.01, 0.1, 1.0, 10.0]);
        // A value on a decade gets an axis one decade wide, not zero.
        let b = LogAxis::enclosing([100.0], 10.0);
        assert_eq!((b.lo, b.hi), (100.0, 1000.0));
        assert_eq!(LogAxis::enclosing([], 1.0).hi, 10.0);
    }

    #[test]
    fn narrow_axes_get_2_and_5_ticks() {
        let a = LogAxis::enclosing([15.0, 80.0], 100.0);
        let t: Vec<String> = a.ticks().iter().map(|&v| tick_label(v, false)).collect();
        assert_eq!(t, ["10", "20", "50", "100"]);
        let t: Vec<String> = LogAxis::enclosing([1e3, 1e6], 1.0)
            .ticks()
            .iter()
            .map(|&v| tick_label(v, true))
            .collect();
        assert_eq!(t, ["1k", "10k", "100k", "1M"]);
        assert_eq!(tick_label(0.05, false), "0.05");
    }

    #[test]
    fn the_figure_has_a_line_per_series_and_a_legend() {
        let panel = |t: &str| Panel {
            title: t.into(),
            y_label: "s".into(),
            series: vec![
                Series {
                    label: "a <b>".into(),
                    color: "red",
                    dashed: false,
                    points: vec![(1e3, 0.1), (1e4, 1.0)],
                    end_slope: Some(1.0),
                },
                Series {
                    label: "c".into(),
                    color: "blue",
                    dashed: true,
                    points: vec![(1e3, 0.2), (1e4, 3.0)],
                    end_slope: None,
                },
            ],
        };
        let svg = render(
            "T",
            "objects",
            &[panel("p1"), panel("p2")],
            "note 1\nnote 2",
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains(">note 1</text>") && svg.contains(">note 2</text>"));
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert_eq!(
            svg.matches(r#"font-size="9">1.00<"#).count(),
            2,
            "a slope per panel"
        );
        assert_eq!(svg.matches("a &lt;b&gt;").count(), 1, "one legend entry");
        assert!(svg.contains(r##"stroke="#555" stroke-width="2" stroke-dasharray"##));
        assert_eq!(svg.matches("stroke-dasharray").count(), 3);
    }
}
