//! A model file that slipped past the API (or never went through it) is checked again by the
//! loader before anything is sized by it: a poisoned declaration is a named error, never an
//! allocation of what the file declares, and the RoPE tables are sized by the job's
//! `max_seq_len`, not by the context length the file declares.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use shardwork_core::testkit::gguf::{MetaValue, TinyGguf};
use shardwork_trainer::causal_model::{BaseWeights, CausalModel};
use shardwork_trainer::chat_template::ChatTemplateError;
use shardwork_trainer::gguf::GgufFile;

fn write(dir: &Path, file: &TinyGguf) -> PathBuf {
    let path = dir.join("model.gguf");
    std::fs::write(&path, file.bytes()).unwrap();
    path
}

fn load_error(file: &TinyGguf) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), file);
    match CausalModel::load(&path, &Device::Cpu) {
        Ok(_) => panic!("a poisoned model loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_context_length_of_300_million_is_a_named_error_not_a_38_gb_table() {
    let poisoned = TinyGguf::llama(true).set("llama.context_length", MetaValue::U32(300_000_000));
    let err = load_error(&poisoned);
    assert!(
        err.contains("model.gguf") && err.contains("llama.context_length"),
        "{err}"
    );
}

#[test]
fn declared_sizes_that_disagree_with_the_tensors_are_named() {
    // A vocabulary the embedding does not have.
    let mut file = TinyGguf::llama(false);
    file.tensors[0].shape = vec![31, 16];
    file.tensors[0].data.truncate(31 * 16);
    let err = load_error(&file);
    assert!(err.contains("token_embd.weight"), "{err}");
    // A layer count past the limit, and one the tensors do not have.
    let err = load_error(&TinyGguf::llama(false).set("llama.block_count", MetaValue::U64(1 << 40)));
    assert!(err.contains("llama.block_count"), "{err}");
    let err = load_error(&TinyGguf::llama(false).set("llama.block_count", MetaValue::U32(3)));
    assert!(err.contains("blk.2."), "{err}");
    // A header that claims 2^60 tensors is refused before any is read.
    let mut bytes = TinyGguf::llama(false).bytes();
    bytes[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.gguf");
    std::fs::write(&path, bytes).unwrap();
    let err = GgufFile::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("huge.gguf") && err.contains("tensor_count"),
        "{err}"
    );
}

#[test]
fn the_rope_tables_are_sized_by_the_jobs_max_seq_len() {
    // A context of 2,000,000 is within the limits: the file loads, but its tables are the
    // job's 64 positions, not 2,000,000 (nor the 32,768 a loader without a job uses).
    let file = TinyGguf::llama(true).set("llama.context_length", MetaValue::U32(2_000_000));
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &file);
    let job = CausalModel::load_for(&path, &Device::Cpu, BaseWeights::F32, 64).unwrap();
    assert_eq!(job.model.max_positions(), 64);
    assert_eq!(job.model.config().max_position_embeddings, 2_000_000);
    let fits = Tensor::zeros((1, 64), candle_core::DType::U32, &Device::Cpu).unwrap();
    job.model.forward(&fits).unwrap();
    let longer = Tensor::zeros((1, 65), candle_core::DType::U32, &Device::Cpu).unwrap();
    let err = job.model.forward(&longer).unwrap_err().to_string();
    assert!(err.contains("65 positions"), "{err}");
    let plain = CausalModel::load(&path, &Device::Cpu).unwrap();
    assert_eq!(plain.model.max_positions(), 32_768);
    // A file that declares less than the job asks covers only what it declares.
    let short = write(dir.path(), &TinyGguf::llama(false));
    let job = CausalModel::load_for(&short, &Device::Cpu, BaseWeights::F32, 4096).unwrap();
    assert_eq!(job.model.max_positions(), 64);
}

#[test]
fn a_chat_template_that_loops_for_ever_runs_out_of_fuel_in_the_node() {
    let nested = "{% for a in range(100000) %}{% for b in range(100000) %}\
                  {% for c in range(100000) %}{{ a }}{% endfor %}{% endfor %}{% endfor %}";
    let file = TinyGguf::llama(false).set("tokenizer.chat_template", MetaValue::Str(nested.into()));
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &file);
    let model = CausalModel::load(&path, &Device::Cpu).unwrap();
    let template = model.tokenizer.chat_template.as_ref().unwrap();
    let started = std::time::Instant::now();
    let err = template
        .render(
            &[shardwork_trainer::chat_template::ChatMessage::new(
                "user", "hi",
            )],
            true,
        )
        .unwrap_err();
    assert!(matches!(err, ChatTemplateError::OutOfFuel(_)), "{err}");
    assert!(started.elapsed().as_secs() < 5);
}
