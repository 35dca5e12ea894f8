//! The report's charts: the grid's cost per run and the fairness percentiles, as SVG.

use std::path::Path;

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::{PERCENTILES, cell};
use crate::Results;
use crate::peers::NAMES;
use crate::suites::percentile;

pub(super) fn grid_chart(r: &Results, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1200, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 3));
    let max = r.grid.iter().filter_map(|g| g.3).fold(1.0, f64::max) * 1.5;
    let min = r
        .grid
        .iter()
        .filter_map(|g| g.3)
        .fold(f64::MAX, f64::min)
        .max(0.1)
        / 1.5;
    for (panel, size) in panels.iter().zip([4, 8, 16]) {
        let mut chart = ChartBuilder::on(panel)
            .caption(format!("pool of {size}: µs per run"), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..3f64, (min..max).log_scale())?;
        chart
            .configure_mesh()
            .x_labels(4)
            .x_label_formatter(&|x| {
                format!("{} tasks", [4, 16, 64, 256][(x.round() as usize).min(3)])
            })
            .draw()?;
        let series = NAMES.iter().enumerate().map(|(i, name)| {
            let points = [4, 16, 64, 256]
                .iter()
                .enumerate()
                .filter_map(|(x, t)| cell(r, name, size, *t).map(|v| (x as f64, v)))
                .collect();
            (i, *name, points)
        });
        draw_lines(&mut chart, series)?;
    }
    root.present()?;
    Ok(())
}

pub(super) fn fairness_chart(r: &Results, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let all: Vec<f64> = r
        .fairness
        .iter()
        .filter_map(|f| f.1.as_ref())
        .flat_map(|l| PERCENTILES.iter().map(|(_, p)| percentile(l, *p) / 1e3))
        .collect();
    let max = all.iter().copied().fold(1.0, f64::max) * 1.5;
    let min = all.iter().copied().fold(f64::MAX, f64::min).max(0.01) / 1.5;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "take latency, pool of 8, 256 tasks (µs)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..4f64, (min..max).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(5)
        .x_label_formatter(&|x| PERCENTILES[(x.round() as usize).min(4)].0.to_owned())
        .draw()?;
    let series = r
        .fairness
        .iter()
        .enumerate()
        .filter_map(|(i, (name, lat))| {
            let lat = lat.as_ref()?;
            let points = PERCENTILES
                .iter()
                .enumerate()
                .map(|(x, (_, p))| (x as f64, percentile(lat, *p) / 1e3))
                .collect();
            Some((i, *name, points))
        });
    draw_lines(&mut chart, series)?;
    root.present()?;
    Ok(())
}

type LogChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, LogCoord<f64>>>;

/// One line per contender (its palette colour fixed by its index), and the legend.
fn draw_lines<'b>(
    chart: &mut LogChart<'b, 'b>,
    series: impl Iterator<Item = (usize, &'static str, Vec<(f64, f64)>)>,
) -> Result<(), Box<dyn std::error::Error>> {
    for (i, name, points) in series {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
