//! examples/c/train_mlp.c in Rust: an MLP learns a synthetic regression in several processes started
//! by `acc launch`, evaluates with `gather_for_metrics`, and the main process saves the weights. For
//! the same recipe its final parameters equal the C program's.
//!
//! ```text
//! acc launch --num_processes 2 target/debug/train_mlp OUT.safetensors [STEPS]
//! ```
use acc::{Accelerator, DataLoader, Dataset, Model, Optimizer, ReduceOp, Scheduler, Tensor};

const FEATURES: u32 = 4;
const TRAIN: u32 = 512;
const EVAL: u32 = 100;

/// Exact in f32: an integer hash (mod 2^32), scaled by a power of two.
fn feature(i: u32, j: u32) -> f32 {
    let h = (i * 4 + j).wrapping_mul(2654435761);
    (((h >> 24) as f64 - 128.0) / 64.0) as f32
}

/// Samples [first, first + n): inputs [n, 4], targets [n, 1].
fn make_dataset(first: u32, n: u32) -> acc::Result<Dataset> {
    let mut x = Vec::with_capacity((FEATURES * n) as usize);
    let mut y = Vec::with_capacity(n as usize);
    for k in 0..n {
        let f: Vec<f64> = (0..FEATURES).map(|j| feature(first + k, j) as f64).collect();
        x.extend(f.iter().map(|&v| v as f32));
        y.push((f[0] * f[1] - f[2] / 2.0 + f[3] * f[3] / 4.0) as f32);
    }
    let tx = Tensor::from_slice(&x, &[n as i64, FEATURES as i64])?;
    let ty = Tensor::from_slice(&y, &[n as i64, 1])?;
    Dataset::from_tensors(&tx, Some(&ty))
}

fn run(out_path: &str, steps: usize) -> acc::Result<()> {
    let accel = Accelerator::new(r#"{"seed": 1234}"#)?;
    let is_main = accel.is_main_process()?;
    let world = accel.num_processes()?;

    let train_ds = make_dataset(0, TRAIN)?;
    let eval_ds = make_dataset(TRAIN, EVAL)?;
    let train_dl = DataLoader::new(&train_ds, r#"{"batch_size": 16, "shuffle": true, "seed": 7}"#)?;
    let eval_dl = DataLoader::new(&eval_ds, r#"{"batch_size": 16}"#)?;
    let model = Model::new(r#"{"type": "mlp", "sizes": [4, 32, 32, 1], "activation": "tanh", "loss": "mse"}"#)?;
    let opt = Optimizer::new(&model, r#"{"type": "adamw", "lr": 0.01, "weight_decay": 0.01}"#)?;
    let sched = Scheduler::new(
        &opt,
        &format!(r#"{{"type": "cosine", "warmup_steps": 5, "total_steps": {steps}}}"#),
    )?;
    accel.prepare(Some(&model), Some(&opt), Some(&sched), Some(&train_dl))?;
    accel.prepare(None, None, None, Some(&eval_dl))?;

    // Train: a fixed number of optimizer steps, starting a new epoch whenever the loader runs out.
    let mut last_loss = 0.0;
    let mut step = 0;
    while step < steps {
        let Some(batch) = train_dl.next()? else { continue };
        let loss = model.loss(&batch.input, batch.target.as_ref())?;
        accel.backward(&loss)?;
        opt.step()?;
        sched.step()?;
        opt.zero_grad()?;
        step += 1;
        if step == steps {
            last_loss = accel.reduce(&loss, ReduceOp::Mean)?.item()?;
        }
    }

    // Evaluate: every process predicts its shard; gather_for_metrics drops the padding duplicates.
    model.set_training(false)?;
    let (mut sq_sum, mut seen) = (0.0f64, 0usize);
    while let Some(batch) = eval_dl.next()? {
        let pred = model.predict(&batch.input)?;
        let p = accel.gather_for_metrics(&pred)?.to_vec::<f32>()?;
        let target = batch.target.as_ref().expect("the evaluation set has targets");
        let t = accel.gather_for_metrics(target)?.to_vec::<f32>()?;
        sq_sum += p
            .iter()
            .zip(&t)
            .map(|(&p, &t)| (p as f64 - t as f64).powi(2))
            .sum::<f64>();
        seen += p.len();
    }

    if is_main {
        model.save_safetensors(out_path)?;
        println!("processes: {world}, steps: {steps}");
        println!("eval mse: {:.6} over {seen} samples", sq_sum / seen as f64);
        println!("final loss: {last_loss:.6}");
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !(2..=3).contains(&args.len()) {
        eprintln!("usage: train_mlp OUT.safetensors [STEPS]");
        std::process::exit(2);
    }
    let steps = args.get(2).map_or(100, |s| s.parse().expect("STEPS must be a number"));
    if let Err(e) = run(&args[1], steps) {
        eprintln!("train_mlp: {e}");
        std::process::exit(1);
    }
}
