// Unit tests of the configuration library: schema defaults and types, errors, precedence and provenance,
// Accelerate's YAML files (current and legacy), JSON files, the bad-config corpus, the launcher environment; and the
// library's other torch-free parts: built-in model specs, safetensors headers, atomic file writes.
#include <dirent.h>
#include <csignal>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "acc/builtin_models.hpp"
#include "acc/config.hpp"
#include "acc/config_views.hpp"
#include "acc/files.hpp"
#include "acc/hf_shapes.hpp"
#include "acc/safetensors_header.hpp"

using namespace acc::config;

#ifndef ACC_TEST_DATA
#error "ACC_TEST_DATA must name tests/launcher/data"
#endif

namespace {

const std::string kData = ACC_TEST_DATA;
using Env = std::map<std::string, std::string>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/acc-config-test-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string write(const std::string& rel, const std::string& text) const {
    std::string full = path + "/" + rel;
    if (rel.find('/') != std::string::npos) std::system(("mkdir -p \"$(dirname '" + full + "')\"").c_str());
    std::ofstream(full) << text;
    return full;
  }
};

// --- Defaults -------------------------------------------------------------------------------------------------

TEST(Defaults, ConstructorKeysHaveAccelerateDefaults) {
  Config c = resolve_accelerator("", {});
  EXPECT_FALSE(c.get_bool("cpu"));
  EXPECT_EQ(c.get_string("mixed_precision"), "no");
  EXPECT_EQ(c.get_int("gradient_accumulation_steps"), 1);
  EXPECT_FALSE(c.is_set("seed"));
  EXPECT_FALSE(c.is_set("project_dir"));
  EXPECT_TRUE(c.get_bool("device_placement"));
  EXPECT_EQ(c.get_string_list("rng_types"), std::vector<std::string>{"generator"});
  // DataLoaderConfiguration
  EXPECT_FALSE(c.get_bool("dataloader_config.split_batches"));
  EXPECT_FALSE(c.is_set("dataloader_config.dispatch_batches"));
  EXPECT_TRUE(c.get_bool("dataloader_config.even_batches"));
  EXPECT_FALSE(c.get_bool("dataloader_config.use_seedable_sampler"));
  EXPECT_FALSE(c.is_set("dataloader_config.data_seed"));
  EXPECT_FALSE(c.get_bool("dataloader_config.non_blocking"));
  EXPECT_FALSE(c.get_bool("dataloader_config.use_stateful_dataloader"));
  // DistributedDataParallelKwargs
  EXPECT_EQ(c.get_int("ddp_kwargs.dim"), 0);
  EXPECT_TRUE(c.get_bool("ddp_kwargs.broadcast_buffers"));
  EXPECT_DOUBLE_EQ(c.get_double("ddp_kwargs.bucket_cap_mb"), 25.0);
  EXPECT_FALSE(c.get_bool("ddp_kwargs.find_unused_parameters"));
  EXPECT_FALSE(c.get_bool("ddp_kwargs.check_reduction"));
  EXPECT_FALSE(c.get_bool("ddp_kwargs.gradient_as_bucket_view"));
  EXPECT_FALSE(c.get_bool("ddp_kwargs.static_graph"));
  EXPECT_EQ(c.get_string("ddp_kwargs.comm_hook"), "no");
  EXPECT_EQ(c.get_string("ddp_kwargs.comm_wrapper"), "no");
  // GradientAccumulationPlugin
  EXPECT_EQ(c.get_int("gradient_accumulation_plugin.num_steps"), 1);  // follows gradient_accumulation_steps
  EXPECT_TRUE(c.get_bool("gradient_accumulation_plugin.adjust_scheduler"));
  EXPECT_TRUE(c.get_bool("gradient_accumulation_plugin.sync_with_dataloader"));
  EXPECT_FALSE(c.get_bool("gradient_accumulation_plugin.sync_each_batch"));
  // ProjectConfiguration
  EXPECT_FALSE(c.is_set("project_config.project_dir"));
  EXPECT_FALSE(c.is_set("project_config.logging_dir"));
  EXPECT_FALSE(c.get_bool("project_config.automatic_checkpoint_naming"));
  EXPECT_FALSE(c.is_set("project_config.total_limit"));
  EXPECT_EQ(c.get_int("project_config.iteration"), 0);
  EXPECT_FALSE(c.get_bool("project_config.save_on_each_node"));
  // GradScalerKwargs
  EXPECT_DOUBLE_EQ(c.get_double("grad_scaler_kwargs.init_scale"), 65536.0);
  EXPECT_DOUBLE_EQ(c.get_double("grad_scaler_kwargs.growth_factor"), 2.0);
  EXPECT_DOUBLE_EQ(c.get_double("grad_scaler_kwargs.backoff_factor"), 0.5);
  EXPECT_EQ(c.get_int("grad_scaler_kwargs.growth_interval"), 2000);
  EXPECT_TRUE(c.get_bool("grad_scaler_kwargs.enabled"));
  // AutocastKwargs, InitProcessGroupKwargs
  EXPECT_TRUE(c.get_bool("autocast_kwargs.enabled"));
  EXPECT_TRUE(c.get_bool("autocast_kwargs.cache_enabled"));
  EXPECT_FALSE(c.is_set("init_process_group_kwargs.backend"));
  EXPECT_FALSE(c.is_set("init_process_group_kwargs.timeout"));
  // Plugins
  EXPECT_FALSE(c.get_bool("use_fsdp"));
  EXPECT_EQ(c.get_int("fsdp_plugin.fsdp_version"), 1);
  EXPECT_EQ(c.get_string("fsdp_plugin.auto_wrap_policy"), "NO_WRAP");
  EXPECT_EQ(c.get_int("deepspeed_plugin.zero_stage"), 2);
  EXPECT_EQ(c.get_string("dynamo_plugin.backend"), "NO");
  EXPECT_EQ(c.get_string("fp8_recipe_kwargs.fp8_format"), "HYBRID");
  EXPECT_EQ(c.get_int("fp8_recipe_kwargs.amax_history_len"), 1024);
  EXPECT_EQ(c.get_string_list("fp8_recipe_kwargs.override_linear_precision"),
            (std::vector<std::string>{"false", "false", "false"}));
  for (const auto& k : c.keys()) EXPECT_EQ(c.provenance(k).origin, Origin::Default) << k;
}

// The data section (acc_dataset_from_config): SFTConfig's and the collators' defaults, strings or lists of files, values
// with their source, bad values named (issue 39 item 5).
TEST(Defaults, DataKeys) {
  Config c = resolve_accelerator("", {});
  EXPECT_FALSE(c.is_set("data.files"));
  EXPECT_EQ(c.get_string("data.mode"), "sft");
  EXPECT_EQ(c.get_string("data.format"), "auto");
  EXPECT_EQ(c.get_string("data.text_column"), "text");
  EXPECT_EQ(c.get_int("data.block_size"), 1024);
  EXPECT_EQ(c.get_int("data.map_batch_size"), 1000);
  EXPECT_FALSE(c.is_set("data.max_length"));
  EXPECT_FALSE(c.get_bool("data.packing"));
  EXPECT_EQ(c.get_string("data.packing_strategy"), "bfd");
  EXPECT_FALSE(c.is_set("data.completion_only_loss"));
  EXPECT_FALSE(c.get_bool("data.assistant_only_loss"));
  EXPECT_FALSE(c.is_set("data.collator"));
  EXPECT_EQ(c.get_int("data.threads"), 1);
  Config e =
      resolve_accelerator(R"({"data": {"files": ["a.jsonl", "b.jsonl"], "packing": true, "collator": "trl"}})", {});
  EXPECT_EQ(e.get_string_list("data.files"), (std::vector<std::string>{"a.jsonl", "b.jsonl"}));
  EXPECT_TRUE(e.get_bool("data.packing"));
  EXPECT_EQ(e.provenance("data.packing").origin, Origin::Explicit);
  EXPECT_EQ(e.provenance("data.block_size").origin, Origin::Default);
  EXPECT_EQ(resolve_accelerator(R"({"data": {"files": "train.parquet"}})", {}).get_json("data.files"),
            "\"train.parquet\"");
  EXPECT_NE(error_of([] { resolve_accelerator(R"({"data": {"block_size": 0}})", {}); }).find("data.block_size"),
            std::string::npos);
  EXPECT_NE(error_of([] { resolve_accelerator(R"({"data": {"collator": "padded"}})", {}); }).find("data.collator"),
            std::string::npos);
  EXPECT_NE(error_of([] { resolve_accelerator(R"({"data": {"paking": true}})", {}); }).find("paking"),
            std::string::npos);
}

TEST(Defaults, LaunchKeysHaveAccelerateDefaults) {
  Config c = resolve_launch(std::nullopt, {});
  EXPECT_EQ(c.get_string("compute_environment"), "LOCAL_MACHINE");
  EXPECT_EQ(c.get_string("distributed_type"), "NO");
  EXPECT_EQ(c.get_string("mixed_precision"), "no");
  EXPECT_EQ(c.get_int("num_processes"), 1);
  EXPECT_EQ(c.get_int("num_machines"), 1);
  EXPECT_EQ(c.get_int("machine_rank"), 0);
  EXPECT_FALSE(c.is_set("main_process_ip"));
  EXPECT_FALSE(c.is_set("main_process_port"));
  EXPECT_EQ(c.get_string("rdzv_backend"), "static");
  EXPECT_FALSE(c.get_bool("same_network"));
  EXPECT_EQ(c.get_string("main_training_function"), "main");
  EXPECT_FALSE(c.get_bool("use_cpu"));
  EXPECT_FALSE(c.get_bool("debug"));
  EXPECT_FALSE(c.get_bool("enable_cpu_affinity"));
  EXPECT_FALSE(c.get_bool("downcast_bf16"));
  EXPECT_EQ(c.get_string("dynamo_config.dynamo_backend"), "NO");
  EXPECT_EQ(c.get_string("dynamo_config.dynamo_mode"), "default");
  EXPECT_EQ(c.get_int("fsdp_config.fsdp_min_num_params"), 100000000);
  EXPECT_EQ(c.get_string("fsdp_config.fsdp_sharding_strategy"), "FULL_SHARD");
  EXPECT_TRUE(c.get_bool("fsdp_config.fsdp_use_orig_params"));
  EXPECT_FALSE(c.is_set("deepspeed_config.zero_stage"));
  EXPECT_EQ(c.get_string("fp8_config.opt_level"), "O2");
  EXPECT_EQ(c.get_double("megatron_lm_config.megatron_lm_gradient_clipping"), 1.0);
}

// Every key's documented default is what a fresh config holds, and every key accepts its own default back.
TEST(Defaults, EveryKeyRoundTrips) {
  for (SchemaKind kind : {SchemaKind::Accelerator, SchemaKind::Launch}) {
    Config c = kind == SchemaKind::Accelerator ? resolve_accelerator("", {}) : resolve_launch(std::nullopt, {});
    auto infos = schema_keys(kind);
    ASSERT_GT(infos.size(), 40u);
    for (const auto& k : infos) {
      if (k.path == "gradient_accumulation_plugin.num_steps") continue;  // follows gradient_accumulation_steps
      EXPECT_EQ(c.get_json(k.path), k.default_json) << k.path;
      EXPECT_FALSE(k.help.empty()) << k.path;
      EXPECT_FALSE(k.type.empty()) << k.path;
    }
  }
  Config a = resolve_accelerator("", {});
  std::string plain = a.to_json(false);
  Config b = resolve_accelerator(plain, {});
  EXPECT_EQ(b.to_json(false), plain);
  for (const auto& k : b.keys()) EXPECT_EQ(b.provenance(k).origin, Origin::Explicit) << k;
  // The provenance form reproduces the same values.
  Config c = resolve_accelerator(a.to_json(true), {});
  EXPECT_EQ(c.to_json(false), plain);
  // Also for a config that sets something (found by fuzz_accelerator_json: the accumulation steps, written under
  // both spellings, were refused as exclusive when given back).
  for (const char* given :
       {R"({"gradient_accumulation_steps": 4})", R"({"gradient_accumulation_plugin": {"num_steps": 3}})",
        R"({"project_dir": "runs", "mixed_precision": "bf16"})"}) {
    Config d = resolve_accelerator(given, {});
    EXPECT_EQ(resolve_accelerator(d.to_json(true), {}).to_json(false), d.to_json(false)) << given;
    EXPECT_EQ(resolve_accelerator(d.to_json(false), {}).to_json(false), d.to_json(false)) << given;
  }
  // Found by fuzz_accelerator_json: a nested reference in a fallback left "${env:HOME" in the value.
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"project_dir": "${env:NOPE:-a${env:HOME}/run"})", {}); }),
            "'project_dir': a ${env:...} fallback cannot hold another reference, in \"${env:NOPE:-a${env:HOME}/run\"");
  EXPECT_NE(error_of([] {
              resolve_accelerator(
                  R"({"gradient_accumulation_steps": 4, "gradient_accumulation_plugin": {"num_steps": 3}})", {});
            }).find("are exclusive"),
            std::string::npos);
}

// Every key refuses a value of the wrong type, and the message names it with its full path.
TEST(Types, EveryKeyRefusesWrongTypes) {
  for (const auto& k : schema_keys(SchemaKind::Accelerator)) {
    if (k.type.find("any") != std::string::npos) continue;
    std::string json = "{}";
    // {"a": {"b": {"x": 1}}} for path a.b: an object where a value belongs.
    std::string path = k.path, open, close;
    size_t start = 0;
    for (;;) {
      size_t dot = path.find('.', start);
      std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      open += "{\"" + part + "\": ";
      close += "}";
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    json = open + "{\"x\": 1}" + close;
    std::string err = error_of([&] { resolve_accelerator(json, {}); });
    EXPECT_NE(err.find("'" + k.path + "' must be "), std::string::npos) << k.path << ": " << err;
    EXPECT_NE(err.find("got an object"), std::string::npos) << err;
  }
}

TEST(Types, SectionsMustBeObjects) {
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"ddp_kwargs": 3})", {}); }),
            "'ddp_kwargs' must be a mapping of keys (accepted: dim, broadcast_buffers, bucket_cap_mb, "
            "find_unused_parameters, check_reduction, gradient_as_bucket_view, static_graph, comm_hook, comm_wrapper, "
            "comm_state_option); got 3");
  // null sections are "not given"
  EXPECT_TRUE(resolve_accelerator(R"({"ddp_kwargs": null})", {}).get_bool("ddp_kwargs.broadcast_buffers"));
}

TEST(Types, ExplicitJsonIsStrict) {
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"cpu": "yes"})", {}); }), "'cpu' must be a boolean; got \"yes\"");
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"gradient_accumulation_steps": 2.5})", {}); }),
            "'gradient_accumulation_steps' must be an integer >= 1; got 2.5");
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"gradient_accumulation_steps": 0})", {}); }),
            "'gradient_accumulation_steps' must be an integer >= 1; got 0");
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"seed": "42"})", {}); }),
            "'seed' must be an integer or null; got \"42\"");
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"grad_scaler_kwargs": {"backoff_factor": 2}})", {}); }),
            "'grad_scaler_kwargs.backoff_factor' must be a number between 0 and 1; got 2");
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"cpu": null})", {}); }), "'cpu' must be a boolean; got null");
  // numbers accept integers; the int is kept
  Config c =
      resolve_accelerator(R"({"ddp_kwargs": {"bucket_cap_mb": 50}, "init_process_group_kwargs": {"timeout": 1.5}})",
                          {});
  EXPECT_DOUBLE_EQ(c.get_double("ddp_kwargs.bucket_cap_mb"), 50);
  EXPECT_DOUBLE_EQ(c.get_double("init_process_group_kwargs.timeout"), 1.5);
}

TEST(Types, EnumsListTheirValues) {
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"mixed_precision": "fp32"})", {}); }),
            "'mixed_precision' must be one of \"no\", \"fp16\", \"bf16\", \"fp8\"; got \"fp32\"");
  EXPECT_EQ(
      error_of([] { resolve_accelerator(R"({"mixed_precision": "bf61"})", {}); }),
      "'mixed_precision' must be one of \"no\", \"fp16\", \"bf16\", \"fp8\"; got \"bf61\" (did you mean \"bf16\"?)");
  // case-insensitive enums are stored in their canonical spelling
  Config c = resolve_accelerator(R"({"mixed_precision": "BF16", "dynamo_plugin": {"backend": "inductor"}})", {});
  EXPECT_EQ(c.get_string("mixed_precision"), "bf16");
  EXPECT_EQ(c.get_string("dynamo_plugin.backend"), "INDUCTOR");
  EXPECT_NE(error_of([] {
              resolve_accelerator(R"({"log_with": ["tensorboard", "wandbb"]})", {});
            }).find("'log_with' must be a list of \"all\""),
            std::string::npos);
  EXPECT_EQ(resolve_accelerator(R"({"log_with": "jsonl"})", {}).get_string_list("log_with"),
            std::vector<std::string>{"jsonl"});
}

// --- Unknown keys ---------------------------------------------------------------------------------------------

TEST(UnknownKeys, NestedDidYouMean) {
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"dataloader_config": {"even_batchs": true}})", {}); }),
            "unknown key 'dataloader_config.even_batchs' (did you mean 'even_batches'?); accepted: split_batches, "
            "dispatch_batches, even_batches, use_seedable_sampler, data_seed, non_blocking, use_stateful_dataloader");
}

TEST(UnknownKeys, TopLevelDidYouMean) {
  std::string e = error_of([] { resolve_accelerator(R"({"mixed_precison": "fp16"})", {}); });
  EXPECT_EQ(e.rfind("unknown key 'mixed_precison' (did you mean 'mixed_precision'?); accepted: device_placement, cpu,",
                    0),
            0u)
      << e;
}

TEST(UnknownKeys, RightNameWrongPlace) {
  std::string e = error_of([] { resolve_accelerator(R"({"even_batches": false})", {}); });
  EXPECT_EQ(e.rfind("unknown key 'even_batches' (did you mean 'dataloader_config.even_batches'?)", 0), 0u) << e;
}

TEST(UnknownKeys, NothingClose) {
  std::string e = error_of([] { resolve_accelerator(R"({"ddp_kwargs": {"zzzzzz": 1}})", {}); });
  EXPECT_EQ(e,
            "unknown key 'ddp_kwargs.zzzzzz'; accepted: dim, broadcast_buffers, bucket_cap_mb, find_unused_parameters, "
            "check_reduction, gradient_as_bucket_view, static_graph, comm_hook, comm_wrapper, comm_state_option");
}

