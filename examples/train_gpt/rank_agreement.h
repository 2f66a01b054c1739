// Before anything is allocated, the ranks of a run agree on what they run: every flag as each
// rank parsed it (defaults included), the content of its DeepSpeed config, and each data file's
// identity (its size and a hash of its first and last 64 KiB, so node-local copies of one file
// agree). Rank 0 gathers the ranks' lists and compares them; a difference is one error on every
// rank naming the setting and each rank's value (ranks that disagree would hang, corrupt memory
// or train replicas that differ). --nvme-path may differ (each node's own drive).
// Collective: every rank calls it.
#pragma once

#include <CLI/CLI.hpp>

#include "comm/communicator.h"
#include "core/status.h"
#include "data.h"
#include "ds_config.h"

namespace strata::train_gpt {

Status check_ranks_agree(const CLI::App& app, const DataSource& source, const ConfigReport& config,
                         comm::Communicator& world);

}  // namespace strata::train_gpt
