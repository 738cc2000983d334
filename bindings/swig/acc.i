/*
 * The one SWIG interface for libacc's Go and Java bindings (bindings/swig/generate.sh runs it).
 *
 * It wraps capi/include/acc/acc.h as a flat, raw layer; the idiomatic public APIs are hand-written on
 * top (bindings/go/acc, bindings/java/src/main/java/ai/acc). The rules this file implements:
 *
 * - acc_status never reaches the caller as a bare number. The C wrapper reads the code and
 *   acc_last_error_message() right after the call, on the same OS thread, inside the same C call
 *   (goroutines move between threads between two cgo calls; the last error is thread-local):
 *     Go:   the raw function returns `error` (nil or *raw.StatusError{Code, Message}).
 *     Java: the JNI wrapper throws ai.acc.AccException(code, message) before it returns.
 * - Handles are opaque pointers: Go `uintptr`, Java `long`. Out-parameters (`T** out`, `int32_t* out`,
 *   ...) are Go pointers (`*uintptr`, `*int32`; nil means "not wanted") and Java one-element arrays.
 * - Host buffers are Go `[]byte` / Java `byte[]`, copied by libacc (C never retains Go or Java heap
 *   memory). Zero-copy goes through DLPack with the accx_ helpers below: Go wraps C-allocated memory,
 *   Java wraps direct ByteBuffers.
 * - acc_dataset_from_callback, acc_dataset_from_batch_callback, acc_register_for_checkpointing and
 *   acc_generate are not wrapped as such (no SWIG directors): the Go package has its own cgo
 *   trampolines, and Java gets accx_dataset_from_java, accx_dataset_from_java_batch,
 *   accx_register_for_checkpointing_java and accx_generate_java below (C trampolines calling Java
 *   methods).
 * - The `dir` of acc_save_state / acc_load_state and acc_save_model's `max_shard_size` may be NULL: Go's ""
 *   and Java's null cross as NULL. (The adapter calls' `dir` too: libacc then names the NULL.)
 */
%module raw

/* LP64: int64_t is `long` to C (SWIGWORDSIZE64), so the generated casts match acc.h exactly. */
#define SWIGWORDSIZE64
%include <stdint.i>

%{
#include <acc/acc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
%}

/* ------------------------------------------------------------------------------------------------ */
/* DLPack 1.x structures (the layout is frozen by the DLPack ABI) and the zero-copy helpers shared by  */
/* Go and Java. Helper failures are reported through their own thread-local message.                  */
%{
typedef struct { int32_t device_type; int32_t device_id; } accx_DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } accx_DLDataType;
typedef struct {
  void* data;
  accx_DLDevice device;
  int32_t ndim;
  accx_DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} accx_DLTensor;
typedef struct { uint32_t major; uint32_t minor; } accx_DLPackVersion;
typedef struct accx_DLManagedTensorVersioned {
  accx_DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct accx_DLManagedTensorVersioned* self);
  uint64_t flags;
  accx_DLTensor dl_tensor;
} accx_DLManagedTensorVersioned;

static __thread char accx_message[512];

static acc_status accx_fail(acc_status code, const char* message) {
  snprintf(accx_message, sizeof accx_message, "%s", message);
  return code;
}

/* The message that belongs to `code`: the helper's own, else libacc's thread-local one. */
static const char* accx_status_message(acc_status code) {
  (void)code;
  if (accx_message[0]) return accx_message;
  return acc_last_error_message();
}

static size_t accx_dtype_size(acc_dtype d) {
  switch (d) {
    case ACC_FLOAT32: case ACC_INT32: return 4;
    case ACC_FLOAT64: case ACC_INT64: return 8;
    case ACC_BFLOAT16: case ACC_FLOAT16: return 2;
    case ACC_UINT8: case ACC_BOOL: return 1;
    default: return 0;
  }
}

static accx_DLDataType accx_dl_dtype(acc_dtype d) {
  accx_DLDataType t = {0, 0, 1};
  switch (d) {
    case ACC_FLOAT32: t.code = 2; t.bits = 32; break;
    case ACC_FLOAT64: t.code = 2; t.bits = 64; break;
    case ACC_BFLOAT16: t.code = 4; t.bits = 16; break;
    case ACC_FLOAT16: t.code = 2; t.bits = 16; break;
    case ACC_INT32: t.code = 0; t.bits = 32; break;
    case ACC_INT64: t.code = 0; t.bits = 64; break;
    case ACC_UINT8: t.code = 1; t.bits = 8; break;
    case ACC_BOOL: t.code = 6; t.bits = 8; break;
  }
  return t;
}

/* What frees the wrapped memory when libacc releases the tensor. */
typedef void (*accx_release_fn)(void* data, void* ctx);

typedef struct {
  accx_DLManagedTensorVersioned m;
  accx_release_fn release;
  void* release_ctx;
  int64_t dims[]; /* shape, then strides */
} accx_wrapped;

static void accx_wrapped_deleter(accx_DLManagedTensorVersioned* self) {
  accx_wrapped* w = (accx_wrapped*)self;
  if (w->release) w->release(self->dl_tensor.data, w->release_ctx);
  free(w);
}

/* A zero-copy tensor over `data` (CPU, row-major). On every path `release(data, ctx)` runs exactly
 * once: when the tensor's memory is released, or right away when this fails. */
static acc_status accx_wrap(void* data, size_t nbytes, acc_dtype dtype, const int64_t* shape, int32_t ndim,
                            accx_release_fn release, void* ctx, acc_tensor** out) {
  accx_message[0] = '\0';
  if (out) *out = NULL;
  size_t esize = accx_dtype_size(dtype);
  char msg[160];
  acc_status st = ACC_OK;
  int64_t numel = 1;
  if (!out) {
    st = accx_fail(ACC_ERR_INVALID_ARGUMENT, "out is NULL");
  } else if (esize == 0) {
    snprintf(msg, sizeof msg, "unknown dtype %d", (int)dtype);
    st = accx_fail(ACC_ERR_INVALID_ARGUMENT, msg);
  } else if (ndim < 0 || (ndim > 0 && !shape)) {
    st = accx_fail(ACC_ERR_INVALID_ARGUMENT, "shape is NULL or ndim is negative");
  } else {
    for (int32_t i = 0; i < ndim; ++i) {
      if (shape[i] < 0) st = accx_fail(ACC_ERR_INVALID_ARGUMENT, "negative dimension in shape");
      numel *= shape[i];
    }
    if (st == ACC_OK && (size_t)numel * esize != nbytes) {
      snprintf(msg, sizeof msg, "nbytes %zu does not match the shape and dtype (%lld elements of %zu bytes)",
               nbytes, (long long)numel, esize);
      st = accx_fail(ACC_ERR_INVALID_ARGUMENT, msg);
    }
  }
  accx_wrapped* w = NULL;
  if (st == ACC_OK) {
    w = (accx_wrapped*)calloc(1, sizeof(accx_wrapped) + sizeof(int64_t) * 2 * (size_t)(ndim > 0 ? ndim : 1));
    if (!w) st = accx_fail(ACC_ERR_OUT_OF_MEMORY, "out of memory");
  }
  if (st != ACC_OK) {
    if (release) release(data, ctx);
    return st;
  }
  w->release = release;
  w->release_ctx = ctx;
  w->m.version.major = 1;
  w->m.version.minor = 0;
  w->m.deleter = accx_wrapped_deleter;
  w->m.manager_ctx = w;
  w->m.dl_tensor.data = data;
  w->m.dl_tensor.device.device_type = 1; /* kDLCPU */
  w->m.dl_tensor.ndim = ndim;
  w->m.dl_tensor.dtype = accx_dl_dtype(dtype);
  w->m.dl_tensor.shape = w->dims;
  w->m.dl_tensor.strides = w->dims + ndim;
  int64_t stride = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    w->dims[i] = shape[i];
    w->dims[ndim + i] = stride;
    stride *= shape[i];
  }
  st = acc_tensor_from_dlpack((struct DLManagedTensorVersioned*)&w->m, out); /* calls the deleter on failure */
  if (st != ACC_OK) accx_fail(st, acc_last_error_message());
  return st;
}
%}

