//! The report's plots, as SVG: the latency percentile curve and throughput over time.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use hdrhistogram::Histogram;
use plotters::prelude::*;

const SIZE: (u32, u32) = (900, 520);
/// The curve runs up to this percentile (four nines), where it is still drawn from data.
const NINES_MAX: f64 = 4.0;
const COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Points of a latency percentile curve: x = number of nines (-log10(1 - q)), y = ms.
fn curve(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let steps = 200;
    (0..=steps)
        .map(|i| {
            let nines = NINES_MAX * f64::from(i) / f64::from(steps);
            let q = 1.0 - 10f64.powf(-nines);
            (nines, h.value_at_quantile(q) as f64 / 1000.0)
        })
        .collect()
}

fn nines_label(x: &f64) -> String {
    let q = 100.0 * (1.0 - 10f64.powf(-x));
    if q < 99.0 {
        format!("{q:.0}%")
    } else {
        // 99%, 99.9%, 99.99%: as many decimals as there are nines after the second.
        let decimals = (x - 2.0).round().max(0.0) as usize;
        format!("{q:.decimals$}%")
    }
}

/// Turns an axis value into its label.
type LabelFormat = dyn Fn(&f64) -> String;

/// One line of a chart: its legend, its points, its colour and its width.
struct Line<'a> {
    name: &'a str,
    points: Vec<(f64, f64)>,
    colour: RGBColor,
    width: u32,
}

/// What a chart shows besides its lines.
struct Frame<'a> {
    title: &'a str,
    x_max: f64,
    y_max: f64,
    x_desc: &'a str,
    y_desc: &'a str,
    /// How many x labels, and how they read, when not as plain numbers.
    x_labels: Option<(usize, &'a LabelFormat)>,
    legend: SeriesLabelPosition,
}

/// Writes an SVG line chart of `lines` to `path`.
fn line_chart(path: &Path, frame: Frame<'_>, lines: Vec<Line<'_>>) -> Result<()> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(frame.title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..frame.x_max, 0f64..frame.y_max)
        .map_err(|e| anyhow!("{e}"))?;
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(frame.x_desc).y_desc(frame.y_desc);
    if let Some((count, formatter)) = frame.x_labels {
        mesh.x_labels(count).x_label_formatter(formatter);
    }
    mesh.draw().map_err(|e| anyhow!("{e}"))?;
    for line in lines {
        let style = line.colour.stroke_width(line.width);
        chart
            .draw_series(LineSeries::new(line.points, style))
            .map_err(|e| anyhow!("{e}"))?
            .label(line.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(frame.legend)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// `DIR/latency.svg`: one curve per series, latency against percentile.
pub fn latency(dir: &Path, title: &str, series: &[(&str, &Histogram<u64>)]) -> Result<PathBuf> {
    let path = dir.join("latency.svg");
    let lines: Vec<Line<'_>> = series
        .iter()
        .enumerate()
        .map(|(i, (name, h))| Line {
            name,
            points: curve(h),
            colour: COLOURS[i % COLOURS.len()],
            width: 2,
        })
        .collect();
    let y_max = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.05;
    let frame = Frame {
        title,
        x_max: NINES_MAX,
        y_max,
        x_desc: "percentile",
        y_desc: "latency (ms)",
        x_labels: Some((5, &nines_label)),
        legend: SeriesLabelPosition::UpperLeft,
    };
    line_chart(&path, frame, lines)?;
    Ok(path)
}

/// `DIR/throughput.svg`: acked sends per second over the run, and the target rate if any.
pub fn throughput(
    dir: &Path,
    title: &str,
    per_second: &[u64],
    target: Option<f64>,
) -> Result<PathBuf> {
    let path = dir.join("throughput.svg");
    let x_max = per_second.len().max(1) as f64;
    let y_max = per_second
        .iter()
        .map(|&n| n as f64)
        .chain(target)
        .fold(1.0, f64::max)
        * 1.1;
    // Each second's count is drawn at the middle of its second.
    let mut lines = vec![Line {
        name: "acked per second",
        points: per_second
            .iter()
            .enumerate()
            .map(|(s, &n)| (s as f64 + 0.5, n as f64))
            .collect(),
        colour: COLOURS[0],
        width: 2,
    }];
    if let Some(t) = target {
        lines.push(Line {
            name: "target rate",
            points: vec![(0.0, t), (x_max, t)],
            colour: COLOURS[1],
            width: 1,
        });
    }
    let frame = Frame {
        title,
        x_max,
        y_max,
        x_desc: "seconds since the start of the load",
        y_desc: "acked sends per second",
        x_labels: None,
        legend: SeriesLabelPosition::LowerRight,
    };
    line_chart(&path, frame, lines)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_labels_read_as_percentiles() {
        assert_eq!(nines_label(&0.0), "0%");
        assert_eq!(nines_label(&1.0), "90%");
        assert_eq!(nines_label(&2.0), "99%");
        assert_eq!(nines_label(&3.0), "99.9%");
        assert_eq!(nines_label(&4.0), "99.99%");
    }

    #[test]
    fn both_plots_are_written_as_svg() {
        let dir = std::env::temp_dir().join(format!("parley-plots-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for us in 1..=10_000u64 {
            h.record(us * 3).unwrap();
        }
        let p = latency(&dir, "latency", &[("ack", &h), ("push", &h)]).unwrap();
        let t = throughput(&dir, "throughput", &[10, 12, 9], Some(10.0)).unwrap();
        for file in [p, t] {
            let text = std::fs::read_to_string(&file).unwrap();
            assert!(text.starts_with("<svg"), "{}", file.display());
            assert!(text.contains("<polyline") || text.contains("<path"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
