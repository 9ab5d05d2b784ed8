// Config text (comments, malformed JSON, duplicate keys), batch-size resolution exactly as
// DeepSpeed does it, "auto" and overrides.
#include "config/config_test_util.h"
#include "config/json_text.h"

namespace zero::config {
using namespace zero::config::test;

TEST_CASE("config: // and /* */ comments are accepted", "[config][json]") {
  const Config config = read(R"({
    // a line comment
    "train_batch_size": 8, /* a block
    comment */ "zero_optimization": {"stage": 2}
  })");
  REQUIRE(config.batch.train_batch_size == 8);
  REQUIRE(config.zero.stage == 2);
}

TEST_CASE("config: malformed JSON is reported with line and column", "[config][json]") {
  const std::string message = error_of("{\n  \"train_batch_size\": 8,\n  \"fp16\": }\n");
  REQUIRE_THAT(message, Catch::StartsWith("<string>:3:11: malformed JSON: syntax error"));
}

TEST_CASE("config: a trailing comma is malformed, with its position", "[config][json]") {
  const std::string message = error_of("{\"train_batch_size\": 8,}");
  REQUIRE_THAT(message, Catch::StartsWith("<string>:1:24: malformed JSON:"));
}

TEST_CASE("config: a key given twice in one object is refused with its path", "[config][json]") {
  REQUIRE(error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1, "stage": 2}})") ==
          "<string>: duplicate key zero_optimization.stage (given twice in one object; keep one)");
}

TEST_CASE("config: duplicate keys inside arrays name the element", "[config][json]") {
  REQUIRE_THROWS_WITH(parse_json_text(R"({"a": [1, {"x": 1, "x": 2}]})", "f.json"),
                      "f.json: duplicate key a[1].x (given twice in one object; keep one)");
}

TEST_CASE("config: the same key in different objects is not a duplicate", "[config][json]") {
  const Config config = read(R"({"train_batch_size": 8, "fp16": {"enabled": false},
                                 "bf16": {"enabled": true}})");
  REQUIRE(config.precision == Precision::bf16);
}

TEST_CASE("config: the document must be an object", "[config][json]") {
  REQUIRE(error_of("[1, 2]") == "<string>: a config is a JSON object {...}, got [1,2]");
}

TEST_CASE("config: an unreadable file is an I/O error naming the path", "[config][json]") {
  try {
    read_config_file("/nonexistent/ds_config.json", {});
    FAIL("no error");
  } catch (const Error& error) {
    REQUIRE(error.category() == ErrorCategory::io);
    REQUIRE(std::string(error.what()) ==
            "cannot read config file /nonexistent/ds_config.json: No such file or directory");
  }
}

TEST_CASE("config: line and column of a byte offset", "[config][json]") {
  REQUIRE(position_of("ab\ncd\n", 0).line == 1);
  REQUIRE(position_of("ab\ncd\n", 4).line == 2);
  REQUIRE(position_of("ab\ncd\n", 4).column == 2);
}

// ------------------------------------------------------------------------------ batch sizes

TEST_CASE("batch: inconsistent sizes name all four numbers and the three keys", "[config][batch]") {
  REQUIRE(error_of(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 17,
                       "gradient_accumulation_steps": 2})") ==
          "train_batch_size != train_micro_batch_size_per_gpu * gradient_accumulation_steps * "
          "world size: 32 != 17 * 2 * 1 = 34; give two of the three keys (the third is derived), "
          "or all three consistently");
}