TEST(UnknownKeys, AccessorsNameUnknownPaths) {
  Config c = resolve_accelerator("", {});
  EXPECT_EQ(error_of([&] {
              c.get_bool("dataloader_config.even_batchs");
            }).rfind("unknown key 'dataloader_config.even_batchs' (did you mean 'even_batches'?)", 0),
            0u);
  EXPECT_EQ(error_of([&] { c.get_string("cpu"); }), "'cpu' is false, not a string");
  EXPECT_EQ(error_of([&] { c.get_int("seed"); }), "'seed' is not set (null)");
  EXPECT_EQ(error_of([&] { c.get_bool("ddp_kwargs"); }), "'ddp_kwargs' is a section, not a single value");
  EXPECT_TRUE(c.has_key("ddp_kwargs"));
  EXPECT_FALSE(c.has_key("ddp_kwarg"));
}

// --- Malformed JSON -------------------------------------------------------------------------------------------

TEST(MalformedJson, PositionsAreReported) {
  EXPECT_EQ(error_of([] { resolve_accelerator("{\"cpu\": true", {}); }),
            "malformed JSON at line 1, column 13: expected ',' or '}' in object, got end of input");
  EXPECT_EQ(error_of([] { resolve_accelerator("{\n  \"cpu\": tru\n}", {}); }),
            "malformed JSON at line 2, column 10: expected a value, got 't'");
  EXPECT_EQ(error_of([] { resolve_accelerator("{\n  \"seed\": 1,\n}", {}); }),
            "malformed JSON at line 3, column 1: trailing comma before '}'");
  EXPECT_EQ(error_of([] { resolve_accelerator("{\"project_dir\": \"abc}", {}); }),
            "malformed JSON at line 1, column 22: unterminated string");
  EXPECT_EQ(error_of([] { resolve_accelerator("{\"seed\": 1, \"seed\": 2}", {}); }),
            "malformed JSON at line 1, column 13: duplicate key \"seed\"");
  EXPECT_EQ(error_of([] { resolve_accelerator("{\"seed\": 01}", {}); }),
            "malformed JSON at line 1, column 10: numbers must not have leading zeros");
  EXPECT_EQ(error_of([] { resolve_accelerator("[1, 2]", {}); }), "the configuration must be a JSON object; got [1,2]");
  EXPECT_EQ(error_of([] { resolve_accelerator("{} {}", {}); }),
            "malformed JSON at line 1, column 4: unexpected text after the JSON value");
  std::string deep(5000, '[');
  EXPECT_NE(error_of([&] {
              resolve_accelerator("{\"dynamo_plugin\": {\"options\": " + deep + "}}", {});
            }).find("nesting deeper than 64 levels"),
            std::string::npos);
  // Empty and null mean "nothing explicit".
  EXPECT_EQ(resolve_accelerator("  ", {}).provenance("cpu").origin, Origin::Default);
  EXPECT_EQ(resolve_accelerator("null", {}).provenance("cpu").origin, Origin::Default);
}

TEST(MalformedJson, UnicodeEscapes) {
  Config c = resolve_accelerator(R"({"project_dir": "/tmp/caf\u00e9 \ud83d\ude00"})", {});
  EXPECT_EQ(c.get_string("project_dir"), "/tmp/caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_NE(error_of([] { resolve_accelerator(R"({"project_dir": "\ud83d"})", {}); }).find("surrogate"),
            std::string::npos);
}

// --- Precedence and provenance ----------------------------------------------------------------------------------

TEST(Precedence, DefaultsEnvExplicit) {
  Env env{{"ACCELERATE_MIXED_PRECISION", "bf16"},
          {"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"},
          {"ACCELERATE_USE_CPU", "True"},
          {"ACCELERATE_DEBUG_MODE", "true"}};
  Config c = resolve_accelerator(R"({"mixed_precision": "fp16", "cpu": false})", env);
  EXPECT_EQ(c.get_string("mixed_precision"), "fp16");
  EXPECT_EQ(c.provenance("mixed_precision").origin, Origin::Explicit);
  EXPECT_EQ(c.provenance("mixed_precision").where, "acc_accelerator_create");
  EXPECT_FALSE(c.get_bool("cpu"));  // explicit beats ACCELERATE_USE_CPU (Accelerate ORs them)
  EXPECT_EQ(c.get_int("gradient_accumulation_steps"), 4);
  EXPECT_EQ(c.provenance("gradient_accumulation_steps").origin, Origin::Env);
  EXPECT_EQ(c.provenance("gradient_accumulation_steps").where, "ACCELERATE_GRADIENT_ACCUMULATION_STEPS");
  EXPECT_TRUE(c.get_bool("debug"));
  EXPECT_EQ(c.provenance("seed").origin, Origin::Default);
  EXPECT_EQ(c.provenance("seed").where, "default");

  Config e = resolve_accelerator("", env);
  EXPECT_EQ(e.get_string("mixed_precision"), "bf16");
  EXPECT_EQ(e.provenance("mixed_precision").where, "ACCELERATE_MIXED_PRECISION");
  EXPECT_TRUE(e.get_bool("cpu"));

  Config x = resolve_accelerator(R"({"gradient_accumulation_steps": 8})", env, "my_config.json");
  EXPECT_EQ(x.get_int("gradient_accumulation_steps"), 8);  // Accelerate lets the env win here; we do not
  EXPECT_EQ(x.provenance("gradient_accumulation_steps").where, "my_config.json");
}

TEST(Precedence, EnvValuesAreValidated) {
  EXPECT_EQ(error_of([] { resolve_accelerator("", {{"ACCELERATE_MIXED_PRECISION", "fp32"}}); }),
            "environment variable ACCELERATE_MIXED_PRECISION=fp32: 'mixed_precision' must be one of \"no\", \"fp16\", "
            "\"bf16\", \"fp8\"; got \"fp32\"");
  EXPECT_EQ(error_of([] { resolve_accelerator("", {{"ACCELERATE_USE_CPU", "maybe"}}); }),
            "environment variable ACCELERATE_USE_CPU=maybe: 'cpu' must be a boolean; got \"maybe\"");
  EXPECT_EQ(
      error_of([] { resolve_accelerator("", {{"FSDP_VERSION", "3"}}); }),
      "environment variable FSDP_VERSION=3: 'fsdp_plugin.fsdp_version' must be an integer between 1 and 2; got \"3\"");
  // Empty values are ignored; unrelated variables too.
  Config c = resolve_accelerator("", {{"ACCELERATE_MIXED_PRECISION", ""}, {"ACCELERATE_SOMETHING_ELSE", "x"}});
  EXPECT_EQ(c.provenance("mixed_precision").origin, Origin::Default);
}

TEST(Precedence, EnvSpellingsFromAccelerateLaunch) {
  Env env{{"ACCELERATE_USE_FSDP", "true"},           {"FSDP_SHARDING_STRATEGY", "1"},
          {"FSDP_TRANSFORMER_CLS_TO_WRAP", "A,B"},   {"FSDP_RESHARD_AFTER_FORWARD", "false"},
          {"ACCELERATE_DYNAMO_BACKEND", "inductor"}, {"ACCELERATE_DYNAMO_USE_DYNAMIC", "False"},
          {"ACCELERATE_FP8_OVERRIDE_DGRAD", "True"}, {"ACCELERATE_FP8_BACKEND", "te"},
          {"ACCELERATE_GRADIENT_CLIPPING", "1.0"}};
  Config c = resolve_accelerator("", env);
  EXPECT_TRUE(c.get_bool("use_fsdp"));
  EXPECT_EQ(c.get_string("fsdp_plugin.sharding_strategy"), "FULL_SHARD");
  EXPECT_EQ(c.get_string_list("fsdp_plugin.transformer_cls_names_to_wrap"), (std::vector<std::string>{"A", "B"}));
  EXPECT_FALSE(c.get_bool("fsdp_plugin.reshard_after_forward"));
  EXPECT_EQ(c.get_string("dynamo_plugin.backend"), "INDUCTOR");
  EXPECT_FALSE(c.get_bool("dynamo_plugin.dynamic"));
  EXPECT_EQ(c.get_string_list("fp8_recipe_kwargs.override_linear_precision"),
            (std::vector<std::string>{"false", "true", "false"}));
  EXPECT_EQ(c.provenance("fp8_recipe_kwargs.override_linear_precision").where, "ACCELERATE_FP8_OVERRIDE_DGRAD");
  EXPECT_EQ(c.get_string("fp8_recipe_kwargs.backend"), "TE");
  EXPECT_DOUBLE_EQ(c.get_double("deepspeed_plugin.gradient_clipping"), 1.0);
}

TEST(Precedence, SectionProvenanceAndIsSet) {
  Config c =
      resolve_accelerator(R"({"ddp_kwargs": {"static_graph": true}})", {{"ACCELERATE_DYNAMO_MODE", "max-autotune"}});
  EXPECT_TRUE(c.is_set("ddp_kwargs"));
  EXPECT_FALSE(c.is_set("grad_scaler_kwargs"));
  EXPECT_EQ(c.provenance("ddp_kwargs").origin, Origin::Explicit);
  EXPECT_EQ(c.provenance("dynamo_plugin").origin, Origin::Env);
  EXPECT_EQ(c.provenance("grad_scaler_kwargs").origin, Origin::Default);
  EXPECT_EQ(
      c.get_json("ddp_kwargs"),
      R"({"dim":0,"broadcast_buffers":true,"bucket_cap_mb":25,"find_unused_parameters":false,"check_reduction":false,)"
      R"("gradient_as_bucket_view":false,"static_graph":true,"comm_hook":"no","comm_wrapper":"no","comm_state_option":{}})");
  std::string j = c.to_json(true);
  EXPECT_NE(j.find(R"("ddp_kwargs.static_graph": {
      "origin": "explicit",
      "where": "acc_accelerator_create"
    })"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find(R"("dynamo_plugin.mode": {
      "origin": "env",
      "where": "ACCELERATE_DYNAMO_MODE"
    })"),
            std::string::npos);
}

TEST(Rules, PluginsImplyTheirParadigm) {
  Config c = resolve_accelerator(R"({"fsdp_plugin": {"fsdp_version": 2}})", {});
  EXPECT_TRUE(c.get_bool("use_fsdp"));
  EXPECT_EQ(c.provenance("use_fsdp").origin, Origin::Explicit);
  EXPECT_FALSE(resolve_accelerator(R"({"fsdp_plugin": {"fsdp_version": 2}, "use_fsdp": false})", {})
                   .get_bool("use_fsdp"));
  EXPECT_TRUE(resolve_accelerator(R"({"parallelism_config": {"tp_size": 2}})", {}).get_bool("use_parallelism_config"));
  EXPECT_NE(error_of([] {
              resolve_accelerator(R"({"use_fsdp": true, "deepspeed_plugin": {}})", {});
            }).find("exclusive"),
            std::string::npos);
}

TEST(Rules, GradientAccumulationHasOneValue) {
  Config a = resolve_accelerator(R"({"gradient_accumulation_plugin": {"num_steps": 3}})",
                                 {{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "5"}});
  EXPECT_EQ(a.get_int("gradient_accumulation_steps"), 3);
  EXPECT_EQ(a.get_int("gradient_accumulation_plugin.num_steps"), 3);
  Config b = resolve_accelerator(R"({"gradient_accumulation_steps": 6})", {});
  EXPECT_EQ(b.get_int("gradient_accumulation_plugin.num_steps"), 6);
  EXPECT_EQ(
      error_of([] {
        resolve_accelerator(R"({"gradient_accumulation_steps": 2, "gradient_accumulation_plugin": {"num_steps": 3}})",
                            {});
      }),
      "'gradient_accumulation_steps' and 'gradient_accumulation_plugin.num_steps' are exclusive; give one of them");
}

TEST(Rules, ProjectDirectories) {
  Config a = resolve_accelerator(R"({"project_dir": "/runs/a"})", {});
  EXPECT_EQ(a.get_string("project_config.project_dir"), "/runs/a");
  EXPECT_EQ(a.get_string("project_config.logging_dir"), "/runs/a");
  Config b = resolve_accelerator(
      R"({"project_dir": "/runs/a", "project_config": {"project_dir": "/runs/b", "logging_dir": "/logs"}})", {});
  EXPECT_EQ(b.get_string("project_dir"), "/runs/b");
  EXPECT_EQ(b.get_string("project_config.logging_dir"), "/logs");
}

TEST(Rules, EnvironmentReferences) {
  Env env{{"SCRATCH", "/scratch/me"}};
  Config c =
      resolve_accelerator(R"({"project_dir": "${env:SCRATCH}/runs", "log_with": ["${env:TRACKER:-jsonl}"]})", env);
  EXPECT_EQ(c.get_string("project_dir"), "/scratch/me/runs");
  EXPECT_EQ(c.provenance("project_dir").where, "acc_accelerator_create (${env:SCRATCH})");
  EXPECT_EQ(c.get_string_list("log_with"), std::vector<std::string>{"jsonl"});
  EXPECT_EQ(error_of([&] { resolve_accelerator(R"({"project_dir": "${env:NOPE}/x"})", env); }),
            "'project_dir' refers to ${env:NOPE}, but NOPE is not set");
  EXPECT_EQ(error_of([&] { resolve_accelerator(R"({"project_dir": "${env:SCRATCH"})", env); }),
            "'project_dir': unterminated ${env:...} in \"${env:SCRATCH\"");
  // The value is validated after expansion.
  EXPECT_EQ(error_of([&] { resolve_accelerator(R"({"mixed_precision": "${env:SCRATCH}"})", env); }),
            "'mixed_precision' must be one of \"no\", \"fp16\", \"bf16\", \"fp8\"; got \"/scratch/me\"");
  TempDir t;
  setenv("ACC_TEST_MASTER_HOST", "10.1.2.3", 1);
  std::string f = t.write("e.yaml", "distributed_type: NO\nmain_process_ip: ${env:ACC_TEST_MASTER_HOST}\n"
                                    "tpu_name: ${env:ACC_TEST_UNSET_VARIABLE:-fallback}\n");
  Config l = resolve_launch(f, {});
  EXPECT_EQ(l.get_string("main_process_ip"), "10.1.2.3");
  EXPECT_EQ(l.provenance("main_process_ip").where, f + ":2 (${env:ACC_TEST_MASTER_HOST})");
  EXPECT_EQ(l.get_string("tpu_name"), "fallback");
  unsetenv("ACC_TEST_MASTER_HOST");
  EXPECT_EQ(error_of([&] { resolve_launch(f, {}); }),
            f + ":2: 'main_process_ip' refers to ${env:ACC_TEST_MASTER_HOST}, but ACC_TEST_MASTER_HOST is not set");
}

// --- Launch config files ---------------------------------------------------------------------------------------

TEST(LaunchFiles, AccelerateDefaultConfigYaml) {
  const std::string f = kData + "/default_config.yaml";
  Config c = resolve_launch(f, {});
  EXPECT_EQ(c.get_string("distributed_type"), "MULTI_GPU");
  EXPECT_EQ(c.get_string("mixed_precision"), "bf16");
  EXPECT_EQ(c.get_int("num_processes"), 2);
  EXPECT_FALSE(c.get_bool("downcast_bf16"));  // written as 'no'
  EXPECT_EQ(c.get_string("gpu_ids"), "all");
  EXPECT_TRUE(c.get_bool("same_network"));
  EXPECT_EQ(c.get_string_list("tpu_env"), std::vector<std::string>{});
  EXPECT_EQ(c.provenance("mixed_precision").origin, Origin::File);
  EXPECT_EQ(c.provenance("mixed_precision").where, f + ":9");
  EXPECT_EQ(c.provenance("num_processes").where, f + ":11");
  EXPECT_EQ(c.provenance("main_process_port").origin, Origin::Default);
}

TEST(LaunchFiles, FlagsBeatTheFile) {
  const std::string f = kData + "/default_config.yaml";
  Config c =
      resolve_launch(f, {{"num_processes", "3", "--num-processes"}, {"mixed_precision", "fp16", "--mixed_precision"}});
  EXPECT_EQ(c.get_int("num_processes"), 3);
  EXPECT_EQ(c.provenance("num_processes").origin, Origin::Flag);
  EXPECT_EQ(c.provenance("num_processes").where, "--num-processes");
  EXPECT_EQ(c.get_string("mixed_precision"), "fp16");
  EXPECT_EQ(c.get_string("distributed_type"), "MULTI_GPU");  // untouched keys keep the file's value
  EXPECT_EQ(error_of([&] { resolve_launch(f, {{"num_processes", "x", "--num_processes"}}); }),
            "--num_processes: 'num_processes' must be an integer between 1 and 65536; got \"x\"");
}

TEST(LaunchFiles, PlainNoIsTheStringNo) {
  TempDir t;
  std::string f = t.write("c.yaml", "distributed_type: NO\nmixed_precision: no\ngpu_ids: 0\nuse_cpu: yes\n");
  Config c = resolve_launch(f, {}, /*check=*/false);  // (use_cpu with gpu_ids: a contradiction, checked elsewhere)
  EXPECT_EQ(c.get_string("distributed_type"), "NO");
  EXPECT_EQ(c.get_string("mixed_precision"), "no");
  EXPECT_EQ(c.get_string("gpu_ids"), "0");
  EXPECT_TRUE(c.get_bool("use_cpu"));
}

TEST(LaunchFiles, LegacyFileIsUpgraded) {
  Config c = resolve_launch(kData + "/legacy_fp16.yaml", {});
  EXPECT_EQ(c.get_string("mixed_precision"), "fp16");
  EXPECT_EQ(c.provenance("mixed_precision").where, kData + "/legacy_fp16.yaml:7");  // the `fp16:` line
  EXPECT_EQ(c.get_string("dynamo_config.dynamo_backend"), "INDUCTOR");
  EXPECT_EQ(c.get_int("fsdp_config.fsdp_min_num_params"), 2000);
  EXPECT_EQ(c.get_string("fsdp_config.fsdp_sharding_strategy"), "SHARD_GRAD_OP");  // 2
  EXPECT_EQ(c.get_string("fsdp_config.fsdp_backward_prefetch"), "BACKWARD_POST");
  TempDir t;
  EXPECT_EQ(resolve_launch(t.write("a.yaml", "distributed_type: NO\nfp16: false\n"), {}).get_string("mixed_precision"),
            "no");
  EXPECT_EQ(resolve_launch(t.write("b.yaml", "distributed_type: NO\nfp16: true\nmixed_precision: bf16\n"), {})
                .get_string("mixed_precision"),
            "bf16");
  EXPECT_EQ(resolve_launch(t.write("c.yaml", "distributed_type: NO\ndynamo_backend: NO\n"), {})
                .get_string("dynamo_config.dynamo_backend"),
            "NO");
}

TEST(LaunchFiles, Fp8SpellingsOfTheQuestionnaire) {
  Config c = resolve_launch(kData + "/fp8_config.yaml", {});
  EXPECT_EQ(c.get_int("fp8_config.amax_history_len"), 512);
  EXPECT_EQ(c.get_string("fp8_config.amax_compute_algo"), "max");
  EXPECT_EQ(c.get_string_list("fp8_config.override_linear_precision"),
            (std::vector<std::string>{"false", "true", "false"}));
  EXPECT_EQ(c.get_string("gpu_ids"), "0,1");
  auto env = launch_environment(c);
  EXPECT_EQ(env["ACCELERATE_FP8_BACKEND"], "TE");
  EXPECT_EQ(env["ACCELERATE_FP8_FORMAT"], "E4M3");
  EXPECT_EQ(env["ACCELERATE_FP8_AMAX_HISTORY_LEN"], "512");
  EXPECT_EQ(env["ACCELERATE_FP8_OVERRIDE_DGRAD"], "True");
  EXPECT_EQ(env["ACCELERATE_FP8_OVERRIDE_FPROP"], "False");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "0,1");
  Config lib = resolve_accelerator("", env);
  EXPECT_EQ(lib.get_string("mixed_precision"), "fp8");
  EXPECT_EQ(lib.get_int("fp8_recipe_kwargs.amax_history_len"), 512);
  EXPECT_EQ(lib.get_string_list("fp8_recipe_kwargs.override_linear_precision"),
            (std::vector<std::string>{"false", "true", "false"}));
}

