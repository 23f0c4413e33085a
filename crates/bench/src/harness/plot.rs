//! The budget curve as a PNG: decode tok/s of epm and kernel paging (and the unpaged
//! reference) against the budget, with epm's decode cache hit rate on a second axis.

use std::path::Path;

use plotters::prelude::*;

use super::{AbReport, RunConfig};
use crate::plot::register_font;

fn median_of(report: &AbReport, budget: u64, config: RunConfig) -> Option<f64> {
    report
        .summary
        .iter()
        .find(|s| s.budget_mb == budget)?
        .decode_tok_s
        .iter()
        .find(|(c, _)| *c == config)?
        .1
        .as_ref()
        .map(|s| s.median)
}

pub fn write_png(report: &AbReport, path: &Path) -> Result<(), String> {
    register_font()?;
    let budgets: Vec<u64> = report.summary.iter().map(|s| s.budget_mb).collect();
    let (lo, hi) = (
        *budgets.iter().min().ok_or("no budgets")?,
        *budgets.iter().max().ok_or("no budgets")?,
    );
    let pad = ((hi - lo) / 10).max(16);
    let x_range = lo.saturating_sub(pad) as f64..(hi + pad) as f64;
    let y_max = RunConfig::ALL
        .iter()
        .flat_map(|&c| budgets.iter().filter_map(move |&b| median_of(report, b, c)))
        .fold(1.0f64, f64::max)
        * 1.15;
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let root = BitMapBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "EPM budget curve: {}",
                Path::new(&report.model)
                    .file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
            ),
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .right_y_label_area_size(64)
        .build_cartesian_2d(x_range.clone(), 0.0..y_max)
        .map_err(e)?
        .set_secondary_coord(x_range, 0.0..1.0);
    chart
        .configure_mesh()
        .x_desc("RAM budget (MiB)")
        .y_desc("decode tok/s (median)")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    chart
        .configure_secondary_axes()
        .y_desc("epm decode cache hit rate")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(e)?;
    let series: [(RunConfig, RGBAColor, &str); 3] = [
        (RunConfig::Epm, BLUE.to_rgba(), "epm"),
        (
            RunConfig::Kernel,
            RED.to_rgba(),
            "kernel paging (upstream mmap, same cap)",
        ),
        (
            RunConfig::Reference,
            BLACK.mix(0.5),
            "reference (unpaged, no cap)",
        ),
    ];
    for (config, color, label) in series {
        let pts: Vec<(f64, f64)> = budgets
            .iter()
            .filter_map(|&b| median_of(report, b, config).map(|v| (b as f64, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(e)?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))
            .map_err(e)?;
    }
    let hits: Vec<(f64, f64)> = report
        .summary
        .iter()
        .filter_map(|s| {
            s.epm_decode_cache_hit_rate
                .as_ref()
                .map(|h| (s.budget_mb as f64, h.median))
        })
        .collect();
    let green: RGBAColor = GREEN.mix(0.9);
    chart
        .draw_secondary_series(LineSeries::new(
            hits.clone(),
            ShapeStyle::from(green).stroke_width(2),
        ))
        .map_err(e)?
        .label("epm decode cache hit rate (right axis)")
        .legend(move |(x, y)| {
            PathElement::new(
                vec![(x, y), (x + 20, y)],
                ShapeStyle::from(green).stroke_width(2),
            )
        });
    chart
        .draw_secondary_series(
            hits.into_iter()
                .map(|p| TriangleMarker::new(p, 6, green.filled())),
        )
        .map_err(e)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}
