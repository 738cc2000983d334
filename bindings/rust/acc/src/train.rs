use std::any::Any;
use std::ffi::{c_void, CStr, CString};
use std::os::raw::c_char;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex};

use acc_sys as sys;

use crate::batch::NamedBatch;
use crate::error::{check, Error, ErrorCode, Result};
use crate::tensor::Tensor;
use crate::text::Tokenizer;
use crate::{check_abi, cstring};

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident, $raw:ident, $destroy:ident) => {
        $(#[$doc])*
        ///
        /// Freed on drop. `Send` but not `Sync`: libacc lets one thread at a time use a handle.
        pub struct $name {
            ptr: NonNull<sys::$raw>,
        }
        // SAFETY: libacc handles may be used from any thread, one thread at a time (acc.h).
        unsafe impl Send for $name {}
        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: we own the handle.
                unsafe { sys::$destroy(self.ptr.as_ptr()) }
            }
        }
        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($name), "({:p})"), self.ptr)
            }
        }
        impl $name {
            fn owned(status: sys::acc_status, out: *mut sys::$raw) -> Result<$name> {
                check(status)?;
                NonNull::new(out)
                    .map(|ptr| $name { ptr })
                    .ok_or_else(|| Error::new(ErrorCode::Internal, "libacc returned a NULL handle"))
            }
            #[allow(dead_code)]
            pub(crate) fn as_ptr(&self) -> *mut sys::$raw {
                self.ptr.as_ptr()
            }
        }
    };
}

/// The context of one training process (Accelerate's `Accelerator`): process state, the process
/// group, preparation of models, optimizers and data, backward, collectives and checkpoints.
///
/// Freed on drop. `Send` but not `Sync`: libacc lets one thread at a time use a handle.
pub struct Accelerator {
    ptr: NonNull<sys::acc_accelerator>,
    /// What a checkpoint callback left for the caller of save_state / load_state (shared with the
    /// registered objects, which never refer to the accelerator itself).
    checkpoint_failure: FailureSlot,
}
// SAFETY: libacc handles may be used from any thread, one thread at a time (acc.h); the registered
// checkpoint closures are `Send`.
unsafe impl Send for Accelerator {}
impl Drop for Accelerator {
    fn drop(&mut self) {
        // SAFETY: we own the handle; libacc drops the registered closures (once) with the accelerator.
        unsafe { sys::acc_accelerator_destroy(self.ptr.as_ptr()) }
    }
}
impl std::fmt::Debug for Accelerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Accelerator({:p})", self.ptr)
    }
}
impl Accelerator {
    fn owned(status: sys::acc_status, out: *mut sys::acc_accelerator) -> Result<Accelerator> {
        check(status)?;
        NonNull::new(out)
            .map(|ptr| Accelerator {
                ptr,
                checkpoint_failure: FailureSlot::default(),
            })
            .ok_or_else(|| Error::new(ErrorCode::Internal, "libacc returned a NULL handle"))
    }
    fn as_ptr(&self) -> *mut sys::acc_accelerator {
        self.ptr.as_ptr()
    }
}
handle!(
    /// A trainable model: a built-in family (MLP, GPT), a TorchScript module, or a Hugging Face causal
    /// LM ([`Model::from_pretrained`], [`Model::from_config`]).
    Model, acc_model, acc_model_destroy
);
handle!(
    /// Updates a model's parameters from their gradients.
    Optimizer, acc_optimizer, acc_optimizer_destroy
);
handle!(
    /// Sets an optimizer's learning rate by step.
    Scheduler, acc_scheduler, acc_scheduler_destroy
);

fn opt_ptr<T>(o: Option<&T>, f: impl Fn(&T) -> *mut c_void) -> *mut c_void {
    o.map_or(ptr::null_mut(), f)
}

fn borrowed_string(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: a NUL-terminated string borrowed from the handle, copied at once.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// A running profile ([`Accelerator::profile`]), torch.profiler's `prof`.
#[derive(Debug)]
pub struct Profile<'a> {
    accelerator: &'a Accelerator,
}

impl Profile<'_> {
    /// torch.profiler's `step()`: the current step ends and the next begins.
    pub fn step(&self) -> Result<()> {
        check(unsafe { sys::acc_profile_step(self.accelerator.as_ptr()) })
    }
}

/// An element-wise reduction across processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
}

impl Accelerator {
    /// Creates the accelerator from Accelerate's constructor keys as JSON ("" for the defaults):
    /// `cpu`, `mixed_precision`, `gradient_accumulation_steps`, `seed`, `dataloader_config`,
    /// `ddp_kwargs`, ... Values that `acc launch` set in the environment apply beneath these. With
    /// `WORLD_SIZE > 1` this joins the process group.
    pub fn new(config_json: &str) -> Result<Accelerator> {
        check_abi()?;
        let c = cstring(config_json)?;
        let mut out = ptr::null_mut();
        Accelerator::owned(unsafe { sys::acc_accelerator_create(c.as_ptr(), &mut out) }, out)
    }

    fn int_query(
        &self,
        f: unsafe extern "C" fn(*const sys::acc_accelerator, *mut i32) -> sys::acc_status,
    ) -> Result<i32> {
        let mut v = 0;
        check(unsafe { f(self.as_ptr(), &mut v) })?;
        Ok(v)
    }

    fn str_query(
        &self,
        f: unsafe extern "C" fn(*const sys::acc_accelerator, *mut *const c_char) -> sys::acc_status,
    ) -> Result<String> {
        let mut p = ptr::null();
        check(unsafe { f(self.as_ptr(), &mut p) })?;
        Ok(borrowed_string(p))
    }

    /// This process's global rank.
    pub fn process_index(&self) -> Result<i32> {
        self.int_query(sys::acc_process_index)
    }

    /// This process's rank on its machine.
    pub fn local_process_index(&self) -> Result<i32> {
        self.int_query(sys::acc_local_process_index)
    }

    /// The number of processes.
    pub fn num_processes(&self) -> Result<i32> {
        self.int_query(sys::acc_num_processes)
    }

    /// Whether this is the global main process.
    pub fn is_main_process(&self) -> Result<bool> {
        Ok(self.int_query(sys::acc_is_main_process)? != 0)
    }

    /// This process's device, e.g. "cpu" or "cuda:0".
    pub fn device(&self) -> Result<String> {
        self.str_query(sys::acc_device)
    }

    /// Accelerate's DistributedType name: "NO", "MULTI_CPU", "MULTI_GPU".
    pub fn distributed_type(&self) -> Result<String> {
        self.str_query(sys::acc_distributed_type)
    }

    /// The resolved configuration as JSON, each value with where it came from.
    pub fn config_json(&self) -> Result<String> {
        self.str_query(sys::acc_config_json)
    }

    /// Prepares any of model, optimizer, scheduler and data loader for this process, in place. An
    /// optimizer needs its model prepared (now or before); preparing twice fails with
    /// [`ErrorCode::InvalidState`].
    pub fn prepare(
        &self,
        model: Option<&Model>,
        opt: Option<&Optimizer>,
        sched: Option<&Scheduler>,
        loader: Option<&DataLoader>,
    ) -> Result<()> {
        check(unsafe {
            sys::acc_prepare(
                self.as_ptr(),
                opt_ptr(model, |m| m.as_ptr().cast()).cast(),
                opt_ptr(opt, |o| o.as_ptr().cast()).cast(),
                opt_ptr(sched, |s| s.as_ptr().cast()).cast(),
                opt_ptr(loader, |l| l.as_ptr().cast()).cast(),
            )
        })
    }

    /// Back-propagates a scalar loss from [`Model::forward`] (gradients are all-reduced under DDP).
    pub fn backward(&self, loss: &Tensor) -> Result<()> {
        check(unsafe { sys::acc_backward(self.as_ptr(), loss.as_ptr()) })
    }

    /// Concatenates `t` from every process along dim 0, in rank order (a collective).
    pub fn gather(&self, t: &Tensor) -> Result<Tensor> {
        let mut out = ptr::null_mut();
        Tensor::owned(unsafe { sys::acc_gather(self.as_ptr(), t.as_ptr(), &mut out) }, out)
    }

    /// [`gather`](Self::gather), but on the last batch of the active prepared data loader drops the
    /// samples that sharding duplicated, so metrics see each sample exactly once.
    pub fn gather_for_metrics(&self, t: &Tensor) -> Result<Tensor> {
        let mut out = ptr::null_mut();
        Tensor::owned(
            unsafe { sys::acc_gather_for_metrics(self.as_ptr(), t.as_ptr(), &mut out) },
            out,
        )
    }

