use crate::data::LanguageData;
use crate::model::{sinusoidal_positions, PerplexityPass};
use crate::params;
use plugin_api::candle::{DType, Device, Tensor};
use plugin_api::{Batch, Config, MetricTally, Task, TaskModel, Value};
use plugin_testkit::{build_task_model, param_count, task_gradient_sizes, train_on_task};
use std::f64::consts::LN_2;
use tempfile::TempDir;

fn config(pairs: &[(&str, Value)]) -> Config {
    plugin_testkit::config(&params(), pairs)
}

/// A small generated corpus (fast to build in the dev profile).
fn small(extra: &[(&str, Value)]) -> Config {
    let mut pairs = vec![("corpus_bytes", Value::Int(40_000)), ("seq_len", Value::Int(32))];
    pairs.extend(extra.iter().cloned());
    config(&pairs)
}

fn rows(t: &Tensor) -> Vec<Vec<u32>> {
    t.to_vec2().unwrap()
}

/// The metrics of `model` over `batches`, the embedding straight into the head.
fn evaluate_all(model: &dyn TaskModel, batches: &[Batch]) -> MetricTally {
    plugin_testkit::evaluate_all(model, batches, |h, _| h.clone())
}

/// A fresh folder for a test's files, removed when dropped.
fn temp_dir() -> TempDir {
    tempfile::Builder::new().prefix("language-plugin-").tempdir().unwrap()
}

fn temp_file(dir: &TempDir, name: &str, contents: &[u8]) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, contents).unwrap();
    path.to_string_lossy().into_owned()
}

fn refusal(cfg: &Config) -> String {
    LanguageData::validate(cfg).expect_err("the configuration should be refused").to_string()
}

#[test]
fn the_task_is_causal_and_bpb_is_the_headline() {
    let data = LanguageData::new(&small(&[]), 0).unwrap();
    let info = data.info().unwrap();
    assert!(info.causal);
    assert_eq!(info.seq_len, 32);
    let names: Vec<&str> = info.metrics.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["bpb", "loss", "ppl", "acc"]);
    assert!(!info.metrics[0].higher_is_better);
    let corpus = data.corpus();
    assert_eq!(info.eval_examples, (corpus.eval.len() - 1) / 32);
    assert_eq!(corpus.train_bytes + corpus.eval_bytes, datasets::text::generate_text(20_240_601, 40_000).len());
}

/// `target[i] = input[i + 1]`, and each row is one window of the token stream.
#[test]
fn targets_are_the_inputs_shifted_by_one_token() {
    let data = LanguageData::new(&small(&[]), 3).unwrap();
    let corpus = data.corpus();
    let batch = data.train_batch(0, 8, &Device::Cpu).unwrap();
    assert_eq!(batch.inputs.dims(), &[8, 32]);
    for (input, target) in rows(&batch.inputs).iter().zip(rows(&batch.targets)) {
        assert_eq!(input[1..], target[..31]);
        let mut window = input.clone();
        window.push(target[31]);
        assert!(corpus.train.windows(33).any(|w| w == window), "a row that is not a window of the training text");
    }
    let eval = data.eval_batches(5, 12, &Device::Cpu).unwrap();
    assert_eq!(eval.iter().map(|b| b.size).collect::<Vec<_>>(), [5, 5, 2]);
    for (k, (input, target)) in eval.iter().flat_map(|b| rows(&b.inputs).into_iter().zip(rows(&b.targets))).enumerate()
    {
        assert_eq!(input, corpus.eval[k * 32..k * 32 + 32]);
        assert_eq!(target, corpus.eval[k * 32 + 1..k * 32 + 33]);
    }
}

#[test]
fn training_batches_depend_only_on_seed_and_step() {
    let cfg = small(&[]);
    let data = LanguageData::new(&cfg, 7).unwrap();
    let batch = |d: &LanguageData, step| rows(&d.train_batch(step, 4, &Device::Cpu).unwrap().inputs);
    let first = batch(&data, 5);
    assert_eq!(first, batch(&data, 5));
    // A task rebuilt from the same configuration (a resumed run) draws the same batch.
    assert_eq!(first, batch(&LanguageData::new(&cfg, 7).unwrap(), 5));
    assert_ne!(first, batch(&data, 6));
    assert_ne!(first, batch(&LanguageData::new(&cfg, 8).unwrap(), 5));
}

#[test]
fn parameter_counts() {
    let (v, n, d) = (256, 32, 24);
    let count = |extra: &[(&str, Value)]| {
        let (map, _) = build_task_model(&LanguageData::new(&small(extra), 0).unwrap(), d);
        param_count(&map)
    };
    assert_eq!(count(&[]), v * d + n * d + d + d * v);
    assert_eq!(count(&[("tie_embeddings", Value::Bool(true))]), v * d + n * d + d);
    assert_eq!(count(&[("positions", Value::Str("sinusoidal".into()))]), v * d + d + d * v);
}

