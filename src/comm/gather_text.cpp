#include "comm/gather_text.h"

#include <algorithm>
#include <cstdint>

namespace strata::comm {

Result<std::vector<std::string>> gather_text(Communicator& comm, const std::string& mine,
                                             int root) {
  const auto n = static_cast<size_t>(comm.size());
  if (mine.size() > UINT32_MAX) {
    return make_error(ErrorCode::kUnsupported, "gather_text: a string of ", mine.size(),
                      " bytes (at most 4 GiB)");
  }
  const auto length = static_cast<uint32_t>(mine.size());
  std::vector<uint32_t> lengths(n, 0);
  STRATA_RETURN_IF_ERROR(comm.all_gather(&length, lengths.data(), 1, DType::kF32));
  // Moved as 16-bit units: the slot is even.
  const size_t slot = (*std::max_element(lengths.begin(), lengths.end()) + size_t{1}) / 2 * 2;
  std::vector<std::string> out;
  if (slot == 0) {
    if (comm.rank() == root) out.assign(n, std::string());
    return out;
  }
  std::string padded = mine;
  padded.resize(slot, '\0');
  std::string all(comm.rank() == root ? slot * n : 0, '\0');
  STRATA_RETURN_IF_ERROR(comm.gather(padded.data(), all.data(), slot / 2, DType::kBF16, root));
  if (comm.rank() != root) return out;
  for (size_t r = 0; r < n; ++r) out.push_back(all.substr(r * slot, lengths[r]));
  return out;
}

}  // namespace strata::comm
