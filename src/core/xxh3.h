// xxh3 (libxxhash) for every checksum in strata: swap-store extents, checkpoint files. On x86-64
// the library's run-time dispatch is used (its AVX2 / AVX-512 code when the CPU has it): the
// default entry point is the SSE2 build, about 7 GB/s on one core of the development machine
// against 30 GB/s dispatched, which decides whether checksummed NVMe traffic keeps up with the
// disk. The hash values are the same either way (tests/core/test_xxh3.cpp). Link
// PkgConfig::XXHASH where this is included.
#pragma once

#include <xxhash.h>

#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // XXH3_64bits and XXH3_64bits_update become the dispatched ones
#endif