    /// Reduces `t` element-wise across processes; every process gets the result.
    pub fn reduce(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let op = match op {
            ReduceOp::Sum => sys::ACC_REDUCE_SUM,
            ReduceOp::Mean => sys::ACC_REDUCE_MEAN,
            ReduceOp::Max => sys::ACC_REDUCE_MAX,
        };
        let mut out = ptr::null_mut();
        Tensor::owned(unsafe { sys::acc_reduce(self.as_ptr(), t.as_ptr(), op, &mut out) }, out)
    }

    fn object_op(
        &self,
        items: &[&[u8]],
        f: unsafe extern "C" fn(
            *mut sys::acc_accelerator,
            *const sys::acc_bytes_list,
            *mut *mut sys::acc_bytes_list,
        ) -> sys::acc_status,
    ) -> Result<Vec<Vec<u8>>> {
        let input = BytesList::new(items)?;
        let mut out = ptr::null_mut();
        check(unsafe { f(self.as_ptr(), input.0, &mut out) })?;
        BytesList(out).to_vecs()
    }

    /// Accelerate's `gather_object`: the items of every process (byte strings the caller serializes,
    /// e.g. JSON), concatenated in rank order, on every process. A collective; a process may give none.
    pub fn gather_object(&self, items: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        self.object_op(items, sys::acc_gather_object)
    }

    /// [`gather_for_metrics`](Self::gather_for_metrics) for objects, one item per sample of the batch:
    /// on the last batch of the active prepared loader only the real samples are kept.
    pub fn gather_object_for_metrics(&self, items: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        self.object_op(items, sys::acc_gather_object_for_metrics)
    }

    /// Runs `step` inside Accelerate's `accumulate(model)` scope: with `gradient_accumulation_steps`
    /// = N, only every N-th call (and the last batch of the active loader) synchronizes gradients; in
    /// the others the gradient all-reduce is skipped and optimizer steps, scheduler steps and
    /// `zero_grad` on prepared objects do nothing. [`backward`](Self::backward) divides the loss by N.
    /// The scope is closed even when `step` fails (its error wins).
    pub fn accumulate<R>(&self, model: &Model, step: impl FnOnce() -> Result<R>) -> Result<R> {
        check(unsafe { sys::acc_accumulate_begin(self.as_ptr(), model.as_ptr()) })?;
        let r = step();
        let end = check(unsafe { sys::acc_accumulate_end(self.as_ptr(), model.as_ptr()) });
        let r = r?;
        end.map(|_| r)
    }

