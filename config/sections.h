// The readers of each part of the config, called in order by read_config (config.cpp). Each
// fills its part of Config from the root Section and reports problems through the Reader.
#pragma once

#include "config/config.h"
#include "config/reader.h"

namespace zero::config {

void read_precision(Section& root, Config& config);          // fp16, bf16, data_types, comm dtype
void read_zero_optimization(Section& root, Config& config);  // zero_optimization, offload_*
void read_optimizer(Section& root, Config& config);          // optimizer
void read_scheduler(Section& root, Config& config);          // scheduler (after optimizer)
void read_batch(Section& root, Config& config);              // the three batch keys
void read_runtime_keys(Section& root, Config& config);       // clipping, printing, aio, ...
void declare_foreign_sections(Section& root);                // DeepSpeed features we lack

// Predicates for Section::unsupported_if.
bool enabled_flag_on(const json& value);  // {"enabled": true, ...}
bool truthy(const json& value);           // true, non-zero, non-empty
bool present_and_not_empty(const json& value);

}  // namespace zero::config
