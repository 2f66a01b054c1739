#include "model_spec.h"

#include "model/gpt.h"
#include "model/init.h"
#include "model/llama.h"
#include "model/llama_layout.h"

namespace strata::train_gpt {

int64_t ModelSpec::block_numel(int64_t block) const {
  return llama ? model::llama_block_numel(lcfg, block) : model::GptModel::block_numel(gpt, block);
}

std::vector<int64_t> ModelSpec::block_numels() const {
  return llama ? model::LlamaModel::block_numels(lcfg) : model::GptModel::block_numels(gpt);
}

model::ModelProbe ModelSpec::probe() const {
  return llama ? model::LlamaModel::probe(lcfg) : model::GptModel::probe(gpt);
}

std::vector<float> ModelSpec::init_block(int64_t block, uint64_t seed) const {
  return llama ? model::init_llama_block(lcfg, block, seed) : model::init_block(gpt, block, seed);
}

Result<std::unique_ptr<model::Model>> ModelSpec::create(gpu::Device& dev,
                                                        const model::RunShape& shape,
                                                        const model::BlockStorage& storage,
                                                        bool init, uint64_t seed) const {
  if (llama) {
    STRATA_ASSIGN_OR_RETURN(auto m, model::LlamaModel::create(dev, lcfg, shape, storage));
    if (init) STRATA_RETURN_IF_ERROR(m->init_params(seed));
    return std::unique_ptr<model::Model>(std::move(m));
  }
  STRATA_ASSIGN_OR_RETURN(auto m, model::GptModel::create(dev, gpt, shape, storage));
  if (init) STRATA_RETURN_IF_ERROR(m->init_params(seed));
  return std::unique_ptr<model::Model>(std::move(m));
}

}  // namespace strata::train_gpt
