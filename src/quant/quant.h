// Block-format quantization on the CPU: reference quantize (f32 -> blocks), dequantize
// (blocks -> f32) and the dot product of one stored row with an f32 vector.
//
// Formats: Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4, plus F32/F16/BF16 pass-through. Quantization
// follows llama.cpp's reference quantizers (quantize_row_*_ref: no importance matrix) step for
// step in single precision, without fused multiply-adds (the project builds with
// -ffp-contract=off), so the bytes are identical to theirs for the same input when llama.cpp is
// built without FMA contraction of that code (see docs/gguf.md). Dequantization is bit-identical
// to ggml's dequantize_row_*. The dot product accumulates in double and rounds once; it equals
// dequantize-then-dot to float rounding.
//
// `n` is the number of elements of the row and must be a multiple of the type's block size;
// quantized buffers hold ggml_row_bytes(type, n) bytes.
#pragma once

#include <cstdint>

#include "quant/ggml_type.h"

namespace kestrel::quant {

// Whether kestrel can quantize, dequantize and dot rows of this type.
bool has_kernels(GgmlType type);

void quantize_row(GgmlType type, const float* x, int64_t n, void* out);   // x: [n]
void dequantize_row(GgmlType type, const void* in, int64_t n, float* y);  // y: [n]
float dot_row(GgmlType type, const void* w, const float* x, int64_t n);   // x: [n]

// Per-format entry points (the dispatchers above call these).
void quantize_row_q8_0(const float* x, int64_t n, void* out);
void dequantize_row_q8_0(const void* in, int64_t n, float* y);
float dot_row_q8_0(const void* w, const float* x, int64_t n);

void quantize_row_q5_0(const float* x, int64_t n, void* out);
void dequantize_row_q5_0(const void* in, int64_t n, float* y);
float dot_row_q5_0(const void* w, const float* x, int64_t n);

void quantize_row_q5_1(const float* x, int64_t n, void* out);
void dequantize_row_q5_1(const void* in, int64_t n, float* y);
float dot_row_q5_1(const void* w, const float* x, int64_t n);

void quantize_row_q4_k(const float* x, int64_t n, void* out);
void dequantize_row_q4_k(const void* in, int64_t n, float* y);
float dot_row_q4_k(const void* w, const float* x, int64_t n);

void quantize_row_q5_k(const float* x, int64_t n, void* out);
void dequantize_row_q5_k(const void* in, int64_t n, float* y);
float dot_row_q5_k(const void* w, const float* x, int64_t n);

void quantize_row_q6_k(const float* x, int64_t n, void* out);
void dequantize_row_q6_k(const void* in, int64_t n, float* y);
float dot_row_q6_k(const void* w, const float* x, int64_t n);

void quantize_row_mxfp4(const float* x, int64_t n, void* out);
void dequantize_row_mxfp4(const void* in, int64_t n, float* y);
float dot_row_mxfp4(const void* w, const float* x, int64_t n);

}  // namespace kestrel::quant