TEST_CASE("batch: two keys that do not divide show the arithmetic, not 'give two'",
          "[config][batch]") {
  REQUIRE(error_of(R"({"train_batch_size": 20, "train_micro_batch_size_per_gpu": 3})", 2) ==
          "train_batch_size 20 is not a multiple of train_micro_batch_size_per_gpu 3 * world size "
          "2 = 6, so gradient_accumulation_steps would be 20 / 6 = 3.333, not a whole number; make "
          "train_batch_size a multiple of 6 (18 or 24), or give gradient_accumulation_steps "
          "instead");
  REQUIRE(error_of(R"({"train_batch_size": 6, "gradient_accumulation_steps": 4})") ==
          "train_batch_size 6 is not a multiple of world size 1 * gradient_accumulation_steps 4 = "
          "4, so train_micro_batch_size_per_gpu would be 6 / 4 = 1.5, not a whole number; make "
          "train_batch_size a multiple of 4 (4 or 8), or give train_micro_batch_size_per_gpu "
          "instead");
  REQUIRE(error_of(R"({"train_batch_size": 10})", 4) ==
          "train_batch_size 10 is not a multiple of the world size 4, so "
          "train_micro_batch_size_per_gpu would be 10 / 4 = 2.5, not a whole number; make "
          "train_batch_size a multiple of 4 (8 or 12), or give train_micro_batch_size_per_gpu "
          "instead");
}

TEST_CASE("batch: train and micro give the accumulation steps", "[config][batch]") {
  const Config config = read(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})", 8);
  REQUIRE(config.batch.gradient_accumulation_steps == 2);
  const auto& value = resolved(config, "gradient_accumulation_steps");
  REQUIRE(value.source == Source::derived);
  REQUIRE(value.note == "= 64 / 4 / 8 (world size)");
}

TEST_CASE("batch: train and accumulation give the micro batch", "[config][batch]") {
  const Config config = read(R"({"train_batch_size": 64, "gradient_accumulation_steps": 4})", 2);
  REQUIRE(config.batch.micro_batch_per_gpu == 8);
}

TEST_CASE("batch: micro and accumulation give the train batch", "[config][batch]") {
  const Config config =
      read(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5})", 4);
  REQUIRE(config.batch.train_batch_size == 60);
  REQUIRE(resolved(config, "train_batch_size").note == "= 3 * 5 * 4 (world size)");
}

TEST_CASE("batch: only the train batch means one accumulation step", "[config][batch]") {
  const Config config = read(R"({"train_batch_size": 32})", 4);
  REQUIRE(config.batch.micro_batch_per_gpu == 8);
  REQUIRE(config.batch.gradient_accumulation_steps == 1);
}

TEST_CASE("batch: only the micro batch means one accumulation step", "[config][batch]") {
  const Config config = read(R"({"train_micro_batch_size_per_gpu": 2})", 3);
  REQUIRE(config.batch.train_batch_size == 6);
  REQUIRE(config.batch.gradient_accumulation_steps == 1);
}

TEST_CASE("batch: a train batch the world size does not divide fails DeepSpeed's check",
          "[config][batch]") {
  REQUIRE_THAT(error_of(R"({"train_batch_size": 10})", 4),
               Catch::Contains("10 is not a multiple of the world size 4"));
}

TEST_CASE("batch: a train batch smaller than the world is refused", "[config][batch]") {
  REQUIRE(error_of(R"({"train_batch_size": 2})", 4) ==
          "train_micro_batch_size_per_gpu: derived as 0 from train_batch_size 2 on world size 4; "
          "train_batch_size must be at least train_micro_batch_size_per_gpu * "
          "gradient_accumulation_steps * world size");
}

TEST_CASE("batch: neither train nor micro batch is an error saying how to supply one",
          "[config][batch]") {
  REQUIRE(error_of(R"({"gradient_accumulation_steps": 4})") ==
          "train_batch_size and train_micro_batch_size_per_gpu: neither is given (or both are "
          "\"auto\" with nothing to supply them); give at least one: supply it with zero-train "
          "--micro-batch, --set train_micro_batch_size_per_gpu=VALUE, or a C API override of "
          "\"train_micro_batch_size_per_gpu\"");
}

TEST_CASE("batch: sizes must be positive integers", "[config][batch]") {
  REQUIRE(error_of(R"({"train_batch_size": -8})") ==
          "train_batch_size: expected an integer >= 1, got -8");
  REQUIRE(error_of(R"({"train_batch_size": 8.5})") ==
          "train_batch_size: expected an integer >= 1, got 8.5");
  REQUIRE(error_of(R"({"train_batch_size": "8"})") ==
          "train_batch_size: expected an integer >= 1, got \"8\"");
}

