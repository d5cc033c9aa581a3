//! A bounded mutation fuzzer over the parsers a node runs on an untrusted model's files, in the
//! order a node runs them: the GGUF header (core's bounded reader, then candle's), the checks
//! of every declared size, the tokenizer rebuilt from GGUF metadata, the model load with its
//! RoPE tables; a safetensors file; a `config.json`; a `tokenizer.json` (a BERT bundle's, loaded
//! with truncation and run on text, as the classification nodes do). Each input is a valid file with a few
//! mutations (bytes flipped, a length or count overwritten with an extreme value, the file cut
//! or a chunk repeated). The properties: no panic, and no single allocation above
//! [`MAX_ALLOCATION`] (a counting global allocator in this test binary).
//!
//! Ignored in the CI run (it runs for a set time); run it with
//! `SHARDWORK_FUZZ_SECS=60 cargo nextest run --workspace --run-ignored only -E 'test(fuzz_model_files)'`
//! (default 20 s). It prints executions, time and failures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use candle_core::Device;
use shardwork_core::protocol::model_files::{self, GgufHeader};
use shardwork_core::testkit::gguf::TinyGguf;
use shardwork_trainer::causal_model::{BaseWeights, CausalModel};
use shardwork_trainer::gguf::GgufFile;
use shardwork_trainer::text::TextTokenizer;
use shardwork_trainer::tokenizer_gguf::LmTokenizer;

/// The largest allocation a model file of under 100 KB may cause.
const MAX_ALLOCATION: usize = 256 << 20;

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // An allocation past the bound is the failure this harness looks for: refuse it (the
        // process would abort), after recording it.
        if layout.size() > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        if new_size > MAX_ALLOCATION {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// xorshift64*: reproducible inputs from a seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const EXTREMES: [u64; 9] = [
    0,
    1,
    255,
    1 << 31,
    u32::MAX as u64,
    1 << 32,
    300_000_000,
    1 << 60,
    u64::MAX,
];

/// Numbers a JSON file may declare: what a parser must bound before it sizes anything by them.
const JSON_EXTREMES: [&str; 7] = [
    "4294967295",
    "18446744073709551615",
    "-1",
    "0",
    "1e308",
    "99999999999999999999999999",
    "2147483648",
];

/// A JSON seed with one of its numbers replaced by an extreme (the byte mutations of
/// [`mutate`] mostly break the syntax, which only exercises the parser's first lines).
fn mutate_json(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let numbers: Vec<(usize, usize)> = {
        let mut spans = Vec::new();
        let mut i = 0;
        while i < seed.len() {
            if seed[i].is_ascii_digit() && (i == 0 || !seed[i - 1].is_ascii_alphanumeric()) {
                let start = i;
                while i < seed.len() && (seed[i].is_ascii_digit() || seed[i] == b'.') {
                    i += 1;
                }
                spans.push((start, i));
            }
            i += 1;
        }
        spans
    };
    let mut out = seed.to_vec();
    for _ in 0..1 + rng.below(3) {
        if numbers.is_empty() {
            break;
        }
        let (start, end) = numbers[rng.below(numbers.len())];
        if end > out.len() {
            continue;
        }
        out.splice(
            start..end,
            JSON_EXTREMES[rng.below(JSON_EXTREMES.len())].bytes(),
        );
    }
    out
}

fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        if out.is_empty() {
            break;
        }
        match rng.below(5) {
            0 => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 | 2 => {
                // Lengths and counts are little-endian u64 (or u32) fields: overwrite one.
                let i = rng.below(out.len().saturating_sub(8));
                let v = EXTREMES[rng.below(EXTREMES.len())];
                let width = if rng.below(2) == 0 { 8 } else { 4 };
                let end = (i + width).min(out.len());
                out[i..end].copy_from_slice(&v.to_le_bytes()[..end - i]);
            }
            3 => out.truncate(rng.below(out.len())),
            _ => {
                let i = rng.below(out.len());
                let n = rng.below(64).min(out.len() - i);
                let chunk = out[i..i + n].to_vec();
                out.splice(i..i, chunk);
            }
        }
    }
    out
}

fn safetensors_seed() -> Vec<u8> {
    let header = br#"{"model.embed_tokens.weight":{"dtype":"F32","shape":[4,2],"data_offsets":[0,32]},"__metadata__":{"format":"pt"}}"#;
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header);
    out.extend((0..8).flat_map(|i| (i as f32).to_le_bytes()));
    out
}

const CONFIG_SEED: &str = r#"{"model_type": "llama", "vocab_size": 32, "hidden_size": 16,
    "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 64, "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": true}"#;

