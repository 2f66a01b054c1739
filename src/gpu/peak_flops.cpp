#include "gpu/peak_flops.h"

namespace strata::gpu {

double datasheet_peak_flops(std::string_view name, DType dtype) {
  if (dtype == DType::kF32) return 0.0;
  auto has = [name](std::string_view part) { return name.find(part) != std::string_view::npos; };
  // Most specific first: "H100 PCIe" before any H100; "GH200" is an H200's rate.
  if (has("H100") && has("PCIe")) return 756e12;
  if (has("H100") || has("H200")) return 989e12;
  if (has("A100")) return 312e12;
  return 0.0;
}

double datasheet_memory_bandwidth(std::string_view name) {
  auto has = [name](std::string_view part) { return name.find(part) != std::string_view::npos; };
  if (has("H100") && has("PCIe")) return 2.0e12;
  if (has("GH200")) return 4.0e12;
  if (has("H200")) return 4.8e12;
  if (has("H100")) return 3.35e12;
  if (has("A100")) return 2.0e12;
  return 0.0;
}

}  // namespace strata::gpu