/* Helper-status: like acc_status, but the message may be the helper's own. */
typedef int32_t accx_status;
%{
typedef int32_t accx_status;
%}
/* UTF-8 text in (the text helpers): a Go string; a Java byte[] (see the Java section). */
typedef const char* accx_utf8;
%{
typedef const char* accx_utf8;
%}

/* ------------------------------------------------------------------------------------------------ */
/* Go                                                                                                */
#ifdef SWIGGO
%go_import("fmt")
%insert(cgo_comment_typedefs) %{
#cgo pkg-config: acc
%}

/* Status: "<code>:<message>" crosses back as a C-allocated Go string, "" on success. */
%fragment("accx_status_string", "header", fragment="AllocateString") %{
static _gostring_ accx_status_string(acc_status code, const char* message) {
  _gostring_ r;
  char head[16];
  int h = snprintf(head, sizeof head, "%d:", (int)code);
  size_t m = strlen(message);
  r.p = (char*)malloc((size_t)h + m);
  r.n = 0;
  if (r.p) {
    memcpy(r.p, head, (size_t)h);
    memcpy(r.p + h, message, m);
    r.n = (intgo)((size_t)h + m);
  }
  return r;
}
%}
%go_import("strconv", "strings")
%insert(go_wrapper) %{
// StatusError is a failed libacc call: the status code and the thread-local message, both read by
// the C wrapper right after the call, on the thread that made it.
type StatusError struct {
	Code    int32
	Message string
}

func (e *StatusError) Error() string { return fmt.Sprintf("libacc status %d: %s", e.Code, e.Message) }

func newStatusError(s string) error {
	if s == "" {
		return nil
	}
	head, msg, _ := strings.Cut(s, ":")
	code, err := strconv.Atoi(head)
	if err != nil {
		code = ACC_ERR_INTERNAL
		msg = s
	}
	return &StatusError{Code: int32(code), Message: msg}
}
%}

%define ACCX_GO_STATUS(TYPE, MESSAGE)
%typemap(gotype) TYPE "error"
%typemap(imtype) TYPE "string"
%typemap(out, fragment="accx_status_string") TYPE
%{ if ($1 == ACC_OK) { $result.p = NULL; $result.n = 0; } else { $result = accx_status_string($1, MESSAGE); } %}
%typemap(goout, fragment="CopyString") TYPE
%{ if $1 == "" { $result = nil } else { $result = newStatusError(swigCopyString($1)) } %}
%enddef
ACCX_GO_STATUS(acc_status, acc_last_error_message())
ACCX_GO_STATUS(accx_status, accx_status_message($1))
/* ...but a status passed in (acc_status_name) is a plain number. */
%typemap(gotype) acc_status status "int32"
%typemap(imtype) acc_status status "int32"
%typemap(in) acc_status status %{ $1 = (acc_status)$input; %}

/* Handles: uintptr in, *uintptr out (nil: not wanted). */
%define ACCX_GO_HANDLE(T)
%typemap(gotype) T*, const T* "uintptr"
%typemap(in) T*, const T* %{ $1 = ($1_ltype)$input; %}
%typemap(gotype) T** "*uintptr"
%typemap(in) T** %{ $1 = ($1_ltype)$input; %}
%enddef

/* Scalar out-parameters: a Go pointer to a matching Go type (nil: not wanted). */
%define ACCX_GO_OUT(CTYPE, GOTYPE)
%typemap(gotype) CTYPE* "*" #GOTYPE
%typemap(in) CTYPE* %{ $1 = ($1_ltype)$input; %}
%enddef
ACCX_GO_OUT(int32_t, int32)
ACCX_GO_OUT(int64_t, int64)
ACCX_GO_OUT(double, float64)
ACCX_GO_OUT(size_t, uint64)

/* Borrowed strings out: copied into a Go string inside the call. */
%typemap(gotype) const char** "*string"
%typemap(in) const char** (const char* temp = NULL) %{ $1 = ($1_ltype)($input ? &temp : NULL); %}
%typemap(argout, fragment="AllocateString") const char**
%{ if ($input) *$input = Swig_AllocateString(temp$argnum ? temp$argnum : "", temp$argnum ? strlen(temp$argnum) : 0); %}
%typemap(goargout, fragment="CopyString") const char**
%{ if $input != nil { *$input = swigCopyString(*$input) } %}

/* The directory of acc_save_state / acc_load_state and acc_save_model's max_shard_size: "" crosses as NULL
 * (automatic naming / the newest checkpoint; the default shard size); the default string typemaps do the
 * rest (the copy is freed after the call). */
%typemap(in) const char* dir, const char* max_shard_size
%{ $1 = NULL;
   if ($input.n > 0) {
     $1 = ($1_ltype)malloc((size_t)$input.n + 1);
     memcpy((char*)$1, $input.p, (size_t)$input.n);
     ((char*)$1)[$input.n] = '\0';
   } %}

/* Byte buffers and shapes: Go slices, read or written during the call only. */
%typemap(gotype) (const void* data, size_t nbytes), (void* dst, size_t nbytes), (const void* data, size_t size) "[]byte"
%typemap(in) (const void* data, size_t nbytes), (void* dst, size_t nbytes), (const void* data, size_t size)
%{ $1 = ($1_ltype)$input.array; $2 = (size_t)$input.len; %}
%typemap(gotype) (const int64_t* shape, int32_t ndim), (int64_t* shape, int32_t capacity) "[]int64"
%typemap(in) (const int64_t* shape, int32_t ndim), (int64_t* shape, int32_t capacity)
%{ $1 = ($1_ltype)$input.array; $2 = (int32_t)$input.len; %}

/* Zero-copy memory: unsafe.Pointer to C memory. */
%typemap(gotype) void* "unsafe.Pointer"
%typemap(in) void* %{ $1 = $input; %}
%typemap(out) void* %{ $result = $1; %}
%typemap(gotype) void**, const void** "*unsafe.Pointer"
%typemap(in) void**, const void** %{ $1 = ($1_ltype)$input; %}

ACCX_GO_HANDLE(acc_accelerator)
ACCX_GO_HANDLE(acc_tensor)
ACCX_GO_HANDLE(acc_model)
ACCX_GO_HANDLE(acc_optimizer)
ACCX_GO_HANDLE(acc_scheduler)
ACCX_GO_HANDLE(acc_dataset)
ACCX_GO_HANDLE(acc_dataloader)
ACCX_GO_HANDLE(struct DLManagedTensorVersioned)
ACCX_GO_HANDLE(acc_bytes_list)
ACCX_GO_HANDLE(acc_batch)
ACCX_GO_HANDLE(acc_tokenizer)
ACCX_GO_HANDLE(acc_encoding)

/* Text (the accx_ text helpers below): texts of a batch as one []byte and their lengths; an int64 array
 * to fill; a token that "" unsets (NULL); owned UTF-8 results (copied into a Go string, then freed with
 * acc_text_free inside the call; a NULL result is ""). accx_utf8 is a plain Go string. */
%apply (const void* data, size_t nbytes) { (const void* pair_data, size_t pair_nbytes) }
%apply (const int64_t* shape, int32_t ndim) { (const int64_t* lengths, int32_t count), (const int64_t* pair_lengths, int32_t pair_count), (const int64_t* ids, int32_t count) }
%apply (int64_t* shape, int32_t capacity) { (int64_t* values, int32_t capacity) }
%typemap(in) accx_utf8
%{ { char* c_ = (char*)malloc((size_t)$input.n + 1);
     if (c_) { if ($input.n > 0) memcpy(c_, $input.p, (size_t)$input.n); c_[$input.n] = '\0'; }
     $1 = c_; } %}
%typemap(freearg) accx_utf8 %{ free((char*)$1); %}
%typemap(in) accx_utf8 token_or_null
%{ $1 = NULL;
   if ($input.n > 0) {
     $1 = ($1_ltype)malloc((size_t)$input.n + 1);
     memcpy((char*)$1, $input.p, (size_t)$input.n);
     ((char*)$1)[$input.n] = '\0';
   } %}
%typemap(freearg) accx_utf8 token_or_null %{ free((char*)$1); %}
%typemap(gotype) (char** out_text, size_t* out_length) "*string"
%typemap(in) (char** out_text, size_t* out_length) (char* temp = NULL, size_t temp_length = 0)
%{ $1 = &temp; $2 = &temp_length; %}
%typemap(argout, fragment="AllocateString") (char** out_text, size_t* out_length)
%{ if ($input) *$input = Swig_AllocateString(temp$argnum ? temp$argnum : "", temp$argnum ? temp_length$argnum : 0);
   acc_text_free(temp$argnum); %}
