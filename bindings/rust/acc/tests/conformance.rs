//! The shared conformance scenarios (tests/bindings/scenarios.txt), in Rust.
use std::error::Error as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use acc::{
    Accelerator, DType, DataLoader, Dataset, ErrorCode, Model, NamedBatch, Optimizer, ReduceOp, Scheduler, Tensor,
};

/// `r` failed with `code` and a message naming `needle`.
#[track_caller]
fn expect_err<T: std::fmt::Debug>(r: acc::Result<T>, code: ErrorCode, needle: &str) -> acc::Error {
    match r {
        Ok(v) => panic!("expected {code:?} naming {needle:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.code(), code, "code of {e}");
            assert_eq!(e.status(), code.status());
            assert!(e.message().contains(needle), "expected {needle:?} in {:?}", e.message());
            e
        }
    }
}

// scenario: library
#[test]
fn library() {
    assert_eq!(acc::version().matches('.').count(), 2);
    acc::check_abi().unwrap();
    expect_err(
        acc::check_abi_version(acc::ABI_VERSION + 1),
        ErrorCode::AbiMismatch,
        "built for ABI 2",
    );
    assert!(acc::build_info().contains("\"torch\""));
    assert_eq!(
        acc::status_name(ErrorCode::InvalidConfig.status()),
        "ACC_ERR_INVALID_CONFIG"
    );
    assert_eq!(acc::status_name(999), "ACC_ERR_UNKNOWN");
    assert_eq!(ErrorCode::from_status(999), ErrorCode::Internal);
    fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<acc::Error>();
}

