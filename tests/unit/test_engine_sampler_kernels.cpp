// The sampler kernels (src/engine/sampler_kernels.h) at every tier this CPU runs, against the
// scalar loops they replace (_ref) and, for the weights, against exp evaluated here in long double
// (not by the code under test).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/sampler_kernels.h"

namespace mpkv {
namespace {

std::vector<Isa> tiers() {
  std::vector<Isa> v{Isa::scalar};
  if (best_isa() >= Isa::avx2) v.push_back(Isa::avx2);
  if (best_isa() >= Isa::avx512) v.push_back(Isa::avx512);
  return v;
}

// Normal logits with a random scale; some rows get ties, -inf, NaN, +-0.
std::vector<float> logits(std::mt19937& g, int n, int kind) {
  std::normal_distribution<float> nd(0.0f, std::uniform_real_distribution<float>(0.1f, 10.0f)(g));
  std::uniform_int_distribution<int> at(0, n - 1);
  std::vector<float> l(n);
  for (float& x : l) x = kind == 1 ? std::round(nd(g)) : nd(g);
  if (kind == 2) l[at(g)] = -INFINITY, l[at(g)] = NAN;
  if (kind == 3) l[0] = NAN;
  if (kind == 4) std::fill(l.begin(), l.end(), 0.0f), l[at(g)] = -0.0f;
  return l;
}

const int kSizes[] = {1, 2, 7, 8, 15, 16, 17, 31, 33, 100, 1000, 49152, 49157};

TEST(SamplerKernels, ArgmaxMaxAndSelectAreTheScalarLoopsExactly) {
  std::mt19937 g(7);
  const SamplerKernels& ref = sampler_kernels_for(Isa::scalar);
  for (int n : kSizes)
    for (int kind = 0; kind < 5; ++kind) {
      const std::vector<float> l = logits(g, n, kind);
      const float mx = ref.max_value(l.data(), n);
      const float lo = mx - std::uniform_real_distribution<float>(0.0f, 5.0f)(g);
      std::vector<int32_t> want(n), got(n);
      const int nwant = ref.select_range(l.data(), n, lo, mx, want.data());
      for (Isa isa : tiers()) {
        const SamplerKernels& k = sampler_kernels_for(isa);
        SCOPED_TRACE(std::string(isa_name(isa)) + " n " + std::to_string(n) + " kind " + std::to_string(kind));
        EXPECT_EQ(k.argmax(l.data(), n), ref.argmax(l.data(), n));
        const float m = k.max_value(l.data(), n);
        EXPECT_EQ(std::memcmp(&m, &mx, sizeof m) == 0 || (m == 0.0f && mx == 0.0f), true) << m << " vs " << mx;
        const int ngot = k.select_range(l.data(), n, lo, mx, got.data());
        ASSERT_EQ(ngot, nwant);
        for (int i = 0; i < ngot; ++i) ASSERT_EQ(got[i], want[i]);
        EXPECT_EQ(k.select_range(l.data(), n, -INFINITY, INFINITY, got.data()), n - (kind == 2 || kind == 3 ? 1 : 0));
      }
    }
}

// Distance of w from the exact value e in units of the float spacing at e (subnormals included).
double ulps(float w, long double e) {
  const float ef = (float)e;
  const float up = std::nextafter(ef, INFINITY);
  return (double)(std::fabs((long double)w - e) / ((long double)up - (long double)ef));
}

// 1 where the tier's weight w differs from _ref's r (then w must be the nearer to e), else 0.
int differs_nearer(float w, float r, long double e) {
  if (std::memcmp(&w, &r, sizeof w) == 0) return 0;
  EXPECT_LE(std::fabs((long double)w - e), std::fabs((long double)r - e)) << "w " << w << " std::exp " << r;
  return 1;
}

// Every tier's weights are exp of the float argument (l - mx) / T to within 0.51 float ulp (the
// correctly rounded value; glibc's expf is at most 0.502 ulp away), so each probability is within
// 1e-6 relative of the long double one wherever the weight is a normal float. The SIMD tiers agree
// with _ref (std::exp) bit for bit except for about 1 weight in 2000, where glibc's expf rounds the
// other way: there the tier's weight is the nearer to exp.
TEST(SamplerKernels, WeightsAreExpRoundedToFloatAndSumToTheirTotal) {
  std::mt19937 g(11);
  const SamplerKernels& ref = sampler_kernels_for(Isa::scalar);
  for (int n : kSizes)
    for (float T : {0.05f, 0.6f, 1.0f, 4.0f}) {
      const std::vector<float> l = logits(g, n, n % 2 ? 0 : 2);
      const float mx = ref.max_value(l.data(), n);
      std::vector<float> want(n), got(n);
      const double sum_ref = ref.exp_weights(l.data(), n, mx, T, want.data());
      for (Isa isa : tiers()) {
        SCOPED_TRACE(std::string(isa_name(isa)) + " n " + std::to_string(n) + " T " + std::to_string(T));
        const double sum = sampler_kernels_for(isa).exp_weights(l.data(), n, mx, T, got.data());
        long double exact_sum = 0, got_sum = 0;
        int differ = 0;
        for (int i = 0; i < n; ++i) {
          const float x = (l[i] - mx) / T;
          if (std::isnan(x)) {  // NaN logits weigh 0
            ASSERT_EQ(got[i], 0.0f);
            continue;
          }
          const long double e = std::exp((long double)x);
          ASSERT_LE(ulps(got[i], e), 0.51) << "x " << x << " w " << got[i];
          exact_sum += e;
          got_sum += got[i];
          differ += differs_nearer(got[i], want[i], e);
        }
        EXPECT_LE(differ, 1 + n / 1000) << "weights differing from std::exp by an ulp";
        EXPECT_NEAR(sum, (double)got_sum, 1e-12 * sum);
        for (int i = 0; i < n; ++i)
          if (got[i] >= FLT_MIN)
            ASSERT_NEAR(got[i] / sum, (double)(std::exp((long double)((l[i] - mx) / T)) / exact_sum), 1e-6 * got[i] / sum);
      }
    }
}

// The whole argument range the weights meet, [-104, 0] (below it the weight rounds to 0), at 2^21
// evenly spread points, subnormal results included.
TEST(SamplerKernels, WeightsOverTheWholeArgumentRange) {
  const int n = 1 << 21;
  std::vector<float> l(n), want(n), got(n);
  for (int i = 0; i < n; ++i) l[i] = -104.0f * (float)i / (float)(n - 1);
  sampler_kernels_for(Isa::scalar).exp_weights(l.data(), n, 0.0f, 1.0f, want.data());
  for (Isa isa : tiers()) {
    SCOPED_TRACE(isa_name(isa));
    sampler_kernels_for(isa).exp_weights(l.data(), n, 0.0f, 1.0f, got.data());
    int differ = 0;
    for (int i = 0; i < n; ++i) {
      ASSERT_LE(ulps(got[i], std::exp((long double)l[i])), 0.51) << "x " << l[i];
      differ += differs_nearer(got[i], want[i], std::exp((long double)l[i]));
    }
    EXPECT_LE(differ, n / 1000) << "weights differing from std::exp by an ulp";
    EXPECT_EQ(got[0], 1.0f);  // the largest logit weighs exactly 1 (min-p relies on it)
  }
}

}  // namespace
}  // namespace mpkv