%typemap(goargout, fragment="CopyString") (char** out_text, size_t* out_length)
%{ if $input != nil { *$input = swigCopyString(*$input) } %}
/* Datasets from files: the indices of acc_dataset_get_batch, a Go slice read during the call. */
%typemap(gotype) (const int64_t* indices, int64_t count) "[]int64"
%typemap(in) (const int64_t* indices, int64_t count) %{ $1 = ($1_ltype)$input.array; $2 = (int64_t)$input.len; %}
#endif /* SWIGGO */

/* ------------------------------------------------------------------------------------------------ */
/* Java                                                                                              */
#ifdef SWIGJAVA
/* 64-bit integers are Java long (SWIG maps C `long` to int); unsigned ones cross with the same bits. */
%apply long long { int64_t, uint64_t };
%javaconst(1);
/* No finalize(): the public classes own every handle and clean up through java.lang.ref.Cleaner. */
%typemap(javafinalize) SWIGTYPE ""
/* C memory helpers are for Go; Java wraps direct ByteBuffers instead. */
%ignore accx_alloc;
%ignore accx_free;
%ignore accx_tensor_from_alloc;
%pragma(java) jniclasscode=%{
  // The JNI library is loaded by ai.acc.NativeLoader (property ai.acc.native.path, then the jar).
%}

%{
static void accx_java_throw(JNIEnv* jenv, acc_status code, const char* message) {
  jclass cls = (*jenv)->FindClass(jenv, "ai/acc/AccException");
  if (!cls) return; /* NoClassDefFoundError is pending */
  jmethodID ctor = (*jenv)->GetMethodID(jenv, cls, "<init>", "(ILjava/lang/String;)V");
  jstring msg = (*jenv)->NewStringUTF(jenv, message);
  if (ctor && msg) {
    jobject ex = (*jenv)->NewObject(jenv, cls, ctor, (jint)code, msg);
    if (ex) (*jenv)->Throw(jenv, (jthrowable)ex);
  }
}
%}

/* Status: thrown as ai.acc.AccException inside the JNI wrapper, after the out-parameters are written
 * and the arguments released (the "ret" typemap runs last), on the calling thread. */
%define ACCX_JAVA_STATUS(TYPE, MESSAGE)
%typemap(jni) TYPE "void"
%typemap(jtype) TYPE "void"
%typemap(jstype) TYPE "void"
%typemap(out) TYPE ""
%typemap(javaout) TYPE { $jnicall; }
%typemap(ret) TYPE %{ if ($1 != ACC_OK && !(*jenv)->ExceptionCheck(jenv)) accx_java_throw(jenv, $1, MESSAGE); %}
%enddef
ACCX_JAVA_STATUS(acc_status, acc_last_error_message())
ACCX_JAVA_STATUS(accx_status, accx_status_message($1))

/* Handles: long in, long[1] out (null: not wanted). */
%define ACCX_JAVA_HANDLE(T)
%typemap(jni) T*, const T* "jlong"
%typemap(jtype) T*, const T* "long"
%typemap(jstype) T*, const T* "long"
%typemap(javain) T*, const T* "$javainput"
%typemap(in) T*, const T* %{ $1 = ($1_ltype)(intptr_t)$input; %}
%typemap(jni) T** "jlongArray"
%typemap(jtype) T** "long[]"
%typemap(jstype) T** "long[]"
%typemap(javain) T** "$javainput"
%typemap(in) T** ($*1_ltype temp = NULL)
%{ if ($input && (*jenv)->GetArrayLength(jenv, $input) < 1) {
     SWIG_JavaThrowException(jenv, SWIG_JavaIndexOutOfBoundsException, "out array is empty");
     return $null;
   }
   $1 = $input ? &temp : NULL; %}
%typemap(argout) T**
%{ if ($input && !(*jenv)->ExceptionCheck(jenv)) { jlong v = (jlong)(intptr_t)temp$argnum; (*jenv)->SetLongArrayRegion(jenv, $input, 0, 1, &v); } %}
%enddef

/* Scalar out-parameters: one-element arrays. */
%define ACCX_JAVA_OUT(CTYPE, JNIELEM, JNIARR, JAVAELEM, SETTER)
%typemap(jni) CTYPE* #JNIARR
%typemap(jtype) CTYPE* #JAVAELEM "[]"
%typemap(jstype) CTYPE* #JAVAELEM "[]"
%typemap(javain) CTYPE* "$javainput"
%typemap(in) CTYPE* ($*1_ltype temp = 0)
%{ if ($input && (*jenv)->GetArrayLength(jenv, $input) < 1) {
     SWIG_JavaThrowException(jenv, SWIG_JavaIndexOutOfBoundsException, "out array is empty");
     return $null;
   }
   $1 = $input ? &temp : NULL; %}
%typemap(argout) CTYPE*
%{ if ($input && !(*jenv)->ExceptionCheck(jenv)) { JNIELEM v = (JNIELEM)temp$argnum; (*jenv)->SETTER(jenv, $input, 0, 1, &v); } %}
%enddef
ACCX_JAVA_OUT(int32_t, jint, jintArray, int, SetIntArrayRegion)
ACCX_JAVA_OUT(int64_t, jlong, jlongArray, long, SetLongArrayRegion)
ACCX_JAVA_OUT(size_t, jlong, jlongArray, long, SetLongArrayRegion)
ACCX_JAVA_OUT(double, jdouble, jdoubleArray, double, SetDoubleArrayRegion)
/* Raw addresses (void** of accx_dlpack_bytes) as long[1]. */
%typemap(jni) void**, const void** "jlongArray"
%typemap(jtype) void**, const void** "long[]"
%typemap(jstype) void**, const void** "long[]"
%typemap(javain) void**, const void** "$javainput"
%typemap(in) void** (void* temp = NULL), const void** (void* temp = NULL) %{ $1 = ($1_ltype)($input ? &temp : NULL); %}
%typemap(argout) void**, const void**
%{ if ($input && !(*jenv)->ExceptionCheck(jenv)) { jlong v = (jlong)(intptr_t)temp$argnum; (*jenv)->SetLongArrayRegion(jenv, $input, 0, 1, &v); } %}

/* Borrowed strings out: String[1]. */
%typemap(jni) const char** "jobjectArray"
%typemap(jtype) const char** "String[]"
%typemap(jstype) const char** "String[]"
%typemap(javain) const char** "$javainput"
%typemap(in) const char** (const char* temp = NULL) %{ $1 = ($1_ltype)($input ? &temp : NULL); %}
%typemap(argout) const char**
%{ if ($input && temp$argnum && !(*jenv)->ExceptionCheck(jenv)) {
     jstring s = (*jenv)->NewStringUTF(jenv, temp$argnum);
     if (s) (*jenv)->SetObjectArrayElement(jenv, $input, 0, s);
   } %}

/* Host buffers: byte[] (copied by libacc during the call). */
%typemap(jni) (const void* data, size_t nbytes), (void* dst, size_t nbytes), (const void* data, size_t size) "jbyteArray"
%typemap(jtype) (const void* data, size_t nbytes), (void* dst, size_t nbytes), (const void* data, size_t size) "byte[]"
%typemap(jstype) (const void* data, size_t nbytes), (void* dst, size_t nbytes), (const void* data, size_t size) "byte[]"
%typemap(javain) (const void* data, size_t nbytes), (void* dst, size_t nbytes), (const void* data, size_t size) "$javainput"
%typemap(in) (const void* data, size_t nbytes), (void* dst, size_t nbytes), (const void* data, size_t size)
%{ $1 = NULL; $2 = 0;
   if ($input) {
     $2 = (size_t)(*jenv)->GetArrayLength(jenv, $input);
     $1 = ($1_ltype)(*jenv)->GetByteArrayElements(jenv, $input, NULL);
     if (!$1) return $null;
   } %}
%typemap(freearg) (const void* data, size_t nbytes), (const void* data, size_t size)
%{ if ($1) (*jenv)->ReleaseByteArrayElements(jenv, $input, (jbyte*)$1, JNI_ABORT); %}
%typemap(freearg) (void* dst, size_t nbytes)
%{ if ($1) (*jenv)->ReleaseByteArrayElements(jenv, $input, (jbyte*)$1, 0); %}