// scenario: create
#[test]
fn create() {
    let a = Accelerator::new("").unwrap();
    assert_eq!(a.device().unwrap(), "cpu");
    assert_eq!(a.distributed_type().unwrap(), "NO");
    assert_eq!(a.process_index().unwrap(), 0);
    assert_eq!(a.local_process_index().unwrap(), 0);
    assert_eq!(a.num_processes().unwrap(), 1);
    assert!(a.is_main_process().unwrap());
    assert!(a.config_json().unwrap().contains("bucket_cap_mb"));
    let b = Accelerator::new(r#"{"seed": 3, "cpu": true}"#).unwrap();
    assert_eq!(b.num_processes().unwrap(), 1);
}

// scenario: bad_config
#[test]
fn bad_config() {
    expect_err(
        Accelerator::new(r#"{"gradient_acumulation_steps": 2}"#),
        ErrorCode::InvalidConfig,
        "gradient_accumulation_steps",
    );
    expect_err(
        Accelerator::new(r#"{"mixed_precision": "fp32"}"#),
        ErrorCode::InvalidConfig,
        "bf16",
    );
    expect_err(Accelerator::new(r#"{"cpu": true"#), ErrorCode::InvalidConfig, "JSON");
    expect_err(
        Model::new(r#"{"type": "mlp", "sizes": [2, 1], "layers": 3}"#),
        ErrorCode::InvalidConfig,
        "unknown key 'layers'",
    );
    expect_err(Model::new("{\"type\": \"mlp\0\"}"), ErrorCode::InvalidArgument, "NUL");
}

/// Errors are read on the thread that made the call: many threads failing at once each see their own.
#[test]
fn errors_stay_with_their_thread() {
    let threads: Vec<_> = (0..8)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..50 {
                    let key = format!("no_such_key_{t}_{i}");
                    let spec = format!(r#"{{"type": "mlp", "sizes": [2, 1], "{key}": 1}}"#);
                    expect_err(Model::new(&spec), ErrorCode::InvalidConfig, &key);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

// scenario: null_handle
// Rust handles are never NULL: a missing object is `None`, and libacc's NULL checks answer for it.
// Raw NULL pointers through acc-sys get the same codes and messages.
#[test]
fn null_handle() {
    let a = Accelerator::new("").unwrap();
    expect_err(
        a.prepare(None, None, None, None),
        ErrorCode::InvalidArgument,
        "nothing to prepare",
    );
    unsafe {
        let mut n = 0;
        let st = acc::sys::acc_process_index(std::ptr::null(), &mut n);
        assert_eq!(st, acc::sys::ACC_ERR_INVALID_ARGUMENT);
        let msg = std::ffi::CStr::from_ptr(acc::sys::acc_last_error_message())
            .to_str()
            .unwrap();
        assert!(msg.contains("accelerator is NULL"), "{msg}");
        assert_eq!(
            acc::sys::acc_optimizer_step(std::ptr::null_mut()),
            acc::sys::ACC_ERR_INVALID_ARGUMENT
        );
        acc::sys::acc_model_destroy(std::ptr::null_mut()); // destroy accepts NULL
    }
}

// scenario: closed_handle
// Dropping is closing; the borrow checker rejects every use after it (see the compile_fail doc test
// in the crate docs). Moving a handle into a drop and using the moved-from value does not compile.
#[test]
fn closed_handle() {
    let m = Model::new(r#"{"type": "mlp", "sizes": [2, 1]}"#).unwrap();
    let o = Optimizer::new(&m, r#"{"type": "sgd"}"#).unwrap();
    drop(m); // the optimizer keeps the model alive inside libacc
    o.step().unwrap();
}

fn regression(n: usize) -> Dataset {
    let mut x = vec![0f32; 2 * n];
    let mut y = vec![0f32; n];
    for i in 0..n {
        x[2 * i] = (i as f64 * 0.37).sin() as f32;
        x[2 * i + 1] = (i as f64 * 0.11).cos() as f32;
        y[i] = 3.0 * x[2 * i] - 2.0 * x[2 * i + 1] + 1.0;
    }
    let tx = Tensor::from_slice(&x, &[n as i64, 2]).unwrap();
    let ty = Tensor::from_slice(&y, &[n as i64, 1]).unwrap();
    Dataset::from_tensors(&tx, Some(&ty)).unwrap()
}

// scenario: call_order
#[test]
fn call_order() {
    let a = Accelerator::new(r#"{"seed": 7}"#).unwrap();
    let m = Model::new(r#"{"type": "mlp", "sizes": [2, 8, 1]}"#).unwrap();
    let other = Model::new(r#"{"type": "mlp", "sizes": [2, 1]}"#).unwrap();
    let o = Optimizer::new(&m, r#"{"type": "sgd", "lr": 0.1}"#).unwrap();
    let other_opt = Optimizer::new(&other, r#"{"type": "sgd"}"#).unwrap();
    expect_err(
        a.prepare(None, Some(&other_opt), None, None),
        ErrorCode::InvalidState,
        "model is not prepared",
    );
    expect_err(
        a.prepare(None, None, None, None),
        ErrorCode::InvalidArgument,
        "nothing to prepare",
    );
    a.prepare(Some(&m), Some(&o), None, None).unwrap();
    expect_err(
        a.prepare(Some(&m), None, None, None),
        ErrorCode::InvalidState,
        "already prepared",
    );
    expect_err(
        Scheduler::new(&o, r#"{"type": "cosine"}"#),
        ErrorCode::InvalidConfig,
        "total_steps",
    );
}

// scenario: tensor_errors
#[test]
fn tensor_errors() {
    expect_err(
        Tensor::from_bytes(&[0; 12], DType::Float32, &[4]),
        ErrorCode::InvalidArgument,
        "nbytes",
    );
    let t = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0], &[4]).unwrap();
    expect_err(t.item(), ErrorCode::InvalidArgument, "one-element");
    expect_err(t.copy_to(&mut [0u8; 8]), ErrorCode::InvalidArgument, "nbytes");
    expect_err(t.to_vec::<i64>(), ErrorCode::InvalidArgument, "not Int64");
    let a = Accelerator::new("").unwrap();
    let m = Model::new(r#"{"type": "mlp", "sizes": [4, 1]}"#).unwrap();
    let x = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[2, 4]).unwrap();
    let out = m.predict(&x).unwrap();
    expect_err(a.backward(&out), ErrorCode::InvalidArgument, "one element");
    let plain = Tensor::from_slice(&[1f32], &[1, 1]).unwrap();
    expect_err(a.backward(&plain), ErrorCode::InvalidArgument, "autograd graph");
}

// scenario: dtype_roundtrip
#[test]
fn dtype_roundtrip() {
    for d in DType::ALL {
        let data: Vec<u8> = (0..6 * d.size())
            .map(|i| {
                if d == DType::Bool {
                    (i % 2) as u8
                } else {
                    ((i * 7 + 3) % 64) as u8
                }
            })
            .collect();
        let t = Tensor::from_bytes(&data, d, &[2, 3]).unwrap();
        assert_eq!(t.dtype().unwrap(), d);
        assert_eq!(t.shape().unwrap(), vec![2, 3]);
        assert_eq!(t.numel().unwrap(), 6);
        assert_eq!(t.nbytes().unwrap(), data.len());
        assert_eq!(t.to_bytes().unwrap(), data, "{d:?}");
    }
    let s = Tensor::scalar(2.5f64).unwrap();
    assert!(s.shape().unwrap().is_empty());
    assert_eq!(s.item().unwrap(), 2.5);
    assert_eq!(
        Tensor::from_slice(&[-1i64, 1 << 40], &[2])
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        vec![-1, 1 << 40]
    );
    assert_eq!(
        Tensor::from_slice(&[-7i32, 9], &[2]).unwrap().to_vec::<i32>().unwrap(),
        vec![-7, 9]
    );
    assert_eq!(
        Tensor::from_slice(&[true, false], &[2])
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![true, false]
    );
    assert_eq!(
        Tensor::from_slice(&[3u8, 250], &[2]).unwrap().to_vec::<u8>().unwrap(),
        vec![3, 250]
    );
}

// scenario: zero_copy
#[test]
fn zero_copy() {
    // In: a Vec is moved into the tensor without a copy; the view sees the same address.
    let v = vec![1f32, 2.0, 3.0, 4.0];
    let addr = v.as_ptr() as usize;
    let t = Tensor::from_vec(v, &[2, 2]).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    let mut view = t.view().unwrap();
    assert_eq!(
        view.as_bytes().as_ptr() as usize,
        addr,
        "the tensor does not view the vector"
    );
    assert_eq!(view.shape(), &[2, 2]);
    // Out: writes through the view show in the tensor.
    view.as_bytes_mut()[..4].copy_from_slice(&5f32.to_ne_bytes());
    assert_eq!(t.to_vec::<f32>().unwrap()[0], 5.0);
    drop(t); // the view keeps the memory alive
    assert_eq!(view.as_slice::<f32>().unwrap(), &[5.0, 2.0, 3.0, 4.0]);
    assert!(view.as_slice::<i32>().is_none());
    drop(view);
    expect_err(
        Tensor::from_vec(vec![1f32; 3], &[2, 2]),
        ErrorCode::InvalidArgument,
        "does not hold",
    );
}

// scenario: train
#[test]
fn train() {
    let a = Accelerator::new(r#"{"seed": 7}"#).unwrap();
    let ds = regression(64);
    let dl = DataLoader::new(&ds, r#"{"batch_size": 16, "shuffle": true, "seed": 3}"#).unwrap();
    let m = Model::new(r#"{"type": "mlp", "sizes": [2, 16, 1], "activation": "tanh"}"#).unwrap();
    let o = Optimizer::new(&m, r#"{"type": "adam", "lr": 0.05}"#).unwrap();
    let s = Scheduler::new(&o, r#"{"type": "linear", "warmup_steps": 2, "total_steps": 100}"#).unwrap();
    a.prepare(Some(&m), Some(&o), Some(&s), Some(&dl)).unwrap();
    assert_eq!(dl.len().unwrap(), 4);
    let (mut first, mut last, mut steps) = (-1.0, 0.0, 0);
    for _ in 0..25 {
        while let Some(b) = dl.next().unwrap() {
            let loss = m.loss(&b.input, b.target.as_ref()).unwrap();
            last = loss.item().unwrap();
            if first < 0.0 {
                first = last;
            }
            a.backward(&loss).unwrap();
            o.step().unwrap();
            s.step().unwrap();
            o.zero_grad().unwrap();
            steps += 1;
        }
    }
    assert_eq!(steps, 100);
    assert!(last < first * 0.05, "loss {first} -> {last}");
    assert!(s.last_lr().unwrap().abs() < 1e-12);
    assert!(o.lr().unwrap().abs() < 1e-12);
    assert_eq!(m.num_parameters().unwrap(), 2 * 16 + 16 + 16 + 1);
}

// scenario: gather
#[test]
fn gather() {
    let a = Accelerator::new("").unwrap();
    let x = Tensor::from_slice(&[1f32, 2.0], &[2]).unwrap();
    assert_eq!(a.gather(&x).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
        assert_eq!(a.reduce(&x, op).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    }
    a.wait_for_everyone().unwrap();
    let vals: Vec<f32> = (0..37).map(|i| i as f32).collect();
    let all = Tensor::from_slice(&vals, &[37]).unwrap();
    let ds = Dataset::from_tensors(&all, None).unwrap();
    let dl = DataLoader::new(&ds, r#"{"batch_size": 8}"#).unwrap();
    a.prepare(None, None, None, Some(&dl)).unwrap();
    let mut seen = 0;
    while let Some(b) = dl.next().unwrap() {
        assert!(b.target.is_none());
        for v in a.gather_for_metrics(&b.input).unwrap().to_vec::<f32>().unwrap() {
            assert_eq!(v, seen as f32);
            seen += 1;
        }
    }
    assert_eq!(seen, 37);
    // Objects: byte strings the caller serializes.
    let objs = a.gather_object(&[br#"{"id": 1}"#, b"", b"x"]).unwrap();
    assert_eq!(objs, vec![br#"{"id": 1}"#.to_vec(), vec![], b"x".to_vec()]);
    assert!(a.gather_object(&[]).unwrap().is_empty());
}

/// Gradient accumulation: with 2 steps, every second micro-step synchronizes and steps the optimizer.
#[test]
fn accumulate() {
    let a = Accelerator::new(r#"{"seed": 5, "gradient_accumulation_steps": 2}"#).unwrap();
    a.set_seed(5, false, false).unwrap();
    let x = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[4, 2]).unwrap();
    let y = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0], &[4, 1]).unwrap();
    let ds = Dataset::from_tensors(&x, Some(&y)).unwrap();
    let dl = DataLoader::new(&ds, r#"{"batch_size": 1}"#).unwrap();
    let m = Model::new(r#"{"type": "mlp", "sizes": [2, 1]}"#).unwrap();
    let o = Optimizer::new(&m, r#"{"type": "sgd", "lr": 0.1}"#).unwrap();
    a.prepare(Some(&m), Some(&o), None, Some(&dl)).unwrap();
    let weight = || m.state_dict().unwrap()[0].1.to_bytes().unwrap();
    let (mut syncs, mut changed) = (vec![], vec![]);
    while let Some(b) = dl.next().unwrap() {
        let before = weight();
        a.accumulate(&m, || {
            syncs.push(a.sync_gradients()?);
            let loss = m.loss(&b.input, b.target.as_ref())?;
            a.backward(&loss)?;
            assert!(a.clip_grad_norm(&m, 100.0, 2.0)? > 0.0);
            o.step()?;
            o.zero_grad()
        })
        .unwrap();
        changed.push(weight() != before);
        assert!(!o.step_was_skipped().unwrap());
    }
    assert_eq!(syncs, [false, true, false, true]);
    assert_eq!(changed, [false, true, false, true]);
    // The scope closes even when the step fails, and the step's error comes back.
    let e = a.accumulate(&m, || -> acc::Result<()> {
        Err(acc::Error::new(ErrorCode::Internal, "step failed"))
    });
    assert_eq!(e.unwrap_err().message(), "step failed");
    assert_eq!(a.broadcast(&y, 0).unwrap().to_vec::<f32>().unwrap()[3], 4.0);
    a.clip_grad_value(&m, 1.0).unwrap();
}

/// Resuming mid-epoch: a loader that skips the first batches yields the rest of the same pass.
#[test]
fn skip_first_batches() {
    let vals: Vec<f32> = (0..10).map(|i| i as f32).collect();
    let all = Tensor::from_slice(&vals, &[10]).unwrap();
    let ds = Dataset::from_tensors(&all, None).unwrap();
    let dl = DataLoader::new(&ds, r#"{"batch_size": 2}"#).unwrap();
    let skip = dl.skip_first_batches(3).unwrap();
    let mut got = vec![];
    while let Some(b) = skip.next().unwrap() {
        got.extend(b.input.to_vec::<f32>().unwrap());
    }
    assert_eq!(got, vec![6.0, 7.0, 8.0, 9.0]);
    assert_eq!(dl.epoch().unwrap(), 0);
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = vec![];
    for p in permutations(n - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, n - 1);
            out.push(q);
        }
    }
    out
}

// scenario: destroy_orders
#[test]
fn destroy_orders() {
    let x = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[4, 2]).unwrap();
    let y = Tensor::from_slice(&[1f32, 2.0, 3.0, 4.0], &[4, 1]).unwrap();
    let orders = permutations(6);
    assert_eq!(orders.len(), 720);
    for order in orders {
        let mut a = Some(Accelerator::new("").unwrap());
        let mut m = Some(Model::new(r#"{"type": "mlp", "sizes": [2, 1]}"#).unwrap());
        let mut o = Some(Optimizer::new(m.as_ref().unwrap(), r#"{"type": "sgd", "lr": 0.1}"#).unwrap());
        let mut s = Some(Scheduler::new(o.as_ref().unwrap(), r#"{"type": "constant"}"#).unwrap());
        let mut ds = Some(Dataset::from_tensors(&x, Some(&y)).unwrap());
        let mut dl = Some(DataLoader::new(ds.as_ref().unwrap(), r#"{"batch_size": 2}"#).unwrap());
        a.as_ref()
            .unwrap()
            .prepare(m.as_ref(), o.as_ref(), s.as_ref(), dl.as_ref())
            .unwrap();
        for h in order {
            match h {
                0 => drop(a.take()),
                1 => drop(m.take()),
                2 => drop(o.take()),
                3 => drop(s.take()),
                4 => drop(ds.take()),
                _ => drop(dl.take()),
            }
            if let Some(dl) = &dl {
                dl.next().unwrap();
            }
            if let Some(m) = &m {
                m.num_parameters().unwrap();
            }
            if let Some(o) = &o {
                o.step().unwrap();
            }
            if let Some(s) = &s {
                s.step().unwrap();
            }
            if let Some(ds) = &ds {
                ds.len().unwrap();
            }
            if let Some(a) = &a {
                a.num_processes().unwrap();
            }
        }
    }
}

// scenario: safetensors
#[test]
fn safetensors() {
    let dir = std::env::temp_dir().join(format!("acc-rust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mlp.safetensors");
    let path = path.to_str().unwrap();
    let spec = r#"{"type": "mlp", "sizes": [2, 16, 1], "activation": "tanh"}"#;
    let m = Model::new(spec).unwrap();
    m.save_safetensors(path).unwrap();
    let c = Model::new(spec).unwrap();
    c.load_safetensors(path).unwrap();
    let (a, b) = (m.state_dict().unwrap(), c.state_dict().unwrap());
    assert_eq!(a.len(), 4);
    for ((na, ta), (nb, tb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        assert_eq!(ta.to_bytes().unwrap(), tb.to_bytes().unwrap());
    }
    let other = Model::new(r#"{"type": "mlp", "sizes": [2, 1]}"#).unwrap();
    expect_err(other.load_safetensors(path), ErrorCode::InvalidArgument, "shape");
    expect_err(
        other.load_safetensors("/nonexistent.safetensors"),
        ErrorCode::Io,
        "cannot open",
    );
    expect_err(
        Dataset::from_token_file("/nonexistent/train.bin", r#"{"block_size": 8}"#),
        ErrorCode::Io,
        "/nonexistent/train.bin",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// scenario: save_model
#[test]
fn save_model() {
    let dir = std::env::temp_dir().join(format!("acc-rust-save-model-{}", std::process::id()));
    let d = dir.to_str().unwrap();
    let spec = r#"{"type": "mlp", "sizes": [2, 16, 1], "activation": "tanh"}"#;
    let m = Model::new(spec).unwrap();
    m.save_model(d, None).unwrap();
    let c = Model::new(spec).unwrap();
    c.load_safetensors(dir.join("model.safetensors").to_str().unwrap())
        .unwrap();
    for ((na, ta), (nb, tb)) in m.state_dict().unwrap().iter().zip(&c.state_dict().unwrap()) {
        assert_eq!(na, nb);
        assert_eq!(ta.to_bytes().unwrap(), tb.to_bytes().unwrap());
    }
    m.save_model(d, Some("100")).unwrap();
    assert!(dir.join("model.safetensors.index.json").exists());
    let shards: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("model-00001-of-"))
        .collect();
    assert_eq!(shards.len(), 1, "{shards:?}");
    assert!(!dir.join("model.safetensors").exists());
    expect_err(m.save_model(d, Some("10XB")), ErrorCode::InvalidArgument, "10XB");
    std::fs::remove_dir_all(&dir).unwrap();
}

// scenario: callback_dataset
#[test]
fn callback_dataset() {
    let dropped = Arc::new(AtomicUsize::new(0));
    struct Guard(Arc<AtomicUsize>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let guard = Guard(dropped.clone());
    let ds = Dataset::from_fn(8, move |i| {
        let _keep = &guard;
        if i == 5 {
            return Err(format!("no sample {i}"));
        }
        let x = Tensor::from_slice(&[i as f32, i as f32], &[2]).map_err(|e| e.to_string())?;
        let y = Tensor::scalar(2.0 * i as f32).map_err(|e| e.to_string())?;
        Ok((x, Some(y)))
    })
    .unwrap();
    assert_eq!(ds.len().unwrap(), 8);
    let dl = DataLoader::new(&ds, r#"{"batch_size": 4}"#).unwrap();
    drop(ds); // the loader keeps it
    let b = dl.next().unwrap().unwrap();
    assert_eq!(b.input.to_vec::<f32>().unwrap()[6], 3.0);
    assert_eq!(b.target.unwrap().to_vec::<f32>().unwrap()[3], 6.0);
    let e = expect_err(dl.next(), ErrorCode::Callback, "index 5");
    assert_eq!(e.source().unwrap().to_string(), "no sample 5");
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    drop(dl);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the closure is dropped with the last loader"
    );

    // A panic in the callback does not cross the C ABI: it resumes in the caller of next().
    let pds = Dataset::from_fn(2, |_| -> Result<(Tensor, Option<Tensor>), String> { panic!("boom") }).unwrap();
    let pdl = DataLoader::new(&pds, "").unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pdl.next()));
    let payload = caught.expect_err("the panic should resume");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
    expect_err(
        Dataset::from_fn(-1, |_| -> Result<(Tensor, Option<Tensor>), String> { unreachable!() }),
        ErrorCode::InvalidArgument,
        "length",
    );
}

const GPT: &str = r#"{"type": "gpt", "vocab_size": 7, "block_size": 3, "n_layer": 1, "n_head": 1, "n_embd": 8}"#;

/// The "loss" of a forward_batch result: finite and > 0; its "logits" are [rows, 3, 7].
#[track_caller]
fn check_gpt_outputs(out: &NamedBatch, rows: i64) -> f64 {
    assert!(
        out.contains("loss").unwrap() && out.contains("logits").unwrap(),
        "{out:?}"
    );
    let loss = out.get("loss").unwrap().item().unwrap();
    assert!(loss.is_finite() && loss > 0.0, "loss {loss}");
    assert_eq!(out.get("logits").unwrap().shape().unwrap(), vec![rows, 3, 7]);
    loss
}

// scenario: named_batch
#[test]
fn named_batch() {
    // The handle: insertion order, replacement in place, shared data.
    let ids = Tensor::from_slice(&[0i64, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4], &[4, 3]).unwrap();
    let mask = Tensor::from_slice(&[1i64; 12], &[4, 3]).unwrap();
    let mut b = NamedBatch::new().unwrap();
    assert!(b.is_empty().unwrap());
    b.set("input_ids", &mask).unwrap();
    b.set("labels", &ids).unwrap();
    b.set("input_ids", &ids).unwrap(); // replaced in its place
    assert_eq!(b.len().unwrap(), 2);
    assert_eq!(b.names().unwrap(), ["input_ids", "labels"]);
    assert!(b.contains("labels").unwrap());
    assert!(!b.contains("attention_mask").unwrap());
    assert_eq!(b.get("input_ids").unwrap().to_vec::<i64>().unwrap()[4], 4);
    let entries: Vec<(String, Tensor)> = b.iter().collect::<acc::Result<_>>().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1].0, "labels");
    assert_eq!(entries[1].1.shape().unwrap(), vec![4, 3]);
    assert!(format!("{b:?}").contains("input_ids"));
    let e = expect_err(b.get("attention_mask"), ErrorCode::InvalidArgument, "attention_mask");
    assert!(e.message().contains("input_ids, labels"), "{}", e.message());
    expect_err(b.set("", &ids), ErrorCode::InvalidArgument, "empty");
    expect_err(b.get("a\0b"), ErrorCode::InvalidArgument, "NUL");

    // A dataset of named columns (copied: the batch may go), a loader, next_batch.
    let ds = Dataset::from_batch(&b).unwrap();
    drop(b);
    assert_eq!(ds.len().unwrap(), 4);
    let a = Accelerator::new(r#"{"seed": 5}"#).unwrap();
    let dl = DataLoader::new(&ds, r#"{"batch_size": 2}"#).unwrap();
    let m = Model::new(GPT).unwrap();
    let o = Optimizer::new(&m, r#"{"type": "adamw", "lr": 0.01}"#).unwrap();
    a.prepare(Some(&m), Some(&o), None, Some(&dl)).unwrap();
    let mut batches = 0;
    while let Some(batch) = dl.next_batch().unwrap() {
        assert_eq!(batch.names().unwrap(), ["input_ids", "labels"]);
        assert_eq!(batch.get("input_ids").unwrap().shape().unwrap(), vec![2, 3]);
        // forward_batch with Hugging Face's "labels": the loss is ready for backward.
        let out = m.forward_batch(&batch).unwrap();
        check_gpt_outputs(&out, 2);
        a.backward(&out.get("loss").unwrap()).unwrap();
        o.step().unwrap();
        o.zero_grad().unwrap();
        batches += 1;
    }
    assert_eq!(batches, 2);
    // A name the model does not take is refused by name; a batch without inputs too.
    let extra = NamedBatch::from_tensors([("input_ids", &ids), ("token_type_ids", &ids)]).unwrap();
    expect_err(m.forward_batch(&extra), ErrorCode::InvalidArgument, "token_type_ids");
    expect_err(
        m.forward_batch(&NamedBatch::new().unwrap()),
        ErrorCode::InvalidArgument,
        "input_ids",
    );
    // The (x, y) path still reads a named batch of two tensors.
    let pair = dl.next().unwrap().unwrap();
    assert_eq!(pair.input.shape().unwrap(), vec![2, 3]);
    assert!(pair.target.is_some());
}

// scenario: named_callback_dataset
#[test]
fn named_callback_dataset() {
    let dropped = Arc::new(AtomicUsize::new(0));
    struct Guard(Arc<AtomicUsize>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let guard = Guard(dropped.clone());
    // Sample i: {"input_ids": [i, i+1, i+2] mod 7, "labels": the same}; sample 5 fails.
    let ds = Dataset::from_batch_fn(6, move |i| {
        let _keep = &guard;
        if i == 5 {
            return Err(format!("no sample {i}"));
        }
        let ids = Tensor::from_slice(&[i % 7, (i + 1) % 7, (i + 2) % 7], &[3]).map_err(|e| e.to_string())?;
        NamedBatch::from_tensors([("input_ids", &ids), ("labels", &ids)]).map_err(|e| e.to_string())
    })
    .unwrap();
    assert_eq!(ds.len().unwrap(), 6);
    let dl = DataLoader::new(&ds, r#"{"batch_size": 2}"#).unwrap();
    drop(ds); // the loader keeps it
    let m = Model::new(GPT).unwrap();
    let b = dl.next_batch().unwrap().unwrap();
    assert_eq!(b.names().unwrap(), ["input_ids", "labels"]);
    assert_eq!(b.get("labels").unwrap().to_vec::<i64>().unwrap(), [0, 1, 2, 1, 2, 3]);
    check_gpt_outputs(&m.forward_batch(&b).unwrap(), 2);
    dl.next_batch().unwrap().unwrap();
    let e = expect_err(dl.next_batch(), ErrorCode::Callback, "index 5");
    assert_eq!(e.source().unwrap().to_string(), "no sample 5");
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    drop(dl);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the closure is dropped with the last loader"
    );

    // An empty sample is refused; a panic resumes in the caller of next_batch.
    let empty = Dataset::from_batch_fn(1, |_| NamedBatch::new()).unwrap();
    expect_err(
        DataLoader::new(&empty, "").unwrap().next_batch(),
        ErrorCode::Callback,
        "no tensor for index 0",
    );
    let pds = Dataset::from_batch_fn(2, |_| -> Result<NamedBatch, String> { panic!("boom") }).unwrap();
    let pdl = DataLoader::new(&pds, "").unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pdl.next_batch()));
    assert_eq!(
        caught.expect_err("the panic should resume").downcast_ref::<&str>(),
        Some(&"boom")
    );
}

/// Handles are Send: a loader and a model can move to another thread.
#[test]
fn handles_are_send() {
    let m = Model::new(r#"{"type": "mlp", "sizes": [2, 1]}"#).unwrap();
    let n = std::thread::spawn(move || m.num_parameters().unwrap()).join().unwrap();
    assert_eq!(n, 3);
}

// scenario: trackers
#[test]
fn trackers() {
    expect_err(
        Accelerator::new(r#"{"log_with": ["comet_ml"]}"#),
        ErrorCode::Unsupported,
        "comet_ml",
    );
    let dir = std::env::temp_dir().join(format!("acc-rust-trackers-{}", std::process::id()));
    let config = format!(
        r#"{{"log_with": ["jsonl", "csv"], "project_dir": "{}"}}"#,
        dir.display()
    );
    let a = Accelerator::new(&config).unwrap();
    expect_err(
        a.log(&[("loss", 1.0)], Some(0)),
        ErrorCode::InvalidState,
        "init_trackers",
    );
    a.init_trackers("rust", Some(r#"{"lr": 0.5, "opt": {"name": "sgd"}}"#), None)
        .unwrap();
    a.log(&[("loss", 0.5), ("lr", 0.25)], Some(1)).unwrap();
    a.log(&[("loss", f64::NAN)], None).unwrap();
    a.log_json(r#"{"note": "done", "acc": {"train": 1}}"#, Some(2)).unwrap();
    expect_err(a.log_json("[1]", Some(3)), ErrorCode::InvalidArgument, "JSON object");
    a.end_training().unwrap();
    let run = dir.join("rust");
    let lines: Vec<String> = std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].contains(r#""step": 1"#) && lines[0].contains(r#""values": {"loss": 0.5, "lr": 0.25}"#));
    assert!(lines[1].contains(r#""step": null"#) && lines[1].contains("NaN"));
    assert_eq!(
        std::fs::read_to_string(run.join("hparams.json")).unwrap(),
        "{\"lr\": 0.5, \"opt.name\": \"sgd\"}\n"
    );
    assert!(std::fs::read_to_string(run.join("metrics.csv"))
        .unwrap()
        .starts_with("step,time,loss,lr,"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The checkpoint scenario's objects: an accelerator with an MLP and AdamW prepared, and a counter
/// registered for checkpointing (saved as 8 little-endian bytes).
fn checkpointed(config: &str) -> (Accelerator, Model, Optimizer, Arc<AtomicUsize>) {
    let a = Accelerator::new(config).unwrap();
    let m = Model::new(r#"{"type": "mlp", "sizes": [2, 8, 1]}"#).unwrap();
    let o = Optimizer::new(&m, r#"{"type": "adamw", "lr": 0.01}"#).unwrap();
    a.prepare(Some(&m), Some(&o), None, None).unwrap();
    let counter = Arc::new(AtomicUsize::new(0));
    let (c1, c2) = (counter.clone(), counter.clone());
    a.register_for_checkpointing(
        move || Ok::<_, String>((c1.load(Ordering::SeqCst) as u64).to_le_bytes().to_vec()),
        move |bytes: &[u8]| -> Result<(), String> {
            let v: [u8; 8] = bytes.try_into().map_err(|_| format!("{} bytes", bytes.len()))?;
            c2.store(u64::from_le_bytes(v) as usize, Ordering::SeqCst);
            Ok(())
        },
    )
    .unwrap();
    (a, m, o, counter)
}

/// One AdamW step of the checkpoint scenario on fixed data.
fn checkpoint_step(a: &Accelerator, m: &Model, o: &Optimizer) {
    let x = Tensor::from_slice(&[0.5f32, -1.0, 1.5, 2.0, -0.25, 0.75, 1.0, 0.0], &[4, 2]).unwrap();
    let y = Tensor::from_slice(&[1.0f32, -1.0, 0.5, 2.0], &[4, 1]).unwrap();
    let loss = m.loss(&x, Some(&y)).unwrap();
    a.backward(&loss).unwrap();
    o.step().unwrap();
    o.zero_grad().unwrap();
}

fn first_parameter(m: &Model) -> Vec<u8> {
    m.state_dict().unwrap()[0].1.to_bytes().unwrap()
}

// scenario: checkpoint
#[test]
fn checkpoint() {
    let root = std::env::temp_dir().join(format!("acc-rust-checkpoint-{}", std::process::id()));
    let dir = root.join("step_3");
    let dir = dir.to_str().unwrap();
    let (a, m, o, counter) = checkpointed(r#"{"seed": 11}"#);
    for _ in 0..3 {
        checkpoint_step(&a, &m, &o);
        counter.fetch_add(1, Ordering::SeqCst);
    }
    a.save_state(Some(dir)).unwrap();
    assert!(root.join("step_3/manifest.json").exists());
    assert!(root.join("step_3/custom_checkpoint_0.bin").exists());

    let (b, m2, o2, counter2) = checkpointed(r#"{"seed": 12}"#);
    assert_ne!(first_parameter(&m2), first_parameter(&m));
    b.load_state(Some(dir)).unwrap();
    assert_eq!(first_parameter(&m2), first_parameter(&m));
    assert_eq!(counter2.load(Ordering::SeqCst), 3);
    // The optimizer's moments came back too: one more step agrees bit for bit.
    checkpoint_step(&a, &m, &o);
    checkpoint_step(&b, &m2, &o2);
    assert_eq!(first_parameter(&m2), first_parameter(&m));

    // A missing directory is refused naming it; a directory without a checkpoint, naming its manifest.
    let missing = root.join("missing");
    let missing = missing.to_str().unwrap();
    expect_err(b.load_state(Some(missing)), ErrorCode::Io, missing);
    std::fs::create_dir_all(root.join("empty")).unwrap();
    expect_err(
        b.load_state(Some(root.join("empty").to_str().unwrap())),
        ErrorCode::Io,
        "manifest.json",
    );
    // Automatic naming needs a project configuration.
    expect_err(
        b.save_state(None),
        ErrorCode::InvalidArgument,
        "automatic_checkpoint_naming",
    );
    expect_err(b.load_state(None), ErrorCode::InvalidArgument, "project_dir");
    expect_err(b.save_state(Some("a\0b")), ErrorCode::InvalidArgument, "NUL");

    // A failing save closure fails save_state with CALLBACK, its error as the source; a panic resumes.
    let fail = Accelerator::new("").unwrap();
    fail.register_for_checkpointing(
        || Err::<Vec<u8>, _>("disk of the counter is full"),
        |_: &[u8]| Ok::<_, String>(()),
    )
    .unwrap();
    let e = expect_err(
        fail.save_state(Some(root.join("failed").to_str().unwrap())),
        ErrorCode::Callback,
        "save callback",
    );
    assert_eq!(e.source().unwrap().to_string(), "disk of the counter is full");
    assert!(!root.join("failed/manifest.json").exists());
    let boom = Accelerator::new("").unwrap();
    boom.register_for_checkpointing(
        || -> Result<Vec<u8>, String> { panic!("boom") },
        |_: &[u8]| Ok::<_, String>(()),
    )
    .unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        boom.save_state(Some(root.join("boom").to_str().unwrap()))
    }));
    assert_eq!(
        caught.expect_err("the panic should resume").downcast_ref::<&str>(),
        Some(&"boom")
    );
    // A failing load closure: CALLBACK with its error as the source.
    let picky = Accelerator::new("").unwrap();
    let m3 = Model::new(r#"{"type": "mlp", "sizes": [2, 8, 1]}"#).unwrap();
    let o3 = Optimizer::new(&m3, r#"{"type": "adamw", "lr": 0.01}"#).unwrap();
    picky.prepare(Some(&m3), Some(&o3), None, None).unwrap();
    picky
        .register_for_checkpointing(|| Ok::<_, String>(Vec::new()), |_: &[u8]| Err::<(), _>("wrong version"))
        .unwrap();
    let e = expect_err(picky.load_state(Some(dir)), ErrorCode::Callback, "load callback");
    assert_eq!(e.source().unwrap().to_string(), "wrong version");

    // Automatic naming (ProjectConfiguration): save_state(None) / load_state(None).
    let project = root.join("project");
    let config = format!(
        r#"{{"seed": 11, "project_config": {{"automatic_checkpoint_naming": true, "project_dir": "{}"}}}}"#,
        project.display()
    );
    let (c, m4, _o4, counter4) = checkpointed(&config);
    counter4.store(7, Ordering::SeqCst);
    c.save_state(None).unwrap();
    assert!(project.join("checkpoints/checkpoint_0/manifest.json").exists());
    let (d, m5, o5, counter5) = checkpointed(&config);
    checkpoint_step(&d, &m5, &o5);
    d.load_state(None).unwrap();
    assert_eq!(counter5.load(Ordering::SeqCst), 7);
    assert_eq!(first_parameter(&m5), first_parameter(&m4));

    // "resume_from_checkpoint": "latest": nothing before the first save (a fresh start), then the
    // newest checkpoint, into a second accelerator with the same config.
    let resume = root.join("resume");
    let config = format!(
        r#"{{"seed": 13, "project_config": {{"project_dir": "{}", "automatic_checkpoint_naming": true}}, "resume_from_checkpoint": "latest"}}"#,
        resume.display()
    );
    let (e, m6, o6, counter6) = checkpointed(&config);
    assert!(!e.resume_from_checkpoint().unwrap());
    checkpoint_step(&e, &m6, &o6);
    counter6.store(5, Ordering::SeqCst);
    e.save_state(None).unwrap();
    let (f, m7, _o7, counter7) = checkpointed(&config);
    assert_ne!(first_parameter(&m7), first_parameter(&m6));
    assert!(f.resume_from_checkpoint().unwrap());
    assert_eq!(first_parameter(&m7), first_parameter(&m6));
    assert_eq!(counter7.load(Ordering::SeqCst), 5);

    // The closures are dropped once, when libacc lets go of the accelerator.
    assert_eq!(Arc::strong_count(&counter), 3);
    drop((a, m, o));
    assert_eq!(Arc::strong_count(&counter), 1);
    std::fs::remove_dir_all(&root).unwrap();
}

/// A Hugging Face fixture model directory of tests/hf (made by transformers).
fn hf_fixture(case: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../tests/hf/fixtures")
        .join(case)
        .join("model")
}

// scenario: hf_generate
#[test]
fn hf_generate() {
    let missing = hf_fixture("no-such-model");
    expect_err(
        Model::from_pretrained(missing.to_str().unwrap(), None),
        ErrorCode::Io,
        "no-such-model",
    );
    let dir = hf_fixture("llama");
    let m = Model::from_pretrained(dir.to_str().unwrap(), Some(r#"{"dtype": "float32"}"#)).unwrap();
    let prompt = [3i64, 17, 42, 8, 64];
    let x = Tensor::from_slice(&prompt, &[1, 5]).unwrap();
    let greedy = Some(r#"{"max_new_tokens": 6}"#);

    // Greedy, streaming every step to the closure.
    let mut seen: Vec<Vec<i64>> = Vec::new();
    let out = m
        .generate(
            &x,
            None,
            greedy,
            Some(&mut |t: &[i64]| {
                seen.push(t.to_vec());
                true
            }),
        )
        .unwrap();
    assert_eq!(out.shape().unwrap(), vec![1, 11]);
    let seq = out.to_vec::<i64>().unwrap();
    assert_eq!(&seq[..5], &prompt);
    assert_eq!(seen.len(), 6);
    assert!(seen.iter().all(|t| t.len() == 1));
    assert_eq!(seen[5][0], seq[10]);
    // Without a closure: the same tokens.
    assert_eq!(
        m.generate(&x, None, greedy, None).unwrap().to_vec::<i64>().unwrap(),
        seq
    );

    // The closure stops it after 2 steps.
    let mut calls = 0;
    let stopped = m
        .generate(
            &x,
            None,
            greedy,
            Some(&mut |_: &[i64]| {
                calls += 1;
                calls < 2
            }),
        )
        .unwrap();
    assert_eq!(calls, 2);
    assert_eq!(stopped.shape().unwrap(), vec![1, 7]);
    assert_eq!(stopped.to_vec::<i64>().unwrap()[..], seq[..7]);

    // A panic stops generating and resumes in the caller; the model stays usable.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        m.generate(&x, None, greedy, Some(&mut |_: &[i64]| panic!("boom")))
    }));
    assert_eq!(
        caught.expect_err("the panic should resume").downcast_ref::<&str>(),
        Some(&"boom")
    );
    let mask = Tensor::from_slice(&[1i64; 5], &[1, 5]).unwrap();
    assert_eq!(
        m.generate(&x, Some(&mask), greedy, None)
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        seq
    );

    // Bad options name the key.
    expect_err(
        m.generate(&x, None, Some(r#"{"top_p": 2}"#), None),
        ErrorCode::InvalidConfig,
        "top_p",
    );
}

// scenario: hf_save
#[test]
fn hf_save() {
    let config = r#"{"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 16,
        "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}"#;
    let m = Model::from_config(config, None).unwrap();
    let dir = std::env::temp_dir().join(format!("acc-rust-hf-save-{}", std::process::id()));
    m.save_pretrained(dir.to_str().unwrap(), None).unwrap();
    assert!(dir.join("config.json").is_file());
    assert!(dir.join("model.safetensors").is_file());
    let loaded = Model::from_pretrained(dir.to_str().unwrap(), None).unwrap();
    let x = Tensor::from_slice(&[1i64, 2, 3], &[1, 3]).unwrap();
    let greedy = Some(r#"{"max_new_tokens": 5}"#);
    let a = m.generate(&x, None, greedy, None).unwrap().to_vec::<i64>().unwrap();
    let b = loaded
        .generate(&x, None, greedy, None)
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    assert_eq!(a.len(), 8);
    assert_eq!(a, b);
    std::fs::remove_dir_all(&dir).unwrap();

    expect_err(
        Model::from_config(r#"{"architectures": ["T5Model"]}"#, None),
        ErrorCode::Unsupported,
        "T5Model",
    );
}

/// The integer after `"key": ` in a flat JSON object.
fn json_int(json: &str, key: &str) -> Option<i64> {
    let needle = format!("\"{key}\": ");
    let rest = &json[json.find(&needle)? + needle.len()..];
    let end = rest
        .find(|c: char| !c.is_ascii_digit() && c != '-')
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

// scenario: bigmodel
#[test]
fn bigmodel() {
    let config = r#"{"architectures": ["LlamaForCausalLM"], "vocab_size": 32000, "hidden_size": 4096,
        "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
        "max_position_embeddings": 4096, "tie_word_embeddings": false}"#;
    let m = Model::from_config(config, Some(r#"{"device": "meta", "dtype": "float16"}"#)).unwrap();
    let n = m.num_parameters().unwrap();
    assert_eq!(n, 6_738_415_616);
    // The weights and, as Accelerate counts them, rotary_emb's inv_freq and original_inv_freq (64 float32 each).
    let sizes = m.module_sizes(None).unwrap();
    assert_eq!(json_int(&sizes, ""), Some(2 * n + 512), "{sizes}");
    let sizes = m.module_sizes(Some("float32")).unwrap(); // as Accelerate: never wider than the tensor's own
    assert_eq!(json_int(&sizes, ""), Some(2 * n + 512));

    let map = m
        .infer_auto_device_map(Some(
            r#"{"device_map": "sequential", "max_memory": {"0": "5GiB", "1": "5GiB", "cpu": "64GB"}}"#,
        ))
        .unwrap();
    assert_eq!(json_int(&map, "model.embed_tokens"), Some(0), "{map}");
    assert_eq!(json_int(&map, "model.layers.20"), Some(1), "{map}");
    assert!(map.contains(r#""lm_head": "cpu""#), "{map}");
    expect_err(
        m.infer_auto_device_map(Some(r#"{"max_memory": {"npu0": "1GB"}}"#)),
        ErrorCode::InvalidConfig,
        "npu0",
    );
    expect_err(m.module_sizes(Some("int8")), ErrorCode::InvalidConfig, "int8");

    // Gradients off on this thread: a forward records no graph, so its loss cannot be backpropagated.
    let a = Accelerator::new("{}").unwrap();
    let small = Model::new(r#"{"type": "mlp", "sizes": [2, 1], "loss": "mse"}"#).unwrap();
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[1, 2]).unwrap();
    let y = Tensor::from_slice(&[3.0f32], &[1, 1]).unwrap();
    assert!(acc::set_grad_enabled(false).unwrap());
    let loss = small.loss(&x, Some(&y)).unwrap();
    expect_err(a.backward(&loss), ErrorCode::InvalidArgument, "grad");
    assert!(!acc::set_grad_enabled(true).unwrap());
    a.backward(&small.loss(&x, Some(&y)).unwrap()).unwrap();
    {
        let _guard = acc::NoGrad::new().unwrap();
        let loss = small.loss(&x, Some(&y)).unwrap();
        expect_err(a.backward(&loss), ErrorCode::InvalidArgument, "grad");
    }
    assert!(acc::set_grad_enabled(true).unwrap()); // the guard restored it
}

/// A model's parameters by name.
fn params(m: &Model) -> std::collections::HashMap<String, Vec<f32>> {
    m.state_dict()
        .unwrap()
        .into_iter()
        .map(|(name, t)| (name, t.to_vec::<f32>().unwrap()))
        .collect()
}

/// max |a[i] * scale - b[i]|
fn max_diff(a: &[f32], scale: f32, b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x * scale - y).abs()).fold(0.0, f32::max)
}

/// One forward, backward and step of a prepared MLP [2, 8, 1] on a fixed batch.
fn sgd_step(a: &Accelerator, m: &Model, o: &Optimizer) {
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, -1.0, 0.5, 2.0, -2.0], &[4, 2]).unwrap();
    let y = Tensor::from_slice(&[1.0f32, -1.0, 0.5, 2.0], &[4, 1]).unwrap();
    a.backward(&m.loss(&x, Some(&y)).unwrap()).unwrap();
    o.step().unwrap();
    o.zero_grad().unwrap();
}

const MLP_2_8_1: &str = r#"{"type": "mlp", "sizes": [2, 8, 1], "activation": "tanh", "loss": "mse"}"#;

// scenario: freeze
#[test]
fn freeze() {
    let a = Accelerator::new(r#"{"seed": 3}"#).unwrap();
    let m = Model::new(MLP_2_8_1).unwrap();
    assert_eq!(m.set_requires_grad(r"layers\.0\..*", false).unwrap(), 2);
    expect_err(
        m.set_requires_grad("nothing", false),
        ErrorCode::InvalidArgument,
        "nothing",
    );
    expect_err(
        Optimizer::new(
            &m,
            r#"{"type": "sgd", "param_groups": [{"params": "layers\\.0\\..*"}]}"#,
        ),
        ErrorCode::InvalidConfig,
        "selects no trainable parameter",
    );
    let o = Optimizer::new(&m, r#"{"type": "sgd", "lr": 0.1}"#).unwrap();
    a.prepare(Some(&m), Some(&o), None, None).unwrap();
    let before = params(&m);
    sgd_step(&a, &m, &o);
    let after = params(&m);
    for (name, v) in &before {
        let moved = max_diff(v, 1.0, &after[name]);
        assert_eq!(name.starts_with("layers.0."), moved == 0.0, "{name} moved by {moved}");
    }
    expect_err(
        m.set_requires_grad(r"layers\.0\..*", true),
        ErrorCode::InvalidState,
        "prepare",
    );
}

// scenario: param_groups
#[test]
fn param_groups() {
    let a = Accelerator::new(r#"{"seed": 3}"#).unwrap();
    let path = std::env::temp_dir().join(format!("acc-rust-groups-{}.safetensors", std::process::id()));
    let path = path.to_str().unwrap();
    let one = Model::new(MLP_2_8_1).unwrap();
    one.save_safetensors(path).unwrap();
    let grouped = Model::new(MLP_2_8_1).unwrap();
    grouped.load_safetensors(path).unwrap();
    std::fs::remove_file(path).unwrap();
    let o1 = Optimizer::new(&one, r#"{"type": "sgd", "lr": 0.1}"#).unwrap();
    let o2 = Optimizer::new(
        &grouped,
        r#"{"type": "sgd", "lr": 0.1, "param_groups": [{"params": ["layers\\.0\\..*"], "lr": 0.3}]}"#,
    )
    .unwrap();
    a.prepare(Some(&one), Some(&o1), None, None).unwrap();
    a.prepare(Some(&grouped), Some(&o2), None, None).unwrap();
    let start = params(&one);
    sgd_step(&a, &one, &o1);
    sgd_step(&a, &grouped, &o2);
    let (p1, p2) = (params(&one), params(&grouped));
    for (name, s) in &start {
        let d1: Vec<f32> = s.iter().zip(&p1[name]).map(|(s, p)| p - s).collect();
        let d2: Vec<f32> = s.iter().zip(&p2[name]).map(|(s, p)| p - s).collect();
        // The first group's lr is 3x the top-level one.
        let ratio = if name.starts_with("layers.0.") { 3.0 } else { 1.0 };
        let diff = max_diff(&d1, ratio, &d2);
        assert!(
            diff <= 1e-6 && d1.iter().any(|d| *d != 0.0),
            "{name}: not {ratio}x (|diff| {diff})"
        );
    }
    expect_err(
        Optimizer::new(&one, r#"{"type": "sgd", "param_groups": [{"params": "nothing"}]}"#),
        ErrorCode::InvalidConfig,
        "param_groups[0]",
    );
    Optimizer::new(&grouped, r#"{"type": "adamw", "param_groups": "transformers"}"#).unwrap();
}

/// A model's logits in eval mode on fixed input ids.
fn logits(m: &Model) -> Vec<f32> {
    m.set_training(false).unwrap();
    let ids = Tensor::from_slice(&[3i64, 17, 42, 8, 64, 5], &[1, 6]).unwrap();
    let out = m
        .forward_batch(&NamedBatch::from_tensors([("input_ids", &ids)]).unwrap())
        .unwrap();
    out.get("logits").unwrap().to_vec::<f32>().unwrap()
}

// scenario: lora
#[test]
fn lora() {
    let fixture = hf_fixture("llama");
    let fixture = fixture.to_str().unwrap();
    let dir = std::env::temp_dir().join(format!("acc-rust-lora-{}", std::process::id()));
    let lora = r#"{"r": 4, "lora_alpha": 8, "target_modules": "all-linear"}"#;
    let a = Accelerator::new(r#"{"seed": 3}"#).unwrap();
    let m = Model::from_pretrained(fixture, None).unwrap();
    expect_err(
        m.save_adapter(dir.to_str().unwrap()),
        ErrorCode::InvalidState,
        "no adapter",
    );
    expect_err(
        m.add_lora(r#"{"r": 0}"#),
        ErrorCode::InvalidArgument,
        "r must be a positive integer",
    );
    expect_err(
        m.add_lora(r#"{"target_modules": ["nope"]}"#),
        ErrorCode::InvalidArgument,
        "q_proj",
    );
    m.add_lora(lora).unwrap();
    expect_err(m.add_lora(lora), ErrorCode::InvalidState, "adapter already");
    let start = params(&m);
    let (base, lora_b) = (
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.q_proj.lora_B.weight",
    );
    assert!(start.contains_key("model.layers.0.self_attn.q_proj.lora_A.weight"));

    // Three AdamW steps: only the adapter moves.
    let o = Optimizer::new(&m, r#"{"type": "adamw", "lr": 0.01}"#).unwrap();
    m.set_training(true).unwrap();
    a.prepare(Some(&m), Some(&o), None, None).unwrap();
    let ids = Tensor::from_slice(&[3i64, 17, 42, 8, 64, 5, 9, 11, 3, 17, 42, 8, 64, 5, 9, 11], &[2, 8]).unwrap();
    let batch = NamedBatch::from_tensors([("input_ids", &ids), ("labels", &ids)]).unwrap();
    for _ in 0..3 {
        a.backward(&m.forward_batch(&batch).unwrap().get("loss").unwrap())
            .unwrap();
        o.step().unwrap();
        o.zero_grad().unwrap();
    }
    let trained = params(&m);
    assert_eq!(
        max_diff(&start[base], 1.0, &trained[base]),
        0.0,
        "the base weight moved"
    );
    assert!(
        max_diff(&start[lora_b], 1.0, &trained[lora_b]) > 0.0,
        "the adapter did not move"
    );
    let want = logits(&m);

    // Saved as peft saves it, loaded into a fresh base model: the same logits; merged: still.
    let adapter = dir.join("adapter");
    m.save_adapter(adapter.to_str().unwrap()).unwrap();
    assert!(adapter.join("adapter_config.json").is_file());
    assert!(adapter.join("adapter_model.safetensors").is_file());
    let fresh = Model::from_pretrained(fixture, None).unwrap();
    let missing = dir.join("missing");
    expect_err(
        fresh.load_adapter(missing.to_str().unwrap(), None),
        ErrorCode::Io,
        "missing",
    );
    fresh.load_adapter(adapter.to_str().unwrap(), None).unwrap();
    assert!(
        max_diff(&logits(&fresh), 1.0, &want) <= 1e-5,
        "the loaded adapter's logits differ"
    );
    fresh.merge_adapter().unwrap();
    // W + B A * scaling rounds otherwise than the two products apart (peft's own merge moves the fixtures'
    // logits by up to 1.7e-5; an optimised build's kernels by more).
    let merged = max_diff(&logits(&fresh), 1.0, &want);
    assert!(merged <= 1e-4, "the merged model's logits differ by {merged}");
    assert!(params(&fresh).keys().all(|n| !n.contains("lora_")));
    expect_err(fresh.merge_adapter(), ErrorCode::InvalidState, "no adapter");
    std::fs::remove_dir_all(&dir).unwrap();
}

// scenario: profile
#[test]
fn profile() {
    let a = Accelerator::new(r#"{"cpu": true, "seed": 3}"#).unwrap();
    let m = Model::new(MLP_2_8_1).unwrap();
    let o = Optimizer::new(&m, r#"{"type": "sgd", "lr": 0.1}"#).unwrap();
    a.prepare(Some(&m), Some(&o), None, None).unwrap();
    expect_err(
        a.profile(Some(r#"{"with_stak": true}"#), |_| Ok(())),
        ErrorCode::InvalidConfig,
        "with_stak",
    );
    expect_err(
        a.profile(Some(r#"{"activities": ["cuda"]}"#), |_| Ok(())),
        ErrorCode::Unsupported,
        "profile_kwargs.activities",
    );
    let dir = std::env::temp_dir().join(format!("acc-rust-profile-{}", std::process::id()));
    let kwargs = format!(
        r#"{{"output_trace_dir": "{}", "schedule_option": {{"wait": 1, "warmup": 1, "active": 2}}}}"#,
        dir.display()
    );
    a.profile(Some(&kwargs), |p| {
        expect_err(
            a.profile(None, |_| Ok(())),
            ErrorCode::InvalidState,
            "profile is running",
        );
        for _ in 0..4 {
            sgd_step(&a, &m, &o);
            p.step()?;
        }
        Ok(())
    })
    .unwrap();
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["profile_0.json"], "{names:?}");
    let trace = std::fs::read_to_string(dir.join("profile_0.json")).unwrap();
    assert!(trace.trim_start().starts_with('{') && trace.trim_end().ends_with('}'));
    for want in [
        "\"ProfilerStep#2\"",
        "\"ProfilerStep#3\"",
        "\"acc::forward\"",
        "\"aten::",
    ] {
        assert!(trace.contains(want), "the trace lacks {want}");
    }
    assert!(!trace.contains("\"ProfilerStep#1\""), "step 1 (warmup) was recorded");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The tiny byte-level BPE tokenizer of tests/text (with a {% generation %} chat template).
fn tiny_tokenizer_dir() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../tests/text/tiny/bytebpe")
        .to_string_lossy()
        .into_owned()
}

// scenario: text
#[test]
fn text() {
    use acc::Tokenizer;
    expect_err(
        Tokenizer::from_pretrained("/nonexistent/tok"),
        ErrorCode::InvalidArgument,
        "/nonexistent/tok",
    );
    let tok = Tokenizer::from_pretrained(&tiny_tokenizer_dir()).unwrap();
    let info = tok.info().unwrap();
    assert!(info.contains("\"eos_token\":\"<|im_end|>\""), "{info}");

    // A padded batch, its rows and its tensors.
    let texts = ["Hello world!", "A longer sentence, with more tokens in it."];
    let enc = tok
        .encode_batch(&texts, Some(r#"{"padding": true, "padding_side": "left"}"#))
        .unwrap();
    assert_eq!(enc.len(), 2);
    let (ids0, ids1, mask0) = (
        enc.input_ids(0).unwrap(),
        enc.input_ids(1).unwrap(),
        enc.attention_mask(0).unwrap(),
    );
    assert!(ids0.len() == ids1.len() && ids0.len() == mask0.len() && ids0.len() > 3);
    assert_eq!((mask0[0], mask0[mask0.len() - 1]), (0, 1)); // left padding
    assert_eq!(enc.sample(1).unwrap(), 1);
    assert_eq!(enc.offsets(1).unwrap().len(), ids1.len());
    expect_err(enc.get(2, "input_ids"), ErrorCode::InvalidArgument, "row 2");
    expect_err(enc.get(0, "labels"), ErrorCode::InvalidArgument, "labels");
    let batch = enc.to_batch().unwrap();
    assert_eq!(
        batch.get("input_ids").unwrap().shape().unwrap(),
        vec![2, ids1.len() as i64]
    );

    // Unpadded rows are no batch; decode; options named in errors.
    let ragged = tok.encode_batch(&texts, None).unwrap();
    expect_err(ragged.to_batch(), ErrorCode::InvalidArgument, "padding");
    let back = tok
        .decode(ragged.input_ids(0).unwrap(), Some(r#"{"skip_special_tokens": true}"#))
        .unwrap();
    assert_eq!(back, "Hello world!");
    expect_err(
        tok.encode_batch(&texts, Some(r#"{"paddin": true}"#)),
        ErrorCode::InvalidConfig,
        "paddin",
    );
    expect_err(tok.decode(&[-1], None), ErrorCode::InvalidArgument, "-1");
    let wide = "héllo 👋 世界";
    let e = tok.encode(wide, Some(r#"{"add_special_tokens": false}"#)).unwrap();
    assert_eq!(tok.decode(e.input_ids(0).unwrap(), None).unwrap(), wide);
    let pairs = tok.encode_pairs(&["question"], &["answer"], None).unwrap();
    assert!(pairs.get(0, "sequence_ids").unwrap().contains(&1));
    expect_err(
        tok.encode_pairs(&["a", "b"], &["c"], None),
        ErrorCode::InvalidArgument,
        "pairs",
    );

    // Vocabulary look-ups.
    let id = tok.token_to_id("<|im_end|>").unwrap().expect("a special token");
    assert_eq!(tok.id_to_token(id).unwrap().as_deref(), Some("<|im_end|>"));
    assert_eq!(tok.token_to_id("definitely not a token").unwrap(), None);
    assert_eq!(tok.id_to_token(1 << 40).unwrap(), None);

    // The chat template, with the assistant mask of its {% generation %} block.
    let chat = r#"[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]"#;
    let (rendered, enc) = tok.apply_chat_template_encoded(chat, Some(r#"{"now": 0}"#)).unwrap();
    assert!(rendered.contains("<|im_start|>assistant\nHello!"), "{rendered}");
    assert_eq!(tok.apply_chat_template(chat, Some(r#"{"now": 0}"#)).unwrap(), rendered);
    let masks = enc.assistant_masks(0).unwrap();
    let ones = masks.iter().sum::<i64>();
    assert!(ones > 0 && (ones as usize) < masks.len(), "{masks:?}");
    expect_err(
        tok.apply_chat_template(chat, Some(r#"{"chat_template": "{{ raise_exception('no way') }}"}"#)),
        ErrorCode::InvalidArgument,
        "no way",
    );

    // Train, save, load back: the same ids.
    let corpus = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog"];
    let trained = Tokenizer::train_bpe(
        &corpus,
        Some(r#"{"vocab_size": 300, "special_tokens": ["<|end|>", "<|pad|>"], "eos_token": "<|end|>", "pad_token": "<|pad|>"}"#),
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("acc-rust-text-{}", std::process::id()));
    trained.save_pretrained(dir.to_str().unwrap()).unwrap();
    let mut reloaded = Tokenizer::from_pretrained(dir.to_str().unwrap()).unwrap();
    let (a, b) = (
        trained.encode(corpus[0], None).unwrap(),
        reloaded.encode(corpus[0], None).unwrap(),
    );
    assert!(!a.input_ids(0).unwrap().is_empty());
    assert_eq!(a.input_ids(0).unwrap(), b.input_ids(0).unwrap());
    reloaded.set_special_token("pad_token", Some("<|end|>")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    expect_err(
        Tokenizer::train_bpe(&corpus, Some(r#"{"eos_token": "<|missing|>"}"#)),
        ErrorCode::InvalidArgument,
        "<|missing|>",
    );

    // One tokenizer shared by data-loader threads: the same ids as on one thread.
    let lines: Vec<String> = (0..64)
        .map(|i| format!("line {i}: the quick brown fox {} jumps", i * 7919))
        .collect();
    let expected: Vec<Vec<i64>> = lines
        .iter()
        .map(|l| tok.encode(l, None).unwrap().input_ids(0).unwrap().to_vec())
        .collect();
    let shared = Arc::new(tok);
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (t, lines) = (shared.clone(), lines.clone());
            std::thread::spawn(move || {
                let enc = t.encode_batch(&lines, None).unwrap();
                (0..enc.len())
                    .map(|r| enc.input_ids(r).unwrap().to_vec())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for w in workers {
        assert_eq!(w.join().unwrap(), expected);
    }

    // Text generation: the pieces, through a callback and through the iterator, make the text.
    let len = info
        .split("\"len\":")
        .nth(1)
        .unwrap()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .to_string();
    let config = format!(
        r#"{{"architectures": ["LlamaForCausalLM"], "vocab_size": {len}, "hidden_size": 16, "intermediate_size": 32,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1}}"#
    );
    let model = Model::from_config(&config, None).unwrap();
    let opts = Some(r#"{"max_new_tokens": 8, "eos_token_id": []}"#);
    let mut pieces = String::new();
    let text = model
        .generate_text(
            &shared,
            "Hello",
            opts,
            Some(&mut |p: &str| {
                pieces.push_str(p);
                true
            }),
        )
        .unwrap();
    assert_eq!(text, pieces);
    expect_err(
        model.generate_text(&shared, "Hello", Some(r#"{"stop_strings": 3}"#), None),
        ErrorCode::InvalidConfig,
        "stop_strings",
    );
    let mut stream = model.generate_text_stream(shared.clone(), "Hello", opts).unwrap();
    let streamed: String = (&mut stream).collect();
    let (model, again) = stream.finish();
    assert_eq!(again.unwrap(), streamed);
    assert_eq!(streamed, text); // greedy: the same text
    drop(model.generate_text_stream(shared, "Hello", opts).unwrap()); // dropped early: stops, joins
}

/// A committed input of tests/data/prep (the preprocessing fixtures).
fn prep_file(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../tests/data/prep")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// A batch as every binding prints it: per tensor in order "name [shape] sum weighted", the weighted sum
/// Σ (k+1)·v over the flat data (so that a value moved within the tensor changes it).
fn fingerprint(batch: &NamedBatch) -> String {
    batch
        .names()
        .unwrap()
        .iter()
        .map(|name| {
            let t = batch.get(name).unwrap();
            let v = t.to_vec::<i64>().unwrap();
            let sum: i64 = v.iter().sum();
            let weighted: i64 = v.iter().enumerate().map(|(k, x)| (k as i64 + 1) * x).sum();
            format!("{name} {:?} {sum} {weighted}", t.shape().unwrap())
        })
        .collect::<Vec<_>>()
        .join("; ")
}

// scenario: data_files
#[test]
fn data_files() {
    use acc::Tokenizer;
    let tok = Tokenizer::from_pretrained(&tiny_tokenizer_dir()).unwrap();
    let (messages, text) = (prep_file("messages.jsonl"), prep_file("text.jsonl"));

    // TRL's SFT preparation and collator: the second batch of 4 as TRL makes it.
    let sft = Dataset::from_files(Some(&messages), &tok, Some(r#"{"assistant_only_loss": true}"#)).unwrap();
    assert_eq!(sft.len().unwrap(), 12);
    let b = sft.get_batch(&[4, 5, 6, 7]).unwrap();
    let line = fingerprint(&b);
    println!("data_files sft: {line}");
    assert_eq!(
        line,
        "input_ids [4, 87] 48299 8654156; labels [4, 87] -10996 -1702997; attention_mask [4, 87] 277 48359"
    );
    // A loader over it makes the same batches.
    let dl = DataLoader::new(&sft, r#"{"batch_size": 4}"#).unwrap();
    dl.next_batch().unwrap().unwrap();
    assert_eq!(fingerprint(&dl.next_batch().unwrap().unwrap()), line);

    // tok(text) as datasets.map, batched by DataCollatorWithPadding on the left.
    let tokenized = Dataset::from_files(
        Some(&text),
        &tok,
        Some(r#"{"mode": "tokenize", "truncation": true, "max_length": 24, "collator": "with_padding", "padding_side": "left", "pad_to_multiple_of": 8}"#),
    )
    .unwrap();
    let line = fingerprint(&tokenized.get_batch(&[4, 5, 6, 7]).unwrap());
    println!("data_files tokenize: {line}");
    assert_eq!(line, "input_ids [4, 24] 17339 814223; attention_mask [4, 24] 93 4556");

    // Bad input, named.
    let e = expect_err(
        Dataset::from_files(Some(&text), &tok, Some(r#"{"columns": ["body"]}"#)),
        ErrorCode::InvalidArgument,
        "'body'",
    );
    assert!(e.message().contains("text"), "the columns there are: {}", e.message());
    expect_err(
        Dataset::from_files(
            Some(&text),
            &tok,
            Some(r#"{"mode": "tokenize", "text_column": "body"}"#),
        ),
        ErrorCode::InvalidArgument,
        "'body'",
    );
    expect_err(
        Dataset::from_files(Some(&text), &tok, Some(r#"{"block_sise": 8}"#)),
        ErrorCode::InvalidConfig,
        "block_sise",
    );
    expect_err(
        Dataset::from_files(Some("/nonexistent/rows.jsonl"), &tok, None),
        ErrorCode::Io,
        "/nonexistent/rows.jsonl",
    );
    expect_err(
        Dataset::from_files(None, &tok, None),
        ErrorCode::InvalidArgument,
        "files",
    );
    expect_err(sft.get_batch(&[12]), ErrorCode::InvalidArgument, "12");
    expect_err(sft.get_batch(&[]), ErrorCode::InvalidArgument, "count");
    // A closure dataset's failure comes back through get_batch with its error as the source.
    let fds = Dataset::from_batch_fn(2, |i| Err::<NamedBatch, _>(format!("no sample {i}"))).unwrap();
    let e = expect_err(fds.get_batch(&[1]), ErrorCode::Callback, "");
    assert!(
        e.source().is_some_and(|s| s.to_string().contains("no sample 1")),
        "source of {e}"
    );

    // From the accelerator's data settings.
    let config = format!(r#"{{"data": {{"files": "{text}", "mode": "group_texts", "block_size": 16}}}}"#);
    let acc = Accelerator::new(&config).unwrap();
    let grouped = Dataset::from_config(&acc, &tok).unwrap();
    let b = grouped.get_batch(&[1]).unwrap();
    assert_eq!(b.get("labels").unwrap().shape().unwrap(), vec![1, 16]);
    let acc = Accelerator::new(r#"{"data": {"mode": "tokenize"}}"#).unwrap();
    expect_err(
        Dataset::from_config(&acc, &tok),
        ErrorCode::InvalidConfig,
        "'data.files'",
    );
}