/// Runs one input through what a node runs on it; the error (if any) is the expected outcome
/// of a bad file and is dropped.
fn run_gguf(dir: &std::path::Path, bytes: &[u8]) -> bool {
    let _ = GgufHeader::parse(bytes).map(|h| h.check_model(bytes.len() as u64));
    let path = dir.join("model.gguf");
    std::fs::write(&path, bytes).unwrap();
    if let Ok(file) = GgufFile::open(&path)
        && file.check().is_ok()
    {
        let _ = LmTokenizer::from_gguf(&file);
        return CausalModel::load_for(&path, &Device::Cpu, BaseWeights::F32, 64).is_ok();
    }
    false
}

fn run_safetensors(dir: &std::path::Path, bytes: &[u8]) {
    let path = dir.join("model.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let _ = shardwork_trainer::safetensors_file::load(&path, &Device::Cpu);
}

/// Texts a node's tokenizer runs on: short, long, empty, non-ASCII.
const TOKENIZER_TEXTS: [&str; 4] = [
    "good great film",
    "",
    "a very long review that goes on and on and on past the truncation length of sixty-four \
     tokens, the way a real review of a dull film with a boring plot and cast sometimes does, \
     saying the same thing again and again and again and again",
    "été naïve 映画 🎬",
];

fn run_tokenizer(dir: &std::path::Path, bytes: &[u8]) {
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, bytes).unwrap();
    if let Ok(tokenizer) = TextTokenizer::from_file(&path, 64) {
        for text in TOKENIZER_TEXTS {
            let _ = tokenizer.encode(text);
        }
    }
}

fn run_config(dir: &std::path::Path, bytes: &[u8]) {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) {
        let _ = model_files::check_config_sizes(&v);
    }
    let path = dir.join("config.json");
    std::fs::write(&path, bytes).unwrap();
    let _ = shardwork_trainer::llama::Config::from_file(&path);
}

#[test]
#[ignore = "a fuzzer: runs for SHARDWORK_FUZZ_SECS (20 by default)"]
fn fuzz_model_files() {
    let secs: u64 = std::env::var("SHARDWORK_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    // An allocation past the bound aborts the process: the input that did it is the file left
    // in this folder.
    println!(
        "fuzz_model_files: inputs are written under {}",
        dir.path().display()
    );
    let gguf = TinyGguf::llama(true).bytes();
    let safetensors = safetensors_seed();
    let config = CONFIG_SEED.as_bytes().to_vec();
    let tokenizer = {
        let bundle = tempfile::tempdir().unwrap();
        shardwork_trainer::sample::write_model(bundle.path(), 1).unwrap();
        std::fs::read(bundle.path().join("tokenizer.json")).unwrap()
    };
    let mut rng = Rng(0x5eed_0046);
    let started = Instant::now();
    let (mut execs, mut failures) = (0u64, Vec::new());
    // How many mutated GGUF files still loaded (the fuzzer reaches the loader, not only the
    // header checks), and the largest allocation any input caused.
    let (mut loaded, mut peak) = (0u64, 0usize);
    while started.elapsed() < Duration::from_secs(secs) {
        let which = rng.below(4);
        let seed = [&gguf, &safetensors, &config, &tokenizer][which];
        let input = if which >= 2 && rng.below(2) == 0 {
            mutate_json(seed, &mut rng)
        } else {
            mutate(seed, &mut rng)
        };
        LARGEST.store(0, Ordering::Relaxed);
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| match which {
            0 => run_gguf(dir.path(), &input),
            1 => {
                run_safetensors(dir.path(), &input);
                false
            }
            2 => {
                run_config(dir.path(), &input);
                false
            }
            _ => {
                run_tokenizer(dir.path(), &input);
                false
            }
        }));
        let largest = LARGEST.load(Ordering::Relaxed);
        peak = peak.max(largest);
        loaded += u64::from(matches!(outcome, Ok(true)));
        if outcome.is_err() || largest > MAX_ALLOCATION {
            let name = dir.path().join(format!("failure-{execs}"));
            std::fs::write(&name, &input).unwrap();
            failures.push(format!(
                "input {execs} ({}): {} (largest allocation {largest} bytes)",
                ["gguf", "safetensors", "config.json", "tokenizer.json"][which],
                if outcome.is_err() {
                    "panicked"
                } else {
                    "allocated past the bound"
                }
            ));
        }
        execs += 1;
    }
    println!(
        "fuzz_model_files: {execs} executions in {:.1} s, {} failures; {loaded} mutated GGUF \
         files loaded whole; largest allocation {peak} bytes (bound {MAX_ALLOCATION})",
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}