TEST(LaunchFiles, JsonFileWithLines) {
  const std::string f = kData + "/cpu_config.json";
  Config c = resolve_launch(f, {});
  EXPECT_TRUE(c.get_bool("use_cpu"));
  EXPECT_EQ(c.get_int("num_processes"), 3);
  EXPECT_EQ(c.get_int("main_process_port"), 29555);
  EXPECT_EQ(c.provenance("use_cpu").where, f + ":5");
  EXPECT_EQ(c.provenance("main_process_port").where, f + ":9");
  EXPECT_EQ(c.provenance("dynamo_config.dynamo_backend").where, f + ":12");
  EXPECT_EQ(c.get_string("dynamo_config.dynamo_backend"), "NO");
  auto env = launch_environment(c);
  EXPECT_EQ(env["ACCELERATE_USE_CPU"], "True");
  EXPECT_EQ(env["KMP_BLOCKTIME"], "1");
}

TEST(LaunchFiles, SagemakerFileParses) {
  Config c = resolve_launch(kData + "/sagemaker_config.yaml", {});
  EXPECT_EQ(c.get_string("compute_environment"), "AMAZON_SAGEMAKER");
  EXPECT_TRUE(c.get_bool("debug"));  // duplicate keys: the last wins, as in PyYAML
  EXPECT_EQ(c.get_string("ec2_instance_type"), "ml.p3.2xlarge");
}

TEST(LaunchFiles, MissingFile) {
  EXPECT_EQ(error_of([] { resolve_launch(std::string("/nonexistent/acc.yaml"), {}); }),
            "cannot read config file '/nonexistent/acc.yaml': No such file or directory");
  EXPECT_EQ(error_of([] { resolve_launch(std::string("/tmp"), {}); }),
            "cannot read config file '/tmp': it is a directory");
}