/* Shapes: long[] in (copied), long[] to fill. */
%typemap(jni) (const int64_t* shape, int32_t ndim), (int64_t* shape, int32_t capacity) "jlongArray"
%typemap(jtype) (const int64_t* shape, int32_t ndim), (int64_t* shape, int32_t capacity) "long[]"
%typemap(jstype) (const int64_t* shape, int32_t ndim), (int64_t* shape, int32_t capacity) "long[]"
%typemap(javain) (const int64_t* shape, int32_t ndim), (int64_t* shape, int32_t capacity) "$javainput"
%typemap(in) (const int64_t* shape, int32_t ndim), (int64_t* shape, int32_t capacity)
%{ $1 = NULL; $2 = 0;
   if ($input) {
     $2 = (int32_t)(*jenv)->GetArrayLength(jenv, $input);
     $1 = ($1_ltype)(*jenv)->GetLongArrayElements(jenv, $input, NULL);
     if (!$1) return $null;
   } %}
%typemap(argout) (const int64_t* shape, int32_t ndim), (int64_t* shape, int32_t capacity) ""
%typemap(freearg) (const int64_t* shape, int32_t ndim)
%{ if ($1) (*jenv)->ReleaseLongArrayElements(jenv, $input, (jlong*)$1, JNI_ABORT); %}
%typemap(freearg) (int64_t* shape, int32_t capacity)
%{ if ($1) (*jenv)->ReleaseLongArrayElements(jenv, $input, (jlong*)$1, 0); %}

/* The JNIEnv of the call, for the direct-buffer helpers. */
%typemap(in, numinputs=0) JNIEnv* jenv_ %{ $1 = jenv; %}
%typemap(jni) jobject "jobject"
%typemap(jtype) jobject "java.nio.ByteBuffer"
%typemap(jstype) jobject "java.nio.ByteBuffer"
%typemap(javain) jobject "$javainput"
%typemap(out) jobject %{ $result = $1; %}
%typemap(javaout) jobject { return $jnicall; }

ACCX_JAVA_HANDLE(acc_accelerator)
ACCX_JAVA_HANDLE(acc_tensor)
ACCX_JAVA_HANDLE(acc_model)
ACCX_JAVA_HANDLE(acc_optimizer)
ACCX_JAVA_HANDLE(acc_scheduler)
ACCX_JAVA_HANDLE(acc_dataset)
ACCX_JAVA_HANDLE(acc_dataloader)
ACCX_JAVA_HANDLE(struct DLManagedTensorVersioned)
ACCX_JAVA_HANDLE(acc_bytes_list)
ACCX_JAVA_HANDLE(acc_batch)
ACCX_JAVA_HANDLE(acc_tokenizer)
ACCX_JAVA_HANDLE(acc_encoding)

/* Text (the accx_ text helpers below). Java strings cross as UTF-8 byte[] (the JNI string functions speak
 * modified UTF-8, which is not UTF-8 for NULs and characters outside the BMP): accx_utf8 is a byte[]
 * (null: NULL) copied into a NUL-terminated string for the call; owned results come back as byte[][1]
 * (null when libacc gives NULL), freed with acc_text_free inside the call. Texts of a batch are one byte[]
 * with their lengths as long[]; an int64 array to fill is a long[]. */
%apply (const void* data, size_t nbytes) { (const void* pair_data, size_t pair_nbytes) }
%apply (const int64_t* shape, int32_t ndim) { (const int64_t* lengths, int32_t count), (const int64_t* pair_lengths, int32_t pair_count), (const int64_t* ids, int32_t count) }
%apply (int64_t* shape, int32_t capacity) { (int64_t* values, int32_t capacity) }
%typemap(jni) accx_utf8 "jbyteArray"
%typemap(jtype) accx_utf8 "byte[]"
%typemap(jstype) accx_utf8 "byte[]"
%typemap(javain) accx_utf8 "$javainput"
%typemap(in) accx_utf8
%{ $1 = NULL;
   if ($input) {
     jsize n_ = (*jenv)->GetArrayLength(jenv, $input);
     char* c_ = (char*)malloc((size_t)n_ + 1);
     if (!c_) { SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "out of memory"); return $null; }
     if (n_ > 0) (*jenv)->GetByteArrayRegion(jenv, $input, 0, n_, (jbyte*)c_);
     c_[n_] = '\0';
     $1 = c_;
   } %}
%typemap(freearg) accx_utf8 %{ free((char*)$1); %}
%typemap(jni) (char** out_text, size_t* out_length) "jobjectArray"
%typemap(jtype) (char** out_text, size_t* out_length) "byte[][]"
%typemap(jstype) (char** out_text, size_t* out_length) "byte[][]"
%typemap(javain) (char** out_text, size_t* out_length) "$javainput"
%typemap(in) (char** out_text, size_t* out_length) (char* temp = NULL, size_t temp_length = 0)
%{ if ($input && (*jenv)->GetArrayLength(jenv, $input) < 1) {
     SWIG_JavaThrowException(jenv, SWIG_JavaIndexOutOfBoundsException, "out array is empty");
     return $null;
   }
   $1 = &temp; $2 = &temp_length; %}
%typemap(argout) (char** out_text, size_t* out_length)
%{ if ($input && temp$argnum && !(*jenv)->ExceptionCheck(jenv)) {
     jbyteArray b_ = temp_length$argnum <= INT32_MAX ? (*jenv)->NewByteArray(jenv, (jsize)temp_length$argnum) : NULL;
     if (b_) {
       (*jenv)->SetByteArrayRegion(jenv, b_, 0, (jsize)temp_length$argnum, (const jbyte*)temp$argnum);
       (*jenv)->SetObjectArrayElement(jenv, $input, 0, b_);
     } else if (!(*jenv)->ExceptionCheck(jenv)) {
       SWIG_JavaThrowException(jenv, SWIG_JavaOutOfMemoryError, "the text does not fit a Java array");
     }
   }
   acc_text_free(temp$argnum); %}

