// Engine messages as a command line would name the fields (engine_config.h's references
// rendered as --field-name), so that the tests assert the same text train_gpt prints for the
// fields whose flag is the field's name with dashes.
#pragma once

#include <algorithm>
#include <string>

#include "engine/engine_config.h"

namespace strata::engine::test {

inline std::string as_flags(const std::string& message) {
  return render_fields(message, [](Field f) {
    std::string flag(field_name(f));
    std::replace(flag.begin(), flag.end(), '_', '-');
    return "--" + flag;
  });
}

}  // namespace strata::engine::test
