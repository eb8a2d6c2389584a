//! The overhead plot: traced / untraced wall time against dispatches per
//! run (log x), median with min-max bars, drawn by plotters' SVG backend.

use plotters::prelude::*;

use crate::sections::Point;
use crate::Error;

const TITLE: &str = "rprof overhead on a HIP graph storm (emulated GPU)";
const RED: RGBColor = RGBColor(0xcc, 0x33, 0x33);

/// The SVG plot of `points`; an error if there are none (the storm section
/// did not run) or a figure is not finite.
pub fn plot(points: &[Point]) -> Result<String, Error> {
    if points.is_empty() {
        return Err(Error::Failed(
            "no graph-storm figures to plot: run the storm section (--only storm, or --launches)"
                .into(),
        ));
    }
    if let Some(p) = points.iter().find(|p| {
        ![p.dispatches, p.ratio, p.lo, p.hi]
            .iter()
            .all(|v| v.is_finite())
    }) {
        return Err(Error::Failed(format!(
            "cannot plot a figure that is not finite: {p:?}"
        )));
    }
    let mut svg = String::new();
    draw(points, &mut svg).map_err(|e| Error::Failed(format!("plot: {e}")))?;
    Ok(svg)
}

fn draw(points: &[Point], svg: &mut String) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(svg, (640, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    // A tenth of a decade of room on each side, as the points sit on ticks.
    let (x0, x1) = points.iter().fold((f64::INFINITY, 0f64), |(a, b), p| {
        (a.min(p.dispatches), b.max(p.dispatches))
    });
    let (x0, x1) = (x0 / 1.26, x1 * 1.26);
    let ymax = points.iter().map(|p| p.hi).fold(1.2f64, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(TITLE, ("sans-serif", 14))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x0..x1).log_scale(), 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc("dispatches per run (log scale)")
        .y_desc("traced / untraced wall time (median, min-max bars)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.1}x"))
        .light_line_style(WHITE)
        .draw()?;
    // Untraced speed.
    chart.draw_series(DashedLineSeries::new(
        [(x0, 1.0), (x1, 1.0)],
        4,
        3,
        BLACK.mix(0.5).stroke_width(1),
    ))?;
    chart.draw_series(
        points
            .iter()
            .map(|p| PathElement::new([(p.dispatches, p.lo), (p.dispatches, p.hi)], RED)),
    )?;
    chart.draw_series(LineSeries::new(
        points.iter().map(|p| (p.dispatches, p.ratio)),
        RED.stroke_width(2),
    ))?;
    chart.draw_series(
        points
            .iter()
            .map(|p| Circle::new((p.dispatches, p.ratio), 4, RED.filled())),
    )?;
    // Each point's dispatch count under its bar, as the axis ticks are
    // powers of ten.
    chart.draw_series(points.iter().map(|p| {
        EmptyElement::at((p.dispatches, p.lo))
            + Text::new(
                format!("{:.0}", p.dispatches),
                (-12, 8),
                ("sans-serif", 11).into_font(),
            )
    }))?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_points_and_refuses_missing_figures() {
        let points = [
            Point {
                dispatches: 2560.0,
                ratio: 1.5,
                lo: 1.4,
                hi: 1.7,
            },
            Point {
                dispatches: 12800.0,
                ratio: 1.2,
                lo: 1.1,
                hi: 1.3,
            },
        ];
        let svg = plot(&points).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains(TITLE));
        assert!(svg.contains("dispatches per run (log scale)"));
        // Two points: two filled circles (r = 4), each labelled.
        assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
        assert!(
            svg.contains(">\n2560\n</text>") || svg.contains(">2560</text>"),
            "{svg}"
        );
        assert!(svg.contains("12800"), "{svg}");
        let e = plot(&[]).unwrap_err().to_string();
        assert!(e.starts_with("no graph-storm figures to plot"), "{e}");
        let nan = Point {
            ratio: f64::NAN,
            ..points[0]
        };
        let e = plot(&[nan]).unwrap_err().to_string();
        assert!(
            e.starts_with("cannot plot a figure that is not finite"),
            "{e}"
        );
    }
}