TEST_CASE("batch: \"auto\" keys are derived from the others", "[config][batch]") {
  const Config config = read(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto",
                                 "gradient_accumulation_steps": "auto"})",
                             8);
  REQUIRE(config.batch.micro_batch_per_gpu == 8);
  REQUIRE(resolved(config, "train_micro_batch_size_per_gpu").note ==
          "= 64 / 8 (world size) (from \"auto\")");
}

TEST_CASE("batch: an override fills an \"auto\" key", "[config][batch][override]") {
  const Config config =
      read(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                                 "gradient_accumulation_steps": "auto"})",
           2, {"train_micro_batch_size_per_gpu=4"});
  REQUIRE(config.batch.micro_batch_per_gpu == 4);
  REQUIRE(config.batch.train_batch_size == 8);
  REQUIRE(resolved(config, "train_micro_batch_size_per_gpu").source == Source::override_value);
}

// ------------------------------------------------------------------------------- overrides

TEST_CASE("overrides: values parse as JSON, else as strings", "[config][override]") {
  REQUIRE(parse_override("zero_optimization.reduce_bucket_size=5e8").value == 5e8);
  REQUIRE(parse_override("zero_optimization.offload_optimizer.device=cpu").value == "cpu");
  REQUIRE(parse_override("optimizer.params.betas=[0.9,0.95]").value.size() == 2);
  REQUIRE(parse_override("fp16.enabled=true").value == true);
  REQUIRE_THROWS_WITH(parse_override("stage"),
                      "override \"stage\": expected KEY=VALUE, e.g. zero_optimization.stage=3");
}

TEST_CASE("overrides: create missing sections and replace file values", "[config][override]") {
  const Config config =
      read(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1}})", 1,
           {"zero_optimization.stage=3", "zero_optimization.offload_optimizer.device=cpu"});
  REQUIRE(config.zero.stage == 3);
  REQUIRE(config.zero.offload_optimizer.device == OffloadDevice::cpu);
  REQUIRE(resolved(config, "zero_optimization.stage").source == Source::override_value);
}

TEST_CASE("overrides: a path through a non-object is an error", "[config][override]") {
  REQUIRE(error_of(R"({"train_batch_size": 8, "gradient_clipping": 1.0})", 1,
                   {"gradient_clipping.max=2"}) ==
          "override gradient_clipping.max: gradient_clipping is 1.0 in the config, not an object, "
          "so it has no key max");
}

TEST_CASE("overrides: an unknown key in an override is reported like one in the file",
          "[config][override]") {
  REQUIRE(error_of(R"({"train_batch_size": 8})", 1, {"zero_optimization.stag=2"}) ==
          "zero_optimization.stag: unknown key; did you mean stage?");
}

TEST_CASE(
    "provenance: every value says whether it came from the file, a default, an override "
    "or a derivation",
    "[config][provenance]") {
  const Config config =
      read(R"({"train_batch_size": 16, "gradient_clipping": 0.5})", 2, {"steps_per_print=5"});
  REQUIRE(resolved(config, "gradient_clipping").source == Source::file);
  REQUIRE(resolved(config, "wall_clock_breakdown").source == Source::default_value);
  REQUIRE(resolved(config, "steps_per_print").source == Source::override_value);
  REQUIRE(resolved(config, "train_micro_batch_size_per_gpu").source == Source::derived);
  REQUIRE(config.steps_per_print == 5);
}

TEST_CASE("comm_timeout_s: zero's own key, 1800 s by default, positive seconds", "[config][comm]") {
  REQUIRE(read(R"({"train_batch_size": 8})").comm_timeout_s == 1800.0);
  REQUIRE(read(R"({"train_batch_size": 8, "comm_timeout_s": 2.5})").comm_timeout_s == 2.5);
  REQUIRE(read(R"({"train_batch_size": 8})", 1, {"comm_timeout_s=60"}).comm_timeout_s == 60.0);
  REQUIRE_THAT(error_of(R"({"train_batch_size": 8, "comm_timeout_s": 0})"),
               Catch::Contains("comm_timeout_s"));
  REQUIRE_THAT(error_of(R"({"train_batch_size": 8, "comm_timeout_s": "soon"})"),
               Catch::Contains("comm_timeout_s"));
}

}  // namespace zero::config
