//! `shardwork bench catch-rate`: what skipping work earns a cheat in a bonded job whose proofs
//! are sampled (issue 47, decision 0044), measured rather than computed. Each run is a fresh
//! in-process marketplace running one sample job with one dishonest worker among honest ones;
//! per kind of cheat it counts the jobs in which a replay caught it, its submissions, what it
//! was paid and what its bond lost, against the honest workers' pay in the same jobs.

use std::fmt;

use shardwork_node::adversary::Behaviour;

use crate::config::Config;
use crate::demo::DemoArgs;

pub struct CatchRateConfig {
    pub adversaries: Vec<Behaviour>,
    /// Jobs per kind of cheat.
    pub jobs: usize,
    pub shards: u32,
    pub rounds: u32,
    pub workers: usize,
    pub bond_multiple: u32,
}

/// One kind of cheat over its jobs.
#[derive(Debug, serde::Serialize)]
pub struct CheatRow {
    pub adversary: String,
    pub jobs: usize,
    /// Jobs in which a replay caught it (it forfeited).
    pub caught: usize,
    /// Its submissions over all jobs (accepted and rejected).
    pub submissions: u32,
    /// Caught jobs over submissions: the chance one of its submissions is caught.
    pub catch_rate_per_submission: f64,
    /// Mean over jobs, in wei: what it was paid, less what its bond lost.
    pub cheat_net_wei: f64,
    /// Mean over jobs and honest workers, in wei.
    pub honest_paid_wei: f64,
    /// Mean over jobs, in wei.
    pub slashed_wei: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct CatchRateReport {
    pub bond_multiple: u32,
    pub proof_rate: f64,
    pub rows: Vec<CheatRow>,
}

pub async fn run(config: Config, bench: &CatchRateConfig) -> anyhow::Result<CatchRateReport> {
    anyhow::ensure!(bench.jobs > 0, "--jobs must be at least 1");
    anyhow::ensure!(
        bench.workers >= 2,
        "--workers must be at least 2: one cheat and one honest worker"
    );
    let mut rows = Vec::new();
    for &adversary in &bench.adversaries {
        let mut row = CheatRow {
            adversary: format!("{adversary:?}"),
            jobs: bench.jobs,
            caught: 0,
            submissions: 0,
            catch_rate_per_submission: 0.0,
            cheat_net_wei: 0.0,
            honest_paid_wei: 0.0,
            slashed_wei: 0.0,
        };
        let mut honest_count = 0usize;
        for job in 0..bench.jobs {
            let data = tempfile::tempdir()?;
            let mut config = config.clone();
            config.data_dir = data.path().to_owned();
            config.api.bind = "127.0.0.1:0".parse()?;
            let args = DemoArgs {
                workers: bench.workers,
                adversaries: 1,
                adversary,
                bond_multiple: bench.bond_multiple,
                ..DemoArgs::sample(bench.shards, bench.rounds)
            };
            eprintln!(
                "bench       {adversary:?}: job {} of {}",
                job + 1,
                bench.jobs
            );
            let report = crate::demo::measure(config, &args).await?;
            let wei = |text: &str| text.parse::<f64>().unwrap_or(0.0);
            for c in &report.contributors {
                if c.dishonest {
                    row.caught += usize::from(c.forfeited);
                    row.submissions += c.accepted + c.rejected;
                    row.cheat_net_wei += wei(&c.paid_wei) - wei(&c.slashed_wei);
                    row.slashed_wei += wei(&c.slashed_wei);
                } else {
                    row.honest_paid_wei += wei(&c.paid_wei);
                    honest_count += 1;
                }
            }
        }
        row.catch_rate_per_submission = row.caught as f64 / f64::from(row.submissions.max(1));
        row.cheat_net_wei /= bench.jobs as f64;
        row.slashed_wei /= bench.jobs as f64;
        row.honest_paid_wei /= honest_count.max(1) as f64;
        eprintln!("bench       {row}");
        rows.push(row);
    }
    let validation = shardwork_core::protocol::ValidationSpec {
        bond_multiple: bench.bond_multiple,
        ..Default::default()
    };
    Ok(CatchRateReport {
        bond_multiple: bench.bond_multiple,
        proof_rate: validation.proof_rate(),
        rows,
    })
}

impl fmt::Display for CheatRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let eth = |wei: f64| wei / 1e18;
        write!(
            f,
            "{:<10} caught in {}/{} jobs over {} submissions ({:.2} per submission); cheat nets \
             {:+.4} ETH per job (bond slashed {:.4}), an honest worker is paid {:.4}",
            self.adversary,
            self.caught,
            self.jobs,
            self.submissions,
            self.catch_rate_per_submission,
            eth(self.cheat_net_wei),
            eth(self.slashed_wei),
            eth(self.honest_paid_wei)
        )
    }
}

impl fmt::Display for CatchRateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "cheats against sampled proofs: bond_multiple {}, proof rate {:.3}",
            self.bond_multiple, self.proof_rate
        )?;
        for row in &self.rows {
            writeln!(f, "{row}")?;
        }
        Ok(())
    }
}
