//! `shardwork bench api`: authenticated `GET /v1/jobs/{id}` (JWT check, rate limiter, a
//! PostgreSQL read, JSON) over several posted jobs, each connection reading them in turn, against the unauthenticated `/healthz` on the same server, in the same
//! run, with the same client. Rounds alternate between the two routes so drift on a noisy machine
//! falls on both; the figure is the median of the per-round ratios. `GET /v1/auth/me` (the same
//! JWT check and rate limiter, no SQL) is measured beside them to show what the database read
//! costs on its own.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use serde::Serialize;
use shardwork_client::ApiClient;
use uuid::Uuid;

use crate::config::Config;

#[derive(Debug, Clone)]
pub struct ApiBenchConfig {
    pub database_url: String,
    pub connections: usize,
    pub seconds: f64,
    pub rounds: usize,
    /// Distinct jobs the job route reads in turn.
    pub jobs: usize,
}

/// One route's measurement in one round.
#[derive(Debug, Clone, Serialize)]
pub struct RouteFigures {
    pub requests: usize,
    pub errors: usize,
    pub requests_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApiBenchReport {
    pub connections: usize,
    pub jobs: usize,
    pub seconds_per_route_per_round: f64,
    pub static_route: Vec<RouteFigures>,
    /// `GET /v1/auth/me`: authentication and rate limiting without a database read.
    pub authenticated_no_sql: Vec<RouteFigures>,
    pub authenticated_job: Vec<RouteFigures>,
    /// Median over rounds of authenticated req/s ÷ static req/s.
    pub ratio: f64,
}

pub async fn run(mut config: Config, bench: &ApiBenchConfig) -> anyhow::Result<ApiBenchReport> {
    if !bench.database_url.starts_with("postgres") {
        bail!(
            "--database-url must be a PostgreSQL URL (the figure is about PostgreSQL), got {}",
            crate::config::redact_url(&bench.database_url)
        );
    }
    if bench.connections == 0 || bench.rounds == 0 || bench.jobs == 0 || bench.seconds <= 0.0 {
        bail!("--connections, --rounds, --jobs and --seconds must be positive");
    }
    let data = tempfile::tempdir()?;
    config.data_dir = data.path().to_owned();
    config.database_url = bench.database_url.clone();
    config.api.bind = "127.0.0.1:0".parse()?;
    // The limiter still runs on every request; the limits (the caller's, and its address's
    // over all callers) are only raised so the benchmark's one address measures the handler
    // rather than 429s.
    config.api.rate_limit_per_minute = u32::MAX;
    config.api.rate_limit_per_ip_per_minute = u32::MAX;
    let deployment = crate::up::start(
        config,
        1,
        0,
        (0, shardwork_node::adversary::Behaviour::Honest),
    )
    .await?;
    let outcome = measure(&deployment, bench).await;
    let crate::up::Deployment { running, nodes, .. } = deployment;
    nodes.stop().await;
    running.handle().stop(true).await;
    outcome
}

async fn measure(
    deployment: &crate::up::Deployment,
    bench: &ApiBenchConfig,
) -> anyhow::Result<ApiBenchReport> {
    let shape = crate::demo::SampleShape {
        classification: true,
        sample_model: true,
        conversations: 0,
        sample_reviews: crate::demo::SAMPLE_REVIEWS,
        shards: 1,
        rounds: 1,
    };
    let crate::demo::SampleJob { spec, dataset, .. } =
        crate::demo::sample_job(deployment, &shape).await?;
    let requester = ApiClient::new(
        &deployment.api_url,
        crate::nodes::dev_key(crate::nodes::REQUESTER_DEV_KEY),
        &[],
    )?;
    let dataset = Bytes::from(dataset);
    let mut job_urls = Vec::with_capacity(bench.jobs);
    for _ in 0..bench.jobs {
        let job = requester.post_job(&spec, dataset.clone()).await?;
        let job_id: Uuid = job["id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .context("the API answered a job without an id")?;
        job_urls.push(format!("{}/v1/jobs/{job_id}", deployment.api_url));
    }
    let token = requester.access_token().await?;

    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(bench.connections)
        .build()?;
    let health = Route {
        urls: vec![format!("{}/healthz", deployment.api_url)],
        token: None,
    };
    let me_route = Route {
        urls: vec![format!("{}/v1/auth/me", deployment.api_url)],
        token: Some(token.clone()),
    };
    let job_route = Route {
        urls: job_urls,
        token: Some(token),
    };
    // Warm every route (connection pool, statement cache) before anything is counted.
    for route in [&health, &me_route, &job_route] {
        load(&http, route, bench.connections, Duration::from_millis(500)).await?;
    }
    let span = Duration::from_secs_f64(bench.seconds);
    let mut report = ApiBenchReport {
        connections: bench.connections,
        jobs: bench.jobs,
        seconds_per_route_per_round: bench.seconds,
        static_route: Vec::new(),
        authenticated_no_sql: Vec::new(),
        authenticated_job: Vec::new(),
        ratio: 0.0,
    };
    let mut ratios = Vec::new();
    for round in 0..bench.rounds {
        let static_figures = load(&http, &health, bench.connections, span).await?;
        let me_figures = load(&http, &me_route, bench.connections, span).await?;
        let job_figures = load(&http, &job_route, bench.connections, span).await?;
        for (name, figures) in [
            ("/healthz", &static_figures),
            ("/v1/auth/me", &me_figures),
            ("job", &job_figures),
        ] {
            if figures.errors > 0 {
                bail!(
                    "round {round}: {} of {} requests to {name} failed",
                    figures.errors,
                    figures.requests
                );
            }
        }
        ratios.push(job_figures.requests_per_sec / static_figures.requests_per_sec);
        eprintln!(
            "round {}: /healthz {:.0} req/s, /v1/auth/me {:.0} req/s, GET /v1/jobs/{{id}} {:.0} req/s",
            round + 1,
            static_figures.requests_per_sec,
            me_figures.requests_per_sec,
            job_figures.requests_per_sec
        );
        report.static_route.push(static_figures);
        report.authenticated_no_sql.push(me_figures);
        report.authenticated_job.push(job_figures);
    }
    report.ratio = median(&mut ratios);
    Ok(report)
}

/// One route's URLs, requested in turn by every connection (each starting at its own offset).
struct Route {
    urls: Vec<String>,
    token: Option<String>,
}

/// `connections` concurrent request loops for `span`; every answer must be 200.
async fn load(
    http: &reqwest::Client,
    route: &Route,
    connections: usize,
    span: Duration,
) -> anyhow::Result<RouteFigures> {
    let started = Instant::now();
    let deadline = started + span;
    let route = Arc::new((route.urls.clone(), route.token.clone()));
    let mut loops = Vec::with_capacity(connections);
    for connection in 0..connections {
        let http = http.clone();
        let route = route.clone();
        loops.push(tokio::spawn(async move {
            let mut latencies_us: Vec<u32> = Vec::new();
            let mut errors = 0usize;
            let mut next = connection;
            while Instant::now() < deadline {
                let url = &route.0[next % route.0.len()];
                next += 1;
                let sent = Instant::now();
                let mut request = http.get(url);
                if let Some(token) = &route.1 {
                    request = request.bearer_auth(token);
                }
                let ok = match request.send().await {
                    Ok(response) => {
                        let status = response.status();
                        response.bytes().await.is_ok() && status == reqwest::StatusCode::OK
                    }
                    Err(_) => false,
                };
                if !ok {
                    errors += 1;
                }
                latencies_us.push(sent.elapsed().as_micros().min(u32::MAX as u128) as u32);
            }
            (latencies_us, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for handle in loops {
        let (l, e) = handle.await?;
        latencies.extend(l);
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    Ok(RouteFigures {
        requests: latencies.len(),
        errors,
        requests_per_sec: latencies.len() as f64 / elapsed,
        p50_ms: percentile_ms(&latencies, 0.50),
        p99_ms: percentile_ms(&latencies, 0.99),
    })
}

fn percentile_ms(sorted_us: &[u32], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let index = ((sorted_us.len() as f64 - 1.0) * q).round() as usize;
    f64::from(sorted_us[index]) / 1000.0
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

impl fmt::Display for ApiBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mean = |v: &[RouteFigures], pick: fn(&RouteFigures) -> f64| {
            v.iter().map(pick).sum::<f64>() / v.len().max(1) as f64
        };
        writeln!(
            f,
            "API on PostgreSQL, {} connections, job route over {} jobs, {} round(s) of {:.1} s per route:",
            self.connections,
            self.jobs,
            self.static_route.len(),
            self.seconds_per_route_per_round
        )?;
        for (name, figures) in [
            ("GET /healthz (static)        ", &self.static_route),
            ("GET /v1/auth/me (JWT, no SQL)", &self.authenticated_no_sql),
            ("GET /v1/jobs/{id} (JWT, SQL) ", &self.authenticated_job),
        ] {
            writeln!(
                f,
                "  {name} {:>8.0} req/s   p50 {:>6.2} ms   p99 {:>6.2} ms",
                mean(figures, |r| r.requests_per_sec),
                mean(figures, |r| r.p50_ms),
                mean(figures, |r| r.p99_ms)
            )?;
        }
        write!(
            f,
            "  authenticated / static: {:.1}% (median of rounds; goal >= 30%)",
            self.ratio * 100.0
        )
    }
}
