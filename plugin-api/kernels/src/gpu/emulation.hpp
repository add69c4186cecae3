// Just enough of CUDA to run kernels.cu on the CPU, for its tests on machines without a GPU
// (tests_emulated.rs): every thread of a launch is a host thread, the 32 lanes of a warp meet
// at each shuffle through a barrier, and the index variables are per thread. Slow, and only
// what kernels.cu uses: it checks what the kernels compute, not how fast.
#pragma once

#include <barrier>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#define __device__
#define __global__

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

// The lanes of one warp: each shuffle writes every lane's value, waits for all 32, reads its
// partner's, and waits again before the slots are reused.
struct Warp {
    std::barrier<> meet{32};
    double slots[32];
};

inline thread_local Warp* current_warp = nullptr;

template <typename T> T __shfl_xor_sync(unsigned, T value, int offset) {
    unsigned lane = (threadIdx.y * blockDim.x + threadIdx.x) % 32;
    current_warp->slots[lane] = static_cast<double>(value);  // float and double both fit exactly
    current_warp->meet.arrive_and_wait();
    T other = static_cast<T>(current_warp->slots[lane ^ offset]);
    current_warp->meet.arrive_and_wait();
    return other;
}

inline float __int_as_float(int bits) {
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

inline double __longlong_as_double(long long bits) {
    double v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

// Runs `kernel` on a grid of `grid` blocks of `block` threads (x only for the grid), one warp of
// host threads at a time. Block sizes are multiples of 32, as gpu/cuda.rs launches them.
inline void launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
    gridDim = grid;
    blockDim = block;
    unsigned per_block = block.x * block.y;
    for (unsigned b = 0; b < grid.x; b++) {
        for (unsigned first = 0; first < per_block; first += 32) {
            Warp warp;
            std::vector<std::thread> lanes;
            for (unsigned t = first; t < first + 32; t++) {
                lanes.emplace_back([&, t] {
                    blockIdx = dim3{b, 0, 0};
                    threadIdx = dim3{t % block.x, t / block.x, 0};
                    current_warp = &warp;
                    kernel();
                });
            }
            for (auto& lane : lanes) lane.join();
        }
    }
}
