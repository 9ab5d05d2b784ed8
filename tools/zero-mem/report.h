// zero-mem's output: a table for people and JSON for scripts.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tools/zero-mem/planner.h"

namespace zero::mem {

struct ReportOptions {
  bool deepspeed = false;  // --deepspeed-estimate: DeepSpeed's formulas beside ours
  bool details = false;    // --details: every arena of every row
};

std::string report_text(const Request& request, const Plan& plan, const ReportOptions& options);
nlohmann::json report_json(const Request& request, const Plan& plan, const ReportOptions& options);

// The config keys a row sets, as `--set` arguments and as a JSON fragment.
nlohmann::json row_keys(const Row& row, const Request& request);

}  // namespace zero::mem
