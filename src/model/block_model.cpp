#include "model/block_model.h"

#include <cstring>

namespace strata::model {

BlockModel::BlockModel(gpu::Device& device, const RunShape& shape, DType dtype, int64_t layers,
                       int64_t vocab, int64_t channels, std::string name)
    : device_(device),
      k_ops_(device.kernels()),
      shape_(shape),
      dtype_(dtype),
      layers_(layers),
      vocab_(vocab),
      channels_(channels),
      name_(std::move(name)) {
  k_ = (shape.checkpoint_interval <= 0 || shape.checkpoint_interval >= layers)
           ? layers
           : shape.checkpoint_interval;
}

BlockModel::~BlockModel() {
  if (stream_) (void)stream_->synchronize();
}

Result<gpu::DeviceBuffer> BlockModel::alloc(size_t bytes) {
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer buf, device_.allocate(std::max<size_t>(bytes, 1)));
  device_bytes_ += buf.size_bytes();
  return buf;
}

Status BlockModel::allocate(const BlockStorage& storage) {
  STRATA_ASSIGN_OR_RETURN(stream_, device_.create_stream());
  const auto blocks = static_cast<size_t>(num_blocks());
  for (const auto* v : {&storage.params, &storage.grads}) {
    if (!v->empty() && v->size() != blocks) {
      return make_error(ErrorCode::kConfig, "block storage names ", v->size(),
                        " blocks; the model has ", blocks);
    }
  }
  const size_t es = dtype_size(dtype_);
  const auto n = static_cast<size_t>(rows());
  const auto c = static_cast<size_t>(channels_);
  for (int64_t b = 0; b < num_blocks(); ++b) {
    const size_t bytes = static_cast<size_t>(block_numel(b)) * es;
    const auto i = static_cast<size_t>(b);
    gpu::DeviceBuffer p, g;
    if (storage.params.empty() || storage.params[i]) {
      STRATA_ASSIGN_OR_RETURN(p, alloc(bytes));
      param_bytes_ += p.size_bytes();
    }
    if (storage.grads.empty() || storage.grads[i]) {
      STRATA_ASSIGN_OR_RETURN(g, alloc(bytes));
      grad_bytes_ += g.size_bytes();
    }
    params_.push_back(std::move(p));
    grads_.push_back(std::move(g));
  }
  const int64_t segments = num_segments();
  for (int64_t s = 0; s < segments; ++s) {
    gpu::DeviceBuffer x;
    if (storage.checkpoints || s + 1 == segments) {
      STRATA_ASSIGN_OR_RETURN(x, alloc(n * c * es));
    }
    checkpoint_at_.push_back(x.data());
    checkpoints_.push_back(std::move(x));
  }
  x_in_.resize(static_cast<size_t>(k_));
  for (int64_t s = 1; s < k_; ++s) {
    STRATA_ASSIGN_OR_RETURN(x_in_[static_cast<size_t>(s)], alloc(n * c * es));
  }
  STRATA_ASSIGN_OR_RETURN(x_final_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(dres_, alloc(n * c * es));
  STRATA_ASSIGN_OR_RETURN(losses_, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(tokens_, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(targets_, alloc(n * 4));
  STRATA_RETURN_IF_ERROR(allocate_family());
  STRATA_ASSIGN_OR_RETURN(host_losses_, cpu::default_pinned_pool().allocate(n * 4));
  STRATA_ASSIGN_OR_RETURN(host_batch_, cpu::default_pinned_pool().allocate(n * 8));
  STRATA_ASSIGN_OR_RETURN(batch_copied_, device_.create_event());
  return zero_grad();
}

void* BlockModel::layer_input(int64_t l) const {
  if (l % k_ == 0) return checkpoint_at_[static_cast<size_t>(l / k_)];
  return x_in_[static_cast<size_t>(l % k_)].data();
}

void* BlockModel::layer_output(int64_t l) const {
  return l + 1 == layers_ ? x_final_.data() : layer_input(l + 1);
}

Status BlockModel::set_checkpoint(int64_t seg, void* at) {
  if (seg < 0 || seg >= num_segments() || !caller_checkpoint(seg)) {
    return make_error(ErrorCode::kConfig, name_, "::set_checkpoint(", seg,
                      "): not a segment whose kept input the caller holds");
  }
  checkpoint_at_[static_cast<size_t>(seg)] = at;
  return ok_status();
}

size_t BlockModel::checkpoint_bytes() const {
  return static_cast<size_t>(rows() * channels_) * dtype_size(dtype_);
}

Status BlockModel::check_resident(bool grads) const {
  for (int64_t seg = 0; seg < num_segments(); ++seg) {
    if (checkpoint_at_[static_cast<size_t>(seg)] == nullptr) {
      return make_error(ErrorCode::kConfig, "the kept input of checkpoint segment ", seg,
                        " is the engine's (BlockStorage::checkpoints): use the per-layer entry "
                        "points");
    }
  }
  for (int64_t b = 0; b < num_blocks(); ++b) {
    if (param_block(b) == nullptr || (grads && grad_block(b) == nullptr)) {
      return make_error(ErrorCode::kConfig, "block ", b,
                        " is not resident on the device (its parameters or gradients are kept "
                        "by the engine): use the per-layer entry points");
    }
  }
  return ok_status();
}

Status BlockModel::upload_params(int64_t block, const float* host) {
  if (block < 0 || block >= num_blocks()) {
    return make_error(ErrorCode::kConfig, "parameter block ", block, " is not in [0, ",
                      num_blocks(), ")");
  }
  if (param_block(block) == nullptr) {
    return make_error(ErrorCode::kConfig, "block ", block,
                      " has no parameters on the device (the engine keeps them sharded)");
  }
  const auto numel = static_cast<size_t>(block_numel(block));
  std::vector<char> staging(numel * dtype_size(dtype_));
  convert(host, DType::kF32, staging.data(), dtype_, numel);
  return stream_->copy_now(param_block(block), staging.data(), staging.size(),
                           gpu::CopyKind::kHostToDevice);
}

Status BlockModel::copy_block(int64_t block, const gpu::DeviceBuffer& buf, float* host) {
  if (block < 0 || block >= num_blocks()) {
    return make_error(ErrorCode::kConfig, "parameter block ", block, " is not in [0, ",
                      num_blocks(), ")");
  }
  if (buf.data() == nullptr) {
    return make_error(ErrorCode::kConfig, "block ", block,
                      " is not on the device (the engine keeps it sharded)");
  }
  const auto numel = static_cast<size_t>(block_numel(block));
  std::vector<char> staging(numel * dtype_size(dtype_));
  STRATA_RETURN_IF_ERROR(
      stream_->copy_now(staging.data(), buf.data(), staging.size(), gpu::CopyKind::kDeviceToHost));
  convert(staging.data(), dtype_, host, DType::kF32, numel);
  return ok_status();
}

Status BlockModel::download_params(int64_t block, float* host) {
  if (block < 0 || block >= num_blocks()) return copy_block(block, params_[0], host);
  return copy_block(block, params_[static_cast<size_t>(block)], host);
}

Status BlockModel::download_grads(int64_t block, float* host) {
  if (block < 0 || block >= num_blocks()) return copy_block(block, grads_[0], host);
  return copy_block(block, grads_[static_cast<size_t>(block)], host);
}

Status BlockModel::check_layer(int64_t l) const {
  if (l < 0 || l >= layers_) {
    return make_error(ErrorCode::kConfig, "layer ", l, " is not in [0, ", layers_, ")");
  }
  return ok_status();
}

Status BlockModel::zero_grad() {
  for (auto& g : grads_) {
    if (g.data() != nullptr) STRATA_RETURN_IF_ERROR(stream_->memset(g.data(), 0, g.size_bytes()));
  }
  return ok_status();
}

Status BlockModel::check_batch(const int32_t* tokens, const int32_t* targets) const {
  const int64_t n = rows();
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_) {
      return make_error(ErrorCode::kConfig, "token ", tokens[i], " at position ", i,
                        " is not in [0, vocab=", vocab_, ")");
    }
    if (targets != nullptr && targets[i] >= vocab_) {
      return make_error(ErrorCode::kConfig, "target ", targets[i], " at position ", i,
                        " is not below vocab=", vocab_);
    }
  }
  return ok_status();
}

Status BlockModel::set_batch(gpu::Stream& s, const int32_t* tokens, const int32_t* targets) {
  STRATA_RETURN_IF_ERROR(check_batch(tokens, targets));
  const int64_t n = rows();
  int64_t valid = 0;
  for (int64_t i = 0; targets != nullptr && i < n; ++i) valid += targets[i] >= 0 ? 1 : 0;
  const auto bytes = static_cast<size_t>(n) * 4;
  STRATA_RETURN_IF_ERROR(batch_copied_->synchronize());  // the staging is reused
  std::memcpy(host_batch_.bytes(), tokens, bytes);
  STRATA_RETURN_IF_ERROR(
      s.copy(tokens_.data(), host_batch_.bytes(), bytes, gpu::CopyKind::kHostToDevice));
  have_targets_ = targets != nullptr;
  valid_targets_ = valid;
  losses_ready_ = false;
  if (targets != nullptr) {
    std::memcpy(host_batch_.bytes() + bytes, targets, bytes);
    STRATA_RETURN_IF_ERROR(
        s.copy(targets_.data(), host_batch_.bytes() + bytes, bytes, gpu::CopyKind::kHostToDevice));
  }
  return s.record(*batch_copied_);
}

Status BlockModel::layer_forward(gpu::Stream& s, int64_t l, const void* params) {
  STRATA_RETURN_IF_ERROR(check_layer(l));
  STRATA_RETURN_IF_ERROR(forward_layer(s, l, params, true));
  if (l + 1 == layers_) {
    resident_segment_ = num_segments() - 1;
    resident_slot_ = slot_;
  }
  return ok_status();
}

Status BlockModel::layer_recompute(gpu::Stream& s, int64_t l, const void* params) {
  STRATA_RETURN_IF_ERROR(check_layer(l));
  // The segment's last layer's output is already kept (the next segment's input, or x_final).
  const int64_t seg = l / k_;
  STRATA_RETURN_IF_ERROR(forward_layer(s, l, params, l + 1 < segment_end(seg)));
  resident_segment_ = seg;
  resident_slot_ = slot_;
  return ok_status();
}

Status BlockModel::layer_backward(gpu::Stream& s, int64_t l, const void* params, void* grads) {
  STRATA_RETURN_IF_ERROR(check_layer(l));
  if (l / k_ != resident_segment_ || resident_slot_ != slot_) {
    return make_error(ErrorCode::kConfig, name_, "::layer_backward(", l,
                      "): its segment's activations are not resident",
                      resident_slot_ != slot_ ? " for this micro-batch slot" : "",
                      " (layer_recompute first)");
  }
  return backward_layer(s, l, params, grads);
}

float BlockModel::dloss() const {
  return valid_targets_ > 0 ? loss_scale_ / static_cast<float>(valid_targets_) : 0.0f;
}

Status BlockModel::copy_losses(gpu::Stream& s) {
  losses_ready_ = true;
  return s.copy(host_losses_.data(), losses_.data(), static_cast<size_t>(rows()) * 4,
                gpu::CopyKind::kDeviceToHost);
}

Status BlockModel::linear(gpu::Stream& s, void* y, const void* x, const void* w, const void* bias,
                          int64_t out, int64_t in, gpu::Epilogue epilogue, void* aux) {
  gpu::MatmulArgs mm;
  mm.dtype_ab = dtype_;
  mm.dtype_c = dtype_;
  mm.a = x;
  mm.b = w;
  mm.bias = bias;
  mm.c = y;
  mm.m = rows();
  mm.n = out;
  mm.k = in;
  mm.trans_b = true;
  mm.epilogue = epilogue;
  mm.aux = aux;
  return k_ops_.matmul(s, mm);
}

Status BlockModel::weight_grad(gpu::Stream& s, void* dw, const void* dy, const void* x, int64_t out,
                               int64_t in) {
  gpu::MatmulArgs mm;
  mm.dtype_ab = dtype_;
  mm.dtype_c = dtype_;
  mm.a = dy;
  mm.b = x;
  mm.c = dw;
  mm.m = out;
  mm.n = in;
  mm.k = rows();
  mm.trans_a = true;
  mm.beta = 1.0f;
  return k_ops_.matmul(s, mm);
}

Status BlockModel::input_grad(gpu::Stream& s, void* dx, const void* dy, const void* w, int64_t out,
                              int64_t in, gpu::Epilogue epilogue, const void* aux) {
  gpu::MatmulArgs mm;
  mm.dtype_ab = dtype_;
  mm.dtype_c = dtype_;
  mm.a = dy;
  mm.b = w;
  mm.c = dx;
  mm.m = rows();
  mm.n = in;
  mm.k = out;
  mm.epilogue = epilogue;
  mm.aux = const_cast<void*>(aux);  // read by the GELU backward epilogue
  return k_ops_.matmul(s, mm);
}

Result<float> BlockModel::forward(const int32_t* tokens, const int32_t* targets) {
  STRATA_RETURN_IF_ERROR(check_resident(/*grads=*/false));
  gpu::Stream& s = *stream_;
  const void* shared = param_block(layers_);
  STRATA_RETURN_IF_ERROR(set_batch(s, tokens, targets));
  STRATA_RETURN_IF_ERROR(embedding_forward(s, shared));
  for (int64_t l = 0; l < layers_; ++l) {
    STRATA_RETURN_IF_ERROR(layer_forward(s, l, param_block(l)));
  }
  STRATA_RETURN_IF_ERROR(head_forward(s, shared));
  STRATA_RETURN_IF_ERROR(s.synchronize());
  return mean_loss();
}

float BlockModel::mean_loss() const {
  if (!losses_ready_ || valid_targets_ == 0) return 0.0f;
  double sum = 0.0;  // fixed order on the host
  const int64_t n = rows();
  for (int64_t i = 0; i < n; ++i) sum += host_losses_.as<float>()[i];
  return static_cast<float>(sum / static_cast<double>(valid_targets_));
}

Status BlockModel::backward() {
  if (!have_targets_) {
    return make_error(ErrorCode::kConfig, name_, "::backward needs a forward with targets first");
  }
  STRATA_RETURN_IF_ERROR(check_resident(/*grads=*/true));
  gpu::Stream& s = *stream_;
  const void* shared = param_block(layers_);
  void* shared_grads = grad_block(layers_);
  STRATA_RETURN_IF_ERROR(head_backward(s, shared, shared_grads));
  for (int64_t seg = num_segments() - 1; seg >= 0; --seg) {
    const int64_t first = segment_begin(seg);
    const int64_t end = segment_end(seg);
    if (seg != num_segments() - 1) {
      for (int64_t l = first; l < end; ++l) {
        STRATA_RETURN_IF_ERROR(layer_recompute(s, l, param_block(l)));
      }
    }
    for (int64_t l = end - 1; l >= first; --l) {
      STRATA_RETURN_IF_ERROR(layer_backward(s, l, param_block(l), grad_block(l)));
    }
  }
  STRATA_RETURN_IF_ERROR(embedding_backward(s, shared_grads));
  have_targets_ = false;  // the logits now hold gradients of a consumed loss
  return s.synchronize();
}

Status BlockModel::logits_to_host(std::vector<float>& out) {
  const int64_t n = rows();
  const int64_t vp = logits_stride_;
  const size_t es = dtype_size(dtype_);
  std::vector<char> staging(static_cast<size_t>(n * vp) * es);
  STRATA_RETURN_IF_ERROR(stream_->copy_now(staging.data(), logits_.data(), staging.size(),
                                           gpu::CopyKind::kDeviceToHost));
  out.resize(static_cast<size_t>(n * vocab_));
  for (int64_t r = 0; r < n; ++r) {
    convert(staging.data() + static_cast<size_t>(r * vp) * es, dtype_, out.data() + r * vocab_,
            DType::kF32, static_cast<size_t>(vocab_));
  }
  return ok_status();
}

size_t BlockModel::MicroState::device_bytes() const {
  size_t n = 0;
  for (const gpu::DeviceBuffer* b : {&tokens, &targets, &losses, &x_final, &dres}) {
    n += b->size_bytes();
  }
  for (const gpu::DeviceBuffer& b : checkpoints) n += b.size_bytes();
  return n;
}

Result<BlockModel::MicroState> BlockModel::new_micro_state() {
  const size_t es = dtype_size(dtype_);
  const auto n = static_cast<size_t>(rows());
  const size_t act = n * static_cast<size_t>(channels_) * es;
  MicroState m;
  STRATA_ASSIGN_OR_RETURN(m.tokens, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(m.targets, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(m.losses, alloc(n * 4));
  STRATA_ASSIGN_OR_RETURN(m.x_final, alloc(act));
  STRATA_ASSIGN_OR_RETURN(m.dres, alloc(act));
  for (const gpu::DeviceBuffer& held : checkpoints_) {
    gpu::DeviceBuffer x;
    if (held.data() != nullptr) {
      STRATA_ASSIGN_OR_RETURN(x, alloc(act));
    }
    m.checkpoint_at.push_back(x.data());
    m.checkpoints.push_back(std::move(x));
  }
  STRATA_ASSIGN_OR_RETURN(m.host_losses, cpu::default_pinned_pool().allocate(n * 4));
  STRATA_ASSIGN_OR_RETURN(m.host_batch, cpu::default_pinned_pool().allocate(n * 8));
  STRATA_ASSIGN_OR_RETURN(m.batch_copied, device_.create_event());
  return m;
}

void BlockModel::exchange(MicroState& m) {
  std::swap(tokens_, m.tokens);
  std::swap(targets_, m.targets);
  std::swap(losses_, m.losses);
  std::swap(x_final_, m.x_final);
  std::swap(dres_, m.dres);
  std::swap(checkpoints_, m.checkpoints);
  std::swap(checkpoint_at_, m.checkpoint_at);
  std::swap(host_losses_, m.host_losses);
  std::swap(host_batch_, m.host_batch);
  std::swap(batch_copied_, m.batch_copied);
  std::swap(have_targets_, m.have_targets);
  std::swap(losses_ready_, m.losses_ready);
  std::swap(valid_targets_, m.valid_targets);
}

Status BlockModel::set_micro_slots(int count) {
  if (count < 1 || count > 1024) {
    return make_error(ErrorCode::kConfig, name_, "::set_micro_slots(", count,
                      "): not accepted (1 to 1024 micro-batch slots)");
  }
  STRATA_RETURN_IF_ERROR(select_micro(0));
  if (count == micro_slots()) return ok_status();
  // Slots beyond `count` may be in use by enqueued work: let it finish before freeing them.
  STRATA_RETURN_IF_ERROR(stream_->synchronize());
  if (parked_.empty()) parked_.emplace_back();  // slot 0's entry (its state is the members')
  while (static_cast<int>(parked_.size()) > count) {
    device_bytes_ -= parked_.back().device_bytes();
    parked_.pop_back();
  }
  while (static_cast<int>(parked_.size()) < count) {
    STRATA_ASSIGN_OR_RETURN(MicroState m, new_micro_state());
    parked_.push_back(std::move(m));
  }
  if (count == 1) parked_.clear();
  return ok_status();
}

Status BlockModel::select_micro(int slot) {
  if (slot < 0 || slot >= micro_slots()) {
    return make_error(ErrorCode::kConfig, name_, "::select_micro(", slot, "): not in [0, ",
                      micro_slots(), ") (set_micro_slots)");
  }
  if (slot == slot_) return ok_status();
  exchange(parked_[static_cast<size_t>(slot_)]);
  exchange(parked_[static_cast<size_t>(slot)]);
  slot_ = slot;
  return ok_status();
}

void* BlockModel::tied_head_grad(void* shared_grads) const {
  return head_grads_.data() != nullptr ? head_grads_.data()
                                       : elem(shared_grads, tied_head_offset(), dtype_);
}

Status BlockModel::set_separate_head_grads(bool on) {
  const auto bytes = static_cast<size_t>(tied_head_numel()) * dtype_size(dtype_);
  if (!on || bytes == 0) {
    if (head_grads_.data() == nullptr) return ok_status();
    STRATA_RETURN_IF_ERROR(stream_->synchronize());
    device_bytes_ -= head_grads_.size_bytes();
    head_grads_ = gpu::DeviceBuffer();
    return ok_status();
  }
  if (head_grads_.data() != nullptr) return ok_status();
  STRATA_ASSIGN_OR_RETURN(head_grads_, alloc(bytes));
  STRATA_RETURN_IF_ERROR(stream_->memset(head_grads_.data(), 0, bytes));
  return stream_->synchronize();
}

Status BlockModel::fold_head_grads(gpu::Stream& s, void* shared_grads) {
  if (head_grads_.data() == nullptr) return ok_status();
  void* at = elem(shared_grads, tied_head_offset(), dtype_);
  STRATA_RETURN_IF_ERROR(k_ops_.add(s, at, at, head_grads_.data(), tied_head_numel(), dtype_));
  return s.memset(head_grads_.data(), 0, head_grads_.size_bytes());
}

}  // namespace strata::model