    /// Accelerate's `profile()`: LibTorch's Kineto profiler over this thread's work while `body` runs,
    /// with the config's `profile_kwargs` or, given a ProfileKwargs JSON object, with those instead
    /// (`activities`, `schedule_option` `{"wait", "warmup", "active", "repeat", "skip_first"}`,
    /// `record_shapes`, `profile_memory`, `with_stack`, `with_flops`, `with_modules`, `output_trace_dir`).
    /// Call [`Profile::step`] at the end of each training step: the schedule records some steps, each a
    /// `ProfilerStep#N` range. The profile ends when `body` returns, even with an error (its error wins);
    /// with `output_trace_dir` that writes `profile_<rank>.json` there and waits for every process.
    pub fn profile<R>(&self, profile_kwargs: Option<&str>, body: impl FnOnce(&Profile<'_>) -> Result<R>) -> Result<R> {
        let kwargs = profile_kwargs.map(cstring).transpose()?;
        let kwargs_ptr = kwargs.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        check(unsafe { sys::acc_profile_begin(self.as_ptr(), kwargs_ptr) })?;
        let r = body(&Profile { accelerator: self });
        let end = check(unsafe { sys::acc_profile_end(self.as_ptr()) });
        let r = r?;
        end.map(|_| r)
    }

    /// Whether the current micro-step synchronizes gradients and steps the optimizer.
    pub fn sync_gradients(&self) -> Result<bool> {
        Ok(self.int_query(sys::acc_sync_gradients)? != 0)
    }

    /// Clips the model's gradients to a total norm of `max_norm` (`norm_type` 2 is Euclidean; under
    /// fp16 they are unscaled first); returns the total norm before clipping.
    pub fn clip_grad_norm(&self, model: &Model, max_norm: f64, norm_type: f64) -> Result<f64> {
        let mut total = 0.0;
        check(unsafe { sys::acc_clip_grad_norm(self.as_ptr(), model.as_ptr(), max_norm, norm_type, &mut total) })?;
        Ok(total)
    }

    /// Clamps every gradient of the model to `[-clip, clip]`.
    pub fn clip_grad_value(&self, model: &Model, clip: f64) -> Result<()> {
        check(unsafe { sys::acc_clip_grad_value(self.as_ptr(), model.as_ptr(), clip) })
    }

    /// Process `from`'s tensor on every process (shape and dtype must agree). A collective.
    pub fn broadcast(&self, t: &Tensor, from: i32) -> Result<Tensor> {
        let mut out = ptr::null_mut();
        Tensor::owned(
            unsafe { sys::acc_broadcast(self.as_ptr(), t.as_ptr(), from, &mut out) },
            out,
        )
    }

    /// Accelerate's `set_seed`: seeds every generator of this process (plus the process index when
    /// `device_specific`); `deterministic` also selects deterministic algorithms.
    pub fn set_seed(&self, seed: u64, device_specific: bool, deterministic: bool) -> Result<()> {
        check(unsafe { sys::acc_set_seed(self.as_ptr(), seed, device_specific as i32, deterministic as i32) })
    }

    /// A barrier across all processes.
    pub fn wait_for_everyone(&self) -> Result<()> {
        check(unsafe { sys::acc_wait_for_everyone(self.as_ptr()) })
    }

    /// Accelerate's `init_trackers`: starts the trackers the config's `log_with` names ("tensorboard",
    /// "jsonl", "csv", "mlflow", "wandb", "all") for a run named `project_name`, on the main process only (the
    /// others check the arguments), and records `config`, a JSON object, as its hyperparameters.
    /// `init_kwargs`: options per tracker as JSON, e.g. `{"mlflow": {"run_name": "baseline"}}`.
    pub fn init_trackers(&self, project_name: &str, config: Option<&str>, init_kwargs: Option<&str>) -> Result<()> {
        let name = cstring(project_name)?;
        let config = config.map(cstring).transpose()?;
        let kwargs = init_kwargs.map(cstring).transpose()?;
        let ptr = |c: &Option<CString>| c.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        check(unsafe { sys::acc_init_trackers(self.as_ptr(), name.as_ptr(), ptr(&config), ptr(&kwargs)) })
    }

    /// Logs scalars by name to every tracker at `step` (None: no step), on the main process only.
    /// NaN and the infinities are allowed.
    pub fn log(&self, values: &[(&str, f64)], step: Option<i64>) -> Result<()> {
        let mut json = String::from("{");
        for (i, (name, value)) in values.iter().enumerate() {
            if i > 0 {
                json.push_str(", ");
            }
            json.push_str(&json_string(name));
            json.push_str(": ");
            json.push_str(&json_number(*value));
        }
        json.push('}');
        self.log_json(&json, step)
    }

    /// Logs a JSON object to every tracker at `step` (None: no step): numbers and booleans are scalars,
    /// strings text, objects of numbers several scalars under one name.
    pub fn log_json(&self, values_json: &str, step: Option<i64>) -> Result<()> {
        let values = cstring(values_json)?;
        check(unsafe { sys::acc_log(self.as_ptr(), values.as_ptr(), step.unwrap_or(-1)) })
    }

    /// Accelerate's `end_training`: finishes the trackers (files synced and closed, runs marked finished).
    pub fn end_training(&self) -> Result<()> {
        check(unsafe { sys::acc_end_training(self.as_ptr()) })
    }

    /// Accelerate's `save_state`: saves everything prepared with this accelerator (models, optimizers,
    /// schedulers, the fp16 scaler, loader positions, random states) and every object registered with
    /// [`register_for_checkpointing`](Self::register_for_checkpointing) into the directory `dir`, crash
    /// safe (docs/checkpoints.md lists the files). `None`: ProjectConfiguration's automatic naming
    /// (`"project_config": {"automatic_checkpoint_naming": true, "project_dir": ...}`), i.e.
    /// `{project_dir}/checkpoints/checkpoint_{iteration}`. A collective: every process calls it.
    ///
    /// A registered save closure's `Err` fails the call with [`ErrorCode::Callback`] and that error as
    /// its [`source`](std::error::Error::source); its panic resumes here.
    pub fn save_state(&self, dir: Option<&str>) -> Result<()> {
        let dir = dir.map(cstring).transpose()?;
        let dir = dir.as_ref().map_or(ptr::null(), |d| d.as_ptr());
        self.checkpoint_call(|acc| unsafe { sys::acc_save_state(acc, dir) })
    }

    /// Accelerate's `load_state`: restores a checkpoint of [`save_state`](Self::save_state) into the
    /// objects prepared with this accelerator (the same kinds and numbers, prepared in the same order)
    /// and the registered objects. A directory without `manifest.json` is refused naming it. `None`: the
    /// newest complete checkpoint under `{project_dir}/checkpoints`. A collective.
    ///
    /// A registered load closure's `Err` fails the call with [`ErrorCode::Callback`] and that error as
    /// its source; its panic resumes here.
    pub fn load_state(&self, dir: Option<&str>) -> Result<()> {
        let dir = dir.map(cstring).transpose()?;
        let dir = dir.as_ref().map_or(ptr::null(), |d| d.as_ptr());
        self.checkpoint_call(|acc| unsafe { sys::acc_load_state(acc, dir) })
    }

    /// Loads what the config's `"resume_from_checkpoint"` names: `"latest"`, the newest complete
    /// checkpoint under `{project_dir}/checkpoints`, or a checkpoint directory, as
    /// [`load_state`](Self::load_state) does. `Ok(false)`: nothing to resume (the key unset, or
    /// `"latest"` before the first save: a fresh start). Call it after [`prepare`](Self::prepare)
    /// and [`register_for_checkpointing`](Self::register_for_checkpointing): a job restarted by
    /// `acc launch --max_restarts` then continues from its last save. A collective.
    ///
    /// Registered load closures fail or panic as in [`load_state`](Self::load_state).
    pub fn resume_from_checkpoint(&self) -> Result<bool> {
        let mut resumed = 0i32;
        self.checkpoint_call(|acc| unsafe { sys::acc_resume_from_checkpoint(acc, &mut resumed) })?;
        Ok(resumed != 0)
    }

    /// Accelerate's `register_for_checkpointing`: an object of the caller's saved by
    /// [`save_state`](Self::save_state) (`save` returns its bytes; on the main process only, into
    /// `custom_checkpoint_{i}.bin` in registration order) and restored by
    /// [`load_state`](Self::load_state) (`load` receives those bytes, on every process). Both are
    /// called on the thread that calls `save_state` / `load_state`, while the accelerator is in use
    /// (calling it from inside them fails with [`ErrorCode::Busy`]). An `Err` fails that call with
    /// [`ErrorCode::Callback`] and the error as its source; a panic is caught at the C boundary and
    /// resumed in the caller. The closures are dropped once, when libacc lets go of the accelerator.
    ///
    /// ```no_run
    /// # fn main() -> acc::Result<()> {
    /// use std::sync::{Arc, Mutex};
    /// let accel = acc::Accelerator::new("")?;
    /// let epoch = Arc::new(Mutex::new(0u64));
    /// let (e1, e2) = (epoch.clone(), epoch.clone());
    /// accel.register_for_checkpointing(
    ///     move || Ok::<_, std::convert::Infallible>(e1.lock().unwrap().to_le_bytes().to_vec()),
    ///     move |bytes: &[u8]| -> Result<(), String> {
    ///         *e2.lock().unwrap() = u64::from_le_bytes(bytes.try_into().map_err(|_| "bad size")?);
    ///         Ok(())
    ///     },
    /// )?;
    /// accel.save_state(Some("/tmp/ckpt"))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn register_for_checkpointing<S, L, SE, LE>(&self, save: S, load: L) -> Result<()>
    where
        S: FnMut() -> std::result::Result<Vec<u8>, SE> + Send + 'static,
        L: FnMut(&[u8]) -> std::result::Result<(), LE> + Send + 'static,
        SE: Into<Box<dyn std::error::Error + Send + Sync>>,
        LE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        struct State<S, L> {
            save: S,
            load: L,
            failure: FailureSlot,
        }
        type BoxError = Box<dyn std::error::Error + Send + Sync>;
        fn record(failure: &FailureSlot, r: std::thread::Result<std::result::Result<(), BoxError>>) -> sys::acc_status {
            let mut f = failure.lock().unwrap_or_else(|p| p.into_inner());
            match r {
                Ok(Ok(())) => return sys::ACC_OK,
                Ok(Err(e)) => f.error = Some(e),
                Err(payload) => f.panic = Some(payload),
            }
            sys::ACC_ERR_CALLBACK
        }
        unsafe extern "C" fn save_fn<S, L, SE>(user: *mut c_void, out: *mut sys::acc_bytes_list) -> sys::acc_status
        where
            S: FnMut() -> std::result::Result<Vec<u8>, SE>,
            SE: Into<BoxError>,
        {
            // SAFETY: user is the State we boxed; libacc calls it while it holds the accelerator, so
            // never concurrently with itself or the load function.
            let state = unsafe { &mut *user.cast::<State<S, L>>() };
            let r = panic::catch_unwind(AssertUnwindSafe(|| -> std::result::Result<(), BoxError> {
                let bytes = (state.save)().map_err(Into::into)?;
                // SAFETY: `out` is valid for this call; libacc copies the bytes.
                check(unsafe { sys::acc_bytes_list_append(out, bytes.as_ptr().cast(), bytes.len()) })?;
                Ok(())
            }));
            record(&state.failure, r)
        }
        unsafe extern "C" fn load_fn<S, L, LE>(user: *mut c_void, data: *const c_void, size: usize) -> sys::acc_status
        where
            L: FnMut(&[u8]) -> std::result::Result<(), LE>,
            LE: Into<BoxError>,
        {
            // SAFETY: as in save_fn.
            let state = unsafe { &mut *user.cast::<State<S, L>>() };
            let bytes: &[u8] = if size == 0 || data.is_null() {
                &[]
            } else {
                // SAFETY: `size` bytes borrowed for this call.
                unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }
            };
            let r = panic::catch_unwind(AssertUnwindSafe(|| (state.load)(bytes).map_err(Into::into)));
            record(&state.failure, r)
        }
        unsafe extern "C" fn free<S, L>(user: *mut c_void) {
            // SAFETY: called once, when libacc lets go of the object; dropping must not unwind.
            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                drop(unsafe { Box::from_raw(user.cast::<State<S, L>>()) })
            }));
        }
        let user = Box::into_raw(Box::new(State {
            save,
            load,
            failure: self.checkpoint_failure.clone(),
        }));
        // SAFETY: libacc calls free exactly once, also when registering fails.
        check(unsafe {
            sys::acc_register_for_checkpointing(
                self.as_ptr(),
                Some(save_fn::<S, L, SE>),
                Some(load_fn::<S, L, LE>),
                user.cast(),
                Some(free::<S, L>),
            )
        })
    }

    /// A save_state / load_state / resume_from_checkpoint call: a callback's panic resumes here, its error becomes the source.
    fn checkpoint_call(&self, call: impl FnOnce(*mut sys::acc_accelerator) -> sys::acc_status) -> Result<()> {
        let take = || std::mem::take(&mut *self.checkpoint_failure.lock().unwrap_or_else(|p| p.into_inner()));
        drop(take()); // nothing left from an earlier call
        let st = call(self.as_ptr());
        if st == sys::ACC_OK {
            return Ok(());
        }
        let err = Error::last(st); // read at once, before anything else runs
        let failure = take();
        if let Some(payload) = failure.panic {
            panic::resume_unwind(payload);
        }
        Err(match failure.error {
            Some(source) => err.with_source(source),
            None => err,
        })
    }
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number; NaN and the infinities as Python's json writes them (acc_log accepts them).
fn json_number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_string()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.to_string()
    } else {
        format!("{v:?}")
    }
}