%{
/* Direct buffers: a global reference keeps the buffer (and so its memory) alive until libacc lets go. */
typedef struct { JavaVM* vm; jobject ref; } accx_java_ref;

static void accx_java_release(void* data, void* ctx) {
  (void)data;
  accx_java_ref* r = (accx_java_ref*)ctx;
  JNIEnv* env = NULL;
  if ((*r->vm)->GetEnv(r->vm, (void**)&env, JNI_VERSION_1_8) != JNI_OK)
    (*r->vm)->AttachCurrentThreadAsDaemon(r->vm, (void**)&env, NULL);
  if (env) (*env)->DeleteGlobalRef(env, r->ref);
  free(r);
}
%}
%{
/* Java sample sources for acc_dataset_from_callback (no SWIG directors: a plain trampoline). */
typedef struct { JavaVM* vm; jobject fn; jmethodID sample; } accx_java_source;

static JNIEnv* accx_java_env(JavaVM* vm) {
  JNIEnv* env = NULL;
  if ((*vm)->GetEnv(vm, (void**)&env, JNI_VERSION_1_8) != JNI_OK) (*vm)->AttachCurrentThreadAsDaemon(vm, (void**)&env, NULL);
  return env;
}

static acc_status accx_java_get(void* user, int64_t index, acc_tensor** input, acc_tensor** target) {
  accx_java_source* s = (accx_java_source*)user;
  JNIEnv* env = accx_java_env(s->vm);
  if (!env) return ACC_ERR_CALLBACK;
  jlongArray r = (jlongArray)(*env)->CallObjectMethod(env, s->fn, s->sample, (jlong)index);
  if ((*env)->ExceptionCheck(env)) { /* the adapter catches everything; this is a last resort */
    (*env)->ExceptionClear(env);
    return ACC_ERR_CALLBACK;
  }
  if (!r) return ACC_ERR_CALLBACK;
  jlong h[2] = {0, 0};
  if ((*env)->GetArrayLength(env, r) == 2) (*env)->GetLongArrayRegion(env, r, 0, 2, h);
  (*env)->DeleteLocalRef(env, r);
  if (!h[0]) return ACC_ERR_CALLBACK;
  *input = (acc_tensor*)(intptr_t)h[0];
  if (target) *target = (acc_tensor*)(intptr_t)h[1];
  else if (h[1]) acc_tensor_destroy((acc_tensor*)(intptr_t)h[1]);
  return ACC_OK;
}

/* Copies every entry of `src` into `dst` (the tensors are shared, not copied). */
static acc_status accx_batch_copy(const acc_batch* src, acc_batch* dst) {
  int64_t n = 0;
  acc_status st = acc_batch_count(src, &n);
  for (int64_t i = 0; st == ACC_OK && i < n; ++i) {
    const char* name = NULL;
    acc_tensor* t = NULL;
    st = acc_batch_name(src, i, &name);
    if (st == ACC_OK) st = acc_batch_get(src, name, &t);
    if (st == ACC_OK) st = acc_batch_set(dst, name, t);
    acc_tensor_destroy(t);
  }
  return st;
}

/* Named samples for acc_dataset_from_batch_callback: `long sampleBatch(long)` returns the handle of
 * a batch (ownership passes to this trampoline), or 0 after recording its own error. */
static acc_status accx_java_get_batch(void* user, int64_t index, acc_batch* sample) {
  accx_java_source* s = (accx_java_source*)user;
  JNIEnv* env = accx_java_env(s->vm);
  if (!env) return ACC_ERR_CALLBACK;
  jlong h = (*env)->CallLongMethod(env, s->fn, s->sample, (jlong)index);
  if ((*env)->ExceptionCheck(env)) { /* the adapter catches everything; this is a last resort */
    (*env)->ExceptionClear(env);
    return ACC_ERR_CALLBACK;
  }
  if (!h) return ACC_ERR_CALLBACK;
  acc_batch* b = (acc_batch*)(intptr_t)h;
  acc_status st = accx_batch_copy(b, sample);
  acc_batch_destroy(b);
  return st;
}

static void accx_java_free(void* user) {
  accx_java_source* s = (accx_java_source*)user;
  JNIEnv* env = accx_java_env(s->vm);
  if (env && s->fn) (*env)->DeleteGlobalRef(env, s->fn);
  free(s);
}
%}
%{
/* Objects registered for checkpointing (acc_register_for_checkpointing), no directors either: the
 * Java object has `byte[] save()`, which returns the object's bytes or null after recording its own
 * error, and `boolean load(byte[])`, false after recording its error (ai.acc.Accelerator's adapter
 * catches everything). libacc calls them on the thread that calls acc_save_state / acc_load_state. */
typedef struct { JavaVM* vm; jobject obj; jmethodID save; jmethodID load; } accx_java_checkpointable;

static acc_status accx_java_checkpoint_save(void* user, acc_bytes_list* out) {
  accx_java_checkpointable* c = (accx_java_checkpointable*)user;
  JNIEnv* env = accx_java_env(c->vm);
  if (!env) return ACC_ERR_CALLBACK;
  jbyteArray r = (jbyteArray)(*env)->CallObjectMethod(env, c->obj, c->save);
  if ((*env)->ExceptionCheck(env)) { /* the adapter catches everything; this is a last resort */
    (*env)->ExceptionClear(env);
    if (r) (*env)->DeleteLocalRef(env, r);
    return ACC_ERR_CALLBACK;
  }
  if (!r) return ACC_ERR_CALLBACK;
  acc_status st = ACC_OK;
  jsize n = (*env)->GetArrayLength(env, r);
  if (n > 0) {
    jbyte* b = (*env)->GetByteArrayElements(env, r, NULL);
    if (!b) {
      (*env)->ExceptionClear(env); /* OutOfMemoryError */
      st = ACC_ERR_OUT_OF_MEMORY;
    } else {
      st = acc_bytes_list_append(out, b, (size_t)n); /* copies */
      (*env)->ReleaseByteArrayElements(env, r, b, JNI_ABORT);
    }
  }
  (*env)->DeleteLocalRef(env, r);
  return st;
}

static acc_status accx_java_checkpoint_load(void* user, const void* data, size_t size) {
  accx_java_checkpointable* c = (accx_java_checkpointable*)user;
  JNIEnv* env = accx_java_env(c->vm);
  if (!env || size > (size_t)INT32_MAX) return ACC_ERR_CALLBACK; /* a Java array holds at most 2^31-1 bytes */
  jbyteArray a = (*env)->NewByteArray(env, (jsize)size);
  if (!a) {
    (*env)->ExceptionClear(env); /* OutOfMemoryError */
    return ACC_ERR_OUT_OF_MEMORY;
  }
  if (size > 0) (*env)->SetByteArrayRegion(env, a, 0, (jsize)size, (const jbyte*)data);
  jboolean ok = (*env)->CallBooleanMethod(env, c->obj, c->load, a);
  (*env)->DeleteLocalRef(env, a);
  if ((*env)->ExceptionCheck(env)) { /* last resort, as above */
    (*env)->ExceptionClear(env);
    return ACC_ERR_CALLBACK;
  }
  return ok ? ACC_OK : ACC_ERR_CALLBACK;
}

static void accx_java_checkpoint_free(void* user) {
  accx_java_checkpointable* c = (accx_java_checkpointable*)user;
  JNIEnv* env = accx_java_env(c->vm);
  if (env && c->obj) (*env)->DeleteGlobalRef(env, c->obj);
  free(c);
}
%}
/* The registered object is any object with `byte[] save()` and `boolean load(byte[])`. */
%typemap(jni) jobject checkpointable "jobject"
%typemap(jtype) jobject checkpointable "Object"
%typemap(jstype) jobject checkpointable "Object"
%typemap(javain) jobject checkpointable "$javainput"
%{
/* Token listeners of acc_generate, no directors either: the Java object has `boolean onTokens(long[])`,
 * which returns false to stop, also after recording its own failure (ai.acc.Model's adapter catches
 * everything). libacc calls it on the thread that calls acc_generate, inside that JNI call, so the
 * call's JNIEnv and local reference serve. */
typedef struct { JNIEnv* env; jobject obj; jmethodID on_tokens; const char* failed; } accx_java_listener;

static int32_t accx_java_on_tokens(void* user, const int64_t* tokens, int64_t batch) {
  accx_java_listener* l = (accx_java_listener*)user;
  JNIEnv* env = l->env;
  if (batch < 0 || batch > INT32_MAX) {
    l->failed = "the batch does not fit a Java array";
    return 1;
  }
  jlongArray a = (*env)->NewLongArray(env, (jsize)batch);
  if (!a) {
    (*env)->ExceptionClear(env); /* OutOfMemoryError */
    l->failed = "out of memory for the tokens of a step";
    return 1;
  }
  if (batch > 0) (*env)->SetLongArrayRegion(env, a, 0, (jsize)batch, (const jlong*)tokens);
  jboolean go_on = (*env)->CallBooleanMethod(env, l->obj, l->on_tokens, a);
  (*env)->DeleteLocalRef(env, a);
  if ((*env)->ExceptionCheck(env)) { /* the adapter catches everything; this is a last resort */
    (*env)->ExceptionClear(env);
    l->failed = "the token listener threw";
    return 1;
  }
  return go_on ? 0 : 1;
}
%}
/* The token listener is any object with `boolean onTokens(long[])` (ai.acc.Model's adapter). */
%typemap(jni) jobject listener "jobject"
%typemap(jtype) jobject listener "Object"
%typemap(jstype) jobject listener "Object"
%typemap(javain) jobject listener "$javainput"
/* The sample source is any object with `long[] sample(long)` (ai.acc.Dataset's adapter). */
%typemap(jni) jobject source "jobject"
%typemap(jtype) jobject source "Object"
%typemap(jstype) jobject source "Object"
%typemap(javain) jobject source "$javainput"
%inline %{
/** A zero-copy tensor over a direct ByteBuffer (its whole capacity, native byte order); the tensor
 *  holds a global reference to the buffer until libacc releases the memory. */
accx_status accx_tensor_from_direct_buffer(JNIEnv* jenv_, jobject buffer, acc_dtype dtype,
                                           const int64_t* shape, int32_t ndim, acc_tensor** out) {
  accx_message[0] = '\0';
  if (out) *out = NULL;
  if (!buffer) return accx_fail(ACC_ERR_INVALID_ARGUMENT, "buffer is null");
  void* data = (*jenv_)->GetDirectBufferAddress(jenv_, buffer);
  jlong cap = (*jenv_)->GetDirectBufferCapacity(jenv_, buffer);
  if (!data || cap < 0) return accx_fail(ACC_ERR_INVALID_ARGUMENT, "the buffer is not a direct ByteBuffer");
  accx_java_ref* r = (accx_java_ref*)malloc(sizeof *r);
  if (!r) return accx_fail(ACC_ERR_OUT_OF_MEMORY, "out of memory");
  if ((*jenv_)->GetJavaVM(jenv_, &r->vm) != 0 || !(r->ref = (*jenv_)->NewGlobalRef(jenv_, buffer))) {
    free(r);
    return accx_fail(ACC_ERR_INTERNAL, "cannot reference the buffer");
  }
  return accx_wrap(data, (size_t)cap, dtype, shape, ndim, accx_java_release, r, out);
}

/** A dataset whose samples come from a Java object: `long[] sample(long index)` returns the handles
 *  {input, target-or-0} (ownership passes to libacc), or null after recording its own error. libacc
 *  calls it on the thread that calls acc_dataloader_next, a Java thread. */
accx_status accx_dataset_from_java(JNIEnv* jenv_, int64_t length, jobject source, acc_dataset** out) {
  accx_message[0] = '\0';
  if (out) *out = NULL;
  if (!source) return accx_fail(ACC_ERR_INVALID_ARGUMENT, "source is null");
  accx_java_source* s = (accx_java_source*)calloc(1, sizeof *s);
  if (!s) return accx_fail(ACC_ERR_OUT_OF_MEMORY, "out of memory");
  jclass cls = (*jenv_)->GetObjectClass(jenv_, source);
  s->sample = cls ? (*jenv_)->GetMethodID(jenv_, cls, "sample", "(J)[J") : NULL;
  if (!s->sample || (*jenv_)->GetJavaVM(jenv_, &s->vm) != 0 || !(s->fn = (*jenv_)->NewGlobalRef(jenv_, source))) {
    (*jenv_)->ExceptionClear(jenv_);
    free(s);
    return accx_fail(ACC_ERR_INTERNAL, "the source has no method long[] sample(long)");
  }
  acc_status st = acc_dataset_from_callback(length, accx_java_get, s, accx_java_free, out); /* frees s on failure */
  if (st != ACC_OK) accx_fail(st, acc_last_error_message());
  return st;
}

/** A dataset of named samples from a Java object: `long sampleBatch(long index)` returns the handle
 *  of a batch (ownership passes to libacc), or 0 after recording its own error. libacc calls it on
 *  the thread that asks for a batch, a Java thread. */
accx_status accx_dataset_from_java_batch(JNIEnv* jenv_, int64_t length, jobject source, acc_dataset** out) {
  accx_message[0] = '\0';
  if (out) *out = NULL;
  if (!source) return accx_fail(ACC_ERR_INVALID_ARGUMENT, "source is null");
  accx_java_source* s = (accx_java_source*)calloc(1, sizeof *s);
  if (!s) return accx_fail(ACC_ERR_OUT_OF_MEMORY, "out of memory");
  jclass cls = (*jenv_)->GetObjectClass(jenv_, source);
  s->sample = cls ? (*jenv_)->GetMethodID(jenv_, cls, "sampleBatch", "(J)J") : NULL;
  if (!s->sample || (*jenv_)->GetJavaVM(jenv_, &s->vm) != 0 || !(s->fn = (*jenv_)->NewGlobalRef(jenv_, source))) {
    (*jenv_)->ExceptionClear(jenv_);
    free(s);
    return accx_fail(ACC_ERR_INTERNAL, "the source has no method long sampleBatch(long)");
  }
  acc_status st = acc_dataset_from_batch_callback(length, accx_java_get_batch, s, accx_java_free, out); /* frees s on failure */
  if (st != ACC_OK) accx_fail(st, acc_last_error_message());
  return st;
}

/** acc_register_for_checkpointing for a Java object with `byte[] save()` (the object's bytes, or null
 *  after recording its own error) and `boolean load(byte[])` (false after recording its error). The
 *  accelerator holds a global reference to it until libacc lets go of the accelerator. */
accx_status accx_register_for_checkpointing_java(JNIEnv* jenv_, acc_accelerator* acc, jobject checkpointable) {
  accx_message[0] = '\0';
  if (!checkpointable) return accx_fail(ACC_ERR_INVALID_ARGUMENT, "checkpointable is null");
  accx_java_checkpointable* c = (accx_java_checkpointable*)calloc(1, sizeof *c);
  if (!c) return accx_fail(ACC_ERR_OUT_OF_MEMORY, "out of memory");
  jclass cls = (*jenv_)->GetObjectClass(jenv_, checkpointable);
  c->save = cls ? (*jenv_)->GetMethodID(jenv_, cls, "save", "()[B") : NULL;
  c->load = c->save ? (*jenv_)->GetMethodID(jenv_, cls, "load", "([B)Z") : NULL;
  if (!c->load || (*jenv_)->GetJavaVM(jenv_, &c->vm) != 0 ||
      !(c->obj = (*jenv_)->NewGlobalRef(jenv_, checkpointable))) {
    (*jenv_)->ExceptionClear(jenv_);
    free(c);
    return accx_fail(ACC_ERR_INTERNAL, "the object has no methods byte[] save() and boolean load(byte[])");
  }
  acc_status st = acc_register_for_checkpointing(acc, accx_java_checkpoint_save, accx_java_checkpoint_load, c,
                                                 accx_java_checkpoint_free); /* frees c on failure */
  if (st != ACC_OK) accx_fail(st, acc_last_error_message());
  return st;
}

/** acc_generate with a Java token listener (null: none): `boolean onTokens(long[] tokens)` gets the
 *  tokens of every step and returns false to stop. A listener that could not be called (a JNI failure,
 *  an exception that escaped it) stops generation and fails the call with ACC_ERR_CALLBACK. */
accx_status accx_generate_java(JNIEnv* jenv_, acc_model* model, const acc_tensor* input_ids,
                               const acc_tensor* attention_mask, const char* options_json, jobject listener,
                               acc_tensor** out) {
  accx_message[0] = '\0';
  if (out) *out = NULL;
  accx_java_listener l = {jenv_, listener, NULL, NULL};
  if (listener) {
    jclass cls = (*jenv_)->GetObjectClass(jenv_, listener);
    l.on_tokens = cls ? (*jenv_)->GetMethodID(jenv_, cls, "onTokens", "([J)Z") : NULL;
    if (!l.on_tokens) {
      (*jenv_)->ExceptionClear(jenv_);
      return accx_fail(ACC_ERR_INTERNAL, "the listener has no method boolean onTokens(long[])");
    }
  }
  acc_status st = acc_generate(model, input_ids, attention_mask, options_json, listener ? accx_java_on_tokens : NULL,
                               listener ? &l : NULL, out);
  if (st != ACC_OK) return accx_fail(st, acc_last_error_message());
  if (l.failed) {
    acc_tensor_destroy(*out);
    *out = NULL;
    return accx_fail(ACC_ERR_CALLBACK, l.failed);
  }
  return ACC_OK;
}

/** A direct ByteBuffer over `nbytes` at `address` (no copy; valid while its owner lives). */
jobject accx_direct_buffer(JNIEnv* jenv_, int64_t address, int64_t nbytes) {
  return (*jenv_)->NewDirectByteBuffer(jenv_, (void*)(intptr_t)address, (jlong)nbytes);
}
%}
%{
/* Text listeners of acc_generate_text: the Java object has `boolean onText(byte[] utf8)`, which returns
 * false to stop (ai.acc.Model's adapter catches everything). Called on the thread of the JNI call. */
typedef struct { JNIEnv* env; jobject obj; jmethodID on_text; const char* failed; } accx_java_text_listener;

static int32_t accx_java_on_text(void* user, const char* piece, size_t length) {
  accx_java_text_listener* l = (accx_java_text_listener*)user;
  JNIEnv* env = l->env;
  if (length > INT32_MAX) {
    l->failed = "a piece of text does not fit a Java array";
    return 1;
  }
  jbyteArray a = (*env)->NewByteArray(env, (jsize)length);
  if (!a) {
    (*env)->ExceptionClear(env); /* OutOfMemoryError */
    l->failed = "out of memory for a piece of text";
    return 1;
  }
  if (length > 0) (*env)->SetByteArrayRegion(env, a, 0, (jsize)length, (const jbyte*)piece);
  jboolean go_on = (*env)->CallBooleanMethod(env, l->obj, l->on_text, a);
  (*env)->DeleteLocalRef(env, a);
  if ((*env)->ExceptionCheck(env)) { /* last resort: the adapter catches everything */
    (*env)->ExceptionClear(env);
    l->failed = "the text listener threw";
    return 1;
  }
  return go_on ? 0 : 1;
}
%}
%inline %{
/** acc_generate_text with a Java text listener (null: none): `boolean onText(byte[] utf8)` gets each piece
 *  and returns false to stop. A listener that could not be called stops generation and fails the call
 *  with ACC_ERR_CALLBACK. */
accx_status accx_generate_text_java(JNIEnv* jenv_, acc_model* model, const acc_tokenizer* tok, accx_utf8 prompt,
                                    accx_utf8 options_json, jobject listener, char** out_text, size_t* out_length) {
  accx_message[0] = '\0';
  accx_java_text_listener l = {jenv_, listener, NULL, NULL};
  if (listener) {
    jclass cls = (*jenv_)->GetObjectClass(jenv_, listener);
    l.on_text = cls ? (*jenv_)->GetMethodID(jenv_, cls, "onText", "([B)Z") : NULL;
    if (!l.on_text) {
      (*jenv_)->ExceptionClear(jenv_);
      return accx_fail(ACC_ERR_INTERNAL, "the listener has no method boolean onText(byte[])");
    }
  }
  char* text = NULL;
  acc_status st = acc_generate_text(model, tok, prompt, options_json, listener ? accx_java_on_text : NULL,
                                    listener ? &l : NULL, &text);
  if (st != ACC_OK) return accx_fail(st, acc_last_error_message());
  if (l.failed) {
    acc_text_free(text);
    return accx_fail(ACC_ERR_CALLBACK, l.failed);
  }
  *out_text = text;
  *out_length = text ? strlen(text) : 0;
  return ACC_OK;
}
%}
/* Datasets from files: the indices of acc_dataset_get_batch, a long[] read during the call. */
%typemap(jni) (const int64_t* indices, int64_t count) "jlongArray"
%typemap(jtype) (const int64_t* indices, int64_t count) "long[]"
%typemap(jstype) (const int64_t* indices, int64_t count) "long[]"
%typemap(javain) (const int64_t* indices, int64_t count) "$javainput"
%typemap(in) (const int64_t* indices, int64_t count)
%{ $1 = NULL; $2 = 0;
   if ($input) {
     $2 = (int64_t)(*jenv)->GetArrayLength(jenv, $input);
     $1 = ($1_ltype)(*jenv)->GetLongArrayElements(jenv, $input, NULL);
     if (!$1) return $null;
   } %}