// Every file of the corpus fails with a message naming the culprit; none crashes.
TEST(LaunchFiles, BadConfigCorpus) {
  std::ifstream manifest(kData + "/bad/EXPECT");
  ASSERT_TRUE(manifest.good());
  std::string line;
  int cases = 0;
  while (std::getline(manifest, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> parts;
    size_t start = 0;
    for (;;) {
      size_t bar = line.find('|', start);
      parts.push_back(line.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
      if (bar == std::string::npos) break;
      start = bar + 1;
    }
    const std::string file = kData + "/bad/" + parts[0];
    std::string err = error_of([&] { resolve_launch(file, {}); });
    EXPECT_NE(err, "<no error>") << parts[0];
    for (size_t i = 1; i < parts.size(); ++i)
      EXPECT_NE(err.find(parts[i]), std::string::npos) << parts[0] << ": " << err;
    ++cases;
  }
  EXPECT_GE(cases, 25);
}

// Cut the good files anywhere: each prefix either parses or fails with an Error, never anything else.
TEST(LaunchFiles, TruncatedFilesNeverCrash) {
  TempDir t;
  for (const char* name : {"default_config.yaml", "fsdp_config.yaml", "cpu_config.json", "fp8_config.yaml"}) {
    std::string text = slurp(kData + "/" + name);
    std::string ext = std::string(name).find(".json") != std::string::npos ? ".json" : ".yaml";
    for (size_t cut = 0; cut < text.size(); cut += 7) {
      std::string f = t.write("cut" + ext, text.substr(0, cut));
      try {
        resolve_launch(f, {});
      } catch (const Error&) {
      }
    }
  }
}

// Random byte edits of good files and of explicit JSON: Error or success, never a crash or another exception.
TEST(LaunchFiles, MutatedFilesNeverCrash) {
  TempDir t;
  uint32_t state = 12345;
  auto rnd = [&]() { return state = state * 1664525u + 1013904223u; };
  const char alphabet[] = "{}[]:,\"'-#&*!|>%@`\\\n \t0123456789.eE+-abcnulltruefalse~?\x00\xff";
  for (const char* name : {"default_config.yaml", "fsdp_config.yaml", "cpu_config.json", "legacy_fp16.yaml"}) {
    const std::string text = slurp(kData + "/" + name);
    const std::string ext = std::string(name).find(".json") != std::string::npos ? ".json" : ".yaml";
    for (int round = 0; round < 250; ++round) {
      std::string m = text;
      for (int e = 0, n = 1 + static_cast<int>(rnd() % 4); e < n && !m.empty(); ++e) {
        size_t at = rnd() % m.size();
        char c = alphabet[rnd() % (sizeof alphabet - 1)];
        switch (rnd() % 3) {
          case 0: m[at] = c; break;
          case 1: m.insert(m.begin() + static_cast<long>(at), c); break;
          default: m.erase(at, 1 + rnd() % 8);
        }
      }
      std::string f = t.write("m" + ext, m);
      try {
        resolve_launch(f, {});
      } catch (const Error&) {
      }
      if (ext == ".json") {
        try {
          resolve_accelerator(m, {});
        } catch (const Error&) {
        }
      }
    }
  }
}

// --- Launcher environment -----------------------------------------------------------------------------------

TEST(LaunchEnvironment, FsdpFileReachesTheLibrary) {
  Config c = resolve_launch(kData + "/fsdp_config.yaml", {});
  auto env = launch_environment(c);
  EXPECT_EQ(env["ACCELERATE_USE_FSDP"], "true");
  EXPECT_EQ(env["FSDP_VERSION"], "1");
  EXPECT_EQ(env["FSDP_SHARDING_STRATEGY"], "SHARD_GRAD_OP");
  EXPECT_EQ(env["FSDP_OFFLOAD_PARAMS"], "false");
  EXPECT_EQ(env["FSDP_TRANSFORMER_CLS_TO_WRAP"], "LlamaDecoderLayer");
  EXPECT_EQ(env["FSDP_STATE_DICT_TYPE"], "SHARDED_STATE_DICT");
  EXPECT_EQ(env["ACCELERATE_MIXED_PRECISION"], "fp16");
  EXPECT_EQ(env["ACCELERATE_DEBUG_MODE"], "true");
  EXPECT_EQ(env["ACCELERATE_USE_CPU"], "False");
  EXPECT_EQ(env.count("ACCELERATE_USE_DEEPSPEED"), 0u);
  Config lib = resolve_accelerator("", env);
  EXPECT_TRUE(lib.get_bool("use_fsdp"));
  EXPECT_EQ(lib.get_string("fsdp_plugin.sharding_strategy"), "SHARD_GRAD_OP");
  EXPECT_EQ(lib.get_string("fsdp_plugin.auto_wrap_policy"), "TRANSFORMER_BASED_WRAP");
  EXPECT_EQ(lib.get_string_list("fsdp_plugin.transformer_cls_names_to_wrap"),
            std::vector<std::string>{"LlamaDecoderLayer"});
  EXPECT_TRUE(lib.get_bool("fsdp_plugin.cpu_ram_efficient_loading"));
  EXPECT_TRUE(lib.get_bool("debug"));
  EXPECT_EQ(lib.provenance("fsdp_plugin.sharding_strategy").where, "FSDP_SHARDING_STRATEGY");
}

TEST(LaunchEnvironment, DeepSpeedFileReachesTheLibrary) {
  Config c = resolve_launch(kData + "/deepspeed_config.yaml", {});
  auto env = launch_environment(c);
  EXPECT_EQ(env["ACCELERATE_USE_DEEPSPEED"], "true");
  EXPECT_EQ(env["ACCELERATE_DEEPSPEED_ZERO_STAGE"], "2");
  EXPECT_EQ(env["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"], "4");
  EXPECT_EQ(env["ACCELERATE_GRADIENT_CLIPPING"], "1.0");
  EXPECT_EQ(env["ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"], "cpu");
  EXPECT_EQ(env["ACCELERATE_DEEPSPEED_ZERO3_INIT"], "false");
  EXPECT_EQ(
      env["ACCELERATE_CONFIG_DS_FIELDS"],
      "gradient_accumulation_steps,gradient_clipping,offload_optimizer_device,offload_param_device,zero3_init_flag,"
      "zero_stage,mixed_precision");  // the file's order, as accelerate launch lists its dict's keys
  TempDir t;
  EXPECT_EQ(launch_environment(resolve_launch(t.write("ds.yaml",
                                                      "distributed_type: DEEPSPEED\nnum_processes: 2\n"
                                                      "deepspeed_config:\n  zero_stage: 3\n  zero3_init_flag: true\n"
                                                      "  offload_param_device: cpu\n"),
                                              {}))["ACCELERATE_CONFIG_DS_FIELDS"],
            "zero_stage,zero3_init_flag,offload_param_device");
  Config lib = resolve_accelerator("", env);
  EXPECT_TRUE(lib.get_bool("use_deepspeed"));
  EXPECT_EQ(lib.get_int("deepspeed_plugin.zero_stage"), 2);
  EXPECT_EQ(lib.get_int("gradient_accumulation_steps"), 4);
  EXPECT_EQ(lib.get_string("deepspeed_plugin.offload_optimizer_device"), "cpu");
}

// Every variable the launcher exports for a config that touches every section is one the library reads (or a
// documented launcher-only one), so the two sides cannot drift apart.
TEST(LaunchEnvironment, EveryExportIsReadByTheLibrary) {
  std::set<std::string> read;
  for (const auto& k : schema_keys(SchemaKind::Accelerator))
    if (!k.env.empty()) read.insert(k.env);
  for (const char* n :
       {"ACCELERATE_FP8_OVERRIDE_FPROP", "ACCELERATE_FP8_OVERRIDE_DGRAD", "ACCELERATE_FP8_OVERRIDE_WGRAD"})
    read.insert(n);
  const std::set<std::string> launcher_only = {"CUDA_VISIBLE_DEVICES", "KMP_AFFINITY", "KMP_BLOCKTIME",
                                               "ACCELERATE_CONFIG_DS_FIELDS"};
  TempDir t;
  for (const char* dt : {"FSDP", "DEEPSPEED", "MULTI_GPU"}) {
    std::string f =
        t.write(std::string(dt) + ".yaml",
                std::string("distributed_type: ") + dt +
                    "\nnum_processes: 2\nmixed_precision: fp8\nuse_cpu: true\ndebug: true\n"
                    "enable_cpu_affinity: true\ngpu_ids: 1,2\ndowncast_bf16: true\n"
                    "fp8_config: {backend: AO}\n"
                    "fsdp_config: {fsdp_auto_wrap_policy: SIZE_BASED_WRAP, fsdp_backward_prefetch: BACKWARD_PRE,"
                    " fsdp_state_dict_type: FULL_STATE_DICT, fsdp_ignored_modules: 'x.*',"
                    " fsdp_transformer_layer_cls_to_wrap: [A, B]}\n"
                    "deepspeed_config: {zero_stage: 3, gradient_accumulation_steps: 2, gradient_clipping: 0.5,"
                    " offload_optimizer_device: nvme, offload_param_device: cpu, offload_optimizer_nvme_path: /nvme,"
                    " offload_param_nvme_path: /nvme2, zero3_init_flag: true, zero3_save_16bit_model: true,"
                    " deepspeed_config_file: ds.json, deepspeed_moe_layer_cls_names: Moe}\n"
                    "parallelism_config: {parallelism_config_tp_size: 2, parallelism_config_cp_size: 2,"
                    " parallelism_config_sp_size: 2, parallelism_config_sp_seq_length: 128}\n");
    auto env = launch_environment(resolve_launch(f, {}, /*check=*/false));  // contradictory on purpose
    for (const auto& [name, value] : env)
      EXPECT_TRUE(read.count(name) || launcher_only.count(name)) << dt << ": " << name << "=" << value;
    // (The DeepSpeed file would be read, and refused beside the other DeepSpeed settings: DeepSpeedFileReachesTheLibrary
    // and Config.DeepSpeedConfigFile cover it.)
    env.erase("ACCELERATE_DEEPSPEED_CONFIG_FILE");
    Config lib = resolve_accelerator("", env);  // and the library accepts every value
    EXPECT_TRUE(lib.get_bool("cpu"));
    EXPECT_TRUE(lib.get_bool("use_parallelism_config"));
    EXPECT_EQ(lib.get_int("parallelism_config.sp_seq_length"), 128);
    if (std::string(dt) == "FSDP") {
      EXPECT_EQ(lib.get_string_list("fsdp_plugin.transformer_cls_names_to_wrap"), (std::vector<std::string>{"A", "B"}));
    }
    if (std::string(dt) == "DEEPSPEED") {
      EXPECT_EQ(lib.get_string("deepspeed_plugin.offload_optimizer_nvme_path"), "/nvme");
    }
  }
}

TEST(LaunchEnvironment, MegatronVariables) {
  TempDir t;
  std::string f = t.write("m.yaml", "distributed_type: MEGATRON_LM\nnum_processes: 2\nmegatron_lm_config:\n"
                                    "  megatron_lm_tp_degree: 2\n  megatron_lm_sequence_parallelism: true\n");
  auto env = launch_environment(resolve_launch(f, {}));
  EXPECT_EQ(env["ACCELERATE_USE_MEGATRON_LM"], "true");
  EXPECT_EQ(env["MEGATRON_LM_TP_DEGREE"], "2");
  EXPECT_EQ(env["MEGATRON_LM_SEQUENCE_PARALLELISM"], "True");
  EXPECT_EQ(env["MEGATRON_LM_GRADIENT_CLIPPING"], "1.0");
  EXPECT_EQ(env.count("MEGATRON_LM_NUM_MICRO_BATCHES"), 0u);
}

// --- Default file location -------------------------------------------------------------------------------------

TEST(DefaultFile, SearchOrder) {
  TempDir t;
  Env env{{"HOME", t.path + "/home"}};
  std::vector<std::string> searched;
  EXPECT_FALSE(find_default_config_file(env, &searched));
  EXPECT_EQ(searched, (std::vector<std::string>{t.path + "/home/.cache/acc/default_config.yaml",
                                                t.path + "/home/.cache/huggingface/accelerate/default_config.yaml"}));
  std::string hf = t.write("home/.cache/huggingface/accelerate/default_config.yaml", "distributed_type: NO\n");
  EXPECT_EQ(find_default_config_file(env), hf);
  std::string ours = t.write("home/.cache/acc/default_config.yaml", "distributed_type: NO\n");
  EXPECT_EQ(find_default_config_file(env), ours);
  env["HF_HOME"] = t.path + "/hf";
  env["XDG_CACHE_HOME"] = t.path + "/xdg";
  std::string xdg_hf = t.write("hf/accelerate/default_config.yaml", "distributed_type: NO\n");
  EXPECT_EQ(find_default_config_file(env), xdg_hf);  // $XDG_CACHE_HOME/acc does not exist
  std::string xdg_ours = t.write("xdg/acc/default_config.yaml", "distributed_type: NO\n");
  EXPECT_EQ(find_default_config_file(env), xdg_ours);
  env["ACC_CONFIG_FILE"] = "none";
  searched.clear();
  EXPECT_FALSE(find_default_config_file(env, &searched));
  EXPECT_TRUE(searched.empty());
  env["ACC_CONFIG_FILE"] = "~/mine.yaml";
  EXPECT_EQ(find_default_config_file(env), t.path + "/home/mine.yaml");  // returned even if missing
  EXPECT_NE(error_of([&] { resolve_launch(*find_default_config_file(env), {}); }).find("cannot read config file"),
            std::string::npos);
}

TEST(Helpers, ParseBoolAndClosestMatch) {
  for (const char* t : {"y", "YES", "t", "True", "on", "1"}) EXPECT_EQ(parse_bool(t), true) << t;
  for (const char* f : {"n", "No", "f", "FALSE", "off", "0"}) EXPECT_EQ(parse_bool(f), false) << f;
  EXPECT_FALSE(parse_bool("2"));
  EXPECT_FALSE(parse_bool(""));
  EXPECT_EQ(closest_match("num_proceses", {"num_processes", "num_machines"}), "num_processes");
  EXPECT_EQ(closest_match("xyz", {"num_processes", "num_machines"}), "");
}

// --- The whole chain: file < flag < environment < explicit -------------------------------------------------------

// What a libacc process resolves when `acc launch` started it: the launcher resolves defaults < file < flags and
// exports its variables over acc's own environment; the library reads defaults < environment < explicit JSON.
struct Chain {
  Config launch, library;
};
Chain through_launcher(const std::optional<std::string>& file, const std::vector<Flag>& flags, const Env& user_env,
                       const std::string& explicit_json) {
  Chain c{resolve_launch(file, flags), {}};
  Env env = user_env;
  for (auto& [k, v] : launch_environment(c.launch)) env[k] = v;  // the launcher's values replace the user's
  c.library = resolve_accelerator(explicit_json, env);
  return c;
}

TEST(Precedence, Table) {
  TempDir t;
  const std::string file = t.write("f.yaml", "distributed_type: DEEPSPEED\nmixed_precision: fp16\nnum_processes: 2\n"
                                             "deepspeed_config:\n  gradient_accumulation_steps: 8\n");
  const std::string plain = t.write("p.yaml", "distributed_type: MULTI_CPU\nnum_processes: 2\n");
  struct Case {
    const char* what;
    std::optional<std::string> file;
    std::vector<Flag> flags;
    Env env;
    std::string explicit_json;
    const char* key;  // library key
    const char* value;  // its resolved value, as JSON
    Origin origin;  // where the library got it
    const char* where;
  };
  const Flag bf16{"mixed_precision", "bf16", "--mixed_precision"};
  const std::vector<Case> cases = {
      {"nothing: the launcher exports the default",
       std::nullopt,
       {},
       {},
       "",
       "mixed_precision",
       "\"no\"",
       Origin::Env,
       "ACCELERATE_MIXED_PRECISION"},
      {"file", file, {}, {}, "", "mixed_precision", "\"fp16\"", Origin::Env, "ACCELERATE_MIXED_PRECISION"},
      {"flag beats file",
       file,
       {bf16},
       {},
       "",
       "mixed_precision",
       "\"bf16\"",
       Origin::Env,
       "ACCELERATE_MIXED_PRECISION"},
      {"the launcher's export beats acc's own environment (as accelerate launch)",
       file,
       {bf16},
       {{"ACCELERATE_MIXED_PRECISION", "fp8"}},
       "",
       "mixed_precision",
       "\"bf16\"",
       Origin::Env,
       "ACCELERATE_MIXED_PRECISION"},
      {"explicit beats everything",
       file,
       {bf16},
       {{"ACCELERATE_MIXED_PRECISION", "fp8"}},
       R"({"mixed_precision": "no"})",
       "mixed_precision",
       "\"no\"",
       Origin::Explicit,
       "acc_accelerator_create"},
      {"a file value reaches the library through the environment",
       file,
       {},
       {},
       "",
       "gradient_accumulation_steps",
       "8",
       Origin::Env,
       "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"},
      {"flag beats the file's DeepSpeed value",
       file,
       {{"deepspeed_config.gradient_accumulation_steps", "3", "--gradient_accumulation_steps"}},
       {},
       "",
       "gradient_accumulation_steps",
       "3",
       Origin::Env,
       "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"},
      {"explicit beats the exported value (Accelerate lets the environment win)",
       file,
       {},
       {},
       R"({"gradient_accumulation_steps": 2})",
       "gradient_accumulation_steps",
       "2",
       Origin::Explicit,
       "acc_accelerator_create"},
      {"a variable the launcher does not export comes from acc's environment",
       plain,
       {},
       {{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"}},
       "",
       "gradient_accumulation_steps",
       "4",
       Origin::Env,
       "ACCELERATE_GRADIENT_ACCUMULATION_STEPS"},
      {"... and explicit beats it",
       plain,
       {},
       {{"ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4"}},
       R"({"gradient_accumulation_steps": 6})",
       "gradient_accumulation_steps",
       "6",
       Origin::Explicit,
       "acc_accelerator_create"},
      {"a key nothing sets keeps its default", plain, {}, {}, "", "seed", "null", Origin::Default, "default"},
      {"--cpu flag", plain, {{"use_cpu", "true", "--cpu"}}, {}, "", "cpu", "true", Origin::Env, "ACCELERATE_USE_CPU"},
      {"explicit cpu false beats --cpu (Accelerate ORs them)",
       plain,
       {{"use_cpu", "true", "--cpu"}},
       {},
       R"({"cpu": false})",
       "cpu",
       "false",
       Origin::Explicit,
       "acc_accelerator_create"},
  };
  for (const Case& k : cases) {
    Chain c = through_launcher(k.file, k.flags, k.env, k.explicit_json);
    EXPECT_EQ(c.library.get_json(k.key), k.value) << k.what;
    EXPECT_EQ(c.library.provenance(k.key).origin, k.origin) << k.what;
    EXPECT_EQ(c.library.provenance(k.key).where, k.where) << k.what;
  }
  // The launcher side of the same table, with provenance: default < file:line < flag.
  Chain c = through_launcher(file, {bf16}, {}, "");
  EXPECT_EQ(c.launch.provenance("mixed_precision").where, "--mixed_precision");
  EXPECT_EQ(c.launch.provenance("num_processes").where, file + ":3");
  EXPECT_EQ(c.launch.provenance("deepspeed_config.gradient_accumulation_steps").where, file + ":5");
  EXPECT_EQ(c.launch.provenance("machine_rank").where, "default");
  // A scheduler's variable is a source between the file and the flags.
  Config s = resolve_launch(plain, {{"num_machines", "1", "SLURM_NNODES", Origin::Env}});
  EXPECT_EQ(s.provenance("num_machines").origin, Origin::Env);
  EXPECT_EQ(s.provenance("num_machines").where, "SLURM_NNODES");
}

// --- Accelerate's own test configs (tests/test_configs), written again in data/accelerate ----------------------

TEST(AccelerateTestConfigs, EveryVersionReads) {
  const std::string d = kData + "/accelerate/";
  Config v11 = resolve_launch(d + "0_11_0.yaml", {});
  EXPECT_EQ(v11.get_string("distributed_type"), "NO");
  EXPECT_EQ(v11.get_string("mixed_precision"), "no");
  EXPECT_FALSE(v11.is_set("main_process_ip"));
  EXPECT_FALSE(v11.is_set("deepspeed_config"));  // `{}`: nothing set
  Config v12 = resolve_launch(d + "0_12_0.yaml", {});
  EXPECT_FALSE(v12.get_bool("downcast_bf16"));  // 'no'
  Config mpi = resolve_launch(d + "0_28_0_mpi.yaml", {});
  EXPECT_EQ(mpi.get_string("mpirun_config.mpirun_hostfile"), "/home/user/hostfile");
  EXPECT_EQ(mpi.get_int("num_machines"), 4);
  EXPECT_EQ(mpi.get_int("num_processes"), 16);
  EXPECT_TRUE(mpi.get_bool("use_cpu"));
  Config sm = resolve_launch(d + "0_30_0_sagemaker.yaml", {});
  EXPECT_EQ(sm.get_string("compute_environment"), "AMAZON_SAGEMAKER");
  EXPECT_EQ(sm.get_string("distributed_type"), "NO");  // a plain NO, not YAML's false
  EXPECT_EQ(sm.get_string("mixed_precision"), "fp16");
  EXPECT_EQ(sm.get_string("ec2_instance_type"), "MY_TYPE");
  EXPECT_EQ(sm.get_string("iam_role_name"), "MY_ROLE");
  Config fp8 = resolve_launch(d + "0_34_0_fp8.yaml", {});
  EXPECT_EQ(fp8.get_string("fp8_config.backend"), "TE");
  EXPECT_EQ(fp8.get_string("fp8_config.fp8_format"), "E4M3");
  EXPECT_EQ(fp8.get_string("fp8_config.amax_compute_algo"), "max");
  EXPECT_EQ(fp8.get_string_list("fp8_config.override_linear_precision"),
            (std::vector<std::string>{"false", "false", "false"}));
  auto env = launch_environment(fp8);
  EXPECT_EQ(env["ACCELERATE_FP8_BACKEND"], "TE");
  EXPECT_EQ(env["ACCELERATE_FP8_OVERRIDE_WGRAD"], "False");
  Config latest = resolve_launch(d + "latest.yaml", {});
  EXPECT_EQ(latest.get_string("tpu_name"), "test-tpu");
  EXPECT_EQ(latest.get_string("command_file"), "tests/test_samples/test_command_file.sh");
  EXPECT_FALSE(latest.is_set("commands"));
  Config fsdp = resolve_launch(d + "latest_fsdp.yaml", {});
  EXPECT_EQ(fsdp.get_string("fsdp_config.fsdp_state_dict_type"), "SHARDED_STATE_DICT");
  EXPECT_EQ(fsdp.get_string("fsdp_config.fsdp_transformer_layer_cls_to_wrap"), "BertLayer");
  EXPECT_FALSE(fsdp.is_set("fsdp_config.fsdp_ignored_modules"));
  auto fenv = launch_environment(fsdp);
  EXPECT_EQ(fenv["ACCELERATE_USE_FSDP"], "true");
  EXPECT_EQ(fenv["FSDP_SYNC_MODULE_STATES"], "true");
  EXPECT_EQ(fenv.count("FSDP_IGNORED_MODULES"), 0u);
  // validate_launch_cmd.yaml: sections for paradigms the file does not use are read, not acted on.
  Config v = resolve_launch(d + "validate_launch_cmd.yaml", {});
  EXPECT_TRUE(v.get_bool("debug"));
  EXPECT_FALSE(v.get_bool("fsdp_config.fsdp_sync_module_states"));
  EXPECT_EQ(launch_environment(v).count("ACCELERATE_USE_FSDP"), 0u);
  EXPECT_EQ(launch_environment(v)["ACCELERATE_DEBUG_MODE"], "true");
  // invalid_keys.yaml: Accelerate refuses unknown keys, and so do we, naming the first one.
  std::string err = error_of([&] { resolve_launch(d + "invalid_keys.yaml", {}); });
  EXPECT_NE(err.find("invalid_keys.yaml:14: unknown key 'invalid_key'"), std::string::npos) << err;
}

// Accelerate 1.15's fsdp_activation_checkpointing_offload: passed on as FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD, read by
// the accelerator, and refused where FullyShardedDataParallelPlugin refuses it (without activation checkpointing, or
// under FSDP1), naming both keys and their sources.
TEST(Config, ActivationCheckpointingOffload) {
  TempDir t;
  const std::string fsdp2 = "distributed_type: FSDP\nnum_processes: 2\nuse_cpu: true\nfsdp_config:\n  fsdp_version: 2\n"
                            "  fsdp_activation_checkpointing: true\n";
  auto env =
      launch_environment(resolve_launch(t.write("on.yaml", fsdp2 + "  fsdp_activation_checkpointing_offload: true\n"),
                                        {}));
  EXPECT_EQ(env["FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD"], "true");
  EXPECT_EQ(launch_environment(resolve_launch(t.write("off.yaml", fsdp2), {}))["FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD"],
            "false");
  Env from_launch(env.begin(), env.end());
  Config lib = resolve_accelerator("", from_launch);
  EXPECT_TRUE(lib.get_bool("fsdp_plugin.activation_checkpointing_offload"));
  EXPECT_EQ(lib.provenance("fsdp_plugin.activation_checkpointing_offload").where,
            "FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD");
  EXPECT_FALSE(unsupported_setting(lib));
  EXPECT_EQ(
      error_of([] {
        sharding(resolve_accelerator(
            R"({"fsdp_plugin": {"fsdp_version": 2, "activation_checkpointing_offload": true}})", {}));
      }),
      "contradictory settings: 'fsdp_plugin.activation_checkpointing_offload' (true, acc_accelerator_create) "
      "offloads what activation checkpointing keeps, but 'fsdp_plugin.activation_checkpointing' (false, default)");
  const std::string fsdp1 = error_of([] {
    sharding(resolve_accelerator("", {{"ACCELERATE_USE_FSDP", "true"},
                                      {"FSDP_ACTIVATION_CHECKPOINTING", "true"},
                                      {"FSDP_ACTIVATION_CHECKPOINTING_OFFLOAD", "true"}}));
  });
  EXPECT_NE(fsdp1.find("needs FSDP2, but 'fsdp_plugin.fsdp_version' (1, default)"), std::string::npos) << fsdp1;
}

// `acc config update` and the questionnaire write files that read back to the same values.
TEST(AccelerateTestConfigs, WrittenFilesReadBackTheSame) {
  TempDir t;
  for (const char* name : {"0_11_0.yaml", "0_12_0.yaml", "0_28_0_mpi.yaml", "0_30_0_sagemaker.yaml", "0_34_0_fp8.yaml",
                           "latest.yaml", "latest_fsdp.yaml", "validate_launch_cmd.yaml"}) {
    Config a = resolve_launch(kData + "/accelerate/" + name, {}, false);
    for (bool json : {false, true}) {
      std::string text = format_launch_file(a, json);
      std::string f = t.write(std::string(name) + (json ? ".json" : ".yaml"), text);
      Config b = resolve_launch(f, {}, false);
      for (const auto& k : a.keys()) {  // (tpu_env: null is written as [], as accelerate config writes it)
        if (k == "tpu_env") continue;
        EXPECT_EQ(a.get_json(k), b.get_json(k)) << name << (json ? " as JSON: " : " as YAML: ") << k;
      }
    }
  }
  // Accelerate's spellings: sorted keys, 'NO' and 'no' quoted, empty sections left out, tpu_env: [].
  Config a = resolve_launch(kData + "/accelerate/0_11_0.yaml", {});
  std::string text = format_launch_file(a, false);
  EXPECT_EQ(text.rfind("compute_environment: LOCAL_MACHINE\n", 0), 0u) << text;
  EXPECT_NE(text.find("distributed_type: 'NO'\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mixed_precision: 'no'\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tpu_env: []\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("deepspeed_config"), std::string::npos) << text;
  EXPECT_EQ(text.find("main_process_ip"), std::string::npos) << text;
}

// --- Contradictions, caught before any process starts ---------------------------------------------------------

TEST(Contradictions, FromFlags) {
  EXPECT_NE(error_of([] {
              resolve_launch(std::nullopt, {{"distributed_type", "MULTI_GPU", "--multi_gpu"}});
            }).find("'distributed_type' (\"MULTI_GPU\", --multi_gpu) needs at least 2 processes"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              resolve_launch(std::nullopt, {{"use_cpu", "true", "--cpu"}, {"gpu_ids", "1", "--gpu_ids"}});
            }).find("'use_cpu' (true, --cpu) trains on the CPU, but 'gpu_ids' (\"1\", --gpu_ids) selects GPUs"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              resolve_launch(std::nullopt,
                             {{"num_processes", "4", "--num_processes"}, {"num_machines", "2", "--num_machines"}});
            }).find("main_process_ip"),
            std::string::npos);
  // gpu_ids "all", or enough of them, is fine; a single process on a GPU machine is fine.
  EXPECT_EQ(error_of([] {
              resolve_launch(std::nullopt, {{"distributed_type", "MULTI_GPU", "--multi_gpu"},
                                            {"num_processes", "2", "--num_processes"},
                                            {"gpu_ids", "0,1", "x"}});
            }),
            "<no error>");
  // Without checking, the same values resolve (acc config update keeps what a file says).
  EXPECT_EQ(error_of([] {
              resolve_launch(std::nullopt, {{"use_cpu", "true", "--cpu"}, {"gpu_ids", "1", "x"}}, false);
            }),
            "<no error>");
}

// --- Capabilities libacc does not have yet: accepted, validated, refused when used ---------------------------

TEST(Unsupported, NamedWithTheirSource) {
  EXPECT_FALSE(unsupported_setting(resolve_accelerator("", {})));
  EXPECT_FALSE(unsupported_setting(resolve_accelerator(R"({"init_process_group_kwargs": {"backend": "gloo"}})", {})));
  EXPECT_FALSE(unsupported_setting(
      resolve_accelerator(R"({"log_with": ["tensorboard", "jsonl", "csv", "mlflow", "wandb"]})", {})));
  EXPECT_FALSE(unsupported_setting(resolve_accelerator(R"({"log_with": "all"})", {})));
  // Sharded data parallelism: FSDP and DeepSpeed ZeRO configs as Accelerate users write them.
  EXPECT_FALSE(unsupported_setting(resolve_accelerator(R"({"fsdp_plugin": {"fsdp_version": 2}})", {})));
  EXPECT_FALSE(unsupported_setting(
      resolve_accelerator(R"({"use_fsdp": true, "fsdp_plugin": {"activation_checkpointing": true}})", {})));
  EXPECT_FALSE(unsupported_setting(resolve_accelerator(R"({"ddp_kwargs": {"comm_hook": "fp16"}})", {})));
  EXPECT_FALSE(unsupported_setting(resolve_accelerator(R"({"ddp_kwargs": {"comm_hook": "bf16"}})", {})));
  EXPECT_FALSE(unsupported_setting(resolve_accelerator(R"({"ddp_kwargs": {"comm_hook": "power_sgd"}})", {})));
  EXPECT_FALSE(unsupported_setting(
      resolve_accelerator(R"({"ddp_kwargs": {"comm_hook": "batched_power_sgd", "comm_wrapper": "bf16"}})", {})));
  EXPECT_FALSE(unsupported_setting(resolve_accelerator("", {{"ACCELERATE_USE_DEEPSPEED", "true"}})));
  struct Case {
    std::string json;
    Env env;
    std::string want;
  };
  const std::vector<Case> cases = {
      {R"({"use_fsdp": true, "fsdp_plugin": {"ignored_modules": "lm_head"}})",
       {},
       "'fsdp_plugin.ignored_modules' = \"lm_head\" (from explicit acc_accelerator_create): FSDP ignored modules"},
      {"",
       {{"ACCELERATE_USE_DEEPSPEED", "true"}, {"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "nvme"}},
       "'deepspeed_plugin.offload_optimizer_device' = \"nvme\" (from env "
       "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE): ZeRO offload to NVMe"},
      {"", {{"ACCELERATE_USE_MEGATRON_LM", "true"}}, "Megatron-LM is not supported yet"},
      {"", {{"ACCELERATE_DYNAMO_BACKEND", "inductor"}}, "'dynamo_plugin.backend' = \"INDUCTOR\" (from env"},
      {R"({"log_with": ["tensorboard", "comet_ml"]})",
       {},
       "the tracker \"comet_ml\" is not supported yet by libacc; use tensorboard"},
      {R"({"init_process_group_kwargs": {"backend": "mpi"}})", {}, "the c10d backend \"mpi\""},
      {R"({"init_process_group_kwargs": {"init_method": "tcp://h:1"}})", {}, "a rendezvous other than env://"},
  };
  for (const auto& k : cases) {
    auto why = unsupported_setting(resolve_accelerator(k.json, k.env));
    ASSERT_TRUE(why) << k.json;
    EXPECT_NE(why->find(k.want), std::string::npos) << *why;
    EXPECT_NE(why->find("not supported yet"), std::string::npos) << *why;
  }
}

// --- The run record written next to a run's outputs -----------------------------------------------------------

TEST(RunRecord, ReproducesTheConfig) {
  TempDir t;
  Env env{{"ACCELERATE_MIXED_PRECISION", "bf16"}, {"WORLD_SIZE", "1"}, {"HF_TOKEN", "secret"}, {"MY_API_KEY", "k"}};
  Config c = resolve_accelerator(R"({"seed": 7, "project_dir": ")" + t.path + R"(/run/a"})", env);
  std::string path =
      write_run_record(c, c.get_string("project_config.project_dir"), R"({"version": "9.9.9", "torch": "2.x"})", env);
  EXPECT_EQ(path, t.path + "/run/a/acc_run_config.json");
  std::string text = slurp(path);
  EXPECT_NE(text.find("\"format\": \"acc_run_config/1\""), std::string::npos);
  EXPECT_NE(text.find("\"version\": \"9.9.9\""), std::string::npos);
  EXPECT_NE(text.find("\"ACCELERATE_MIXED_PRECISION\": \"bf16\""), std::string::npos);
  EXPECT_NE(text.find("\"where\": \"ACCELERATE_MIXED_PRECISION\""), std::string::npos);
  EXPECT_EQ(text.find("secret"), std::string::npos);  // no secrets in files
  EXPECT_EQ(text.find("MY_API_KEY"), std::string::npos);
  // Given back as explicit JSON, the record reproduces every value, without the environment.
  Config again = resolve_accelerator(text, {});
  EXPECT_EQ(again.to_json(false), c.to_json(false));
  // No temporary file is left; a directory that cannot be made is an error.
  EXPECT_EQ(std::system(("test $(ls -A '" + t.path + "/run/a' | wc -l) -eq 1").c_str()), 0);
  t.write("file", "x");
  EXPECT_NE(error_of([&] { write_run_record(c, t.path + "/file/sub", "{}", {}); }), "<no error>");
}

// --- JSON Schema -------------------------------------------------------------------------------------------------

TEST(JsonSchema, EveryKeyIsDescribed) {
  for (SchemaKind kind : {SchemaKind::Launch, SchemaKind::Accelerator}) {
    std::string s = json_schema(kind);
    EXPECT_NE(s.find("\"$schema\": \"https://json-schema.org/draft/2020-12/schema\""), std::string::npos);
    EXPECT_NE(s.find("\"additionalProperties\": false"), std::string::npos);
    for (const auto& k : schema_keys(kind)) {
      std::string name = k.path.substr(k.path.rfind('.') == std::string::npos ? 0 : k.path.rfind('.') + 1);
      EXPECT_NE(s.find("\"" + name + "\": {"), std::string::npos) << k.path;
    }
    // The schema is JSON the library's own reader accepts (as an explicit config it is refused by key, not syntax).
    std::string err = error_of([&] { resolve_accelerator(s, {}); });
    EXPECT_EQ(err.find("malformed JSON"), std::string::npos) << err;
  }
}

// --- Built-in model specs ----------------------------------------------------------------------------------------

int64_t parameter_count(const ParameterShapes& shapes) {
  int64_t n = 0;
  for (const auto& [name, shape] : shapes) {
    int64_t k = 1;
    for (int64_t d : shape) k *= d;
    n += k;
  }
  return n;
}

TEST(BuiltinModels, ParsesWithDefaults) {
  BuiltinSpec m = parse_builtin_spec(R"({"type": "mlp", "sizes": [3, 4, 2]})");
  EXPECT_EQ(m.type, "mlp");
  ASSERT_TRUE(m.mlp);
  EXPECT_FALSE(m.gpt);
  EXPECT_EQ(m.mlp->sizes, (std::vector<int64_t>{3, 4, 2}));
  EXPECT_EQ(m.mlp->activation, "relu");
  EXPECT_EQ(m.mlp->loss, "mse");
  m = parse_builtin_spec(R"({"type": "mlp", "sizes": [3, 2.0], "activation": "tanh", "loss": null})");
  EXPECT_EQ(m.mlp->sizes, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(m.mlp->activation, "tanh");
  EXPECT_EQ(m.mlp->loss, "mse");  // null: not given

  BuiltinSpec g = parse_builtin_spec(
      R"({"type": "gpt", "vocab_size": 50257, "block_size": 1024, "n_layer": 12, "n_head": 12, "n_embd": 768})");
  EXPECT_EQ(g.type, "gpt");
  ASSERT_TRUE(g.gpt);
  EXPECT_FALSE(g.mlp);
  EXPECT_EQ(g.gpt->vocab_size, 50257);
  EXPECT_EQ(g.gpt->block_size, 1024);
  EXPECT_EQ(g.gpt->n_layer, 12);
  EXPECT_EQ(g.gpt->n_head, 12);
  EXPECT_EQ(g.gpt->n_embd, 768);
  EXPECT_EQ(g.gpt->dropout, 0.0);
  EXPECT_TRUE(g.gpt->bias);
  g = parse_builtin_spec(R"({"type": "gpt", "vocab_size": 8, "block_size": 4, "n_layer": 1, "n_head": 2,
                             "n_embd": 4, "dropout": 0.1, "bias": false})");
  EXPECT_EQ(g.gpt->dropout, 0.1);
  EXPECT_FALSE(g.gpt->bias);
}

TEST(BuiltinModels, DeviceIsCpuOrMeta) {
  EXPECT_EQ(acc::config::parse_builtin_spec(R"({"type": "mlp", "sizes": [2, 1]})").device, "cpu");
  EXPECT_EQ(acc::config::parse_builtin_spec(R"({"type": "mlp", "sizes": [2, 1], "device": "meta"})").device, "meta");
  EXPECT_THROW(acc::config::parse_builtin_spec(R"({"type": "mlp", "sizes": [2, 1], "device": "cuda"})"),
               acc::config::Error);
}

TEST(BuiltinModels, ErrorsNameTheKey) {
  const std::string gpt = R"("type": "gpt", "vocab_size": 8, "block_size": 4, "n_layer": 1)";
  auto err = [](const std::string& json) { return error_of([&] { parse_builtin_spec(json); }); };
  EXPECT_EQ(err(""), "model spec: 'type' is required: \"mlp\" or \"gpt\"");
  EXPECT_EQ(err(R"({"type": "cnn"})"), "model spec: 'type' must be \"mlp\" or \"gpt\"; got \"cnn\"");
  EXPECT_EQ(err("[1]"), "model spec: expected a JSON object; got [1]");
  EXPECT_EQ(err(R"({"type": "mlp", "sizes": [2, 1],})"),
            "model spec: malformed JSON at line 1, column 33: trailing comma before '}'");
  EXPECT_EQ(err(R"({"type": "mlp", "sizes": [2 1]})"),
            "model spec: malformed JSON at line 1, column 29: expected ',' or ']' in array, got '1'");
  EXPECT_EQ(err(R"({"type": "mlp", "size": [2, 1]})"),
            "mlp spec: unknown key 'size' (did you mean 'sizes'?); accepted: type, sizes, activation, loss, device");
  EXPECT_EQ(err(R"({"type": "mlp"})"), "mlp spec: 'sizes' is required: a list [in, hidden..., out] of integers >= 1");
  EXPECT_EQ(
      err(R"({"type": "mlp", "sizes": [2]})"),
      "mlp spec: 'sizes' must be a list [in, hidden..., out] of at least two integers >= 1 (at most 65536 of them, "
      "each at most 2147483648); got [2]");
  EXPECT_EQ(
      err(R"({"type": "mlp", "sizes": [2, 0]})"),
      "mlp spec: 'sizes' must be a list [in, hidden..., out] of at least two integers >= 1 (at most 65536 of them, "
      "each at most 2147483648); got [2,0]");
  EXPECT_EQ(err(R"({"type": "mlp", "sizes": [2, 1], "activation": "sigmoid"})"),
            "mlp spec: 'activation' must be one of \"relu\", \"gelu\", \"tanh\"; got \"sigmoid\"");
  EXPECT_EQ(err(R"({"type": "mlp", "sizes": [2, 1], "loss": 1})"),
            "mlp spec: 'loss' must be one of \"mse\", \"cross_entropy\", \"none\"; got 1");
  EXPECT_EQ(err("{" + gpt + R"(, "n_head": 4, "n_embd": 30})"),
            "gpt spec: 'n_embd' (30) must be a multiple of 'n_head' (4)");
  EXPECT_EQ(err("{" + gpt + R"(, "n_head": 4})"), "gpt spec: 'n_embd' is required (an integer >= 1)");
  EXPECT_EQ(err("{" + gpt + R"(, "n_head": 0, "n_embd": 8})"), "gpt spec: 'n_head' must be an integer >= 1; got 0");
  EXPECT_EQ(err("{" + gpt + R"(, "n_head": 2, "n_embd": 8.5})"), "gpt spec: 'n_embd' must be an integer >= 1; got 8.5");
  EXPECT_EQ(err("{" + gpt + R"(, "n_head": 2, "n_embd": 8, "dropout": 1})"),
            "gpt spec: 'dropout' must be a number in [0, 1); got 1");
  EXPECT_EQ(err("{" + gpt + R"(, "n_head": 2, "n_embd": 8, "bias": "no"})"),
            "gpt spec: 'bias' must be true or false; got \"no\"");
  EXPECT_EQ(err("{" + gpt + R"(, "n_head": 2, "n_embd": 8, "sizes": [1, 2]})"),
            "gpt spec: unknown key 'sizes'; accepted: type, vocab_size, block_size, n_layer, n_head, n_embd, dropout, "
            "bias, device");
}

TEST(BuiltinModels, MlpShapes) {
  ParameterShapes s = builtin_parameter_shapes(parse_builtin_spec(R"({"type": "mlp", "sizes": [3, 4, 2]})"));
  ParameterShapes want = {
      {"layers.0.weight", {4, 3}}, {"layers.0.bias", {4}}, {"layers.1.weight", {2, 4}}, {"layers.1.bias", {2}}};
  EXPECT_EQ(s, want);
  EXPECT_EQ(parameter_count(s), 26);
}

TEST(BuiltinModels, GptShapesAreHuggingFaceGpt2s) {
  ParameterShapes s = builtin_parameter_shapes(parse_builtin_spec(
      R"({"type": "gpt", "vocab_size": 11, "block_size": 5, "n_layer": 2, "n_head": 2, "n_embd": 4})"));
  ASSERT_EQ(s.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(s[0], (ParameterShapes::value_type{"transformer.wte.weight", {11, 4}}));
  EXPECT_EQ(s[1], (ParameterShapes::value_type{"transformer.wpe.weight", {5, 4}}));
  ParameterShapes layer1(s.begin() + 14, s.begin() + 26);
  ParameterShapes want = {{"transformer.h.1.ln_1.weight", {4}},
                          {"transformer.h.1.ln_1.bias", {4}},
                          {"transformer.h.1.attn.c_attn.weight", {4, 12}},
                          {"transformer.h.1.attn.c_attn.bias", {12}},
                          {"transformer.h.1.attn.c_proj.weight", {4, 4}},
                          {"transformer.h.1.attn.c_proj.bias", {4}},
                          {"transformer.h.1.ln_2.weight", {4}},
                          {"transformer.h.1.ln_2.bias", {4}},
                          {"transformer.h.1.mlp.c_fc.weight", {4, 16}},
                          {"transformer.h.1.mlp.c_fc.bias", {16}},
                          {"transformer.h.1.mlp.c_proj.weight", {16, 4}},
                          {"transformer.h.1.mlp.c_proj.bias", {4}}};
  EXPECT_EQ(layer1, want);
  EXPECT_EQ(s[2].first, "transformer.h.0.ln_1.weight");
  EXPECT_EQ(s[26], (ParameterShapes::value_type{"transformer.ln_f.weight", {4}}));
  EXPECT_EQ(s[27], (ParameterShapes::value_type{"transformer.ln_f.bias", {4}}));
  for (const auto& [name, shape] : s) EXPECT_NE(name, "lm_head.weight");  // tied to wte

  // GPT-2 small without the tied head.
  s = builtin_parameter_shapes(parse_builtin_spec(
      R"({"type": "gpt", "vocab_size": 50257, "block_size": 1024, "n_layer": 12, "n_head": 12, "n_embd": 768})"));
  EXPECT_EQ(s.size(), 148u);
  EXPECT_EQ(parameter_count(s), 124439808);

  // Without bias no .bias entries: 2 embeddings, per layer 2 norms and 4 weights, ln_f.
  s = builtin_parameter_shapes(parse_builtin_spec(
      R"({"type": "gpt", "vocab_size": 11, "block_size": 5, "n_layer": 2, "n_head": 2, "n_embd": 4, "bias": false})"));
  EXPECT_EQ(s.size(), 2u + 2 * 6 + 1);
  for (const auto& [name, shape] : s) EXPECT_EQ(name.find(".bias"), std::string::npos) << name;
  EXPECT_EQ(parameter_count(s), 11 * 4 + 5 * 4 + 2 * (4 + 4 * 12 + 4 * 4 + 4 + 4 * 16 + 16 * 4) + 4);
}

// --- safetensors headers -----------------------------------------------------------------------------------------

TEST(SafetensorsHeader, ReadsEntriesInOrder) {
  SafetensorsHeader h = parse_safetensors_header(
      R"({"__metadata__": {"format": "pt"}, "b": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
          "a": {"dtype": "I64", "shape": [], "data_offsets": [12, 20]}})",
      "m.safetensors", 20);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "b");
  EXPECT_EQ(h.tensors[0].dtype, "BF16");
  EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.tensors[0].numel(), 6);
  EXPECT_EQ(h.tensors[1].name, "a");
  EXPECT_EQ(h.tensors[1].numel(), 1);
  EXPECT_EQ(h.tensors[1].begin, 12u);
  EXPECT_EQ(h.tensors[1].end, 20u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  bool floating = true;
  EXPECT_EQ(safetensors_dtype_size("I64", &floating), 8);
  EXPECT_FALSE(floating);
  EXPECT_EQ(safetensors_dtype_size("F4"), std::nullopt);
}

TEST(SafetensorsHeader, ErrorsNameTheFileAndTheTensor) {
  auto err = [](const std::string& json) {
    return error_of([&] { parse_safetensors_header(json, "m.safetensors", 16); });
  };
  EXPECT_EQ(err(R"({"w": {"dtype": "F32", "shape": [4]})"),
            "m.safetensors: malformed header: malformed JSON at line 1, column 37: expected ',' or '}' in object, got "
            "end of input");
  EXPECT_EQ(err("[]"), "m.safetensors: malformed header: not a JSON object");
  EXPECT_EQ(err(R"({"w": {"dtype": "F32", "shape": [4]}})"),
            "m.safetensors: tensor \"w\" lacks dtype, shape or data_offsets");
  EXPECT_EQ(err(R"({"w": {"dtype": "F33", "shape": [4], "data_offsets": [0, 16]}})"),
            "m.safetensors: tensor \"w\" has an unknown dtype \"F33\"");
  EXPECT_EQ(err(R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})"),
            "m.safetensors: tensor \"w\" has a bad shape [-4]");
  EXPECT_EQ(err(R"({"w": {"dtype": "F32", "shape": [5], "data_offsets": [0, 20]}})"),
            "m.safetensors: tensor \"w\" has data_offsets [0,20] that do not match its dtype and shape (20 bytes) "
            "within the 16 bytes of data");
  EXPECT_EQ(err(R"({"__metadata__": {"n": 1}})"), "m.safetensors: __metadata__ must map strings to strings");
}

TEST(SafetensorsHeader, ReadsAFile) {
  char dir[] = "/tmp/acc_st_XXXXXX";
  ASSERT_TRUE(mkdtemp(dir));
  const std::string path = std::string(dir) + "/m.safetensors";
  const std::string json = R"({"w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(json.size());
  bytes += json + std::string(4, '\0');
  std::ofstream(path, std::ios::binary) << bytes;
  SafetensorsHeader h = read_safetensors_header(path);
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(h.data_start, 8 + json.size());
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 1);  // data cut short
  EXPECT_NE(error_of([&] { read_safetensors_header(path); }).find("within the 3 bytes of data"), std::string::npos);
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_EQ(error_of([&] { read_safetensors_header(path); }), path + ": not a safetensors file (too short)");
  std::remove(path.c_str());
  rmdir(dir);
}

// --- Files -------------------------------------------------------------------------------------------------------

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Files, MakeDirectories) {
  char tmp[] = "/tmp/acc_files_XXXXXX";
  ASSERT_TRUE(mkdtemp(tmp));
  const std::string root = tmp;
  make_directories(root + "/a/b/c");
  make_directories(root + "/a/b/c");  // exists: fine
  make_directories(root + "/a/b/");
  struct stat st{};
  ASSERT_EQ(stat((root + "/a/b/c").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  std::ofstream(root + "/file") << "x";
  for (const std::string& bad : {root + "/file", root + "/file/sub"}) {
    try {
      make_directories(bad);
      ADD_FAILURE() << bad;
    } catch (const std::ios_base::failure& e) {
      EXPECT_EQ(std::string(e.what()), "cannot create directory '" + bad + "': Not a directory");
      EXPECT_EQ(e.code().value(), ENOTDIR);
    }
  }
  std::filesystem::remove_all(root);
}

TEST(Files, WriteFileAtomic) {
  char tmp[] = "/tmp/acc_files_XXXXXX";
  ASSERT_TRUE(mkdtemp(tmp));
  const std::string root = tmp, path = root + "/out.json";
  write_file_atomic(path, "first");
  EXPECT_EQ(slurp(path), "first");
  write_file_atomic(path, std::vector<std::string_view>{"sec", "", "ond"});  // replaces it
  EXPECT_EQ(slurp(path), "second");
  EXPECT_EQ(list_dir(root), std::vector<std::string>{"out.json"});  // no temporary file left
  struct stat st{};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  mode_t mask = umask(0);
  umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0644u & ~mask);
  const std::string missing = root + "/no/such/dir/x.json";
  try {
    write_file_atomic(missing, "x");
    ADD_FAILURE() << "no error";
  } catch (const std::ios_base::failure& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write '" + missing + "': No such file or directory");
    EXPECT_EQ(e.code().value(), ENOENT);
  }
  // A directory in the way of the rename: the old entry stays, the temporary file is removed.
  make_directories(root + "/taken");
  EXPECT_THROW(write_file_atomic(root + "/taken", "x"), std::ios_base::failure);
  EXPECT_EQ(list_dir(root), (std::vector<std::string>{"out.json", "taken"}));
  // A relative path writes into the current directory.
  char cwd[4096];
  ASSERT_TRUE(getcwd(cwd, sizeof cwd));
  ASSERT_EQ(chdir(root.c_str()), 0);
  write_file_atomic("rel.txt", "r");
  ASSERT_EQ(chdir(cwd), 0);
  EXPECT_EQ(slurp(root + "/rel.txt"), "r");
  std::filesystem::remove_all(root);
}

// Files of 64 MiB and more are written around the page cache (O_DIRECT) through an aligned buffer, with the
// unaligned tail buffered; where the filesystem refuses O_DIRECT (tmpfs) everything is buffered. Both give the
// same bytes, from pieces of any size and alignment.
TEST(Files, LargeFilesAreWrittenWholeWithOrWithoutDirectIo) {
  std::string bytes(size_t{70} << 20 | 12345, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::vector<std::string_view> pieces;
  for (size_t at = 0, n = 1; at < bytes.size(); at += n, n = n * 7 % 9000001 + 3)
    pieces.push_back(std::string_view(bytes).substr(at, n));
  for (std::string parent : {std::string("/tmp"), std::string("/dev/shm")}) {
    if (!std::filesystem::is_directory(parent)) continue;
    std::string tmp = parent + "/acc_files_XXXXXX";
    ASSERT_TRUE(mkdtemp(tmp.data())) << parent;
    const std::string path = tmp + "/big.bin";
    write_file_atomic(path, pieces);
    EXPECT_TRUE(slurp(path) == bytes) << parent;
    EXPECT_EQ(list_dir(tmp), std::vector<std::string>{"big.bin"});
    std::filesystem::remove_all(tmp);
  }
}

TEST(Files, RunRecordDirectoryIsCreated) {
  char tmp[] = "/tmp/acc_files_XXXXXX";
  ASSERT_TRUE(mkdtemp(tmp));
  const std::string dir = std::string(tmp) + "/project/run1";
  std::string path = write_run_record(resolve_accelerator("", {}), dir, "{}", {});
  EXPECT_EQ(path, dir + "/" + kRunRecordName);
  EXPECT_EQ(list_dir(dir), std::vector<std::string>{kRunRecordName});
  std::ofstream(std::string(tmp) + "/file") << "x";
  std::string err =
      error_of([&] { write_run_record(resolve_accelerator("", {}), std::string(tmp) + "/file", "{}", {}); });
  EXPECT_EQ(err, "cannot create directory '" + std::string(tmp) + "/file': Not a directory");
  std::filesystem::remove_all(tmp);
}

}  // namespace

TEST(Config, ShardingFromFsdpAndDeepSpeedSettings) {
  EXPECT_EQ(sharding(resolve_accelerator("", {})).stage, 0);
  Sharding full = sharding(resolve_accelerator(R"({"fsdp_plugin": {}})", {}));
  EXPECT_EQ(full.stage, 3);
  EXPECT_TRUE(full.reshard_after_forward);
  EXPECT_EQ(full.label, "FSDP FULL_SHARD");
  EXPECT_EQ(full.wrap_policy, "NO_WRAP");
  Sharding grad_op = sharding(resolve_accelerator(R"({"fsdp_plugin": {"sharding_strategy": 2}})", {}));
  EXPECT_EQ(grad_op.stage, 3);
  EXPECT_FALSE(grad_op.reshard_after_forward);
  EXPECT_EQ(grad_op.label, "FSDP SHARD_GRAD_OP");
  EXPECT_EQ(sharding(resolve_accelerator(R"({"fsdp_plugin": {"sharding_strategy": "NO_SHARD"}})", {})).stage, 0);
  Sharding hybrid =
      sharding(resolve_accelerator(R"({"fsdp_plugin": {"sharding_strategy": "HYBRID_SHARD_ZERO2"}})", {}));
  EXPECT_TRUE(hybrid.hybrid);
  EXPECT_EQ(hybrid.stage, 3);
  EXPECT_FALSE(hybrid.reshard_after_forward);
  EXPECT_FALSE(full.hybrid);
  EXPECT_FALSE(full.offload);
  EXPECT_TRUE(sharding(resolve_accelerator("", {{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_OFFLOAD_PARAMS", "true"}}))
                  .offload);
  EXPECT_TRUE(
      sharding(resolve_accelerator(R"({"deepspeed_plugin": {"zero_stage": 2, "offload_optimizer_device": "cpu"}})", {}))
          .offload);
  EXPECT_FALSE(unsupported_setting(resolve_accelerator("", {{"ACCELERATE_USE_FSDP", "true"},
                                                            {"FSDP_OFFLOAD_PARAMS", "true"}})));
  // Mixed precision: Accelerate's policy from mixed_precision, or the plugin's own.
  Sharding bf16 = sharding(resolve_accelerator(R"({"mixed_precision": "bf16", "fsdp_plugin": {}})", {}));
  EXPECT_EQ(bf16.param_dtype, "bfloat16");
  EXPECT_EQ(bf16.reduce_dtype, "bfloat16");
  Sharding policy = sharding(resolve_accelerator(
      R"({"fsdp_plugin": {"mixed_precision_policy": {"param_dtype": "torch.float16", "reduce_dtype": "fp32"}}})", {}));
  EXPECT_EQ(policy.param_dtype, "float16");
  EXPECT_EQ(policy.reduce_dtype, "float32");
  EXPECT_EQ(sharding(resolve_accelerator(R"({"fsdp_plugin": {"mixed_precision_policy": "bf16"}})", {})).reduce_dtype,
            "bfloat16");
  EXPECT_EQ(sharding(resolve_accelerator(R"({"mixed_precision": "bf16"})", {})).param_dtype, "");  // DDP: autocast only
  EXPECT_NE(error_of([] {
              sharding(resolve_accelerator(R"({"fsdp_plugin": {"mixed_precision_policy": "int8"}})", {}));
            }).find("'fsdp_plugin.mixed_precision_policy': 'int8' is not a dtype"),
            std::string::npos);
  // FSDP2 takes a bool; the environment as accelerate launch exports it (FSDP_SHARDING_STRATEGY too, which FSDP2 does
  // not read).
  Sharding v2 = sharding(resolve_accelerator("", {{"ACCELERATE_USE_FSDP", "true"},
                                                  {"FSDP_VERSION", "2"},
                                                  {"FSDP_SHARDING_STRATEGY", "FULL_SHARD"},
                                                  {"FSDP_FORWARD_PREFETCH", "false"},
                                                  {"FSDP_RESHARD_AFTER_FORWARD", "false"},
                                                  {"FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP"},
                                                  {"FSDP_TRANSFORMER_CLS_TO_WRAP", "LlamaDecoderLayer,GPT2Block"}}));
  EXPECT_EQ(v2.stage, 3);
  EXPECT_FALSE(v2.reshard_after_forward);
  EXPECT_EQ(v2.wrap_policy, "TRANSFORMER_BASED_WRAP");
  EXPECT_TRUE(v2.wrap_classes_set);
  EXPECT_EQ(v2.wrap_classes, (std::vector<std::string>{"LlamaDecoderLayer", "GPT2Block"}));
  // FullyShardedDataParallelPlugin's FSDP2 refusals: a strategy for reshard_after_forward, sharding_strategy alone.
  auto refusal = [](const char* json) { return error_of([&] { sharding(resolve_accelerator(json, {})); }); };
  EXPECT_NE(refusal(R"({"fsdp_plugin": {"fsdp_version": 2, "reshard_after_forward": "SHARD_GRAD_OP"}})")
                .find("'fsdp_plugin.reshard_after_forward' (\"SHARD_GRAD_OP\", acc_accelerator_create) must be a bool "
                      "with FSDP2"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"fsdp_plugin": {"fsdp_version": 2, "sharding_strategy": "SHARD_GRAD_OP"}})")
                .find("is FSDP1's; FSDP2 takes 'fsdp_plugin.reshard_after_forward', a bool"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"fsdp_plugin": {"fsdp_version": 2, "forward_prefetch": false}})")
                .find("'fsdp_plugin.forward_prefetch' (false, acc_accelerator_create) is FSDP1's"),
            std::string::npos);
  EXPECT_FALSE(sharding(resolve_accelerator(R"({"fsdp_plugin": {"fsdp_version": 2, "sharding_strategy": "FULL_SHARD",
                                                                  "reshard_after_forward": false}})",
                                            {}))
                   .reshard_after_forward);
  // Accelerate's ParallelismConfig under FSDP2: dp_replicate_size groups of dp_shard_size ranks (HSDP); dp_shard_size 1
  // leaves FSDP nothing to shard across, FSDP1 has no parallelism_config; tensor parallelism is not done here.
  Sharding hsdp = sharding(resolve_accelerator("", {{"ACCELERATE_USE_FSDP", "true"},
                                                    {"FSDP_VERSION", "2"},
                                                    {"ACCELERATE_USE_PARALLELISM_CONFIG", "true"},
                                                    {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "2"},
                                                    {"PARALLELISM_CONFIG_DP_SHARD_SIZE", "3"}}));
  EXPECT_TRUE(hsdp.hybrid);
  EXPECT_TRUE(hsdp.reshard_after_forward);
  EXPECT_EQ(hsdp.dp_shard_size, 3);
  EXPECT_EQ(hsdp.dp_replicate_size, 2);
  EXPECT_EQ(hsdp.label, "FSDP2 HSDP");
  Sharding fsdp2 = sharding(
      resolve_accelerator(R"({"fsdp_plugin": {"fsdp_version": 2}, "parallelism_config": {"dp_shard_size": 4}})", {}));
  EXPECT_FALSE(fsdp2.hybrid);
  EXPECT_EQ(fsdp2.dp_shard_size, 4);
  EXPECT_NE(refusal(R"({"fsdp_plugin": {"fsdp_version": 2}, "parallelism_config": {"dp_replicate_size": 4}})")
                .find("'parallelism_config.dp_shard_size' (1, default): FSDP is enabled but the parallelism config has "
                      "no dimension"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"fsdp_plugin": {}, "parallelism_config": {"dp_shard_size": 2}})")
                .find("needs FSDP2; got 'fsdp_plugin.fsdp_version' (1, default)"),
            std::string::npos);
  EXPECT_FALSE(unsupported_setting(
      resolve_accelerator(R"({"fsdp_plugin": {"fsdp_version": 2}, "parallelism_config": {"dp_shard_size": 2}})", {})));
  // Tensor parallelism makes a process mesh (parallel_dims); the accelerator refuses it until the model transform runs.
  EXPECT_FALSE(unsupported_setting(resolve_accelerator(
      R"({"fsdp_plugin": {"fsdp_version": 2}, "parallelism_config": {"dp_shard_size": 2, "tp_size": 2}})", {})));
  // Prefetch: FSDP2 and DeepSpeed ZeRO-3 always, both ways; FSDP1 as its keys say (none by default, NO_PREFETCH none).
  EXPECT_TRUE(v2.forward_prefetch);
  EXPECT_EQ(v2.backward_prefetch, "BACKWARD_PRE");
  Sharding zero3 = sharding(resolve_accelerator(R"({"deepspeed_plugin": {"zero_stage": 3}})", {}));
  EXPECT_TRUE(zero3.forward_prefetch);
  EXPECT_EQ(zero3.backward_prefetch, "BACKWARD_PRE");
  EXPECT_FALSE(sharding(resolve_accelerator(R"({"deepspeed_plugin": {"zero_stage": 2}})", {})).forward_prefetch);
  EXPECT_FALSE(full.forward_prefetch);
  EXPECT_EQ(full.backward_prefetch, "");
  Sharding post = sharding(
      resolve_accelerator(R"({"fsdp_plugin": {"forward_prefetch": true, "backward_prefetch": "BACKWARD_POST"}})", {}));
  EXPECT_TRUE(post.forward_prefetch);
  EXPECT_EQ(post.backward_prefetch, "BACKWARD_POST");
  EXPECT_EQ(sharding(resolve_accelerator("",
                                         {{"ACCELERATE_USE_FSDP", "true"}, {"FSDP_BACKWARD_PREFETCH", "NO_PREFETCH"}}))
                .backward_prefetch,
            "");
  // Accelerate drops a size-based policy with min_num_params 0.
  EXPECT_EQ(sharding(resolve_accelerator(R"({"fsdp_plugin": {"auto_wrap_policy": "SIZE_BASED_WRAP"}})", {}))
                .wrap_policy,
            "NO_WRAP");
  Sharding sized = sharding(
      resolve_accelerator(R"({"fsdp_plugin": {"auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 1000}})", {}));
  EXPECT_EQ(sized.wrap_policy, "SIZE_BASED_WRAP");
  EXPECT_EQ(sized.min_num_params, 1000);
  Sharding ds =
      sharding(resolve_accelerator(R"({"deepspeed_plugin": {"zero_stage": 1, "gradient_clipping": 1.5}})", {}));
  EXPECT_EQ(ds.stage, 1);
  EXPECT_EQ(ds.gradient_clipping, 1.5);
  EXPECT_EQ(ds.label, "DeepSpeed ZeRO stage 1");
  EXPECT_EQ(sharding(resolve_accelerator("", {{"ACCELERATE_USE_DEEPSPEED", "true"}})).stage,
            2);  // Accelerate's default
}