impl Model {
    /// A built-in model from its JSON spec, e.g. `{"type": "mlp", "sizes": [4, 32, 1], "activation":
    /// "tanh", "loss": "mse"}` or `{"type": "gpt", "vocab_size": 256, "block_size": 64, "n_layer": 2,
    /// "n_head": 4, "n_embd": 64}`. Parameters come from the CPU generator (seed it through the
    /// accelerator's `seed`).
    pub fn new(spec_json: &str) -> Result<Model> {
        check_abi()?;
        let c = cstring(spec_json)?;
        let mut out = ptr::null_mut();
        Model::owned(unsafe { sys::acc_model_create(c.as_ptr(), &mut out) }, out)
    }

    /// Loads a TorchScript module file; options: `{"loss": "mse"|"cross_entropy"|"none"}`.
    pub fn load_torchscript(path: &str, options_json: &str) -> Result<Model> {
        check_abi()?;
        let (p, o) = (cstring(path)?, cstring(options_json)?);
        let mut out = ptr::null_mut();
        Model::owned(
            unsafe { sys::acc_model_load_torchscript(p.as_ptr(), o.as_ptr(), &mut out) },
            out,
        )
    }

    /// transformers' `from_pretrained`: a Hugging Face model directory (`config.json`, and
    /// `model.safetensors` or the shards `model.safetensors.index.json` lists) of a
    /// `LlamaForCausalLM`, `MistralForCausalLM`, `Qwen2ForCausalLM` or `MixtralForCausalLM`. Options
    /// (`None`: `{}`): `{"dtype": "auto" | "float32" | "bfloat16" | "float16"}`, `"auto"` being the
    /// dtype `config.json` records; with `"device_map"` (`"auto"`, `"balanced"`, `"balanced_low_0"`,
    /// `"sequential"`), `"max_memory"`, `"no_split_module_classes"` and `"offload_folder"` it is
    /// Accelerate's `load_checkpoint_and_dispatch`: each weight goes where
    /// [`Model::infer_auto_device_map`] plans it, in memory (`"cpu"`) or left on the disk (the mapped
    /// checkpoint, read layer by layer; for inference). See docs/big-models.md. A missing file is [`ErrorCode::Io`] naming it; names or shapes
    /// that differ from transformers' are [`ErrorCode::InvalidArgument`], listing them. The model
    /// comes in eval mode; it takes the named batch `"input_ids"` (with optional `"attention_mask"`,
    /// `"position_ids"`, `"labels"`) and returns `"logits"` (and `"loss"`). See docs/hf-models.md.
    pub fn from_pretrained(dir: &str, options_json: Option<&str>) -> Result<Model> {
        check_abi()?;
        let d = cstring(dir)?;
        let o = options_json.map(cstring).transpose()?;
        let o_ptr = o.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let mut out = ptr::null_mut();
        Model::owned(
            unsafe { sys::acc_model_from_pretrained(d.as_ptr(), o_ptr, &mut out) },
            out,
        )
    }