%typemap(argout) (const int64_t* indices, int64_t count) ""
%typemap(freearg) (const int64_t* indices, int64_t count)
%{ if ($1) (*jenv)->ReleaseLongArrayElements(jenv, $input, (jlong*)$1, JNI_ABORT); %}
#endif /* SWIGJAVA */


%inline %{
/** Zeroed C memory for a zero-copy tensor (Go: the bytes are exposed through unsafe.Slice). */
void* accx_alloc(size_t nbytes) { return calloc(nbytes ? nbytes : 1, 1); }
/** Frees accx_alloc memory that was not handed to accx_tensor_from_alloc. */
void accx_free(void* p) { free(p); }
%}
%{
static void accx_free_release(void* data, void* ctx) { (void)ctx; free(data); }
%}
%inline %{
/** Takes ownership of `data` (from accx_alloc): the tensor views it without a copy and frees it when
 *  libacc releases the memory (also at once when this fails). */
accx_status accx_tensor_from_alloc(void* mem, size_t size, acc_dtype dtype, const int64_t* shape,
                                   int32_t ndim, acc_tensor** out) {
  return accx_wrap(mem, size, dtype, shape, ndim, accx_free_release, NULL, out);
}

/** The bytes of an exported DLPack tensor: CPU and row-major contiguous, else ACC_ERR_UNSUPPORTED. */
accx_status accx_dlpack_bytes(struct DLManagedTensorVersioned* src, void** data, size_t* nbytes) {
  accx_message[0] = '\0';
  if (data) *data = NULL;
  if (nbytes) *nbytes = 0;
  accx_DLManagedTensorVersioned* m = (accx_DLManagedTensorVersioned*)src;
  if (!m || !data || !nbytes) return accx_fail(ACC_ERR_INVALID_ARGUMENT, "tensor, data or nbytes is NULL");
  const accx_DLTensor* t = &m->dl_tensor;
  if (t->device.device_type != 1 && t->device.device_type != 3 /* kDLCUDAHost */)
    return accx_fail(ACC_ERR_UNSUPPORTED, "the tensor is not in CPU memory (copy it with to_host)");
  int64_t numel = 1, expect = 1;
  int contiguous = 1;
  for (int32_t i = t->ndim - 1; i >= 0; --i) {
    if (t->strides && t->shape[i] > 1 && t->strides[i] != expect) contiguous = 0;
    expect *= t->shape[i];
    numel *= t->shape[i];
  }
  if (!contiguous) return accx_fail(ACC_ERR_UNSUPPORTED, "the tensor is not contiguous (copy it with to_host)");
  *data = (char*)t->data + t->byte_offset;
  *nbytes = (size_t)numel * (size_t)((t->dtype.bits * t->dtype.lanes + 7) / 8);
  return ACC_OK;
}

/** Releases an exported DLPack tensor (calls its deleter). NULL-safe. */
void accx_dlpack_release(struct DLManagedTensorVersioned* src) {
  accx_DLManagedTensorVersioned* m = (accx_DLManagedTensorVersioned*)src;
  if (m && m->deleter) m->deleter(m);
}
%}