// --- Limits and hostile input (issue 12: each case failed before its fix) ---------------------------------------

TEST(Limits, LongUnknownKeysAreRefusedWithoutAHang) {
  // Was: a did-you-mean matrix per candidate (50 MB key: 414 s, 14.8 GB). Now the key limit, and a bounded search.
  const std::string key(50u << 20, 'k');
  EXPECT_EQ(closest_match(key, {"mixed_precision", "cpu"}), "");
  EXPECT_EQ(closest_match("mixed_precison", {"mixed_precision", "cpu"}), "mixed_precision");
  EXPECT_EQ(closest_match("cpuu", {"mixed_precision", "cpu"}), "cpu");
  const std::string err = error_of([&] { resolve_accelerator(R"({")" + std::string(300, 'k') + R"(": 1})", {}); });
  EXPECT_NE(err.find("key longer than 256 bytes (the limit)"), std::string::npos) << err;
  // The explicit JSON as a whole is bounded too.
  EXPECT_NE(error_of([&] {
              resolve_accelerator("{\"" + key + "\": 1}", {});
            }).find("more than the limit for config files, 1024 KiB"),
            std::string::npos);
}

TEST(Limits, ManyKeysAreLinearAndBounded) {
  // Was: a quadratic duplicate check (200k keys: 165 s).
  std::string many = "{";
  for (int i = 0; i < 200000; ++i) many += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  many += "}";
  EXPECT_NE(error_of([&] {
              resolve_accelerator(many.substr(0, 60000) + "}", {});
            }).find("more than 4096 keys in one object (the limit)"),
            std::string::npos);
  TempDir t;
  std::string yaml;
  for (int i = 0; i < 5000; ++i) yaml += "k" + std::to_string(i) + ": 1\n";
  EXPECT_NE(error_of([&] {
              resolve_launch(t.write("many.yaml", yaml), {});
            }).find("more than 4096 keys in one mapping (the limit)"),
            std::string::npos);
  std::string dup = "{\"distributed_type\": \"NO\"";
  for (int i = 0; i < 4000; ++i) dup += ",\"k" + std::to_string(i) + "\":1";
  dup += ",\"k17\":2}";
  EXPECT_NE(error_of([&] { resolve_launch(t.write("dup.json", dup), {}); }).find("duplicate key \"k17\""),
            std::string::npos);
}