    /// transformers' `from_config`: the architecture a `config.json` text names (those
    /// [`Model::from_pretrained`] knows; another is [`ErrorCode::Unsupported`], naming it) with fresh
    /// weights initialised as transformers does (normal(0, `initializer_range`), zero biases, unit
    /// norms) from the CPU generator (seed it through the accelerator's `seed`). Options as
    /// [`Model::from_pretrained`]'s, plus `{"device": "meta"}`: Accelerate's `init_empty_weights`, the
    /// names and shapes without weight memory (for [`Model::module_sizes`] and
    /// [`Model::infer_auto_device_map`]). [`Model::save_pretrained`] writes it with its config.
    ///
    /// ```no_run
    /// # fn main() -> acc::Result<()> {
    /// let config = r#"{"architectures": ["LlamaForCausalLM"], "vocab_size": 256, "hidden_size": 64,
    ///     "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4}"#;
    /// let model = acc::Model::from_config(config, None)?;
    /// model.save_pretrained("out/llama", None)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_config(config_json: &str, options_json: Option<&str>) -> Result<Model> {
        check_abi()?;
        let c = cstring(config_json)?;
        let o = options_json.map(cstring).transpose()?;
        let o_ptr = o.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let mut out = ptr::null_mut();
        Model::owned(unsafe { sys::acc_model_from_config(c.as_ptr(), o_ptr, &mut out) }, out)
    }

    /// transformers' `generate` for a model of [`Model::from_pretrained`]: continues `input_ids`
    /// `[batch, time]` (integer token ids, left-padded where `attention_mask`, `[batch, time]` of 0/1,
    /// has zeros) and returns the whole sequences `[batch, time + n]` (int64), `n <= max_new_tokens`:
    /// fewer when every sequence has emitted a stop token or `on_tokens` stopped it. Options (`None`:
    /// `{}`) over the model's `generation_config.json`: `{"max_new_tokens": 20, "do_sample": false,
    /// "temperature": 1.0, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0, "eos_token_id": id or
    /// [ids], "pad_token_id": id, "seed": n}`; greedy decoding equals transformers'.
    ///
    /// `on_tokens` is called on this thread after every step with the tokens just chosen, one per
    /// sequence (a finished sequence gets the pad token); it returns `true` to go on, `false` to stop
    /// there (the sequences so far are the result). A panic in it stops generation at the C boundary
    /// and resumes here.
    ///
    /// ```no_run
    /// # fn main() -> acc::Result<()> {
    /// let model = acc::Model::from_pretrained("path/to/model", None)?;
    /// let prompt = acc::Tensor::from_slice(&[3i64, 17, 42], &[1, 3])?;
    /// let out = model.generate(&prompt, None, Some(r#"{"max_new_tokens": 8}"#), Some(&mut |tokens: &[i64]| {
    ///     println!("next: {}", tokens[0]);
    ///     true
    /// }))?;
    /// println!("{:?}", out.to_vec::<i64>()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn generate(
        &self,
        input_ids: &Tensor,
        attention_mask: Option<&Tensor>,
        options_json: Option<&str>,
        on_tokens: Option<&mut dyn FnMut(&[i64]) -> bool>,
    ) -> Result<Tensor> {
        struct State<'a> {
            f: &'a mut dyn FnMut(&[i64]) -> bool,
            panic: Option<Box<dyn Any + Send>>,
        }
        unsafe extern "C" fn tokens_fn(user: *mut c_void, tokens: *const i64, batch: i64) -> i32 {
            // SAFETY: user is the State on generate's stack; libacc calls it on the calling thread,
            // during acc_generate only.
            let state = unsafe { &mut *user.cast::<State<'_>>() };
            let tokens: &[i64] = if batch <= 0 || tokens.is_null() {
                &[]
            } else {
                // SAFETY: `batch` tokens borrowed for this call.
                unsafe { std::slice::from_raw_parts(tokens, batch as usize) }
            };
            match panic::catch_unwind(AssertUnwindSafe(|| (state.f)(tokens))) {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(payload) => {
                    state.panic = Some(payload);
                    1 // stop; the panic resumes in the caller
                }
            }
        }
        let o = options_json.map(cstring).transpose()?;
        let o_ptr = o.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let mask = attention_mask.map_or(ptr::null(), |t| t.as_ptr() as *const _);
        let mut state = on_tokens.map(|f| State { f, panic: None });
        let (callback, user): (sys::acc_generate_token_fn, *mut c_void) = match state.as_mut() {
            Some(s) => (Some(tokens_fn), (s as *mut State<'_>).cast()),
            None => (None, ptr::null_mut()),
        };
        let mut out = ptr::null_mut();
        // SAFETY: `state` outlives the call; libacc calls tokens_fn only during it.
        let st = unsafe { sys::acc_generate(self.as_ptr(), input_ids.as_ptr(), mask, o_ptr, callback, user, &mut out) };
        let result = Tensor::owned(st, out); // reads the message at once
        if let Some(payload) = state.and_then(|s| s.panic) {
            drop(result);
            panic::resume_unwind(payload);
        }
        result
    }

    /// Runs the model: the output and, with targets, the scalar loss (ready for backward).
    pub fn forward(&self, input: &Tensor, targets: Option<&Tensor>) -> Result<(Tensor, Option<Tensor>)> {
        let (mut out, mut loss) = (ptr::null_mut(), ptr::null_mut());
        let loss_ptr = if targets.is_some() {
            &mut loss as *mut _
        } else {
            ptr::null_mut()
        };
        let t = targets.map_or(ptr::null(), |t| t.as_ptr() as *const _);
        check(unsafe { sys::acc_model_forward(self.as_ptr(), input.as_ptr(), t, &mut out, loss_ptr) })?;
        let output = Tensor::from_raw(out).ok_or_else(|| Error::new(ErrorCode::Internal, "no output"))?;
        Ok((output, Tensor::from_raw(loss)))
    }

    /// Runs the model and returns only the scalar loss (a training step).
    pub fn loss(&self, input: &Tensor, targets: Option<&Tensor>) -> Result<Tensor> {
        let mut loss = ptr::null_mut();
        let t = targets.map_or(ptr::null(), |t| t.as_ptr() as *const _);
        let st = unsafe { sys::acc_model_forward(self.as_ptr(), input.as_ptr(), t, ptr::null_mut(), &mut loss) };
        Tensor::owned(st, loss)
    }

    /// Runs the model and returns only its output.
    pub fn predict(&self, input: &Tensor) -> Result<Tensor> {
        let mut out = ptr::null_mut();
        let st =
            unsafe { sys::acc_model_forward(self.as_ptr(), input.as_ptr(), ptr::null(), &mut out, ptr::null_mut()) };
        Tensor::owned(st, out)
    }

    /// Runs the model on a named batch, as Accelerate's `model(**batch)`, and returns its outputs as a
    /// batch. The built-in MLP takes `"input"` (and `"targets"`) and returns `"output"` (and `"loss"`);
    /// the GPT takes `"input_ids"` with `"targets"` (aligned, -1 ignored) or Hugging Face's `"labels"`
    /// (shifted inside, -100 ignored) and returns `"logits"` (and `"loss"`); a TorchScript module gets
    /// the tensors by its forward's argument names. A name the model does not take is refused. The
    /// loss keeps its graph, ready for [`Accelerator::backward`].
    pub fn forward_batch(&self, batch: &NamedBatch) -> Result<NamedBatch> {
        let mut out = ptr::null_mut();
        NamedBatch::owned(
            unsafe { sys::acc_model_forward_batch(self.as_ptr(), batch.as_ptr(), &mut out) },
            out,
        )
    }

    /// Training (dropout on) or evaluation mode.
    pub fn set_training(&self, training: bool) -> Result<()> {
        check(unsafe { sys::acc_model_set_training(self.as_ptr(), training as i32) })
    }

    /// The number of scalar parameters.
    pub fn num_parameters(&self) -> Result<i64> {
        let mut n = 0;
        check(unsafe { sys::acc_model_num_parameters(self.as_ptr(), &mut n) })?;
        Ok(n)
    }

    /// Accelerate's `compute_module_sizes`: the bytes of every module and tensor by dotted name (`""`
    /// the whole model) as JSON text, `{"": 13476839424, "model": ..., "model.layers.0": ...}`,
    /// counting floating tensors in `dtype` (`"float32"`, `"bfloat16"`, `"float16"`; `None`: their
    /// own; as Accelerate, a dtype wider than a tensor's own does not grow it). A tied output
    /// embedding counts once. Works on an empty model ([`Model::from_config`] with `{"device":
    /// "meta"}`). See docs/big-models.md.
    pub fn module_sizes(&self, dtype: Option<&str>) -> Result<String> {
        let d = dtype.map(cstring).transpose()?;
        let d_ptr = d.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let mut p = ptr::null();
        check(unsafe { sys::acc_model_module_sizes(self.as_ptr(), d_ptr, &mut p) })?;
        Ok(borrowed_string(p))
    }

    /// Accelerate's `infer_auto_device_map` (with `get_balanced_memory` for `"auto"`, `"balanced"`
    /// and `"balanced_low_0"`) for this model, which may be empty ([`Model::from_config`] with
    /// `{"device": "meta"}`). Options (`None`: `{}`): `{"device_map": "auto" | "balanced" |
    /// "balanced_low_0" | "sequential", "max_memory": {"0": "10GiB", "1": 8000000000, "cpu": "30GB",
    /// "disk": ...}, "no_split_module_classes": [...], "dtype", "offload_buffers",
    /// "fallback_allocation"}`; an unknown key, device or size is [`ErrorCode::InvalidConfig`] naming
    /// it. Returns the map as JSON text, `{"model.embed_tokens": 0, ..., "lm_head": "cpu"}`
    /// (accelerators as integers, `"cpu"` and `"disk"` as strings), the same as Accelerate's for the
    /// same sizes and budget. See docs/big-models.md.
    pub fn infer_auto_device_map(&self, options_json: Option<&str>) -> Result<String> {
        let o = options_json.map(cstring).transpose()?;
        let o_ptr = o.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        let mut p = ptr::null();
        check(unsafe { sys::acc_infer_auto_device_map(self.as_ptr(), o_ptr, &mut p) })?;
        Ok(borrowed_string(p))
    }

    /// Copies of the named parameters and buffers, in order. Under ZeRO-3 or FSDP each tensor is
    /// gathered from the shards (Accelerate's `get_state_dict`): a collective, every process calls it.
    pub fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let mut n = 0;
        check(unsafe { sys::acc_model_state_size(self.as_ptr(), &mut n) })?;
        let mut out = Vec::with_capacity(n as usize);
        for i in 0..n {
            let (mut name, mut t) = (ptr::null(), ptr::null_mut());
            let st = unsafe { sys::acc_model_state_get(self.as_ptr(), i, &mut name, &mut t) };
            let name = if st == sys::ACC_OK {
                borrowed_string(name)
            } else {
                String::new()
            };
            out.push((name, Tensor::owned(st, t)?));
        }
        Ok(out)
    }

    /// Writes the state dict to a safetensors file, atomically. Under ZeRO-3 or FSDP the state is
    /// gathered from the shards: a collective, every process calls it and the main process writes.
    pub fn save_safetensors(&self, path: &str) -> Result<()> {
        let p = cstring(path)?;
        check(unsafe { sys::acc_model_save_safetensors(self.as_ptr(), p.as_ptr()) })
    }

    /// Loads a safetensors file; every name and shape must match.
    pub fn load_safetensors(&self, path: &str) -> Result<()> {
        let p = cstring(path)?;
        check(unsafe { sys::acc_model_load_safetensors(self.as_ptr(), p.as_ptr()) })
    }

    /// Accelerate's `save_model`: the unwrapped model in Hugging Face format under `dir`:
    /// `model.safetensors`, or shards `model-00001-of-0000N.safetensors` with
    /// `model.safetensors.index.json` when it is larger than `max_shard_size` (`"10GB"`: 10^10 bytes,
    /// `"10GiB"`: 10 * 2^30, or a number of bytes; `None` for `"10GB"`). A prepared model is written by
    /// the main process, every process calling (collective). See docs/checkpoints.md.
    pub fn save_model(&self, dir: &str, max_shard_size: Option<&str>) -> Result<()> {
        let d = cstring(dir)?;
        let size = max_shard_size.map(cstring).transpose()?;
        let size_ptr = size.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        check(unsafe { sys::acc_save_model(self.as_ptr(), d.as_ptr(), size_ptr) })
    }

    /// transformers' `save_pretrained` for a model of [`Model::from_pretrained`] or
    /// [`Model::from_config`]: [`Model::save_model`]'s files (`model.safetensors`, or shards past
    /// `max_shard_size` with `model.safetensors.index.json`; `None` for `"10GB"`) plus `config.json`
    /// (its `"dtype"` the weights') and `generation_config.json`, so that [`Model::from_pretrained`]
    /// and transformers' `from_pretrained` load `dir`. Another model is
    /// [`ErrorCode::InvalidArgument`]. A prepared model is written by the main process, every process
    /// calling (collective).
    pub fn save_pretrained(&self, dir: &str, max_shard_size: Option<&str>) -> Result<()> {
        let d = cstring(dir)?;
        let size = max_shard_size.map(cstring).transpose()?;
        let size_ptr = size.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        check(unsafe { sys::acc_model_save_pretrained(self.as_ptr(), d.as_ptr(), size_ptr) })
    }
}

