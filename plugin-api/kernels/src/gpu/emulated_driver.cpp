// Runs one kernel of kernels.cu under emulation.hpp for tests_emulated.rs, with the launch shapes
// of gpu/cuda.rs (one warp per row, eight rows per block; one thread per column, 128 per
// block). Arguments: KERNEL TYPE (f32 or f64) then the kernel's sizes and settings:
//   norm_forward / norm_backward  ROWS N EPS ACT CENTRE HAS_GAIN (a gain is read either way)
//   softmax_rows / softmax_rows_backward  ROWS N
//   softmax_columns / softmax_columns_backward  MATS M N
// Inputs are read from stdin as little-endian f64 (in the kernel's argument order), the output
// is written to stdout the same way.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "emulation.hpp"
// The kernels themselves, compiled as host C++ under the emulation.
#include "kernels.cu"

template <typename T> std::vector<T> read_values(size_t count) {
    std::vector<double> raw(count);
    if (count && std::fread(raw.data(), sizeof(double), count, stdin) != count) {
        std::fprintf(stderr, "short input: wanted %zu values\n", count);
        std::exit(2);
    }
    return std::vector<T>(raw.begin(), raw.end());
}

template <typename T> void write_values(const std::vector<T>& values) {
    std::vector<double> raw(values.begin(), values.end());
    std::fwrite(raw.data(), sizeof(double), raw.size(), stdout);
}

static dim3 per_row(long long rows) { return dim3{unsigned((rows + 7) / 8), 1, 1}; }
static dim3 per_column(long long columns) { return dim3{unsigned((columns + 127) / 128), 1, 1}; }

#define KERNELS(T, SUFFIX)                                                                                     \
    struct Kernels_##SUFFIX {                                                                                  \
        static void run(const std::string& name, char** a) {                                                   \
            if (name == "norm_forward" || name == "norm_backward") {                                           \
                long long rows = std::atoll(a[0]);                                                             \
                int n = std::atoi(a[1]), act = std::atoi(a[3]), centre = std::atoi(a[4]), gain = std::atoi(a[5]); \
                T eps = T(std::atof(a[2]));                                                                    \
                auto x = read_values<T>(rows * n), g = read_values<T>(n);                                      \
                if (name == "norm_forward") {                                                                  \
                    std::vector<T> y(rows * n);                                                                \
                    launch(per_row(rows), dim3{32, 8, 1},                                                      \
                           [&] { norm_forward_##SUFFIX(x.data(), g.data(), y.data(), rows, n, eps, act, centre, gain); }); \
                    write_values(y);                                                                           \
                } else {                                                                                       \
                    auto dy = read_values<T>(rows * n);                                                        \
                    std::vector<T> out((1 + gain) * rows * n);                                                 \
                    launch(per_row(rows), dim3{32, 8, 1}, [&] {                                                \
                        norm_backward_##SUFFIX(x.data(), g.data(), dy.data(), out.data(), rows, n, eps, act, centre, gain); \
                    });                                                                                        \
                    write_values(out);                                                                         \
                }                                                                                              \
            } else if (name == "softmax_rows" || name == "softmax_rows_backward") {                            \
                long long rows = std::atoll(a[0]);                                                             \
                int n = std::atoi(a[1]);                                                                       \
                auto first = read_values<T>(rows * n);                                                         \
                std::vector<T> out(rows * n);                                                                  \
                if (name == "softmax_rows") {                                                                  \
                    launch(per_row(rows), dim3{32, 8, 1}, [&] { softmax_rows_##SUFFIX(first.data(), out.data(), rows, n); }); \
                } else {                                                                                       \
                    auto dy = read_values<T>(rows * n);                                                        \
                    launch(per_row(rows), dim3{32, 8, 1},                                                      \
                           [&] { softmax_rows_backward_##SUFFIX(first.data(), dy.data(), out.data(), rows, n); }); \
                }                                                                                              \
                write_values(out);                                                                             \
            } else if (name == "softmax_columns" || name == "softmax_columns_backward") {                      \
                long long mats = std::atoll(a[0]);                                                             \
                int m = std::atoi(a[1]), n = std::atoi(a[2]);                                                  \
                auto first = read_values<T>(mats * m * n);                                                     \
                std::vector<T> out(mats * m * n);                                                              \
                if (name == "softmax_columns") {                                                               \
                    launch(per_column(mats * n), dim3{128, 1, 1},                                              \
                           [&] { softmax_columns_##SUFFIX(first.data(), out.data(), mats, m, n); });           \
                } else {                                                                                       \
                    auto dy = read_values<T>(mats * m * n);                                                    \
                    launch(per_column(mats * n), dim3{128, 1, 1}, [&] {                                        \
                        softmax_columns_backward_##SUFFIX(first.data(), dy.data(), out.data(), mats, m, n);    \
                    });                                                                                        \
                }                                                                                              \
                write_values(out);                                                                             \
            } else {                                                                                           \
                std::fprintf(stderr, "unknown kernel %s\n", name.c_str());                                     \
                std::exit(2);                                                                                  \
            }                                                                                                  \
        }                                                                                                      \
    };

KERNELS(float, f32)
KERNELS(double, f64)

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: KERNEL TYPE SIZES...\n");
        return 2;
    }
    std::string name = argv[1], type = argv[2];
    if (type == "f32")
        Kernels_f32::run(name, argv + 3);
    else
        Kernels_f64::run(name, argv + 3);
    return 0;
}