TEST(Limits, ConfigFilesAreRegularAndBounded) {
  TempDir t;
  // Was: /dev/zero read until memory ran out; a FIFO blocked forever.
  EXPECT_EQ(error_of([] { resolve_launch(std::string("/dev/zero"), {}); }),
            "cannot read config file '/dev/zero': it is not a regular file");
  const std::string fifo = t.path + "/fifo.yaml";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of([&] { resolve_launch(fifo, {}); }),
            "cannot read config file '" + fifo + "': it is not a regular file");
  const std::string big = t.write("big.yaml", "distributed_type: NO\n# " + std::string(1u << 20, 'x') + "\n");
  EXPECT_EQ(error_of([&] { resolve_launch(big, {}); }),
            "cannot read config file '" + big + "': it is larger than the limit for config files, 1024 KiB");
}

TEST(Limits, ModelSizesAreBounded) {
  // Was: acc estimate-memory on n_layer 1e9 (a spec or config.json) allocated until killed, and products of large
  // sizes overflowed to negative parameter counts.
  EXPECT_EQ(
      error_of([] {
        parse_builtin_spec(
            R"({"type": "gpt", "vocab_size": 16, "block_size": 8, "n_layer": 1000000000, "n_head": 1, "n_embd": 8})");
      }),
      "gpt spec: 'n_layer' is 1000000000, more than the limit of 65536");
  EXPECT_EQ(
      error_of([] {
        parse_builtin_spec(
            R"({"type": "gpt", "vocab_size": 9223372036854775807, "block_size": 8, "n_layer": 1, "n_head": 1, "n_embd": 8})");
      }),
      "gpt spec: 'vocab_size' is 9223372036854775807, more than the limit of 2147483648");
  const std::string llama =
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 16, "hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2, )";
  EXPECT_EQ(error_of([&] { hf_parameter_shapes(llama + R"("num_hidden_layers": 1000000000})"); }),
            "config.json: 'num_hidden_layers' must be an integer between 1 and 65536 (the limit)");
  EXPECT_EQ(error_of([&] { hf_parameter_shapes(llama + R"("num_hidden_layers": 2.5})"); }),
            "config.json: 'num_hidden_layers' must be an integer between 1 and 65536 (the limit)");
  EXPECT_EQ(hf_parameter_shapes(llama + R"("num_hidden_layers": 2})").size(), 21u);
}

