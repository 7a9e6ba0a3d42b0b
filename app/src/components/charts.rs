//! Server-rendered SVG charts: a time-series line chart and a bar chart,
//! with axes, grid lines and a `<title>` on every point and bar (the
//! browser shows it on hover). No chart library, no script needed.

use chrono::{DateTime, Utc};
use leptos::prelude::*;

const W: f64 = 640.0;
const H: f64 = 220.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// One line of a [`LineChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub label: String,
    /// 0..5, picks the colour (`--series-N`).
    pub colour: usize,
    pub points: Vec<(DateTime<Utc>, f64)>,
}

/// The smallest "nice" number (1, 2, 2.5, 5 × 10ⁿ) at or above `v`.
pub fn nice_ceiling(v: f64) -> f64 {
    if v <= 1.0 {
        return 1.0;
    }
    let exp = v.log10().floor();
    let base = 10f64.powf(exp);
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * base >= v - 1e-9 {
            return m * base;
        }
    }
    10.0 * base
}

fn tick_label(v: f64, unit: &str) -> String {
    let n = format!("{v:.2}");
    let n = n.trim_end_matches('0').trim_end_matches('.');
    if unit.is_empty() {
        n.to_string()
    } else {
        format!("{n}{unit}")
    }
}

/// A time-series chart over `[from, to]`.
#[component]
pub fn LineChart(
    /// Heading and accessible name.
    title: String,
    /// Appended to values (`" s"`, `"/min"`).
    #[prop(default = "")]
    unit: &'static str,
    lines: Vec<Line>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> impl IntoView {
    let t0 = from.timestamp() as f64;
    let t1 = (to.timestamp() as f64).max(t0 + 1.0);
    let max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let ymax = nice_ceiling(max);
    let x =
        move |t: DateTime<Utc>| LEFT + (t.timestamp() as f64 - t0) / (t1 - t0) * (W - LEFT - RIGHT);
    let y = move |v: f64| TOP + (1.0 - v / ymax) * (H - TOP - BOTTOM);
    let empty = lines.iter().all(|l| l.points.is_empty());
    let summary = if empty {
        "no samples yet".to_string()
    } else {
        lines
            .iter()
            .filter_map(|l| {
                l.points
                    .last()
                    .map(|p| format!("{} {}", l.label, tick_label(p.1, unit)))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let id = format!(
        "chart-{}",
        title
            .to_lowercase()
            .replace(|c: char| !c.is_alphanumeric(), "-")
    );
    let y_ticks: Vec<f64> = (0..=4).map(|i| ymax * f64::from(i) / 4.0).collect();
    let x_ticks: Vec<DateTime<Utc>> = (0..=4)
        .map(|i| {
            let t = t0 + (t1 - t0) * f64::from(i) / 4.0;
            DateTime::from_timestamp(t as i64, 0).unwrap_or(from)
        })
        .collect();
    let long = t1 - t0 > 2.0 * 86_400.0;
    let legend = lines
        .iter()
        .filter(|l| !l.label.is_empty())
        .map(|l| {
            view! {
                <li>
                    <span class=format!("swatch s{}", l.colour) aria-hidden="true"></span>
                    {l.label.clone()}
                </li>
            }
        })
        .collect_view();
    view! {
        <figure class="chart card">
            <figcaption id=id.clone()>{title.clone()}</figcaption>
            <svg
                viewBox=format!("0 0 {W} {H}")
                role="img"
                aria-labelledby=id.clone()
                aria-describedby=format!("{id}-desc")
                preserveAspectRatio="none"
            >
                <desc id=format!("{id}-desc")>{format!("{title}: latest {summary}")}</desc>
                <g class="grid">
                    {y_ticks
                        .iter()
                        .map(|v| {
                            let yy = y(*v);
                            view! {
                                <line x1=LEFT x2=W - RIGHT y1=yy y2=yy></line>
                                <text x=LEFT - 6.0 y=yy + 4.0 text-anchor="end">
                                    {tick_label(*v, unit)}
                                </text>
                            }
                        })
                        .collect_view()}
                </g>
                <g class="axis">
                    <line x1=LEFT x2=W - RIGHT y1=H - BOTTOM y2=H - BOTTOM></line>
                    <line x1=LEFT x2=LEFT y1=TOP y2=H - BOTTOM></line>
                    {x_ticks
                        .iter()
                        .map(|t| {
                            let xx = x(*t);
                            let label = if long {
                                t.format("%d %b").to_string()
                            } else {
                                t.format("%H:%M").to_string()
                            };
                            view! {
                                <line x1=xx x2=xx y1=H - BOTTOM y2=H - BOTTOM + 4.0></line>
                                <text x=xx y=H - 8.0 text-anchor="middle">{label}</text>
                            }
                        })
                        .collect_view()}
                </g>
                {lines
                    .iter()
                    .map(|l| {
                        let d = l
                            .points
                            .iter()
                            .enumerate()
                            .map(|(i, (t, v))| {
                                format!(
                                    "{}{:.1},{:.1}",
                                    if i == 0 { "M" } else { "L" },
                                    x(*t),
                                    y(*v),
                                )
                            })
                            .collect::<Vec<_>>()
                            .join(" ");
                        let label = l.label.clone();
                        view! {
                            <g class=format!("series s{}", l.colour)>
                                <path d=d fill="none"></path>
                                {l
                                    .points
                                    .iter()
                                    .map(|(t, v)| {
                                        let tip = if label.is_empty() {
                                            format!("{} · {}", t.format("%H:%M:%S"), tick_label(*v, unit))
                                        } else {
                                            format!(
                                                "{label} · {} · {}",
                                                t.format("%H:%M:%S"),
                                                tick_label(*v, unit),
                                            )
                                        };
                                        view! {
                                            <circle cx=x(*t) cy=y(*v) r="3">
                                                <title>{tip}</title>
                                            </circle>
                                        }
                                    })
                                    .collect_view()}
                            </g>
                        }
                    })
                    .collect_view()}
                {empty
                    .then(|| {
                        view! {
                            <text class="chart-empty" x=W / 2.0 y=H / 2.0 text-anchor="middle">
                                "No samples yet"
                            </text>
                        }
                    })}
            </svg>
            <ul class="legend">{legend}</ul>
        </figure>
    }
}

/// One bar of a [`BarChart`].
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    /// The value as shown (`12 %`, `3 jobs`).
    pub shown: String,
    /// Paint it as bad news.
    pub alert: bool,
    /// Where a click on the bar leads, if anywhere.
    pub link: Option<BarLink>,
}

/// A bar's link: its address and its accessible name.
#[derive(Debug, Clone, PartialEq)]
pub struct BarLink {
    pub href: String,
    /// What a screen reader says for it (`embed: 12 % failed; open the jobs
    /// that failed at embed`).
    pub label: String,
}

/// A vertical bar chart; `max` fixes the scale (e.g. 1.0 for rates). A
/// bar with a link is clickable over its whole column, so a bar of 0 is
/// too; a chart with links is a group of them rather than one image.
#[component]
pub fn BarChart(
    title: String,
    bars: Vec<Bar>,
    #[prop(optional)] max: Option<f64>,
) -> impl IntoView {
    let ymax =
        max.unwrap_or_else(|| nice_ceiling(bars.iter().map(|b| b.value).fold(0.0, f64::max)));
    let n = bars.len().max(1) as f64;
    let slot = (W - LEFT - RIGHT) / n;
    let bw = (slot * 0.6).min(90.0);
    let y = move |v: f64| TOP + (1.0 - (v / ymax).clamp(0.0, 1.0)) * (H - TOP - BOTTOM);
    let id = format!(
        "chart-{}",
        title
            .to_lowercase()
            .replace(|c: char| !c.is_alphanumeric(), "-")
    );
    let linked = bars.iter().any(|b| b.link.is_some());
    let summary = bars
        .iter()
        .map(|b| format!("{} {}", b.label, b.shown))
        .collect::<Vec<_>>()
        .join(", ");
    view! {
        <figure class="chart card">
            <figcaption id=id.clone()>{title.clone()}</figcaption>
            <svg
                viewBox=format!("0 0 {W} {H}")
                role=if linked { "group" } else { "img" }
                aria-labelledby=id.clone()
                aria-describedby=format!("{id}-desc")
            >
                <desc id=format!("{id}-desc")>{format!("{title}: {summary}")}</desc>
                <g class="axis">
                    <line x1=LEFT x2=W - RIGHT y1=H - BOTTOM y2=H - BOTTOM></line>
                </g>
                {bars
                    .iter()
                    .enumerate()
                    .map(|(i, b)| {
                        let cx = LEFT + slot * (i as f64 + 0.5);
                        let top = y(b.value);
                        let h = (H - BOTTOM - top).max(if b.value > 0.0 { 1.0 } else { 0.0 });
                        let bar = view! {
                            <rect x=cx - bw / 2.0 y=H - BOTTOM - h width=bw height=h rx="3">
                                <title>{format!("{}: {}", b.label, b.shown)}</title>
                            </rect>
                            <text class="bar-value" x=cx y=(H - BOTTOM - h - 6.0).max(TOP + 10.0) text-anchor="middle">
                                {b.shown.clone()}
                            </text>
                            <text class="bar-label" x=cx y=H - 8.0 text-anchor="middle">
                                {b.label.clone()}
                            </text>
                        };
                        let class = if b.alert { "col alert" } else { "col" };
                        match &b.link {
                            Some(link) => view! {
                                <g class=class>
                                    <a href=link.href.clone() aria-label=link.label.clone()>
                                        <rect class="hit" x=cx - slot / 2.0 y=TOP width=slot height=H - TOP></rect>
                                        {bar}
                                    </a>
                                </g>
                            }
                                .into_any(),
                            None => view! { <g class=class>{bar}</g> }.into_any(),
                        }
                    })
                    .collect_view()}
            </svg>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::nice_ceiling;

    /// Rendering to HTML needs the `ssr` feature.
    #[cfg(feature = "ssr")]
    #[test]
    fn a_linked_bar_is_a_link_over_its_column_and_the_chart_a_group() {
        use super::{Bar, BarChart, BarLink};
        use leptos::prelude::*;
        let bar = |label: &str, link: bool| Bar {
            label: label.into(),
            value: 0.0,
            shown: "0 %".into(),
            alert: false,
            link: link.then(|| BarLink {
                href: format!("/jobs?of={label}"),
                label: format!("Open {label}"),
            }),
        };
        let html =
            view! { <BarChart title="Rates".into() bars=vec![bar("a", true), bar("b", false)] /> }
                .to_html();
        assert!(html.contains(r#"role="group""#), "{html}");
        assert!(
            html.contains(r#"<a href="/jobs?of=a" aria-label="Open a">"#),
            "{html}"
        );
        assert!(html.contains(r#"class="hit""#), "{html}");
        assert!(!html.contains("/jobs?of=b"), "{html}");
        let plain =
            view! { <BarChart title="Rates".into() bars=vec![bar("b", false)] /> }.to_html();
        assert!(plain.contains(r#"role="img""#), "{plain}");
        assert!(!plain.contains("<a "), "{plain}");
    }

    #[test]
    fn axes_end_at_nice_numbers() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(19.0), 20.0);
        assert_eq!(nice_ceiling(230.0), 250.0);
    }
}