#[test]
fn every_parameter_receives_a_gradient() {
    for tie in [false, true] {
        let data = LanguageData::new(&small(&[("tie_embeddings", Value::Bool(tie))]), 0).unwrap();
        for (name, g) in task_gradient_sizes(&data, 16, 4, |h| h.sin().unwrap()) {
            assert!(g > 0.0, "{name} (tie_embeddings={tie}) received no gradient");
        }
    }
}

#[test]
fn sinusoidal_positions_follow_vaswani() {
    let p: Vec<Vec<f32>> = sinusoidal_positions(5, 8, DType::F32, &Device::Cpu).unwrap().to_vec2().unwrap();
    assert_eq!(p[0], [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]);
    assert!((p[3][0] - 3f32.sin()).abs() < 1e-6 && (p[3][1] - 3f32.cos()).abs() < 1e-6);
    let w = 10_000f32.powf(-6.0 / 8.0); // k = 3: columns 6 and 7
    assert!((p[4][6] - (4.0 * w).sin()).abs() < 1e-6 && (p[4][7] - (4.0 * w).cos()).abs() < 1e-6);
}

/// Over several batches `ppl` is exactly exp of the mean loss of the whole set, `bpb` is
/// loss / ln 2 for byte tokens, and a second pass reports the same values.
#[test]
fn metrics_merge_exactly_across_batches() {
    let data = LanguageData::new(&small(&[]), 0).unwrap();
    let (_, model) = build_task_model(&data, 16);
    let batches = data.eval_batches(3, 8, &Device::Cpu).unwrap();
    let first = evaluate_all(&*model, &batches);
    let means = first.means();
    assert!((means["ppl"] / means["loss"].exp() - 1.0).abs() < 1e-9, "{means:?}");
    assert!((means["bpb"] - means["loss"] / LN_2).abs() < 1e-9);
    assert_eq!(first.0["loss"].1, 8.0 * 32.0);
    let second = evaluate_all(&*model, &batches);
    for name in ["loss", "ppl", "bpb", "acc"] {
        assert!((second.means()[name] - means[name]).abs() < 1e-9, "{name} changed between passes");
    }
    // One batch holding the same eight windows gives the same metrics.
    let whole = evaluate_all(&*model, &data.eval_batches(8, 8, &Device::Cpu).unwrap()).means();
    for name in ["loss", "ppl", "bpb", "acc"] {
        assert!((whole[name] - means[name]).abs() < 1e-6, "{name}: {} vs {}", whole[name], means[name]);
    }
}

#[test]
fn perplexity_shares_telescope() {
    let ids: Vec<_> = (0..3).map(|_| Tensor::zeros(1, DType::U32, &Device::Cpu).unwrap().id()).collect();
    let mut pass = PerplexityPass::default();
    let parts = [(10.0, 4.0), (2.0, 4.0), (30.0, 8.0)];
    let mut tally = MetricTally::default();
    for (id, (nats, tokens)) in ids.iter().zip(parts) {
        tally.add("ppl", pass.add(*id, nats, tokens), tokens);
    }
    assert!((tally.means()["ppl"] - (42.0f64 / 16.0).exp()).abs() < 1e-12);
    // The token-weighted mean of per-batch perplexities would be far off.
    let naive: f64 = parts.iter().map(|(nats, tokens)| (nats / tokens).exp() * tokens).sum::<f64>() / 16.0;
    assert!(naive - (42.0f64 / 16.0).exp() > 1.0);
    // The first batch again starts a new pass.
    assert!((pass.add(ids[0], 10.0, 4.0) - 2.5f64.exp() * 4.0).abs() < 1e-12);
}

/// With BPE, bits per byte divide by the bytes the target tokens decode to.
#[test]
fn bpe_bits_per_byte_count_the_bytes_of_the_targets() {
    let data =
        LanguageData::new(&small(&[("tokenizer", Value::Str("bpe".into())), ("vocab_size", Value::Int(400))]), 0)
            .unwrap();
    let corpus = data.corpus();
    assert_eq!(corpus.tokenizer.vocab_size(), 400);
    let (_, model) = build_task_model(&data, 16);
    let batches = data.eval_batches(4, 6, &Device::Cpu).unwrap();
    let tally = evaluate_all(&*model, &batches);
    let target_bytes: usize =
        batches.iter().flat_map(|b| rows(&b.targets)).map(|row| corpus.tokenizer.decode(&row).unwrap().len()).sum();
    assert_eq!(tally.0["bpb"].1, target_bytes as f64);
    assert!(target_bytes > 2 * 6 * 32, "{target_bytes} bytes in 192 BPE tokens");
    let (nats, tokens) = tally.0["loss"];
    assert!((tally.means()["bpb"] - nats / (LN_2 * target_bytes as f64)).abs() < 1e-9);
    assert_eq!(tokens, 6.0 * 32.0);
}