TEST(Limits, TimeoutsHaveARange) {
  // Was: 1e300, 0 and 1e-9 passed validation and became 0 ms.
  for (auto [value, shown] : {std::pair{"1e300", "1e+300"}, {"0", "0"}, {"1e-9", "1e-09"}, {"-1", "-1"}}) {
    const char* t = value;  // clang 14 cannot capture a structured binding in the lambda
    EXPECT_EQ(
        error_of([&] {
          resolve_accelerator(std::string(R"({"init_process_group_kwargs": {"timeout": )") + t + "}}", {});
        }),
        std::string("'init_process_group_kwargs.timeout' must be a number between 0.001 and 31536000 or null; got ") +
            shown);
  }
  EXPECT_DOUBLE_EQ(resolve_accelerator(R"({"init_process_group_kwargs": {"timeout": 0.5}})", {})
                       .get_double("init_process_group_kwargs.timeout"),
                   0.5);
}

TEST(Limits, StringsAreUtf8WithoutNul) {
  // Was: a NUL silently cut project_dir; invalid UTF-8 was kept.
  EXPECT_EQ(error_of([] { resolve_accelerator(R"({"project_dir": "runs\u0000/x"})", {}); }),
            "malformed JSON at line 1, column 17: string holds a NUL character at byte 4");
  EXPECT_EQ(error_of([] { resolve_accelerator("{\"project_dir\": \"runs\xff\"}", {}); }),
            "malformed JSON at line 1, column 17: string holds invalid UTF-8 at byte 4");
  EXPECT_EQ(error_of([] { resolve_accelerator("{\"project_dir\": \"\xed\xa0\x80\"}", {}); }),  // an encoded surrogate
            "malformed JSON at line 1, column 17: string holds invalid UTF-8 at byte 0");
  EXPECT_EQ(resolve_accelerator("{\"project_dir\": \"r\xc3\xa9sum\xc3\xa9/\xf0\x9f\x98\x80\"}", {})
                .get_string("project_dir"),
            "r\xc3\xa9sum\xc3\xa9/\xf0\x9f\x98\x80");
  EXPECT_NE(error_of([] {
              resolve_accelerator("", {{"ACCELERATE_MIXED_PRECISION", "a\xc0\xaf"
                                                                      "b"}});
            }).find("invalid UTF-8"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              resolve_accelerator("", {{"ACCELERATE_MIXED_PRECISION", std::string(5000, 'd')}});
            }).find("longer than 4096 bytes (the limit)"),
            std::string::npos);
}

TEST(Files, ThreadsSavingToOnePathNeverMix) {
  // Was: one temporary name per process, opened with O_TRUNC: two threads produced a file mixing both.
  TempDir t;
  const std::string path = t.path + "/model.bin";
  const std::string a(8u << 20, 'a'), b(8u << 20, 'b');
  for (int round = 0; round < 5; ++round) {
    std::thread ta([&] { write_file_atomic(path, a); });
    std::thread tb([&] { write_file_atomic(path, b); });
    ta.join();
    tb.join();
    const std::string got = slurp(path);
    EXPECT_TRUE(got == a || got == b) << "round " << round << ": a mixture";
  }
  EXPECT_EQ(list_dir(t.path), std::vector<std::string>{"model.bin"});
}

TEST(Files, AProcessKilledWhileSavingLeavesNothing) {
  // Was: a temporary file of the model's size stayed behind.
  TempDir t;
  const std::string path = t.path + "/model.bin";
  const pid_t child = fork();
  if (child == 0) {
    const std::string huge(256u << 20, 'x');
    for (;;) write_file_atomic(path, huge);
  }
  // Wait for the first save to land, then kill the child during a later one.
  for (int i = 0; i < 200 && list_dir(t.path).empty(); ++i) usleep(10000);
  usleep(100000);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  for (const std::string& name : list_dir(t.path)) EXPECT_EQ(name, "model.bin") << "left behind: " << name;
}

TEST(SafetensorsHeader, StrictAsTheFormat) {
  // Was accepted: overlapping tensors, duplicate names, fractional shapes or offsets, garbage after the header,
  // NUL in names, holes and trailing bytes.
  auto err = [](const std::string& json, uint64_t data) {
    return error_of([&] { parse_safetensors_header(json, "m.safetensors", data); });
  };
  const std::string a = R"("a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  EXPECT_EQ(err("{" + a + R"(, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
            "m.safetensors: tensor \"b\" starts at byte 4 of the data, inside another tensor");
  EXPECT_NE(err("{" + a + ", " + a + "}", 8).find("duplicate key \"a\""), std::string::npos);
  EXPECT_NE(err(R"({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})", 8).find("bad shape"),
            std::string::npos);
  EXPECT_NE(err(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8.5]}})", 8).find("data_offsets"),
            std::string::npos);
  EXPECT_NE(err("{" + a + "} xyz", 8).find("unexpected text after the JSON value"), std::string::npos);
  EXPECT_EQ(err("{" + a + "}    ", 8), "<no error>");  // the format pads with spaces
  EXPECT_NE(err(R"({"a\u0000b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 8).find("NUL character"),
            std::string::npos);
  EXPECT_EQ(err(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8),
            "m.safetensors: tensor \"a\" starts at byte 4 of the data, leaving a hole after byte 0");
  EXPECT_EQ(err("{" + a + "}", 12), "m.safetensors: 4 bytes after the last tensor's data");
}

// A DeepSpeed JSON config as Accelerate reads it: its values win over the plugin's settings, "auto" keeps them;
// what libacc cannot do is refused naming the key.
TEST(Config, DeepSpeedConfigFile) {
  TempDir t;
  // The shape of the ZeRO-3 templates of the transformers / Accelerate docs, with CPU offload.
  const std::string ds = t.write("ds_zero3.json", R"({
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 500, "initial_scale_power": 12},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {
      "stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "offload_param": {"device": "cpu", "pin_memory": true},
      "overlap_comm": true, "contiguous_gradients": true, "reduce_bucket_size": "auto",
      "stage3_gather_16bit_weights_on_model_save": true
    },
    "gradient_accumulation_steps": 4, "gradient_clipping": "auto",
    "steps_per_print": 2000, "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": false
  })");
  Config c = resolve_accelerator(R"({"mixed_precision": "fp16", "deepspeed_plugin": {"hf_ds_config": ")" + ds +
                                     R"(", "zero_stage": 1, "gradient_clipping": 0.5}})",
                                 {});
  EXPECT_TRUE(c.get_bool("use_deepspeed"));
  EXPECT_EQ(c.get_int("deepspeed_plugin.zero_stage"), 3);  // the file wins
  EXPECT_EQ(c.provenance("deepspeed_plugin.zero_stage").where, ds + ": zero_optimization.stage");
  EXPECT_EQ(c.get_string("deepspeed_plugin.offload_optimizer_device"), "cpu");
  EXPECT_DOUBLE_EQ(c.get_double("deepspeed_plugin.gradient_clipping"), 0.5);  // "auto": the plugin's
  EXPECT_EQ(c.get_int("gradient_accumulation_steps"), 4);
  EXPECT_EQ(c.get_string("mixed_precision"), "fp16");  // "auto": mixed_precision's
  EXPECT_DOUBLE_EQ(c.get_double("grad_scaler_kwargs.init_scale"), 4096);  // 2^initial_scale_power
  EXPECT_EQ(c.get_int("grad_scaler_kwargs.growth_interval"), 500);
  EXPECT_TRUE(c.get_bool("deepspeed_plugin.zero3_save_16bit_model"));
  EXPECT_EQ(unsupported_setting(c), std::nullopt);
  const Sharding sh = sharding(c);
  EXPECT_EQ(sh.stage, 3);
  EXPECT_TRUE(sh.offload);
  // Through the launcher's environment: ACCELERATE_DEEPSPEED_CONFIG_FILE; bf16 enabled in the file decides.
  const std::string bf = t.write("ds_bf16.json", R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 2,
    "reduce_bucket_size": 1048576}})");
  Config e = resolve_accelerator("", {{"ACCELERATE_USE_DEEPSPEED", "true"},
                                      {"ACCELERATE_DEEPSPEED_CONFIG_FILE", bf},
                                      {"ACCELERATE_MIXED_PRECISION", "no"}});
  EXPECT_EQ(e.get_int("deepspeed_plugin.zero_stage"), 2);
  EXPECT_EQ(e.get_string("mixed_precision"), "bf16");
  EXPECT_EQ(e.provenance("mixed_precision").where, bf + ": bf16.enabled");
  EXPECT_DOUBLE_EQ(e.get_double("ddp_kwargs.bucket_cap_mb"), 4.0);  // 2^20 fp32 elements
  // From a launch config as `accelerate config` writes one with a DeepSpeed file (no mixed_precision then).
  const std::string launch = t.write("launch.yaml", "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n"
                                                    "  deepspeed_config_file: " +
                                                        ds + "\n  zero3_init_flag: false\n");
  Config l = resolve_accelerator("", launch_environment(resolve_launch(launch, {})));
  EXPECT_EQ(l.get_int("deepspeed_plugin.zero_stage"), 3);
  EXPECT_EQ(l.get_int("gradient_accumulation_steps"), 4);
  // Refusals name the file and the key.
  const auto err_of = [&](const std::string& json, const std::string& mp = "no") {
    const std::string f = t.write("bad.json", json);
    return error_of([&] {
      resolve_accelerator(R"({"mixed_precision": ")" + mp + R"(", "deepspeed_plugin": {"hf_ds_config": ")" + f +
                              R"("}})",
                          {});
    });
  };
  const std::string bad = t.path + "/bad.json";
  EXPECT_EQ(
      err_of(R"({"zero_optimization": {"stage": 2}, "optimizer": {"type": "AdamW"}})"),
      bad + ": 'optimizer' has no meaning in libacc; remove it (read: zero_optimization, gradient_accumulation_steps, "
            "gradient_clipping, fp16, bf16, train_batch_size and train_micro_batch_size_per_gpu \"auto\", "
            "steps_per_print, wall_clock_breakdown)");
  EXPECT_NE(err_of(R"({"zero_optimization": {"stage": 2, "sub_group_size": 1e9}})")
                .find("'zero_optimization.sub_group_size' has no meaning"),
            std::string::npos);
  EXPECT_NE(err_of(R"({"fp16": {"enabled": true, "hysteresis": 2}, "zero_optimization": {"stage": 2}})")
                .find("'fp16.hysteresis' has no meaning"),
            std::string::npos);
  EXPECT_EQ(
      err_of(R"({"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 8})"),
      bad + ": 'train_micro_batch_size_per_gpu' must be \"auto\": libacc takes the batch size from the data loader");
  EXPECT_EQ(err_of(R"({"fp16": {"enabled": true}})"),
            bad + ": no 'zero_optimization' section; Accelerate needs the ZeRO optimization config in the file");
  EXPECT_EQ(err_of(R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})", "fp16"),
            bad + ": 'mixed_precision' cannot be \"fp16\" when bf16 is enabled in the DeepSpeed config file");
  EXPECT_NE(err_of(R"({"zero_optimization": {"stage": 2, "overlap_comm": false}})").find("false is not available"),
            std::string::npos);
  EXPECT_NE(err_of("{not json").find(bad + ": malformed JSON"), std::string::npos);
  EXPECT_EQ(error_of([] {
              resolve_accelerator(R"({"deepspeed_plugin": {"hf_ds_config": "/nonexistent/ds.json"}})", {});
            }),
            "cannot read config file '/nonexistent/ds.json': No such file or directory");
  // As Accelerate's _deepspeed_config_checks: the launch config may not set these beside the file.
  EXPECT_NE(error_of([&] {
              resolve_accelerator("", {{"ACCELERATE_USE_DEEPSPEED", "true"},
                                       {"ACCELERATE_DEEPSPEED_CONFIG_FILE", bf},
                                       {"ACCELERATE_CONFIG_DS_FIELDS", "deepspeed_config_file,zero_stage"}});
            }).find("sets 'zero_stage' beside deepspeed_config_file"),
            std::string::npos);
}

// The typed views (acc/config_views.hpp, generated from the schema table): every key has a member (the fill function
// reads every key and throws std::logic_error for one left over), the members' defaults are the schema's, and each
// value keeps its type, null and the legacy spellings the resolver rewrites included.
TEST(Views, CoverEverySchemaKeyWithItsDefault) {
  EXPECT_EQ(accelerator_settings(Config()), AcceleratorSettings{});
  AcceleratorSettings unified;  // the resolver copies gradient_accumulation_steps here
  unified.gradient_accumulation_plugin.num_steps = 1;
  EXPECT_EQ(accelerator_settings(resolve_accelerator("", {})), unified);
  EXPECT_EQ(launch_settings(resolve_launch(std::nullopt, {}, false)), LaunchSettings{});
  EXPECT_NE(error_of([] { launch_settings(Config()); }).find("other schema"), std::string::npos);
  EXPECT_NE(error_of([] { accelerator_settings(resolve_launch(std::nullopt, {}, false)); }).find("other schema"),
            std::string::npos);
  // A section's Key names its members' paths; a misspelt member or key is a compile error.
  EXPECT_STREQ(AcceleratorSettings::DdpKwargs::Key::bucket_cap_mb, "ddp_kwargs.bucket_cap_mb");
  EXPECT_STREQ(AcceleratorSettings::Key::ddp_kwargs, "ddp_kwargs");
  EXPECT_STREQ(LaunchSettings::FsdpConfig::Key::fsdp_version, "fsdp_config.fsdp_version");
}

TEST(Views, HoldTheResolvedValues) {
  const Config c = resolve_accelerator(
      R"({"seed": 7, "rng_types": ["torch", "generator"], "log_with": null,
          "dataloader_config": {"dispatch_batches": false, "data_seed": 3},
          "ddp_kwargs": {"bucket_cap_mb": 10, "comm_hook": "power_sgd", "comm_state_option": {"matrix_approximation_rank": 2}},
          "init_process_group_kwargs": {"timeout": 60.5},
          "fsdp_plugin": {"reshard_after_forward": "SHARD_GRAD_OP", "mixed_precision_policy": {"param_dtype": "bf16"}},
          "fp8_recipe_kwargs": {"override_linear_precision": [true, false, true]}})",
      {{"FSDP_SHARDING_STRATEGY", "2"}, {"FSDP_BACKWARD_PREFETCH", "1"}});
  const AcceleratorSettings s = accelerator_settings(c);
  EXPECT_EQ(s.seed, 7);
  EXPECT_EQ(s.rng_types, (std::vector<std::string>{"torch", "generator"}));
  EXPECT_FALSE(s.log_with.has_value());
  EXPECT_EQ(s.dataloader_config.dispatch_batches, false);
  EXPECT_EQ(s.dataloader_config.data_seed, 3);
  EXPECT_EQ(s.ddp_kwargs.bucket_cap_mb, 10.0);  // a number given as an integer
  EXPECT_EQ(s.ddp_kwargs.comm_hook, "power_sgd");
  EXPECT_EQ(s.ddp_kwargs.comm_state_option.json, R"({"matrix_approximation_rank":2})");
  EXPECT_EQ(s.init_process_group_kwargs.timeout, 60.5);
  EXPECT_EQ(s.fsdp_plugin.sharding_strategy, "SHARD_GRAD_OP");  // the legacy integer, as its name
  EXPECT_EQ(s.fsdp_plugin.backward_prefetch, "BACKWARD_PRE");
  EXPECT_EQ(s.fsdp_plugin.reshard_after_forward.json, R"("SHARD_GRAD_OP")");  // bool | string: JSON text
  EXPECT_EQ(s.fsdp_plugin.mixed_precision_policy.json, R"({"param_dtype":"bf16"})");
  EXPECT_TRUE(s.dynamo_plugin.options.is_null());
  EXPECT_EQ(s.fp8_recipe_kwargs.override_linear_precision, (std::array<bool, 3>{true, false, true}));
  // What every view member holds is what the generic getters give.
  EXPECT_EQ(s.gradient_accumulation_steps, c.get_int(AcceleratorSettings::Key::gradient_accumulation_steps));
  EXPECT_EQ(s.ddp_kwargs.comm_state_option.json, c.get_json(AcceleratorSettings::DdpKwargs::Key::comm_state_option));

  const Config l = resolve_launch(std::nullopt,
                                  {{"num_processes", "4", "--num_processes"},
                                   {"main_process_port", "0", "--main_process_port"},
                                   {"fsdp_config.fsdp_transformer_layer_cls_to_wrap", "Block,Attn", "--fsdp_x"},
                                   {"fsdp_config.fsdp_reshard_after_forward", "false", "--fsdp_y"}},
                                  false);
  const LaunchSettings ls = launch_settings(l);
  EXPECT_EQ(ls.num_processes, 4);
  EXPECT_EQ(ls.main_process_port, 0);
  EXPECT_FALSE(ls.main_process_ip.has_value());
  EXPECT_EQ(ls.fsdp_config.fsdp_transformer_layer_cls_to_wrap, "Block,Attn");
  EXPECT_EQ(ls.fsdp_config.fsdp_reshard_after_forward.json, "false");
}