/// Parameter-efficient fine-tuning: frozen parameters and LoRA adapters as Hugging Face `peft` makes
/// them. (Parameter groups are [`Optimizer::new`]'s `"param_groups"` option.)
impl Model {
    /// Freezes (`requires_grad` false) or unfreezes every parameter whose whole dotted name the regular
    /// expression `pattern` matches (Python's re syntax, matched by RE2 in linear time, as
    /// `"param_groups"`: `model\.embed_tokens\..*`, `.*bias`), as torch's `p.requires_grad_()`, and
    /// returns how many matched. A frozen parameter gets no gradient, no optimizer state (create the
    /// optimizer after freezing) and no gradient all-reduce, and [`Accelerator::clip_grad_norm`]
    /// ignores it. A pattern matching nothing, or a bad expression, is [`ErrorCode::InvalidArgument`]
    /// naming it; a prepared model is [`ErrorCode::InvalidState`] (freeze before
    /// [`Accelerator::prepare`]).
    pub fn set_requires_grad(&self, pattern: &str, requires_grad: bool) -> Result<i64> {
        let p = cstring(pattern)?;
        let mut n = 0;
        check(unsafe { sys::acc_model_set_requires_grad(self.as_ptr(), p.as_ptr(), requires_grad as i32, &mut n) })?;
        Ok(n)
    }

    /// `peft`'s `get_peft_model` with a `LoraConfig` as JSON: `"r"`, `"lora_alpha"`, `"lora_dropout"`,
    /// `"target_modules"` (names, one regular expression, or `"all-linear"`), `"bias"`, `"use_rslora"`,
    /// `"modules_to_save"`, `"init_lora_weights"`, `"layers_to_transform"`, `"rank_pattern"`,
    /// `"alpha_pattern"`, ... with `peft`'s defaults, e.g. `{"r": 8, "lora_alpha": 16,
    /// "target_modules": "all-linear"}`. Each targeted linear layer computes `base(x) +
    /// B(A(dropout(x))) * scaling` and every other parameter is frozen. Targets matching nothing are
    /// [`ErrorCode::InvalidArgument`] listing the model's linear layers; a bad key or value is
    /// [`ErrorCode::InvalidArgument`] naming it; a model that has an adapter, or a prepared one, is
    /// [`ErrorCode::InvalidState`]. `A` comes from the CPU generator (seed it through the
    /// accelerator's `seed`).
    pub fn add_lora(&self, lora_config_json: &str) -> Result<()> {
        let c = cstring(lora_config_json)?;
        check(unsafe { sys::acc_model_add_lora(self.as_ptr(), c.as_ptr()) })
    }

    /// `peft`'s `PeftModel.from_pretrained`: reads `dir`'s `adapter_config.json` and
    /// `adapter_model.safetensors` (as `peft` or [`Model::save_adapter`] wrote them), adds the adapter
    /// and loads its weights. Options (`None`: `{}`): `{"is_trainable": false}` (`peft`'s default: the
    /// adapter is frozen too). A tensor the adapter does not have, one it lacks, or another shape is
    /// [`ErrorCode::InvalidArgument`] naming it, the model unchanged.
    pub fn load_adapter(&self, dir: &str, options_json: Option<&str>) -> Result<()> {
        let d = cstring(dir)?;
        let o = options_json.map(cstring).transpose()?;
        let o_ptr = o.as_ref().map_or(ptr::null(), |s| s.as_ptr());
        check(unsafe { sys::acc_model_load_adapter(self.as_ptr(), d.as_ptr(), o_ptr) })
    }

    /// `peft`'s `save_pretrained` of the adapter: `adapter_config.json` and
    /// `adapter_model.safetensors` in `dir` (created if missing), with `peft`'s tensor names, so that
    /// `PeftModel.from_pretrained` and [`Model::load_adapter`] read it. A model without an adapter is
    /// [`ErrorCode::InvalidState`]. A prepared model is written by the main process, every process
    /// calling (collective).
    pub fn save_adapter(&self, dir: &str) -> Result<()> {
        let d = cstring(dir)?;
        check(unsafe { sys::acc_model_save_adapter(self.as_ptr(), d.as_ptr()) })
    }

    /// `peft`'s `merge_and_unload`: each LoRA layer's `B A * scaling` is added to its base weight and
    /// the adapter removed, leaving a plain model ([`Model::save_pretrained`] then writes a
    /// transformers checkpoint). A model without an adapter, or a prepared one, is
    /// [`ErrorCode::InvalidState`].
    pub fn merge_adapter(&self) -> Result<()> {
        check(unsafe { sys::acc_model_merge_adapter(self.as_ptr()) })
    }
}

impl Optimizer {
    /// An optimizer over all parameters of `model`: `{"type": "sgd"|"adam"|"adamw", "lr",
    /// "momentum", "dampening", "nesterov", "betas", "eps", "weight_decay", "amsgrad", "fused"}`,
    /// with PyTorch's defaults; the table of keys and defaults is in docs/c-api.md, "Optimizer
    /// options". `"param_groups"` gives groups of parameters their own options: `[{"params":
    /// ["lm_head\\..*"], "lr": 1e-4}, ...]` (regular expressions over whole parameter names; the
    /// rest take the top-level options), or `"transformers"` (the Trainer's: no weight decay for
    /// biases and norms).
    pub fn new(model: &Model, options_json: &str) -> Result<Optimizer> {
        check_abi()?;
        let c = cstring(options_json)?;
        let mut out = ptr::null_mut();
        Optimizer::owned(
            unsafe { sys::acc_optimizer_create(model.as_ptr(), c.as_ptr(), &mut out) },
            out,
        )
    }

    /// Applies the gradients.
    pub fn step(&self) -> Result<()> {
        check(unsafe { sys::acc_optimizer_step(self.as_ptr()) })
    }

    /// Clears the gradients.
    pub fn zero_grad(&self) -> Result<()> {
        check(unsafe { sys::acc_optimizer_zero_grad(self.as_ptr()) })
    }

    /// Whether the last step was skipped (fp16 found inf/nan gradients).
    pub fn step_was_skipped(&self) -> Result<bool> {
        let mut v = 0;
        check(unsafe { sys::acc_optimizer_step_was_skipped(self.as_ptr(), &mut v) })?;
        Ok(v != 0)
    }

    /// The current learning rate.
    pub fn lr(&self) -> Result<f64> {
        let mut v = 0.0;
        check(unsafe { sys::acc_optimizer_lr(self.as_ptr(), &mut v) })?;
        Ok(v)
    }
}

impl Scheduler {
    /// A schedule: `{"type": "constant"|"linear"|"cosine", "warmup_steps": 0, "total_steps": N,
    /// "min_lr_ratio": 0.0}`.
    pub fn new(opt: &Optimizer, options_json: &str) -> Result<Scheduler> {
        check_abi()?;
        let c = cstring(options_json)?;
        let mut out = ptr::null_mut();
        Scheduler::owned(
            unsafe { sys::acc_scheduler_create(opt.as_ptr(), c.as_ptr(), &mut out) },
            out,
        )
    }

    /// Advances the schedule by one step.
    pub fn step(&self) -> Result<()> {
        check(unsafe { sys::acc_scheduler_step(self.as_ptr()) })
    }

    /// The learning rate the schedule set last.
    pub fn last_lr(&self) -> Result<f64> {
        let mut v = 0.0;
        check(unsafe { sys::acc_scheduler_last_lr(self.as_ptr(), &mut v) })?;
        Ok(v)
    }
}

/// A libacc byte-string list, destroyed on drop.
struct BytesList(*mut sys::acc_bytes_list);

impl Drop for BytesList {
    fn drop(&mut self) {
        unsafe { sys::acc_bytes_list_destroy(self.0) }
    }
}

impl BytesList {
    fn new(items: &[&[u8]]) -> Result<BytesList> {
        let mut list = ptr::null_mut();
        check(unsafe { sys::acc_bytes_list_create(&mut list) })?;
        let list = BytesList(list);
        for item in items {
            check(unsafe { sys::acc_bytes_list_append(list.0, item.as_ptr().cast(), item.len()) })?;
        }
        Ok(list)
    }

    fn to_vecs(&self) -> Result<Vec<Vec<u8>>> {
        let mut n = 0;
        check(unsafe { sys::acc_bytes_list_count(self.0, &mut n) })?;
        (0..n)
            .map(|i| {
                let (mut data, mut size) = (ptr::null(), 0usize);
                check(unsafe { sys::acc_bytes_list_get(self.0, i, &mut data, &mut size) })?;
                if size == 0 {
                    return Ok(Vec::new());
                }
                // SAFETY: `size` bytes borrowed from the list, copied at once.
                Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }.to_vec())
            })
            .collect()
    }
}

/// What a callback left behind for the caller: its error, or its panic to resume.
#[derive(Default)]
struct CallbackFailure {
    error: Option<Box<dyn std::error::Error + Send + Sync>>,
    panic: Option<Box<dyn Any + Send>>,
}

