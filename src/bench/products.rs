//! `shardwork bench products`: the frozen products on gemm beside the f32 panels, the report
//! that decides a CPU kind's plan (decision 0050) and shows what packing once saves.

use std::fmt;

use serde::Serialize;
use shardwork_trainer::bench::ProductFigures;

/// Every shape measured, on which vector unit the panels ran and with how many threads.
#[derive(Debug, Serialize)]
pub struct ProductsReport {
    /// The panels' vector unit (`AVX-512`, `AVX2`).
    pub panels_isa: &'static str,
    pub threads: usize,
    pub shapes: Vec<ProductFigures>,
}

impl ProductsReport {
    pub fn new(shapes: Vec<ProductFigures>) -> ProductsReport {
        ProductsReport {
            panels_isa: shardwork_trainer::panels::isa().map_or("none", |isa| isa.name()),
            threads: candle_core::utils::get_num_threads(),
            shapes,
        }
    }
}

impl fmt::Display for ProductsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "Frozen products, GFLOP/s: gemm against f32 panels ({}), {} threads, best of each",
            self.panels_isa, self.threads
        )?;
        writeln!(
            f,
            "| projection | rows × in → out | x·Wᵀ gemm | x·Wᵀ panels | ratio | g·W gemm | g·W panels | ratio | max rel. diff |"
        )?;
        writeln!(f, "|---|---|---|---|---|---|---|---|---|")?;
        for s in &self.shapes {
            writeln!(
                f,
                "| {} | {} × {} → {} | {:.1} | {:.1} | {:.2}× | {:.1} | {:.1} | {:.2}× | {:.1e} |",
                s.name,
                s.rows,
                s.input,
                s.out,
                s.forward_gemm,
                s.forward_panels,
                s.forward_panels / s.forward_gemm,
                s.input_grad_gemm,
                s.input_grad_panels,
                s.input_grad_panels / s.input_grad_gemm,
                s.max_relative_difference,
            )?;
        }
        Ok(())
    }
}