/* ------------------------------------------------------------------------------------------------ */
/* Text: the tokenizer calls in shapes both languages pass (texts of a batch as one buffer and lengths,  */
/* UTF-8 in and out, owned results copied out and freed inside the call). acc_generate_text: Go has a    */
/* cgo trampoline (bindings/go/acc/text.go), Java accx_generate_text_java.                              */
%{
/* Points texts[i] into `data` by lengths (which must add up to nbytes). *ptrs and *lens: free() both. */
static acc_status accx_split(const void* data, size_t nbytes, const int64_t* lengths, int32_t count, const char* what,
                             const char*** ptrs, size_t** lens) {
  char msg[160];
  *ptrs = NULL;
  *lens = NULL;
  if (count < 0) return accx_fail(ACC_ERR_INVALID_ARGUMENT, "count is negative");
  *ptrs = (const char**)calloc((size_t)count + 1, sizeof(char*));
  *lens = (size_t*)calloc((size_t)count + 1, sizeof(size_t));
  if (!*ptrs || !*lens) return accx_fail(ACC_ERR_OUT_OF_MEMORY, "out of memory");
  size_t at = 0;
  for (int32_t i = 0; i < count; ++i) {
    if (lengths[i] < 0 || (uint64_t)lengths[i] > nbytes - at) {
      snprintf(msg, sizeof msg, "the lengths of the %s exceed their %zu bytes", what, nbytes);
      return accx_fail(ACC_ERR_INVALID_ARGUMENT, msg);
    }
    (*ptrs)[i] = data ? (const char*)data + at : "";
    (*lens)[i] = (size_t)lengths[i];
    at += (size_t)lengths[i];
  }
  if (at != nbytes) {
    snprintf(msg, sizeof msg, "the lengths of the %s add up to %zu bytes, not %zu", what, at, nbytes);
    return accx_fail(ACC_ERR_INVALID_ARGUMENT, msg);
  }
  return ACC_OK;
}
%}
%inline %{
/** acc_tokenizer_train_bpe of the texts in `data` (lengths[i] bytes each, one after another). */
accx_status accx_tokenizer_train_bpe(const void* data, size_t nbytes, const int64_t* lengths, int32_t count,
                                     accx_utf8 options_json, acc_tokenizer** out) {
  accx_message[0] = '\0';
  if (out) *out = NULL;
  const char** p = NULL;
  size_t* n = NULL;
  acc_status st = accx_split(data, nbytes, lengths, count, "texts", &p, &n);
  if (st == ACC_OK) {
    st = acc_tokenizer_train_bpe(p, n, count, options_json, out);
    if (st != ACC_OK) accx_fail(st, acc_last_error_message());
  }
  free(p);
  free(n);
  return st;
}

/** acc_tokenizer_encode of the texts in `data` (lengths[i] bytes each), with the pairs in pair_data when
 *  pair_lengths is given (as many as the texts). */
accx_status accx_tokenizer_encode(const acc_tokenizer* tok, const void* data, size_t nbytes, const int64_t* lengths,
                                  int32_t count, const void* pair_data, size_t pair_nbytes,
                                  const int64_t* pair_lengths, int32_t pair_count, accx_utf8 options_json,
                                  acc_encoding** out) {
  accx_message[0] = '\0';
  if (out) *out = NULL;
  const char **p = NULL, **q = NULL;
  size_t *n = NULL, *m = NULL;
  acc_status st = accx_split(data, nbytes, lengths, count, "texts", &p, &n);
  if (st == ACC_OK && pair_lengths) {
    if (pair_count != count) st = accx_fail(ACC_ERR_INVALID_ARGUMENT, "pairs: not as many as the texts");
    else st = accx_split(pair_data, pair_nbytes, pair_lengths, pair_count, "pairs", &q, &m);
  }
  if (st == ACC_OK) {
    st = acc_tokenizer_encode(tok, p, n, pair_lengths ? q : NULL, pair_lengths ? m : NULL, count, options_json, out);
    if (st != ACC_OK) accx_fail(st, acc_last_error_message());
  }
  free(p);
  free(n);
  free(q);
  free(m);
  return st;
}

/** acc_tokenizer_info. */
accx_status accx_tokenizer_info(const acc_tokenizer* tok, char** out_text, size_t* out_length) {
  accx_message[0] = '\0';
  acc_status st = acc_tokenizer_info(tok, out_text);
  if (st != ACC_OK) return accx_fail(st, acc_last_error_message());
  *out_length = *out_text ? strlen(*out_text) : 0;
  return ACC_OK;
}

/** acc_tokenizer_set_special_token; a NULL token (Go "", Java null) unsets it. */
accx_status accx_tokenizer_set_special_token(acc_tokenizer* tok, accx_utf8 name, accx_utf8 token_or_null) {
  accx_message[0] = '\0';
  acc_status st = acc_tokenizer_set_special_token(tok, name, token_or_null);
  return st == ACC_OK ? st : accx_fail(st, acc_last_error_message());
}

/** acc_tokenizer_token_to_id (-1: not in the vocabulary). */
accx_status accx_tokenizer_token_to_id(const acc_tokenizer* tok, accx_utf8 token, int64_t* out) {
  accx_message[0] = '\0';
  acc_status st = acc_tokenizer_token_to_id(tok, token, out);
  return st == ACC_OK ? st : accx_fail(st, acc_last_error_message());
}

/** acc_tokenizer_id_to_token (Go "", Java null: not in the vocabulary). */
accx_status accx_tokenizer_id_to_token(const acc_tokenizer* tok, int64_t id, char** out_text, size_t* out_length) {
  accx_message[0] = '\0';
  acc_status st = acc_tokenizer_id_to_token(tok, id, out_text);
  if (st != ACC_OK) return accx_fail(st, acc_last_error_message());
  *out_length = *out_text ? strlen(*out_text) : 0;
  return ACC_OK;
}

/** acc_tokenizer_decode (the text keeps decoded NULs). */
accx_status accx_tokenizer_decode(const acc_tokenizer* tok, const int64_t* ids, int32_t count, accx_utf8 options_json,
                                  char** out_text, size_t* out_length) {
  accx_message[0] = '\0';
  static const int64_t none = 0;
  acc_status st = acc_tokenizer_decode(tok, ids ? ids : &none, count, options_json, out_text, out_length);
  return st == ACC_OK ? st : accx_fail(st, acc_last_error_message());
}

/** acc_tokenizer_apply_chat_template; out_encoding may be NULL (Go nil, Java null). */
accx_status accx_tokenizer_apply_chat_template(const acc_tokenizer* tok, accx_utf8 messages_json, accx_utf8 options_json,
                                               char** out_text, size_t* out_length, acc_encoding** out_encoding) {
  accx_message[0] = '\0';
  acc_status st = acc_tokenizer_apply_chat_template(tok, messages_json, options_json, out_text, out_encoding);
  if (st != ACC_OK) return accx_fail(st, acc_last_error_message());
  *out_length = *out_text ? strlen(*out_text) : 0;
  return ACC_OK;
}

/** acc_encoding_get copied: *out is the field's length; min(length, capacity) values are copied into
 *  values (nil / null: only the length). */
accx_status accx_encoding_read(const acc_encoding* enc, int64_t row, const char* field, int64_t* values,
                               int32_t capacity, int64_t* out) {
  accx_message[0] = '\0';
  const int64_t* data = NULL;
  int64_t length = 0;
  acc_status st = acc_encoding_get(enc, row, field, &data, &length);
  if (st != ACC_OK) return accx_fail(st, acc_last_error_message());
  if (values && data) memcpy(values, data, sizeof(int64_t) * (size_t)(length < capacity ? length : capacity));
  if (out) *out = length;
  return ACC_OK;
}
%}

