//! Content-addressing throughput: how fast we compute a file's CID (Kubo-compatible UnixFS
//! import, hash only) next to `sha256sum` over the same file in the same run.
//!
//! Both sides read the same file from the page cache (an untimed warm-up pass loads it), and
//! both are single-threaded, so the ratio measures the cost of chunking, the DAG and our I/O
//! loop over plain SHA-256. The goal is a ratio of at least 0.5.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use shardwork_core::store::unixfs;

/// Results of one benchmark run: median seconds over `runs` timed passes of each side.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ContentAddressingReport {
    pub file: PathBuf,
    pub file_bytes: u64,
    pub runs: usize,
    /// CID of the file (also a check that every pass computed the same one).
    pub cid: String,
    pub cid_seconds: f64,
    pub cid_mb_per_s: f64,
    pub sha256sum_seconds: f64,
    pub sha256sum_mb_per_s: f64,
    /// `cid_mb_per_s / sha256sum_mb_per_s`.
    pub ratio: f64,
}

impl fmt::Display for ContentAddressingReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "content addressing: {} MiB file, median of {} runs",
            self.file_bytes >> 20,
            self.runs
        )?;
        writeln!(
            f,
            "  UnixFS CID (CIDv1, raw leaves, 256 KiB chunks) {:>9.1} MB/s  {}",
            self.cid_mb_per_s, self.cid
        )?;
        writeln!(
            f,
            "  sha256sum                                      {:>9.1} MB/s",
            self.sha256sum_mb_per_s
        )?;
        write!(f, "  ratio {:.2} (goal >= 0.50)", self.ratio)
    }
}

/// Times CID computation and `sha256sum` on `file`, or on a generated file of `size_bytes` in the
/// temp folder (removed afterwards) when `file` is `None`. `runs` timed passes of each, at least 1.
pub async fn bench_content_addressing(
    file: Option<&Path>,
    size_bytes: u64,
    runs: usize,
) -> anyhow::Result<ContentAddressingReport> {
    let runs = runs.max(1);
    let (path, generated) = match file {
        Some(path) => (path.to_owned(), false),
        None => (generate(size_bytes).await?, true),
    };
    let outcome = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || measure(&path, runs))
            .await
            .context("benchmark task")?
    };
    if generated {
        let _ = std::fs::remove_file(&path);
    }
    outcome
}

fn measure(path: &Path, runs: usize) -> anyhow::Result<ContentAddressingReport> {
    let file_bytes = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    // Warm-up: both sides then read from the page cache, not the disk.
    let cid = cid_of(path)?;
    sha256sum(path)?;
    let mut ours = Vec::with_capacity(runs);
    let mut theirs = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let again = cid_of(path)?;
        ours.push(start.elapsed().as_secs_f64());
        if again != cid {
            bail!("CID changed between runs: {cid} then {again}");
        }
        let start = Instant::now();
        sha256sum(path)?;
        theirs.push(start.elapsed().as_secs_f64());
    }
    let cid_seconds = median(&mut ours);
    let sha256sum_seconds = median(&mut theirs);
    let mb = file_bytes as f64 / 1e6;
    Ok(ContentAddressingReport {
        file: path.to_owned(),
        file_bytes,
        runs,
        cid,
        cid_seconds,
        cid_mb_per_s: mb / cid_seconds,
        sha256sum_seconds,
        sha256sum_mb_per_s: mb / sha256sum_seconds,
        ratio: sha256sum_seconds / cid_seconds,
    })
}

fn cid_of(path: &Path) -> anyhow::Result<String> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(unixfs::hash_reader(file)
        .with_context(|| format!("reading {}", path.display()))?
        .root
        .to_string())
}

fn sha256sum(path: &Path) -> anyhow::Result<()> {
    let output = Command::new("sha256sum")
        .arg(path)
        .output()
        .context("running sha256sum (coreutils) for the baseline")?;
    if !output.status.success() {
        bail!(
            "sha256sum failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Writes `size` bytes of incompressible pseudo-random data to a fresh temp file.
async fn generate(size: u64) -> anyhow::Result<PathBuf> {
    let path = std::env::temp_dir().join(format!(
        "shardwork-bench-{}-{}.bin",
        std::process::id(),
        size
    ));
    let target = path.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&target)?);
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut block = vec![0u8; 1 << 20];
        let mut left = size;
        while left > 0 {
            for word in block.chunks_exact_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                word.copy_from_slice(&state.to_le_bytes());
            }
            let n = left.min(block.len() as u64) as usize;
            out.write_all(&block[..n])?;
            left -= n as u64;
        }
        out.flush()?;
        Ok(())
    })
    .await
    .context("generator task")?
    .with_context(|| format!("writing benchmark file {}", path.display()))?;
    Ok(path)
}