#[test]
fn the_validator_refuses_bad_sources_with_the_fix() {
    let file = |path: &str, extra: &[(&str, Value)]| {
        let mut pairs = vec![("corpus", Value::Str("file".into())), ("path", Value::Str(path.into()))];
        pairs.extend(extra.iter().cloned());
        config(&pairs)
    };
    let missing = std::env::temp_dir().join("language-plugin-no-such-file.txt").to_string_lossy().into_owned();
    let e = refusal(&file(&missing, &[]));
    assert!(e.contains(&missing) && e.contains("does not exist"), "{e}");
    let dir = temp_dir();
    let e = refusal(&file(&temp_file(&dir, "empty.txt", b""), &[]));
    assert!(e.contains("empty.txt") && e.contains("is empty"), "{e}");
    let short = temp_file(&dir, "short.txt", "The owls sing. ".repeat(20).as_bytes());
    let e = refusal(&file(&short, &[]));
    assert!(e.contains("short.txt") && e.contains("seq_len = 128") && e.contains("smaller seq_len"), "{e}");
    assert!(LanguageData::validate(&file(&short, &[("seq_len", Value::Int(16))])).is_ok());
    let binary: Vec<u8> = (0..=255u8).cycle().take(4000).collect();
    let binary = temp_file(&dir, "binary.bin", &binary);
    assert!(LanguageData::validate(&file(&binary, &[])).is_ok());
    let e = refusal(&file(&binary, &[("tokenizer", Value::Str("bpe".into()))]));
    assert!(e.contains("binary.bin") && e.contains("tokenizer=bytes"), "{e}");
    let e = refusal(&config(&[("corpus", Value::Str("file".into()))]));
    assert!(e.contains("path="), "{e}");
    let e = refusal(&config(&[("path", Value::Str(short.clone()))]));
    assert!(e.contains("corpus=file"), "{e}");
    let e = refusal(&small(&[("corpus_bytes", Value::Int(2_000)), ("seq_len", Value::Int(512))]));
    assert!(e.contains("generated corpus") && e.contains("seq_len = 512"), "{e}");
}

/// A file corpus trains from its own text: the windows are the file's bytes.
#[test]
fn a_file_corpus_is_read_as_bytes() {
    let text = "Ünïcödé and (brackets) and \"quotes\".\n".repeat(50);
    let dir = temp_dir();
    let path = temp_file(&dir, "valid.txt", text.as_bytes());
    let cfg = config(&[
        ("corpus", Value::Str("file".into())),
        ("path", Value::Str(path)),
        ("seq_len", Value::Int(16)),
        ("eval_fraction", Value::Float(0.2)),
    ]);
    let data = LanguageData::new(&cfg, 0).unwrap();
    let corpus = data.corpus();
    let all: Vec<u8> = corpus.train.iter().chain(&corpus.eval).map(|&t| t as u8).collect();
    assert_eq!(all, text.as_bytes());
}

/// Unigram cross-entropy of the evaluation tokens under the training frequencies (add-one
/// smoothed), in bits per token: what a model that ignores context can reach.
fn unigram_bits(train: &[u32], eval: &[u32]) -> f64 {
    let mut counts = vec![1.0f64; 256];
    for &t in train {
        counts[t as usize] += 1.0;
    }
    let total: f64 = counts.iter().sum();
    eval.iter().map(|&t| -(counts[t as usize] / total).log2()).sum::<f64>() / eval.len() as f64
}

/// A model without attention (embedding straight into the head: a bigram model) trained for
/// 60 AdamW steps on the generated corpus gets well under 8 bits per byte (uniform bytes) and
/// under the unigram entropy of the text.
#[test]
fn a_tiny_causal_model_learns_below_chance() {
    let data = LanguageData::new(&small(&[]), 1).unwrap();
    let (map, model) = build_task_model(&data, 32);
    let eval = data.eval_batches(64, 64, &Device::Cpu).unwrap();
    let before = evaluate_all(&*model, &eval).means()["bpb"];
    train_on_task(&data, &*model, |h, _| h.clone(), map.all_vars(), 0.03, 60, 32);
    let after = evaluate_all(&*model, &eval).means();
    let corpus = data.corpus();
    let eval_targets: Vec<u32> = eval.iter().flat_map(|b| rows(&b.targets).concat()).collect();
    let unigram = unigram_bits(&corpus.train, &eval_targets);
    assert!((before - 8.0).abs() < 0.1, "an untrained model should sit near 8 bits per byte, not {before}");
    assert!(after["bpb"] < unigram - 0.5, "bpb {} is not below the unigram entropy {unigram}", after["bpb"]);
    assert!(after["ppl"] < 2f64.powf(unigram) && after["acc"] > 0.2, "{after:?}");
}
