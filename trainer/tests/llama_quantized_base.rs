//! LoRA SFT of SmolLM2-135M-Instruct on its GGUF projections kept in Q4_1 (QLoRA-style): the
//! same losses and the same adapter, bit for bit, as on the model dequantized to f32, in less
//! memory.

mod llama_support;

use candle_core::Device;
use shardwork_trainer::gguf::GgufFile;
use shardwork_trainer::llama::{Llama, Proj};
use shardwork_trainer::lora::LoraConfig;
use shardwork_trainer::optim::OptimConfig;
use shardwork_trainer::train::sft::{self, SftConfig};
use shardwork_trainer::train::sft_data::SftExample;

const SUITE: &str = "worker llama_quantized_base (SmolLM2 GGUF)";

/// Fixed token sequences, the second half of each learned.
fn examples(vocab: u32) -> Vec<SftExample> {
    (0..4u32)
        .map(|s| {
            let ids: Vec<u32> = (0..24u32)
                .map(|i| (s * 7919 + i * 104_729) % vocab)
                .collect();
            let learn = (0..24).map(|i| i >= 12).collect();
            SftExample { ids, learn }
        })
        .collect()
}

/// Trains three steps; (per-step losses, adapter values by name).
fn train(model: &mut Llama) -> (Vec<f32>, Vec<(String, Vec<f32>)>) {
    let cfg = SftConfig {
        // MLP projections stay frozen (so quantized); the attention ones are adapted.
        lora: LoraConfig::new(
            8,
            16.0,
            0.05,
            &["q_proj", "k_proj", "v_proj", "o_proj"],
            &[],
        )
        .unwrap(),
        optim: OptimConfig {
            lr: 2e-3,
            warmup_steps: 1,
            total_steps: 3,
            ..OptimConfig::default()
        },
        batch_size: 2,
        max_seq_len: 24,
        seed: 5,
    };
    let trainables = sft::attach_lora(model, &cfg.lora, cfg.seed).unwrap();
    let data = examples(model.config().vocab_size as u32);
    let mut losses = Vec::new();
    sft::train(model, &trainables, &data, &cfg, 0, &mut |p| {
        losses.push(p.loss)
    })
    .unwrap();
    let adapter = trainables
        .iter()
        .map(|(n, v)| (n.clone(), v.flatten_all().unwrap().to_vec1().unwrap()))
        .collect();
    (losses, adapter)
}

#[test]
fn training_on_the_quantized_base_equals_training_on_its_f32_expansion() {
    let Some(path) = llama_support::smollm2_gguf(SUITE) else {
        return;
    };
    let file = GgufFile::open(&path).unwrap();
    let mut f32_model = file.load_model(&Device::Cpu).unwrap();
    let mut q_model = file.load_model_with(&Device::Cpu, true).unwrap();

    // Every projection of the Q4_1 file is kept quantized, at about a sixth of its f32 size.
    let (mut kept, mut bytes, mut f32_bytes) = (0, 0, 0);
    for layer in &q_model.layers {
        for (name, proj) in layer.projections() {
            let Proj::Quantized(w, _) = proj else {
                panic!("{name} was not kept quantized: {proj:?}");
            };
            kept += 1;
            bytes += w.size_in_bytes();
            f32_bytes += w.dims().0 * w.dims().1 * 4;
        }
    }
    assert_eq!(kept, 7 * 30);
    assert!(
        bytes * 5 < f32_bytes,
        "{bytes} bytes against {f32_bytes} in f32"
    );
    // The Q/K rows are unpermuted like the f32 loader's: the base tensors are identical.
    let f32_base = f32_model.base_tensors().unwrap();
    let q_base = q_model.base_tensors().unwrap();
    assert_eq!(f32_base.len(), q_base.len());
    for ((name, a), (name2, b)) in f32_base.iter().zip(&q_base) {
        assert_eq!(name, name2);
        let same = a
            .eq(b)
            .unwrap()
            .min_all()
            .unwrap()
            .to_scalar::<u8>()
            .unwrap();
        assert_eq!(same, 1, "{name} differs between the two loads");
    }

    let (f32_losses, f32_adapter) = train(&mut f32_model);
    let (q_losses, q_adapter) = train(&mut q_model);
    assert_eq!(q_losses, f32_losses);
    assert!(q_losses.iter().all(|l| l.is_finite()), "{q_losses:?}");
    assert_eq!(q_adapter, f32_adapter);
    // Adapted projections were expanded for LoRA; the MLP stays quantized.
    let layer = &q_model.layers[0];
    assert!(matches!(layer.self_attn.q_proj, Proj::Lora(_)));
    assert!(matches!(layer.mlp.up_proj, Proj::Quantized(..)));
}