type FailureSlot = Arc<Mutex<CallbackFailure>>;

/// The error of a failed call (read at once), with a dataset callback's error as its source; a callback's panic
/// resumes here.
fn callback_failure(st: sys::acc_status, slot: &Option<FailureSlot>) -> Error {
    let err = Error::last(st);
    if let Some(slot) = slot {
        let mut f = slot.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(payload) = f.panic.take() {
            drop(f);
            panic::resume_unwind(payload);
        }
        if let Some(source) = f.error.take() {
            return err.with_source(source);
        }
    }
    err
}

/// A source of samples: rows of tensors (named or not), a token file, data files prepared with a tokenizer, or a
/// Rust closure. Freed on drop (loaders made from it keep it alive).
pub struct Dataset {
    ptr: NonNull<sys::acc_dataset>,
    failure: Option<FailureSlot>,
}

// SAFETY: libacc handles may be used from any thread, one at a time; a closure behind the dataset is
// `Send`.
unsafe impl Send for Dataset {}

impl Drop for Dataset {
    fn drop(&mut self) {
        unsafe { sys::acc_dataset_destroy(self.ptr.as_ptr()) }
    }
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dataset({:p})", self.ptr)
    }
}

impl Dataset {
    fn owned(status: sys::acc_status, out: *mut sys::acc_dataset, failure: Option<FailureSlot>) -> Result<Dataset> {
        check(status)?;
        NonNull::new(out)
            .map(|ptr| Dataset { ptr, failure })
            .ok_or_else(|| Error::new(ErrorCode::Internal, "libacc returned a NULL dataset"))
    }

    /// Samples are the rows (dim 0) of `inputs` and of `targets` when given (both copied).
    pub fn from_tensors(inputs: &Tensor, targets: Option<&Tensor>) -> Result<Dataset> {
        check_abi()?;
        let mut out = ptr::null_mut();
        let t = targets.map_or(ptr::null(), |t| t.as_ptr() as *const _);
        Dataset::owned(
            unsafe { sys::acc_dataset_from_tensors(inputs.as_ptr(), t, &mut out) },
            out,
            None,
        )
    }

    /// A memory-mapped token file: `{"block_size": T, "dtype": "uint16"|"int32"}`.
    pub fn from_token_file(path: &str, options_json: &str) -> Result<Dataset> {
        check_abi()?;
        let (p, o) = (cstring(path)?, cstring(options_json)?);
        let mut out = ptr::null_mut();
        Dataset::owned(
            unsafe { sys::acc_dataset_from_token_file(p.as_ptr(), o.as_ptr(), &mut out) },
            out,
            None,
        )
    }

    /// A dataset of `len` samples produced by `f(index) -> (input, target)`, called on the thread that
    /// calls [`DataLoader::next`]. An `Err` fails that call with [`ErrorCode::Callback`] and the error
    /// as its source; a panic is caught at the C boundary and resumed in the caller of `next`.
    pub fn from_fn<F, E>(len: i64, f: F) -> Result<Dataset>
    where
        F: FnMut(i64) -> std::result::Result<(Tensor, Option<Tensor>), E> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        check_abi()?;
        struct State<F> {
            f: F,
            failure: FailureSlot,
        }
        unsafe extern "C" fn get<F, E>(
            user: *mut c_void,
            index: i64,
            input: *mut *mut sys::acc_tensor,
            target: *mut *mut sys::acc_tensor,
        ) -> sys::acc_status
        where
            F: FnMut(i64) -> std::result::Result<(Tensor, Option<Tensor>), E> + Send + 'static,
            E: Into<Box<dyn std::error::Error + Send + Sync>>,
        {
            // SAFETY: user is the State we boxed; libacc calls one sample at a time.
            let state = unsafe { &mut *user.cast::<State<F>>() };
            match panic::catch_unwind(AssertUnwindSafe(|| (state.f)(index))) {
                Ok(Ok((x, y))) => {
                    // SAFETY: libacc passes valid out-pointers and takes ownership of both tensors.
                    unsafe {
                        *input = x.into_raw();
                        if let Some(y) = y {
                            *target = y.into_raw();
                        }
                    }
                    sys::ACC_OK
                }
                Ok(Err(e)) => {
                    state.failure.lock().unwrap_or_else(|p| p.into_inner()).error = Some(e.into());
                    sys::ACC_ERR_CALLBACK
                }
                Err(payload) => {
                    state.failure.lock().unwrap_or_else(|p| p.into_inner()).panic = Some(payload);
                    sys::ACC_ERR_CALLBACK
                }
            }
        }
        unsafe extern "C" fn free<F>(user: *mut c_void) {
            // SAFETY: called once, when libacc no longer uses the dataset; dropping must not unwind.
            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                drop(unsafe { Box::from_raw(user.cast::<State<F>>()) })
            }));
        }
        let failure = FailureSlot::default();
        let user = Box::into_raw(Box::new(State {
            f,
            failure: failure.clone(),
        }));
        let mut out = ptr::null_mut();
        // SAFETY: libacc calls free exactly once, also when this fails.
        let st =
            unsafe { sys::acc_dataset_from_callback(len, Some(get::<F, E>), user.cast(), Some(free::<F>), &mut out) };
        Dataset::owned(st, out, Some(failure))
    }

    /// A dataset of named columns (torch's `TensorDataset`, named): sample `i` is `{name:
    /// columns[name][i]}`. The tensors must agree in their number of rows; they are copied.
    pub fn from_batch(columns: &NamedBatch) -> Result<Dataset> {
        check_abi()?;
        let mut out = ptr::null_mut();
        Dataset::owned(
            unsafe { sys::acc_dataset_from_batch(columns.as_ptr(), &mut out) },
            out,
            None,
        )
    }

    /// A dataset of `len` named samples produced by `f(index) -> NamedBatch`, called on the thread that
    /// calls [`DataLoader::next_batch`] (or [`DataLoader::next`]). Every sample names the same tensors
    /// in the same order. An `Err` fails that call with [`ErrorCode::Callback`] and the error as its
    /// source; a panic is caught at the C boundary and resumed in the caller.
    pub fn from_batch_fn<F, E>(len: i64, f: F) -> Result<Dataset>
    where
        F: FnMut(i64) -> std::result::Result<NamedBatch, E> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        check_abi()?;
        struct State<F> {
            f: F,
            failure: FailureSlot,
        }
        unsafe extern "C" fn get<F, E>(user: *mut c_void, index: i64, sample: *mut sys::acc_batch) -> sys::acc_status
        where
            F: FnMut(i64) -> std::result::Result<NamedBatch, E> + Send + 'static,
            E: Into<Box<dyn std::error::Error + Send + Sync>>,
        {
            // SAFETY: user is the State we boxed; libacc calls one sample at a time.
            let state = unsafe { &mut *user.cast::<State<F>>() };
            let r = panic::catch_unwind(AssertUnwindSafe(|| {
                let batch = (state.f)(index).map_err(Into::into)?;
                // libacc owns `sample` (valid for this call); it shares the tensors of `batch`.
                batch
                    .copy_into_raw(sample)
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
            }));
            let mut failure = state.failure.lock().unwrap_or_else(|p| p.into_inner());
            match r {
                Ok(Ok(())) => return sys::ACC_OK,
                Ok(Err(e)) => failure.error = Some(e),
                Err(payload) => failure.panic = Some(payload),
            }
            sys::ACC_ERR_CALLBACK
        }
        unsafe extern "C" fn free<F>(user: *mut c_void) {
            // SAFETY: called once, when libacc no longer uses the dataset; dropping must not unwind.
            let _ = panic::catch_unwind(AssertUnwindSafe(|| {
                drop(unsafe { Box::from_raw(user.cast::<State<F>>()) })
            }));
        }
        let failure = FailureSlot::default();
        let user = Box::into_raw(Box::new(State {
            f,
            failure: failure.clone(),
        }));
        let mut out = ptr::null_mut();
        // SAFETY: libacc calls free exactly once, also when this fails.
        let st = unsafe {
            sys::acc_dataset_from_batch_callback(len, Some(get::<F, E>), user.cast(), Some(free::<F>), &mut out)
        };
        Dataset::owned(st, out, Some(failure))
    }

    /// Rows of data files (JSON lines, CSV, Parquet, Arrow; a file or a folder) prepared with `tok` as
    /// datasets / TRL prepare them, whose batches are the chosen collator's padded batches of named
    /// int64 tensors (`input_ids`, `attention_mask`, `labels`, ...). `path` is `None` when the options
    /// name `"files"`. Options (`None`: defaults): `acc_dataset_from_files` in acc.h and docs/data.md,
    /// e.g. `{"mode": "tokenize", "collator": "with_padding"}`. A bad option is
    /// [`ErrorCode::InvalidConfig`] naming it, a column the files lack [`ErrorCode::InvalidArgument`]
    /// listing theirs, an unreadable file [`ErrorCode::Io`] naming it. The dataset does not keep `tok`.
    ///
    /// ```no_run
    /// # fn main() -> acc::Result<()> {
    /// let tok = acc::Tokenizer::from_pretrained("tests/text/tiny/bytebpe")?;
    /// let ds = acc::Dataset::from_files(Some("tests/data/prep/messages.jsonl"), &tok, None)?;
    /// let batch = ds.get_batch(&[0, 1])?; // TRL's collator: input_ids, attention_mask, labels [2, length]
    /// # Ok(()) }
    /// ```
    pub fn from_files(path: Option<&str>, tok: &Tokenizer, options_json: Option<&str>) -> Result<Dataset> {
        check_abi()?;
        let (p, o) = (path.map(cstring).transpose()?, options_json.map(cstring).transpose()?);
        let mut out = ptr::null_mut();
        let st = unsafe {
            sys::acc_dataset_from_files(
                p.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
                tok.as_ptr(),
                o.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
                &mut out,
            )
        };
        Dataset::owned(st, out, None)
    }

    /// [`Dataset::from_files`] with the accelerator's `data.*` settings (docs/configuration.md: from
    /// the environment or the accelerator's JSON, recorded in the run record), so that a run's data is
    /// its configuration. A bad setting is [`ErrorCode::InvalidConfig`] naming the key, its value and
    /// its source.
    pub fn from_config(acc: &Accelerator, tok: &Tokenizer) -> Result<Dataset> {
        check_abi()?;
        let mut out = ptr::null_mut();
        Dataset::owned(
            unsafe { sys::acc_dataset_from_config(acc.as_ptr(), tok.as_ptr(), &mut out) },
            out,
            None,
        )
    }

    /// The batch a loader makes of the samples `indices`, in that order (for a files dataset, the
    /// collator's padded batch of those rows): a look at the data without a loader. No index, or one
    /// outside the dataset, is [`ErrorCode::InvalidArgument`] naming it; an iterable dataset has no
    /// batches by index ([`ErrorCode::Unsupported`]).
    pub fn get_batch(&self, indices: &[i64]) -> Result<NamedBatch> {
        let mut out = ptr::null_mut();
        // An empty slice's pointer is dangling but not read: libacc refuses count 0 first.
        let st =
            unsafe { sys::acc_dataset_get_batch(self.ptr.as_ptr(), indices.as_ptr(), indices.len() as i64, &mut out) };
        if st != sys::ACC_OK {
            // A callback dataset's samples come from its callback: its error or panic comes back here.
            return Err(callback_failure(st, &self.failure));
        }
        NamedBatch::owned(st, out)
    }

    /// The number of samples.
    pub fn len(&self) -> Result<i64> {
        let mut n = 0;
        check(unsafe { sys::acc_dataset_length(self.ptr.as_ptr(), &mut n) })?;
        Ok(n)
    }

    /// Whether the dataset has no samples.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// A batch as (input, target), what [`DataLoader::next`] yields (the target is None when the dataset