/* ------------------------------------------------------------------------------------------------ */
/* Datasets from files: path and options as UTF-8 (Java's byte[], as the text calls: an option may hold */
/* a chat template's text); acc_dataset_from_config and acc_dataset_get_batch are wrapped as they are.  */
%inline %{
/** acc_dataset_from_files; an empty or absent path (Go "", Java null) is NULL: the options name "files". */
accx_status accx_dataset_from_files(accx_utf8 path, const acc_tokenizer* tok, accx_utf8 options_json,
                                    acc_dataset** out) {
  accx_message[0] = '\0';
  acc_status st = acc_dataset_from_files(path && *path ? path : NULL, tok, options_json, out);
  return st == ACC_OK ? st : accx_fail(st, acc_last_error_message());
}
%}

/* Callbacks need hand-written trampolines (no directors); see the file comment. */
%ignore acc_dataset_from_callback;
%ignore acc_dataset_get_fn;
%ignore acc_find_executable_batch_size;
%ignore acc_batch_size_fn;
%ignore acc_dataset_from_iterator;
%ignore acc_iterator_start_fn;
%ignore acc_iterator_next_fn;
%ignore acc_dataset_from_batch_callback;
%ignore acc_dataset_get_batch_fn;
%ignore acc_dataset_from_batch_iterator;
%ignore acc_iterator_next_batch_fn;
/* Go: cgo trampolines in bindings/go/acc/checkpoint.go; Java: accx_register_for_checkpointing_java. */
%ignore acc_register_for_checkpointing;
%ignore acc_checkpoint_save_fn;
%ignore acc_checkpoint_load_fn;
/* Go: cgo trampolines in bindings/go/acc/generate.go; Java: accx_generate_java. */
%ignore acc_generate;
%ignore acc_generate_token_fn;
/* Text: through the accx_ helpers above (and Go's cgo trampoline for acc_generate_text). */
%ignore acc_text_fn;
%ignore acc_text_free;
%ignore acc_tokenizer_train_bpe;
%ignore acc_tokenizer_info;
%ignore acc_tokenizer_set_special_token;
%ignore acc_tokenizer_token_to_id;
%ignore acc_tokenizer_id_to_token;
%ignore acc_tokenizer_encode;
%ignore acc_encoding_get;
%ignore acc_tokenizer_decode;
%ignore acc_tokenizer_apply_chat_template;
%ignore acc_generate_text;
/* Datasets from files: through accx_dataset_from_files. */
%ignore acc_dataset_from_files;
/* Arrays without a length parameter need their own typemaps (future work): not wrapped yet. */
%ignore acc_dataloader_create_from_batches;
/* The thread-local last error is read inside each wrapper; a second call could run on another thread. */
%ignore acc_last_error_message;
%ignore acc_last_error_code;
#ifdef SWIGJAVA
/* A status passed in (acc_status_name) is a plain number. */
%apply int { acc_status status };
#endif

%include <acc/acc.h>
