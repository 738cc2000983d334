// Every size and count libacc and the `acc` launcher accept from outside, in one place (docs/security.md lists them
// with the reasons). Each is enforced where the input is read, with an error that names the limit; nothing is
// truncated silently. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>

namespace acc::limits {

// Config files (launch YAML/JSON, DeepSpeed JSON) and the explicit JSON of acc_accelerator_create. Accelerate's own
// files are a few KiB.
inline constexpr size_t kConfigBytes = size_t{1} << 20;
// JSON and YAML nesting, keys per mapping, and the length of a key and of a string value (a path is at most
// PATH_MAX; a host name at most 253 bytes).
inline constexpr int kConfigDepth = 64;
inline constexpr size_t kKeysPerMapping = 4096;
inline constexpr size_t kKeyBytes = 256;
inline constexpr size_t kStringBytes = 4096;
inline constexpr size_t kHostBytes = 253;
// Values in one YAML document once its aliases are expanded (an "alias bomb" multiplies a small file).
inline constexpr size_t kConfigValues = 20000;

// A regular expression from a file or a caller (adapter_config.json's target_modules, param_groups and requires_grad
// patterns; util/pattern.hpp): its length, as long as a string value, and the memory RE2 may use for its compiled
// program and match caches (RE2's default: a pattern that needs more is refused as too large; a match that fills the
// cache goes on, still linear, without it).
inline constexpr size_t kPatternBytes = 4096;
inline constexpr int64_t kPatternMemoryBytes = int64_t{8} << 20;

// Processes: the whole job, one machine, and machines.
inline constexpr int64_t kProcesses = 65536;
inline constexpr int64_t kProcessesPerMachine = 1024;
inline constexpr int64_t kMachines = 65536;

// Collective and rendezvous timeouts, in seconds: at least a millisecond (what c10d counts in), at most a year.
inline constexpr double kTimeoutMinSeconds = 0.001;
inline constexpr double kTimeoutMaxSeconds = 365.0 * 24 * 3600;

// A model's config.json (acc estimate-memory, the built-in specs): each size (hidden, vocabulary, ...) and each
// count of repeated blocks (layers, experts).
inline constexpr int64_t kModelSize = int64_t{1} << 31;
inline constexpr int64_t kModelBlocks = 65536;

// A safetensors header (the JSON before the tensor data), as the safetensors library bounds it.
inline constexpr uint64_t kSafetensorsHeaderBytes = 100'000'000;

// A checkpoint's manifest.json and its other JSON files (accelerator, optimizer, scheduler, loader state): a
// manifest lists a few files per process (64 bytes each, 65536 processes: 16 MiB); an optimizer's JSON a line per
// parameter tensor.
inline constexpr size_t kCheckpointJsonBytes = size_t{64} << 20;

// A Hugging Face model folder (from_pretrained, acc estimate-memory / merge-weights). config.json and
// generation_config.json are a few KiB; the largest on the Hub are classifiers whose id2label names tens of thousands
// of classes (ImageNet-22k: about 1.3 MB), so 16 MiB is ten times that. model.safetensors.index.json lists each tensor
// once (about 100 bytes each: DeepSeek-V3's 91k tensors take 9 MB); 64 MiB is room for 600k tensors.
inline constexpr size_t kHfConfigBytes = size_t{16} << 20;
inline constexpr size_t kHfIndexBytes = size_t{64} << 20;

// A LoRA adapter's adapter_config.json (load_adapter). peft writes a few KiB; the largest a real one gets is a
// target_modules list naming every linear layer of a big mixture-of-experts model in full (DeepSeek-V3's 47k expert
// layers: about 3 MB), so 16 MiB is five times that. Its text (and add_lora's) is read within the limits of a config
// file above (string values, nesting, keys per object), its keys (rank_pattern's patterns) within kPatternBytes.
inline constexpr size_t kAdapterConfigBytes = size_t{16} << 20;

// Text from outside quoted in an error message (a tracking server's error body): at most this many bytes of it,
// control bytes and invalid UTF-8 escaped, so that acc_last_error_message() stays short and safe to print.
inline constexpr size_t kQuotedTextBytes = 300;

// tokenizer.json: a vocabulary with its merges. The largest on the Hub (Gemma 3's 262k tokens) take about 33 MB;
// 512 MiB is fifteen times that. Its JSON is read by serde_json, whose nesting limit (128) bounds recursion.
inline constexpr size_t kTokenizerJsonBytes = size_t{512} << 20;
// A chat template (chat_template.jinja, or one in tokenizer_config.json): real ones are a few KiB to 30 KiB.
inline constexpr size_t kChatTemplateBytes = size_t{4} << 20;
// The work one chat-template rendering may do: minijinja's fuel, one unit per instruction plus one per 64 bytes of
// every value it makes (strings joined with `~`, lists, filter results: written or not), so the budget bounds time
// and memory both. Real templates spend 1 to 1.3 units per byte of the conversation they render (Llama-3, Qwen3 and
// Gemma, 2,667 messages with tool calls, measured with minijinja's fuel_levels): the budget is a base plus 8 units
// per byte of the conversation's JSON (six times that), rounded up to a power of two (one compiled template per
// budget), at most kChatTemplateFuelMax. A template that loops forever stops within seconds, one that builds values
// without writing them after about 64 bytes per unit (64 MiB for a short conversation).
inline constexpr uint64_t kChatTemplateFuelBase = uint64_t{1} << 20;
inline constexpr uint64_t kChatTemplateFuelPerByte = 8;
inline constexpr uint64_t kChatTemplateFuelMax = uint64_t{1} << 26;

// Dataset files (src/data/files, docs/data.md; the Rust side keeps the same numbers in src/data/files/rust/src/lib.rs).
// One JSON lines line or CSV record: a record of a fine-tuning set is a few KiB, a long document a few MiB; a longer
// line is refused when the limit is passed, before it is held whole. A batch of JSON lines ends early past
// kDataBatchBytes of text, so that max_rows long records never hold more.
inline constexpr size_t kDataLineBytes = size_t{64} << 20;
inline constexpr size_t kDataBatchBytes = size_t{256} << 20;
// JSON lines columns are inferred from the first lines (as pyarrow infers them from its first block), CSV types from
// the first rows: a later line that does not fit is an error naming it.
inline constexpr size_t kDataInferLines = 10'000;
inline constexpr size_t kDataInferBytes = size_t{64} << 20;
// One Arrow IPC message's metadata (a flatbuffer of a few hundred bytes per column) and a save_to_disk state.json;
// the bodies of IPC messages and Parquet pages are bounded by the file they are in.
inline constexpr size_t kDataIpcMetadataBytes = size_t{64} << 20;
inline constexpr size_t kDataStateJsonBytes = size_t{64} << 20;
// Rows of one Arrow IPC record batch or Parquet row group: Arrow's own bound on an array's length (its int32 offsets).
// Past it the metadata is lying: a batch of no columns, or of null columns, costs nothing to claim.
inline constexpr uint64_t kDataBatchRows = (uint64_t{1} << 31) - 1;
// One Parquet page, uncompressed, and one page header: writers make 1 MiB pages (one value larger than that makes a
// larger page); a header holds the page's min and max values. The page headers of a file are checked when it is
// opened, because arrow-rs allocates and zero-fills the size a header states (up to 2 GiB) before it reads the page.
inline constexpr uint64_t kDataPageBytes = uint64_t{512} << 20;
inline constexpr uint64_t kDataPageHeaderBytes = uint64_t{16} << 20;

}  // namespace acc::limits