/// has none). Named batches are [`NamedBatch`]es ([`DataLoader::next_batch`]).
#[derive(Debug)]
pub struct Batch {
    pub input: Tensor,
    pub target: Option<Tensor>,
}

/// Batches a dataset; once prepared it yields this process's shard of every batch. Freed on drop.
pub struct DataLoader {
    ptr: NonNull<sys::acc_dataloader>,
    failure: Option<FailureSlot>,
}

// SAFETY: as for Dataset.
unsafe impl Send for DataLoader {}

impl Drop for DataLoader {
    fn drop(&mut self) {
        unsafe { sys::acc_dataloader_destroy(self.ptr.as_ptr()) }
    }
}

impl std::fmt::Debug for DataLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataLoader({:p})", self.ptr)
    }
}

impl DataLoader {
    /// A loader: `{"batch_size": 1, "shuffle": false, "seed": 0, "drop_last": false}`.
    pub fn new(ds: &Dataset, options_json: &str) -> Result<DataLoader> {
        check_abi()?;
        let c = cstring(options_json)?;
        let mut out = ptr::null_mut();
        check(unsafe { sys::acc_dataloader_create(ds.ptr.as_ptr(), c.as_ptr(), &mut out) })?;
        NonNull::new(out)
            .map(|ptr| DataLoader {
                ptr,
                failure: ds.failure.clone(),
            })
            .ok_or_else(|| Error::new(ErrorCode::Internal, "libacc returned a NULL data loader"))
    }

    fn as_ptr(&self) -> *mut sys::acc_dataloader {
        self.ptr.as_ptr()
    }

    /// This process's next batch, or `None` at the end of an epoch; the call after that starts the
    /// next epoch (reshuffled by the loader's generator). Resumes a panic of a [`Dataset::from_fn`] callback.
    /// A batch of one or two tensors arrives as (input, target), in the batch's order.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&self) -> Result<Option<Batch>> {
        let (mut x, mut y, mut has) = (ptr::null_mut(), ptr::null_mut(), 0);
        let st = unsafe { sys::acc_dataloader_next(self.as_ptr(), &mut x, &mut y, &mut has) };
        if st != sys::ACC_OK {
            return Err(self.failed(st));
        }
        if has == 0 {
            return Ok(None);
        }
        let input = Tensor::from_raw(x).ok_or_else(|| Error::new(ErrorCode::Internal, "batch without input"))?;
        Ok(Some(Batch {
            input,
            target: Tensor::from_raw(y),
        }))
    }

    /// This process's next batch with its tensors by name, or `None` at the end of an epoch (the call
    /// after that starts the next epoch). Resumes a panic of a dataset callback.
    pub fn next_batch(&self) -> Result<Option<NamedBatch>> {
        let mut out = ptr::null_mut();
        let st = unsafe { sys::acc_dataloader_next_batch(self.as_ptr(), &mut out) };
        if st != sys::ACC_OK {
            return Err(self.failed(st));
        }
        Ok(NamedBatch::from_raw(out))
    }

    /// The error of a failed load (read at once), with a dataset callback's error as its source; a
    /// callback's panic resumes here.
    fn failed(&self, st: sys::acc_status) -> Error {
        callback_failure(st, &self.failure)
    }

    /// A loader over the same data that skips the first `n` batches of its next pass (Accelerate's
    /// `skip_first_batches`, to resume mid-epoch).
    pub fn skip_first_batches(&self, n: i64) -> Result<DataLoader> {
        let mut out = ptr::null_mut();
        check(unsafe { sys::acc_dataloader_skip_first_batches(self.as_ptr(), n, &mut out) })?;
        NonNull::new(out)
            .map(|ptr| DataLoader {
                ptr,
                failure: self.failure.clone(),
            })
            .ok_or_else(|| Error::new(ErrorCode::Internal, "libacc returned a NULL data loader"))
    }

    /// The epoch the current pass runs, or the next one between passes.
    pub fn epoch(&self) -> Result<i64> {
        let mut v = 0;
        check(unsafe { sys::acc_dataloader_epoch(self.as_ptr(), &mut v) })?;
        Ok(v)
    }

    /// Batches per epoch on this process.
    pub fn len(&self) -> Result<i64> {
        let mut n = 0;
        check(unsafe { sys::acc_dataloader_length(self.as_ptr(), &mut n) })?;
        Ok(n)
    }

    /// Whether an epoch has no batches.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Restarts at the beginning of `epoch`.
    pub fn set_epoch(&self, epoch: i64) -> Result<()> {
        check(unsafe { sys::acc_dataloader_set_epoch(self.as_ptr(), epoch) })
    }

    /// Whether the last batch of the epoch is current.
    pub fn end_of_epoch(&self) -> Result<bool> {
        let mut v = 0;
        check(unsafe { sys::acc_dataloader_end_of_epoch(self.as_ptr(), &mut v) })?;
        Ok(v != 0)
    }
}
