# Rewrites a CUDA C++ source (IN) into C++ for the SIMT emulator (OUT), see simt_cuda.h:
#   kernel<<<grid, block, bytes, stream>>>(args)  ->  kernel | simt::config(...) % simt::args(...)
#   extern __shared__ [__align__(N)] T name[];    ->  T* name = simt::dynamic_shared<T>();
# (the emulator's dynamic shared memory is 128-byte aligned)
# Lines keep their numbers, and a #line directive names the original file in diagnostics.
file(READ "${IN}" text)
string(REPLACE "<<<" " | ::simt::config(" text "${text}")
string(REPLACE ">>>(" ") % ::simt::args(" text "${text}")
string(REGEX REPLACE "extern __shared__ (__align__\\([0-9]+\\) )?([A-Za-z_0-9 ]+) ([A-Za-z_0-9]+)\\[\\];"
       "\\2* \\3 = ::simt::dynamic_shared<\\2>();" text "${text}")
if(text MATCHES "<<<|>>>|extern __shared__")
  message(FATAL_ERROR "${IN}: a launch or shared-memory form that translate_cu.cmake does not know")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${text}")
file(RENAME "${OUT}.tmp" "${OUT}")
