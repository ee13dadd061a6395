// SPDX-License-Identifier: GPL-2.0

//! The plot: latency against the number of cached regions, both axes logarithmic.

use crate::report::{Latency, Point, Report};
use plotters::prelude::*;
use std::path::Path;

/// Draws `report`'s scaling measurements as an SVG file.
pub fn svg(report: &Report, path: &Path) -> Result<(), String> {
    let points = &report.scaling;
    if points.is_empty() {
        return Err("no scaling measurements to plot".into());
    }
    let err = |e: DrawingAreaErrorKind<_>| format!("{}: {e}", path.display());
    let us = |ns: u64| (ns as f64 / 1000.0).max(0.1);
    type Series = (&'static str, fn(&Point) -> Latency, RGBColor);
    let series: [Series; 3] = [
        ("pin, cache hit", |p| p.hit, BLUE),
        (
            "cuMemFree of a pinned buffer (invalidation)",
            |p| p.invalidate,
            RED,
        ),
        (
            "cuMemFree of an unpinned buffer",
            |p| p.free_unpinned,
            BLACK,
        ),
    ];
    let (lo, hi) = points.iter().fold((f64::MAX, 0f64), |(lo, hi), p| {
        series.iter().fold((lo, hi), |(lo, hi), (_, get, _)| {
            let l = get(p);
            (lo.min(us(l.median_ns)), hi.max(us(l.p99_ns)))
        })
    });
    let x_hi = points.last().map_or(16, |p| p.regions).max(32) as f64;
    let x_lo = points.first().map_or(16, |p| p.regions) as f64;

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "gdrpeer: latency vs cached regions (Linux {}, {}; nvsim, QEMU TCG)",
                report.kernel, report.checkers
            ),
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (x_lo / 1.5..x_hi * 1.5).log_scale(),
            // Headroom above the lines for the legend.
            (lo / 2.0..hi * 8.0).log_scale(),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("regions cached in the context")
        .y_desc("microseconds (line: median, dashed: p99)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(err)?;
    for (name, get, color) in series {
        let median: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (p.regions as f64, us(get(p).median_ns)))
            .collect();
        let p99: Vec<(f64, f64)> = points
            .iter()
            .map(|p| (p.regions as f64, us(get(p).p99_ns)))
            .collect();
        chart
            .draw_series(LineSeries::new(median.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(median.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
        chart
            .draw_series(DashedLineSeries::new(p99, 4, 4, color.stroke_width(1)))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}