// --- Issue 27: parallelism_config as Accelerate checks it, and the process mesh a job runs on ------------------------
TEST(Parallelism, MeshSizesOfAJob) {
  auto dims = [](const std::string& json, const Env& env, int64_t world, int64_t local = 0) {
    return parallel_dims(resolve_accelerator(json, env), world, local ? local : world);
  };
  auto shape = [](const ParallelDims& d) {
    return std::to_string(d.dp_replicate) + "x" + std::to_string(d.dp_shard) + "x" + std::to_string(d.cp) + "x" +
           std::to_string(d.tp);
  };
  // Without parallelism_config the data-parallel strategy makes the mesh: DDP replicates, FSDP / ZeRO shard over
  // every process, HYBRID_SHARD shards inside a machine and replicates across machines.
  EXPECT_EQ(shape(dims("", {}, 4)), "4x1x1x1");
  EXPECT_FALSE(dims("", {}, 4).from_parallelism_config);
  EXPECT_EQ(shape(dims(R"({"fsdp_plugin": {}})", {}, 4)), "1x4x1x1");
  EXPECT_EQ(shape(dims(R"({"deepspeed_plugin": {"zero_stage": 2}})", {}, 4)), "1x4x1x1");
  EXPECT_EQ(shape(dims(R"({"fsdp_plugin": {"sharding_strategy": "HYBRID_SHARD"}})", {}, 8, 4)), "2x4x1x1");
  EXPECT_EQ(shape(dims(R"({"fsdp_plugin": {"sharding_strategy": "HYBRID_SHARD"}})", {}, 4, 4)), "1x4x1x1");
  EXPECT_NE(error_of([&] {
              dims(R"({"fsdp_plugin": {"sharding_strategy": "HYBRID_SHARD"}})", {}, 6, 4);
            }).find("6 processes do not split into machines of 4 (LOCAL_WORLD_SIZE)"),
            std::string::npos);
  // The variables accelerate launch exports: HSDP 2 x 2.
  const Env hsdp = {{"ACCELERATE_USE_FSDP", "true"},
                    {"FSDP_VERSION", "2"},
                    {"ACCELERATE_USE_PARALLELISM_CONFIG", "true"},
                    {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "2"},
                    {"PARALLELISM_CONFIG_DP_SHARD_SIZE", "2"}};
  EXPECT_EQ(shape(dims("", hsdp, 4)), "2x2x1x1");
  EXPECT_TRUE(dims("", hsdp, 4).from_parallelism_config);
  // FSDP2 with tensor or context parallelism (the accelerator refuses those until their transforms run); CP alone
  // gives FSDP its dimension (dp_shard_cp).
  const std::string fsdp2 = R"("fsdp_plugin": {"fsdp_version": 2}, )";
  EXPECT_EQ(shape(dims("{" + fsdp2 + R"("parallelism_config": {"dp_shard_size": 2, "tp_size": 2}})", {}, 4)),
            "1x2x1x2");
  EXPECT_EQ(shape(dims("{" + fsdp2 + R"("parallelism_config": {"dp_shard_size": 2, "cp_size": 2}})", {}, 4)),
            "1x2x2x1");
  EXPECT_EQ(shape(dims("{" + fsdp2 +
                           R"("parallelism_config": {"dp_replicate_size": 2, "dp_shard_size": 2, "tp_size": 2}})",
                       {}, 8)),
            "2x2x1x2");
  EXPECT_EQ(shape(dims("{" + fsdp2 + R"("parallelism_config": {"cp_size": 4}})", {}, 4)), "1x1x4x1");
  // Tensor parallelism over every process, without FSDP: no data parallelism (Accelerate wraps no DDP).
  EXPECT_EQ(shape(dims(R"({"parallelism_config": {"tp_size": 4}})", {}, 4)), "1x1x1x4");
  // Sizes that multiply to 1 replicate over every process (Accelerate's _validate_accelerator, for DDP).
  EXPECT_EQ(shape(dims(R"({"parallelism_config": {}})", {}, 4)), "4x1x1x1");
  EXPECT_EQ(shape(dims(R"({"parallelism_config": {"tp_size": 1}})", {}, 1)), "1x1x1x1");
}

TEST(Parallelism, AccelerateRulesNameKeyAndSource) {
  auto refusal = [](const std::string& json, const Env& env, int64_t world) {
    return error_of([&] { parallel_dims(resolve_accelerator(json, env), world, world); });
  };
  auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                                : ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
  };
  // Sizes whose product is not the world size, from the environment accelerate launch sets.
  const Env tp3 = {{"ACCELERATE_USE_PARALLELISM_CONFIG", "true"}, {"PARALLELISM_CONFIG_TP_SIZE", "3"}};
  EXPECT_TRUE(has(refusal("", tp3, 4),
                  "contradictory settings: the parallelism_config sizes multiply to 3 processes "
                  "('parallelism_config.tp_size' (3, PARALLELISM_CONFIG_TP_SIZE)), but the job has 4 processes "
                  "(WORLD_SIZE)"));
  EXPECT_TRUE(
      has(refusal(R"({"fsdp_plugin": {"fsdp_version": 2}, "parallelism_config": {"dp_shard_size": 2, "tp_size": 2}})",
                  {}, 8),
          "multiply to 4 processes ('parallelism_config.dp_shard_size' (2, "));
  // Context parallelism without FSDP2 (AcceleratorState: CP shards the model over dp_shard x cp).
  EXPECT_TRUE(has(refusal(R"({"parallelism_config": {"cp_size": 4}})", {}, 4),
                  "'parallelism_config.cp_size' (4, acc_accelerator_create): context parallelism needs FSDP2"));
  EXPECT_TRUE(has(refusal(R"({"fsdp_plugin": {}, "parallelism_config": {"cp_size": 2, "dp_shard_size": 2}})", {}, 4),
                  "needs FSDP2; got 'fsdp_plugin.fsdp_version' (1, default)"));
  // CP with replication alone is refused, as Accelerate does; TP with replication alone (DDP x TP) is allowed.
  EXPECT_TRUE(
      has(refusal(R"({"parallelism_config": {"cp_size": 2, "dp_replicate_size": 2}})", {}, 4),
          "contradictory settings: 'parallelism_config.cp_size' (2, acc_accelerator_create) with "
          "'parallelism_config.dp_replicate_size' (2, acc_accelerator_create) and 'parallelism_config.dp_shard_size' "
          "(1, default): context parallelism cannot be used with pure data parallelism"));
  EXPECT_EQ(refusal(R"({"parallelism_config": {"tp_size": 2, "dp_replicate_size": 2}})", {}, 4), "<no error>");
  // CP and SP are exclusive.
  EXPECT_TRUE(has(refusal(R"({"fsdp_plugin": {"fsdp_version": 2}, "parallelism_config": {"cp_size": 2, "sp_size": 2}})",
                          {}, 4),
                  "'parallelism_config.cp_size' (2, acc_accelerator_create) and 'parallelism_config.sp_size' (2, "
                  "acc_accelerator_create): context parallelism and sequence parallelism are mutually exclusive"));
  // FSDP2 needs a dimension to shard over; dp_shard_size shards with FSDP2 only.
  EXPECT_TRUE(has(refusal(R"({"fsdp_plugin": {"fsdp_version": 2}, "parallelism_config": {"dp_replicate_size": 4}})", {},
                          4),
                  "no dimension for FSDP to shard across"));
  EXPECT_TRUE(
      has(refusal(R"({"parallelism_config": {"dp_shard_size": 4}})", {}, 4),
          "'parallelism_config.dp_shard_size' (4, acc_accelerator_create): dp_shard_size > 1 shards with FSDP2"));
  // Accelerate's cp_backend choices: torch only.
  EXPECT_TRUE(has(error_of([] { resolve_accelerator(R"({"parallelism_config": {"cp_backend": "deepspeed"}})", {}); }),
                  "'parallelism_config.cp_backend' must be one of \"torch\""));
  // Sequence parallelism (Ulysses) is a dimension of the mesh: accepted with its settings, the sizes' product
  // compared with the processes, DeepSpeedSequenceParallelConfig's rules applied.
  const Env sp2 = {{"ACCELERATE_USE_PARALLELISM_CONFIG", "true"}, {"PARALLELISM_CONFIG_SP_SIZE", "2"}};
  EXPECT_FALSE(unsupported_setting(resolve_accelerator("", sp2)).has_value());
  EXPECT_EQ(parallel_dims(resolve_accelerator("", sp2), 2, 2).sp, 2);
  EXPECT_TRUE(has(refusal("", sp2, 4),
                  "the parallelism_config sizes multiply to 2 processes "
                  "('parallelism_config.sp_size' (2, PARALLELISM_CONFIG_SP_SIZE)), but the job has 4"));
  EXPECT_TRUE(has(refusal(R"({"parallelism_config": {"sp_size": 2, "sp_seq_length_is_variable": false}})", {}, 2),
                  "'parallelism_config.sp_seq_length_is_variable' (false, acc_accelerator_create) needs "
                  "'parallelism_config.sp_seq_length' (null, default) to be the fixed sequence length"));
  EXPECT_EQ(refusal(R"({"parallelism_config": {"sp_size": 2, "sp_seq_length_is_variable": false,
                                               "sp_seq_length": 64}})",
                    {}, 2),
            "<no error>");
  EXPECT_TRUE(has(refusal(R"({"parallelism_config": {"sp_size": 2, "sp_attn_implementation": "eager"}})", {}, 2),
                  "'parallelism_config.sp_attn_implementation' (\"eager\", acc_accelerator_create): 'eager' and "
                  "'flex_attention' are not supported with sequence parallelism"));
  EXPECT_TRUE(has(refusal(R"({"parallelism_config": {"sp_size": 2, "sp_attn_implementation": "kernels/x"}})", {}, 2),
                  "use sdpa, flash_attention_2 or flash_attention_3"));
}

// Sizes whose product wraps in 64 bits (2^63-1 squared is 1 modulo 2^64) or passes the most processes a job may have
// are refused naming every size above 1 and its source, before they are multiplied again anywhere.
TEST(Parallelism, PipelineKeys) {
  // libacc's own pp_* keys (Accelerate has no pipeline parallelism): pp multiplies into the product; the schedule's
  // stages per rank and the split points are checked, each error naming the key, its value and its source.
  auto refusal = [](const std::string& json, const Env& env, int64_t world) {
    return error_of([&] { parallel_dims(resolve_accelerator(json, env), world, world); });
  };
  auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                                : ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
  };
  const Env pp2 = {{"ACCELERATE_USE_PARALLELISM_CONFIG", "true"},
                   {"PARALLELISM_CONFIG_PP_SIZE", "2"},
                   {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "2"}};
  const ParallelDims d = parallel_dims(resolve_accelerator("", pp2), 4, 4);
  EXPECT_EQ(d.pp, 2);
  EXPECT_EQ(d.dp_replicate, 2);
  EXPECT_TRUE(has(refusal("", pp2, 6),
                  "multiply to 4 processes ('parallelism_config.pp_size' (2, PARALLELISM_CONFIG_PP_SIZE), "
                  "'parallelism_config.dp_replicate_size' (2, PARALLELISM_CONFIG_DP_REPLICATE_SIZE)), but the job has "
                  "6 processes"));
  EXPECT_TRUE(has(refusal(R"({"fsdp_plugin": {"fsdp_version": 2}, "parallelism_config": {"pp_size": 2, "sp_size": 2}})",
                          {}, 4),
                  "'parallelism_config.pp_size' (2, acc_accelerator_create) with 'parallelism_config.sp_size' (2, "
                  "acc_accelerator_create): libacc's pipeline parallelism does not compose"));
  EXPECT_TRUE(has(refusal(R"({"parallelism_config": {"pp_size": 2, "pp_schedule": "Interleaved1F1B"}})", {}, 2),
                  "'parallelism_config.pp_schedule' (\"Interleaved1F1B\", acc_accelerator_create) with "
                  "'parallelism_config.pp_stages_per_rank' (1, default): a multi-stage schedule needs at least 2"));
  EXPECT_TRUE(has(refusal(R"({"parallelism_config": {"pp_size": 2, "pp_schedule": "InterleavedZeroBubble"}})", {}, 2),
                  "a multi-stage schedule needs at least 2"));
  EXPECT_TRUE(has(refusal(R"({"parallelism_config": {"pp_size": 2, "pp_stages_per_rank": 2}})", {}, 2),
                  "a single-stage schedule runs exactly 1 stage per rank"));
  EXPECT_TRUE(has(refusal(R"({"parallelism_config": {"pp_size": 2, "pp_split_points": ["3", "1"]}})", {}, 2),
                  "'1' is not a block index above the previous one"));
  EXPECT_TRUE(has(refusal(R"({"parallelism_config": {"pp_size": 2, "pp_split_points": ["1", "2"]}})", {}, 2),
                  "makes 3 stages; 'parallelism_config.pp_size' (2, acc_accelerator_create) x "));
  const Env split = {{"ACCELERATE_USE_PARALLELISM_CONFIG", "true"},
                     {"PARALLELISM_CONFIG_PP_SIZE", "2"},
                     {"PARALLELISM_CONFIG_PP_SPLIT_POINTS", "1"}};
  EXPECT_EQ(parallel_dims(resolve_accelerator("", split), 2, 2).pp, 2);
}

TEST(Parallelism, SizesThatWrapAreRefusedNamingTheKeys) {
  auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                                : ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
  };
  const std::string max = "9223372036854775807";
  auto accelerator = [](const std::string& sizes, int64_t world) {
    return error_of([&] {
      parallel_dims(resolve_accelerator(R"({"parallelism_config": {)" + sizes + "}}", {}), world, world);
    });
  };
  // 2^63-1 x 2^63-1 (1 modulo 2^64), 2^62 x 4 (0), 3 x 6148914691236517205 (-1), 65536^4 (2^64: 0).
  const std::string square = accelerator(R"("dp_replicate_size": )" + max + R"(, "tp_size": )" + max, 1);
  EXPECT_TRUE(has(square, "the parallelism_config sizes multiply to more than 65536 processes"));
  EXPECT_TRUE(has(square, "'parallelism_config.dp_replicate_size' (" + max + ", acc_accelerator_create)"));
  EXPECT_TRUE(has(square, "'parallelism_config.tp_size' (" + max + ", acc_accelerator_create)"));
  EXPECT_TRUE(has(accelerator(R"("dp_replicate_size": 4611686018427387904, "tp_size": 4)", 4),
                  "multiply to more than 65536 processes, the most a job may have "
                  "('parallelism_config.dp_replicate_size' (4611686018427387904, "
                  "acc_accelerator_create), 'parallelism_config.tp_size' (4, acc_accelerator_create))"));
  EXPECT_TRUE(has(accelerator(R"("dp_replicate_size": 3, "tp_size": 6148914691236517205)", 3),
                  "more than 65536 processes"));
  const std::string fsdp2 = R"({"fsdp_plugin": {"fsdp_version": 2}, "parallelism_config": )";
  const std::string four = error_of([&] {
    parallel_dims(resolve_accelerator(fsdp2 + R"({"dp_replicate_size": 65536, "dp_shard_size": 65536,
                                                                 "tp_size": 65536, "cp_size": 65536}})",
                                      {}),
                  4, 4);
  });
  EXPECT_TRUE(
      has(four, "more than 65536 processes, the most a job may have ('parallelism_config.dp_replicate_size' (65536, "));
  EXPECT_TRUE(has(four, "'parallelism_config.cp_size' (65536, acc_accelerator_create))"));
  // The most a job may have is still accepted where the processes match; one past it is refused.
  EXPECT_EQ(accelerator(R"("tp_size": 65536)", 65536), "<no error>");
  EXPECT_TRUE(has(accelerator(R"("dp_replicate_size": 2, "tp_size": 32769)", 65538), "more than 65536 processes"));
  // From the environment accelerate launch sets: the variables are the sources.
  const Env wrap = {{"ACCELERATE_USE_PARALLELISM_CONFIG", "true"},
                    {"PARALLELISM_CONFIG_DP_REPLICATE_SIZE", max},
                    {"PARALLELISM_CONFIG_TP_SIZE", max}};
  EXPECT_TRUE(has(error_of([&] { parallel_dims(resolve_accelerator("", wrap), 1, 1); }),
                  "'parallelism_config.tp_size' (" + max + ", PARALLELISM_CONFIG_TP_SIZE)"));
  // With sequence parallelism too.
  EXPECT_TRUE(has(accelerator(R"("sp_size": 2, "dp_replicate_size": )" + max + R"(, "tp_size": )" + max, 1),
                  "more than 65536 processes"));
  // The launcher refuses a file's sizes before any process starts, naming the file's lines.
  TempDir t;
  const std::string f = t.write("p.yaml", "distributed_type: FSDP\nnum_processes: 1\nfsdp_config:\n  fsdp_version: 2\n"
                                          "parallelism_config:\n  parallelism_config_dp_shard_size: " +
                                              max + "\n  parallelism_config_tp_size: " + max + "\n");
  const std::string launch = error_of([&] { resolve_launch(f, {}); });
  EXPECT_TRUE(has(
      launch,
      "more than 65536 processes, the most a job may have ('parallelism_config.parallelism_config_dp_shard_size' (" +
          max + ", " + t.path + "/p.yaml:6), 'parallelism_config.parallelism_config_tp_size' (" + max + ", " + t.path +
          "/p.yaml:7))"));
}

TEST(Parallelism, LaunchRefusesBeforeAnyProcessStarts) {
  TempDir t;
  auto refusal = [&](const std::string& sizes, int np) {
    const std::string f = t.write("p.yaml", "distributed_type: FSDP\nnum_processes: " + std::to_string(np) +
                                                "\nfsdp_config:\n  fsdp_version: 2\nparallelism_config:\n" + sizes);
    return error_of([&] { resolve_launch(f, {}); });
  };
  auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                                : ::testing::AssertionFailure() << "'" << part << "' not in: " << text;
  };
  const std::string ok = refusal("  parallelism_config_dp_shard_size: 2\n  parallelism_config_tp_size: 2\n", 4);
  EXPECT_EQ(ok, "<no error>");
  EXPECT_TRUE(
      has(refusal("  parallelism_config_dp_shard_size: 2\n  parallelism_config_tp_size: 2\n", 8),
          "the parallelism_config sizes multiply to 4 processes ('parallelism_config.parallelism_config_dp_shard_size' "
          "(2, " +
              t.path + "/p.yaml:6)"));
  EXPECT_TRUE(has(refusal("  parallelism_config_dp_shard_size: 2\n  parallelism_config_tp_size: 2\n", 8),
                  "but 'num_processes' (8, " + t.path + "/p.yaml:2)"));
  EXPECT_TRUE(has(refusal("  parallelism_config_dp_replicate_size: 2\n  parallelism_config_cp_size: 2\n", 4),
                  "'parallelism_config.parallelism_config_cp_size' (2, " + t.path +
                      "/p.yaml:7) with 'parallelism_config.parallelism_config_dp_replicate_size' (2, " + t.path +
                      "/p.yaml:6) and 'parallelism_config.parallelism_config_dp_shard_size' (1, default): context "
                      "parallelism cannot be used with pure data parallelism"));
  EXPECT_TRUE(has(refusal("  parallelism_config_cp_size: 2\n  parallelism_config_sp_size: 2\n", 4),
                  "mutually exclusive"));
  EXPECT_TRUE(
      has(refusal("  parallelism_config_dp_replicate_size: 4\n", 4),
          "contradictory settings: 'parallelism_config.parallelism_config_dp_shard_size' (1, default) leaves FSDP "
          "no dimension to shard across"));
  EXPECT_EQ(refusal("  parallelism_config_cp_size: 4\n", 4), "<no error>");  // FSDP shards over cp
  EXPECT_TRUE(has(refusal("  parallelism_config_cp_size: 4\n  parallelism_config_cp_backend: deepspeed\n", 4),
                  "parallelism_config_cp_backend"));
}
