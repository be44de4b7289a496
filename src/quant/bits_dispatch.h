// Compile-time dispatch on a KV block's code width: with_bits(bits, f) calls
// f(std::integral_constant<int, B>{}) for B = bits, so each SIMD kernel is instantiated once per
// width. The widths are those make_kv_block_layout allows (quant/kv_block_layout.h: 1, 2, 3, 4, 8,
// 16); any other calls nothing, since no layout carries it.
#pragma once
#include <type_traits>

namespace mpkv {

template <class F>
void with_bits(int bits, F&& f) {
  switch (bits) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 16: f(std::integral_constant<int, 16>{}); break;
    default: break;
  }
}

}  // namespace mpkv
