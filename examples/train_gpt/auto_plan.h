// The planner's choices in the trainer's words (planner/choose.h, docs/planner.md): --auto's
// offload search (what it plans against, the choice, the runner-up and why, or the refusal
// naming the setting that needs the least memory) and the micro-batch orders' predictions, in
// train_gpt's flags.
#pragma once

#include <string>

#include "core/status.h"
#include "model/config.h"
#include "model_spec.h"
#include "planner/search.h"

namespace strata::train_gpt {

planner::ModelPlanning model_planning(const ModelSpec& spec, const model::RunShape& shape);

// A candidate's settings as the flags that give them.
std::string settings_flags(const planner::Settings& s);

// --auto's choice (r.best >= 0): the candidates that fit, the choice, the runner-up and why.
std::string explain(const planner::OffloadSearch& r);
// Why --auto has no choice (r.best < 0; `why`: the planner's status).
Status refusal(const planner::OffloadSearch& r, const Status& why);

// The line of --plan and --microbatch-order auto: the order taken (layer or not) and each
// order's prediction or refusal; `decided`: the planner's choice, not the flag's.
std::string order_line(const planner::OrderSearch& o, bool layer, bool decided);
// "plan: collectives device (the planner's choice: --comm auto); host: predicted ...; device:
// ...": where the collectives run, both places priced.
std::string collectives_line(const planner::CollectivesSearch& o);

}  // namespace strata::train_gpt
